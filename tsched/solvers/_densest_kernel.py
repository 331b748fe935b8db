"""Compiled kernels behind the partition and packing bounds (numba when installed, plain Python
otherwise): the densest-subgraph search (:func:`tsched.solvers.bounds.partition_bound`) and the
knapsack over a level's domains (:func:`tsched.solvers.bounds.kept_upper`).

``search`` finds the largest total weight of ``size`` vertices of a dense symmetric weight
matrix ``a`` (zero diagonal, non-negative, vertices sorted by weighted degree), depth first over
subsets in increasing vertex order, from an incumbent. ``top[u, t]`` is the sum of the ``t``
heaviest weights in row ``u``; ``known[r]`` an upper bound on the densest ``r``-subset for
``r < size``. At a node with chosen weight ``w`` and ``r`` vertices still to choose from
``start`` on, no completion beats ``w + top_r(gain_u + ½·top[u, r−1])`` nor
``w + top_r(gain_u) + known[r]`` (see the caller's docstring). The search stops after
``max_visits`` nodes; it then returns an upper bound instead of the optimum: the larger of the
incumbent and, at every depth of the current path, the node's bound over the siblings not yet
searched (candidates from ``cur[d]`` on). The visit budget, not a clock, makes the result the
same on every machine.
"""

from __future__ import annotations

import numpy as np

from tsched.solvers._bnb_kernel import HAVE_NUMBA, njit

__all__ = ["HAVE_NUMBA", "search", "connected_search", "knapsack"]


@njit(cache=True)
def _insert(best, v):  # pragma: no cover - compiled
    """Put ``v`` in the descending array ``best`` if it is among its largest (the last drops)."""
    r = best.shape[0]
    if v > best[r - 1]:
        k = r - 1
        while k > 0 and best[k - 1] < v:
            best[k] = best[k - 1]
            k -= 1
        best[k] = v


@njit(cache=True)
def _top_sum(values, start, r):  # pragma: no cover - compiled
    """Sum of the ``r`` largest of ``values[start:]`` (r small)."""
    best = np.full(r, -np.inf)
    for u in range(start, values.shape[0]):
        _insert(best, values[u])
    total = 0.0
    for k in range(r):
        total += best[k]
    return total


@njit(cache=True)
def _node_bound(gain_row, value, s, r, top, known, pick, use_known):  # pragma: no cover
    """Bound on completing a set of weight ``value`` with ``r`` vertices from ``s`` on."""
    n = gain_row.shape[0]
    if n - s < r:
        return -np.inf
    for u in range(s, n):
        pick[u] = gain_row[u] + 0.5 * top[u, r - 1]
    bound = value + _top_sum(pick, s, r)
    if use_known:
        alt = value + _top_sum(gain_row, s, r) + known[r]
        if alt < bound:
            bound = alt
    return bound


@njit(cache=True)
def _open_bound(gain, value, cur, depth, size, top, known, pick, best):  # pragma: no cover
    """Upper bound on every subset not yet searched when the search stops at ``depth``: the
    siblings still open at each depth of the current path."""
    out = best
    for d in range(depth):  # depth itself is being entered: its parent's siblings cover it
        r = size - d
        b = _node_bound(gain[d], value[d], cur[d] - 1, r, top, known, pick, d > 0)
        if b > out:
            out = b
    return out


@njit(cache=True)
def search(a, top, size, known, incumbent, max_visits, gain0):  # pragma: no cover - compiled
    """``(value, finished)`` for subsets of ``size`` vertices: the optimum when ``finished``,
    else an upper bound on it. ``gain0``: each vertex's weight to a set chosen beforehand (a
    vertex fixed by symmetry; zeros for none), counted in every subset's value."""
    n = a.shape[0]
    best = incumbent
    gain = np.zeros((size + 1, n))
    for q in range(n):
        gain[0, q] = gain0[q]
    value = np.zeros(size + 1)
    start = np.zeros(size + 1, dtype=np.int64)
    cur = np.zeros(size + 1, dtype=np.int64)
    pick = np.empty(n)
    visits = 0
    depth = 0
    entering = True
    while depth >= 0:
        if entering:
            entering = False
            visits += 1
            if visits > max_visits:
                return _open_bound(gain, value, cur, depth, size, top, known, pick, best), False
            r = size - depth
            if r == 0:
                if value[depth] > best:
                    best = value[depth]
                depth -= 1
                continue
            s = start[depth]
            bound = _node_bound(gain[depth], value[depth], s, r, top, known, pick, depth > 0)
            if bound <= best * (1.0 + 1e-12):
                depth -= 1
                continue
            cur[depth] = s
        r = size - depth
        u = cur[depth]
        if u > n - r:
            depth -= 1
            continue
        cur[depth] = u + 1
        value[depth + 1] = value[depth] + gain[depth, u]
        for q in range(u + 1, n):
            gain[depth + 1, q] = gain[depth, q] + a[u, q]
        start[depth + 1] = u + 1
        depth += 1
        entering = True
    return best, True


@njit(cache=True)
def knapsack(d, caps, n):  # pragma: no cover - compiled
    """``max Σ_k d[s_k]`` over ``0 ≤ s_k ≤ caps[k]`` with ``Σ s_k = n`` (−inf if none): the
    dynamic programme of :func:`tsched.solvers.bounds.kept_upper`, domain by domain, with the
    same sums and maxima as its array form."""
    best = np.full(n + 1, -np.inf)
    best[0] = 0.0
    nxt = np.empty(n + 1)
    for k in range(caps.shape[0]):
        for t in range(n + 1):
            nxt[t] = best[t]
        for s in range(1, caps[k] + 1):
            for t in range(s, n + 1):
                cand = best[t - s] + d[s]
                if cand > nxt[t]:
                    nxt[t] = cand
        for t in range(n + 1):
            best[t] = nxt[t]
    return best[n]


@njit(cache=True)
def connected_search(
    a, indptr, indices, data, allowed, rep, size, known, incumbent, max_visits
):  # pragma: no cover - compiled
    """``(value, finished)``: the heaviest *connected* set of ``size`` vertices that holds
    ``rep`` and otherwise only ``allowed`` vertices, each such set visited once (Wernicke's
    ESU enumeration: a set grows by a vertex of its extension list, which gains the new
    vertex's exclusive neighbours; a vertex taken from the list never returns to that
    branch). Every vertex a branch can still add is on its list or not yet next to the set, so
    no completion by r vertices beats its weight + the r largest traffics from the set to the
    list's vertices + ``known[r]`` (the most r vertices keep among themselves): such branches
    stop. ``finished`` False: the visit budget ran out (the value is then only a lower bound).
    ``a`` gives pair weights; ``indptr``/``indices``/``data`` the same graph as CSR."""
    n = a.shape[0]
    best = incumbent
    # cover[u]: how many chosen vertices u is, or is next to (u joins a list only at 0)
    cover = np.zeros(n, dtype=np.int64)
    gain = np.zeros(n)  # traffic from each vertex to the chosen set
    chosen = np.empty(size, dtype=np.int64)
    ext = np.empty((size + 1, n), dtype=np.int64)  # extension list per depth
    ext_len = np.zeros(size + 1, dtype=np.int64)
    value = np.zeros(size + 1)
    top = np.empty(size + 1)
    chosen[0] = rep
    _choose(rep, indptr, indices, data, cover, gain, 1)
    k = 0
    for p in range(indptr[rep], indptr[rep + 1]):
        u = indices[p]
        if allowed[u] and u != rep:
            ext[1, k] = u
            k += 1
    ext_len[1] = k
    depth = 1  # vertices chosen
    visits = 0
    while depth >= 1:
        if depth == size:
            if value[depth] > best:
                best = value[depth]
            depth -= 1
            if depth >= 1:
                _choose(chosen[depth], indptr, indices, data, cover, gain, -1)
            continue
        r = size - depth
        bound = -1.0
        if ext_len[depth] > 0:
            head = top[:r]
            head[:] = 0.0
            for q in range(ext_len[depth]):  # the r largest gains on the list
                _insert(head, gain[ext[depth, q]])
            bound = value[depth] + known[r]
            for q in range(r):
                bound += top[q]
        if ext_len[depth] == 0 or bound <= best * (1.0 + 1e-12):
            depth -= 1
            if depth >= 1:
                _choose(chosen[depth], indptr, indices, data, cover, gain, -1)
            continue
        visits += 1
        if visits > max_visits:
            return best, False
        ext_len[depth] -= 1
        w = ext[depth, ext_len[depth]]
        k = ext_len[depth]
        for q in range(k):
            ext[depth + 1, q] = ext[depth, q]
        for p in range(indptr[w], indptr[w + 1]):
            u = indices[p]
            if allowed[u] and cover[u] == 0:
                ext[depth + 1, k] = u
                k += 1
        ext_len[depth + 1] = k
        chosen[depth] = w
        value[depth + 1] = value[depth] + gain[w]
        _choose(w, indptr, indices, data, cover, gain, 1)
        depth += 1
    return best, True


@njit(cache=True)
def _choose(w, indptr, indices, data, cover, gain, sign):  # pragma: no cover - compiled
    """Add (sign 1) or remove (−1) vertex w from the chosen set's cover and gains."""
    cover[w] += sign
    for p in range(indptr[w], indptr[w + 1]):
        cover[indices[p]] += sign
        gain[indices[p]] += sign * data[p]
