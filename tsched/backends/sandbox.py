"""A local multi-node Ray cluster that emulates a cluster model: the sandbox.

``tsched sandbox up`` starts one raylet per node of the model on this machine with Ray's own
``ray start``, each with exactly the ``ray start`` line :func:`tsched.backends.ray.ray_start_argv`
gives a real node (the ``tsched.io/*`` labels and one ``tsched_gpu_<node>_<i>`` resource per GPU),
with the model's busy GPUs left out and a few options that keep a raylet small (one CPU, a small
object store, no log monitor). The GPUs are simulated: Ray only counts them, and the Ray
executor, the Dynamo lifecycle and the live comparison pin work to them exactly as on a real
cluster. The Dynamo mocker engine runs on a CPU, so a whole service can be served from it.

The first node of the model is the head. Every ``ray start`` runs in a process group of its own
and under a temporary folder of the sandbox's own (``--temp-dir``), so :func:`down` stops exactly
the processes of this sandbox (and their children: Ray workers, actors' guardians and engines),
never another Ray on the machine, as ``ray stop`` would. The state (address, cluster model,
process groups) is written to :func:`tsched.discovery.ray.sandbox_dir`, where every command that
talks to Ray finds the address when none is given.

Each raylet with its agents takes about 330 MB (RSS; a 4-node sandbox, head included, 1.3 GB)
and a few seconds of CPU to start, so the sandbox refuses models with more than ``max_nodes``
nodes (8 by default); raise it on a larger machine.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tsched.backends.ray import ray_start_argv
from tsched.cluster import Cluster
from tsched.discovery.ray import sandbox_dir, sandbox_state
from tsched.errors import ExecutorError, InputError

__all__ = ["DEFAULT_MAX_NODES", "up", "status", "down", "sandbox_processes"]

log = logging.getLogger(__name__)

#: How many raylets the sandbox starts at most unless told otherwise (a 2-core machine runs a
#: handful comfortably).
DEFAULT_MAX_NODES = 8
#: Options the sandbox adds to each node's ``ray start`` line.
_SMALL = ("--num-cpus=1", "--object-store-memory=100000000", "--include-log-monitor=false",
          "--disable-usage-stats")  # fmt: skip
_STATE = "sandbox.json"
_CLUSTER = "cluster.yaml"


def _ray_command() -> list[str]:
    """``ray`` next to this interpreter (a venv used without activating it), else on PATH."""
    beside = Path(sys.executable).with_name("ray")
    if beside.exists():
        return [str(beside)]
    found = shutil.which("ray")
    if found is None:
        raise ExecutorError("the sandbox needs ray (pip install 'tsched[ray]')")
    return [found]


def _listening(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=2).close()
        return True
    except (OSError, ValueError):
        return False


def up(
    cluster: Cluster,
    *,
    max_nodes: int = DEFAULT_MAX_NODES,
    timeout: float = 120.0,
    on_node: Callable[[int, int, str], None] | None = None,
) -> dict[str, Any]:
    """Start the sandbox for ``cluster`` and return its state (``address``, ``cluster``,
    ``nodes``). Refuses a model with more than ``max_nodes`` nodes and a second sandbox; on any
    failure (Ctrl-C included) stops everything it started before raising.

    ``on_node(k, n, name)`` is called before node ``k`` of ``n`` starts (progress).
    """
    from tsched._io import atomic_write_text
    from tsched.backends.dynamo import free_port
    from tsched.formats.cluster_yaml import cluster_to_dict

    if max_nodes < 1:
        raise InputError(f"--max-nodes {max_nodes}: expected at least 1")
    if cluster.n_nodes > max_nodes:
        raise InputError(
            f"cluster {cluster.name!r} has {cluster.n_nodes:,} nodes; the sandbox starts one "
            f"raylet per node (about 330 MB each) and allows at most {max_nodes} "
            f"(raise --max-nodes on a larger machine, or use a smaller model)"
        )
    state = sandbox_state()
    if state is not None:
        if _listening(state["address"]):
            raise ExecutorError(
                f"a sandbox of {state.get('cluster')!r} is already up at {state['address']} "
                f"(tsched sandbox down first)"
            )
        down()  # a stale one (the machine rebooted, or it was killed): clear what is left
    ray_cmd = _ray_command()
    folder = sandbox_dir()
    folder.mkdir(parents=True, exist_ok=True)
    port, dashboard, client = free_port(), free_port(), free_port()
    # Ray's socket paths must stay under 107 bytes: a short folder of its own under /tmp
    temp_dir = tempfile.mkdtemp(prefix=f"tsched-sb-{port}-")
    # Ray (2.60) turns token authentication on for a head whenever ~/.ray/auth_token exists
    # (any earlier local ray.init() writes one), and then every client must be set up for it;
    # the sandbox runs without, explicitly, so its clients need nothing
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}
    env.pop("RAY_ADDRESS", None)
    nodes: list[dict[str, Any]] = []
    state = {
        "tsched": "sandbox/v1",
        "cluster": cluster.name,
        "cluster_file": str(folder / _CLUSTER),
        "temp_dir": temp_dir,
        "address": "",
        "nodes": nodes,
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    from tsched._io import dump_yaml

    atomic_write_text(folder / _CLUSTER, dump_yaml(cluster_to_dict(cluster)))
    logs = folder / "logs"
    logs.mkdir(exist_ok=True)
    try:
        head: str | None = None
        for k, node in enumerate(cluster.nodes):
            if on_node is not None:
                on_node(k, cluster.n_nodes, node.name)
            extra = [*_SMALL, f"--temp-dir={temp_dir}", f"--node-name={node.name}"]
            if head is None:
                extra += ["--include-dashboard=false", f"--dashboard-port={dashboard}",
                          f"--ray-client-server-port={client}"]  # fmt: skip
            argv = ray_start_argv(cluster, node.name, head, head_port=port,
                                  leave_out_busy=True, extra=extra)  # fmt: skip
            log_path = logs / f"{node.name}.log"
            with open(log_path, "wb") as out:
                proc = subprocess.Popen(
                    ray_cmd + argv[1:], stdout=out, stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL, env=env, start_new_session=True,
                )  # fmt: skip
                nodes.append({"name": node.name, "pgid": proc.pid,
                              "gpus": int(cluster.gpus_per_node[k]) - len(node.busy)})  # fmt: skip
                try:
                    code = proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    raise ExecutorError(
                        f"sandbox node {node.name}: `ray start` did not finish in {timeout:g} s "
                        f"(log: {log_path})"
                    ) from None
            if code != 0:
                tail = log_path.read_text(errors="replace").strip().splitlines()[-3:]
                raise ExecutorError(
                    f"sandbox node {node.name}: `ray start` exited {code}: "
                    + " / ".join(t.strip() for t in tail)
                    + f" (log: {log_path})"
                )
            if head is None:
                head = f"{_node_ip()}:{port}"
                state["address"] = head
                atomic_write_text(folder / _STATE, _json(state))
        atomic_write_text(folder / _STATE, _json(state))
    except BaseException:
        _stop(temp_dir, [n["pgid"] for n in nodes])
        _remove_state(folder, temp_dir, keep_logs=True)  # the error names a log: keep it
        raise
    return state


def _node_ip() -> str:
    """The address Ray's processes on this machine advertise (what ``ray start`` picks)."""
    from ray.util import get_node_ip_address

    return str(get_node_ip_address())


def _json(state: dict[str, Any]) -> str:
    import json

    return json.dumps(state, indent=2) + "\n"


def status() -> dict[str, Any] | None:
    """The sandbox's state with each node's liveness and free GPUs, and the placement groups
    and named actors that hold anything, read from Ray; ``None`` when no sandbox is up."""
    state = sandbox_state()
    if state is None:
        return None
    state = dict(state)
    state["up"] = _listening(state["address"])
    if not state["up"]:
        return state
    from tsched.discovery.ray import connect

    ray = connect(state["address"], ExecutorError)
    from ray._private.state import available_resources_per_node
    from ray.util import list_named_actors, placement_group_table

    from tsched.backends.ray import NODE_LABEL, gpu_resource

    state["placement_groups"] = sum(
        1 for pg in placement_group_table().values() if pg.get("state") != "REMOVED"
    )
    state["named_actors"] = len(list_named_actors(all_namespaces=True))
    free = available_resources_per_node()
    live = {(n.get("Labels") or {}).get(NODE_LABEL): n for n in ray.nodes() if n.get("Alive")}
    for node in state["nodes"]:
        info = live.get(node["name"])
        node["alive"] = info is not None
        held = free.get(info["NodeID"], {}) if info is not None else {}
        own = re.compile(re.escape(gpu_resource(node["name"], 0)[:-1]) + r"\d+")
        node["free_gpus"] = sum(
            1 for key, amount in held.items() if own.fullmatch(key) and amount >= 1.0
        )
    return state


def sandbox_processes(temp_dir: str, groups: Sequence[int] = ()) -> list[Any]:
    """Live (not zombie) processes of a sandbox: those whose command line names its Ray
    folder, Ray's processes in its ``ray start`` process groups, and all their descendants."""
    import psutil

    found: dict[int, Any] = {}
    wanted = set(groups)
    for proc in psutil.process_iter(["pid", "name", "cmdline", "status"]):
        try:
            if proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            cmdline = proc.info["cmdline"] or []
            named = bool(temp_dir) and any(temp_dir in part for part in cmdline)
            # a group member counts only if it is Ray's: a group id can be reused once its
            # members are gone, and nothing else must ever be stopped
            ray_process = (proc.info["name"] or "").startswith("ray") or any(
                "ray" in part for part in cmdline[:3]
            )
            if named or (ray_process and os.getpgid(proc.pid) in wanted):
                found[proc.pid] = proc
                for child in proc.children(recursive=True):
                    found[child.pid] = child
        except (psutil.NoSuchProcess, psutil.AccessDenied, ProcessLookupError):
            continue
    alive = []
    for proc in found.values():
        try:
            if proc.status() != psutil.STATUS_ZOMBIE and proc.pid != os.getpid():
                alive.append(proc)
        except psutil.NoSuchProcess:
            continue
    return alive


def _stop(temp_dir: str, groups: Sequence[int], grace: float = 3.0) -> int:
    """SIGTERM every process of the sandbox, SIGKILL what is left after ``grace`` seconds;
    returns how many processes there were."""
    import psutil

    procs = sandbox_processes(temp_dir, groups)
    for proc in procs:
        try:
            proc.terminate()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(procs, timeout=grace)
    for proc in alive:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=grace)
    for pgid in groups:  # anything that joined a group after the sweep
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    left = sandbox_processes(temp_dir, groups)
    if left:
        raise ExecutorError(
            f"sandbox: {len(left)} process(es) would not stop: "
            + ", ".join(f"{p.pid}" for p in left[:5])
        )
    return len(procs)


def _remove_state(folder: Path, temp_dir: str, keep_logs: bool = False) -> None:
    for name in (_STATE, _CLUSTER):
        try:
            (folder / name).unlink()
        except FileNotFoundError:
            pass
    if not keep_logs:
        shutil.rmtree(folder / "logs", ignore_errors=True)
    if temp_dir and Path(temp_dir).name.startswith("tsched-sb-"):
        shutil.rmtree(temp_dir, ignore_errors=True)


def down() -> dict[str, Any] | None:
    """Stop every process of the sandbox and remove its state; ``None`` when none was up
    (idempotent). Returns what was stopped: ``{"cluster", "address", "processes"}``."""
    state = sandbox_state()
    folder = sandbox_dir()
    if state is None:
        if (folder / _STATE).exists():  # unreadable or half-written: nothing to stop by
            _remove_state(folder, "")
        return None
    try:
        import ray

        if ray.is_initialized() and ray.get_runtime_context().gcs_address == state["address"]:
            ray.shutdown()  # this process's own connection to it
    except ImportError:
        pass
    temp_dir = str(state.get("temp_dir") or "")
    count = _stop(temp_dir, [int(n["pgid"]) for n in state.get("nodes", [])]) if temp_dir else 0
    _remove_state(folder, temp_dir)
    return {"cluster": state.get("cluster"), "address": state["address"], "processes": count}
