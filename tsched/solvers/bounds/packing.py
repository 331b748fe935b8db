"""The packing bound: each level's cut bounded without search.

Heaviest-pair weights in a knapsack over the domains, the eigenvalue bound and the
line-projection bound; the largest is kept per level.
"""

from __future__ import annotations

import numpy as np

from tsched.problem import PlacementProblem
from tsched.solvers.bounds.basic import linear_floor
from tsched.solvers.bounds.cuts import cut_levels, level_steps
from tsched.solvers.bounds.densest import degree_ceiling, heaviest_pairs, kept_upper
from tsched.solvers.bounds.fibers import with_fibers
from tsched.solvers.bounds.groups import domain_capacity_cuts
from tsched.solvers.bounds.layout import layout_weights
from tsched.solvers.bounds.projection import projection_cuts
from tsched.solvers.bounds.spectral import spectral_cuts

__all__ = ["packing_weights", "packing_bound"]


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
    return problem.cached(
        "packing_weights",
        lambda: _packing_weights(problem, kmax),
        serves=lambda table: len(table) > kmax,
    )


def _packing_weights(problem: PlacementProblem, kmax: int) -> np.ndarray:
    """:func:`packing_weights`, uncached."""
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
    return out


def packing_bound(problem: PlacementProblem) -> float | None:
    """The hierarchical cut bound of :func:`spectral_bound` with a second bound on each cut
    that needs no search: ``cut_ℓ ≥ W − max Σ_d D⁺[s_d]``, the traffic that cannot stay inside
    level-ℓ domains however the workers are spread over their free GPUs, with the heaviest-pairs
    weights :func:`packing_weights` (up to :data:`DENSEST_MAX_PART` workers per domain) in the
    knapsack :func:`kept_upper`. Each level keeps the largest of this, the eigenvalue bound
    and the line-projection bound (:func:`projection_cuts`).

    Milliseconds at any size (sparse), so it runs by default where :func:`partition_bound`'s
    searches do not. It closes the node level of a fragmented cluster: a TP group split over
    two half-free nodes loses the traffic between its halves, which the eigenvalues see only in
    part.
    """
    levels = cut_levels(problem)
    if levels is None:
        return None
    e, sizes_by_level = levels
    steps, kmax = level_steps(problem, e, sizes_by_level)
    weights = packing_weights(problem, kmax)[: kmax + 1]
    cuts = level_cuts(problem, sizes_by_level, steps, weights)
    bound = e[0] * float(problem.gb.sum()) + float(np.dot(steps, cuts))
    return bound + linear_floor(problem)


def level_cuts(
    problem: PlacementProblem,
    sizes_by_level: list[np.ndarray],
    steps: np.ndarray,
    weights: np.ndarray,
) -> list[float]:
    """Per level with a cost step (0 elsewhere), the largest of four lower bounds on its cut:
    the traffic the densest ``weights`` cannot keep inside its domains (:func:`kept_upper`),
    the eigenvalue bound, the line-projection bound and the heavy groups its domains cannot
    hold whole (:func:`domain_capacity_cuts`)."""
    n = problem.n_workers
    spectral = spectral_cuts(problem, sizes_by_level)
    projection = projection_cuts(problem, sizes_by_level, steps)
    capacity = domain_capacity_cuts(problem, sizes_by_level, steps)
    total = float(problem.gb.sum())
    out = []
    for k, sizes in enumerate(sizes_by_level):
        if steps[k] <= 0:
            out.append(0.0)
            continue
        span = int(min(np.max(sizes, initial=0), n))
        table = with_fibers(problem, weights, span, degree_ceiling(problem))
        cut = max(total - kept_upper(table, sizes, n), 0.0)
        if spectral:
            cut = max(cut, spectral[k])
        if projection:
            cut = max(cut, projection[k])
        if capacity:
            cut = max(cut, capacity[k])
        out.append(cut)
    return out
