"""Line-projection bounds on a layout's cuts: the lines of each dimension a domain must touch.

From the discrete Loomis–Whitney inequality; see :func:`projection_cuts`.
"""

from __future__ import annotations

import itertools

import numpy as np

from tsched.problem import PlacementProblem
from tsched.solvers.bounds.densest import kept_upper
from tsched.solvers.bounds.layout import (
    grid_pairs,
    is_connected,
    is_line_like,
    layout_factors,
    line_factor,
)

__all__ = ["projection_cuts"]


def _split_cost(factor: np.ndarray, line: bool) -> tuple[float, float]:
    """``(α, β)``: a split of the factor graph over domains cuts at least ``α·(k − 1)`` of its
    weight (k domains touch it) and at least ``β`` per domain that holds part of it but not all
    (w: its lightest pair).

    A connected factor's parts are joined by at least k − 1 of its edges (its quotient stays
    connected), and each part held short has an edge leaving it, each edge leaving two parts at
    most: α = w, β = w/2. A cycle cuts one edge per arc: α = w·m/(m−1), β = w. A complete
    graph cuts ``(k−1)(2m−k)/2`` pairs at least, and a part of x < m ranks ``x(m − x) ≥ m − 1``
    pairs, each counted from both sides: α = w·m/2, β = w(m−1)/2. (0, 0) for a factor in
    pieces."""
    m = len(factor)
    off = factor[~np.eye(m, dtype=bool)]
    nonzero = off[off > 0]
    if m < 2 or not len(nonzero):
        return 0.0, 0.0
    w = float(nonzero.min())
    if np.all(off > 0):
        return w * m / 2, w * (m - 1) / 2
    if line:
        cycle = np.count_nonzero(factor) // 2 == m and m > 2
        return (w * m / (m - 1), w) if cycle else (w, w / 2)
    return (w, w / 2) if is_connected(factor > 0) else (0.0, 0.0)


def projection_cuts(
    problem: PlacementProblem,
    sizes_by_level: list[np.ndarray],
    steps: np.ndarray | None = None,
) -> list[float]:
    """A lower bound on each level's cut for a parallel layout, from how many lines of each
    dimension a domain's workers must touch; [] for traffic without a rank grid.

    A line of dimension a (ranks equal but in coordinate a) touched by k domains loses at least
    ``α_a·(k − 1)`` (:func:`_line_split_costs`). Summed over lines, ``cut ≥ Σ_a α_a (Σ_P L_a(P) −
    lines_a)`` with ``L_a(P)`` the lines of dimension a that domain P touches, the size of P's
    projection along a. Or, per dimension, ``β_a`` for every line a domain touches but does not
    hold whole: ``β_a (Σ_P L_a(P) − Σ_P ⌊|P|/m_a⌋)`` (a ring split in two loses two pairs, not
    one); every choice of form per dimension is a bound, and the largest is kept.

    The discrete Loomis–Whitney inequality ``|P|^{d−1} ≤ Π_a L_a(P)``, with
    ``⌈|P|/m_a⌉ ≤ L_a(P) ≤ min(lines_a, |P|)``, bounds ``Σ_a c_a L_a(P)`` (c: α or β) below
    by ``f(|P|)``: a convex problem in ``log L``, solved by water-filling (the value at the
    bisection's lower end, so never above its optimum). The domains' sizes are then chosen to
    minimise ``Σ_P f(|P|)`` less the per-part terms within their free GPUs (:func:`kept_upper`
    on the negated costs).

    It sees what neither eigenvalues nor densest subgraphs see in large domains: four spine
    groups of 1,024 GPUs holding a TP8 × PP8 × DP64 job must cut 1,536 pipeline pairs (or more
    expensive ones) — exactly what the best plan cuts.
    """
    best = projection_best(problem, sizes_by_level, steps)
    return [value for value, _ in best] if best else []


def projection_best(
    problem: PlacementProblem,
    sizes_by_level: list[np.ndarray],
    steps: np.ndarray | None = None,
) -> list[tuple[float, tuple[np.ndarray, float] | None]]:
    """Per level, :func:`projection_cuts`'s bound and the ``(cost, const)`` form that gives it
    (None where no form beats 0); [] without a rank grid. Levels whose cost ``steps`` are 0
    (no pair pays for crossing them) are not bounded. Cached for the level sizes: the
    packing, partition and nested bounds all ask."""
    live = [True] * len(sizes_by_level) if steps is None else [bool(x > 0) for x in steps]
    key = ("projection_best", tuple(live),
           tuple(np.asarray(s, dtype=float).tobytes() for s in sizes_by_level))  # fmt: skip
    return problem.cached(key, lambda: _projection_best(problem, sizes_by_level, live))


def _projection_best(
    problem: PlacementProblem, sizes_by_level: list[np.ndarray], live: list[bool]
) -> list[tuple[float, tuple[np.ndarray, float] | None]]:
    """:func:`projection_best` for the levels marked ``live``, uncached."""
    forms = _projection_forms(problem, sizes_by_level)
    out: list[tuple[float, tuple[np.ndarray, float] | None]] = []
    if any(forms):
        n = problem.n_workers
        for level, sizes, wanted in zip(forms, sizes_by_level, live, strict=True):
            best: tuple[float, tuple[np.ndarray, float] | None] = (0.0, None)
            for cost, const in level if wanted else ():
                value = const - kept_upper(-cost, np.asarray(sizes), n)
                if value > best[0]:
                    best = (value, (cost, const))
            out.append(best)
    return out


def _projection_forms(
    problem: PlacementProblem, sizes_by_level: list[np.ndarray]
) -> list[list[tuple[np.ndarray, float]]]:
    """Per level, every ``(cost, const)`` of :func:`projection_cuts`: the level's cut is at least
    ``const + Σ_P cost[|P|]`` over its domains P, for each rank grid and each choice of form
    per dimension (cached: they depend on the largest domain of each level only).

    A part's credit for the lines it holds whole (``β_a⌊|P|/m_a⌋``) is taken only with what
    holding one costs: a whole line of dimension a is m_a ranks that differ in coordinate a
    alone, so they lie on m_a different lines of every other dimension (``L_b ≥ m_a``). Each
    part's cost is the least over which dimensions it holds whole lines of. Without this, a
    rack of an NVL72 cluster could be credited with whole data-parallel rings while touching
    only as many tensor-parallel groups as it holds whole."""
    n = problem.n_workers
    spans = tuple(int(min(np.max(s, initial=0), n)) for s in sizes_by_level)
    return problem.cached(("projection_forms", spans), lambda: _forms(problem, spans))


def _forms(
    problem: PlacementProblem, spans: tuple[int, ...]
) -> list[list[tuple[np.ndarray, float]]]:
    """:func:`_projection_forms` for levels whose largest domains hold ``spans`` workers,
    uncached."""
    n = problem.n_workers
    out: list[list[tuple[np.ndarray, float]]] = [[] for _ in spans]
    for m, alpha, beta in _line_split_costs(problem):
        d = len(m)
        lines = n / m
        uses: list[np.ndarray] = []
        rows = []  # (form, dimensions a part holds whole lines of): one water-filling each
        for per_part in itertools.product((False, True), repeat=d):
            use = np.array(per_part, dtype=bool)
            if np.any(use & (beta <= 0)):
                continue
            dims = np.flatnonzero(use).tolist()
            for r in range(len(dims) + 1):
                rows += [(len(uses), list(held)) for held in itertools.combinations(dims, r)]
            uses.append(use)
        if not rows:
            continue
        coefs = np.array([np.where(uses[u], beta, alpha) for u, _ in rows])
        floors = np.ones((len(rows), d))
        for row, (_, held) in enumerate(rows):
            for a in held:  # a whole line of a: m_a ranks on m_a lines of each other dimension
                floors[row] = np.maximum(floors[row], np.where(np.arange(d) == a, 1.0, m[a]))
        for k, span in enumerate(spans):
            f = _projection_costs(coefs, m, lines, span, floors)
            whole = np.floor(np.arange(span + 1)[:, None] / m)  # lines a part can hold
            cost = np.full((len(uses), span + 1), np.inf)
            for row, (u, held) in enumerate(rows):  # the least over what a part holds whole
                np.minimum(cost[u], f[row] - (whole[:, held] * beta[held]).sum(axis=1), out=cost[u])
            for u, use in enumerate(uses):
                out[k].append((cost[u], -float(np.dot(alpha[~use], lines[~use]))))
    return out


def _line_split_costs(
    problem: PlacementProblem,
) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """``(m, α, β)`` per dimension of each rank grid :func:`projection_cuts` can use: the
    dimension's size and the least traffic a line of it loses per extra domain it is split
    over, and per domain holding part of it (:func:`_split_cost`).

    For a product (:func:`layout_factors`) each factor's :func:`_split_cost`. And on the
    declared layout's own grid when that is not the product's (an MoE job, whose dense
    gradients join ranks that differ in expert and data coordinates at once, factors only with
    the two merged): only the pairs that differ in one coordinate are counted — leaving pairs
    out never raises a cut — and per dimension the factor's split cost if every line carries
    the same factor graph, else (w, w/2) with w the lightest pair if every line is connected,
    else 0."""
    out = []
    factors = layout_factors(problem)
    if factors is not None:
        m = np.array([len(f) for f in factors], dtype=float)
        costs = np.array([_split_cost(f, is_line_like(f)) for f in factors]).reshape(-1, 2)
        out.append((m, costs[:, 0], costs[:, 1]))
    layout = problem.workload.layout if problem.workload is not None else None
    n = problem.n_workers
    if layout is None or layout.workers != n:
        return out
    grid = layout.rank_grid()
    if factors is not None and len(factors) == sum(size > 1 for size in grid.shape):
        return out  # the product is on this grid already
    coords, sym, differs = grid_pairs(problem, grid)
    single = differs.sum(axis=1) == 1
    axis_of = np.argmax(differs, axis=1)
    sizes, costs = [], []
    for axis, size in enumerate(grid.shape):
        if size == 1:
            continue
        mine = single & (axis_of == axis)
        sizes.append(float(size))
        if not mine.any():
            costs.append((0.0, 0.0))
            continue
        rows, cols, data = sym.row[mine], sym.col[mine], sym.data[mine]
        factor = line_factor(grid, coords, axis, rows, cols, data)
        if factor is not None:
            costs.append(_split_cost(factor, is_line_like(factor)))
            continue
        import scipy.sparse as sp
        from scipy.sparse.csgraph import connected_components

        graph = sp.coo_array((data, (rows, cols)), shape=(n, n))
        pieces = connected_components(graph, directed=False)[0]
        w = float(data.min()) if pieces == n // size else 0.0
        costs.append((w, w / 2))
    split = np.array(costs).reshape(-1, 2)
    out.append((np.array(sizes), split[:, 0], split[:, 1]))
    return out


def _projection_costs(
    alpha: np.ndarray,
    m: np.ndarray,
    lines: np.ndarray,
    span: int,
    floors: np.ndarray,
) -> np.ndarray:
    """``f[c, s]`` for each row c of ``alpha`` and s = 0 … ``span``: a lower bound on
    ``Σ_a α_a L_a`` over sets of s ranks that touch at least ``floors[c, a]`` lines of each
    dimension (and ``⌈s/m_a⌉``; :func:`projection_cuts`), by water-filling in ``log L``, all
    rows at once; ∞ where a floor exceeds ``min(lines_a, s)`` (no set of that size touches so
    many lines)."""
    s = np.arange(1, span + 1, dtype=float)[None, :, None]
    alpha = np.asarray(alpha, dtype=float)[:, None, :]
    most = np.maximum(np.minimum(lines, s), np.ceil(s / m))
    least = np.maximum(np.maximum(np.ceil(s / m), 1.0), floors[:, None, :])
    impossible = np.any(least > most, axis=2)
    lo = np.log(np.minimum(least, most))
    hi = np.log(np.broadcast_to(most, lo.shape))
    need = (len(m) - 1) * np.log(s[..., 0])
    free = alpha <= 0  # costless dimensions touch all the lines they may
    log_alpha = np.log(np.where(free, 1.0, alpha))
    # x_a = log(λ/α_a) clipped to [lo_a, hi_a]: λ between these spans every clipping
    low = (log_alpha + lo).min(axis=2) - 1.0
    high = (log_alpha + hi).max(axis=2) + 1.0
    for _ in range(64):  # bisection on the multiplier: Σ log L_a reaches `need`
        mid = 0.5 * (low + high)
        x = np.where(free, hi, np.clip(mid[..., None] - log_alpha, lo, hi))
        enough = x.sum(axis=2) >= need - 1e-12
        high = np.where(enough, mid, high)
        low = np.where(enough, low, mid)
    x = np.where(free, hi, np.clip(low[..., None] - log_alpha, lo, hi))
    value = np.where(impossible, np.inf, (alpha * np.exp(x)).sum(axis=2))
    return np.concatenate([np.zeros((len(value), 1)), value], axis=1)
