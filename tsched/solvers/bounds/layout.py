"""A parallel layout's traffic as a product of small factor graphs.

A TP × CP × EP × DP × PP job's traffic is the Cartesian product of one small graph per
dimension; the factors give its exact spectrum (:mod:`~tsched.solvers.bounds.spectral`) and
densest weights on any number of workers.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tsched.problem import PlacementProblem
from tsched.solvers.bounds.densest import greedy_densest, search_inputs

__all__ = ["layout_factors", "layout_grid", "MAX_FACTOR", "layout_weights"]


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
    return problem.cached("layout_factors", lambda: _layout_factors(problem))


def _layout_factors(problem: PlacementProblem) -> list[np.ndarray] | None:
    """:func:`layout_factors`, uncached."""
    layout = problem.workload.layout if problem.workload is not None else None
    factors = None
    if layout is not None and layout.workers == problem.n_workers:
        factors = _grid_factors(problem, layout.rank_grid())
    if factors is None:
        grid = _rank_digits(problem)
        factors = None if grid is None else _grid_factors(problem, grid)
    return factors


def layout_grid(problem: PlacementProblem) -> np.ndarray | None:
    """The job's rank grid: its declared layout's when it has one of the job's size, else the
    finest numbering its pairs allow (:func:`_rank_digits`); None for neither. Nothing is
    assumed of the traffic along it."""
    layout = problem.workload.layout if problem.workload is not None else None
    if layout is not None and layout.workers == problem.n_workers:
        return layout.rank_grid()
    return _rank_digits(problem)


def grid_pairs(problem: PlacementProblem, grid: np.ndarray) -> tuple[np.ndarray, Any, np.ndarray]:
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
    coords, sym, differs = grid_pairs(problem, grid)
    if np.any(differs.sum(axis=1) != 1):
        return None
    axis_of = np.argmax(differs, axis=1)
    factors = []
    for axis, size in enumerate(grid.shape):
        if size == 1:
            continue
        mine = axis_of == axis
        factor = line_factor(grid, coords, axis, sym.row[mine], sym.col[mine], sym.data[mine])
        if factor is None:
            return None
        factors.append(factor)
    return factors


def line_factor(
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


def is_line_like(factor: np.ndarray) -> bool:
    """Whether a factor graph is one path or one cycle (connected, no vertex of degree > 2):
    then any h of its vertices, fewer than all, induce a union of paths."""
    adj = factor > 0
    return adj.sum(axis=1).max(initial=0) <= 2 and is_connected(adj)


def is_connected(adj: np.ndarray) -> bool:
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
    return problem.cached(
        "layout_weights",
        lambda: _layout_weights(factors, kmax),
        serves=lambda table: len(table) > kmax,
    )


def _layout_weights(factors: list[np.ndarray], kmax: int) -> np.ndarray:
    """:func:`layout_weights` from the layout's factor graphs, uncached."""
    sizes = [len(f) for f in factors]
    lines = [is_line_like(f) for f in factors]
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
            a, top = search_inputs(graph)
            upper = min(upper, 0.5 * float(np.sort(top[:, s - 1])[-s:].sum()))
            found = greedy_densest(a, s)
            if upper <= max(found, connected):  # no better than known, or greedy is exact
                connected = max(connected, found)
                continue
            from tsched.solvers import _densest_kernel as kernel

            visits = 1_000_000 if kernel.HAVE_NUMBA else 10_000  # cut short: an upper bound
            value, _ = kernel.search(
                a, top, s, np.full(s + 1, np.inf), found, visits, np.zeros(a.shape[0])
            )
            connected = max(connected, float(value))
        split = max((out[t] + out[s - t] for t in range(1, s // 2 + 1)), default=0.0)
        out[s] = max(connected, split, out[s - 1])
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
