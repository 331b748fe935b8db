"""The hierarchical cut decomposition every cut bound shares: level costs, domain sizes, steps."""

from __future__ import annotations

from typing import Any

import numpy as np

from tsched.problem import PlacementProblem
from tsched.solvers.bounds.basic import nonnegative

__all__ = ["DENSEST_MAX_PART"]


#: Largest part searched exactly for the densest-subgraph weights (a DGX node: 8 GPUs).
DENSEST_MAX_PART = 8


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


def cut_levels(problem: PlacementProblem) -> tuple[np.ndarray, list[np.ndarray]] | None:
    """The hierarchical cut decomposition shared by :func:`spectral_bound` and
    :func:`partition_bound`: ``(e, sizes_by_level)`` with ``e`` the running-minimum level costs
    (``objective ≥ e_0·W + Σ_ℓ (e_{ℓ+1} − e_ℓ)·cut_ℓ``) and, per level, the free GPUs of each
    domain. None where the decomposition does not apply."""
    cl = problem.cluster
    n = problem.n_workers
    if cl is None or n > problem.n_locations or n < 2 or not nonnegative(problem):
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


def level_steps(
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


def parts_needed(sizes: np.ndarray, n: int) -> int:
    return len(greedy_fill(sizes, n))


def greedy_fill(sizes: np.ndarray, n: int) -> np.ndarray:
    """Part sizes that fill the largest capacities first until ``n`` workers are placed."""
    caps = np.sort(np.asarray(sizes, dtype=float)[np.asarray(sizes) > 0])[::-1]
    cum = np.cumsum(caps)
    k = int(np.searchsorted(cum, n) + 1)
    fill = caps[:k].copy()
    fill[-1] -= cum[k - 1] - n
    return fill
