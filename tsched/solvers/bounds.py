"""Lower bounds on the placement objective.

Every bound here is valid for any assignment of workers to *distinct* locations, so
``bound <= objective`` always holds, and a bound that meets a solution's objective proves it
optimal. :func:`best_bound` combines the applicable ones and caches the result on the problem.

- :func:`basic_bound` — every edge at the cheapest link between two usable GPUs. O(edges).
- :func:`gilmore_lawler_bound` — Gilmore–Lawler: for facility i on location k, the minimal scalar
  product of i's flows with k's distances, then a linear assignment (scipy's
  ``linear_sum_assignment``) over (i, k). Dense: O(n·m² + LAP).
- :func:`profile_bound` — the Gilmore–Lawler row bound without the assignment step, computed from
  the cluster's hierarchy (a location's sorted distances are runs of link classes whose lengths
  are free-GPU counts), so it needs no dense matrix and scales to 16,384 GPUs.
- :func:`spectral_bound` — for nested hierarchies with uniform nodes: the objective splits into
  ``Σ traffic · d_intra + Σ_levels (d_next − d_level) · cut_level``, where ``cut_level`` is the
  traffic between workers in different domains of that level; each cut is bounded below by the
  Donath–Hoffman eigenvalue bound ``½ Σ_i size_i · λ_i(L)`` (L the Laplacian of the symmetrised
  traffic, λ ascending, domain sizes descending). Exact for TP × DP × PP layouts, whose traffic
  graphs are products of rings and paths.
- :func:`packing_bound` — the same cut decomposition with two more bounds on each cut that need
  no search: the traffic no spread of the workers over the domains can keep inside them
  (upper bounds on densest subgraphs from each worker's heaviest pairs and, for layouts, from
  their factor graphs: :func:`packing_weights`, :func:`layout_weights`), and the lines of a
  layout each domain must touch (Loomis–Whitney: :func:`projection_cuts`). Sparse, at any size;
  it proves a 4,096-worker GPT-3 plan on 16,384 GPUs optimal.
- :func:`partition_bound` — the same cut decomposition with two more bounds on each cut: the
  traffic no spread of the workers over the domains can keep inside them (densest-subgraph
  weights, :func:`densest_weights`, in a knapsack over the domains' free GPUs), and, for levels
  of a few large domains, CP-SAT's proved bounds on the least cut: over workers
  (:func:`level_cut_cpsat`) and over blocks of up to 16 workers whose split costs are
  enumerated exactly, joined by matchings (:func:`block_cut_cpsat`).
  Exact for the symmetric blocks of MoE layouts, which the eigenvalues cannot see; it searches,
  so :func:`best_bound` computes it only when asked to be thorough.
- :func:`nested_bound` — the levels coupled: one worker count per domain, nested, for all levels
  at once (a min-plus programme up the tree of domains), so the node and spine cuts cannot
  each take a spread no plan has. Also only when thorough.

Per-GPU linear costs C (a workload's ``gpu_costs``): min over plans of (quadratic + linear) is at
least min quadratic + min linear, so every bound that prices only the traffic adds
:func:`linear_floor` — the linear assignment optimum of C when the table is small enough, else
each worker's cheapest GPU. Without pairwise traffic that floor is the optimum itself
(``linear-assignment``). Gilmore–Lawler folds C into its own assignment step.
"""

from __future__ import annotations

import functools
import itertools
from typing import Any

import numpy as np
import scipy.sparse as sp

from tsched.problem import PlacementProblem

__all__ = [
    "basic_bound",
    "gilmore_lawler_bound",
    "profile_bound",
    "spectral_bound",
    "packing_bound",
    "partition_bound",
    "nested_bound",
    "packing_weights",
    "densest_weights",
    "level_cut_cpsat",
    "block_cut_cpsat",
    "block_split_costs",
    "best_bound",
    "min_scalar_products",
    "linear_floor",
    "product_eigenvalues",
    "layout_factors",
    "layout_weights",
    "needs_assignment_solver",
]

#: Largest n·m for which the dense Gilmore–Lawler bound is computed by default.
GL_DENSE_LIMIT = 4_000_000
#: Largest worker count for which the spectral bound computes eigenvalues by default.
SPECTRAL_LIMIT = 4096
#: Largest worker count for the densest-subgraph partition bound (dense n × n traffic).
DENSEST_MAX_WORKERS = 512
#: Largest part searched exactly for the densest-subgraph weights (a DGX node: 8 GPUs).
DENSEST_MAX_PART = 8
#: Bounds that search (seconds), computed only when :func:`best_bound` is asked to be thorough.
THOROUGH_STAGES = ("partition", "nested")
#: Levels with at most this many domains get their cut bounded by CP-SAT as well.
CUT_CPSAT_MAX_DOMAINS = 8
#: ... for jobs of at most this many workers,
CUT_CPSAT_MAX_WORKERS = 256
#: ... within this deterministic time (CP-SAT's unit; 2-5 s of wall time here).
CUT_CPSAT_LIMIT = 2.0
#: Largest block of :func:`block_cut_cpsat` (its split costs enumerate all 2^16 subsets).
CUT_BLOCK = 16
#: Largest block model (count and layer variables, each once per domain) :func:`block_cut_cpsat`
#: hands to CP-SAT; larger ones (dense traffic between many blocks) prove little in its budget.
BLOCK_MODEL_MAX = 1024
#: ... whose costs are integers up to this (rounded down: a bound at most 10⁻⁸ of the heaviest
#: term per term below the exact one).
BLOCK_SCALE = 1e8
#: Search work per part size (nodes × workers; about a second with numba) before the
#: densest-subgraph search stops with an upper bound (a hundredth of it without numba). A work
#: budget, not a clock: the same bound on every machine.
DENSEST_WORK = 640_000_000


def _nonnegative(problem: PlacementProblem) -> bool:
    return not np.any(problem.gb < 0)


def basic_bound(problem: PlacementProblem) -> float | None:
    """Every traffic edge costs at least the smallest distance between two distinct locations.

    ``Σ_e gb_e · d_min + Σ_i min_k C[i, k]`` (C the linear term of raw QAPs). For a square raw QAP
    the bound is also taken with the two matrices' roles swapped, and the larger one kept. Valid
    when all traffic is non-negative; returns None otherwise. O(edges) once ``d_min`` is known,
    and ``d_min`` is read from the cluster's link classes without a dense matrix.

    It is tight when the whole job fits in one uniform domain (one NVSwitch node, say): a plan
    that keeps every pair on the cheapest link is then reported ``optimal``.
    """
    if problem.n_locations < problem.n_workers or problem.n_workers == 0:
        return None
    if not _nonnegative(problem):
        return None
    pairs = float(problem.gb.sum()) * problem.min_pair_distance() if problem.n_edges else 0.0
    d = problem.given_distance
    if d is not None and problem.n_workers == problem.n_locations and problem.n_workers > 1:
        # A square QAP is symmetric in its two matrices (Σ F[i,j] D[p(i),p(j)] =
        # Σ D[k,l] F[q(k),q(l)] with q = p⁻¹), so the same argument holds with the roles swapped.
        off = ~np.eye(problem.n_workers, dtype=bool)
        if np.all(d[off] >= 0):
            pairs = max(pairs, float(d[off].sum()) * float(problem.flow_dense()[off].min()))
    return pairs + linear_floor(problem)


def linear_floor(problem: PlacementProblem) -> float:
    """Least total of the per-GPU linear costs over all plans (0 without them; cached).

    The linear assignment optimum (scipy's ``linear_sum_assignment``, rectangular n × m) when
    n·m ≤ :data:`GL_DENSE_LIMIT`; above that, Σ_i min_k C[i, k], which is weaker but O(n·m).
    """
    if problem.linear is None:
        return 0.0
    cached = problem._cache.get("linear_floor")
    if cached is None:
        lin = problem.linear
        if lin.shape[0] <= lin.shape[1] and lin.size <= GL_DENSE_LIMIT:
            from scipy.optimize import linear_sum_assignment  # slow to import: only when used

            rows, cols = linear_sum_assignment(lin)
            cached = float(lin[rows, cols].sum())
        else:
            cached = float(lin.min(axis=1).sum())
        problem._cache["linear_floor"] = cached
    return cached


def min_scalar_products(rows_a: np.ndarray, rows_b: np.ndarray) -> np.ndarray:
    """``out[i, k]`` = min over injections of Σ_t a_i(t) · b_k(π(t)) for non-negative a.

    ``rows_a`` (n, r) and ``rows_b`` (m, s) with r ≤ s: sort a descending, b ascending, keep the
    r smallest b values, and take the dot product (rearrangement inequality). O((n + m)·s log s +
    n·m·r).
    """
    a = -np.sort(-rows_a, axis=1)
    b = np.sort(rows_b, axis=1)[:, : rows_a.shape[1]]
    return a @ b.T


def _off_diagonal_rows(matrix: np.ndarray) -> np.ndarray:
    n = matrix.shape[0]
    mask = ~np.eye(n, dtype=bool)
    return matrix[mask].reshape(n, n - 1)


def gilmore_lawler_bound(problem: PlacementProblem) -> float | None:
    """Gilmore–Lawler bound (rows and columns; for square QAPs also with roles swapped).

    ``L[i, k] = min scalar product(F[i, ≠i], D[k, ≠k]) + C[i, k]``; the bound is the linear
    assignment optimum of L. Needs non-negative flows; uses the dense distance matrix.
    """
    n, m = problem.n_workers, problem.n_locations
    if n > m or n == 0 or not _nonnegative(problem):
        return None
    if n == 1:
        return linear_floor(problem)
    from scipy.optimize import linear_sum_assignment  # slow to import: only when used

    f = problem.flow_dense()
    d = problem.distance()
    best = -np.inf
    pairs = [(f, d, False), (f.T, d.T, False)]
    if n == m and problem.given_distance is not None and np.all(d >= 0):
        pairs += [(d, f, True), (d.T, f.T, True)]  # roles swapped: valid for square QAPs
    for a, b, swapped in pairs:
        lap = min_scalar_products(_off_diagonal_rows(a), _off_diagonal_rows(b))
        if problem.linear is not None:
            lap = lap + (problem.linear.T if swapped else problem.linear)
        rows, cols = linear_sum_assignment(lap)
        best = max(best, float(lap[rows, cols].sum()))
    return best


def _location_profiles(problem: PlacementProblem, depth: int) -> tuple[np.ndarray, np.ndarray]:
    """Distinct ascending distance profiles (first ``depth`` entries) of the usable locations.

    Returns (profiles (P, depth), count of locations per profile). A location's distances to the
    other usable locations are: its node's intra row over the other free GPUs of its node, then
    each level's cost repeated (free GPUs in its domain at that level − in the one below), then
    the last level for everyone else.
    """
    cl = problem.cluster
    assert cl is not None
    locs = problem.locations
    nodes = cl.gpu_node[locs]
    node_free = np.bincount(nodes, minlength=cl.n_nodes)
    level_free = [
        np.bincount(cl.node_group[:, k], weights=node_free)[cl.node_group[:, k]]
        for k in range(len(cl.levels))
    ]
    keys: dict[tuple[Any, ...], list[int]] = {}
    rows_of: dict[int, list[tuple[float, ...]]] = {}  # sorted intra rows per shared block
    for node, lo, hi, block in problem.node_blocks():
        counts = tuple(int(level_free[k][node]) for k in range(len(cl.levels)))
        rows = rows_of.get(id(block))
        if rows is None:
            rows = rows_of[id(block)] = [
                tuple(np.sort(np.delete(block[r], r)).tolist()) for r in range(hi - lo)
            ]
        for r, intra in enumerate(rows):
            keys.setdefault((intra, counts), []).append(lo + r)
    level_cost = cl.link_seconds_per_gb[cl.level_link.astype(np.int64)] if cl.levels else []
    m = problem.n_locations
    profiles = np.empty((len(keys), depth))
    multiplicity = np.empty(len(keys), dtype=np.int64)
    for p, ((intra, counts), members) in enumerate(keys.items()):
        runs = [(v, 1) for v in intra]  # (distance, how many locations at that distance)
        below = len(intra) + 1
        for k, count in enumerate(counts):
            runs.append((level_cost[k], int(count - below)))
            below = count
        if len(level_cost):
            runs.append((level_cost[-1], m - below))
        values: list[float] = []
        for value, count in sorted(runs):
            values += [value] * min(count, depth - len(values))
            if len(values) >= depth:
                break
        profiles[p] = values
        multiplicity[p] = len(members)
    return profiles, multiplicity


def profile_bound(problem: PlacementProblem) -> float | None:
    """½ Σ_i min over location profiles of the minimal scalar product of i's traffic and distances.

    Uses the symmetrised traffic T = F + Fᵀ (cluster distances are symmetric), so
    objective = ½ Σ_i Σ_j T[i, j]·d(p_i, p_j) ≥ ½ Σ_i min_k msp(T[i], d_k). No dense matrices:
    O(E log E + n·P·deg) with P distinct location profiles.
    """
    cl = problem.cluster
    n = problem.n_workers
    if cl is None or n > problem.n_locations or n < 2 or not _nonnegative(problem):
        return None
    sym = (problem.flow_csr() + problem.flow_csr().T).tocsr()
    degree = np.diff(sym.indptr)
    depth = int(degree.max()) if len(degree) else 0
    if depth == 0:
        return linear_floor(problem)
    rows = np.zeros((n, depth))
    for i in range(n):
        vals = sym.data[sym.indptr[i] : sym.indptr[i + 1]]
        rows[i, : len(vals)] = np.sort(vals)[::-1]
    profiles, _ = _location_profiles(problem, depth)
    per_worker = (rows @ profiles.T).min(axis=1)
    return 0.5 * float(per_worker.sum()) + linear_floor(problem)


def _nested(cl: Any) -> bool:
    """True when each level's group is determined by the group one level below.

    The last level is left out: pairs that reach it pay its cost whatever their groups there.
    """
    groups = cl.node_group[:, :-1]
    for k in range(1, groups.shape[1]):
        pairs = np.unique(groups[:, k - 1 : k + 1], axis=0)
        if len(np.unique(pairs[:, 0])) != len(pairs):
            return False
    return True


def _cut_levels(problem: PlacementProblem) -> tuple[np.ndarray, list[np.ndarray]] | None:
    """The hierarchical cut decomposition shared by :func:`spectral_bound` and
    :func:`partition_bound`: ``(e, sizes_by_level)`` with ``e`` the running-minimum level costs
    (``objective ≥ e_0·W + Σ_ℓ (e_{ℓ+1} − e_ℓ)·cut_ℓ``) and, per level, the free GPUs of each
    domain. None where the decomposition does not apply."""
    cl = problem.cluster
    n = problem.n_workers
    if cl is None or n > problem.n_locations or n < 2 or not _nonnegative(problem):
        return None
    if not _nested(cl):
        return None
    nodes = cl.gpu_node[problem.locations]
    node_free = np.bincount(nodes, minlength=cl.n_nodes)
    intra = problem.intra_node_costs()  # cheapest intra-node distance among usable pairs
    d0 = float(intra[0]) if len(intra) else np.inf
    level_cost = [float(c) for c in cl.link_seconds_per_gb[cl.level_link.astype(np.int64)]]
    if not level_cost:
        return None  # a single node: basic_bound is exact for uniform nodes
    seq = np.array([d0 if np.isfinite(d0) else level_cost[0], *level_cost])
    e = np.minimum.accumulate(seq[::-1])[::-1]
    sizes_by_level = [node_free[node_free > 0]]
    for k in range(len(cl.levels) - 1):
        sizes_by_level.append(np.bincount(cl.node_group[:, k], weights=node_free))
    return e, sizes_by_level


def _spectral_cuts(
    problem: PlacementProblem,
    sizes_by_level: list[np.ndarray],
    eigenvalues: np.ndarray | None = None,
) -> list[float]:
    """Donath–Hoffman lower bound on each level's cut, or [] without eigenvalues."""
    n = problem.n_workers
    if eigenvalues is None:
        eigenvalues = product_eigenvalues(problem)
    if eigenvalues is None:
        if n > SPECTRAL_LIMIT:
            return []
        count = max(_parts_needed(s, n) for s in sizes_by_level)
        eigenvalues = _laplacian_eigenvalues(problem, count)
    out = []
    for sizes in sizes_by_level:
        fill = _greedy_fill(sizes, n)
        out.append(0.5 * float(np.dot(fill, eigenvalues[: len(fill)])))
    return out


def spectral_bound(
    problem: PlacementProblem, eigenvalues: np.ndarray | None = None
) -> float | None:
    """Hierarchical cut bound with Donath–Hoffman eigenvalue bounds on each level's cut.

    Cost of a pair meeting at level ℓ (0 = same node) is at least ``e_ℓ``, the running minimum of
    ``(d_intra_min, d_level1, …, d_top)`` from the top, so
    ``objective ≥ e_0·W + Σ_ℓ (e_{ℓ+1} − e_ℓ)·cut_ℓ`` with W the total traffic. ``cut_ℓ`` counts
    pairs in different domains at level ℓ; for any partition into parts of sizes s (descending),
    ``cut ≥ ½ Σ_i s_i λ_i`` (λ ascending eigenvalues of the traffic Laplacian). Sizes are bounded
    by the free GPUs per domain, filled largest first, which minimises the bound over all
    feasible partitions. Requires a nested hierarchy; None otherwise or for more than
    :data:`SPECTRAL_LIMIT` workers (unless ``eigenvalues`` are given).
    """
    levels = _cut_levels(problem)
    if levels is None:
        return None
    e, sizes_by_level = levels
    cuts = _spectral_cuts(problem, sizes_by_level, eigenvalues)
    if not cuts:
        return None
    bound = e[0] * float(problem.gb.sum())
    for k, cut in enumerate(cuts):
        bound += max(e[k + 1] - e[k], 0.0) * cut
    return bound + linear_floor(problem)


def densest_weights(problem: PlacementProblem, kmax: int) -> np.ndarray:
    """``D[s]`` for s = 0 … ``kmax``: an upper bound on the traffic inside any ``s`` workers
    (the densest-``s``-subgraph weight of the symmetrised traffic), exact where the search
    finishes within its budget (cached; recomputed when a larger ``kmax`` is asked).

    Exact values come from a branch and bound over worker subsets in increasing order, workers
    sorted by weighted degree, from a greedy incumbent (:mod:`tsched.solvers._densest_kernel`).
    At a node with chosen set S (weight w) and r workers still to choose, no completion beats

    * ``w + top_r(gain_u + ½·top_{r−1}(row_u))``: each added worker u brings its traffic to S
      (gain_u) and at most half of its r − 1 heaviest pairs to the other added ones; nor
    * ``w + top_r(gain_u) + D[r]``: the added workers' own inside weight is at most ``D[r]``
      (known already, r < s).

    Where the search exhausts its budget (:data:`DENSEST_WORK`), ``D[s]`` is an upper bound
    instead: the largest bound among the subsets not yet searched, or
    ``min(s/(s−2)·D[s−1], D[s−1] + max_u top_{s−1}(row_u))`` if smaller (the densest s-set less
    one worker weighs at most ``D[s−1]``; over its s workers each pair is kept s − 2 times).
    Upper bounds on D keep every bound built from them valid.
    """
    from tsched.solvers import _densest_kernel as kernel

    cached = problem._cache.get("densest_weights")
    if cached is not None and len(cached) > kmax:
        return cached
    a, top = _densest_inputs(problem)
    n = a.shape[0]
    visits = max(1000, DENSEST_WORK // n // (1 if kernel.HAVE_NUMBA else 100))
    weights = [0.0, 0.0]
    for size in range(2, min(kmax, n) + 1):
        fallback = weights[-1] + float(top[:, size - 1].max())
        if size > 2:
            fallback = min(fallback, size / (size - 2) * weights[-1])
        value, _finished = kernel.search(
            a, top, size, np.array(weights), _greedy_densest(a, size), visits
        )
        weights.append(min(float(value), fallback))
    out = np.array(weights + [weights[-1]] * max(0, kmax + 1 - len(weights)))
    problem._cache["densest_weights"] = out
    return out


def heaviest_pairs(problem: PlacementProblem, kmax: int) -> np.ndarray:
    """``top[u, t]`` for t = 0 … ``kmax``: the sum of worker u's ``t`` heaviest pairs in the
    symmetrised traffic (fewer where u has fewer partners). Sparse: one sort of the stored pairs,
    O(nnz log nnz), no n × n matrix."""
    sym = problem.flow_symmetric()
    n = problem.n_workers
    rows = np.repeat(np.arange(n), np.diff(sym.indptr))
    order = np.lexsort((-sym.data, rows))  # by worker, heaviest first
    rank = np.arange(len(order)) - sym.indptr[rows[order]]
    keep = rank < kmax
    top = np.zeros((n, kmax + 1))
    np.add.at(top, (rows[order][keep], rank[keep] + 1), sym.data[order][keep])
    return np.cumsum(top, axis=1)


def packing_weights(problem: PlacementProblem, kmax: int) -> np.ndarray:
    """``D⁺[s]`` for s = 0 … ``kmax``: an upper bound on the traffic inside any ``s`` workers
    from each worker's heaviest pairs alone (cached; no search, sparse).

    In a set S of s workers each pair is counted from both ends, and a worker's s − 1 pairs
    inside S weigh at most its s − 1 heaviest pairs, so
    ``w(S) ≤ ½ Σ_{u∈S} top_{s−1}(u) ≤ ½ · (the s largest top_{s−1}(u))``. Two more bounds
    from ``D⁺[s−1]`` (as in :func:`densest_weights`): ``D⁺[s−1] + max_u top_{s−1}(u)`` and
    ``s/(s−2)·D⁺[s−1]``; for parallel layouts, the factor-graph bound
    :func:`layout_weights`. The smallest is kept, then the running maximum over s (the true
    densest weights never decrease with s, so it stays an upper bound).

    The heaviest-pairs bound is exact for groups whose own pairs are each member's heaviest (a
    TP clique on a node); the layout bound for the rings and paths of TP, DP and PP groups, and
    for any part of them (half a TP ring on a half-free node keeps a path).
    """
    cached = problem._cache.get("packing_weights")
    if cached is not None and len(cached) > kmax:
        return cached
    n = problem.n_workers
    top = heaviest_pairs(problem, max(min(kmax, n) - 1, 0))
    layout = layout_weights(problem, kmax)
    out = np.zeros(kmax + 1)
    for s in range(2, kmax + 1):
        if s > n:
            out[s] = out[s - 1]
            continue
        col = top[:, s - 1]
        best = 0.5 * float(np.partition(col, n - s)[n - s :].sum())
        if layout is not None:
            best = min(best, float(layout[s]))
        best = min(best, out[s - 1] + float(col.max()))
        if s > 2:
            best = min(best, s / (s - 2) * out[s - 1])
        out[s] = max(best, out[s - 1])
    problem._cache["packing_weights"] = out
    return out


def _densest_inputs(problem: PlacementProblem) -> tuple[np.ndarray, np.ndarray]:
    """The kernel's inputs for the symmetrised traffic (:func:`_search_inputs`)."""
    return _search_inputs(problem.flow_symmetric().toarray())


def _search_inputs(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The densest-subgraph kernel's inputs: the symmetric weights, dense, vertices sorted by
    weighted degree (heaviest first), and ``top[u, t]``, the sum of u's ``t`` heaviest pairs."""
    a = np.asarray(a, dtype=np.float64)
    order = np.argsort(-a.sum(axis=1), kind="stable")
    a = np.ascontiguousarray(a[np.ix_(order, order)])
    rows = -np.sort(-a, axis=1)
    top = np.concatenate([np.zeros((len(a), 1)), np.cumsum(rows, axis=1)], axis=1)
    return a, top


def _greedy_densest(a: np.ndarray, size: int) -> float:
    """The best of n greedy ``size``-sets (one grown from each worker by largest gain)."""
    best = 0.0
    for v in range(a.shape[0]):
        chosen = [v]
        gain = a[v].copy()
        value = 0.0
        for _ in range(size - 1):
            masked = gain.copy()
            masked[chosen] = -np.inf
            u = int(np.argmax(masked))
            value += gain[u]
            chosen.append(u)
            gain += a[u]
        best = max(best, value)
    return best


#: Largest knapsack (domains × largest capacity × workers) solved exactly by dynamic
#: programming in :func:`_kept_upper`; larger ones take its linear relaxation.
KNAPSACK_WORK = 20_000_000
#: ... and above this much, by the compiled loop (below it, loading numba costs more than it saves).
KNAPSACK_COMPILED = 200_000


def _kept_upper(weights: np.ndarray, capacities: np.ndarray, n: int) -> float:
    """Most traffic that can stay inside domains of the given free capacities when ``n`` workers
    are spread over them: ``max Σ_d D[s_d]`` with ``Σ s_d = n`` and ``s_d ≤ cap_d`` (a knapsack
    over the domains). Sizes beyond ``len(weights) − 1`` use the density bound
    ``D[s] ≤ D[k]·s(s−1)/(k(k−1))`` (a pair's share of the densest set never grows with s).

    Solved exactly by dynamic programming up to :data:`KNAPSACK_WORK`; above it, by its linear
    relaxation, which can only be larger: each domain's ``D`` is replaced by its upper concave
    envelope on ``[0, cap]`` and the n workers take the steepest envelope segments of all
    domains first (domains of one capacity share their segments). Grouped by capacity, that is
    O(distinct capacities · cap log) at any cluster size."""
    caps = np.minimum(np.asarray(capacities, dtype=np.int64), n)
    caps = caps[caps > 0]
    span = int(caps.max()) if len(caps) else 0
    d = _kept_table(weights, span)
    if len(caps) * span * n > KNAPSACK_WORK:
        return _kept_upper_relaxed(d, caps, n)
    if len(caps) * span * n > KNAPSACK_COMPILED:
        from tsched.solvers import _densest_kernel as kernel

        if kernel.HAVE_NUMBA:  # the same loop compiled: a knapsack per level and form
            return float(kernel.knapsack(np.ascontiguousarray(d, dtype=np.float64), caps, n))
    best = np.full(n + 1, -np.inf)
    best[0] = 0.0
    for cap in caps:
        nxt = best.copy()
        for s in range(1, int(cap) + 1):
            cand = best[: n + 1 - s] + d[s]
            np.maximum(nxt[s:], cand, out=nxt[s:])
        best = nxt
    return float(best[n])


def _kept_table(weights: np.ndarray, span: int) -> np.ndarray:
    """``D[s]`` for s = 0 … ``span``: the given weights (searched up to ``k = len − 1``) and the
    density bound ``D[k]·s(s−1)/(k(k−1))`` beyond them."""
    k = len(weights) - 1
    d = np.empty(span + 1)
    d[: min(k, span) + 1] = weights[: min(k, span) + 1]
    if span > k:
        big = np.arange(k + 1, span + 1, dtype=float)
        d[k + 1 :] = weights[k] * big * (big - 1) / max(k * (k - 1), 1)
    return d


def _kept_upper_relaxed(d: np.ndarray, caps: np.ndarray, n: int) -> float:
    """The linear relaxation of :func:`_kept_upper`'s knapsack (``d[s]``: the weight bound of s
    workers in one domain, ``caps`` > 0): greedy over the upper concave envelopes' segments."""
    slopes: list[np.ndarray] = []
    lengths: list[np.ndarray] = []
    values, counts = np.unique(caps, return_counts=True)
    for cap, count in zip(values.tolist(), counts.tolist(), strict=True):
        hull = [0]  # upper concave envelope of (s, d[s]), s = 0..cap (monotone chain)
        for s in range(1, cap + 1):
            while len(hull) >= 2:
                a, b = hull[-2], hull[-1]
                if (d[b] - d[a]) * (s - b) <= (d[s] - d[b]) * (b - a):
                    hull.pop()  # b lies on or below the chord a → s
                else:
                    break
            hull.append(s)
        h = np.array(hull)
        slopes.append(np.diff(d[h]) / np.diff(h))
        lengths.append(np.diff(h) * count)
    slope = np.concatenate(slopes)
    length = np.concatenate(lengths).astype(float)
    order = np.argsort(-slope, kind="stable")
    slope, length = slope[order], length[order]
    taken = np.minimum(length, np.maximum(n - (np.cumsum(length) - length), 0.0))
    return float(np.dot(slope, taken))


def level_cut_cpsat(
    problem: PlacementProblem, capacities: np.ndarray, limit: float = CUT_CPSAT_LIMIT
) -> tuple[float, np.ndarray | None, bool]:
    """``(lower bound, partition, optimal)`` for the least traffic cut when the workers are
    spread over domains of the given free capacities, from CP-SAT.

    The model: x[i, d] (worker i in domain d); a pair stays inside only if both are in one
    domain; of domains with equal capacity, worker 0 may only take the first, as any plan can
    be relabelled so. The bound is CP-SAT's proved one, valid whether or not it finished within
    the deterministic ``limit``; the partition (domain per worker, domains in the order of
    ``capacities`` sorted descending) is the best one found (None if none), ``optimal`` whether
    CP-SAT proved it. Weights are rounded down to integers on a 10⁶ scale, which keeps the
    bound below the true cut."""
    from ortools.sat.python import cp_model

    sym = problem.flow_symmetric().tocoo()
    keep = sym.row < sym.col
    rows, cols, data = sym.row[keep], sym.col[keep], sym.data[keep]
    n = problem.n_workers
    caps = sorted((int(c) for c in capacities if c > 0), reverse=True)
    if not len(data):
        return 0.0, None, False
    scale = 1e6 / float(data.max())
    weights = np.floor(data * scale).astype(np.int64)
    m = cp_model.CpModel()
    x = [[m.NewBoolVar("") for _ in caps] for _ in range(n)]
    for i in range(n):
        m.AddExactlyOne(x[i])
    for d, cap in enumerate(caps):
        m.Add(sum(x[i][d] for i in range(n)) <= cap)
    for d in range(1, len(caps)):  # domains of one capacity are interchangeable: worker 0
        if caps[d] == caps[d - 1]:  # goes to the first of its class (relabel any plan so)
            m.Add(x[0][d] == 0)
    kept = []
    for i, j, w in zip(rows, cols, weights, strict=True):
        same = m.NewBoolVar("")
        for d in range(len(caps)):
            m.Add(same <= 1 + x[i][d] - x[j][d])
        kept.append((int(w), same))
    m.Maximize(sum(w * v for w, v in kept))
    solver = _cut_solver(limit)
    status = solver.Solve(m)
    total = int(weights.sum())
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return 0.0, None, False
    lower = max(total - solver.BestObjectiveBound(), 0.0) / scale
    part = np.array([next(d for d, v in enumerate(row) if solver.BooleanValue(v)) for row in x])
    return lower, part, status == cp_model.OPTIMAL


def _cut_solver(limit: float) -> Any:
    """CP-SAT as both cut models run it: two workers, seed 0, interleaved search, so a bound
    under the deterministic ``limit`` repeats."""
    from ortools.sat.python import cp_model

    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 2
    solver.parameters.random_seed = 0
    solver.parameters.interleave_search = True
    solver.parameters.max_deterministic_time = float(limit)
    return solver


def block_split_costs(a: np.ndarray) -> np.ndarray:
    """``f[j]``: the least weight between ``j`` vertices of a small graph and the rest (dense
    symmetric weights ``a``, at most :data:`CUT_BLOCK` vertices), over all ``2^k`` subsets:
    ``cut(x) = Σ_i deg_i·x_i − xᵀ a x`` for each 0/1 vector x, the least per popcount."""
    k = len(a)
    if k > CUT_BLOCK:
        raise ValueError(f"a block of {k} vertices; at most {CUT_BLOCK} are enumerated")
    x, count = _subsets(k)
    cut = x @ a.sum(axis=1) - np.einsum("ij,ij->i", x @ a, x)
    out = np.full(k + 1, np.inf)
    np.minimum.at(out, count, np.maximum(cut, 0.0))
    return out


@functools.lru_cache(maxsize=4)
def _subsets(k: int) -> tuple[np.ndarray, np.ndarray]:
    """Every subset of k vertices as a 0/1 row, and its size (read-only, cached)."""
    masks = np.arange(2**k, dtype=np.int64)
    x = ((masks[:, None] >> np.arange(k)) & 1).astype(np.float64)
    count = x.sum(axis=1).astype(np.int64)
    x.flags.writeable = False
    count.flags.writeable = False
    return x, count


def _matching_layers(sub: np.ndarray, most: int = CUT_BLOCK) -> list[tuple[float, int]]:
    """The weights between two blocks (``sub``: p × q) as a sum of at most ``most`` weighted
    matchings plus a non-negative rest: ``[(w, size), …]``, peeled off one maximum matching of
    the remaining support at a time at its lightest weight (each round empties a pair; uniform
    weights between two blocks of 16 take 16 rounds). The rest is left out, which only lowers
    the bound."""
    from scipy.sparse.csgraph import maximum_bipartite_matching

    rest = sub.astype(np.float64).copy()
    tol = 1e-12 * float(rest.max(initial=0.0))
    out = []
    while rest.max(initial=0.0) > tol and len(out) < most:
        match = maximum_bipartite_matching(sp.csr_array(rest > tol), perm_type="column")
        rows = np.flatnonzero(match >= 0)
        w = float(rest[rows, match[rows]].min())
        out.append((w, len(rows)))
        rest[rows, match[rows]] -= w
        rest[rest <= tol] = 0.0
    return out


def cut_blocks(problem: PlacementProblem, block: int = CUT_BLOCK) -> tuple[list[np.ndarray], list]:
    """The job graph in blocks of at most ``block`` workers for :func:`block_cut_cpsat`
    (cached): ``(members, layers)``, the blocks a small-cut partition
    (:func:`tsched.solvers.hierarchical.partition`, so the heavy groups stay inside), and
    ``(b, c, w, slack_b, slack_c)`` per matching layer between two blocks
    (:func:`_matching_layers`; slack: a block's vertices the matching leaves out)."""
    cached = problem._cache.get(("cut_blocks", block))
    if cached is not None:
        return cached
    from tsched.solvers.hierarchical import partition

    sym = problem.flow_symmetric()
    n = problem.n_workers
    q, r = divmod(n, block)
    sizes = np.array([block] * q + ([r] if r else []), dtype=np.int64)
    part = partition(sym, sizes)[0] if len(sizes) > 1 else np.zeros(n, dtype=np.int64)
    members = [np.flatnonzero(part == b) for b in range(len(sizes))]
    layers = []
    for b, c in itertools.combinations(range(len(members)), 2):
        sub = sym[members[b]][:, members[c]].toarray()
        for w, size in _matching_layers(sub):
            layers.append((b, c, w, len(members[b]) - size, len(members[c]) - size))
    out = problem._cache[("cut_blocks", block)] = (members, layers)
    return out


def _block_costs(problem: PlacementProblem, block: int) -> list[np.ndarray]:
    """Each block of :func:`cut_blocks`' :func:`block_split_costs` (cached), once per distinct
    block (a layout's blocks repeat)."""
    cached = problem._cache.get(("block_costs", block))
    if cached is not None:
        return cached
    sym = problem.flow_symmetric()
    seen: dict[bytes, np.ndarray] = {}
    costs = []
    for mem in cut_blocks(problem, block)[0]:
        a = sym[mem][:, mem].toarray()
        key = a.tobytes()
        if key not in seen:
            seen[key] = block_split_costs(a)
        costs.append(seen[key])
    problem._cache[("block_costs", block)] = costs
    return costs


def block_cut_cpsat(
    problem: PlacementProblem,
    capacities: np.ndarray,
    limit: float = CUT_CPSAT_LIMIT,
    block: int = CUT_BLOCK,
) -> float:
    """A lower bound on the least traffic cut over domains of the given free capacities, from
    the job graph's blocks of up to ``block`` workers (:func:`cut_blocks`): CP-SAT's proved
    bound on a programme over how many workers of each block each domain holds.

    Derivation. Let ``s_bd`` be the workers of block b in domain d. Inside a block, the part in
    domain d is ``s_bd`` of its workers, so at least ``f_b[s_bd]`` of the block's weight leaves
    it (the block's exact split costs), and each cut pair leaves two parts: the block's cut is at
    least ``½ Σ_d f_b[s_bd]``. Between blocks b and c, take one matching layer (weight w on each
    of its pairs; it leaves ``slack_b`` workers of b out): of b's ``s_bd`` workers in d at least
    ``s_bd − slack_b`` are matched, and at most ``s_cd`` of their partners are in d, so at least
    ``s_bd − s_cd − slack_b`` matched pairs leave d from b's side, and likewise from c's; each
    cut pair is counted from both ends, so the layer cuts at least
    ``½ Σ_d w·max(0, s_bd − s_cd − slack_b, s_cd − s_bd − slack_c)``. Layers split the
    weights between blocks without overlap, so the sum over blocks and layers bounds the cut for
    every plan; minimising it over all counts that fit the capacities (``Σ_d s_bd = |b|``,
    ``Σ_b s_bd ≤ cap_d``) gives the bound. With two domains every cut pair leaves both, and the
    halves count once: one count per block, ``f_b[s_b]`` and the layer terms taken whole.

    Exact where the optimal cut runs between whole blocks joined by matchings, as in an MoE
    job's data-parallel rings between expert groups, which the densest-subgraph weights and
    the pair-level CP-SAT model (:func:`level_cut_cpsat`) leave loose: both see the rings only
    one pair at a time. Costs are rounded down on a :data:`BLOCK_SCALE` scale, and CP-SAT's
    proved bound holds whether or not it finished within the deterministic ``limit`` (and four
    times as many wall seconds). 0 where it finds nothing, or where the model is larger than
    :data:`BLOCK_MODEL_MAX`.
    """
    from ortools.sat.python import cp_model

    caps = sorted((int(c) for c in capacities if c > 0), reverse=True)
    n = problem.n_workers
    if len(caps) < 2 or sum(caps) < n or problem.n_edges == 0:
        return 0.0
    members, layers = cut_blocks(problem, block)
    if (len(members) + len(layers)) * len(caps) > BLOCK_MODEL_MAX:
        return 0.0
    costs = _block_costs(problem, block)
    top = max([float(np.max(f[np.isfinite(f)])) for f in costs] + [w for _, _, w, _, _ in layers])
    if top <= 0:
        return 0.0
    scale = BLOCK_SCALE / top
    two = len(caps) == 2
    doms = 1 if two else len(caps)
    m = cp_model.CpModel()
    s = [[m.NewIntVar(0, min(len(mem), cap), "") for cap in caps] for mem in members]
    for b, mem in enumerate(members):
        m.Add(sum(s[b]) == len(mem))
    for d, cap in enumerate(caps):
        m.Add(sum(s[b][d] for b in range(len(members))) <= cap)
    for d in range(1, len(caps)):  # domains of one capacity are interchangeable: block 0's
        if caps[d] == caps[d - 1]:  # counts over them can be taken non-increasing
            m.Add(s[0][d - 1] >= s[0][d])
    terms = []
    for b, f in enumerate(costs):
        table = [int(np.floor(v * scale * (1 - 1e-9))) for v in f]
        for d in range(doms):
            v = m.NewIntVar(0, max(table), "")
            m.AddElement(s[b][d], table, v)
            terms.append(v)
    for b, c, w, slack_b, slack_c in layers:
        weight = int(np.floor(w * scale * (1 - 1e-9)))
        if weight <= 0:
            continue
        for d in range(doms):
            z = m.NewIntVar(0, max(len(members[b]), len(members[c])), "")
            m.Add(z >= s[b][d] - s[c][d] - slack_b)
            m.Add(z >= s[c][d] - s[b][d] - slack_c)
            terms.append(weight * z)
    m.Minimize(sum(terms))
    solver = _cut_solver(limit)
    solver.parameters.max_time_in_seconds = 4.0 * float(limit)  # a guard on a loaded machine
    status = solver.Solve(m)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return 0.0
    return max(float(solver.BestObjectiveBound()), 0.0) / scale / (1 if two else 2)


def _split_cost(factor: np.ndarray, line: bool) -> tuple[float, float]:
    """``(α, β)``: a split of the factor graph over domains cuts at least ``α·(k − 1)`` of its
    weight (k domains touch it) and at least ``β`` per domain that holds part of it but not all
    (w: its lightest pair).

    A connected factor's parts are joined by at least k − 1 of its edges (its quotient stays
    connected), and each part held short has an edge leaving it, each edge leaving two parts at
    most: α = w, β = w/2. A cycle cuts one edge per arc: α = w·m/(m−1), β = w. A complete
    graph cuts ``(k−1)(2m−k)/2`` pairs at least, and a part of x < m ranks ``x(m − x) ≥ m − 1``
    pairs, each counted from both sides: α = w·m/2, β = w(m−1)/2. (0, 0) for a factor in
    pieces."""
    m = len(factor)
    off = factor[~np.eye(m, dtype=bool)]
    nonzero = off[off > 0]
    if m < 2 or not len(nonzero):
        return 0.0, 0.0
    w = float(nonzero.min())
    if np.all(off > 0):
        return w * m / 2, w * (m - 1) / 2
    if line:
        cycle = np.count_nonzero(factor) // 2 == m and m > 2
        return (w * m / (m - 1), w) if cycle else (w, w / 2)
    return (w, w / 2) if _connected(factor > 0) else (0.0, 0.0)


def projection_cuts(
    problem: PlacementProblem,
    sizes_by_level: list[np.ndarray],
    steps: np.ndarray | None = None,
) -> list[float]:
    """A lower bound on each level's cut for a parallel layout, from how many lines of each
    dimension a domain's workers must touch; [] for traffic without a rank grid.

    A line of dimension a (ranks equal but in coordinate a) touched by k domains loses at least
    ``α_a·(k − 1)`` (:func:`_line_split_costs`). Summed over lines, ``cut ≥ Σ_a α_a (Σ_P L_a(P) −
    lines_a)`` with ``L_a(P)`` the lines of dimension a that domain P touches, the size of P's
    projection along a. Or, per dimension, ``β_a`` for every line a domain touches but does not
    hold whole: ``β_a (Σ_P L_a(P) − Σ_P ⌊|P|/m_a⌋)`` (a ring split in two loses two pairs, not
    one); every choice of form per dimension is a bound, and the largest is kept.

    The discrete Loomis–Whitney inequality ``|P|^{d−1} ≤ Π_a L_a(P)``, with
    ``⌈|P|/m_a⌉ ≤ L_a(P) ≤ min(lines_a, |P|)``, bounds ``Σ_a c_a L_a(P)`` (c: α or β) below
    by ``f(|P|)``: a convex problem in ``log L``, solved by water-filling (the value at the
    bisection's lower end, so never above its optimum). The domains' sizes are then chosen to
    minimise ``Σ_P f(|P|)`` less the per-part terms within their free GPUs (:func:`_kept_upper`
    on the negated costs).

    It sees what neither eigenvalues nor densest subgraphs see in large domains: four spine
    groups of 1,024 GPUs holding a TP8 × PP8 × DP64 job must cut 1,536 pipeline pairs (or more
    expensive ones) — exactly what the best plan cuts.
    """
    best = _projection_best(problem, sizes_by_level, steps)
    return [value for value, _ in best] if best else []


def _projection_best(
    problem: PlacementProblem,
    sizes_by_level: list[np.ndarray],
    steps: np.ndarray | None = None,
) -> list[tuple[float, tuple[np.ndarray, float] | None]]:
    """Per level, :func:`projection_cuts`'s bound and the ``(cost, const)`` form that gives it
    (None where no form beats 0); [] without a rank grid. Levels whose cost ``steps`` are 0
    (no pair pays for crossing them) are not bounded. Cached for the level sizes: the
    packing, partition and nested bounds all ask."""
    live = [True] * len(sizes_by_level) if steps is None else [bool(x > 0) for x in steps]
    key = ("projection_best", tuple(live),
           tuple(np.asarray(s, dtype=float).tobytes() for s in sizes_by_level))  # fmt: skip
    cached = problem._cache.get(key)
    if cached is not None:
        return cached
    forms = _projection_forms(problem, sizes_by_level)
    out: list[tuple[float, tuple[np.ndarray, float] | None]] = []
    if any(forms):
        n = problem.n_workers
        for level, sizes, wanted in zip(forms, sizes_by_level, live, strict=True):
            best: tuple[float, tuple[np.ndarray, float] | None] = (0.0, None)
            for cost, const in level if wanted else ():
                value = const - _kept_upper(-cost, np.asarray(sizes), n)
                if value > best[0]:
                    best = (value, (cost, const))
            out.append(best)
    problem._cache[key] = out
    return out


def _projection_forms(
    problem: PlacementProblem, sizes_by_level: list[np.ndarray]
) -> list[list[tuple[np.ndarray, float]]]:
    """Per level, every ``(cost, const)`` of :func:`projection_cuts`: the level's cut is at least
    ``const + Σ_P cost[|P|]`` over its domains P, for each rank grid and each choice of form
    per dimension (cached: they depend on the largest domain of each level only).

    A part's credit for the lines it holds whole (``β_a⌊|P|/m_a⌋``) is taken only with what
    holding one costs: a whole line of dimension a is m_a ranks that differ in coordinate a
    alone, so they lie on m_a different lines of every other dimension (``L_b ≥ m_a``). Each
    part's cost is the least over which dimensions it holds whole lines of. Without this, a
    rack of an NVL72 cluster could be credited with whole data-parallel rings while touching
    only as many tensor-parallel groups as it holds whole."""
    n = problem.n_workers
    spans = tuple(int(min(np.max(s, initial=0), n)) for s in sizes_by_level)
    key = ("projection_forms", spans)
    cached = problem._cache.get(key)
    if cached is not None:
        return cached
    out: list[list[tuple[np.ndarray, float]]] = [[] for _ in sizes_by_level]
    for m, alpha, beta in _line_split_costs(problem):
        d = len(m)
        lines = n / m
        uses: list[np.ndarray] = []
        rows = []  # (form, dimensions a part holds whole lines of): one water-filling each
        for per_part in itertools.product((False, True), repeat=d):
            use = np.array(per_part, dtype=bool)
            if np.any(use & (beta <= 0)):
                continue
            dims = np.flatnonzero(use).tolist()
            for r in range(len(dims) + 1):
                rows += [(len(uses), list(held)) for held in itertools.combinations(dims, r)]
            uses.append(use)
        if not rows:
            continue
        coefs = np.array([np.where(uses[u], beta, alpha) for u, _ in rows])
        floors = np.ones((len(rows), d))
        for row, (_, held) in enumerate(rows):
            for a in held:  # a whole line of a: m_a ranks on m_a lines of each other dimension
                floors[row] = np.maximum(floors[row], np.where(np.arange(d) == a, 1.0, m[a]))
        for k, span in enumerate(spans):
            f = _projection_costs(coefs, m, lines, span, floors)
            whole = np.floor(np.arange(span + 1)[:, None] / m)  # lines a part can hold
            cost = np.full((len(uses), span + 1), np.inf)
            for row, (u, held) in enumerate(rows):  # the least over what a part holds whole
                np.minimum(cost[u], f[row] - (whole[:, held] * beta[held]).sum(axis=1), out=cost[u])
            for u, use in enumerate(uses):
                out[k].append((cost[u], -float(np.dot(alpha[~use], lines[~use]))))
    problem._cache[key] = out
    return out


def _line_split_costs(
    problem: PlacementProblem,
) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """``(m, α, β)`` per dimension of each rank grid :func:`projection_cuts` can use: the
    dimension's size and the least traffic a line of it loses per extra domain it is split
    over, and per domain holding part of it (:func:`_split_cost`).

    For a product (:func:`layout_factors`) each factor's :func:`_split_cost`. And on the
    declared layout's own grid when that is not the product's (an MoE job, whose dense
    gradients join ranks that differ in expert and data coordinates at once, factors only with
    the two merged): only the pairs that differ in one coordinate are counted — leaving pairs
    out never raises a cut — and per dimension the factor's split cost if every line carries
    the same factor graph, else (w, w/2) with w the lightest pair if every line is connected,
    else 0."""
    out = []
    factors = layout_factors(problem)
    if factors is not None:
        m = np.array([len(f) for f in factors], dtype=float)
        costs = np.array([_split_cost(f, _line_like(f)) for f in factors]).reshape(-1, 2)
        out.append((m, costs[:, 0], costs[:, 1]))
    layout = problem.workload.layout if problem.workload is not None else None
    n = problem.n_workers
    if layout is None or layout.workers != n:
        return out
    grid = layout.rank_grid()
    if factors is not None and len(factors) == sum(size > 1 for size in grid.shape):
        return out  # the product is on this grid already
    coords, sym, differs = _grid_pairs(problem, grid)
    single = differs.sum(axis=1) == 1
    axis_of = np.argmax(differs, axis=1)
    sizes, costs = [], []
    for axis, size in enumerate(grid.shape):
        if size == 1:
            continue
        mine = single & (axis_of == axis)
        sizes.append(float(size))
        if not mine.any():
            costs.append((0.0, 0.0))
            continue
        rows, cols, data = sym.row[mine], sym.col[mine], sym.data[mine]
        factor = _line_factor(grid, coords, axis, rows, cols, data)
        if factor is not None:
            costs.append(_split_cost(factor, _line_like(factor)))
            continue
        import scipy.sparse as sp
        from scipy.sparse.csgraph import connected_components

        graph = sp.coo_array((data, (rows, cols)), shape=(n, n))
        pieces = connected_components(graph, directed=False)[0]
        w = float(data.min()) if pieces == n // size else 0.0
        costs.append((w, w / 2))
    split = np.array(costs).reshape(-1, 2)
    out.append((np.array(sizes), split[:, 0], split[:, 1]))
    return out


def _projection_costs(
    alpha: np.ndarray,
    m: np.ndarray,
    lines: np.ndarray,
    span: int,
    floors: np.ndarray,
) -> np.ndarray:
    """``f[c, s]`` for each row c of ``alpha`` and s = 0 … ``span``: a lower bound on
    ``Σ_a α_a L_a`` over sets of s ranks that touch at least ``floors[c, a]`` lines of each
    dimension (and ``⌈s/m_a⌉``; :func:`projection_cuts`), by water-filling in ``log L``, all
    rows at once; ∞ where a floor exceeds ``min(lines_a, s)`` (no set of that size touches so
    many lines)."""
    s = np.arange(1, span + 1, dtype=float)[None, :, None]
    alpha = np.asarray(alpha, dtype=float)[:, None, :]
    most = np.maximum(np.minimum(lines, s), np.ceil(s / m))
    least = np.maximum(np.maximum(np.ceil(s / m), 1.0), floors[:, None, :])
    impossible = np.any(least > most, axis=2)
    lo = np.log(np.minimum(least, most))
    hi = np.log(np.broadcast_to(most, lo.shape))
    need = (len(m) - 1) * np.log(s[..., 0])
    free = alpha <= 0  # costless dimensions touch all the lines they may
    log_alpha = np.log(np.where(free, 1.0, alpha))
    # x_a = log(λ/α_a) clipped to [lo_a, hi_a]: λ between these spans every clipping
    low = (log_alpha + lo).min(axis=2) - 1.0
    high = (log_alpha + hi).max(axis=2) + 1.0
    for _ in range(64):  # bisection on the multiplier: Σ log L_a reaches `need`
        mid = 0.5 * (low + high)
        x = np.where(free, hi, np.clip(mid[..., None] - log_alpha, lo, hi))
        enough = x.sum(axis=2) >= need - 1e-12
        high = np.where(enough, mid, high)
        low = np.where(enough, low, mid)
    x = np.where(free, hi, np.clip(low[..., None] - log_alpha, lo, hi))
    value = np.where(impossible, np.inf, (alpha * np.exp(x)).sum(axis=2))
    return np.concatenate([np.zeros((len(value), 1)), value], axis=1)


def packing_bound(problem: PlacementProblem) -> float | None:
    """The hierarchical cut bound of :func:`spectral_bound` with a second bound on each cut
    that needs no search: ``cut_ℓ ≥ W − max Σ_d D⁺[s_d]``, the traffic that cannot stay inside
    level-ℓ domains however the workers are spread over their free GPUs, with the heaviest-pairs
    weights :func:`packing_weights` (up to :data:`DENSEST_MAX_PART` workers per domain) in the
    knapsack :func:`_kept_upper`. Each level keeps the largest of this, the eigenvalue bound
    and the line-projection bound (:func:`projection_cuts`).

    Milliseconds at any size (sparse), so it runs by default where :func:`partition_bound`'s
    searches do not. It closes the node level of a fragmented cluster: a TP group split over
    two half-free nodes loses the traffic between its halves, which the eigenvalues see only in
    part.
    """
    levels = _cut_levels(problem)
    if levels is None:
        return None
    e, sizes_by_level = levels
    steps, kmax = _level_steps(problem, e, sizes_by_level)
    weights = packing_weights(problem, kmax)[: kmax + 1]
    cuts = _search_free_cuts(problem, sizes_by_level, steps, weights)
    bound = e[0] * float(problem.gb.sum()) + float(np.dot(steps, cuts))
    return bound + linear_floor(problem)


def _level_steps(
    problem: PlacementProblem, e: np.ndarray, sizes_by_level: list[np.ndarray]
) -> tuple[np.ndarray, int]:
    """Each level's cost step ``e_{ℓ+1} − e_ℓ`` (≥ 0), and the largest part size the densest
    weights are needed for (the largest domain of a level with a step, at most
    :data:`DENSEST_MAX_PART`)."""
    n = problem.n_workers
    steps = np.array([max(e[k + 1] - e[k], 0.0) for k in range(len(sizes_by_level))])
    largest = max(
        (int(min(s.max(), n)) for s, step in zip(sizes_by_level, steps) if step > 0), default=0
    )
    return steps, min(largest, DENSEST_MAX_PART)


def _search_free_cuts(
    problem: PlacementProblem,
    sizes_by_level: list[np.ndarray],
    steps: np.ndarray,
    weights: np.ndarray,
) -> list[float]:
    """Per level with a cost step (0 elsewhere), the largest of three lower bounds on its cut:
    the traffic the densest ``weights`` cannot keep inside its domains (:func:`_kept_upper`),
    the eigenvalue bound and the line-projection bound."""
    n = problem.n_workers
    spectral = _spectral_cuts(problem, sizes_by_level)
    projection = projection_cuts(problem, sizes_by_level, steps)
    total = float(problem.gb.sum())
    out = []
    for k, sizes in enumerate(sizes_by_level):
        if steps[k] <= 0:
            out.append(0.0)
            continue
        cut = max(total - _kept_upper(weights, sizes, n), 0.0)
        if spectral:
            cut = max(cut, spectral[k])
        if projection:
            cut = max(cut, projection[k])
        out.append(cut)
    return out


def partition_bound(problem: PlacementProblem) -> float | None:
    """The hierarchical cut bound of :func:`spectral_bound` with a second bound on each cut:
    ``cut_ℓ ≥ W − max Σ_d D[s_d]``, the traffic that cannot stay inside level-ℓ domains however
    the workers are spread over them (:func:`densest_weights`, capped by the
    :func:`packing_weights`; :func:`_kept_upper`). Each level keeps the largest of this, the
    eigenvalue bound and the line-projection bound (:func:`projection_cuts`), so it is never
    below :func:`packing_bound`.

    Exact where the parts of an optimal plan are densest subgraphs, which is the case for the
    symmetric groups of parallel layouts: an MoE job's TP pairs, expert all-to-all cliques and
    data-parallel rings tile into equal dense blocks that the eigenvalue bound cannot see. Up to
    :data:`DENSEST_MAX_WORKERS` workers, with the densest weights searched exactly up to
    :data:`DENSEST_MAX_PART` workers (larger domains use the density bound). A level of few
    large domains (the spine groups or NVL72 racks a job must span) gets two more bounds on its
    cut: CP-SAT's proved bounds on the least cut over those capacities, pair by pair
    (:func:`level_cut_cpsat`, up to :data:`CUT_CPSAT_MAX_WORKERS` workers) and block by block
    (:func:`block_cut_cpsat`).
    """
    n = problem.n_workers
    if n > DENSEST_MAX_WORKERS:
        return None
    levels = _cut_levels(problem)
    if levels is None:
        return None
    e, sizes_by_level = levels
    steps, kmax = _level_steps(problem, e, sizes_by_level)
    weights = np.minimum(
        densest_weights(problem, kmax)[: kmax + 1], packing_weights(problem, kmax)[: kmax + 1]
    )
    cuts = _search_free_cuts(problem, sizes_by_level, steps, weights)
    for k, sizes in enumerate(sizes_by_level):
        if steps[k] <= 0 or not _few_domains(sizes):
            continue
        if n <= CUT_CPSAT_MAX_WORKERS:
            lower, partition, _ = level_cut_cpsat(problem, sizes)
            cuts[k] = max(cuts[k], lower)
            if partition is not None:  # a candidate plan (auto takes it if it is better)
                problem._cache["partition_plan"] = _plan_from_partition(problem, k, partition)
        cuts[k] = max(cuts[k], block_cut_cpsat(problem, sizes))
    bound = e[0] * float(problem.gb.sum()) + float(np.dot(steps, cuts))
    return bound + linear_floor(problem)


#: Largest min-plus work (Σ over convolutions of their lengths' product) of the nested bound.
NESTED_WORK = 100_000_000


def nested_bound(problem: PlacementProblem) -> float | None:
    """The hierarchical cut bound with the levels coupled: one worker count per domain, nested.

    The per-level bounds (:func:`packing_bound`, :func:`partition_bound`) each choose the best
    spread of the workers for their own level: all whole nodes for the node cut, the fewest
    spine groups for the spine cut — even when no plan can do both (the whole nodes lie in
    spine groups the spine cut would not use). Here every level's cut is bounded by a sum over
    its domains of a function of the domain's worker count: ``W − Σ_P D[|P|]`` (densest
    weights: :func:`packing_weights`, and :func:`densest_weights` where the partition bound
    computed them) or a line-projection form of :func:`projection_cuts` (the best one for that
    level alone). Every plan gives each domain a count, a child's count within its parent's,
    so ``objective ≥ e_0·W + min Σ_ℓ step_ℓ · (const_ℓ + Σ_{P at ℓ} cost_ℓ[|P|])`` over all
    nested counts that fit the free GPUs and sum to n: a dynamic programme up the tree of
    domains (min-plus convolutions of the children's functions; domains with the same subtree
    computed once). Every choice of form per level is tried and the largest bound kept.
    None when fewer than two levels have a cut, or above :data:`NESTED_WORK`.
    """
    levels = _cut_levels(problem)
    if levels is None:
        return None
    e, sizes_by_level = levels
    n = problem.n_workers
    steps, kmax = _level_steps(problem, e, sizes_by_level)
    if np.count_nonzero(steps > 0) < 2:
        return None  # one cut: the per-level bounds already see everything
    cl = problem.cluster
    assert cl is not None
    free = np.bincount(cl.gpu_node[problem.locations], minlength=cl.n_nodes)
    live = np.flatnonzero(free > 0)
    chain = [live] + [cl.node_group[live, k].astype(np.int64) for k in range(len(steps) - 1)]
    total = float(problem.gb.sum())
    spans = [int(min(np.max(sizes, initial=0), n)) for sizes in sizes_by_level]
    weights = packing_weights(problem, kmax)[: kmax + 1]
    densest = problem._cache.get("densest_weights")  # exact where the partition bound ran
    if densest is not None and len(densest) > kmax:
        weights = np.minimum(weights, densest[: kmax + 1])
    projection = _projection_best(problem, sizes_by_level, steps)
    forms: list[list[tuple[np.ndarray, float]]] = []
    for k, span in enumerate(spans):
        if steps[k] <= 0:
            forms.append([(np.zeros(span + 1), 0.0)])
            continue
        level = [(-np.minimum(_kept_table(weights, span), total), total)]
        if projection and projection[k][1] is not None:  # the form best for this level alone
            level.append(projection[k][1])
        forms.append(level)
    best = None
    for choice in itertools.product(*forms):
        costs = [steps[k] * cost for k, (cost, _) in enumerate(choice)]
        spent = _nested_min(chain, free[live], costs, n)
        if spent is None:
            return None
        value = e[0] * total + sum(steps[k] * c for k, (_, c) in enumerate(choice)) + spent
        best = value if best is None else max(best, value)
    return None if best is None else best + linear_floor(problem)


def _nested_min(
    chain: list[np.ndarray], free: np.ndarray, costs: list[np.ndarray], n: int
) -> float | None:
    """``min Σ_ℓ Σ_{P at ℓ} costs[ℓ][|P|]`` over nested worker counts (node counts up to their
    free GPUs, summing to n), bottom-up; None above :data:`NESTED_WORK`. ``chain[ℓ]``: each
    live node's domain at level ℓ (``chain[0]``: the node itself)."""
    work = 0

    def minplus(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        nonlocal work
        if len(a) > len(b):
            a, b = b, a
        out = np.full(min(len(a) + len(b) - 1, n + 1), np.inf)
        work += len(a) * len(b)
        for i in range(min(len(a), n + 1)):
            if np.isfinite(a[i]):
                seg = min(len(b), n + 1 - i)
                np.minimum(out[i : i + seg], a[i] + b[:seg], out=out[i : i + seg])
        return out

    cache: dict[Any, np.ndarray] = {}
    current: dict[int, Any] = {}  # domain id at the level below → its subtree's signature
    for node, f in zip(chain[0].tolist(), free.tolist(), strict=True):
        key = ("node", int(f))
        cache.setdefault(key, costs[0][: int(f) + 1].copy())
        current[node] = key
    for level in range(1, len(chain)):
        children: dict[int, dict[int, Any]] = {}
        for child, parent in zip(chain[level - 1].tolist(), chain[level].tolist(), strict=True):
            children.setdefault(parent, {})[child] = current[child]
        nxt = {}
        for parent, kids in children.items():
            key = (level, tuple(sorted(kids.values())))
            if key not in cache:
                acc = np.zeros(1)
                for kid in kids.values():
                    acc = minplus(acc, cache[kid])
                    if work > NESTED_WORK:
                        return None
                span = min(len(acc), len(costs[level]))
                cache[key] = acc[:span] + costs[level][:span]
            nxt[parent] = key
        current = nxt
    acc = np.zeros(1)
    for key in current.values():
        acc = minplus(acc, cache[key])
        if work > NESTED_WORK:
            return None
    return float(acc[n]) if len(acc) > n and np.isfinite(acc[n]) else None


def _plan_from_partition(problem: PlacementProblem, level: int, part: np.ndarray) -> np.ndarray:
    """A plan that keeps :func:`level_cut_cpsat`'s partition at ``level``: each domain's workers
    (in worker order, which keeps layout groups together) on its free GPUs in location order
    (node by node)."""
    cl = problem.cluster
    assert cl is not None
    nodes = cl.gpu_node[problem.locations]
    domain = nodes if level == 0 else cl.node_group[nodes, level - 1]
    ids, caps = np.unique(domain, return_counts=True)
    order = ids[np.argsort(-caps, kind="stable")]  # level_cut_cpsat's order of domains
    assignment = np.empty(problem.n_workers, dtype=np.int64)
    for d, dom in enumerate(order):
        workers = np.flatnonzero(part == d)
        assignment[workers] = np.flatnonzero(domain == dom)[: len(workers)]
    return assignment


def _few_domains(sizes: np.ndarray) -> bool:
    """Whether a level has at most :data:`CUT_CPSAT_MAX_DOMAINS` domains with free GPUs and
    parts larger than the densest search reaches (where that bound is weak)."""
    live = np.asarray(sizes)[np.asarray(sizes) > 0]
    return 1 < len(live) <= CUT_CPSAT_MAX_DOMAINS and live.max() > DENSEST_MAX_PART


def _parts_needed(sizes: np.ndarray, n: int) -> int:
    return len(_greedy_fill(sizes, n))


def _greedy_fill(sizes: np.ndarray, n: int) -> np.ndarray:
    """Part sizes that fill the largest capacities first until ``n`` workers are placed."""
    caps = np.sort(np.asarray(sizes, dtype=float)[np.asarray(sizes) > 0])[::-1]
    cum = np.cumsum(caps)
    k = int(np.searchsorted(cum, n) + 1)
    fill = caps[:k].copy()
    fill[-1] -= cum[k - 1] - n
    return fill


def layout_factors(problem: PlacementProblem) -> list[np.ndarray] | None:
    """The traffic's factor graphs when it is a Cartesian product, one symmetric weight matrix
    per dimension longer than 1; None otherwise (cached).

    A TP × CP × EP × DP × PP job whose traffic joins only ranks that differ in one coordinate,
    with the same weights along every line of a dimension, is the Cartesian product of one small
    graph per dimension. The declared layout's grid is tried first, then the finest numbering
    the pairs themselves allow (:func:`_rank_digits`: an explicit traffic list of a layout, or
    an MoE job whose data-parallel traffic spans the expert dimension too, which merges the
    two). The structure is not assumed: every traffic pair is checked to differ in one
    coordinate and to carry its factor's weight, and the pair counts must agree. O(edges).
    """
    if "layout_factors" in problem._cache:
        return problem._cache["layout_factors"]
    layout = problem.workload.layout if problem.workload is not None else None
    factors = None
    if layout is not None and layout.workers == problem.n_workers:
        factors = _grid_factors(problem, layout.rank_grid())
    if factors is None:
        grid = _rank_digits(problem)
        factors = None if grid is None else _grid_factors(problem, grid)
    problem._cache["layout_factors"] = factors
    return factors


def _grid_pairs(problem: PlacementProblem, grid: np.ndarray) -> tuple[np.ndarray, Any, np.ndarray]:
    """Each rank's coordinates on a grid, the symmetrised traffic (COO) and, per stored pair,
    which coordinates its two ranks differ in."""
    coords = np.empty((problem.n_workers, grid.ndim), dtype=np.int64)
    index = np.indices(grid.shape)
    for axis in range(grid.ndim):
        coords[grid.reshape(-1), axis] = index[axis].reshape(-1)
    sym = problem.flow_symmetric().tocoo()
    return coords, sym, coords[sym.row] != coords[sym.col]


def _grid_factors(problem: PlacementProblem, grid: np.ndarray) -> list[np.ndarray] | None:
    """:func:`layout_factors` for one rank grid (``grid[coordinates]`` = rank)."""
    coords, sym, differs = _grid_pairs(problem, grid)
    if np.any(differs.sum(axis=1) != 1):
        return None
    axis_of = np.argmax(differs, axis=1)
    factors = []
    for axis, size in enumerate(grid.shape):
        if size == 1:
            continue
        mine = axis_of == axis
        factor = _line_factor(grid, coords, axis, sym.row[mine], sym.col[mine], sym.data[mine])
        if factor is None:
            return None
        factors.append(factor)
    return factors


def _line_factor(
    grid: np.ndarray,
    coords: np.ndarray,
    axis: int,
    rows: np.ndarray,
    cols: np.ndarray,
    data: np.ndarray,
) -> np.ndarray | None:
    """The factor graph of dimension ``axis``, read off its first line, when the given pairs
    (all differing in that coordinate only) put the same graph on every line: each pair carries
    the first line's weight for its coordinates, and the pair counts agree. None otherwise."""
    size = grid.shape[axis]
    line = grid[tuple(slice(None) if a == axis else 0 for a in range(grid.ndim))]
    factor = np.zeros((size, size))
    first = np.isin(rows, line) & np.isin(cols, line)
    factor[coords[rows[first], axis], coords[cols[first], axis]] = data[first]
    want = factor[coords[rows, axis], coords[cols, axis]]
    lines = grid.size // size
    if len(data) != np.count_nonzero(factor) * lines:
        return None
    return factor if np.allclose(data, want, rtol=1e-12, atol=0.0) else None


#: Largest dimension :func:`_rank_digits` accepts (its factor graph is a dense matrix).
MAX_FACTOR = 1024


def _rank_digits(problem: PlacementProblem) -> np.ndarray | None:
    """The finest mixed-radix numbering of the workers in which every traffic pair differs in
    one digit, as a rank grid (one axis per digit, lowest digit last); None if there is none
    with at least two digits of at most :data:`MAX_FACTOR` values.

    This finds a parallel layout written out as an explicit traffic list (ranks numbered as
    the layouts number them). A boundary b (a divisor of n) can separate two digits only if
    every pair agrees below it or above it (``u mod b = v mod b`` or ``u div b = v div b``);
    the digits are then the longest chain of such boundaries from 1 to n, each dividing the
    next (a longest path over the allowed divisors). O(edges · divisors of n).
    """
    n = problem.n_workers
    flow = problem.flow_csr().tocoo()
    u, v = flow.row.astype(np.int64), flow.col.astype(np.int64)
    if n < 4 or not len(u):
        return None
    divisors = [b for b in range(2, int(n**0.5) + 1) if n % b == 0]
    divisors = sorted({1, n, *divisors, *(n // b for b in divisors)})
    allowed = [b for b in divisors if b in (1, n) or np.all((u % b == v % b) | (u // b == v // b))]
    longest = {1: [1]}
    for b in allowed[1:]:
        chains = [longest[a] for a in allowed if a < b and b % a == 0 and a in longest]
        if chains:
            longest[b] = [*max(chains, key=len), b]
    chain = longest.get(n, [])
    radices = [chain[i + 1] // chain[i] for i in range(len(chain) - 1)]
    if len(radices) < 2 or max(radices) > MAX_FACTOR:
        return None
    return np.arange(n).reshape(list(reversed(radices)))


def product_eigenvalues(problem: PlacementProblem) -> np.ndarray | None:
    """All traffic-Laplacian eigenvalues of a parallel layout, ascending, from its product
    structure (:func:`layout_factors`); None when the traffic is not a Cartesian product
    (cached).

    The Laplacian of a Cartesian product is the Kronecker sum of the factors' Laplacians, so
    its eigenvalues are all the sums λ_a(i_a) over the dimensions (one eigenvalue per factor):
    the exact spectrum in O(edges + n log n) instead of a dense O(n³) eigendecomposition; the
    same safety margin as the dense path is taken off.
    """
    cached = problem._cache.get("product_eigenvalues")
    if cached is not None:
        return cached
    factors = layout_factors(problem)
    if factors is None:
        return None
    n = problem.n_workers
    values = np.zeros(1)
    norm = 0.0
    for factor in factors:
        lap = np.diag(factor.sum(axis=1)) - factor
        norm += float(np.abs(lap).sum(axis=1).max())
        values = np.add.outer(values, np.linalg.eigvalsh(lap)).reshape(-1)
    values = np.sort(values)
    values = np.maximum(values - 64 * n * np.finfo(float).eps * max(norm, 1.0), 0.0)
    problem._cache["product_eigenvalues"] = values
    return values


def _line_like(factor: np.ndarray) -> bool:
    """Whether a factor graph is one path or one cycle (connected, no vertex of degree > 2):
    then any h of its vertices, fewer than all, induce a union of paths."""
    adj = factor > 0
    return adj.sum(axis=1).max(initial=0) <= 2 and _connected(adj)


def _connected(adj: np.ndarray) -> bool:
    """Whether a small dense adjacency matrix is one connected graph (a walk from vertex 0;
    factor graphs have a few dozen vertices, so no graph library is loaded for them)."""
    seen = {0}
    stack = [0]
    while stack:
        for v in np.flatnonzero(adj[stack.pop()]).tolist():
            if v not in seen:
                seen.add(v)
                stack.append(v)
    return len(seen) == len(adj)


def _factor_cover(factor: np.ndarray, h: int, line: bool) -> np.ndarray:
    """A weighted graph on ``h`` vertices that contains (edge by edge, weights no smaller) the
    subgraph of ``factor`` induced by any ``h`` of its vertices: the factor itself when h is
    all of it, else a path (``line``: the factor is one path or cycle) or a clique, at the
    factor's heaviest weight."""
    m = len(factor)
    if h == m:
        return factor
    w = float(factor.max())
    if line:
        return w * (np.eye(h, k=1) + np.eye(h, k=-1))
    return w * (np.ones((h, h)) - np.eye(h))


def _line_weights(factor: np.ndarray, h: int, line: bool, s: int) -> np.ndarray:
    """``φ[x]`` for x = 0 … min(h, s): an upper bound on the weight inside any x vertices of
    :func:`_factor_cover` ``(factor, h)`` (x − 1 heaviest edges on a path; x(x−1)/2 on a
    clique; the factor's total weight when x is all of it)."""
    m = len(factor)
    w = float(factor.max())
    x = np.arange(min(h, s) + 1, dtype=float)
    phi = w * np.maximum(x - 1, 0) if line else w * x * (x - 1) / 2
    if h == m and len(x) > m:
        phi[m] = min(float(phi[m]), float(factor.sum()) / 2) if not line else factor.sum() / 2
    return phi


def _spread_weight(phi: np.ndarray, s: int) -> float:
    """``max Σ_ℓ φ[x_ℓ]`` over ways to split s vertices into lines of at most len(φ) − 1:
    the most weight one dimension's lines can hold, whatever the other dimensions do."""
    best = np.full(s + 1, -np.inf)
    best[0] = 0.0
    for t in range(1, s + 1):
        for x in range(1, min(len(phi) - 1, t) + 1):
            best[t] = max(best[t], best[t - x] + phi[x])
    return float(best[s])


def layout_weights(problem: PlacementProblem, kmax: int) -> np.ndarray | None:
    """``D[s]`` for s = 0 … ``kmax``, an upper bound on the traffic inside any ``s`` workers of a
    parallel layout, from its factor graphs alone (:func:`layout_factors`); None when the
    traffic is not a product. Exact where the search finishes, on any number of workers.

    A connected set S of s workers changes one coordinate per traffic pair, so along a
    spanning tree it takes ``h_a`` values in dimension a with ``Σ (h_a − 1) ≤ s − 1``. Its
    traffic lies inside the product of the factors restricted to those values, and that
    product lies inside the product of :func:`_factor_cover` graphs on ``h_a`` vertices. So
    the connected sets weigh at most the densest ``s``-set of one such small product (at most
    a few dozen vertices for s ≤ 8); a set of several components weighs at most
    ``max D[a] + D[s − a]``. Shapes ``(h_a)`` are taken in decreasing order of a cheap bound
    (each dimension's lines filled alone, :func:`_spread_weight`; then the heaviest pairs), and
    only those that can still beat the best so far are searched, exactly, by the
    densest-subgraph kernel.
    """
    factors = layout_factors(problem)
    if factors is None:
        return None
    cached = problem._cache.get("layout_weights")
    if cached is not None and len(cached) > kmax:
        return cached
    sizes = [len(f) for f in factors]
    lines = [_line_like(f) for f in factors]
    nested = [_nested_covers(f, line) for f, line in zip(factors, lines, strict=True)]
    out = np.zeros(kmax + 1)
    for s in range(2, kmax + 1):
        shapes = []
        for shape in _shapes(sizes, s, nested):
            upper = sum(
                _spread_weight(_line_weights(f, h, line, s), s)
                for f, h, line in zip(factors, shape, lines, strict=True)
            )
            shapes.append((upper, shape))
        shapes.sort(key=lambda item: -item[0])
        connected = 0.0
        for upper, shape in shapes:
            if upper <= connected:
                break  # sorted: no later shape can beat what is known
            graph = np.zeros((1, 1))
            for factor, h, line in zip(factors, shape, lines, strict=True):
                cover = _factor_cover(factor, h, line)
                graph = np.kron(graph, np.eye(h)) + np.kron(np.eye(len(graph)), cover)
            a, top = _search_inputs(graph)
            upper = min(upper, 0.5 * float(np.sort(top[:, s - 1])[-s:].sum()))
            found = _greedy_densest(a, s)
            if upper <= max(found, connected):  # no better than known, or greedy is exact
                connected = max(connected, found)
                continue
            from tsched.solvers import _densest_kernel as kernel

            visits = 1_000_000 if kernel.HAVE_NUMBA else 10_000  # cut short: an upper bound
            value, _ = kernel.search(a, top, s, np.full(s + 1, np.inf), found, visits)
            connected = max(connected, float(value))
        split = max((out[t] + out[s - t] for t in range(1, s // 2 + 1)), default=0.0)
        out[s] = max(connected, split, out[s - 1])
    problem._cache["layout_weights"] = out
    return out


def _nested_covers(factor: np.ndarray, line: bool) -> bool:
    """Whether each :func:`_factor_cover` of a factor is an induced subgraph of the next larger
    one (uniform weights on a path, cycle or clique), so a shape with fewer values in its
    dimension is dominated."""
    off = factor[~np.eye(len(factor), dtype=bool)]
    nonzero = off[off > 0]
    if not len(nonzero) or not np.allclose(nonzero, nonzero[0], rtol=1e-12, atol=0.0):
        return False
    return line or bool(np.all(off > 0))


def _shapes(sizes: list[int], s: int, nested: list[bool]) -> list[tuple[int, ...]]:
    """Every ``(h_a)`` with ``1 ≤ h_a ≤ min(size_a, s)``, ``Σ (h_a − 1) ≤ s − 1`` and
    ``Π h_a ≥ s``: the value counts per dimension a connected s-set can have; less those
    dominated by a shape one value larger in a ``nested`` dimension (its cover contains
    theirs)."""
    out: list[tuple[int, ...]] = []
    caps = [min(size, s) for size in sizes]

    def grow(prefix: tuple[int, ...], left: int) -> None:
        if len(prefix) == len(sizes):
            if int(np.prod(prefix)) < s:
                return
            if left > 0 and any(n and h < c for n, h, c in zip(nested, prefix, caps)):
                return  # one more value in a nested dimension covers this shape
            out.append(prefix)
            return
        for h in range(1, min(caps[len(prefix)], left + 1) + 1):
            grow((*prefix, h), left - (h - 1))

    grow((), s - 1)
    return out


def _laplacian_eigenvalues(problem: PlacementProblem, count: int) -> np.ndarray:
    """The ``count`` smallest eigenvalues of the symmetrised traffic Laplacian, made safe.

    Each is lowered by a bound on its floating-point error and clipped at 0, so the bound built
    from them stays valid.
    """
    cached = problem._cache.get("laplacian_eigenvalues")
    if cached is not None and len(cached) >= count:
        return cached
    sym = problem.flow_csr() + problem.flow_csr().T
    dense = sym.toarray()
    lap = np.diag(dense.sum(axis=1)) - dense
    n = lap.shape[0]
    count = min(count, n)
    import scipy.linalg

    values = scipy.linalg.eigh(lap, eigvals_only=True, subset_by_index=[0, count - 1])
    norm = float(np.abs(lap).sum(axis=1).max()) if n else 0.0
    values = np.maximum(values - 64 * n * np.finfo(float).eps * norm, 0.0)
    problem._cache["laplacian_eigenvalues"] = values
    return values


def _dense_gl(problem: PlacementProblem) -> bool:
    """Whether the dense Gilmore–Lawler bound is computed for this problem by default."""
    n, m = problem.n_workers, problem.n_locations
    return problem.cluster is None or n * m <= GL_DENSE_LIMIT and m <= 3000


def needs_assignment_solver(problem: PlacementProblem) -> bool:
    """Whether bounding this problem solves linear assignments (scipy.optimize, slow to import:
    :func:`tsched.solvers.registry.solve` loads it before its clock starts when this says so)."""
    return problem.linear is not None or _dense_gl(problem)


def _stages(problem: PlacementProblem) -> list[tuple[str, Any]]:
    """The applicable bounds, cheapest first."""
    stages: list[tuple[str, Any]] = [("basic", basic_bound)]
    if problem.cluster is not None:
        stages.append(("profile", profile_bound))
    if _dense_gl(problem):
        stages.append(("gilmore-lawler", gilmore_lawler_bound))
    if problem.cluster is not None:
        stages.append(("spectral", spectral_bound))
        stages.append(("packing", packing_bound))
        if problem.n_workers <= DENSEST_MAX_WORKERS:
            stages.append(("partition", partition_bound))
        stages.append(("nested", nested_bound))
    return stages


def best_bound(
    problem: PlacementProblem, target: float | None = None, thorough: bool = False
) -> tuple[float | None, str | None]:
    """The largest applicable bound and its name; cached on the problem.

    Bounds are computed cheapest first (basic, profile, Gilmore–Lawler where dense matrices are
    affordable, spectral). With ``target`` (a plan's objective) the computation stops as soon as
    one bound meets it (within 1e-9 relative): the plan is then proved and the costlier bounds
    are not needed. A later call without a target, or with one not met yet, goes on where the
    last one stopped. The partition bound (densest-subgraph and CP-SAT searches, up to seconds)
    runs only when ``thorough``: ``auto`` asks for it, a plain ``solve`` with another method and
    the comparison runner's thousands of per-job solves do not.
    """
    done = problem._cache.get("best_bound")
    if done is not None:
        return done
    n, m = problem.n_workers, problem.n_locations
    if problem.n_edges == 0 and n <= m and n > 0:  # no interaction: a linear assignment
        exact = problem.linear is None or problem.linear.size <= GL_DENSE_LIMIT
        label = "linear-assignment" if exact else "basic"
        problem._cache["best_bound"] = (linear_floor(problem), label)
        return problem._cache["best_bound"]
    state = problem._cache.setdefault("best_bound_state", {"value": None, "name": None, "next": 0})
    stages = _stages(problem)

    def met() -> bool:
        if target is None or state["value"] is None:
            return False
        return bool(state["value"] >= target - 1e-9 * max(1.0, abs(target)))

    while state["next"] < len(stages) and not met():
        label, fn = stages[state["next"]]
        if label in THOROUGH_STAGES and not thorough:
            break  # seconds of search: only for callers that asked (auto, the benchmarks)
        state["next"] += 1
        bound = fn(problem)
        if bound is not None and (
            state["value"] is None or bound > state["value"] + 1e-12 * abs(state["value"])
        ):  # a later bound must beat the earlier one by more than rounding to take its name
            state["value"], state["name"] = float(bound), label
    result = (state["value"], state["name"])
    if state["next"] >= len(stages):
        problem._cache["best_bound"] = result
    return result
