"""Lower bounds on the placement objective.

Every bound here is valid for any assignment of workers to *distinct* locations, so
``bound <= objective`` always holds; a bound that meets a solution's objective proves it optimal.
"""

from __future__ import annotations

import numpy as np

from tsched.problem import PlacementProblem

__all__ = ["basic_bound"]


def basic_bound(problem: PlacementProblem) -> float | None:
    """Every traffic edge costs at least the smallest distance between two distinct locations.

    For a square raw QAP the bound is also taken with the two matrices' roles swapped, and the
    larger one kept.

    ``Σ_e gb_e · d_min + Σ_i min_k C[i, k]`` (C the linear term of raw QAPs). Valid when all
    traffic is non-negative; returns None otherwise. O(edges) after ``d_min`` is known, and
    ``d_min`` is read from the cluster's link classes without a dense matrix.

    It is tight when the whole job fits in one uniform domain (one NVSwitch node, say): a plan
    that keeps every pair on the cheapest link is then reported ``optimal``.
    """
    if problem.n_locations < problem.n_workers or problem.n_workers == 0:
        return None
    if np.any(problem.gb < 0):
        return None
    pairs = float(problem.gb.sum()) * problem.min_pair_distance() if problem.n_edges else 0.0
    d = problem.given_distance
    if d is not None and problem.n_workers == problem.n_locations and problem.n_workers > 1:
        # A square QAP is symmetric in its two matrices (Σ F[i,j] D[p(i),p(j)] =
        # Σ D[k,l] F[q(k),q(l)] with q = p⁻¹), so the same argument holds with the roles swapped.
        off = ~np.eye(problem.n_workers, dtype=bool)
        if np.all(d[off] >= 0):
            pairs = max(pairs, float(d[off].sum()) * float(problem.flow_dense()[off].min()))
    total = pairs
    if problem.linear is not None:
        total += float(problem.linear.min(axis=1).sum())
    return total
