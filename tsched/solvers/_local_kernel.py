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
def swap_delta(f, d, lin, perm, r, s):  # pragma: no cover - compiled
    """Objective change of exchanging the locations of r and s. O(k)."""
    pr, ps = perm[r], perm[s]
    delta = (f[r, s] - f[s, r]) * (d[ps, pr] - d[pr, ps])
    delta += lin[r, ps] + lin[s, pr] - lin[r, pr] - lin[s, ps]
    for q in range(perm.shape[0]):
        if q == r or q == s:
            continue
        pq = perm[q]
        delta += (f[q, r] - f[q, s]) * (d[pq, ps] - d[pq, pr])
        delta += (f[r, q] - f[s, q]) * (d[ps, pq] - d[pr, pq])
    return delta


@njit(cache=True)
def delta_matrix(f, d, lin, perm):  # pragma: no cover - compiled
    k = perm.shape[0]
    out = np.zeros((k, k))
    for r in range(k):
        for s in range(r + 1, k):
            out[r, s] = swap_delta(f, d, lin, perm, r, s)
    return out


@njit(cache=True)
def _update(f, d, lin, perm, delta, u, v, n_real):  # pragma: no cover - compiled
    """Delta matrix after u and v exchanged (``perm`` already updated): O(1) per untouched pair
    (Taillard's formula), O(k) for the pairs touching u or v."""
    k = perm.shape[0]
    for r in range(k):
        for s in range(r + 1, k):
            if r >= n_real and s >= n_real:
                continue  # two dummies: exchanging them never changes anything
            if r == u or r == v or s == u or s == v:
                delta[r, s] = swap_delta(f, d, lin, perm, r, s)
            else:
                pr, ps, pu, pv = perm[r], perm[s], perm[u], perm[v]
                delta[r, s] += (f[r, u] - f[r, v] + f[s, v] - f[s, u]) * (
                    d[ps, pu] - d[ps, pv] + d[pr, pv] - d[pr, pu]
                ) + (f[u, r] - f[v, r] + f[v, s] - f[u, s]) * (
                    d[pu, ps] - d[pv, ps] + d[pv, pr] - d[pu, pr]
                )


@njit(cache=True)
def tabu_search(
    f, d, lin, perm, n_real, iterations, tenure_lo, tenure_hi, aspiration, seed, target
):  # pragma: no cover - compiled
    """Robust tabu search (Taillard 1991) for ``iterations`` moves from ``perm``.

    A move (r, s) is tabu when both facilities would return to locations they left within the
    current tenure (random in [tenure_lo, tenure_hi], redrawn every 2·tenure_hi moves); a tabu
    move is still taken when it beats the best value (aspiration), and a move that places a
    facility on a location it has not visited for ``aspiration`` moves is forced. Stops early at
    ``target``. Returns (best permutation, best value, moves made).
    """
    np.random.seed(seed)
    k = perm.shape[0]
    perm = perm.copy()
    current = cost(f, d, lin, perm)
    best = current
    best_perm = perm.copy()
    delta = delta_matrix(f, d, lin, perm)
    tabu = np.full((k, k), -(k * k) - 1, dtype=np.int64)  # tabu[i, l]: when i last left l
    tenure = np.random.randint(tenure_lo, tenure_hi + 1)
    it = 0
    while it < iterations:
        it += 1
        if it % (2 * tenure_hi) == 0:
            tenure = np.random.randint(tenure_lo, tenure_hi + 1)
        chosen_r, chosen_s = -1, -1
        chosen = np.inf
        forced = False
        for r in range(k):
            for s in range(r + 1, k):
                if r >= n_real and s >= n_real:
                    continue
                value = delta[r, s]
                pr, ps = perm[r], perm[s]
                is_tabu = tabu[r, ps] >= it - tenure and tabu[s, pr] >= it - tenure
                aspired = current + value < best - 1e-12
                long_ago = tabu[r, ps] < it - aspiration and tabu[s, pr] < it - aspiration
                if long_ago and not forced:
                    chosen, chosen_r, chosen_s, forced = value, r, s, True
                    continue
                if forced:
                    continue
                if (not is_tabu or aspired) and value < chosen:
                    chosen, chosen_r, chosen_s = value, r, s
        if chosen_r < 0:  # everything tabu: take the best move regardless
            for r in range(k):
                for s in range(r + 1, k):
                    if (r < n_real or s < n_real) and delta[r, s] < chosen:
                        chosen, chosen_r, chosen_s = delta[r, s], r, s
            if chosen_r < 0:
                break
        r, s = chosen_r, chosen_s
        tabu[r, perm[r]] = it
        tabu[s, perm[s]] = it
        perm[r], perm[s] = perm[s], perm[r]
        current += chosen
        _update(f, d, lin, perm, delta, r, s, n_real)
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
        delta = swap_delta(f, d, lin, perm, r, s)
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
