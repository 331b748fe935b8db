"""The Gilmore–Lawler bound: minimal scalar products, then a linear assignment."""

from __future__ import annotations

import numpy as np

from tsched.problem import PlacementProblem
from tsched.solvers.bounds.basic import GL_DENSE_LIMIT, linear_floor, nonnegative

__all__ = ["min_scalar_products", "gilmore_lawler_bound", "needs_assignment_solver"]


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
    if n > m or n == 0 or not nonnegative(problem):
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


def dense_gilmore_lawler(problem: PlacementProblem) -> bool:
    """Whether the dense Gilmore–Lawler bound is computed for this problem by default."""
    n, m = problem.n_workers, problem.n_locations
    return problem.cluster is None or n * m <= GL_DENSE_LIMIT and m <= 3000


def needs_assignment_solver(problem: PlacementProblem) -> bool:
    """Whether bounding this problem solves linear assignments (scipy.optimize, slow to import:
    :func:`tsched.solvers.registry.solve` loads it before its clock starts when this says so)."""
    return problem.linear is not None or dense_gilmore_lawler(problem)
