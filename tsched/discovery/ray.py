"""Cluster-wide inventory and link probes over a live Ray cluster (optional dependency ``ray``).

:func:`inventory` runs one probe task pinned to every alive node (a hard
``NodeAffinitySchedulingStrategy``): the sysfs collector and, where a driver is loaded, NVML.
A node that does not answer within the timeout, or whose probe fails, is *reported* in
``failed`` with the reason — never silently left out. Nodes that advertise GPUs become
cluster nodes:

- name: the node label ``tsched.io/node`` if set, else ``<hostname>-<node id prefix>``;
- GPUs, model, memory and the intra-node matrix from NVML when it answers; else the ``GPU``
  resource count and the labels ``tsched.io/gpu-model`` / ``tsched.io/gpu-memory-gb``, with a
  default NVLink class (provenance ``default``);
- network levels from node labels: Topograph's (any of its three generations, see
  :mod:`tsched.formats.topograph`), or ``tsched.io/nvl``, ``tsched.io/leaf``,
  ``tsched.io/spine``, ``tsched.io/core``; or from a supplied mapping node → {level: group}.

:func:`measure_links` measures throughput and round-trip time between node pairs, at least one
pair per network level, both directions (the slower one counts), bounded in bytes and seconds,
over TCP between the nodes' Ray addresses. TCP between hosts measures the host network path,
which is a lower bound for GPU-direct RDMA; the figures are stored as ``measured`` with their
time, and :func:`tsched.formats.nccl_tests.check_fresh` refuses them once stale.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import statistics
import struct
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tsched.cluster import Cluster, LinkClass, Node, NodeType
from tsched.errors import DiscoveryError, InputError
from tsched.formats.nccl_tests import apply_measurement, utc_now
from tsched.formats.topology import ACCELERATOR_LEVELS, DEFAULT_LEVEL_GBPS, default_node_type

__all__ = [
    "RayInventory",
    "inventory",
    "Measurement",
    "measure_links",
    "connect",
    "default_address",
    "sandbox_dir",
    "sandbox_state",
    "SANDBOX_DIR_ENV",
    "LEVEL_LABELS",
]

#: tsched's own level labels, nearest first.
LEVEL_LABELS = (("nvl-sub", "tsched.io/nvl-sub"), ("nvl", "tsched.io/nvl"),
                ("leaf", "tsched.io/leaf"), ("spine", "tsched.io/spine"),
                ("core", "tsched.io/core"))  # fmt: skip
NAME_LABEL = "tsched.io/node"


def _connect(address: str | None) -> Any:
    return connect(address, DiscoveryError)


#: Environment variable naming the folder of the local sandbox's state (``tsched sandbox``).
SANDBOX_DIR_ENV = "TSCHED_SANDBOX_DIR"


def sandbox_dir() -> Path:
    """Where ``tsched sandbox`` keeps its state: ``$TSCHED_SANDBOX_DIR``, else
    ``$XDG_STATE_HOME/tsched/sandbox`` (``~/.local/state/tsched/sandbox``)."""
    if os.environ.get(SANDBOX_DIR_ENV):
        return Path(os.environ[SANDBOX_DIR_ENV])
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(Path.home(), ".local", "state")
    return Path(state) / "tsched" / "sandbox"


def sandbox_state() -> dict[str, Any] | None:
    """The running sandbox's state (address, cluster, nodes), or ``None`` when none is up."""
    path = sandbox_dir() / "sandbox.json"
    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    keys = ("address", "cluster", "cluster_file", "temp_dir", "nodes")
    ok = isinstance(state, dict) and state.get("address") and all(k in state for k in keys)
    return state if ok else None


def default_address() -> str:
    """The Ray address commands use when none is given: ``$RAY_ADDRESS``, else the local
    sandbox's (``tsched sandbox up``), else ``auto`` (the cluster this machine belongs to)."""
    if os.environ.get("RAY_ADDRESS"):
        return os.environ["RAY_ADDRESS"]
    state = sandbox_state()
    return str(state["address"]) if state else "auto"


def connect(address: str | None, error: type[Exception] = DiscoveryError) -> Any:
    """The ``ray`` module, initialised against ``address`` (``None``: :func:`default_address`;
    ``auto``: the cluster this machine belongs to). An explicit ``host:port`` that nothing
    listens on fails within seconds, with ``error``, instead of Ray's minutes of retries."""
    try:
        import ray
    except ImportError:
        raise error("this needs ray (pip install 'tsched[ray]')") from None
    if ray.is_initialized():
        return ray
    target = address or default_address()
    from_sandbox = address is None and not os.environ.get("RAY_ADDRESS") and target != "auto"
    hint = " (the sandbox's address: is it still up? tsched sandbox status)" if from_sandbox else ""
    host, _, port = target.rpartition(":")
    if host and port.isdigit() and "://" not in target:
        try:
            socket.create_connection((host, int(port)), timeout=5).close()
        except OSError as exc:
            raise error(f"cannot connect to Ray at {target}: {exc.strerror or exc}{hint}") from None
    try:
        ray.init(address=target, logging_level="ERROR", log_to_driver=False)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise error(f"cannot connect to Ray at {target}: {exc}") from None
    return ray


def _probe(sysfs_root: str) -> dict[str, Any]:
    """Runs on the probed node."""
    from tsched.discovery import nvml, sysfs

    record: dict[str, Any] = {"hostname": socket.gethostname()}
    inv = sysfs.collect(sysfs_root)
    record["nics"] = [dataclasses.asdict(n) for n in inv.nics]
    record["pci_gpus"] = [dataclasses.asdict(g) for g in inv.gpus]
    try:
        record["nvml"] = nvml.collect()
    except DiscoveryError as exc:
        record["nvml_error"] = str(exc)
    return record


@dataclass
class RayInventory:
    """What the probes found: the cluster, each node's raw record, and the nodes that failed."""

    cluster: Cluster | None
    records: dict[str, dict[str, Any]] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)  # node → reason
    skipped: dict[str, str] = field(default_factory=dict)  # node → why it is not in the cluster
    node_ids: dict[str, str] = field(default_factory=dict)  # cluster node → Ray node id


def _name(info: Mapping[str, Any]) -> str:
    labels = info.get("Labels") or {}
    return labels.get(NAME_LABEL) or f"{info['NodeManagerHostname']}-{info['NodeID'][:8]}"


def inventory(
    address: str | None = None,
    *,
    timeout: float = 60.0,
    mapping: Mapping[str, Mapping[str, str]] | None = None,
    sysfs_root: str = "/",
    probe_cpus: float = 1.0,
    name: str = "ray-cluster",
) -> RayInventory:
    """Probe every alive node of the Ray cluster at ``address`` and assemble a cluster."""
    ray = _connect(address)
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    probe = ray.remote(max_retries=0, num_cpus=probe_cpus)(_probe)
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    refs = {}
    for info in nodes:
        strategy = NodeAffinitySchedulingStrategy(node_id=info["NodeID"], soft=False)
        refs[probe.options(scheduling_strategy=strategy).remote(sysfs_root)] = info
    ready, pending = ray.wait(list(refs), num_returns=len(refs), timeout=timeout)
    result = RayInventory(cluster=None)
    answers: dict[str, tuple[Mapping[str, Any], dict[str, Any]]] = {}
    for ref in ready:
        info = refs[ref]
        try:
            answers[_name(info)] = (info, ray.get(ref))
        except Exception as exc:  # a probe that raised: report it with the node
            result.failed[_name(info)] = f"probe failed: {type(exc).__name__}: {exc}"
    for ref in pending:  # left to finish on their own: probes are short, and force-cancelling
        # a task that is just completing can crash the Ray driver (seen with ray 2.60)
        result.failed[_name(refs[ref])] = f"no answer within {timeout:g} s"
    types: dict[tuple[Any, ...], NodeType] = {}
    links: dict[str, LinkClass] = {}
    cluster_nodes: list[Node] = []
    level_names: list[str] = []
    for node_name in sorted(answers):
        info, record = answers[node_name]
        result.records[node_name] = record
        node_type, type_links = _node_type(info, record, types)
        if node_type is None:
            result.skipped[node_name] = "no GPUs"
            continue
        links.update(type_links)
        at = dict(mapping.get(node_name, {})) if mapping is not None else _levels(info)
        for level in at:
            if level not in level_names:
                level_names.append(level)
        from tsched.discovery.nvml import gpu_uuids

        uuids = gpu_uuids(record.get("nvml") or {})
        cluster_nodes.append(Node(node_name, node_type.name, at, gpu_uuids=uuids))
        result.node_ids[node_name] = info["NodeID"]
    if not cluster_nodes:
        return result
    order = [lv for lv, _ in LEVEL_LABELS if lv in level_names]
    order += [lv for lv in level_names if lv not in order]
    if len(cluster_nodes) > 1 and not order:
        order = ["network"]  # no labels: every pair of nodes meets on one network level
    for level in order:
        gbps = DEFAULT_LEVEL_GBPS["nvl" if level in ACCELERATOR_LEVELS else "network"]
        links[level] = LinkClass(level, gbps, 0.0, "default")
    result.cluster = Cluster(
        name=name,
        links=links,
        levels=tuple(order),
        node_types={t.name: t for t in types.values()},
        nodes=tuple(cluster_nodes),
        source=f"ray inventory ({address or 'auto'})",
    )
    return result


def _levels(info: Mapping[str, Any]) -> dict[str, str]:
    labels = info.get("Labels") or {}
    at = {level: labels[key] for level, key in LEVEL_LABELS if key in labels}
    if at:
        return at
    from tsched.formats.topograph import SCHEMES, SUB_DOMAIN_LABEL, fabric_tiers
    from tsched.formats.topology import NVL_LEVEL, NVL_SUB_LEVEL, tier_names

    for scheme, (accel, tiers) in SCHEMES.items():
        if scheme == "topograph":
            tiers = fabric_tiers(labels, f"node {_name(info)}")
            if SUB_DOMAIN_LABEL in labels:
                at[NVL_SUB_LEVEL] = labels[SUB_DOMAIN_LABEL]
        if accel in labels:
            at[NVL_LEVEL] = labels[accel]
        names = tier_names(len(tiers))
        for k, key in enumerate(tiers):
            if key in labels:
                at[names[k]] = labels[key]
        if at:
            return at
    return at


def _node_type(
    info: Mapping[str, Any], record: Mapping[str, Any], types: dict[tuple[Any, ...], NodeType]
) -> tuple[NodeType | None, dict[str, LinkClass]]:
    labels = info.get("Labels") or {}
    nvml_record = record.get("nvml")
    if nvml_record and nvml_record.get("gpus"):
        from tsched.discovery.nvml import topo_from_record
        from tsched.formats.nvidia_smi import node_type_from_topo

        gpus = nvml_record["gpus"]
        model = gpus[0]["name"]
        proto, links, _ = node_type_from_topo(
            topo_from_record(nvml_record), "t", model, float(gpus[0]["memory_gb"])
        )
        key = ("nvml", model, proto.gpus, proto.memory_gb, proto.intra_matrix)
    else:
        count = int((info.get("Resources") or {}).get("GPU", 0))
        if count <= 0:
            return None, {}
        model = labels.get("tsched.io/gpu-model", "GPU")
        try:
            memory = float(labels.get("tsched.io/gpu-memory-gb", 0.0))
        except ValueError:
            raise InputError(
                f"node {_name(info)}: label tsched.io/gpu-memory-gb="
                f"{labels['tsched.io/gpu-memory-gb']!r} is not a number"
            ) from None
        base, link = default_node_type(count, model)
        proto = dataclasses.replace(base, memory_gb=memory)
        links = {link.name: link} if count > 1 else {}
        key = ("resources", model, count, memory, None)
    if key not in types:
        types[key] = dataclasses.replace(proto, name=f"type{len(types)}")
    return types[key], links


# ---------------------------------------------------------------------- link probes
@dataclass(frozen=True)
class Measurement:
    level: str
    src: str
    dst: str
    gbps: float  # the slower direction
    rtt_us: float  # median round trip, the slower direction
    bytes_sent: int
    seconds: float
    measured_at: str


class _Sink:
    """A TCP endpoint on the probed node: counts bytes, acknowledges, echoes pings."""

    def start(self) -> tuple[str, int]:
        import ray

        ip = ray.util.get_node_ip_address()
        self._server = socket.create_server((ip, 0))
        self._server.settimeout(60)
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()
        return ip, self._server.getsockname()[1]

    def _serve(self) -> None:
        conn, _ = self._server.accept()
        with conn:
            (pings,) = struct.unpack("!Q", _recv_exact(conn, 8))
            for _ in range(pings):
                conn.sendall(_recv_exact(conn, 1))
            received = 0
            while True:
                chunk = conn.recv(1 << 20)
                if not chunk:  # the sender shut its side: report what arrived
                    break
                received += len(chunk)
            conn.sendall(struct.pack("!Q", received))
        self._server.close()


def _recv_exact(conn: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise ConnectionError("peer closed")
        data += chunk
    return data


def _send(ip: str, port: int, max_bytes: int, max_seconds: float, pings: int) -> dict[str, float]:
    """Runs on the sending node: time ``pings`` one-byte round trips, then stream zeros until
    ``max_bytes`` or ``max_seconds``, whichever comes first; the rate counts the bytes the
    receiver acknowledges over the time until its acknowledgement."""
    block = b"\0" * (1 << 20)
    with socket.create_connection((ip, port), timeout=max_seconds + 30) as conn:
        conn.sendall(struct.pack("!Q", pings))
        rtts = []
        for _ in range(pings):
            t = time.perf_counter()
            conn.sendall(b"p")
            _recv_exact(conn, 1)
            rtts.append(time.perf_counter() - t)
        start = time.perf_counter()
        sent = 0
        while sent < max_bytes and time.perf_counter() - start < max_seconds:
            n = min(len(block), max_bytes - sent)
            conn.sendall(block[:n])
            sent += n
        conn.shutdown(socket.SHUT_WR)
        (received,) = struct.unpack("!Q", _recv_exact(conn, 8))
        seconds = time.perf_counter() - start
    return {
        "bytes": float(received),
        "seconds": seconds,
        "rtt_us": statistics.median(rtts) * 1e6 if rtts else 0.0,
    }


def _one_way(ray: Any, src_id: str, dst_id: str, max_bytes: int, max_seconds: float) -> dict:
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    def on(node_id: str) -> Any:
        return NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)

    sink = ray.remote(num_cpus=0)(_Sink).options(scheduling_strategy=on(dst_id)).remote()
    try:
        ip, port = ray.get(sink.start.remote(), timeout=max_seconds + 60)
        sender = ray.remote(num_cpus=0, max_retries=0)(_send)
        ref = sender.options(scheduling_strategy=on(src_id)).remote(
            ip, port, max_bytes, max_seconds, 20
        )
        return ray.get(ref, timeout=max_seconds * 4 + 60)
    finally:
        ray.kill(sink)


def measure_links(
    inv: RayInventory,
    *,
    max_bytes: int = 64 << 20,
    max_seconds: float = 5.0,
    address: str | None = None,
) -> tuple[Cluster, list[Measurement]]:
    """Measure one node pair per network level of ``inv.cluster`` (both directions; the slower
    counts) and return the cluster with those levels' bandwidths replaced, plus the raw
    measurements. Levels with no pair of nodes meeting there are left as they were."""
    if inv.cluster is None:
        raise InputError("the inventory found no GPU nodes to measure between")
    ray = _connect(address)
    cluster = inv.cluster
    meet = cluster.node_meet_level()
    results: list[Measurement] = []
    for k, level in enumerate(cluster.levels, 1):
        pair = next(
            (
                (a, b)
                for a in range(cluster.n_nodes)
                for b in range(a + 1, cluster.n_nodes)
                if meet[a, b] == k
            ),
            None,
        )
        if pair is None:
            continue
        a, b = (cluster.nodes[i].name for i in pair)
        ids = inv.node_ids
        there = _one_way(ray, ids[a], ids[b], max_bytes, max_seconds)
        back = _one_way(ray, ids[b], ids[a], max_bytes, max_seconds)
        rates = [d["bytes"] / d["seconds"] / 1e9 for d in (there, back)]
        results.append(
            Measurement(
                level,
                a,
                b,
                gbps=min(rates),
                rtt_us=max(there["rtt_us"], back["rtt_us"]),
                bytes_sent=int(there["bytes"] + back["bytes"]),
                seconds=there["seconds"] + back["seconds"],
                measured_at=utc_now(),
            )
        )
    for m in results:
        cluster = apply_measurement(cluster, m.level, m.gbps, m.measured_at)
    return cluster, results
