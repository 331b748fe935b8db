"""Groups of workers no domain can hold, and the least traffic they must cut.

A set ``C`` of workers larger than the largest domain of a level (its free GPUs) is split
among at least ``p = ⌈|C| / M⌉`` of that level's domains. Each part's boundary inside ``C`` is a
cut of ``C``'s own traffic graph, so it weighs at least the graph's minimum cut ``λ(C)``; the
boundaries count every cut pair twice, so the pairs of ``C`` that the level cuts weigh at least
``p·λ(C)/2`` (``λ(C)`` for two parts). That holds for any nonnegative weights on ``C``'s pairs,
which is how :func:`~tsched.solvers.bounds.lagrange.lagrangian_bound` uses it: the share of a
level's weight it gives these sets is bounded by what they must cut, the rest by the level's
densest tables.

Counting each set alone gives ``p`` pieces; :func:`pieces_cut` counts them together, as the
sets share the domains' free GPUs and a domain holds only whole blocks (TP groups) unless one
is split, which costs the block's own least cut (a small integer programme).

The candidate sets are the connected components of the traffic's heavier pairs, at each of
its distinct weights: the tensor-parallel groups and data-parallel rings of one pipeline stage,
say, where a stage is larger than any rack's free GPUs (a ring of arcs must be cut at least
twice, which the densest tables, pricing each rack on its own, do not know).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from tsched.solvers.bounds.groups import stoer_wagner_cut

__all__ = [
    "Oversized",
    "MINCUT_MAX_WORKERS",
    "PIECES_SECONDS",
    "threshold_components",
    "oversized_components",
    "pieces_cut",
    "least_cut",
]

#: Largest set whose minimum cut is computed (Stoer–Wagner: 0.3 s at 512 workers).
MINCUT_MAX_WORKERS = 512
#: Seconds the pieces programme may take (its proved dual bound is used either way).
PIECES_SECONDS = 1.0


@dataclass(frozen=True)
class Oversized:
    """The components of the pairs of weight ≥ ``threshold`` that no domain of a level holds:
    ``label[i]`` is worker i's component (−1: none of them), ``parts[c]`` the fewest domains
    component c is split among, ``members[c]`` its workers and ``blocks[c]`` its components at
    the next heavier weight (its TP groups, say) where they all have one size of at least 2,
    else none."""

    threshold: float
    label: np.ndarray
    parts: tuple[int, ...]
    members: tuple[np.ndarray, ...]
    blocks: tuple[tuple[np.ndarray, ...], ...]

    def inside(self, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """Which pairs (rows[e], cols[e]) join two workers of one of these components."""
        a, b = self.label[rows], self.label[cols]
        return (a >= 0) & (a == b)


def threshold_components(
    n: int, rows: np.ndarray, cols: np.ndarray, w: np.ndarray
) -> list[tuple[float, np.ndarray]]:
    """Per distinct weight t (heaviest first), a component label per worker over the pairs of
    weight ≥ t: what :func:`oversized_components` filters for each level."""
    out = []
    for t in np.unique(w)[::-1]:
        on = w >= t
        graph = coo_matrix((np.ones(int(on.sum())), (rows[on], cols[on])), shape=(n, n))
        out.append((float(t), connected_components(graph, directed=False)[1]))
    return out


def oversized_components(layers: list[tuple[float, np.ndarray]], largest: int) -> list[Oversized]:
    """Per weight of :func:`threshold_components`' ``layers``, its components with more than
    ``largest`` workers (a level's largest domain), as :class:`Oversized`; thresholds whose
    oversized components are those of a heavier one are left out."""
    out: list[Oversized] = []
    seen: set[bytes] = set()
    for i, (t, comp) in enumerate(layers):
        previous = layers[i - 1][1] if i else np.arange(len(comp))  # the heavier components
        sizes = np.bincount(comp)
        big = np.flatnonzero(sizes > largest)
        if not len(big):
            continue
        label = np.full(len(comp), -1, dtype=np.int64)
        members, blocks = [], []
        for c, k in enumerate(big.tolist()):
            idx = np.flatnonzero(comp == k)
            label[idx] = c
            members.append(idx)
            _, sub = np.unique(previous[idx], return_inverse=True)
            counts = np.bincount(sub)
            same = len(np.unique(counts)) == 1 and counts[0] >= 2 and len(counts) >= 2
            blocks.append(tuple(idx[sub == b] for b in range(len(counts))) if same else ())
        key = label.tobytes()
        if key in seen:
            continue
        seen.add(key)
        parts = tuple(max(2, -(-len(m) // largest)) for m in members)
        out.append(Oversized(t, label, parts, tuple(members), tuple(blocks)))
    return out


def pieces_cut(
    cand: Oversized,
    capacities: np.ndarray,
    rows: np.ndarray,
    cols: np.ndarray,
    weights: np.ndarray,
    seconds: float = PIECES_SECONDS,
) -> float:
    """A lower bound on the weight ``weights`` that a level with domains of free GPUs
    ``capacities`` cuts inside ``cand``'s components, taken over how the components can be cut
    into pieces, one per domain, together.

    A component touching y domains cuts at least ``y·λ/2`` (each piece's boundary is a cut of
    it). Where a component is made of blocks of one size g (its TP groups), either no block is
    split, and a domain of c free GPUs holds at most ⌊c/g⌋ of its blocks, or some component
    splits one and cuts at least the blocks' least cut λ_g. With no block split, the least
    ``Σ_C y_C·λ_C/2`` over the domains' capacity classes, whose free GPUs the components share,
    is a small integer programme (HiGHS; its proved dual bound is taken); with one split, the
    count bound ``Σ_C parts_C·λ_C/2`` with that component's term raised to λ_g. The smaller of
    the two cases, and at least the count bound. Four pipeline stages of 17 TP groups on racks
    that hold at most 10, 9, 8, 8 … groups: at most two stages fit in two pieces, so ten pieces
    at least, where counting each stage alone gives eight."""
    lams = [least_cut(m, rows, cols, weights) for m in cand.members]
    terms = [p * lam / 2 for p, lam in zip(cand.parts, lams, strict=True)]
    simple = float(sum(terms))
    caps, counts = np.unique(np.asarray(capacities, dtype=np.int64), return_counts=True)
    keep = caps > 0
    caps, counts = caps[keep], counts[keep]
    if not len(caps) or max(lams, default=0.0) <= 0:
        return simple
    sizes, splits = [], []
    for c, blocks in enumerate(cand.blocks):
        if blocks:
            sizes.append(len(blocks[0]))
            lam_g = min(least_cut(b, rows, cols, weights) for b in blocks)
            splits.append(simple - terms[c] + max(terms[c], lam_g))
        else:
            sizes.append(1)
    whole = _pieces_programme(cand, lams, sizes, caps, counts, seconds)
    return max(simple, min([whole, *splits]))


def _pieces_programme(
    cand: Oversized,
    lams: list[float],
    sizes: list[int],
    caps: np.ndarray,
    counts: np.ndarray,
    seconds: float,
) -> float:
    """:func:`pieces_cut`'s integer programme with no block split: per component C (of
    ``sizes[C]``-worker blocks) and capacity class k, the blocks x it puts in class-k domains
    and the domains y it touches there. Its proved dual bound (0 where HiGHS gives none).
    Components alike (size, block size and λ) are ordered by their pieces."""
    classes, comps = len(caps), len(cand.members)
    size = 2 * classes * comps
    cost = np.zeros(size)
    upper = np.zeros(size)
    entries: list[tuple[int, int, float]] = []  # (row, column, value)
    lo: list[float] = []
    hi: list[float] = []

    def row(pairs: list[tuple[int, float]], low: float, high: float) -> None:
        r = len(lo)
        entries.extend((r, j, x) for j, x in pairs)
        lo.append(low)
        hi.append(high)

    ks = range(classes)
    for c, members in enumerate(cand.members):
        g = sizes[c]
        blocks = len(members) // g
        per = np.minimum(caps // g, blocks)  # blocks one class-k domain can take
        x, y = 2 * classes * c, 2 * classes * c + classes
        upper[x : x + classes] = per * counts
        upper[y : y + classes] = np.where(per > 0, counts, 0)
        cost[y : y + classes] = lams[c] / 2
        row([(x + k, 1.0) for k in ks], blocks, blocks)
        for k in ks:
            row([(x + k, 1.0), (y + k, -float(per[k]))], -np.inf, 0.0)
        row([(y + k, 1.0) for k in ks], float(cand.parts[c]), np.inf)
        if c and (len(members), g, lams[c]) == (len(cand.members[c - 1]), sizes[c - 1],
                                                lams[c - 1]):  # fmt: skip
            prev = y - 2 * classes
            row([(prev + k, 1.0) for k in ks] + [(y + k, -1.0) for k in ks], 0.0, np.inf)
    for k in ks:
        row([(2 * classes * c + k, float(sizes[c])) for c in range(comps)], -np.inf,
            float(caps[k] * counts[k]))  # fmt: skip
    r, j, v = zip(*entries, strict=True)
    matrix = coo_matrix((v, (r, j)), shape=(len(lo), size)).tocsr()
    result = milp(
        cost,
        integrality=np.ones(size),
        bounds=Bounds(np.zeros(size), upper),
        constraints=LinearConstraint(matrix, lo, hi),
        options={"time_limit": seconds},
    )
    dual = getattr(result, "mip_dual_bound", None)
    if dual is None or not np.isfinite(dual):
        return 0.0
    return max(0.0, float(dual) * (1 - 1e-6))


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
