"""The Gilmore–Lawler row bound read off the cluster's hierarchy, without dense matrices."""

from __future__ import annotations

from typing import Any

import numpy as np

from tsched.problem import PlacementProblem
from tsched.solvers.bounds.basic import linear_floor, nonnegative

__all__ = ["profile_bound"]


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
    if cl is None or n > problem.n_locations or n < 2 or not nonnegative(problem):
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
