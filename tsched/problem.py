"""The placement problem, its objective, cost breakdown and swap deltas (pure numpy).

A :class:`PlacementProblem` has ``n`` workers and ``m ≥ n`` candidate *locations* (free GPUs the
workload may use; for a raw QAP, the QAP's locations). An *assignment* is an int array of length
``n`` with distinct location indices: ``assignment[w]`` is the location of worker ``w``. The
objective is

    Σ over traffic edges (i → j, gb) of gb · D[assignment[i], assignment[j]]
        + Σ_i C[i, assignment[i]]

with D in seconds per GB, so it is the serialised communication time per iteration in seconds.
The linear term C (n × m, seconds) holds a workload's per-GPU costs (``gpu_costs``, DESIGN.md §3)
and, for raw QAPs whose flow matrix has a non-zero diagonal, QAPLIB's A[i, i] · B[p(i), p(i)].
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from tsched.cluster import Cluster
from tsched.errors import InputError
from tsched.workload import Workload, canonical_traffic

__all__ = [
    "PlacementProblem",
    "objective",
    "cost_by_link",
    "swap_delta",
    "move_delta",
    "check_assignment",
]

#: Key of the per-GPU costs in :func:`cost_by_link`.
GPU_COSTS_KEY = "gpu_costs"
#: Largest location count for which a dense (m, m) distance matrix is built on demand.
DENSE_DISTANCE_LIMIT = 20_000


def _readonly(array: np.ndarray) -> np.ndarray:
    array = np.ascontiguousarray(array)
    array.setflags(write=False)
    return array


@dataclass(frozen=True, slots=True)
class PlacementProblem:
    """A validated placement problem: traffic between workers, distances between locations.

    Build it with :meth:`build` (cluster + workload, honouring busy GPUs and the workload's
    constraints) or :meth:`from_qap` (two matrices). An instance with more workers than usable
    GPUs is still a problem: ``feasible`` is False and ``infeasible_reason`` says why, and every
    solver returns status ``infeasible`` for it.

    Examples
    --------
    >>> import numpy as np
    >>> from tsched.problem import PlacementProblem, objective
    >>> p = PlacementProblem.from_qap(np.array([[0, 2], [2, 0]]), np.array([[0, 5], [5, 0]]))
    >>> float(objective(p, np.array([1, 0])))
    20.0
    """

    name: str
    n_workers: int
    locations: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    gb: np.ndarray
    cluster: Cluster | None = field(default=None, repr=False)
    workload: Workload | None = field(default=None, repr=False)
    linear: np.ndarray | None = field(default=None, repr=False)
    infeasible_reason: str = ""
    given_distance: np.ndarray | None = field(default=None, repr=False)
    _cache: dict[Any, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    # ------------------------------------------------------------------ construction
    @classmethod
    def build(cls, cluster: Cluster, workload: Workload) -> PlacementProblem:
        """Problem for placing ``workload`` on the free GPUs of ``cluster`` that it may use.

        Locations are the cluster's GPUs that are not busy, have an allowed model
        (``workload.gpu_models``) and at least ``workload.memory_gb`` of memory, in global order.
        """
        free = cluster.free_mask()
        allowed = np.ones(cluster.n_gpus, dtype=bool)
        if workload.gpu_models is not None:
            allowed &= np.isin(cluster.gpu_models(), list(workload.gpu_models))
        if workload.memory_gb is not None:
            allowed &= cluster.gpu_memory_gb() >= workload.memory_gb
        usable = np.flatnonzero(free & allowed)
        reason = ""
        if workload.workers > len(usable):
            parts = [f"{int((~free).sum())} busy"]
            if workload.gpu_models is not None:
                wrong = free & ~np.isin(cluster.gpu_models(), list(workload.gpu_models))
                parts.append(
                    f"{int(wrong.sum())} free but not of model {'/'.join(workload.gpu_models)}"
                )
            if workload.memory_gb is not None:
                parts.append(
                    f"{int((free & (cluster.gpu_memory_gb() < workload.memory_gb)).sum())} "
                    f"free but under {workload.memory_gb:g} GB"
                )
            reason = (
                f"workload {workload.name!r} needs {workload.workers} GPUs but cluster "
                f"{cluster.name!r} has {len(usable)} usable of {cluster.n_gpus} "
                f"({', '.join(parts)})"
            )
        linear = None
        if workload.gpu_costs is not None:
            linear = _readonly(workload.gpu_costs.table(cluster, workload.workers, usable))
        return cls(
            name=f"{workload.name}@{cluster.name}",
            n_workers=workload.workers,
            locations=_readonly(usable.astype(np.int64)),
            src=workload.src,
            dst=workload.dst,
            gb=workload.gb,
            cluster=cluster,
            workload=workload,
            linear=linear,
            infeasible_reason=reason,
        )

    def restrict(
        self, workers: np.ndarray, locations: np.ndarray | None = None, name: str | None = None
    ) -> PlacementProblem:
        """The sub-problem of ``workers`` (renumbered 0 … k−1 in the given order) on a subset
        of this problem's ``locations`` (indices into :attr:`locations`; default all).

        Traffic to workers left out is dropped, so this is exact for a set of workers that
        forms whole connected components of the traffic graph.
        """
        workers = np.asarray(workers, dtype=np.int64)
        locs = np.arange(self.n_locations) if locations is None else np.asarray(locations)
        new_id = np.full(self.n_workers, -1, dtype=np.int64)
        new_id[workers] = np.arange(len(workers))
        keep = (new_id[self.src] >= 0) & (new_id[self.dst] >= 0)
        k, m = len(workers), len(locs)
        reason = "" if k <= m else f"{self.name}: {k} workers but {m} locations left"
        given = None if self.given_distance is None else self.given_distance[np.ix_(locs, locs)]
        linear = None if self.linear is None else self.linear[np.ix_(workers, locs)]
        return PlacementProblem(
            name=name or f"{self.name}[{k} workers]",
            n_workers=k,
            locations=_readonly(self.locations[locs]),
            src=_readonly(new_id[self.src[keep]]),
            dst=_readonly(new_id[self.dst[keep]]),
            gb=_readonly(self.gb[keep]),
            cluster=self.cluster,
            workload=None,
            linear=None if linear is None else _readonly(linear),
            infeasible_reason=reason,
            given_distance=None if given is None else _readonly(given),
        )

    @classmethod
    def from_qap(cls, flow: Any, distance: Any, name: str = "qap") -> PlacementProblem:
        """A raw QAP: minimise Σ_ij flow[i, j] · distance[p(i), p(j)] over permutations p.

        ``flow`` may be smaller than ``distance`` (n workers, m ≥ n locations); then p is an
        injection. Diagonal flow entries are kept as a linear term, so the objective matches
        QAPLIB's definition exactly.
        """
        a = np.asarray(flow, dtype=float)
        b = np.asarray(distance, dtype=float)
        for label, mat in (("flow", a), ("distance", b)):
            if mat.ndim != 2 or mat.shape[0] != mat.shape[1]:
                raise InputError(f"{name}: {label} matrix must be square, got shape {mat.shape}")
            if not np.all(np.isfinite(mat)):
                raise InputError(f"{name}: {label} matrix has NaN or infinite entries")
        n, m = a.shape[0], b.shape[0]
        if n < 1:
            raise InputError(f"{name}: flow matrix is empty")
        off = a.copy()
        np.fill_diagonal(off, 0.0)
        src, dst = np.nonzero(off)
        linear = None
        if np.any(np.diag(a)) and np.any(np.diag(b)):
            linear = _readonly(np.outer(np.diag(a), np.diag(b)))
        reason = "" if n <= m else f"{name}: {n} facilities but only {m} locations"
        return cls(
            name=name,
            n_workers=n,
            locations=_readonly(np.arange(m, dtype=np.int64)),
            src=_readonly(src.astype(np.int64)),
            dst=_readonly(dst.astype(np.int64)),
            gb=_readonly(off[src, dst]),
            linear=linear,
            infeasible_reason=reason,
            given_distance=_readonly(b),
        )

    @classmethod
    def from_edges(
        cls, n_workers: int, src: Any, dst: Any, weight: Any, distance: Any, name: str = "problem"
    ) -> PlacementProblem:
        """Sparse flow (edge list) with a dense distance matrix between ``m`` locations."""
        b = np.asarray(distance, dtype=float)
        s, d, w = canonical_traffic(src, dst, weight, n_workers, f"{name}: traffic")
        m = b.shape[0]
        reason = "" if n_workers <= m else f"{name}: {n_workers} workers but {m} locations"
        return cls(
            name=name,
            n_workers=n_workers,
            locations=_readonly(np.arange(m, dtype=np.int64)),
            src=_readonly(s),
            dst=_readonly(d),
            gb=_readonly(w),
            infeasible_reason=reason,
            given_distance=_readonly(b),
        )

    # ------------------------------------------------------------------ views
    @property
    def n_locations(self) -> int:
        return len(self.locations)

    @property
    def feasible(self) -> bool:
        return not self.infeasible_reason

    @property
    def n_edges(self) -> int:
        return len(self.gb)

    # ------------------------------------------------------------------ derived data
    def cached(
        self,
        key: Hashable,
        build: Callable[[], Any],
        *,
        serves: Callable[[Any], bool] | None = None,
    ) -> Any:
        """The value kept under ``key`` on this problem, built by ``build()`` on first use.

        What solvers and bounds derive from a problem (eigenvalues, densest-subgraph weights, a
        bound's progress) is kept with it, so the next stage or solver reuses it. ``serves``,
        when given, says whether a kept value still serves the caller (a table long enough, say);
        where it does not, the value is built again and replaces it.

        Examples
        --------
        >>> import numpy as np
        >>> p = PlacementProblem.from_qap(np.array([[0, 1], [1, 0]]), np.eye(2))
        >>> p.cached("answer", lambda: 42), p.cached("answer", lambda: 0)
        (42, 42)
        >>> p.cached("answer", lambda: 7, serves=lambda v: v < 10)
        7
        """
        if key in self._cache:
            value = self._cache[key]
            if serves is None or serves(value):
                return value
        value = self._cache[key] = build()
        return value

    def peek(self, key: Hashable, default: Any = None) -> Any:
        """The value kept under ``key`` (see :meth:`cached`), or ``default``; builds nothing."""
        return self._cache.get(key, default)

    def remember(self, key: Hashable, value: Any) -> None:
        """Keep ``value`` under ``key`` (see :meth:`cached`), replacing what was there."""
        self._cache[key] = value

    def flow_csr(self) -> sp.csr_array:
        """Traffic as a sparse (n, n) matrix (cached)."""
        out = self._cache.get("csr")
        if out is None:
            n = self.n_workers
            out = self._cache["csr"] = sp.csr_array((self.gb, (self.src, self.dst)), shape=(n, n))
        return out

    def flow_symmetric(self) -> sp.csr_array:
        """Traffic in both directions, f + fᵀ, as CSR with sorted indices, no diagonal and no
        stored zeros (cached): the undirected job graph partitioners and graph growing use."""
        out = self._cache.get("csr_sym")
        if out is None:
            flow = self.flow_csr()
            out = (flow + flow.T).tocsr()
            out.setdiag(0)
            out.eliminate_zeros()
            out.sort_indices()
            self._cache["csr_sym"] = out
        return out

    def flow_dense(self) -> np.ndarray:
        """Traffic as a dense (n, n) matrix (cached, read-only)."""
        out = self._cache.get("flow")
        if out is None:
            f = np.zeros((self.n_workers, self.n_workers))
            f[self.src, self.dst] = self.gb
            out = self._cache["flow"] = _readonly(f)
        return out

    def distance(self) -> np.ndarray:
        """Dense (m, m) distance between locations in seconds per GB (cached, read-only)."""
        if self.given_distance is not None:
            return self.given_distance
        out = self._cache.get("distance")
        if out is None:
            if self.n_locations > DENSE_DISTANCE_LIMIT:
                raise InputError(
                    f"{self.name}: a dense distance matrix over {self.n_locations} locations "
                    f"would need {self.n_locations**2 * 8 / 2**30:.1f} GiB; use pair_distance"
                )
            assert self.cluster is not None
            out = self._cache["distance"] = _readonly(self.cluster.distance_matrix(self.locations))
        return out

    def pair_distance(self, loc_a: np.ndarray, loc_b: np.ndarray) -> np.ndarray:
        """Distance between location pairs elementwise (no dense matrix needed for clusters)."""
        if self.given_distance is not None:
            return self.given_distance[loc_a, loc_b]
        dense = self._cache.get("distance")
        if dense is not None:
            return dense[loc_a, loc_b]
        assert self.cluster is not None
        return self.cluster.pair_seconds_per_gb(self.locations[loc_a], self.locations[loc_b])

    def components(self) -> list[np.ndarray]:
        """Connected components of the traffic graph (direction ignored), as sorted worker
        arrays: heaviest total traffic first, then larger, then by first worker; workers with
        no traffic at all are each a component of their own, last (cached)."""
        cached = self._cache.get("components")
        if cached is None:
            from scipy.sparse.csgraph import connected_components

            count, label = connected_components(self.flow_symmetric(), directed=False)
            weight = np.bincount(label[self.src], weights=self.gb, minlength=count)
            groups = [np.flatnonzero(label == c) for c in range(count)]
            cached = sorted(groups, key=lambda g: (-weight[label[g[0]]], -len(g), int(g[0])))
            self._cache["components"] = cached
        return cached

    def location_node(self) -> np.ndarray:
        """Node index per location (for a raw QAP every location is its own node)."""
        if self.cluster is None:
            return np.arange(self.n_locations)
        return self.cluster.gpu_node[self.locations]

    def location_groups(self) -> np.ndarray:
        """(m, L) group id per location and network level (no columns for a raw QAP)."""
        if self.cluster is None:
            return np.zeros((self.n_locations, 0), dtype=np.int32)
        return self.cluster.node_group[self.location_node()]

    def node_blocks(self) -> list[tuple[int, int, int, np.ndarray]]:
        """Per cluster node with usable GPUs: (node, first location, end location, distances).

        Locations are in global GPU order, so a node's usable GPUs are the contiguous slice
        ``first:end``; ``distances`` is their (g, g) seconds-per-GB matrix (read-only, and the
        same array object for nodes of one type with the same usable GPUs). Cached; empty for
        a raw QAP.
        """
        cached = self._cache.get("node_blocks")
        if cached is None:
            cached = []
            if self.cluster is not None:
                cl = self.cluster
                type_cost = cl.type_cost_table()
                nodes = self.location_node()
                bounds = np.r_[0, np.flatnonzero(np.diff(nodes)) + 1, len(nodes)]
                shared: dict[tuple[int, bytes], np.ndarray] = {}  # one block per type and GPUs
                for lo, hi in zip(bounds[:-1], bounds[1:]):
                    node = int(nodes[lo])
                    local = cl.gpu_local[self.locations[lo:hi]].astype(np.int64)
                    key = (int(cl.node_type_index[node]), local.tobytes())
                    block = shared.get(key)
                    if block is None:
                        block = shared[key] = _readonly(type_cost[key[0]][np.ix_(local, local)])
                    cached.append((node, int(lo), int(hi), block))
            self._cache["node_blocks"] = cached
        return cached

    def intra_node_costs(self) -> np.ndarray:
        """Distinct distances between two usable GPUs of one node (sorted; empty if none)."""
        values = [b[~np.eye(len(b), dtype=bool)] for _, _, _, b in self.node_blocks() if len(b) > 1]
        return np.unique(np.concatenate(values)) if values else np.zeros(0)

    def min_pair_distance(self) -> float:
        """Smallest distance between two distinct locations (a lower bound on any pair's cost)."""
        cached = self._cache.get("dmin")
        if cached is not None:
            return cached
        m = self.n_locations
        if m < 2:
            value = 0.0
        elif self.cluster is None or self._cache.get("distance") is not None:
            d = self.distance()
            value = float(np.min(d[~np.eye(m, dtype=bool)]))
        else:
            cl = self.cluster
            uniq = np.unique(self.location_node())
            values = list(self.intra_node_costs()[:1])
            if len(uniq) > 1 and cl.levels:
                # levels at which two usable nodes can first meet: a group at level k holding
                # two groups of the level below (a superset when levels do not nest, so the
                # minimum stays a lower bound), and the last level
                below = uniq
                levels = [len(cl.levels) - 1]
                for k in range(len(cl.levels)):
                    key = cl.node_group[uniq, k]
                    pairs = np.unique(np.stack([key, below]), axis=1)
                    if len(np.unique(pairs[0])) < pairs.shape[1]:
                        levels.append(k)
                    below = key
                values.append(float(cl.level_costs()[np.unique(levels)].min()))
            value = float(min(values))
        self._cache["dmin"] = value
        return value


# ---------------------------------------------------------------------- pure functions
def check_assignment(problem: PlacementProblem, assignment: Any) -> np.ndarray:
    """Validate an assignment: length n, integer location indices in range, all distinct."""
    a = np.asarray(assignment)
    if a.shape != (problem.n_workers,):
        raise InputError(
            f"assignment: expected {problem.n_workers} locations (one per worker), "
            f"got shape {a.shape}"
        )
    if not np.issubdtype(a.dtype, np.integer):
        raise InputError(f"assignment: expected integer location indices, got {a.dtype}")
    a = a.astype(np.int64)
    if a.size and (a.min() < 0 or a.max() >= problem.n_locations):
        bad = int(np.flatnonzero((a < 0) | (a >= problem.n_locations))[0])
        raise InputError(
            f"assignment[{bad}]: location {a[bad]} out of range (0..{problem.n_locations - 1})"
        )
    if len(np.unique(a)) != len(a):
        values, counts = np.unique(a, return_counts=True)
        raise InputError(
            f"assignment: location {values[counts > 1][0]} is used by more than one worker"
        )
    return a


def objective(problem: PlacementProblem, assignment: np.ndarray) -> float:
    """Σ gb · D[a[i], a[j]] over traffic edges (+ the linear term): seconds per iteration.

    O(edges) time and memory; no dense distance matrix is built for cluster problems.

    Examples
    --------
    >>> import numpy as np, tsched
    >>> problem = tsched.PlacementProblem.from_qap(np.array([[0, 3], [1, 0]]),
    ...                                            np.array([[0, 2], [2, 0]]))
    >>> tsched.objective(problem, np.array([0, 1]))
    8.0
    """
    a = np.asarray(assignment, dtype=np.int64)
    total = float(np.dot(problem.gb, problem.pair_distance(a[problem.src], a[problem.dst])))
    if problem.linear is not None:
        total += float(problem.linear[np.arange(problem.n_workers), a].sum())
    return total


def cost_by_link(problem: PlacementProblem, assignment: np.ndarray) -> dict[str, float]:
    """Objective split by the link class that carries each edge (seconds per iteration).

    For raw QAPs (no cluster) everything is reported under ``"qap"``. Classes that carry no
    traffic are omitted; a workload's per-GPU costs are reported under ``"gpu_costs"``; values
    sum to :func:`objective`.

    Examples
    --------
    >>> import tsched
    >>> problem = tsched.PlacementProblem.build(tsched.load_cluster("dgx-h100-4node"),
    ...                                         tsched.load_workload("llama3-8b-tp4-pp2-dp2"))
    >>> plan = tsched.solve(problem, method="greedy").assignment
    >>> sorted(tsched.cost_by_link(problem, plan))
    ['leaf', 'nvlink']
    """
    a = np.asarray(assignment, dtype=np.int64)
    if problem.cluster is None:
        return {"qap": objective(problem, a)}
    cl = problem.cluster
    gpus = problem.locations[a]
    links = cl.pair_link_index(gpus[problem.src], gpus[problem.dst]).astype(np.int64)
    cost = problem.gb * cl.link_seconds_per_gb[links]
    sums = np.bincount(links, weights=cost, minlength=len(cl.link_names))
    out = {cl.link_names[k]: float(sums[k]) for k in np.flatnonzero(sums)}
    if problem.linear is not None:
        out[GPU_COSTS_KEY] = float(problem.linear[np.arange(problem.n_workers), a].sum())
    return out


def _incident(problem: PlacementProblem, workers: np.ndarray) -> np.ndarray:
    """Indices of the traffic edges touching any of ``workers`` (via cached CSR/CSC)."""
    csr = problem._cache.get("edge_csr")
    if csr is None:
        n = problem.n_workers
        ids = np.arange(problem.n_edges)
        out_edges = sp.csr_array((ids + 1, (problem.src, problem.dst)), shape=(n, n))
        in_edges = sp.csr_array((ids + 1, (problem.dst, problem.src)), shape=(n, n))
        csr = problem._cache["edge_csr"] = (out_edges, in_edges)
    out_edges, in_edges = csr
    parts = []
    for w in workers:
        parts.append(out_edges.data[out_edges.indptr[w] : out_edges.indptr[w + 1]])
        parts.append(in_edges.data[in_edges.indptr[w] : in_edges.indptr[w + 1]])
    return np.unique(np.concatenate(parts)).astype(np.int64) - 1


def _local_cost(problem: PlacementProblem, edges: np.ndarray, a: np.ndarray) -> float:
    return float(
        np.dot(
            problem.gb[edges], problem.pair_distance(a[problem.src[edges]], a[problem.dst[edges]])
        )
    )


def swap_delta(problem: PlacementProblem, assignment: np.ndarray, r: int, s: int) -> float:
    """Change of the objective if workers ``r`` and ``s`` exchange locations.

    O(deg(r) + deg(s)): only the edges touching r or s are re-priced.
    """
    a = np.asarray(assignment, dtype=np.int64)
    if r == s:
        return 0.0
    edges = _incident(problem, np.array([r, s]))
    b = a.copy()
    b[r], b[s] = a[s], a[r]
    delta = _local_cost(problem, edges, b) - _local_cost(problem, edges, a)
    if problem.linear is not None:
        lin = problem.linear
        delta += lin[r, a[s]] + lin[s, a[r]] - lin[r, a[r]] - lin[s, a[s]]
    return float(delta)


def move_delta(problem: PlacementProblem, assignment: np.ndarray, r: int, location: int) -> float:
    """Change of the objective if worker ``r`` moves to the unused ``location``. O(deg(r))."""
    a = np.asarray(assignment, dtype=np.int64)
    edges = _incident(problem, np.array([r]))
    b = a.copy()
    b[r] = location
    delta = _local_cost(problem, edges, b) - _local_cost(problem, edges, a)
    if problem.linear is not None:
        delta += problem.linear[r, location] - problem.linear[r, a[r]]
    return float(delta)


def swap_deltas_dense(
    flow: np.ndarray,
    dist_pos: np.ndarray,
    r: int,
    rowdot: np.ndarray | None = None,
    coldot: np.ndarray | None = None,
    linear_pos: np.ndarray | None = None,
) -> np.ndarray:
    """Objective change for exchanging the positions of ``r`` and every ``s``, as a vector over s.

    ``flow`` is a dense (k, k) flow with a zero diagonal; ``dist_pos[i, j]`` is the distance
    between the current positions of i and j (``D[p][:, p]``); any row may be a dummy (zero flow)
    standing for a free location, so a swap with it is a move. General (asymmetric) flow and
    distance; ``rowdot[i] = Σ_k flow[i, k]·dist_pos[i, k]`` and ``coldot[i] = Σ_k flow[k, i]·
    dist_pos[k, i]`` may be passed in when maintained incrementally. ``linear_pos[i, j]`` is the
    linear cost of i at the position of j. O(k²) time (four matrix-vector products).
    """
    f, d = flow, dist_pos
    if rowdot is None:
        rowdot = np.einsum("ij,ij->i", f, d)
    if coldot is None:
        coldot = np.einsum("ij,ij->j", f, d)
    fr, fc = f[r], f[:, r]
    dr, dc = d[r], d[:, r]
    diag = np.diagonal(d)
    drr = d[r, r]
    t1 = d @ fr - fr @ dr - rowdot + f @ dr
    t1 -= -fc * (dc - drr) + fr * (diag - dr)
    t2 = d.T @ fc - fc @ dc - coldot + f.T @ dc
    t2 -= -fr * (dr - drr) + fc * (diag - dc)
    delta = t1 + t2 + (fr - fc) * (dc - dr)
    if linear_pos is not None:
        delta += linear_pos[r, :] + linear_pos[:, r] - linear_pos[r, r] - np.diagonal(linear_pos)
    delta[r] = 0.0
    return delta
