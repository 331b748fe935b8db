"""Donath–Hoffman eigenvalue bounds on each level's cut, and the spectra they need."""

from __future__ import annotations

import numpy as np

from tsched.problem import PlacementProblem
from tsched.solvers.bounds.basic import linear_floor
from tsched.solvers.bounds.cuts import cut_levels, greedy_fill, parts_needed
from tsched.solvers.bounds.layout import layout_factors

__all__ = ["SPECTRAL_LIMIT", "spectral_bound", "product_eigenvalues"]


#: Largest worker count for which the spectral bound computes eigenvalues by default.
SPECTRAL_LIMIT = 4096


def spectral_cuts(
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
        count = max(parts_needed(s, n) for s in sizes_by_level)
        eigenvalues = _laplacian_eigenvalues(problem, count)
    out = []
    for sizes in sizes_by_level:
        fill = greedy_fill(sizes, n)
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
    levels = cut_levels(problem)
    if levels is None:
        return None
    e, sizes_by_level = levels
    cuts = spectral_cuts(problem, sizes_by_level, eigenvalues)
    if not cuts:
        return None
    bound = e[0] * float(problem.gb.sum())
    for k, cut in enumerate(cuts):
        bound += max(e[k + 1] - e[k], 0.0) * cut
    return bound + linear_floor(problem)


def product_eigenvalues(problem: PlacementProblem) -> np.ndarray | None:
    """All traffic-Laplacian eigenvalues of a parallel layout, ascending, from its product
    structure (:func:`layout_factors`); None when the traffic is not a Cartesian product
    (cached).

    The Laplacian of a Cartesian product is the Kronecker sum of the factors' Laplacians, so
    its eigenvalues are all the sums λ_a(i_a) over the dimensions (one eigenvalue per factor):
    the exact spectrum in O(edges + n log n) instead of a dense O(n³) eigendecomposition; the
    same safety margin as the dense path is taken off.
    """
    factors = layout_factors(problem)
    if factors is None:
        return None
    return problem.cached(
        "product_eigenvalues", lambda: _product_spectrum(factors, problem.n_workers)
    )


def _product_spectrum(factors: list[np.ndarray], n: int) -> np.ndarray:
    """:func:`product_eigenvalues` from the factor graphs of ``n`` workers, uncached."""
    values = np.zeros(1)
    norm = 0.0
    for factor in factors:
        lap = np.diag(factor.sum(axis=1)) - factor
        norm += float(np.abs(lap).sum(axis=1).max())
        values = np.add.outer(values, np.linalg.eigvalsh(lap)).reshape(-1)
    values = np.sort(values)
    return np.maximum(values - 64 * n * np.finfo(float).eps * max(norm, 1.0), 0.0)


def _laplacian_eigenvalues(problem: PlacementProblem, count: int) -> np.ndarray:
    """The ``count`` smallest eigenvalues of the symmetrised traffic Laplacian, made safe.

    Each is lowered by a bound on its floating-point error and clipped at 0, so the bound built
    from them stays valid.
    """
    return problem.cached(
        "laplacian_eigenvalues",
        lambda: _smallest_eigenvalues(problem, count),
        serves=lambda values: len(values) >= count,
    )


def _smallest_eigenvalues(problem: PlacementProblem, count: int) -> np.ndarray:
    """:func:`_laplacian_eigenvalues`, uncached."""
    sym = problem.flow_csr() + problem.flow_csr().T
    dense = sym.toarray()
    lap = np.diag(dense.sum(axis=1)) - dense
    n = lap.shape[0]
    count = min(count, n)
    import scipy.linalg

    values = scipy.linalg.eigh(lap, eigvals_only=True, subset_by_index=[0, count - 1])
    norm = float(np.abs(lap).sum(axis=1).max()) if n else 0.0
    return np.maximum(values - 64 * n * np.finfo(float).eps * norm, 0.0)
