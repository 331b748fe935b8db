"""Workload model: workers and the traffic between them, built from a parallel layout or given.

Traffic is in **GB sent from worker i to worker j per iteration** (for serving workloads: per
second of service). It is stored sparse and canonical: one entry per ordered pair, self-traffic
dropped (it never crosses a link), zero entries dropped.

Traffic builders
----------------
:func:`layout_traffic` turns a Megatron-style layout (TP × CP × EP × DP × PP) and model sizes into
traffic; :func:`serving_traffic` does the same for an inference deployment with prefill and
decode pools. Their docstrings state every formula and the pairwise pattern assumed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import scipy.sparse as sp

from tsched.errors import InputError

__all__ = [
    "PARALLEL_DIMS",
    "DEFAULT_ORDER",
    "Layout",
    "ModelSpec",
    "ServingSpec",
    "PoolSpec",
    "Workload",
    "GpuCosts",
    "layout_traffic",
    "serving_traffic",
    "canonical_traffic",
]

#: Parallel dimensions a layout may use.
PARALLEL_DIMS = ("tp", "cp", "ep", "dp", "pp")
#: Megatron's default rank order, innermost (fastest-varying) dimension first.
DEFAULT_ORDER = "tp-cp-ep-dp-pp"
#: Most workers a layout or serving deployment may have (as many as the largest cluster has
#: GPUs, :data:`tsched.cluster.MAX_CLUSTER_GPUS`), so that a mistyped size is an error, not an
#: allocation of terabytes.
MAX_WORKERS = 2**21
#: Most prefill → decode pairs of a disaggregated deployment's KV-cache transfer.
MAX_KV_PAIRS = 2**24
#: Most GB one edge may carry: with bandwidths of at least :data:`tsched.cluster.MIN_BANDWIDTH`
#: every objective stays far inside float range.
MAX_TRAFFIC_GB = 1e15
#: Largest per-GPU cost in seconds (in size), for the same reason.
MAX_GPU_COST_S = 1e15
#: Largest workers × GPUs table of per-GPU costs tsched builds (8 bytes each: 256 MiB).
GPU_COSTS_MAX_ENTRIES = 2**25


def _readonly(array: np.ndarray) -> np.ndarray:
    array = np.ascontiguousarray(array)
    array.setflags(write=False)
    return array


def canonical_traffic(
    src: Any, dst: Any, gb: Any, workers: int, source: str = "traffic"
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Validate and canonicalise an edge list: sorted by (src, dst), repeats summed.

    Self-traffic and zero entries are dropped. Raises :class:`InputError` for ids out of range
    and for negative or non-finite amounts.
    """
    src = np.asarray(src, dtype=np.int64).ravel()
    dst = np.asarray(dst, dtype=np.int64).ravel()
    gb = np.asarray(gb, dtype=np.float64).ravel()
    if not (len(src) == len(dst) == len(gb)):
        raise InputError(
            f"{source}: src, dst and gb must have the same length "
            f"({len(src)}, {len(dst)}, {len(gb)})"
        )
    for name, ids in (("src", src), ("dst", dst)):
        bad = np.flatnonzero((ids < 0) | (ids >= workers))
        if len(bad):
            raise InputError(
                f"{source}[{bad[0]}].{name}: worker id {ids[bad[0]]} out of range "
                f"(workers: {workers}, valid ids 0..{workers - 1})"
            )
    bad = np.flatnonzero(~np.isfinite(gb))
    if len(bad):
        raise InputError(f"{source}[{bad[0]}].gb: must be a finite number of GB, got {gb[bad[0]]}")
    bad = np.flatnonzero((gb < 0) | (gb > MAX_TRAFFIC_GB))
    if len(bad):
        raise InputError(
            f"{source}[{bad[0]}].gb: must be 0..{MAX_TRAFFIC_GB:g} GB, got {gb[bad[0]]}"
        )
    keep = (src != dst) & (gb > 0)
    src, dst, gb = src[keep], dst[keep], gb[keep]
    key = src * workers + dst
    uniq, inverse = np.unique(key, return_inverse=True)
    total = np.bincount(inverse, weights=gb, minlength=len(uniq))
    return uniq // workers, uniq % workers, total


@dataclass(frozen=True, slots=True)
class Layout:
    """A parallel layout: sizes per dimension and the rank order (innermost first)."""

    tp: int = 1
    pp: int = 1
    dp: int = 1
    ep: int = 1
    cp: int = 1
    order: str = DEFAULT_ORDER

    @property
    def workers(self) -> int:
        return self.tp * self.pp * self.dp * self.ep * self.cp

    def size(self, dim: str) -> int:
        return int(getattr(self, dim))

    def dims(self) -> tuple[str, ...]:
        """Dimensions in rank order, innermost first."""
        return tuple(self.order.split("-"))

    def rank_grid(self) -> np.ndarray:
        """Ranks as an array with one axis per dimension, in :data:`PARALLEL_DIMS` order.

        ``grid[tp, cp, ep, dp, pp]`` is the rank of the worker with those coordinates.
        """
        dims = self.dims()
        outer_first = list(reversed(dims))
        grid = np.arange(self.workers).reshape([self.size(d) for d in outer_first])
        return np.transpose(grid, [outer_first.index(d) for d in PARALLEL_DIMS])

    def groups(self, dims: str | Sequence[str]) -> np.ndarray:
        """Process groups over ``dims`` (ranks that differ only in those dimensions).

        Returns an array (number of groups, group size); each row in ascending coordinate order,
        the first named dimension varying fastest.
        """
        dims = (dims,) if isinstance(dims, str) else tuple(dims)
        grid = self.rank_grid()
        axes = [PARALLEL_DIMS.index(d) for d in dims]
        rest = [a for a in range(len(PARALLEL_DIMS)) if a not in axes]
        moved = np.transpose(grid, rest + list(reversed(axes)))
        size = int(np.prod([grid.shape[a] for a in axes])) if axes else 1
        return moved.reshape(-1, size)

    def coordinates(self, rank: int) -> dict[str, int]:
        where = np.argwhere(self.rank_grid() == rank)[0]
        return {d: int(v) for d, v in zip(PARALLEL_DIMS, where)}


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """Model and batch sizes the traffic builders need.

    ``params_b`` and ``expert_params_b`` in billions of parameters; ``hidden`` the hidden size;
    ``layers`` transformer layers; ``seq_len`` tokens per sample; ``micro_batch`` samples per
    micro-batch; ``micro_batches`` micro-batches per iteration; ``bytes_per_element`` of
    activations and gradients (2 for bf16); ``experts`` and ``top_k`` for MoE models.
    """

    params_b: float
    hidden: int
    layers: int
    seq_len: int = 4096
    micro_batch: int = 1
    micro_batches: int = 1
    bytes_per_element: float = 2.0
    experts: int = 0
    top_k: int = 0
    expert_params_b: float = 0.0


@dataclass(frozen=True, slots=True)
class PoolSpec:
    """One serving pool: how many replicas, and tensor parallelism per replica."""

    replicas: int
    tp: int = 1


@dataclass(frozen=True, slots=True)
class ServingSpec:
    """An inference deployment: optional prefill pool, decode pool, and the request mix.

    Without a prefill pool the deployment is aggregated (decode replicas also prefill).
    ``requests_per_s`` across the deployment; ``prompt_tokens`` and ``output_tokens`` per request;
    ``kv_bytes_per_token`` (default ``2 · layers · hidden · bytes_per_element``, i.e. K and V of
    every layer without grouped-query attention).
    """

    decode: PoolSpec
    prefill: PoolSpec | None = None
    requests_per_s: float = 10.0
    prompt_tokens: int = 2048
    output_tokens: int = 256
    kv_bytes_per_token: float | None = None


@dataclass(frozen=True, slots=True)
class GpuCosts:
    """Per-worker × GPU linear costs in seconds per iteration (DESIGN.md §3, ``gpu_costs``).

    Preferences that do not interact: worker ``w`` on a GPU costs ``seconds`` whatever the other
    workers do (a NIC or memory locality, a GPU that is slower for this job). Given either as
    entries (``worker``, ``node`` name, ``gpu`` index on the node or -1 for each GPU of the node,
    ``seconds``; pairs not listed cost 0, repeated pairs add up) or as a dense ``matrix`` of
    workers × the cluster's GPUs in the cluster's GPU order. Node names and the matrix's width
    are checked against the cluster when a problem is built (:meth:`table`). ``source`` names the
    file or field in errors.
    """

    worker: np.ndarray | None = None
    node: tuple[str, ...] | None = None
    gpu: np.ndarray | None = None
    seconds: np.ndarray | None = None
    matrix: np.ndarray | None = field(default=None, repr=False)
    source: str = "gpu_costs"
    file: str = ""  # the .npy file a matrix was read from (written back by write_workload)

    def __post_init__(self) -> None:
        if (self.matrix is None) == (self.worker is None):
            raise InputError(f"{self.source}: give either entries or a matrix")
        values = self.matrix if self.matrix is not None else self.seconds
        if values is None or not np.all(np.abs(values) <= MAX_GPU_COST_S):
            raise InputError(
                f"{self.source}: costs must be finite numbers of seconds, at most "
                f"{MAX_GPU_COST_S:g} in size"
            )

    def check_workers(self, workers: int, name: str) -> None:
        """Every entry names a worker in 0 … workers−1 (or the matrix has ``workers`` rows)."""
        if self.matrix is not None:
            if self.matrix.shape[0] != workers:
                raise InputError(
                    f"{self.source}: {self.matrix.shape[0]} rows but workload {name!r} has "
                    f"{workers} workers (expected workers × cluster GPUs)"
                )
            return
        assert self.worker is not None
        bad = np.flatnonzero((self.worker < 0) | (self.worker >= workers))
        if len(bad):
            raise InputError(
                f"{self.source}[{bad[0]}].worker: {self.worker[bad[0]]} is not a worker of "
                f"{name!r} (0..{workers - 1})"
            )

    def table(self, cluster: Any, workers: int, locations: np.ndarray) -> np.ndarray:
        """Dense (workers, len(locations)) costs over the given cluster GPUs (global indices).

        Raises :class:`InputError` for a node the cluster does not have, a GPU index past the
        node's GPUs, a matrix whose width is not the cluster's GPU count, or a table larger
        than :data:`GPU_COSTS_MAX_ENTRIES`.
        """
        m = len(locations)
        if workers * m > GPU_COSTS_MAX_ENTRIES:
            raise InputError(
                f"{self.source}: per-GPU costs for {workers} workers on {m} GPUs would need a "
                f"{workers}×{m} table ({workers * m * 8 / 2**20:.0f} MiB; at most "
                f"{GPU_COSTS_MAX_ENTRIES * 8 // 2**20} MiB): restrict the cluster"
            )
        if self.matrix is not None:
            if self.matrix.shape[1] != cluster.n_gpus:
                raise InputError(
                    f"{self.source}: {self.matrix.shape[1]} columns but cluster "
                    f"{cluster.name!r} has {cluster.n_gpus} GPUs (expected workers × cluster "
                    f"GPUs, in the cluster's GPU order)"
                )
            return np.ascontiguousarray(self.matrix[:, locations], dtype=np.float64)
        assert self.node is not None and self.gpu is not None and self.worker is not None
        index = {node.name: k for k, node in enumerate(cluster.nodes)}
        node_ids = np.empty(len(self.node), dtype=np.int64)
        for k, name in enumerate(self.node):
            if name not in index:
                raise InputError(
                    f"{self.source}[{k}].node: cluster {cluster.name!r} has no node {name!r}"
                )
            node_ids[k] = index[name]
        per_node = cluster.gpus_per_node[node_ids]
        bad = np.flatnonzero(self.gpu >= per_node)
        if len(bad):
            k = int(bad[0])
            raise InputError(
                f"{self.source}[{k}].gpu: node {self.node[k]!r} has GPUs 0..{per_node[k] - 1}, "
                f"got {self.gpu[k]}"
            )
        whole = self.gpu < 0  # a whole-node entry stands for each of the node's GPUs
        reps = np.where(whole, per_node, 1)
        entry = np.repeat(np.arange(len(self.gpu)), reps)
        first = np.repeat(np.cumsum(reps) - reps, reps)
        local = np.where(whole[entry], np.arange(len(entry)) - first, self.gpu[entry])
        glob = cluster.node_offset[node_ids[entry]] + local
        column = np.full(cluster.n_gpus, -1, dtype=np.int64)
        column[locations] = np.arange(m)
        col = column[glob]
        keep = col >= 0  # costs on GPUs the workload cannot use do not matter
        out = np.zeros((workers, m))
        rows, values = self.worker[entry][keep], self.seconds[entry][keep]  # type: ignore[index]
        np.add.at(out, (rows, col[keep]), values)
        return out


@dataclass(frozen=True, slots=True)
class Workload:
    """Workers, the traffic between them, and placement constraints.

    Build one with :func:`tsched.load_workload`, :meth:`from_layout`, :meth:`from_serving` or
    :meth:`from_edges`.

    Examples
    --------
    >>> from tsched.workload import Workload
    >>> w = Workload.from_edges("pair", 2, [(0, 1, 3.0), (1, 0, 3.0), (0, 1, 1.0)])
    >>> w.traffic_matrix().tolist()
    [[0.0, 4.0], [3.0, 0.0]]
    """

    name: str
    workers: int
    src: np.ndarray
    dst: np.ndarray
    gb: np.ndarray
    gpu_models: tuple[str, ...] | None = None
    memory_gb: float | None = None
    layout: Layout | None = None
    model: ModelSpec | None = None
    serving: ServingSpec | None = None
    roles: tuple[str, ...] | None = field(default=None, repr=False)
    description: str = field(default="", compare=False, repr=False)
    gpu_costs: GpuCosts | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise InputError(f"workload {self.name!r}: workers must be >= 1, got {self.workers}")
        src, dst, gb = canonical_traffic(
            self.src, self.dst, self.gb, self.workers, f"workload {self.name!r}: traffic"
        )
        object.__setattr__(self, "src", _readonly(src))
        object.__setattr__(self, "dst", _readonly(dst))
        object.__setattr__(self, "gb", _readonly(gb))
        if self.roles is not None and len(self.roles) != self.workers:
            raise InputError(
                f"workload {self.name!r}: {len(self.roles)} roles for {self.workers} workers"
            )
        if self.gpu_costs is not None:
            self.gpu_costs.check_workers(self.workers, self.name)
        if self.memory_gb is not None and not self.memory_gb >= 0:
            raise InputError(
                f"workload {self.name!r}: constraints.memory_gb must be >= 0, got {self.memory_gb}"
            )

    # ------------------------------------------------------------------ builders
    @classmethod
    def from_edges(
        cls, name: str, workers: int, edges: Sequence[tuple[int, int, float]], **kwargs: Any
    ) -> Workload:
        """Explicit traffic from ``(src, dst, gb)`` triples; repeated pairs add up."""
        arr = np.asarray(edges, dtype=float).reshape(-1, 3) if len(edges) else np.zeros((0, 3))
        if len(arr) and np.any(arr[:, :2] != np.round(arr[:, :2])):
            raise InputError(f"workload {name!r}: traffic src/dst must be integer worker ids")
        return cls(
            name,
            int(workers),
            arr[:, 0].astype(np.int64),
            arr[:, 1].astype(np.int64),
            arr[:, 2],
            **kwargs,
        )

    @classmethod
    def from_matrix(cls, name: str, matrix: Any, **kwargs: Any) -> Workload:
        """Explicit traffic from a square matrix ``matrix[i, j]`` = GB sent i → j."""
        m = np.asarray(matrix, dtype=float)
        if m.ndim != 2 or m.shape[0] != m.shape[1]:
            raise InputError(
                f"workload {name!r}: traffic matrix must be square, got shape {m.shape}"
            )
        src, dst = np.nonzero(m)
        return cls(name, m.shape[0], src, dst, m[src, dst], **kwargs)

    @classmethod
    def from_layout(cls, name: str, layout: Layout, model: ModelSpec, **kwargs: Any) -> Workload:
        """Traffic of a training job from its parallel layout (see :func:`layout_traffic`)."""
        src, dst, gb = layout_traffic(layout, model)
        roles = tuple(
            "-".join(f"{d}{c}" for d, c in _coords(layout, r).items() if layout.size(d) > 1)
            or "rank0"
            for r in range(layout.workers)
        )
        return cls(
            name, layout.workers, src, dst, gb, layout=layout, model=model, roles=roles, **kwargs
        )

    @classmethod
    def from_serving(
        cls, name: str, serving: ServingSpec, model: ModelSpec, **kwargs: Any
    ) -> Workload:
        """Traffic of an inference deployment (see :func:`serving_traffic`)."""
        src, dst, gb, roles = serving_traffic(serving, model)
        return cls(
            name,
            len(roles),
            src,
            dst,
            gb,
            model=model,
            serving=serving,
            roles=tuple(roles),
            **kwargs,
        )

    # ------------------------------------------------------------------ views
    @property
    def n_edges(self) -> int:
        return len(self.gb)

    @property
    def total_gb(self) -> float:
        return float(self.gb.sum())

    def traffic_csr(self) -> sp.csr_array:
        """Traffic as a sparse (workers, workers) matrix."""
        return sp.csr_array((self.gb, (self.src, self.dst)), shape=(self.workers, self.workers))

    def traffic_matrix(self) -> np.ndarray:
        """Traffic as a dense (workers, workers) matrix, GB sent i → j."""
        out = np.zeros((self.workers, self.workers))
        out[self.src, self.dst] = self.gb
        return out

    def with_name(self, name: str) -> Workload:
        return replace(self, name=name)

    def describe(self) -> str:
        kind = "explicit traffic"
        if self.n_edges == 0 and self.gpu_costs is not None:
            kind = "per-GPU costs only"
        elif self.gpu_costs is not None:
            kind += " and per-GPU costs"
        if self.layout is not None:
            lay = self.layout
            kind = (
                " x ".join(f"{d.upper()}{lay.size(d)}" for d in PARALLEL_DIMS if lay.size(d) > 1)
                or "1 worker"
            )
        elif self.serving is not None:
            s = self.serving
            kind = (
                f"serving: {s.prefill.replicas}x prefill TP{s.prefill.tp} + "
                if s.prefill
                else "serving: "
            ) + f"{s.decode.replicas}x decode TP{s.decode.tp}"
        return (
            f"{self.name}: {self.workers} workers ({kind}); {self.n_edges} traffic pairs, "
            f"{self.total_gb:.4g} GB per iteration"
        )


def _coords(layout: Layout, rank: int) -> dict[str, int]:
    dims = layout.dims()
    out: dict[str, int] = {}
    rest = rank
    for d in dims:
        out[d] = rest % layout.size(d)
        rest //= layout.size(d)
    return {d: out[d] for d in PARALLEL_DIMS}


def _ring(groups: np.ndarray, bytes_per_rank: float, parts: list[tuple[Any, Any, Any]]) -> None:
    """Ring all-reduce of ``bytes_per_rank`` in each group: rank k sends 2(n−1)/n·S to k+1."""
    n = groups.shape[1]
    if n < 2 or bytes_per_rank <= 0:
        return
    amount = 2.0 * (n - 1) / n * bytes_per_rank / 1e9
    nxt = np.roll(groups, -1, axis=1)
    parts.append((groups.ravel(), nxt.ravel(), np.full(groups.size, amount)))


def layout_traffic(layout: Layout, model: ModelSpec) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-iteration traffic (GB, i → j) of a Megatron-style training job.

    Notation: b micro-batch, s sequence length, h hidden size, L layers, m micro-batches per
    iteration, β bytes per element, P parameters (P_e of them in experts); tp, cp, ep, dp, pp the
    layout. Each stage holds L/pp layers; each rank sees s/cp tokens of a sample.

    A ring all-reduce of S bytes over n ranks has each rank send 2(n−1)/n·S to its successor in
    the group's ring (ring order = ascending rank). NCCL may choose other rings or trees; the ring
    is the assumed pattern.

    - **TP**: 4 all-reduces of b·(s/cp)·h·β per layer per micro-batch (2 forward, 2 backward),
      ring over the TP group: S = 4·(L/pp)·m·b·(s/cp)·h·β.
    - **CP** (ring attention): per layer per micro-batch each rank passes K and V of its chunk,
      2·b·(s/cp)·(h/tp)·β, to its successor cp−1 times forward and twice that backward
      (K, V and their gradients): 3·(cp−1)·2·b·(s/cp)·(h/tp)·β·(L/pp)·m to the successor.
    - **PP**: between adjacent stages, b·(s/cp)·h·β per micro-batch forward (stage k → k+1) and
      the same backward (k+1 → k); with the scatter/gather optimisation each of the tp ranks sends
      1/tp of it to the rank with the same coordinates in the neighbouring stage: m·b·(s/cp)·h·β/tp.
    - **DP**: gradients all-reduced once per iteration. Dense parameters (P − P_e) shard as
      (P−P_e)·β/(tp·pp) per rank, ring over all ranks with the same tp and pp coordinates
      (dp·ep·cp of them); expert parameters shard as P_e·β/(tp·pp·ep), ring over ranks with the
      same tp, pp and ep coordinates (dp·cp of them).
    - **EP** (MoE, every layer): each rank routes its b·(s/cp)/tp tokens (sequence parallel) to
      top_k experts spread evenly over the ep ranks, so it sends top_k/ep of its tokens' h·β to
      each other EP rank; dispatch and combine, forward and backward, make 4 all-to-alls:
      4·(L/pp)·m·(b·s/(cp·tp))·top_k·h·β/ep from each EP rank to each other.

    Returns
    -------
    (src, dst, gb) arrays, not yet canonical (pairs may repeat; :class:`Workload` sums them).
    """
    _check_layout(layout, model)
    b, s, h = model.micro_batch, model.seq_len, model.hidden
    beta, m = model.bytes_per_element, model.micro_batches
    tp, pp, ep, cp = layout.tp, layout.pp, layout.ep, layout.cp
    layers_per_stage = model.layers / pp
    tokens = b * s / cp  # tokens of one micro-batch on one rank
    parts: list[tuple[Any, Any, Any]] = []

    _ring(layout.groups("tp"), 4 * layers_per_stage * m * tokens * h * beta, parts)

    if cp > 1:
        grp = layout.groups("cp")
        amount = 3 * (cp - 1) * 2 * tokens * (h / tp) * beta * layers_per_stage * m / 1e9
        parts.append((grp.ravel(), np.roll(grp, -1, axis=1).ravel(), np.full(grp.size, amount)))

    if pp > 1:
        grp = layout.groups("pp")  # rows: one pipeline, stages in order
        amount = m * tokens * h * beta / tp / 1e9
        a, c = grp[:, :-1].ravel(), grp[:, 1:].ravel()
        parts.append((a, c, np.full(a.size, amount)))
        parts.append((c, a, np.full(a.size, amount)))

    dense = (model.params_b - model.expert_params_b) * 1e9
    _ring(layout.groups(("dp", "ep", "cp")), dense * beta / (tp * pp), parts)
    if model.expert_params_b > 0:
        _ring(
            layout.groups(("dp", "cp")), model.expert_params_b * 1e9 * beta / (tp * pp * ep), parts
        )

    if ep > 1:
        grp = layout.groups("ep")
        amount = 4 * layers_per_stage * m * (tokens / tp) * model.top_k * h * beta / ep / 1e9
        a = np.repeat(grp, ep, axis=1).ravel()
        c = np.tile(grp, (1, ep)).ravel()
        keep = a != c
        parts.append((a[keep], c[keep], np.full(int(keep.sum()), amount)))

    if not parts:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, np.zeros(0)
    src = np.concatenate([p[0] for p in parts]).astype(np.int64)
    dst = np.concatenate([p[1] for p in parts]).astype(np.int64)
    gb = np.concatenate([p[2] for p in parts]).astype(float)
    return src, dst, gb


def _check_layout(layout: Layout, model: ModelSpec) -> None:
    where = "layout"
    for d in PARALLEL_DIMS:
        v = layout.size(d)
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise InputError(f"{where}.{d}: must be an integer >= 1, got {v!r}")
    if layout.workers > MAX_WORKERS:
        sizes = " × ".join(f"{d}{layout.size(d)}" for d in PARALLEL_DIMS if layout.size(d) > 1)
        raise InputError(
            f"{where}: {sizes} is {layout.workers:,} workers; at most {MAX_WORKERS:,} are supported"
        )
    dims = layout.order.split("-")
    if sorted(dims) != sorted(PARALLEL_DIMS):
        raise InputError(
            f"{where}.order: must name each of {', '.join(PARALLEL_DIMS)} once, "
            f"innermost first (e.g. {DEFAULT_ORDER!r}), got {layout.order!r}"
        )
    if model.layers % layout.pp:
        raise InputError(
            f"model.layers: {model.layers} layers do not split evenly over pp={layout.pp} stages"
        )
    if layout.ep > 1:
        if model.experts < 1 or model.top_k < 1:
            raise InputError(
                f"layout.ep: ep={layout.ep} needs an MoE model (model.experts and model.top_k >= 1)"
            )
        if model.experts % layout.ep:
            raise InputError(
                f"layout.ep: {model.experts} experts do not split evenly over ep={layout.ep}"
            )
    if model.expert_params_b > model.params_b:
        raise InputError(
            f"model.expert_params_b: {model.expert_params_b} exceeds params_b {model.params_b}"
        )


def serving_traffic(
    serving: ServingSpec, model: ModelSpec
) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
    """Per-second traffic (GB, i → j) of an inference deployment, and a role name per worker.

    Workers are numbered prefill replicas first (replica-major, TP rank minor), then decode.

    - **TP inside a replica**: 2 all-reduces of h·β per token per layer (attention and MLP
      outputs), ring over the replica's TP group. Prefill replicas process
      ``requests_per_s · prompt_tokens`` tokens per second in all, decode replicas
      ``requests_per_s · output_tokens`` (aggregated: decode replicas process both), spread evenly
      over the replicas of the pool.
    - **KV transfer** (disaggregated only): each request's prompt KV cache,
      ``prompt_tokens · kv_bytes_per_token``, goes from the prefill replica that computed it to a
      decode replica; requests spread evenly, so every prefill replica sends 1/decode_replicas of
      its KV to each decode replica. KV heads are sharded by TP rank: prefill TP rank r sends its
      1/tp_prefill share to the decode rank holding those heads, ``r · tp_decode // tp_prefill``.
    """
    h, beta, L = model.hidden, model.bytes_per_element, model.layers
    kv_per_token = serving.kv_bytes_per_token
    if kv_per_token is None:
        kv_per_token = 2.0 * L * h * beta
    pools: list[tuple[str, PoolSpec, float]] = []
    if serving.prefill is not None:
        pools.append(("prefill", serving.prefill, serving.requests_per_s * serving.prompt_tokens))
        pools.append(("decode", serving.decode, serving.requests_per_s * serving.output_tokens))
    else:
        pools.append(
            (
                "decode",
                serving.decode,
                serving.requests_per_s * (serving.prompt_tokens + serving.output_tokens),
            )
        )
    roles: list[str] = []
    parts: list[tuple[Any, Any, Any]] = []
    first: dict[str, int] = {}
    for role, pool, _tokens in pools:
        if pool.replicas < 1 or pool.tp < 1:
            raise InputError(
                f"serving.{role}: replicas and tp must be >= 1, got "
                f"replicas={pool.replicas}, tp={pool.tp}"
            )
    workers = sum(pool.replicas * pool.tp for _, pool, _ in pools)
    if workers > MAX_WORKERS:
        raise InputError(
            f"serving: {workers:,} workers (replicas × tp over the pools); at most "
            f"{MAX_WORKERS:,} are supported"
        )
    kv_pairs = (
        0
        if serving.prefill is None
        else (serving.prefill.replicas * serving.prefill.tp * serving.decode.replicas)
    )
    if kv_pairs > MAX_KV_PAIRS:
        raise InputError(
            f"serving: {kv_pairs:,} KV-cache transfer pairs (prefill replicas × tp × decode "
            f"replicas); at most {MAX_KV_PAIRS:,} are supported"
        )
    for role, pool, tokens_per_s in pools:
        first[role] = len(roles)
        groups = len(roles) + np.arange(pool.replicas * pool.tp).reshape(pool.replicas, pool.tp)
        roles.extend(f"{role}{r}-tp{t}" for r in range(pool.replicas) for t in range(pool.tp))
        per_replica_tokens = tokens_per_s / pool.replicas
        _ring(groups, 2 * L * per_replica_tokens * h * beta, parts)
    if serving.prefill is not None:
        pre, dec = serving.prefill, serving.decode
        kv_per_replica = (
            serving.requests_per_s / pre.replicas * serving.prompt_tokens * kv_per_token
        )
        amount = kv_per_replica / dec.replicas / pre.tp / 1e9
        # every prefill rank (replica p, TP rank r) to the matching rank of every decode replica d
        p, r, d = np.meshgrid(
            np.arange(pre.replicas), np.arange(pre.tp), np.arange(dec.replicas), indexing="ij"
        )
        a = first["prefill"] + p * pre.tp + r
        c = first["decode"] + d * dec.tp + (r * dec.tp) // pre.tp
        parts.append((a.ravel(), c.ravel(), np.full(a.size, amount)))
    if not parts:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, np.zeros(0), roles
    src = np.concatenate([p[0] for p in parts]).astype(np.int64)
    dst = np.concatenate([p[1] for p in parts]).astype(np.int64)
    gb = np.concatenate([p[2] for p in parts]).astype(float)
    return src, dst, gb, roles
