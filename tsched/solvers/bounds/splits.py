"""Groups of workers no domain can hold, and the least traffic they must cut.

A set ``C`` of workers larger than the largest domain of a level (its free GPUs) is split
among at least ``p = ⌈|C| / M⌉`` of that level's domains. Each part's boundary inside ``C`` is a
cut of ``C``'s own traffic graph, so it weighs at least the graph's minimum cut ``λ(C)``; the
boundaries count every cut pair twice, so the pairs of ``C`` that the level cuts weigh at least
``p·λ(C)/2`` (``λ(C)`` for two parts). That holds for any nonnegative weights on ``C``'s pairs,
which is how :func:`~tsched.solvers.bounds.lagrange.lagrangian_bound` uses it: the share of a
level's weight it gives these sets is bounded by what they must cut, the rest by the level's
densest tables.

The candidate sets are the connected components of the traffic's heavier pairs, at each of
its distinct weights: the tensor-parallel groups and data-parallel rings of one pipeline stage,
say, where a stage is larger than any rack's free GPUs (a ring of arcs must be cut at least
twice, which the densest tables, pricing each rack on its own, do not know).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from tsched.solvers.bounds.groups import stoer_wagner_cut

__all__ = ["Oversized", "MINCUT_MAX_WORKERS", "oversized_components", "least_cut"]

#: Largest set whose minimum cut is computed (Stoer–Wagner: 0.3 s at 512 workers).
MINCUT_MAX_WORKERS = 512


@dataclass(frozen=True)
class Oversized:
    """The components of the pairs of weight ≥ ``threshold`` that no level-``level`` domain
    holds: ``label[i]`` is worker i's component (−1: none of them), ``parts[c]`` the fewest
    domains component c is split among, ``members[c]`` its workers."""

    level: int
    threshold: float
    label: np.ndarray
    parts: tuple[int, ...]
    members: tuple[np.ndarray, ...]

    def inside(self, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """Which pairs (rows[e], cols[e]) join two workers of one of these components."""
        a, b = self.label[rows], self.label[cols]
        return (a >= 0) & (a == b)


def oversized_components(
    n: int, rows: np.ndarray, cols: np.ndarray, w: np.ndarray, level: int, largest: int
) -> list[Oversized]:
    """Per distinct weight (heaviest first), the components of the pairs at least that heavy
    with more than ``largest`` workers (a level's largest domain), as :class:`Oversized`;
    thresholds whose oversized components are those of a heavier one are left out."""
    out: list[Oversized] = []
    seen: set[bytes] = set()
    for t in np.unique(w)[::-1]:
        on = w >= t
        graph = coo_matrix((np.ones(int(on.sum())), (rows[on], cols[on])), shape=(n, n))
        _, comp = connected_components(graph, directed=False)
        sizes = np.bincount(comp)
        big = np.flatnonzero(sizes > largest)
        if not len(big):
            continue
        label = np.full(n, -1, dtype=np.int64)
        members = []
        for c, k in enumerate(big.tolist()):
            idx = np.flatnonzero(comp == k)
            label[idx] = c
            members.append(idx)
        key = label.tobytes()
        if key in seen:
            continue
        seen.add(key)
        parts = tuple(max(2, -(-len(m) // largest)) for m in members)
        out.append(Oversized(level, float(t), label, parts, tuple(members)))
    return out


def least_cut(
    members: np.ndarray, rows: np.ndarray, cols: np.ndarray, weights: np.ndarray
) -> float:
    """The minimum cut of the workers ``members`` under the pair weights ``weights`` (pairs
    outside the set are ignored; Stoer–Wagner). 0 for a set too large to compute (above
    :data:`MINCUT_MAX_WORKERS`) or disconnected: never above the cut."""
    k = len(members)
    if k < 2 or k > MINCUT_MAX_WORKERS:
        return 0.0
    local = np.full(int(max(rows.max(initial=0), cols.max(initial=0), members.max())) + 1, -1)
    local[members] = np.arange(k)
    a, b = local[rows], local[cols]
    on = (a >= 0) & (b >= 0) & (weights > 0)
    if not on.any():
        return 0.0
    dense = np.zeros((k, k))
    np.add.at(dense, (a[on], b[on]), weights[on])
    return stoer_wagner_cut(dense + dense.T)
