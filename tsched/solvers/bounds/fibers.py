"""Densest weights of large sets from a layout's slices: a line of small fibers.

A parallel layout's traffic along its data-parallel ring or pipeline path joins only
neighbouring coordinates. Cut the workers into *fibers*, one per coordinate of such a dimension
(all other coordinates free): every pair is inside a fiber or between neighbouring fibers. A set
holding ``c_j`` workers of fiber j then keeps at most ``Σ_j In_j[c_j] + Σ_j Between_j(c_j,
c_{j+1})`` inside itself, each term maximised on its own (the densest c workers of a fiber; the
heaviest pairs between an a-subset of one fiber and a b-subset of the next). A dynamic programme
over the fibers (their counts, the running total) gives the largest such sum for every set size
at once — an upper bound on the densest-subgraph weight ``D[s]`` for s far beyond what a search
over subsets reaches (the racks of an NVL72 cluster hold 72), and exact for a ring of cliques
such as an MoE job's expert groups along its data-parallel ring.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tsched.problem import PlacementProblem
from tsched.solvers.bounds.densest import kept_table
from tsched.solvers.bounds.layout import grid_pairs, layout_grid

__all__ = ["FIBER_MAX", "FIBER_WORK", "fiber_weights", "with_fibers"]


#: Largest fiber (workers) whose inside and between weights are enumerated exactly (2^size sets).
FIBER_MAX = 16
#: Most element operations of the programme over the fibers (about a second in numpy).
FIBER_WORK = 400_000_000


def fiber_weights(problem: PlacementProblem, span: int) -> np.ndarray | None:
    """``D[s]`` for s = 0 … ``span`` (at most n): an upper bound on the traffic inside any s
    workers, from the best fiber cut of the layout's grid (module docstring); the smallest
    over every dimension that qualifies. None when the traffic is no layout, no dimension joins
    only neighbouring coordinates with fibers of at most :data:`FIBER_MAX` workers, or the
    programme would exceed :data:`FIBER_WORK` (cached; recomputed for a larger span)."""
    span = min(int(span), problem.n_workers)
    return problem.cached(
        "fiber_weights",
        lambda: _fiber_weights(problem, span),
        serves=lambda table: table is None or len(table) > span,
    )


def with_fibers(
    problem: PlacementProblem, weights: np.ndarray, span: int, ceiling: np.ndarray | None
) -> np.ndarray:
    """``weights`` (searched up to their length) continued to ``span`` as :func:`kept_table`
    does, and capped by :func:`fiber_weights` where the layout has them: the table the knapsack
    over domains of up to ``span`` free GPUs takes."""
    table = kept_table(weights, span, ceiling)
    fibers = fiber_weights(problem, span) if span > len(weights) - 1 else None
    if fibers is not None:
        reach = min(len(fibers), len(table))
        np.minimum(table[:reach], fibers[:reach], out=table[:reach])
    return table


def _fiber_weights(problem: PlacementProblem, span: int) -> np.ndarray | None:
    grid = layout_grid(problem)
    if grid is None or span < 2:
        return None
    coords, sym, _ = grid_pairs(problem, grid)
    n = problem.n_workers
    best = None
    for axis, m in enumerate(grid.shape):
        if m < 3 or n // m > FIBER_MAX:
            continue
        delta = (coords[sym.col, axis] - coords[sym.row, axis]) % m
        if np.any((delta != 0) & (delta != 1) & (delta != m - 1)):
            continue  # a pair joins fibers that are not neighbours
        f = n // m
        if m * (f + 1) ** 3 * (span + 1) > FIBER_WORK:
            continue
        fibers = np.moveaxis(grid, axis, 0).reshape(m, f)
        table = _line_table(problem, fibers, span)
        best = table if best is None else np.minimum(best, table)
    return best


def _line_table(problem: PlacementProblem, fibers: np.ndarray, span: int) -> np.ndarray:
    """The programme over a cycle of fibers (``fibers[j]``: the workers of fiber j; pairs only
    inside a fiber or between fibers j and j + 1 mod m)."""
    dense = problem.flow_symmetric()
    m, f = fibers.shape
    cache: dict[Any, np.ndarray] = {}

    def inside(j: int) -> np.ndarray:
        block = dense[fibers[j]][:, fibers[j]].toarray()
        key = ("in", block.tobytes())
        if key not in cache:
            cache[key] = _inside_weights(block)
        return cache[key]

    def between(j: int) -> np.ndarray:
        nxt = fibers[(j + 1) % m]
        block = dense[fibers[j]][:, nxt].toarray()
        key = ("between", block.tobytes())
        if key not in cache:
            cache[key] = _between_weights(block)
        return cache[key]

    ins = [inside(j) for j in range(m)]
    bets = [between(j) for j in range(m)]  # bets[j]: fiber j to fiber j + 1 (the last wraps)
    out = np.full(span + 1, -np.inf)
    for first in range(f + 1):  # the count of fiber 0, fixed so the wrap can be priced
        # state[c, t]: best weight with fiber j holding c workers and t workers so far
        state = np.full((f + 1, span + 1), -np.inf)
        if first <= span:
            state[first, first] = ins[0][first]
        for j in range(1, m):
            state = _step(state, bets[j - 1], ins[j], span)
        closing = bets[m - 1][:, first]  # fiber m − 1 back to fiber 0
        out = np.maximum(out, np.max(state + closing[:, None], axis=0))
    out[0] = 0.0
    return np.maximum.accumulate(np.maximum(out, 0.0))


def _step(state: np.ndarray, bet: np.ndarray, ins: np.ndarray, span: int) -> np.ndarray:
    """One fiber more: ``new[c, t + c] = max_p state[p, t] + bet[p, c] + ins[c]``."""
    f = state.shape[0] - 1
    moved = np.max(state[:, None, :] + bet[:, :, None], axis=0)  # (c, t)
    new = np.full_like(state, -np.inf)
    for c in range(f + 1):
        if c <= span:
            new[c, c:] = moved[c, : span + 1 - c] + ins[c]
    return new


def _subset_sums(block: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For every subset (bitmask) of a block's rows: its size and each column's sum over it."""
    k = block.shape[0]
    sizes = np.zeros(1 << k, dtype=np.int64)
    sums = np.zeros((1 << k, block.shape[1]))
    for i in range(k):
        bit = 1 << i
        sizes[bit : 2 * bit] = sizes[:bit] + 1
        sums[bit : 2 * bit] = sums[:bit] + block[i]
    return sizes, sums


def _inside_weights(block: np.ndarray) -> np.ndarray:
    """``In[c]``: the densest c-subset of a small symmetric block, by enumeration."""
    k = block.shape[0]
    sizes, sums = _subset_sums(block)
    masks = np.arange(1 << k)
    member = (masks[:, None] >> np.arange(k)) & 1
    weight = 0.5 * np.einsum("sk,sk->s", sums, member)
    out = np.full(k + 1, -np.inf)
    np.maximum.at(out, sizes, weight)
    return out


def _between_weights(block: np.ndarray) -> np.ndarray:
    """``Between[a, b]``: the heaviest pairs between an a-subset of the rows and a b-subset of
    the columns; exact: for each row subset the b columns with the largest sums over it."""
    rows, cols = block.shape
    sizes, sums = _subset_sums(block)
    ranked = np.cumsum(-np.sort(-sums, axis=1), axis=1)  # best b columns for each row subset
    ranked = np.concatenate([np.zeros((len(sizes), 1)), ranked], axis=1)
    out = np.full((rows + 1, cols + 1), -np.inf)
    for a in range(rows + 1):
        out[a] = ranked[sizes == a].max(axis=0)
    return out
