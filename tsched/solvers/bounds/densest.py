"""Densest-subgraph weights and the knapsack over domains.

``D[s]`` is the most traffic any ``s`` workers can keep among themselves; spreading the workers
over domains of given free capacities keeps at most ``max Σ_d D[s_d]`` inside them.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from tsched.problem import PlacementProblem
from tsched.solvers.bounds.symmetry import worker_orbits

__all__ = [
    "DENSEST_WORK",
    "densest_weights",
    "heaviest_pairs",
    "degree_ceiling",
    "kept_spread",
    "KNAPSACK_WORK",
    "KNAPSACK_COMPILED",
]


#: Search work per part size (nodes × workers; about a second with numba) before the
#: densest-subgraph search stops with an upper bound (a hundredth of it without numba). A work
#: budget, not a clock: the same bound on every machine.
DENSEST_WORK = 640_000_000


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
    return problem.cached(
        "densest_weights",
        lambda: _densest_weights(problem, kmax),
        serves=lambda table: len(table) > kmax,
    )


def _densest_weights(problem: PlacementProblem, kmax: int) -> np.ndarray:
    """:func:`densest_weights`, uncached."""
    from tsched.solvers import _densest_kernel as kernel

    a, top, order = _densest_inputs(problem)
    n = a.shape[0]
    visits = max(1000, DENSEST_WORK // n // (1 if kernel.HAVE_NUMBA else 100))
    orbit = worker_orbits(problem)[order]  # in the search's (degree) order
    graph = sp.csr_array(a)
    weights = [0.0, 0.0]
    for size in range(2, min(kmax, n) + 1):
        fallback = weights[-1] + float(top[:, size - 1].max())
        if size > 2:
            fallback = min(fallback, size / (size - 2) * weights[-1])
        incumbent = greedy_densest(a, size)
        value = _connected_densest(a, graph, orbit, size, np.array(weights), incumbent, visits)
        if value is None and orbit.max() + 1 < n:  # fewer orbits than workers: one per orbit
            value = _orbit_search(a, top, size, np.array(weights), incumbent, visits, orbit)
        elif value is None:
            value, _ = kernel.search(
                a, top, size, np.array(weights), incumbent, visits, np.zeros(n)
            )
        weights.append(min(float(value), fallback))
    return np.array(weights + [weights[-1]] * max(0, kmax + 1 - len(weights)))


def _connected_densest(
    a: np.ndarray,
    graph: sp.csr_array,
    orbit: np.ndarray,
    size: int,
    known: np.ndarray,
    incumbent: float,
    visits: int,
) -> float | None:
    """``D[size]`` from connected sets: a densest set is either connected, or the union of two
    sets with no traffic between them, weighing at most ``D[t] + D[size − t]``. The heaviest
    connected set is found exactly by enumerating the connected sets (sparse traffic has few)
    that hold one representative per orbit (the argument of :func:`_orbit_search`); when it
    weighs at least every such split it is ``D[size]``. None when it does not, or when the
    enumeration runs out of its visits: the caller falls back to the subset search."""
    from tsched.solvers import _densest_kernel as kernel

    indptr = graph.indptr.astype(np.int64)
    indices = graph.indices.astype(np.int64)
    data = graph.data.astype(np.float64)
    best = incumbent
    budget = visits
    labels = np.unique(orbit)
    for label in labels:
        members = np.flatnonzero(orbit == label)
        rep = int(members[0])
        allowed = orbit >= label
        allowed[rep] = False
        value, finished = kernel.connected_search(
            a, indptr, indices, data, allowed, rep, size, known, best, budget
        )
        if not finished:
            return None
        best = max(best, float(value))
    split = max((known[t] + known[size - t] for t in range(1, size)), default=0.0)
    # exact when the connected optimum dominates every split; else the subset search decides
    return best if best >= split - 1e-12 * max(1.0, abs(split)) else None


def _orbit_search(
    a: np.ndarray,
    top: np.ndarray,
    size: int,
    known: np.ndarray,
    incumbent: float,
    visits: int,
    orbit: np.ndarray,
) -> float:
    """The densest ``size``-set with symmetry (:func:`worker_orbits`): let O be the first orbit,
    in a fixed order, that a densest set S meets; an automorphism maps S onto a set of the same
    weight that holds O's representative and still meets no earlier orbit. So searching, for
    each orbit in turn, the sets that hold its representative among the workers of that orbit
    and the later ones covers every set. An upper bound where a search runs out of visits (the
    largest of the parts' values is then still an upper bound)."""
    from tsched.solvers import _densest_kernel as kernel

    labels = np.unique(orbit)
    best = incumbent
    budget = visits
    for rank, label in enumerate(labels):
        members = np.flatnonzero(orbit == label)
        rep = int(members[0])  # heaviest first: the search's order is by weighted degree
        rest = np.flatnonzero((orbit >= label) & (np.arange(len(orbit)) != rep))
        if len(rest) < size - 1:
            continue
        sub = np.ascontiguousarray(a[np.ix_(rest, rest)])
        share = max(1000, budget // (len(labels) - rank))
        value, _ = kernel.search(
            sub, np.ascontiguousarray(top[rest]), size - 1, known, best, share,
            np.ascontiguousarray(a[rep, rest]),
        )  # fmt: skip
        best = max(best, float(value))
        budget = max(0, budget - share)
    return best


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


def _densest_inputs(problem: PlacementProblem) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The kernel's inputs for the symmetrised traffic (:func:`search_inputs`) and the order."""
    return search_inputs(problem.flow_symmetric().toarray(), with_order=True)


def search_inputs(a: np.ndarray, with_order: bool = False) -> Any:
    """The densest-subgraph kernel's inputs: the symmetric weights, dense, vertices sorted by
    weighted degree (heaviest first), and ``top[u, t]``, the sum of u's ``t`` heaviest pairs
    (and, ``with_order``, the original index of each sorted vertex)."""
    a = np.asarray(a, dtype=np.float64)
    order = np.argsort(-a.sum(axis=1), kind="stable")
    a = np.ascontiguousarray(a[np.ix_(order, order)])
    rows = -np.sort(-a, axis=1)
    top = np.concatenate([np.zeros((len(a), 1)), np.cumsum(rows, axis=1)], axis=1)
    return (a, top, order) if with_order else (a, top)


def greedy_densest(a: np.ndarray, size: int) -> float:
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
#: programming in :func:`kept_upper`; larger ones take its linear relaxation.
KNAPSACK_WORK = 20_000_000


#: ... and above this much, by the compiled loop (below it, loading numba costs more than it saves).
KNAPSACK_COMPILED = 200_000


def kept_upper(
    weights: np.ndarray, capacities: np.ndarray, n: int, ceiling: np.ndarray | None = None
) -> float:
    """Most traffic that can stay inside domains of the given free capacities when ``n`` workers
    are spread over them: ``max Σ_d D[s_d]`` with ``Σ s_d = n`` and ``s_d ≤ cap_d`` (a knapsack
    over the domains). Sizes beyond ``len(weights) − 1`` use the density bound
    ``D[s] ≤ D[k]·s(s−1)/(k(k−1))`` (a pair's share of the densest set never grows with s).

    Solved exactly by dynamic programming up to :data:`KNAPSACK_WORK`; above it, by its linear
    relaxation, which can only be larger: each domain's ``D`` is replaced by its upper concave
    envelope on ``[0, cap]`` and the n workers take the steepest envelope segments of all
    domains first (domains of one capacity share their segments). Grouped by capacity, that is
    O(distinct capacities · cap log) at any cluster size. ``ceiling``: a cap on every ``D[s]``
    (:func:`degree_ceiling`), for weights that bound densest subgraphs."""
    caps = np.minimum(np.asarray(capacities, dtype=np.int64), n)
    caps = caps[caps > 0]
    span = int(caps.max()) if len(caps) else 0
    d = kept_table(weights, span, ceiling)
    if len(caps) * span * n > KNAPSACK_WORK:
        return kept_upper_relaxed(d, caps, n)
    if len(caps) * span * n > KNAPSACK_COMPILED:
        from tsched.solvers import _densest_kernel as kernel

        if kernel.HAVE_NUMBA:  # the same loop compiled: a knapsack per level and form
            return float(kernel.knapsack(np.ascontiguousarray(d, dtype=np.float64), caps, n))
    return float(_knapsack(d, caps, n)[0][n])


def _knapsack(
    d: np.ndarray, caps: np.ndarray, n: int, *, record: bool = False
) -> tuple[np.ndarray, np.ndarray | None]:
    """``best[t] = max Σ_c d[s_c]`` over counts ``s_c ≤ caps[c]`` summing to t (−inf where none
    do), and with ``record`` the count each domain takes on the way to each t."""
    best = np.full(n + 1, -np.inf)
    best[0] = 0.0
    took = np.zeros((len(caps), n + 1), dtype=np.int64) if record else None
    for c, cap in enumerate(caps.tolist()):
        nxt = best.copy()
        for s in range(1, int(cap) + 1):
            cand = best[: n + 1 - s] + d[s]
            if took is None:
                np.maximum(nxt[s:], cand, out=nxt[s:])
            else:
                better = np.flatnonzero(cand > nxt[s:]) + s
                nxt[better], took[c, better] = cand[better - s], s
        best = nxt
    return best, took


def kept_spread(table: np.ndarray, capacities: np.ndarray, n: int) -> np.ndarray | None:
    """The spread that attains :func:`kept_upper`'s exact knapsack: a worker count per domain
    (``capacities``, in that order) summing to ``n`` that maximises ``Σ_d table[s_d]``; None
    where ``n`` workers do not fit. ``table``: ``D[s]`` up to the largest capacity."""
    caps = np.minimum(np.asarray(capacities, dtype=np.int64), n)
    best, took = _knapsack(table, caps, n, record=True)
    if not np.isfinite(best[n]):
        return None
    assert took is not None
    sizes = np.zeros(len(caps), dtype=np.int64)
    left = n
    for c in range(len(caps) - 1, -1, -1):
        sizes[c] = took[c, left]
        left -= sizes[c]
    return sizes


def kept_table(weights: np.ndarray, span: int, ceiling: np.ndarray | None = None) -> np.ndarray:
    """``D[s]`` for s = 0 … ``span``: the given weights (searched up to ``k = len − 1``) and the
    density bound ``D[k]·s(s−1)/(k(k−1))`` beyond them, each capped by ``ceiling`` where given
    (:func:`degree_ceiling`: the density bound grows with s², sparse traffic only with s)."""
    k = len(weights) - 1
    d = np.empty(span + 1)
    d[: min(k, span) + 1] = weights[: min(k, span) + 1]
    if span > k:
        big = np.arange(k + 1, span + 1, dtype=float)
        d[k + 1 :] = weights[k] * big * (big - 1) / max(k * (k - 1), 1)
    if ceiling is not None:
        np.minimum(d, ceiling[: span + 1] if len(ceiling) > span else _extend(ceiling, span), out=d)
    return d


def _extend(ceiling: np.ndarray, span: int) -> np.ndarray:
    """A ceiling table continued with its last value (every worker already counted)."""
    out = np.full(span + 1, ceiling[-1] if len(ceiling) else 0.0)
    out[: len(ceiling)] = ceiling
    return out


def degree_ceiling(problem: PlacementProblem) -> np.ndarray:
    """``C[s]`` for s = 0 … n: half the s largest weighted degrees of the symmetrised traffic.

    Inside a set S every pair is counted from both of its ends, and a worker's pairs inside S
    weigh at most its whole degree, so ``w(S) ≤ ½ Σ_{u∈S} deg(u) ≤ C[|S|]``. It grows linearly
    with s, where the density bound grows with s²: for sparse traffic (rings, pipelines, serving
    replicas) it is the tighter one for large domains — a ring's members keep at most the ring.
    Cached; O(n log n)."""

    def build() -> np.ndarray:
        sym = problem.flow_symmetric()
        degree = np.sort(np.asarray(sym.sum(axis=1)).ravel())[::-1]
        out = np.zeros(problem.n_workers + 1)
        out[1:] = 0.5 * np.cumsum(degree)
        return out

    return problem.cached("degree_ceiling", build)


def kept_upper_relaxed(d: np.ndarray, caps: np.ndarray, n: int) -> float:
    """The linear relaxation of :func:`kept_upper`'s knapsack (``d[s]``: the weight bound of s
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
