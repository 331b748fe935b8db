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


#: Floating-point licences for the summing and minimising loops, so that LLVM vectorises
#: them (reassociation, and no NaN or infinity: deltas are finite, the scan's sentinel is
#: :data:`HUGE`).
FAST = True
#: Larger than any delta: the scan's "none yet".
HUGE = 1e300
#: The same for int32 tables (whose deltas stay below half of it: ``tabu.INT_DELTA_MAX``).
INT_HUGE = np.int32(2**31 - 1)


@njit(cache=True)
def _exchange_rows_cols(m, r, s):  # pragma: no cover - compiled
    """Swap rows r and s, then columns r and s, of a square matrix in place. O(k)."""
    k = m.shape[0]
    for x in range(k):
        m[r, x], m[s, x] = m[s, x], m[r, x]
    for x in range(k):
        m[x, r], m[x, s] = m[x, s], m[x, r]


@njit(cache=True, fastmath=FAST)
def _update_rows(f, ft, p, pt, lin, perm, delta, u, v, n_real):  # pragma: no cover - compiled
    """:func:`_update` on row-contiguous data: ``ft = fᵀ``, ``p[x, y] = d[perm[x], perm[y]]``
    and ``pt = pᵀ``, kept current by the caller (``perm``, ``p`` and ``pt`` already reflect the
    exchange); facilities from ``n_real`` on are dummies.

    Only the upper triangle is kept current; the loop runs over whole rows and leaves scratch
    below the diagonal, which nothing reads: rows of one length vectorise without the per-row
    remainder and set-up of the triangle's shorter rows, at the price of the lower half's
    arithmetic."""
    k = perm.shape[0]
    nq = min(k, n_real)
    a = ft[u] - ft[v]  # a[x] = f[x,u] − f[x,v]
    b = f[u] - f[v]  # b[x] = f[u,x] − f[v,x]
    P = pt[u] - pt[v]  # P[x] = d[perm[x], perm[u]] − d[perm[x], perm[v]]
    Q = p[u] - p[v]  # Q[x] = d[perm[u], perm[x]] − d[perm[v], perm[x]]
    for r in range(nq):
        if r == u or r == v:
            continue
        ar, br, Pr, Qr = a[r], b[r], P[r], Q[r]
        row = delta[r]
        for s in range(k):  # whole rows, branch-free; the u and v columns redone below
            row[s] += (ar - a[s]) * (P[s] - Pr) + (br - b[s]) * (Q[s] - Qr)
    _redo_rows(f, ft, p, pt, lin, perm, delta, u, v, nq, a, b)  # a, b: scratch now


@njit(cache=True, fastmath=FAST)
def _update_sym(f, p, lin, perm, delta, u, v, n_real, a, P):  # pragma: no cover - compiled
    """:func:`_update_rows` for symmetric f and d with zero diagonals: the untouched pairs
    change by 2·(a[r] − a[s])·(P[s] − P[r]) (the two halves of Taillard's term are equal);
    ``a`` and ``P`` are scratch vectors of length k."""
    k = perm.shape[0]
    nq = min(k, n_real)
    for x in range(k):
        a[x] = f[u, x] - f[v, x]
        P[x] = p[u, x] - p[v, x]
    for r in range(nq):
        if r == u or r == v:
            continue
        ar, Pr = a[r], P[r]
        row = delta[r]
        for s in range(k):  # whole rows, as in _update_rows
            x = ar - a[s]  # doubled as x + x: a 2.0 would turn integer deltas into floats
            row[s] += (x + x) * (P[s] - Pr)
    _redo_sym(f, p, lin, perm, delta, u, v, nq, a, P)  # a, P: scratch now


@njit(cache=True, fastmath=FAST)
def _redo_sym(f, p, lin, perm, delta, u, v, nq, acc_u, acc_v):  # pragma: no cover - compiled
    """Recompute, in O(k) each, the deltas of every pair that contains u or v (Taillard's O(1)
    term holds only for pairs apart from both exchanged facilities), for symmetric f and d
    with zero diagonals; pairs of two dummies (from ``nq`` on) are never moves. Each is
    :func:`swap_delta` on row-contiguous data: the two sums of Taillard's formula are equal, so
    one runs over every real q and is doubled. One pass over the rows of f and p sums for u
    and for v at once (half the memory traffic of a pass each), into the scratch vectors
    ``acc_u`` and ``acc_v``; the pairs are written in a second loop: a function called in the
    summing loop, even inlined, keeps LLVM from vectorising it, and a call per pair costs more
    than its sum."""
    k = perm.shape[0]
    fu, pu, fv, pv = f[u], p[u], f[v], p[v]
    top_u = k if u < nq else nq  # a dummy pairs with real facilities only
    top_v = k if v < nq else nq
    top = max(top_u, top_v)
    for x in range(top):
        fx, px = f[x], p[x]
        su = fx[0] - fx[0]  # a zero of the tables' type (a 0.0 would make integer sums floats)
        sv = su
        for q in range(nq):
            su += (fx[q] - fu[q]) * (pu[q] - px[q])
            sv += (fx[q] - fv[q]) * (pv[q] - px[q])
        acc_u[x] = su
        acc_v[x] = sv
    for side in range(2):  # the pairs written out (a call per pair costs more than the sum)
        w, acc, top_w = (u, acc_u, top_u) if side == 0 else (v, acc_v, top_v)
        for x in range(top_w):
            if x == w or (side == 1 and x == u):  # the pair (u, v) once, with u
                continue
            r, s = (x, w) if x < w else (w, x)
            total = acc[x]  # its q = r and q = s terms (−f[s,r]·p[s,r] each) taken back out
            if r < nq:
                total += f[s, r] * p[s, r]
            if s < nq:
                total += f[r, s] * p[r, s]
            linear = lin[r, perm[s]] + lin[s, perm[r]] - lin[r, perm[r]] - lin[s, perm[s]]
            delta[r, s] = linear + (total + total)


@njit(cache=True, fastmath=FAST)
def _gram_step(g, u, v, nq, a, P):  # pragma: no cover - compiled
    """A Gram table after u and v exchanged: its columns u and v swapped, then the outer
    product of ``a`` and ``P`` added to the rows of the real facilities (``nq`` of them; a
    dummy's row is 0 and stays so). Two passes: the swap inside the rank-one loop keeps LLVM
    from vectorising it."""
    k = g.shape[1]
    for r in range(nq):
        g[r, u], g[r, v] = g[r, v], g[r, u]
    for r in range(nq):
        ar = a[r]
        grow = g[r]
        for s in range(k):
            grow[s] += ar * P[s]


@njit(cache=True, fastmath=FAST)
def _update_sym_gram(f, p, lin, perm, delta, u, v, n_real, a, P, g):  # pragma: no cover
    """:func:`_update_sym` with the pairs of u and v in O(1) each, from the table
    ``g = f·pᵀ`` (``g[x, y] = Σ_q f[x, q]·p[y, q]``), which it keeps current too.

    For symmetric f and p with zero diagonals the sum of a pair (x, w) that :func:`_redo_sym`
    takes over every q is g[x, w] + g[w, x] − g[x, x] − g[w, w]. After u and v exchange,
    ``g``'s columns u and v swap (``p``'s rows did) and the change in f's own order adds the
    outer product of a = f[u] − f[v] and P = p[u] − p[v] (``p`` exchanged): g[x, y] += a[x]·P[y],
    a rank-one update of the rows of real facilities (a dummy's row of g is 0 and stays so).
    That is one pass over a k×k table beside the delta update, against the two sums over q
    per facility of :func:`_redo_sym` (three k×k reads): 1.28–1.36 times the moves at
    k = 50–100 (``tabu_threads.md § gram``).
    The values are those of :func:`_update_sym` exactly on integer tables; on floats the same
    up to rounding, ``g`` being updated where the sums were taken afresh each move."""
    k = perm.shape[0]
    nq = min(k, n_real)
    for x in range(k):
        a[x] = f[u, x] - f[v, x]
        P[x] = p[u, x] - p[v, x]
    _gram_step(g, u, v, nq, a, P)  # apart from the delta pass: one loop doing both vectorises
    for r in range(nq):  # neither
        if r == u or r == v:
            continue
        ar, Pr = a[r], P[r]
        row = delta[r]
        for s in range(k):  # whole rows, as in _update_rows
            x = ar - a[s]  # doubled as x + x, as in _update_sym
            row[s] += (x + x) * (P[s] - Pr)
    for side in range(2):  # the pairs of u and of v, as _redo_sym writes them
        w = u if side == 0 else v
        top_w = k if w < nq else nq  # a dummy pairs with real facilities only
        gw, fw, pw, lw = g[w], f[w], p[w], lin[w]
        gww, lww, pos = g[w, w], lin[w, perm[w]], perm[w]
        for x in range(top_w):
            if x == w or (side == 1 and x == u):  # the pair (u, v) once, with u
                continue
            # the q = x and q = w terms taken back out: f[w, x]·p[w, x] each (0 for a dummy)
            fp = fw[x] * pw[x]
            total = g[x, w] + gw[x] - g[x, x] - gww + (fp + fp)
            linear = lin[x, pos] + lw[perm[x]] - lin[x, perm[x]] - lww
            value = linear + (total + total)
            if x < w:
                delta[x, w] = value
            else:
                delta[w, x] = value


@njit(cache=True, fastmath=FAST)
def _redo_rows(f, ft, p, pt, lin, perm, delta, u, v, nq, acc_u, acc_v):  # pragma: no cover
    """:func:`_redo_sym` for any f and d (``ft = fᵀ``, ``pt = pᵀ``): per pair, the sum over
    every real q of Taillard's two terms (fᵀ and pᵀ rows, then f and p rows); its q = r and
    q = s terms are taken back out, the direct (r, s) term and the linear costs added."""
    k = perm.shape[0]
    fu, pu, ftu, ptu = f[u], p[u], ft[u], pt[u]
    fv, pv, ftv, ptv = f[v], p[v], ft[v], pt[v]
    top_u = k if u < nq else nq
    top_v = k if v < nq else nq
    top = max(top_u, top_v)
    for x in range(top):
        fx, px, ftx, ptx = f[x], p[x], ft[x], pt[x]
        su = fx[0] - fx[0]  # a zero of the tables' type
        sv = su
        for q in range(nq):
            su += (ftx[q] - ftu[q]) * (ptu[q] - ptx[q]) + (fx[q] - fu[q]) * (pu[q] - px[q])
            sv += (ftx[q] - ftv[q]) * (ptv[q] - ptx[q]) + (fx[q] - fv[q]) * (pv[q] - px[q])
        acc_u[x] = su
        acc_v[x] = sv
    _write_rows(f, ft, p, pt, lin, perm, delta, u, v, nq, acc_u, acc_v)


@njit(cache=True, fastmath=FAST)
def _write_rows(f, ft, p, pt, lin, perm, delta, u, v, nq, acc_u, acc_v):  # pragma: no cover
    """The deltas of the pairs of u and of v from their sums over every real q (``acc_u[x]``:
    the pair (x, u)), as :func:`_redo_rows` and :func:`_update_rows_gram` take them."""
    k = perm.shape[0]
    top_u = k if u < nq else nq
    top_v = k if v < nq else nq
    for side in range(2):  # the pairs written out, as in _redo_sym
        w, acc, top_w = (u, acc_u, top_u) if side == 0 else (v, acc_v, top_v)
        for x in range(top_w):
            if x == w or (side == 1 and x == u):
                continue
            r, s = (x, w) if x < w else (w, x)
            total = acc[x]  # the q = r and q = s terms of both sums taken back out
            if r < nq:
                total -= (ft[r, r] - ft[s, r]) * (pt[s, r] - pt[r, r]) + (f[r, r] - f[s, r]) * (
                    p[s, r] - p[r, r]
                )
            if s < nq:
                total -= (ft[r, s] - ft[s, s]) * (pt[s, s] - pt[r, s]) + (f[r, s] - f[s, s]) * (
                    p[s, s] - p[r, s]
                )
            total += (f[r, s] - f[s, r]) * (p[s, r] - p[r, s])  # the direct (r, s) term
            linear = lin[r, perm[s]] + lin[s, perm[r]] - lin[r, perm[r]] - lin[s, perm[s]]
            delta[r, s] = total + linear


@njit(cache=True, fastmath=FAST)
def _update_rows_gram(f, ft, p, pt, lin, perm, delta, u, v, n_real, g, h):  # pragma: no cover
    """:func:`_update_rows` with the pairs of u and v in O(1) each, from the tables
    ``g = f·pᵀ`` and ``h = fᵀ·p``, kept current in the same move (as :func:`_update_sym_gram`
    keeps its one): the two sums of :func:`_redo_rows` for the pair (x, w) are
    h[x, w] + h[w, x] − h[x, x] − h[w, w] and the same of g. After u and v exchange, the
    columns u and v of both swap, and g gains the outer product of a = fᵀ[u] − fᵀ[v] and
    P = pᵀ[u] − pᵀ[v], h that of b = f[u] − f[v] and Q = p[u] − p[v] (``p`` and ``pt``
    exchanged). Two rank-one passes against four sums over q per facility: 1.12–1.23 times the
    moves at k = 60–100 (``tabu_threads.md § gram``)."""
    k = perm.shape[0]
    nq = min(k, n_real)
    a = ft[u] - ft[v]
    b = f[u] - f[v]
    P = pt[u] - pt[v]
    Q = p[u] - p[v]
    for r in range(nq):
        if r == u or r == v:
            continue
        ar, br, Pr, Qr = a[r], b[r], P[r], Q[r]
        row = delta[r]
        for s in range(k):  # whole rows, as in _update_rows
            row[s] += (ar - a[s]) * (P[s] - Pr) + (br - b[s]) * (Q[s] - Qr)
    _gram_step(g, u, v, nq, a, P)
    _gram_step(h, u, v, nq, b, Q)
    top = max(k if u < nq else nq, k if v < nq else nq)
    guu, gvv, huu, hvv = g[u, u], g[v, v], h[u, u], h[v, v]
    gu, gv, hu, hv = g[u], g[v], h[u], h[v]
    for x in range(top):  # a and b: scratch now, the sums of the pairs (x, u) and (x, v)
        here = g[x, x] + h[x, x]
        a[x] = g[x, u] + gu[x] + h[x, u] + hu[x] - here - guu - huu
        b[x] = g[x, v] + gv[x] + h[x, v] + hv[x] - here - gvv - hvv
    _write_rows(f, ft, p, pt, lin, perm, delta, u, v, nq, a, b)


@njit(cache=True)
def _mark_pairs_of(tabu, perm, tmin, tmax, w, rows):  # pragma: no cover - compiled
    """Refresh, for every pair (x, w), when each of the two last left the other's location:
    ``tmin`` holds the earlier of the two times (the move is tabu while even that one is
    recent; kept as floats, the type of the deltas it is scanned with), ``tmax`` the later (the
    move is forced once even that one is stale). Returns the least ``tmax`` written."""
    k = perm.shape[0]
    top = k if w < rows else rows
    least = 2**31 - 1
    for x in range(top):
        if x == w:
            continue
        r, s = (x, w) if x < w else (w, x)
        t_rs = tabu[r, perm[s]]  # when r last left s's location
        t_sr = tabu[s, perm[r]]
        tmin[r, s] = min(t_rs, t_sr)
        tmax[r, s] = max(t_rs, t_sr)
        least = min(least, max(t_rs, t_sr))
    return least


@njit(cache=True, fastmath=FAST)
def _best_move(
    delta, tmin, tmax, rows, recent, stale, slack, check=True, huge=HUGE
):  # pragma: no cover - compiled
    """Robust tabu search's choice, as a scan in row-major order would make it: the first pair
    that is forced (both facilities away from the other's location since ``stale``); else the
    least delta if it is below ``slack`` (aspiration: it beats the best plan); else the least
    delta among pairs not tabu (tmin < ``recent``); else, everything tabu, the least delta.
    Each row is reduced branch-free (vectorised); one row is then searched for the index.

    Returns (r, s, delta, oldest): ``oldest`` is the least ``tmax`` of all pairs, or
    :data:`HUGE` when the table was not read to its end (a forced pair found, or ``check``
    false). With ``check`` false the caller knows that no pair is forced (every ``tmax`` ≥
    ``stale``), and the ``tmax`` table is not read at all: the scan reads two tables instead of
    three. ``huge`` is the scan's "none yet", of the deltas' type (:data:`HUGE` for floats)
    and larger than any delta; it is also the delta returned when there is no pair."""
    k = delta.shape[0]
    all_v, all_r = huge, -1
    adm_v, adm_r = huge, -1
    oldest = HUGE
    for r in range(rows):
        if check:
            mx = tmax[r, r + 1 :]  # rows from r + 1, indexed from 0 (vectorised)
            row_old = HUGE
            for t in range(k - r - 1):
                row_old = min(row_old, mx[t])
            if row_old < stale:
                for t in range(k - r - 1):
                    if mx[t] < stale:
                        return r, r + 1 + t, delta[r, r + 1 + t], HUGE  # table not read to its end
            oldest = min(oldest, row_old)
        row, mn = delta[r, r + 1 :], tmin[r, r + 1 :]
        lo_all, lo_adm = huge, huge
        for t in range(k - r - 1):
            value = row[t]
            lo_all = min(lo_all, value)
            lo_adm = min(lo_adm, value if mn[t] < recent else huge)
        if lo_all < all_v:
            all_v, all_r = lo_all, r
        if lo_adm < adm_v:
            adm_v, adm_r = lo_adm, r
    if all_r < 0:
        return -1, -1, huge, oldest
    if all_v < slack or adm_r < 0:
        row = delta[all_r]
        for s in range(all_r + 1, k):
            if row[s] == all_v:
                return all_r, s, all_v, oldest
    row, mn = delta[adm_r], tmin[adm_r]
    for s in range(adm_r + 1, k):
        if row[s] == adm_v and mn[s] < recent:
            return adm_r, s, adm_v, oldest
    return -1, -1, huge, oldest  # not reached


@njit(cache=True, nogil=True)
def tabu_search(
    f,
    d,
    lin,
    perm,
    n_real,
    iterations,
    tenure_lo,
    tenure_hi,
    aspiration,
    seed,
    target,
    delta,
    sym,
    halt,
    huge=HUGE,
    gram=None,
):  # pragma: no cover - compiled
    """Robust tabu search (Taillard 1991) for ``iterations`` moves from ``perm``.

    A move (r, s) is tabu when both facilities would return to locations they left within the
    current tenure (random in [tenure_lo, tenure_hi], redrawn every 2·tenure_hi moves); a tabu
    move is still taken when it beats the best value (aspiration), and a move that places a
    facility on a location it has not visited for ``aspiration`` moves is forced. Stops early at
    ``target``. ``delta`` is the delta matrix of ``perm`` (:func:`delta_matrix`, or the faster
    :func:`tsched.solvers.tabu.dense_delta_matrix`); it is updated in place. ``sym``: f and d
    are symmetric with zero diagonals (half the arithmetic per move). ``halt`` is a one-element
    flag shared by searches in other threads: the search stops when it is set, and sets it on
    reaching ``target``. Returns (best permutation, best value, moves made).

    The tables take the type of ``f``, ``d``, ``lin`` and ``delta``: float64, or int32 for
    integer data whose deltas fit (:func:`tsched.solvers.tabu.kernel_dtype`), where a move costs
    less (twice the lanes a vector instruction, half the memory traffic; 1.1–1.4 times the
    moves at k = 50–100 in ``tabu_threads.md § tables``) and every delta is exact, so
    the moves are those of the float64 kernel. ``huge`` must then be larger than any delta and
    of their type (:data:`HUGE` for floats, :data:`INT_HUGE` for int32). A given ``gram``, of
    the tables' type and shape (1, k, k) with ``sym`` (``f·pᵀ`` for ``p = d[perm][:, perm]``),
    else (2, k, k) (``f·pᵀ`` and ``fᵀ·p``), as :func:`tsched.solvers.tabu.dense_tables` builds
    it with ``delta``, is kept current and gives the pairs of the exchanged facilities in O(1)
    each (:func:`_update_sym_gram`, :func:`_update_rows_gram`); it is updated in place.

    Per move: the choice reads two k×k tables row by row (deltas and, per pair, the earlier of
    the two tabu times), and the update is O(1) per untouched pair and, for the 2k pairs of the
    exchanged facilities, O(k) each, or O(1) each from ``gram`` after a rank-one pass over each
    of its tables. The later tabu times (a third table, kept current in O(k) a move
    like the first) are read only when a pair may be forced: ``floor``, the least of them when
    last read, lowered by every refresh, says when (tabu times only grow, so a pair goes stale
    no sooner than ``floor + aspiration``); the moves are those of a scan of all three tables
    every move.
    """
    np.random.seed(seed)
    k = perm.shape[0]
    perm = perm.copy()
    current = cost(f, d, lin, perm)
    best = current
    best_perm = perm.copy()
    p = np.empty_like(d)  # the tables keep the data's type (no float literal below)
    for x in range(k):
        for y in range(k):
            p[x, y] = d[perm[x], perm[y]]
    ft = f if sym else f.T.copy()  # symmetric: the transposes are the matrices themselves
    pt = p if sym else p.T.copy()
    a = np.empty_like(f[0])
    P = np.empty_like(f[0])
    never = -(k * k) - 1
    # move numbers restart with each call (a chunk of < 2**31 moves): int32 halves the tables
    tabu = np.full((k, k), never, dtype=np.int32)  # tabu[i, l]: when i last left l
    tmin = np.empty_like(delta)  # the deltas' type: scanned alongside them (vectorised)
    tmin[:] = never
    tmax = np.full((k, k), never, dtype=np.int32)
    floor = never  # no pair's tmax is below it: none is forced while it - aspiration <= floor
    tenure = np.random.randint(tenure_lo, tenure_hi + 1)
    rows = min(k, n_real)  # dummies come last: a pair of two dummies is never a move
    it = 0
    while it < iterations and halt[0] == 0:
        it += 1
        if it % (2 * tenure_hi) == 0:
            tenure = np.random.randint(tenure_lo, tenure_hi + 1)
        check = it - aspiration > floor
        r, s, chosen, oldest = _best_move(
            delta,
            tmin,
            tmax,
            rows,
            it - tenure,
            it - aspiration,
            best - current - 1e-12,
            check,
            huge,
        )
        if r < 0:
            break
        if check and oldest < HUGE:  # the whole table was read: its least entry
            floor = int(oldest)
        tabu[r, perm[r]] = it
        tabu[s, perm[s]] = it
        perm[r], perm[s] = perm[s], perm[r]
        _exchange_rows_cols(p, r, s)
        current += chosen
        if sym and gram is not None:
            _update_sym_gram(f, p, lin, perm, delta, r, s, n_real, a, P, gram[0])
        elif sym:
            _update_sym(f, p, lin, perm, delta, r, s, n_real, a, P)
        elif gram is not None:  # pt is a matrix of its own only here
            _exchange_rows_cols(pt, r, s)
            _update_rows_gram(f, ft, p, pt, lin, perm, delta, r, s, n_real, gram[0], gram[1])
        else:
            _exchange_rows_cols(pt, r, s)
            _update_rows(f, ft, p, pt, lin, perm, delta, r, s, n_real)
        floor = min(floor, _mark_pairs_of(tabu, perm, tmin, tmax, r, rows))
        floor = min(floor, _mark_pairs_of(tabu, perm, tmin, tmax, s, rows))
        if current < best - 1e-12:
            best = current
            best_perm[:] = perm
            if best <= target:
                halt[0] = 1
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
