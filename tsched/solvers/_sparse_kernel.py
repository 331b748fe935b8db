"""Compiled kernels for sparse job traffic: graph partitioning with exact part sizes, and a
local search on a cluster placement that never builds a dense distance matrix.

Graphs are symmetric CSR arrays (``indptr``, ``indices``, ``w``) with a zero diagonal: ``w`` is
the traffic in both directions, ``f[i, j] + f[j, i]``. Written in the numba subset; without
numba they run as (slow) plain Python, which the tests compare against.
"""

from __future__ import annotations

import numpy as np

from tsched.solvers._bnb_kernel import HAVE_NUMBA, njit

__all__ = ["HAVE_NUMBA", "grow_parts", "rebalance", "refine_parts", "cut", "local_search"]


# ---------------------------------------------------------------------- partitioning
@njit(cache=True)
def cut(indptr, indices, w, part):  # pragma: no cover - compiled
    """Traffic between vertices of different parts (each undirected edge once)."""
    total = 0.0
    for v in range(part.shape[0]):
        for e in range(indptr[v], indptr[v + 1]):
            u = indices[e]
            if u > v and part[u] != part[v]:
                total += w[e]
    return total


@njit(cache=True)
def grow_parts(indptr, indices, w, sizes):  # pragma: no cover - compiled
    """Parts of exactly ``sizes[p]`` vertices by graph growing, one part after the other.

    Each part starts at the unassigned vertex with the most traffic to the vertices already
    assigned (the lowest index when none has any: the first rank of a job), then repeatedly takes
    the unassigned vertex with the most traffic to the part being grown (ties: lowest index).
    O(s² + edges) for s vertices.
    """
    s = indptr.shape[0] - 1
    part = np.full(s, -1, dtype=np.int64)
    to_done = np.zeros(s)  # traffic to all assigned vertices
    to_part = np.zeros(s)  # traffic to the part being grown
    for p in range(sizes.shape[0]):
        to_part[:] = 0.0
        for taken in range(sizes[p]):
            best, best_v = -1.0, -1
            scores = to_part if taken > 0 else to_done
            for v in range(s):
                if part[v] < 0 and scores[v] > best:
                    best, best_v = scores[v], v
            v = best_v
            part[v] = p
            for e in range(indptr[v], indptr[v + 1]):
                u = indices[e]
                to_part[u] += w[e]
                to_done[u] += w[e]
    return part


@njit(cache=True)
def _conn(indptr, indices, w, part, v, p):  # pragma: no cover - compiled
    total = 0.0
    for e in range(indptr[v], indptr[v + 1]):
        if part[indices[e]] == p:
            total += w[e]
    return total


@njit(cache=True)
def rebalance(indptr, indices, w, part, sizes):  # pragma: no cover - compiled
    """Move vertices out of over-full parts into under-full ones until every part has exactly
    ``sizes[p]`` vertices, each time the move that loses the least internal traffic."""
    nparts = sizes.shape[0]
    count = np.zeros(nparts, dtype=np.int64)
    for v in range(part.shape[0]):
        count[part[v]] += 1
    while True:
        over = False
        for p in range(nparts):
            if count[p] > sizes[p]:
                over = True
        if not over:
            break
        best, best_v, best_p = -np.inf, -1, -1
        for v in range(part.shape[0]):
            a = part[v]
            if count[a] <= sizes[a]:
                continue
            stay = _conn(indptr, indices, w, part, v, a)
            for p in range(nparts):
                if count[p] < sizes[p]:
                    gain = _conn(indptr, indices, w, part, v, p) - stay
                    if gain > best:
                        best, best_v, best_p = gain, v, p
        count[part[best_v]] -= 1
        count[best_p] += 1
        part[best_v] = best_p
    return part


@njit(cache=True)
def refine_parts(indptr, indices, w, part, nparts, max_passes):  # pragma: no cover - compiled
    """Kernighan–Lin style pair exchanges between parts (sizes kept) while the cut falls.

    For each vertex v and each part B it has traffic to, the member u of B whose exchange with
    v cuts the most traffic is exchanged when that strictly reduces the cut. Returns the number
    of exchanges.
    """
    s = part.shape[0]
    order = np.argsort(part, kind="mergesort")
    start = np.zeros(nparts + 1, dtype=np.int64)
    for v in range(s):
        start[part[v] + 1] += 1
    for p in range(nparts):
        start[p + 1] += start[p]
    where = np.empty(s, dtype=np.int64)
    for i in range(s):
        where[order[i]] = i
    conn = np.zeros(nparts)
    touched = np.empty(nparts, dtype=np.int64)
    swaps = 0
    total = 0.0
    for e in range(w.shape[0]):
        total += w[e]
    eps = 1e-12 * max(total, 1.0)
    for _ in range(max_passes):
        improved = False
        for v in range(s):
            a = part[v]
            n_touched = 0
            for e in range(indptr[v], indptr[v + 1]):
                p = part[indices[e]]
                if conn[p] == 0.0:
                    touched[n_touched] = p
                    n_touched += 1
                conn[p] += w[e]
            inside = conn[a]
            best, best_u = eps, -1
            for t in range(n_touched):
                b = touched[t]
                if b == a:
                    continue
                gain_v = conn[b] - inside
                for i in range(start[b], start[b + 1]):
                    u = order[i]
                    gain_u = 0.0
                    w_uv = 0.0
                    for e in range(indptr[u], indptr[u + 1]):
                        x = indices[e]
                        if x == v:
                            w_uv = w[e]
                        px = part[x]
                        if px == a:
                            gain_u += w[e]
                        elif px == b:
                            gain_u -= w[e]
                    gain = gain_v + gain_u - 2.0 * w_uv
                    if gain > best:
                        best, best_u = gain, u
            for t in range(n_touched):
                conn[touched[t]] = 0.0
            if best_u >= 0:
                u = best_u
                b = part[u]
                part[u], part[v] = a, b
                iu, iv = where[u], where[v]
                order[iu], order[iv] = v, u
                where[u], where[v] = iv, iu
                swaps += 1
                improved = True
        if not improved:
            break
    return swaps


# ---------------------------------------------------------------------- placement search
@njit(cache=True)
def _dist(p, q, loc_node, loc_local, groups, level_cost, node_type, type_cost):  # pragma: no cover
    """Seconds per GB between locations p and q: the node type's table on one node, else the
    cost of the first level whose group the two nodes share (the last level if none)."""
    if p == q:
        return 0.0
    a, b = loc_node[p], loc_node[q]
    if a == b:
        return type_cost[node_type[a], loc_local[p], loc_local[q]]
    n_levels = groups.shape[1]
    if n_levels == 0:
        return 0.0
    for k in range(n_levels):
        if groups[a, k] == groups[b, k]:
            return level_cost[k]
    return level_cost[n_levels - 1]


@njit(cache=True)
def _worker_delta(
    indptr,
    indices,
    w,
    assign,
    i,
    skip,
    old,
    new,
    loc_node,
    loc_local,
    groups,
    level_cost,
    node_type,
    tc,
):  # pragma: no cover - compiled
    """Change of worker i's edge costs when it moves from ``old`` to ``new`` (edge to ``skip``
    left out: its length does not change in an exchange)."""
    total = 0.0
    for e in range(indptr[i], indptr[i + 1]):
        k = indices[e]
        if k == skip:
            continue
        at = assign[k]
        total += w[e] * (
            _dist(new, at, loc_node, loc_local, groups, level_cost, node_type, tc)
            - _dist(old, at, loc_node, loc_local, groups, level_cost, node_type, tc)
        )
    return total


@njit(cache=True)
def local_search(
    indptr,
    indices,
    w,
    assign,
    occ,
    loc_node,
    loc_local,
    node_first,
    node_end,
    groups,
    level_cost,
    node_type,
    type_cost,
    order,
    max_passes,
    lin,
    pref_node,
):  # pragma: no cover - compiled
    """Best-improvement exchanges and moves restricted to locations that can change the cost.

    For each worker (in ``order``) the candidates are every location of its own node and of the
    nodes its traffic partners sit on: an occupied one is an exchange, a free one a move. The
    best strictly improving candidate is applied. ``assign`` (worker → location) and ``occ``
    (location → worker or -1) are updated in place. Returns (total change, moves made).

    Per-GPU linear costs: ``lin`` (workers, locations) adds ``lin[i, location]`` to the cost
    and ``pref_node[i]`` (a node index, or -1) adds the node of worker i's cheapest GPU to its
    candidates; pass a (0, 0) ``lin`` when there are none.
    """
    has_lin = lin.shape[0] > 0
    n = assign.shape[0]
    n_nodes = node_first.shape[0]
    stamp = np.full(n_nodes, -1, dtype=np.int64)
    cand = np.empty(n_nodes, dtype=np.int64)
    change = 0.0
    moves = 0
    total = 0.0
    for e in range(w.shape[0]):
        total += w[e]
    if has_lin:
        for r in range(lin.shape[0]):
            for c in range(lin.shape[1]):
                total += abs(lin[r, c]) / lin.shape[1]
    eps = 1e-12 * max(total, 1.0)
    mark = 0
    for _ in range(max_passes):
        improved = False
        for t in range(n):
            i = order[t]
            p = assign[i]
            mark += 1
            n_cand = 0
            own = loc_node[p]
            stamp[own] = mark
            cand[n_cand] = own
            n_cand += 1
            for e in range(indptr[i], indptr[i + 1]):
                nd = loc_node[assign[indices[e]]]
                if stamp[nd] != mark:
                    stamp[nd] = mark
                    cand[n_cand] = nd
                    n_cand += 1
            if has_lin and pref_node[i] >= 0 and stamp[pref_node[i]] != mark:
                stamp[pref_node[i]] = mark
                cand[n_cand] = pref_node[i]
                n_cand += 1
            best, best_q = -eps, -1
            for c in range(n_cand):
                nd = cand[c]
                for q in range(node_first[nd], node_end[nd]):
                    if q == p:
                        continue
                    j = occ[q]
                    delta = _worker_delta(
                        indptr, indices, w, assign, i, j, p, q,
                        loc_node, loc_local, groups, level_cost, node_type, type_cost,
                    )  # fmt: skip
                    if j >= 0:
                        delta += _worker_delta(
                            indptr, indices, w, assign, j, i, q, p,
                            loc_node, loc_local, groups, level_cost, node_type, type_cost,
                        )  # fmt: skip
                    if has_lin:
                        delta += lin[i, q] - lin[i, p]
                        if j >= 0:
                            delta += lin[j, p] - lin[j, q]
                    if delta < best:
                        best, best_q = delta, q
            if best_q >= 0:
                q = best_q
                j = occ[q]
                assign[i] = q
                occ[q] = i
                occ[p] = j
                if j >= 0:
                    assign[j] = p
                change += best
                moves += 1
                improved = True
        if not improved:
            break
    return change, moves
