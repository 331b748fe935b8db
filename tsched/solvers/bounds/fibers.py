"""Densest weights of large sets from a layout's slices: a line of fibers.

A parallel layout's traffic along its data-parallel ring or pipeline path joins only
neighbouring coordinates. Cut the workers into *fibers*, one per coordinate of such a dimension
(all other coordinates free): every pair is inside a fiber or between neighbouring fibers. A set
holding ``c_j`` workers of fiber j then keeps at most ``Σ_j In_j[c_j] + Σ_j Between_j(c_j,
c_{j+1})`` inside itself, each term maximised on its own: the densest c workers of a fiber, and
the heaviest pairs between an a-subset of one fiber and a b-subset of the next. A dynamic
programme over the fibers (their counts, the running total) gives the largest such sum for every
set size at once — an upper bound on the densest-subgraph weight ``D[s]`` for s far beyond what
a search over subsets reaches (an NVL72 rack holds 72 workers, a spine group hundreds).

- ``In``: enumerated exactly for fibers of up to :data:`FIBER_MAX` workers; a larger fiber (a
  TP × PP block along the data-parallel ring) is itself cut into fibers along another of its
  dimensions, recursively.
- ``Between``: enumerated exactly for small fibers; for a matching (a data-parallel or pipeline
  link joins each worker to its counterpart) the ``min(a, b)`` heaviest pairs; otherwise the
  smaller of the a heaviest rows and the b heaviest columns.
- A ring of fibers: a set that leaves one fiber empty lies on the path of the other m − 1 (every
  fiber and link taken at its largest, so any rotation is covered); a set on every fiber is
  priced along the path with the closing link's largest gain for its last count.

Exact for a ring of cliques such as an MoE job's expert groups along its data-parallel ring.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from tsched.problem import PlacementProblem
from tsched.solvers.bounds.densest import kept_table
from tsched.solvers.bounds.layout import layout_grid

__all__ = ["FIBER_MAX", "FIBER_WORK", "fiber_weights", "with_fibers"]


#: Largest fiber (workers) whose inside and between weights are enumerated exactly (2^size sets).
FIBER_MAX = 16
#: Largest job the fibers are tried for (the between blocks of two halves are dense).
FIBER_MAX_WORKERS = 8192
#: Most element operations of the programmes over the fibers, recursion included (about a
#: second in numpy): a work budget, so the same bound on every machine.
FIBER_WORK = 400_000_000


def fiber_weights(problem: PlacementProblem, span: int) -> np.ndarray | None:
    """``D[s]`` for s = 0 … ``span`` (at most n): an upper bound on the traffic inside any s
    workers from the layout's fibers (module docstring), the smallest over the dimensions that
    join only neighbouring coordinates. None when the traffic is no layout, no dimension
    qualifies, or the programmes would exceed :data:`FIBER_WORK` (cached; recomputed for a
    larger span)."""
    span = min(int(span), problem.n_workers)
    _, table = problem.cached(
        "fiber_weights",
        lambda: (span, _fiber_weights(problem, span)),
        serves=lambda kept: kept[0] >= span,
    )
    return table


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
    if problem.n_workers > FIBER_MAX_WORKERS:
        return None
    squeezed = grid.reshape([size for size in grid.shape if size > 1])
    if squeezed.ndim < 1:
        return None
    lines = _Lines(problem.flow_symmetric())
    table = lines.table(squeezed, span)
    if table is None or lines.work > FIBER_WORK:
        return None
    return np.maximum.accumulate(np.maximum(table, 0.0))


class _Lines:
    """The recursive programme, with its caches (identical fibers are computed once) and the
    work spent so far."""

    def __init__(self, sym: sp.csr_array) -> None:
        self.sym = sym
        self.work = 0
        self.cache: dict[Any, np.ndarray | None] = {}

    def block(self, rows: np.ndarray, cols: np.ndarray) -> sp.csr_array:
        out = sp.csr_array(self.sym[rows][:, cols])
        out.sort_indices()
        return out

    def table(self, grid: np.ndarray, span: int) -> np.ndarray | None:
        """Upper bounds on the densest c-subsets of the workers of ``grid`` (c = 0 …
        min(span, size)), or None (no dimension qualifies, or the budget is spent)."""
        workers = grid.reshape(-1)
        reach = min(span, len(workers))
        inner = self.block(workers, workers)
        key = ("in", _signature(inner), reach)
        if key in self.cache:
            return self.cache[key]
        if len(workers) <= FIBER_MAX:
            out: np.ndarray | None = _inside_weights(inner.toarray())[: reach + 1]
        else:
            out = None
            for axis in range(grid.ndim):
                if self.work > FIBER_WORK:
                    return None
                line = self._along(grid, axis, inner, reach)
                if line is not None:
                    out = line if out is None else np.minimum(out, line)
        self.cache[key] = out
        return out

    def _along(
        self, grid: np.ndarray, axis: int, inner: sp.csr_array, reach: int
    ) -> np.ndarray | None:
        """The programme over the fibers of ``axis`` (None if a pair joins fibers that are not
        neighbours, or a fiber has no table)."""
        m = grid.shape[axis]
        if m < 2:
            return None
        coord = np.indices(grid.shape)[axis].reshape(-1)
        coo = inner.tocoo()
        rows, cols = coo.row, coo.col
        delta = (coord[cols] - coord[rows]) % m
        if np.any((delta != 0) & (delta != 1) & (delta != m - 1)):
            return None
        fibers = np.moveaxis(grid, axis, 0)
        f = int(np.prod(fibers.shape[1:]))
        rest = fibers.shape[1:]
        sub = [np.asarray(fibers[j]).reshape(rest if rest else (1,)) for j in range(m)]
        ins = []
        for j in range(m):
            table = self.table(sub[j], min(reach, f))
            if table is None:
                return None
            ins.append(_pad(table, f))
        flat = [s.reshape(-1) for s in sub]
        bets = [self._between(flat[j], flat[(j + 1) % m]) for j in range(m - 1)]
        wrap = self._between(flat[m - 1], flat[0]) if m > 2 else None
        if wrap is not None and not np.any(wrap > 0):
            wrap = None  # a path: no pair closes the line
        self.work += 2 * m * (f + 1) ** 2 * (reach + 1)
        if self.work > FIBER_WORK:
            return None
        if wrap is None:
            return _path(ins, bets, reach)
        # a set that leaves a fiber empty: a path of m − 1 fibers, each at its largest
        top_in = np.max(ins, axis=0)
        top_bet = np.max([*bets, wrap], axis=0)
        out = _path([top_in] * (m - 1), [top_bet] * (m - 2), reach)
        if reach >= m:  # a set on every fiber: the closing link's best for the last count
            nonempty = [t.copy() for t in ins]
            for t in nonempty:
                t[0] = -np.inf
            nonempty[-1] = nonempty[-1] + np.max(wrap, axis=1)
            out = np.maximum(out, _path(nonempty, bets, reach))
        return out

    def _between(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        block = self.block(a, b)
        key = ("between", _signature(block))
        if key not in self.cache:
            self.cache[key] = _between_weights(block.toarray())
        out = self.cache[key]
        assert out is not None
        return out


def _signature(block: sp.csr_array) -> tuple[Any, ...]:
    """A sparse block's shape and entries, as a key: identical fibers share their tables."""
    return (block.shape, block.indptr.tobytes(), block.indices.tobytes(), block.data.tobytes())


def _pad(table: np.ndarray, f: int) -> np.ndarray:
    """A fiber's table over counts 0 … f (counts beyond the table's reach: unreachable)."""
    out = np.full(f + 1, -np.inf)
    out[: len(table)] = table
    return out


def _path(ins: list[np.ndarray], bets: list[np.ndarray], reach: int) -> np.ndarray:
    """``max Σ_j ins[j][c_j] + Σ_j bets[j][c_j, c_{j+1}]`` over counts summing to each total
    0 … reach (−inf where none does)."""
    f = len(ins[0]) - 1
    state = np.full((f + 1, reach + 1), -np.inf)  # state[c, t]: last fiber holds c, t in all
    for c in range(min(f, reach) + 1):
        state[c, c] = ins[0][c]
    for j in range(1, len(ins)):
        moved = np.max(state[:, None, :] + bets[j - 1][:, :, None], axis=0)  # (c, t)
        new = np.full_like(state, -np.inf)
        for c in range(min(f, reach) + 1):
            new[c, c:] = moved[c, : reach + 1 - c] + ins[j][c]
        state = new
    return np.max(state, axis=0)


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
    member = (np.arange(1 << k)[:, None] >> np.arange(k)) & 1
    weight = 0.5 * np.einsum("sk,sk->s", sums, member)
    out = np.full(k + 1, -np.inf)
    np.maximum.at(out, sizes, weight)
    return out


def _between_weights(block: np.ndarray) -> np.ndarray:
    """``Between[a, b]``: the heaviest pairs between an a-subset of the rows and a b-subset of
    the columns. Small blocks: exact (for each row subset, the b columns with the largest sums
    over it). A matching (at most one pair per row and column): the ``min(a, b)`` heaviest
    pairs. Otherwise the smaller of the a rows and the b columns with the most traffic, each
    row (column) counting its b (a) heaviest pairs."""
    rows, cols = block.shape
    if rows <= FIBER_MAX:
        sizes, sums = _subset_sums(block)
        ranked = np.cumsum(-np.sort(-sums, axis=1), axis=1)  # best b columns per row subset
        ranked = np.concatenate([np.zeros((len(sizes), 1)), ranked], axis=1)
        out = np.full((rows + 1, cols + 1), -np.inf)
        for a in range(rows + 1):
            out[a] = ranked[sizes == a].max(axis=0)
        return out
    nonzero = block > 0
    if nonzero.sum(axis=1).max(initial=0) <= 1 and nonzero.sum(axis=0).max(initial=0) <= 1:
        pairs = np.concatenate([[0.0], np.cumsum(-np.sort(-block[nonzero]))])
        k = np.minimum.outer(np.arange(rows + 1), np.arange(cols + 1))
        return pairs[np.minimum(k, len(pairs) - 1)]
    by_row = _heaviest_lines(block, cols)  # [b, a]: a rows, each its b heaviest pairs
    by_col = _heaviest_lines(block.T, rows)  # [a, b]
    return np.minimum(by_row.T, by_col)


def _heaviest_lines(block: np.ndarray, width: int) -> np.ndarray:
    """``out[b, a]``: the a rows with the largest sums of their b heaviest entries."""
    ranked = np.cumsum(-np.sort(-block, axis=1), axis=1)  # row r's b heaviest, b = 1 … width
    ranked = np.concatenate([np.zeros((block.shape[0], 1)), ranked], axis=1)
    best = -np.sort(-ranked, axis=0)  # per b, rows by that sum, heaviest first
    out = np.zeros((width + 1, block.shape[0] + 1))
    out[:, 1:] = np.cumsum(best, axis=0).T
    return out
