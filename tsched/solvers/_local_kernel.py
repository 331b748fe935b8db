"""Compiled kernels of the local-search solvers: robust tabu search and simulated annealing.

Both work on a dense (k, k) flow ``f`` with a zero diagonal, a dense (k, k) distance ``d`` and a
(k, k) linear cost ``lin`` (``lin[i, l]``: cost of facility i on location l), where k ≥ the real
facility count: extra rows of ``f`` are zero (dummy facilities standing for free locations), so
a swap with a dummy is a move. ``perm[i]`` is the location of facility i (a permutation of k).
Written in the numba subset; without numba they run as (slow) plain Python.
"""

from __future__ import annotations

import numpy as np

from tsched.solvers._bnb_kernel import HAVE_NUMBA, njit

__all__ = ["HAVE_NUMBA", "swap_delta", "cost", "delta_matrix", "tabu_search", "anneal"]


@njit(cache=True)
def cost(f, d, lin, perm):  # pragma: no cover - compiled
    k = perm.shape[0]
    total = 0.0
    for i in range(k):
        total += lin[i, perm[i]]
        for j in range(k):
            if f[i, j] != 0.0:
                total += f[i, j] * d[perm[i], perm[j]]
    return total


@njit(cache=True)
def swap_delta(f, d, lin, perm, r, s, n_real=-1):  # pragma: no cover - compiled
    """Objective change of exchanging the locations of r and s. O(k); O(n_real) when the
    facilities from ``n_real`` on are dummies (no flow to or from them)."""
    pr, ps = perm[r], perm[s]
    delta = (f[r, s] - f[s, r]) * (d[ps, pr] - d[pr, ps])
    delta += lin[r, ps] + lin[s, pr] - lin[r, pr] - lin[s, ps]
    for q in range(perm.shape[0] if n_real < 0 else min(n_real, perm.shape[0])):
        if q == r or q == s:
            continue
        pq = perm[q]
        delta += (f[q, r] - f[q, s]) * (d[pq, ps] - d[pq, pr])
        delta += (f[r, q] - f[s, q]) * (d[ps, pq] - d[pr, pq])
    return delta


@njit(cache=True)
def delta_matrix(f, d, lin, perm, n_real=-1):  # pragma: no cover - compiled
    """Upper triangle of exchange deltas; rows from ``n_real`` on (pairs of two dummies, whose
    exchange changes nothing) are left at 0."""
    k = perm.shape[0]
    out = np.zeros((k, k))
    for r in range(k if n_real < 0 else min(k, n_real)):
        for s in range(r + 1, k):
            out[r, s] = swap_delta(f, d, lin, perm, r, s, n_real)
    return out


@njit(cache=True)
def _update(f, d, lin, perm, delta, u, v, n_real):  # pragma: no cover - compiled
    """Delta matrix after u and v exchanged (``perm`` already updated): O(1) per untouched pair
    (Taillard's formula), O(k) for the pairs touching u or v.

    Taillard's term for an untouched pair (r, s) factors into per-facility vectors computed once
    per move: with a[x] = f[x,u] − f[x,v], b[x] = f[u,x] − f[v,x], P[x] = d[perm[x], perm[u]] −
    d[perm[x], perm[v]] and Q[x] = d[perm[u], perm[x]] − d[perm[v], perm[x]], the change is
    (a[r] − a[s])·(P[s] − P[r]) + (b[r] − b[s])·(Q[s] − Q[r]); the inner loop then reads
    contiguous vectors only.
    """
    k = perm.shape[0]
    pu, pv = perm[u], perm[v]
    a = np.empty(k)
    b = np.empty(k)
    P = np.empty(k)
    Q = np.empty(k)
    for x in range(k):
        px = perm[x]
        a[x] = f[x, u] - f[x, v]
        b[x] = f[u, x] - f[v, x]
        P[x] = d[px, pu] - d[px, pv]
        Q[x] = d[pu, px] - d[pv, px]
    for r in range(min(k, n_real)):  # dummies come last: pairs of two are never used
        if r == u or r == v:
            for s in range(r + 1, k):
                delta[r, s] = swap_delta(f, d, lin, perm, r, s, n_real)
            continue
        ar, br, Pr, Qr = a[r], b[r], P[r], Q[r]
        row = delta[r]
        for s in range(r + 1, k):
            if s == u or s == v:
                row[s] = swap_delta(f, d, lin, perm, r, s, n_real)
                continue
            row[s] += (ar - a[s]) * (P[s] - Pr) + (br - b[s]) * (Q[s] - Qr)


@njit(cache=True)
def _swap_delta_rows(f, ft, p, pt, lin, perm, r, s, nq):  # pragma: no cover - compiled
    """:func:`swap_delta` on row-contiguous data: ``ft = fᵀ``, ``p[x, y] = d[perm[x],
    perm[y]]`` and ``pt = pᵀ`` kept current by the caller; facilities from ``nq`` on are
    dummies."""
    delta = (f[r, s] - f[s, r]) * (p[s, r] - p[r, s])
    delta += lin[r, perm[s]] + lin[s, perm[r]] - lin[r, perm[r]] - lin[s, perm[s]]
    ftr, fts, ptr, pts = ft[r], ft[s], pt[r], pt[s]
    fr, fs, pr, ps = f[r], f[s], p[r], p[s]
    for q in range(nq):
        if q == r or q == s:
            continue
        delta += (ftr[q] - fts[q]) * (pts[q] - ptr[q]) + (fr[q] - fs[q]) * (ps[q] - pr[q])
    return delta


@njit(cache=True)
def _exchange_rows_cols(m, r, s):  # pragma: no cover - compiled
    """Swap rows r and s, then columns r and s, of a square matrix in place. O(k)."""
    k = m.shape[0]
    for x in range(k):
        m[r, x], m[s, x] = m[s, x], m[r, x]
    for x in range(k):
        m[x, r], m[x, s] = m[x, s], m[x, r]


@njit(cache=True)
def _update_rows(f, ft, p, pt, lin, perm, delta, u, v, n_real):  # pragma: no cover - compiled
    """:func:`_update` on row-contiguous data (see :func:`_swap_delta_rows`); ``perm``, ``p``
    and ``pt`` already reflect the exchange."""
    k = perm.shape[0]
    nq = min(k, n_real)
    a = ft[u] - ft[v]  # a[x] = f[x,u] − f[x,v]
    b = f[u] - f[v]  # b[x] = f[u,x] − f[v,x]
    P = pt[u] - pt[v]  # P[x] = d[perm[x], perm[u]] − d[perm[x], perm[v]]
    Q = p[u] - p[v]  # Q[x] = d[perm[u], perm[x]] − d[perm[v], perm[x]]
    for r in range(nq):
        if r == u or r == v:
            for s in range(r + 1, k):
                delta[r, s] = _swap_delta_rows(f, ft, p, pt, lin, perm, r, s, nq)
            continue
        ar, br, Pr, Qr = a[r], b[r], P[r], Q[r]
        row = delta[r]
        for s in range(r + 1, k):
            if s == u or s == v:
                row[s] = _swap_delta_rows(f, ft, p, pt, lin, perm, r, s, nq)
                continue
            row[s] += (ar - a[s]) * (P[s] - Pr) + (br - b[s]) * (Q[s] - Qr)


@njit(cache=True)
def tabu_search(
    f, d, lin, perm, n_real, iterations, tenure_lo, tenure_hi, aspiration, seed, target, delta
):  # pragma: no cover - compiled
    """Robust tabu search (Taillard 1991) for ``iterations`` moves from ``perm``.

    A move (r, s) is tabu when both facilities would return to locations they left within the
    current tenure (random in [tenure_lo, tenure_hi], redrawn every 2·tenure_hi moves); a tabu
    move is still taken when it beats the best value (aspiration), and a move that places a
    facility on a location it has not visited for ``aspiration`` moves is forced. Stops early at
    ``target``. ``delta`` is the delta matrix of ``perm`` (:func:`delta_matrix`, or the faster
    :func:`tsched.solvers.tabu.dense_delta_matrix`); it is updated in place. Returns (best
    permutation, best value, moves made).
    """
    np.random.seed(seed)
    k = perm.shape[0]
    perm = perm.copy()
    current = cost(f, d, lin, perm)
    best = current
    best_perm = perm.copy()
    ft = f.T.copy()
    p = np.empty((k, k))
    for x in range(k):
        for y in range(k):
            p[x, y] = d[perm[x], perm[y]]
    pt = p.T.copy()
    tabu = np.full((k, k), -(k * k) - 1, dtype=np.int64)  # tabu[i, l]: when i last left l
    tabu_t = tabu.T.copy()  # tabu_t[l, i] = tabu[i, l]: the scan reads it row-wise
    tenure = np.random.randint(tenure_lo, tenure_hi + 1)
    rows = min(k, n_real)  # dummies come last: a pair of two dummies is never a move
    it = 0
    while it < iterations:
        it += 1
        if it % (2 * tenure_hi) == 0:
            tenure = np.random.randint(tenure_lo, tenure_hi + 1)
        chosen_r, chosen_s = -1, -1
        chosen = np.inf
        forced = False
        recent = it - tenure
        stale = it - aspiration
        for r in range(rows):
            pr = perm[r]
            left_r = tabu[r]
            left_at_pr = tabu_t[pr]
            row = delta[r]
            for s in range(r + 1, k):
                value = row[s]
                t_rs = left_r[perm[s]]  # when r last left s's location
                t_sr = left_at_pr[s]  # when s last left r's location
                if t_rs < stale and t_sr < stale:  # both long ago: force it
                    if not forced:
                        chosen, chosen_r, chosen_s, forced = value, r, s, True
                    continue
                if forced:
                    continue
                if value < chosen and (
                    not (t_rs >= recent and t_sr >= recent) or current + value < best - 1e-12
                ):
                    chosen, chosen_r, chosen_s = value, r, s
        if chosen_r < 0:  # everything tabu: take the best move regardless
            for r in range(rows):
                for s in range(r + 1, k):
                    if delta[r, s] < chosen:
                        chosen, chosen_r, chosen_s = delta[r, s], r, s
            if chosen_r < 0:
                break
        r, s = chosen_r, chosen_s
        tabu[r, perm[r]] = it
        tabu[s, perm[s]] = it
        tabu_t[perm[r], r] = it
        tabu_t[perm[s], s] = it
        perm[r], perm[s] = perm[s], perm[r]
        _exchange_rows_cols(p, r, s)
        _exchange_rows_cols(pt, r, s)
        current += chosen
        _update_rows(f, ft, p, pt, lin, perm, delta, r, s, n_real)
        if current < best - 1e-12:
            best = current
            best_perm[:] = perm
            if best <= target:
                break
    return best_perm, cost(f, d, lin, best_perm), it


@njit(cache=True)
def anneal(
    f, d, lin, perm, n_real, iterations, cycle, t_start, t_end, seed, target
):  # pragma: no cover - compiled
    """Simulated annealing with random pair exchanges for ``iterations`` moves: each cooling
    cycle of ``cycle`` moves goes geometrically from ``t_start`` to ``t_end``, then reheats from
    the best plan. Returns (best perm, best value, moves)."""
    np.random.seed(seed)
    k = perm.shape[0]
    perm = perm.copy()
    current = cost(f, d, lin, perm)
    best = current
    best_perm = perm.copy()
    if k < 2 or iterations <= 0:
        return best_perm, best, 0
    ratio = (t_end / t_start) ** (1.0 / max(cycle, 1))
    temp = t_start
    it = 0
    while it < iterations:
        it += 1
        r = np.random.randint(0, n_real)
        s = np.random.randint(0, k - 1)
        if s >= r:
            s += 1
        delta = swap_delta(f, d, lin, perm, r, s, n_real)
        if delta <= 0.0 or np.random.random() < np.exp(-delta / temp):
            perm[r], perm[s] = perm[s], perm[r]
            current += delta
            if current < best - 1e-12:
                best = current
                best_perm[:] = perm
                if best <= target:
                    break
        temp *= ratio
        if it % cycle == 0:  # end of a cooling cycle: reheat from the best
            perm[:] = best_perm
            current = best
            temp = t_start
    return best_perm, cost(f, d, lin, best_perm), it
