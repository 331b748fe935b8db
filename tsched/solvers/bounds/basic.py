"""Every traffic edge at the cheapest link, and the least total of per-GPU linear costs."""

from __future__ import annotations

import numpy as np

from tsched.problem import PlacementProblem

__all__ = ["GL_DENSE_LIMIT", "basic_bound", "linear_floor"]


#: Largest n·m for which the dense Gilmore–Lawler bound is computed by default.
GL_DENSE_LIMIT = 4_000_000


def nonnegative(problem: PlacementProblem) -> bool:
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
    if not nonnegative(problem):
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
    return problem.cached("linear_floor", lambda: _least_linear(problem.linear))


def _least_linear(lin: np.ndarray) -> float:
    """:func:`linear_floor` of the table ``lin`` (workers × locations), uncached."""
    if lin.shape[0] <= lin.shape[1] and lin.size <= GL_DENSE_LIMIT:
        from scipy.optimize import linear_sum_assignment  # slow to import: only when used

        rows, cols = linear_sum_assignment(lin)
        return float(lin[rows, cols].sum())
    return float(lin.min(axis=1).sum())
