"""Whole-block relocation: a split heavy block (a TP group) moved into fewer nodes elsewhere.

A pairwise local search cannot mend a TP group that a plan left in three pieces: every single
exchange that starts to gather it elsewhere first cuts more of its heavy pairs than it saves,
so the group stays split while free GPUs lie unused in other nodes. This move takes the whole
block at once. For each block in more than one node it tries every destination with fewer
pieces, made of the free GPUs (and the block's own): one node that holds it, or, for a block
in three pieces or more, two nodes of one first-level domain (a leaf, a rack). Each
destination is priced exactly on the block's pairs, inside and to the rest of the job (and the
per-GPU linear costs), all destinations of a block in one vectorised evaluation; the best one
that lowers the objective is applied. Rounds repeat while a block moves.
"""

from __future__ import annotations

import time

import numpy as np
import scipy.sparse as sp

from tsched.problem import PlacementProblem
from tsched.solvers.bounds.groups import heavy_labels

PAIRS_PER_DOMAIN = 64  # two-node destinations tried per domain: the fullest nodes' pairs


def relocate_blocks(
    problem: PlacementProblem,
    assignment: np.ndarray,
    graph: sp.csr_array,
    deadline: float | None = None,
) -> tuple[np.ndarray, int]:
    """(assignment, blocks moved): split heavy blocks (:func:`heavy_labels`) moved whole into
    fewer nodes of free GPUs where that lowers the objective; ``graph`` is the symmetric
    traffic (each pair's both directions summed). Needs a cluster; unchanged otherwise."""
    cl = problem.cluster
    assign = np.array(assignment, dtype=np.int64)
    if cl is None or problem.n_workers < 2:
        return assign, 0
    blocks = _blocks(problem)
    if not blocks:
        return assign, 0
    flat = np.concatenate(blocks)
    starts = np.cumsum([0] + [len(b) for b in blocks[:-1]], dtype=np.int64)
    node = problem.location_node().astype(np.int64)
    groups = problem.location_groups()
    domain = groups[:, 0] if groups.shape[1] else np.zeros_like(node)
    graph = graph.tocsr()
    used = np.zeros(problem.n_locations, dtype=bool)
    used[assign] = True
    moved = 0
    changed = True
    while changed:
        changed = False
        where = node[assign[flat]]  # the blocks in more than one node, all at once
        split = np.minimum.reduceat(where, starts) != np.maximum.reduceat(where, starts)
        for b in np.flatnonzero(split):
            if deadline is not None and time.perf_counter() > deadline:
                return assign, moved
            members = blocks[b]
            pieces = len(np.unique(node[assign[members]]))
            if pieces < 2:
                continue
            slots = _destinations(members, assign, used, node, domain, pieces)
            if slots is None:
                continue
            delta = _block_costs(problem, graph, members, assign, slots)
            best = int(np.argmin(delta))
            if delta[best] >= -1e-9 * max(1.0, abs(float(delta[best]))):
                continue
            used[assign[members]] = False
            assign[members] = slots[best]
            used[slots[best]] = True
            moved += 1
            changed = True
    return assign, moved


def _blocks(problem: PlacementProblem) -> list[np.ndarray]:
    """The heavy blocks of two workers or more (:func:`heavy_labels`), each's workers (cached:
    the search asks at the end of every descent)."""

    def build() -> list[np.ndarray]:
        label = heavy_labels(problem)
        if label is None:
            return []
        order = np.argsort(label, kind="stable")
        cuts = np.flatnonzero(np.diff(label[order])) + 1
        return [block for block in np.split(order, cuts) if len(block) > 1]

    return problem.cached("heavy_blocks", build)


def _destinations(
    members: np.ndarray,
    assign: np.ndarray,
    used: np.ndarray,
    node: np.ndarray,
    domain: np.ndarray,
    pieces: int,
) -> np.ndarray | None:
    """Candidate slot rows (one per destination, a location per member, the members in their
    current order) in fewer than ``pieces`` nodes; None when there is none."""
    own = assign[members]
    avail = np.union1d(np.flatnonzero(~used), own)
    s = len(members)
    order = np.argsort(node[avail], kind="stable")
    avail = avail[order]
    _, starts, counts = np.unique(node[avail], return_index=True, return_counts=True)
    rows: list[np.ndarray] = []
    for k in np.flatnonzero(counts >= s):
        rows.append(avail[starts[k] : starts[k] + s])
    if pieces >= 3:
        doms = domain[avail[starts]]
        big = np.argsort(-counts, kind="stable")  # the fullest nodes first
        for d in np.unique(doms):
            inside = big[doms[big] == d]
            inside = inside[counts[inside] < s]  # a node that holds the block alone is above
            rows.extend(_pairs(inside, counts, starts, avail, s))
    if not rows:
        return None
    slots = np.stack(rows)
    # the members keep their order by current location, so pieces stay together
    rank = np.argsort(np.argsort(own, kind="stable"), kind="stable")
    return np.sort(slots, axis=1)[:, rank]


def _block_costs(
    problem: PlacementProblem,
    graph: sp.csr_array,
    members: np.ndarray,
    assign: np.ndarray,
    slots: np.ndarray,
) -> np.ndarray:
    """The objective's change for each row of ``slots`` (the members' new locations)."""
    pos = np.full(problem.n_workers, -1, dtype=np.int64)
    pos[members] = np.arange(len(members))
    lo, hi = graph.indptr[members], graph.indptr[members + 1]
    src = np.repeat(np.arange(len(members)), hi - lo)
    idx = np.concatenate([np.arange(a, b) for a, b in zip(lo, hi, strict=True)])
    dst, w = graph.indices[idx].astype(np.int64), graph.data[idx]
    inner = pos[dst] >= 0
    w = np.where(inner, 0.5 * w, w)  # a pair inside the block is met from both ends
    current = np.r_[[assign[members]], slots]
    a_loc = current[:, src]
    b_loc = np.where(inner, current[:, np.maximum(pos[dst], 0)], assign[dst])
    dist = problem.pair_distance(a_loc.ravel(), b_loc.ravel()).reshape(a_loc.shape)
    cost = dist @ w
    if problem.linear is not None:
        cost = cost + problem.linear[members[None, :], current].sum(axis=1)
    return cost[1:] - cost[0]


def _pairs(
    inside: np.ndarray, counts: np.ndarray, starts: np.ndarray, avail: np.ndarray, s: int
) -> list[np.ndarray]:
    """Up to :data:`PAIRS_PER_DOMAIN` two-node destinations among one domain's nodes (indices
    into ``counts``, fullest first): the first node's free GPUs all taken, the rest from the
    second."""
    rows: list[np.ndarray] = []
    for i, a in enumerate(inside):
        for b in inside[i + 1 :]:
            if counts[a] + counts[b] < s:
                break  # fullest first: the later ones hold even less
            take = int(counts[a])
            rows.append(np.r_[avail[starts[a] : starts[a] + take],
                              avail[starts[b] : starts[b] + s - take]])  # fmt: skip
            if len(rows) >= PAIRS_PER_DOMAIN:
                return rows
    return rows
