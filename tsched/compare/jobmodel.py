"""Placement-aware iteration time of a training job: compute plus communication.

An iteration of data-parallel training is ``compute`` (forward and backward on the local batch)
and a gradient all-reduce. Its time is

    t = (compute^γ + comm^γ)^(1/γ),        compute = α + β · local_bsz

where γ ≥ 1 says how much of the all-reduce hides behind the backward pass (γ = 1: none; large
γ: t → max(compute, comm)). ``comm`` prices the collective on the GPUs the job actually got:

* **one node** — a ring over the node's links, limited by its slowest hop:
  ``o + 2(N−1)·latency + 2(N−1)/N · S · seconds_per_gb(bottleneck)``;
* **several nodes** — the ring crosses the network, whose link class is the one joining the
  most distant nodes used. Every GPU on a node sends through that node's NIC, so the busiest node
  (``m`` GPUs) shares it: ``f · (κ·o + latency + S · seconds_per_gb(net))`` with
  ``f = 2(N−1)/N · m^θ · (two_node_factor if K == 2 else 1)``.

``S`` is the gradient size in GB, ``o`` the application's fixed cost of an all-reduce on one node
(bucket launches, small tensors; measurable on one node), ``N`` the GPUs and ``K`` the nodes
used. θ (NIC sharing), the two-node factor, κ (how much dearer the fixed cost is across the
network) and γ are properties of the network and the communication library, not of one
application: :class:`CollectiveModel` holds them, and
:mod:`tsched.compare.calibrate` fits them on measured step times. With θ > 0 spreading a job
over more nodes can be faster than packing it on fewer, fuller nodes — as measured on the Pollux
testbed (``44`` → ``2222`` 0.61–0.85× the step time).

All-to-all and point-to-point are priced with the same figures (:func:`alltoall_seconds`,
:func:`p2p_seconds`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from tsched.cluster import Cluster
from tsched.errors import InputError

__all__ = [
    "AppModel",
    "CollectiveModel",
    "allreduce_seconds",
    "alltoall_seconds",
    "p2p_seconds",
    "iteration_seconds",
    "placement_gpus",
    "packed_gpus",
    "placement_shape",
]


@dataclass(frozen=True, slots=True)
class CollectiveModel:
    """Network-wide figures of the communication model (see the module docstring).

    Parameters
    ----------
    nic_sharing : float
        θ ≥ 0: the all-reduce over the network slows by ``m^θ`` when the busiest node runs ``m``
        of the job's GPUs (θ = 1: the NIC is split evenly; 0: not shared).
    two_node_factor : float
        Extra factor (> 0) for a ring across exactly two nodes.
    overhead_factor : float
        κ ≥ 0: an all-reduce across nodes pays κ times the application's single-node fixed cost.
    overlap : float
        γ ≥ 1: how compute and communication combine (1 = serial).
    """

    nic_sharing: float = 0.0
    two_node_factor: float = 1.0
    overhead_factor: float = 1.0
    overlap: float = 1.0

    def __post_init__(self) -> None:
        checks = (
            ("nic_sharing", self.nic_sharing >= 0),
            ("two_node_factor", self.two_node_factor > 0),
            ("overhead_factor", self.overhead_factor >= 0),
            ("overlap", self.overlap >= 1),
        )
        for name, ok in checks:
            if not ok or not math.isfinite(getattr(self, name)):
                raise InputError(
                    f"collective model: {name} out of range, got {getattr(self, name)!r}"
                )

    def to_dict(self) -> dict[str, float]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "collective model") -> CollectiveModel:
        known = {"nic_sharing", "two_node_factor", "overhead_factor", "overlap"}
        if not isinstance(data, dict):
            raise InputError(f"{where}: expected a mapping of {', '.join(sorted(known))}")
        unknown = set(data) - known
        if unknown:
            raise InputError(f"{where}: unknown key(s) {sorted(unknown)}; valid: {sorted(known)}")
        try:
            return cls(**{k: float(v) for k, v in data.items()})
        except (TypeError, ValueError) as exc:
            raise InputError(f"{where}: {exc}") from None


@dataclass(frozen=True, slots=True)
class AppModel:
    """One application's compute and gradient figures.

    Parameters
    ----------
    name : str
        Application (workload class) name.
    compute_s : float
        α: seconds of compute per step independent of the batch.
    compute_s_per_sample : float
        β: seconds of compute per sample of the local (per-GPU) batch.
    gradient_gb : float
        S: GB all-reduced per step (4 bytes × parameters for fp32 gradients).
    local_bsz : int
        Typical per-GPU batch, used when a trace gives none.
    sync_overhead_s : float
        o: fixed seconds of one all-reduce on one node, beyond moving the bytes.
    network_factor : float
        φ: what the application's all-reduce across nodes takes relative to the collective
        model's price (1 unless fitted on a few of its own multi-node measurements:
        ``tsched compare calibrate --shots K``).
    """

    name: str
    compute_s: float
    compute_s_per_sample: float
    gradient_gb: float
    local_bsz: int = 1
    sync_overhead_s: float = 0.0
    network_factor: float = 1.0

    def __post_init__(self) -> None:
        if not str(self.name).strip():
            raise InputError("application: name must be a non-empty string")
        for key in ("compute_s", "compute_s_per_sample", "gradient_gb", "sync_overhead_s",
                    "network_factor"):  # fmt: skip
            value = getattr(self, key)
            if not (math.isfinite(value) and value >= 0):
                raise InputError(
                    f"application {self.name!r}: {key} must be a finite number >= 0, got {value!r}"
                )
        if self.local_bsz < 1:
            raise InputError(
                f"application {self.name!r}: local_bsz must be >= 1, got {self.local_bsz!r}"
            )

    def compute_seconds(self, local_bsz: float | np.ndarray) -> float | np.ndarray:
        return self.compute_s + self.compute_s_per_sample * np.asarray(local_bsz, dtype=float)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "application") -> AppModel:
        if not isinstance(data, dict):
            raise InputError(f"{where}: expected a mapping (name, compute_s, …)")
        try:
            return cls(
                str(data["name"]),
                float(data["compute_s"]),
                float(data["compute_s_per_sample"]),
                float(data["gradient_gb"]),
                int(data.get("local_bsz", 1)),
                float(data.get("sync_overhead_s", 0.0)),
                float(data.get("network_factor", 1.0)),
            )
        except KeyError as exc:
            raise InputError(f"{where}: missing key {exc.args[0]!r}") from None
        except (TypeError, ValueError, OverflowError) as exc:  # InputError is a ValueError
            raise InputError(f"{where}: {exc}") from None


def placement_shape(cluster: Cluster, gpus: np.ndarray) -> tuple[int, int, int]:
    """``(N, K, m)``: GPUs, nodes, and GPUs on the busiest node."""
    gpus = np.asarray(gpus, dtype=np.int64)
    if len(gpus) == 0:
        return 0, 0, 0
    counts = np.bincount(cluster.gpu_node[gpus])
    counts = counts[counts > 0]
    return int(len(gpus)), int(len(counts)), int(counts.max())


def _ring_order(cluster: Cluster, gpus: np.ndarray) -> np.ndarray:
    """GPUs in ring order: by node (in hierarchy order), then by local index."""
    gpus = np.asarray(gpus, dtype=np.int64)
    return gpus[np.lexsort((cluster.gpu_local[gpus], cluster.gpu_node[gpus]))]


def _hops(cluster: Cluster, gpus: np.ndarray) -> tuple[float, float]:
    """Slowest hop of the ring: (seconds per GB, latency in seconds)."""
    ring = _ring_order(cluster, gpus)
    nxt = np.roll(ring, -1)
    idx = cluster.pair_link_index(ring, nxt).astype(np.int64)
    idx = idx[idx >= 0]
    if len(idx) == 0:
        return 0.0, 0.0
    spg = cluster.link_seconds_per_gb[idx]
    worst = int(idx[int(np.argmax(spg))])
    link = cluster.links[cluster.link_names[worst]]
    return float(cluster.link_seconds_per_gb[worst]), link.latency * 1e-6


def _network_link(cluster: Cluster, gpus: np.ndarray) -> tuple[float, float]:
    """The link class joining the most distant nodes used: (seconds per GB, latency s)."""
    nodes = np.unique(cluster.gpu_node[np.asarray(gpus, dtype=np.int64)])
    table = cluster.node_link_index()[np.ix_(nodes, nodes)]
    idx = table[table >= 0].astype(np.int64)
    spg = cluster.link_seconds_per_gb[idx]
    worst = int(idx[int(np.argmax(spg))])
    link = cluster.links[cluster.link_names[worst]]
    return float(cluster.link_seconds_per_gb[worst]), link.latency * 1e-6


def allreduce_seconds(
    cluster: Cluster,
    gpus: np.ndarray,
    gb: float,
    model: CollectiveModel | None = None,
    overhead_s: float = 0.0,
) -> float:
    """Seconds of one all-reduce of ``gb`` GB over ``gpus`` (global GPU indices), for an
    application whose single-node fixed cost is ``overhead_s``.

    Examples
    --------
    >>> from tsched import presets
    >>> c = presets.cluster("dgx-h100-4node")
    >>> one_node = allreduce_seconds(c, [0, 1, 2, 3], 1.0)
    >>> two_nodes = allreduce_seconds(c, [0, 1, 8, 9], 1.0)
    >>> one_node < two_nodes
    True
    """
    model = model or CollectiveModel()
    gpus = np.asarray(gpus, dtype=np.int64)
    n, k, m = placement_shape(cluster, gpus)
    if n <= 1 or (gb <= 0 and overhead_s <= 0):
        return 0.0
    ring = 2.0 * (n - 1) / n
    if k == 1:
        spg, lat = _hops(cluster, gpus)
        return overhead_s + 2 * (n - 1) * lat + ring * gb * spg
    spg, lat = _network_link(cluster, gpus)
    factor = ring * m**model.nic_sharing * (model.two_node_factor if k == 2 else 1.0)
    return factor * (model.overhead_factor * overhead_s + lat + gb * spg)


def alltoall_seconds(
    cluster: Cluster, gpus: np.ndarray, gb: float, model: CollectiveModel | None = None
) -> float:
    """Seconds of an all-to-all where every GPU holds ``gb`` GB split evenly over all GPUs.

    Each node sends ``(N − g_n)/N`` of its GPUs' data off-node through its NIC (shared as in
    :func:`allreduce_seconds`); within a node the slowest hop carries ``(N−1)/N · gb``.
    """
    model = model or CollectiveModel()
    gpus = np.asarray(gpus, dtype=np.int64)
    n, k, _m = placement_shape(cluster, gpus)
    if n <= 1 or gb <= 0:
        return 0.0
    if k == 1:
        spg, lat = _hops(cluster, gpus)
        return lat + (n - 1) / n * gb * spg
    counts = np.bincount(cluster.gpu_node[gpus])
    counts = counts[counts > 0].astype(float)
    spg, lat = _network_link(cluster, gpus)
    off_node = np.max((n - counts) / n * counts**model.nic_sharing) * gb
    return lat + off_node * spg


def p2p_seconds(cluster: Cluster, gpu_a: int, gpu_b: int, gb: float) -> float:
    """Seconds to send ``gb`` GB from one GPU to another over the link joining them."""
    if gpu_a == gpu_b or gb <= 0:
        return 0.0
    idx = int(cluster.pair_link_index(np.array([gpu_a]), np.array([gpu_b]))[0])
    link = cluster.links[cluster.link_names[idx]]
    return link.latency * 1e-6 + gb * float(cluster.link_seconds_per_gb[idx])


def iteration_seconds(
    app: AppModel,
    cluster: Cluster,
    gpus: np.ndarray,
    local_bsz: float | None = None,
    model: CollectiveModel | None = None,
) -> float:
    """Seconds per training step of ``app`` on ``gpus``: compute and all-reduce combined."""
    model = model or CollectiveModel()
    compute = float(app.compute_seconds(app.local_bsz if local_bsz is None else local_bsz))
    comm = allreduce_seconds(cluster, gpus, app.gradient_gb, model, app.sync_overhead_s)
    if app.network_factor != 1.0 and len(np.unique(cluster.gpu_node[gpus])) > 1:
        comm *= app.network_factor
    if comm <= 0:
        return compute
    g = model.overlap
    return float((compute**g + comm**g) ** (1.0 / g))


def placement_gpus(cluster: Cluster, placement: str) -> np.ndarray:
    """Global GPU indices of a Pollux placement string (``"22"``: 2 GPUs on each of 2 nodes),
    taking the first GPUs of the first nodes of ``cluster``."""
    if not placement or not placement.isdigit() or "0" in placement:
        raise InputError(f"placement {placement!r}: expected digits 1-9, one per node (e.g. '22')")
    counts = [int(c) for c in placement]
    if len(counts) > cluster.n_nodes:
        raise InputError(
            f"placement {placement!r} spans {len(counts)} nodes; cluster {cluster.name!r} has "
            f"{cluster.n_nodes}"
        )
    out = []
    for node, count in enumerate(counts):
        if count > int(cluster.gpus_per_node[node]):
            raise InputError(
                f"placement {placement!r}: {count} GPUs on node {node}, which has "
                f"{int(cluster.gpus_per_node[node])}"
            )
        out.extend(int(cluster.node_offset[node]) + np.arange(count))
    return np.asarray(out, dtype=np.int64)


def packed_gpus(cluster: Cluster, n: int) -> np.ndarray:
    """The most compact placement of ``n`` GPUs on an empty ``cluster``: whole nodes in order
    (nodes sorted by size, largest first, within the first domain that holds them)."""
    if n > cluster.n_gpus:
        raise InputError(f"{n} GPUs asked of cluster {cluster.name!r} with {cluster.n_gpus}")
    order = np.argsort(-cluster.gpus_per_node, kind="stable")
    out: list[int] = []
    for node in order:
        take = min(int(cluster.gpus_per_node[node]), n - len(out))
        out.extend(int(cluster.node_offset[node]) + np.arange(take))
        if len(out) == n:
            break
    return np.asarray(out, dtype=np.int64)
