"""Ray executor: reserve exactly the planned nodes and GPUs, run one task per worker, clean up.

Convention a Ray cluster follows so that plans can pin GPUs (``tsched ray start-flags`` prints
every node's ``ray start`` line; :func:`ray_start_argv` builds one):

- each node carries the label ``tsched.io/node=<node name>`` (its name in the cluster model);
- each GPU ``i`` of node ``n`` is a custom resource ``tsched_gpu_<n>_<i>`` of amount 1 (node names
  are reduced to ``[A-Za-z0-9_]``).

Ray has no API to choose GPU indices, so tsched never asks it for ``num_gpus``: a worker's bundle
holds its GPU's custom resource, the bundle is pinned to the node by ``bundle_label_selector``,
and the task gets ``CUDA_VISIBLE_DEVICES`` (the planned physical index) through ``runtime_env``.
Mixing ``num_gpus`` with a hand-set ``CUDA_VISIBLE_DEVICES`` would let Ray hand the same GPU to
two tasks.

:func:`run` validates the plan against the live cluster (nodes present and alive, GPU resources
defined and free), reserves one placement group atomically (a timeout removes it and names the
bundles that could not be placed), starts one task per worker with ``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT``, and collects the
results in rank order. On any failure — a worker raises, a timeout, Ctrl-C — the remaining tasks
are cancelled and the placement group is removed: nothing stays reserved.

The replay of a matched job sequence through this executor lives with the live comparison
(:func:`tsched.compare.ray_replay.replay`): backends import nothing above them.
"""

from __future__ import annotations

import importlib
import os
import re
import shlex
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tsched.errors import ExecutorError, InputError
from tsched.plan import Plan

__all__ = [
    "NODE_LABEL",
    "gpu_resource",
    "ray_bundles",
    "RAY_HEAD_PORT",
    "ray_start_argv",
    "ray_start_flags",
    "ray_start_lines",
    "live_nodes",
    "live_problems",
    "run",
    "WorkerResult",
    "report",
]

NODE_LABEL = "tsched.io/node"


def gpu_resource(node: str, gpu: int) -> str:
    """The custom resource that stands for GPU ``gpu`` of node ``node``."""
    return f"tsched_gpu_{re.sub(r'[^A-Za-z0-9_]', '_', node)}_{int(gpu)}"


@dataclass(frozen=True)
class WorkerSpec:
    """What one worker's task needs: its bundle, node, GPU and environment."""

    rank: int
    node: str
    gpu: int
    bundle: dict[str, float]
    env: dict[str, str]


def ray_bundles(
    plan: Plan, cpus_per_worker: float = 0.01, master_port: int = 29500
) -> tuple[list[dict[str, float]], list[dict[str, str]], list[WorkerSpec]]:
    """Pure translation: (bundles, bundle label selectors, per-worker specs) of a plan.

    One bundle per worker: its GPU's custom resource and a sliver of CPU; the selector pins it to
    the planned node. ``MASTER_ADDR`` is filled in at run time (rank 0's node address).
    """
    if not plan.assignment:
        raise InputError("plan has no assignment to run")
    per_node: dict[str, list[int]] = {}
    for e in plan.assignment:
        per_node.setdefault(e.node, []).append(e.worker)
    world = len(plan.assignment)
    bundles, selectors, specs = [], [], []
    for e in plan.assignment:
        resource = gpu_resource(e.node, e.gpu)
        bundle = {resource: 1.0, "CPU": float(cpus_per_worker)}
        ranks = per_node[e.node]
        env = {
            "CUDA_VISIBLE_DEVICES": str(e.gpu),
            "RANK": str(e.worker),
            "WORLD_SIZE": str(world),
            "LOCAL_RANK": str(ranks.index(e.worker)),
            "LOCAL_WORLD_SIZE": str(len(ranks)),
            "MASTER_PORT": str(master_port),
        }
        bundles.append(bundle)
        selectors.append({NODE_LABEL: e.node})
        specs.append(WorkerSpec(e.worker, e.node, e.gpu, bundle, env))
    return bundles, selectors, specs


#: The port a head started from ``ray start`` lines listens on unless told otherwise (Ray's own).
RAY_HEAD_PORT = 6379


def ray_start_argv(
    cluster: Any,
    node: str,
    head: str | None = None,
    *,
    head_port: int = RAY_HEAD_PORT,
    leave_out_busy: bool = False,
    extra: Sequence[str] = (),
) -> list[str]:
    """The ``ray start`` argv with which node ``node`` of the cluster model follows the convention.

    Parameters
    ----------
    cluster : Cluster
        The cluster model; ``node`` must be one of its node names.
    node : str
        The node whose line to build.
    head : str, optional
        ``host:port`` of a running head to join. ``None`` makes this node the head
        (``ray start --head --port=head_port``).
    head_port : int
        The head's port when ``head`` is ``None``.
    leave_out_busy : bool
        Advertise only the GPUs the model does not mark busy (the sandbox emulates occupancy
        that way); by default every GPU of the node is advertised.
    extra : sequence of str
        More ``ray start`` options, appended as given.

    Returns
    -------
    list of str
        ``["ray", "start", …]``: ``--num-gpus``, the ``tsched.io/node`` label and one label per
        network level (``tsched.io/<level>=<group>``), the GPU model and memory labels, and one
        ``tsched_gpu_<node>_<i>`` resource per advertised GPU.

    Examples
    --------
    >>> import tsched
    >>> argv = ray_start_argv(tsched.load_cluster("dgx-h100-4node"), "node002", "10.0.0.1:6379")
    >>> argv[:4]
    ['ray', 'start', '--address=10.0.0.1:6379', '--num-gpus=8']
    """
    import json

    index = cluster.node_index(node)
    if _label_value(node) != node:
        raise InputError(
            f"node {node!r}: not usable as the Ray label {NODE_LABEL} (at most 63 letters, "
            "digits, '-', '_' or '.', starting and ending with a letter or digit)"
        )
    node_type = cluster.node_type_of(index)
    busy = set(cluster.nodes[index].busy) if leave_out_busy else set()
    gpus = [i for i in range(int(cluster.gpus_per_node[index])) if i not in busy]
    resources = {gpu_resource(node, i): 1 for i in gpus}
    labels = {NODE_LABEL: node}
    for level, group in cluster.nodes[index].at.items():
        labels[f"tsched.io/{_label_value(level)}"] = _label_value(group)
    if node_type.gpu_model:
        labels["tsched.io/gpu-model"] = _label_value(node_type.gpu_model)
    if node_type.memory_gb:
        labels["tsched.io/gpu-memory-gb"] = f"{node_type.memory_gb:g}"
    where = [f"--address={head}"] if head else ["--head", f"--port={int(head_port)}"]
    return [
        "ray",
        "start",
        *where,
        f"--num-gpus={len(gpus)}",
        "--labels=" + ",".join(f"{k}={v}" for k, v in labels.items()),
        "--resources=" + json.dumps(resources, separators=(",", ":")),
        *extra,
    ]


def _label_value(text: str) -> str:
    """``text`` as a valid Ray (Kubernetes-style) label value: other characters become '-', at
    most 63, starting and ending with a letter or digit (``NVIDIA H100 80GB`` →
    ``NVIDIA-H100-80GB``)."""
    value = re.sub(r"[^A-Za-z0-9_.-]", "-", str(text))[:63]
    return re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", value)


def ray_start_flags(cluster: Any, node: str, head_address: str | None = "HEAD:6379") -> str:
    """The ``ray start`` command line a node of the cluster model runs to follow the convention
    (:func:`ray_start_argv`, quoted for a shell)."""
    return shlex.join(ray_start_argv(cluster, node, head_address))


def ray_start_lines(
    cluster: Any, nodes: Sequence[str] | None = None, head: str | None = None
) -> list[tuple[str, str]]:
    """``(node, command line)`` for each node of the cluster model (or of ``nodes``).

    Without ``head`` the model's first node is the head and the others join it at
    ``<its name>:6379`` (node names taken as host names, as Slurm and Kubernetes use them).
    """
    names = list(nodes) if nodes else [n.name for n in cluster.nodes]
    first = cluster.nodes[0].name
    join = head or f"{first}:{RAY_HEAD_PORT}"
    return [
        (name, shlex.join(ray_start_argv(cluster, name, None if (head is None and name == first)
                                         else join)))
        for name in names
    ]  # fmt: skip


# ---------------------------------------------------------------------- live validation
def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ExecutorError("the Ray executor needs ray (pip install 'tsched[ray]')") from None
    return ray


def _nodes_by_label(ray: Any) -> dict[str, dict[str, Any]]:
    out = {}
    for info in ray.nodes():
        name = (info.get("Labels") or {}).get(NODE_LABEL)
        if name and info.get("Alive"):
            out[name] = info
    return out


def live_nodes(ray: Any) -> tuple[dict[str, dict[str, Any]], dict[str, set[str]]]:
    """The Ray cluster as tsched names it now: alive nodes by their ``tsched.io/node`` label
    (Ray's node records), and the custom resources free on each (a GPU is free when its
    ``tsched_gpu_…`` resource is).

    Free resources per node come from ``ray._private.state.available_resources_per_node``, a
    private Ray API (checked with ray 2.60); a change there shows up in the executor tests."""
    from ray._private.state import available_resources_per_node

    alive = _nodes_by_label(ray)
    available = available_resources_per_node()
    free = {name: {k for k, v in available.get(info["NodeID"], {}).items() if v >= 1.0}
            for name, info in alive.items()}  # fmt: skip
    return alive, free


def live_problems(plan: Plan) -> list[str]:
    """What stops ``plan`` on the connected Ray cluster now: missing or dead nodes, GPUs the
    node does not define, GPUs whose resource is held by someone else (:func:`live_nodes`).
    Empty when it can run."""
    nodes, free = live_nodes(_ray())
    problems = []
    for e in plan.assignment:
        info = nodes.get(e.node)
        if info is None:
            problems.append(f"worker {e.worker}: node {e.node!r} is not in the Ray cluster")
            continue
        resource = gpu_resource(e.node, e.gpu)
        if resource not in (info.get("Resources") or {}):
            problems.append(
                f"worker {e.worker}: node {e.node!r} does not advertise {resource} "
                f"(start it with the line `tsched ray start-flags` prints)"
            )
        elif resource not in free[e.node]:
            problems.append(f"worker {e.worker}: GPU {e.gpu} of {e.node!r} is busy")
    return problems


# ---------------------------------------------------------------------- execution
@dataclass(frozen=True)
class WorkerResult:
    rank: int
    node: str  # where it ran (the node's tsched.io/node label)
    cuda_visible_devices: str
    value: Any  # the callable's return value, or the command's exit code
    seconds: float


def _resolve(entrypoint: str) -> Callable[..., Any]:
    module, _, name = entrypoint.partition(":")
    if not module or not name:
        raise InputError(f"entrypoint {entrypoint!r}: expected module:function")
    try:
        fn = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise InputError(f"entrypoint {entrypoint!r}: {exc}") from None
    if not callable(fn):
        raise InputError(f"entrypoint {entrypoint!r} is not callable")
    return fn


def _worker(entrypoint: str | None, command: list[str] | None) -> dict[str, Any]:
    """Runs inside the task on the planned node."""
    import ray as ray_mod

    start = time.perf_counter()
    if command is not None:
        value: Any = subprocess.run(command, check=False).returncode
        if value != 0:
            raise RuntimeError(f"command {shlex.join(command)} exited {value}")
    else:
        value = _resolve(entrypoint or "")()
    return {
        "node_id": ray_mod.get_runtime_context().get_node_id(),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
        "value": value,
        "seconds": time.perf_counter() - start,
    }


def run(
    plan: Plan,
    entrypoint: str | None = None,
    command: list[str] | None = None,
    *,
    reservation_timeout: float = 60.0,
    execution_timeout: float | None = None,
    env: Mapping[str, str] | None = None,
    address: str | None = None,
    master_port: int = 29500,
    on_started: Callable[[int], None] | None = None,
) -> list[WorkerResult]:
    """Run ``entrypoint`` (``module:function``) or ``command`` once per planned worker, on its
    planned node and GPU. Returns results in rank order; raises :class:`ExecutorError` (after
    cleaning up) when the plan cannot run or a worker fails."""
    if (entrypoint is None) == (command is None):
        raise InputError("give exactly one of an entrypoint (module:function) or a command")
    if entrypoint is not None:
        _resolve(entrypoint)  # fail early, before anything is reserved
    from tsched.discovery.ray import connect

    ray = connect(address, ExecutorError)
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    problems = live_problems(plan)
    if problems:
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        raise ExecutorError("plan refused, nothing reserved: " + "; ".join(problems[:3]) + more)
    bundles, selectors, specs = ray_bundles(plan, master_port=master_port)
    nodes = _nodes_by_label(ray)
    master = nodes[specs[0].node]["NodeManagerAddress"]
    names = {info["NodeID"]: name for name, info in nodes.items()}
    pg = placement_group(bundles, strategy="PACK", bundle_label_selector=selectors)
    refs: list[Any] = []
    try:
        if not pg.wait(reservation_timeout):
            placed = ", ".join(f"rank {s.rank} on {s.node} GPU {s.gpu}" for s in specs[:4])
            raise ExecutorError(
                f"reservation timed out after {reservation_timeout:g} s: could not place "
                f"{len(specs)} bundles ({placed}{', …' if len(specs) > 4 else ''})"
            )
        task = ray.remote(num_cpus=0, num_gpus=0, max_retries=0)(_worker)
        for i, spec in enumerate(specs):
            env_vars = {**(env or {}), **spec.env, "MASTER_ADDR": master}
            refs.append(
                task.options(
                    scheduling_strategy=PlacementGroupSchedulingStrategy(
                        pg, placement_group_bundle_index=i
                    ),
                    resources={gpu_resource(spec.node, spec.gpu): 1.0},
                    num_cpus=float(spec.bundle["CPU"]),
                    runtime_env={"env_vars": env_vars},
                ).remote(entrypoint, command)
            )
        if on_started is not None:
            on_started(len(refs))
        deadline = None if execution_timeout is None else time.monotonic() + execution_timeout
        pending = list(refs)
        planned = {nodes[s.node]["NodeID"]: s.node for s in specs}
        while pending:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            step = _WATCH if left is None else min(left, _WATCH)
            ready, pending = ray.wait(pending, num_returns=1, timeout=step)
            if not ready and deadline is not None and time.monotonic() >= deadline:
                raise ExecutorError(
                    f"execution timed out after {execution_timeout:g} s with "
                    f"{len(pending)} worker(s) still running"
                )
            if not ready:
                _check_nodes(ray, planned, specs, refs, pending)
                continue
            try:
                ray.get(ready[0])
            except Exception as exc:
                rank = specs[refs.index(ready[0])].rank
                cause = getattr(exc, "cause", None) or exc
                raise ExecutorError(
                    f"worker rank {rank} failed: {type(cause).__name__}: {cause}"
                ) from None
        results = []
        for spec, ref in zip(specs, refs):
            out = ray.get(ref)
            results.append(
                WorkerResult(
                    spec.rank,
                    names.get(out["node_id"], out["node_id"]),
                    out["cuda_visible_devices"],
                    out["value"],
                    out["seconds"],
                )
            )
        return sorted(results, key=lambda r: r.rank)
    finally:
        # cancel only what has not finished: force-cancelling a task that is completing can
        # crash the Ray driver (seen with ray 2.60)
        if refs:
            _, unfinished = ray.wait(refs, num_returns=len(refs), timeout=0)
            for ref in unfinished:
                try:
                    ray.cancel(ref, force=True)
                except Exception:  # finished meanwhile, or gone
                    pass
        remove_placement_group(pg)
        wait_released(pg, [next(iter(b)) for b in bundles])


#: Seconds between looks at the plan's nodes while its workers run: Ray marks a node dead within
#: a second or so of its raylet going, long before the lost worker's task fails (about 15 s).
_WATCH = 0.5


def _check_nodes(
    ray: Any, planned: Mapping[str, str], specs: Sequence[WorkerSpec], refs: list[Any],
    pending: list[Any],
) -> None:  # fmt: skip
    """Raise :class:`ExecutorError` naming the first running rank whose node Ray has marked
    dead (the same failure the lost worker's task would report, seconds later)."""
    dead = {
        planned[i["NodeID"]] for i in ray.nodes() if not i.get("Alive") and i["NodeID"] in planned
    }
    if not dead:
        return
    running = {ref.hex() for ref in pending}
    for spec, ref in zip(specs, refs, strict=True):
        if spec.node in dead and ref.hex() in running:
            raise ExecutorError(
                f"worker rank {spec.rank} lost: its node {spec.node} died (Ray marks it dead)"
            )


def wait_released(pg: Any, resources: list[str], timeout: float = 15.0) -> None:
    """Wait until the group is removed and its GPU resources are free again, so the next plan
    sees them (Ray returns them asynchronously). A resource of a node that died is not waited
    for: it never comes back."""
    import ray
    from ray._private.state import available_resources_per_node
    from ray.util.placement_group import placement_group_table

    deadline = time.monotonic() + timeout
    wanted = set(resources)
    while time.monotonic() < deadline:
        state = placement_group_table(pg).get("state")
        free = {k for node in available_resources_per_node().values() for k in node}
        if state == "REMOVED" and wanted & set(ray.cluster_resources()) <= free:
            return
        time.sleep(0.05)


def report() -> dict[str, str]:
    """An entry point that reports where it runs (``tsched run ray PLAN --entrypoint
    tsched.backends.ray:report`` checks a cluster's pinning end to end)."""
    import socket

    keys = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    return {"hostname": socket.gethostname(), **{k: os.environ.get(k, "") for k in keys}}
