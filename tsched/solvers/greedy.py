"""Topology-aware greedy placement with swap refinement.

Construction (clusters): for each level of the hierarchy (node, then each network level), the
domains whose free GPUs can hold the whole job are candidates; a few per level (those needing the
fewest nodes) are tried. Inside a domain, GPUs are ordered depth-first with the emptiest
sub-domains first, so the job takes whole nodes and whole leaves where it can; workers are then
laid on those GPUs by *graph growing*: each next GPU gets the unplaced worker with the most
traffic to the workers already placed, weighted by how close they are (less its own per-GPU
cost there, when the workload has ``gpu_costs``; the GPUs those costs alone would choose are then
one more candidate). The best candidate by objective is kept.

Construction (raw QAPs, no hierarchy): the heaviest facility goes to the most central location;
then repeatedly the facility with the most flow to the placed ones goes to the free location of
least added cost.

Refinement: best-improvement pair exchange over the used locations plus some free ones of the
chosen domain (a swap with a free location is a move), until no swap improves or the time limit.

Not exact: status ``optimal`` only when the lower bound meets the objective.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from tsched.problem import PlacementProblem, objective, swap_deltas_dense
from tsched.solvers.base import Count, Flag, SolverOutput, register
from tsched.solvers.baselines import domain_columns

__all__ = [
    "greedy",
    "local_search",
    "construct_cluster",
    "construct_dense",
    "candidate_sets",
    "SubProblem",
    "subproblem",
]

_OPTIONS = {
    "refine": "run the swap refinement (default true)",
    "max_refine_locations": "largest number of locations the dense refinement handles "
    "(default 1536; larger problems keep the construction)",
    "candidates": "domains tried per level (default 4)",
}


@register(
    "greedy",
    description="topology-aware domain choice + traffic graph growing + swaps",
    options=_OPTIONS,
    kinds={"refine": Flag(), "max_refine_locations": Count(0), "candidates": Count(1)},
)
def greedy(
    problem: PlacementProblem, *, time_limit: float | None, seed: int, options: dict[str, Any]
) -> SolverOutput:
    start = time.perf_counter()
    deadline = start + time_limit if time_limit is not None else None
    stats: dict[str, Any] = {}
    if problem.cluster is not None:
        assignment, pool, info = construct_cluster(problem, int(options.get("candidates", 4)))
        stats.update(info)
    else:
        assignment = construct_dense(problem)
        pool = np.arange(problem.n_locations)
    stats["construct_objective"] = objective(problem, assignment)
    stats["construct_seconds"] = round(time.perf_counter() - start, 4)
    iterations = 0
    limit = int(options.get("max_refine_locations", 1536))
    message = "greedy construction"
    if options.get("refine", True):
        extra = np.setdiff1d(pool, assignment)[: max(0, limit - problem.n_workers)]
        if problem.n_workers + len(extra) <= limit and problem.n_workers > 1:
            assignment, iterations = local_search(problem, assignment, extra, deadline)
            message += f" + {iterations} improving swaps"
        else:
            message += f" (refinement skipped: {problem.n_workers} workers > {limit})"
            stats["refine_skipped"] = True
    return SolverOutput(assignment, iterations=iterations, message=message, stats=stats)


# ---------------------------------------------------------------------- construction (clusters)
def _domain_order(cols: np.ndarray, chosen: np.ndarray, top: int) -> np.ndarray:
    """Locations of ``chosen`` ordered depth-first: emptiest sub-domains first at each level."""
    keys: list[np.ndarray] = [chosen]  # last resort: GPU order
    for k in range(0, top + 1):  # np.lexsort: last key is primary → add nearest level first
        ids = cols[chosen, k]
        _, inv, counts = np.unique(ids, return_inverse=True, return_counts=True)
        keys.append(ids)
        keys.append(-counts[inv])
    return chosen[np.lexsort(keys)]


def _fewest_nodes(cols: np.ndarray, ordered: np.ndarray, n: int) -> np.ndarray:
    """The first ``n`` locations of ``ordered`` restricted to the fewest nodes that hold ``n``.

    Nodes are taken by free GPU count (most first, ties in ``ordered``'s order), so a job fills
    whole nodes before it splits a group over half-busy ones; the chosen locations keep the
    hierarchy order of ``ordered``.
    """
    node = cols[ordered, 0]
    ids, first, counts = np.unique(node, return_index=True, return_counts=True)
    rank = np.lexsort((first, -counts))
    take = np.searchsorted(np.cumsum(counts[rank]), n) + 1
    chosen = np.isin(node, ids[rank[:take]])
    return ordered[chosen][:n]


def _nodes_needed(cols: np.ndarray, chosen: np.ndarray, n: int) -> int:
    counts = np.sort(np.unique(cols[chosen, 0], return_counts=True)[1])[::-1]
    return int(np.searchsorted(np.cumsum(counts), n) + 1)


def candidate_sets(
    problem: PlacementProblem, per_level: int = 4
) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """Candidate sets of exactly n locations: (level name, domain locations, chosen locations).

    For each level, the ``per_level`` domains holding the job with the fewest nodes; inside
    each, the first n GPUs in depth-first order (emptiest sub-domains first) and the same
    restricted to the fewest, fullest nodes. Duplicates are dropped.
    """
    n = problem.n_workers
    names, cols = domain_columns(problem)
    domains: list[tuple[int, np.ndarray]] = []
    for k in range(cols.shape[1]):
        ids, counts = np.unique(cols[:, k], return_counts=True)
        fitting = ids[counts >= n]
        if not len(fitting):
            continue
        doms = [np.flatnonzero(cols[:, k] == g) for g in fitting]
        doms.sort(key=lambda d: (_nodes_needed(cols, d, n), len(d)))
        domains.extend((k, d) for d in doms[:per_level])
    if not domains:  # no single domain holds the job: the whole cluster
        domains.append((len(names), np.arange(problem.n_locations)))
    out: list[tuple[str, np.ndarray, np.ndarray]] = []
    seen = set()
    for k, dom in domains:
        ordered = _domain_order(cols, dom, min(k, cols.shape[1] - 1))
        for locs in (ordered[:n], _fewest_nodes(cols, ordered, n)):
            key = np.sort(locs).tobytes()
            if key not in seen:
                seen.add(key)
                out.append((names[k] if k < len(names) else "cluster", dom, locs))
    return out


def construct_cluster(
    problem: PlacementProblem, per_level: int = 4
) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """Best graph-growing assignment over candidate domains; returns (assignment, domain, info)."""
    sym = problem.flow_symmetric()
    best: tuple[float, np.ndarray, np.ndarray, str] | None = None
    candidates = candidate_sets(problem, per_level)
    if problem.linear is not None:  # the GPUs the per-GPU costs alone would choose
        from tsched.solvers.lap import solve_lap

        cheapest = np.sort(solve_lap(problem)[0])
        candidates.append(("per-GPU costs", np.arange(problem.n_locations), cheapest))
    for level, dom, locs in candidates:
        assignment = _grow(problem, sym, locs)
        value = objective(problem, assignment)
        if best is None or value < best[0] - 1e-12:
            best = (value, assignment, dom, level)
    assert best is not None
    return best[1], best[2], {"domain_level": best[3], "domains_tried": len(candidates)}


def _grow(problem: PlacementProblem, sym: sp.csr_array, locs: np.ndarray) -> np.ndarray:
    """Lay workers on ``locs`` (in order) by traffic-weighted graph growing.

    Each next GPU takes the unplaced worker with the largest saving: traffic to the placed
    workers weighted by how close they are, less the worker's own cost on that GPU.
    """
    cl = problem.cluster
    lin = problem.linear
    assert cl is not None
    n = problem.n_workers
    loc_node = problem.location_node()[locs]
    nodes_used, node_of = np.unique(loc_node, return_inverse=True)
    type_cost = cl.type_cost_table()
    node_cost = cl.node_cost_between(nodes_used, nodes_used)
    intra = np.zeros(len(nodes_used))  # mean intra-node distance of each node's type
    for u, node in enumerate(nodes_used):
        g = int(cl.gpus_per_node[node])
        intra[u] = type_cost[cl.node_type_index[node], :g, :g].sum() / max(g * (g - 1), 1)
    top = float(max(node_cost.max(initial=0.0), intra.max(initial=0.0)))
    indptr, indices, data = sym.indptr, sym.indices, sym.data
    assignment = np.empty(n, dtype=np.int64)
    placed_node = np.full(n, -1)
    unplaced = np.ones(n, dtype=bool)
    gain = np.zeros(n)
    current = -1
    for pos in range(n):
        u = int(node_of[pos])
        if u != current:
            current = u
            placed = ~unplaced
            weight = np.zeros(n)
            weight[placed] = top - node_cost[u, placed_node[placed]]
            gain = sym @ weight
        score = gain if lin is None else gain - lin[:, locs[pos]]
        w = int(np.argmax(np.where(unplaced, score, -np.inf)))
        assignment[w] = locs[pos]
        placed_node[w] = u
        unplaced[w] = False
        lo, hi = indptr[w], indptr[w + 1]
        gain[indices[lo:hi]] += data[lo:hi] * (top - intra[u])
    return assignment


# ---------------------------------------------------------------------- construction (dense)
def construct_dense(problem: PlacementProblem) -> np.ndarray:
    """Greedy QAP construction on dense matrices. O(n²·m) time."""
    f = problem.flow_dense()
    d = problem.distance()
    n, m = problem.n_workers, problem.n_locations
    lin = problem.linear
    weight = f.sum(axis=0) + f.sum(axis=1)
    central = d.sum(axis=0) + d.sum(axis=1)
    assignment = np.full(n, -1, dtype=np.int64)
    free = np.ones(m, dtype=bool)
    first = int(np.argmax(weight))
    loc = int(np.argmin(central + (lin[first] if lin is not None else 0.0)))
    assignment[first], free[loc] = loc, False
    conn = f[first] + f[:, first]
    placed = [first]
    for _ in range(n - 1):
        mask = assignment < 0
        w = int(np.argmax(np.where(mask, conn, -np.inf)))
        locs = assignment[placed]
        added = d[:, locs] @ f[w, placed] + d[locs, :].T @ f[placed, w]
        if lin is not None:
            added = added + lin[w]
        loc = int(np.argmin(np.where(free, added, np.inf)))
        assignment[w], free[loc] = loc, False
        placed.append(w)
        conn += f[w] + f[:, w]
    return assignment


# ---------------------------------------------------------------------- refinement
@dataclass(frozen=True)
class SubProblem:
    """Dense matrices of a sub-problem: positions ``pos`` (problem locations), flows, costs."""

    pos: np.ndarray  # (k,) problem location of each position; the first n hold the start plan
    flow: np.ndarray  # (k, k), zero rows for dummies
    dist: np.ndarray  # (k, k)
    linear: np.ndarray  # (k, k)
    n_real: int

    def assignment(self, perm: np.ndarray) -> np.ndarray:
        return self.pos[perm[: self.n_real]]


def subproblem(problem: PlacementProblem, start: np.ndarray, extra: np.ndarray) -> SubProblem:
    """The start plan's locations plus ``extra`` free ones, as dense matrices."""
    n = problem.n_workers
    pos = np.concatenate([np.asarray(start, dtype=np.int64), np.asarray(extra, dtype=np.int64)])
    k = len(pos)
    flow = np.zeros((k, k))
    flow[:n, :n] = problem.flow_dense()
    if problem.cluster is not None and problem.peek("distance") is None:
        dist = problem.cluster.distance_matrix(problem.locations[pos])
    else:
        dist = np.ascontiguousarray(problem.distance()[np.ix_(pos, pos)])
    linear = np.zeros((k, k))
    if problem.linear is not None:
        linear[:n] = problem.linear[:, pos]
    return SubProblem(pos, flow, dist, linear, n)


def local_search(
    problem: PlacementProblem,
    assignment: np.ndarray,
    extra: np.ndarray,
    deadline: float | None,
    max_passes: int = 50,
) -> tuple[np.ndarray, int]:
    """Best-improvement pair exchange over the workers' locations plus ``extra`` free ones.

    Free locations enter as dummy workers with no traffic, so swapping with one moves a worker.
    Returns the improved assignment and the number of improving swaps. O(k²) per worker visited,
    k = workers + extra; row/column dot products are updated in O(k) per swap.
    """
    n = problem.n_workers
    sub = subproblem(problem, assignment, extra)
    pos, f, d = sub.pos, sub.flow, sub.dist  # fresh arrays, updated in place below
    lin = sub.linear if problem.linear is not None else None
    rowdot = np.einsum("ij,ij->i", f, d)
    coldot = np.einsum("ij,ij->j", f, d)
    swaps = 0
    for _ in range(max_passes):
        improved = False
        for r in range(n):
            if deadline is not None and time.perf_counter() > deadline:
                return pos[:n].copy(), swaps
            delta = swap_deltas_dense(f, d, r, rowdot, coldot, lin)
            s = int(np.argmin(delta))
            scale = max(1.0, abs(float(rowdot.sum())))
            if delta[s] >= -1e-12 * scale:
                continue
            # columns r and s of every row exchange their distances
            old_r, old_s = d[:, r].copy(), d[:, s].copy()
            rowdot += (f[:, r] - f[:, s]) * (old_s - old_r)
            coldot += (f[r, :] - f[s, :]) * (d[s, :] - d[r, :])
            d[[r, s]] = d[[s, r]]
            d[:, [r, s]] = d[:, [s, r]]
            if lin is not None:
                lin[:, [r, s]] = lin[:, [s, r]]
            pos[[r, s]] = pos[[s, r]]
            for i in (r, s):
                rowdot[i] = f[i] @ d[i]
                coldot[i] = f[:, i] @ d[:, i]
            swaps += 1
            improved = True
        if not improved:
            break
    return pos[:n].copy(), swaps
