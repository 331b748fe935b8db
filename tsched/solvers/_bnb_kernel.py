"""Compiled kernel of the QAP branch and bound (numba when installed, plain Python otherwise).

The functions here are written in the subset of Python that numba compiles; without numba they
run as ordinary (slow) Python, which the tests use on tiny instances.

The search is a depth-first branch and bound over facilities in a fixed order. At each node the
Gilmore–Lawler bound of the remaining subproblem is computed (linear cost of placing an
unassigned facility next to the assigned ones, plus the minimal scalar product of its remaining
flows with the location's remaining distances) and solved as a linear assignment by the
Hungarian algorithm, whose dual prices bound every child: ``child ≥ bound + reduced cost``.
The search state lives in arrays so that :func:`search` can stop after a node budget and resume.
"""

from __future__ import annotations

import numpy as np

try:  # pragma: no cover - depends on the environment
    from numba import njit

    HAVE_NUMBA = True
except ImportError:  # pragma: no cover
    HAVE_NUMBA = False

    def njit(*args, **kwargs):  # type: ignore[no-redef]
        if args and callable(args[0]):
            return args[0]
        return lambda fn: fn


@njit(cache=True)
def hungarian(cost, rows, cols):  # pragma: no cover - compiled
    """Min-cost assignment of ``rows`` ≤ ``cols`` (square top-left block of ``cost``).

    Returns (value, row_to_col, u, v) with ``cost[i, j] - u[i] - v[j] >= 0`` and v ≤ 0: the
    shortest augmenting path method with potentials, O(rows²·cols).
    """
    inf = np.inf
    u = np.zeros(rows + 1)
    v = np.zeros(cols + 1)
    p = np.zeros(cols + 1, dtype=np.int64)  # p[j]: row matched to column j (1-based), 0 = none
    way = np.zeros(cols + 1, dtype=np.int64)
    minv = np.empty(cols + 1)
    used = np.empty(cols + 1, dtype=np.bool_)
    for i in range(1, rows + 1):
        p[0] = i
        j0 = 0
        for j in range(cols + 1):
            minv[j] = inf
            used[j] = False
        while True:
            used[j0] = True
            i0 = p[j0]
            delta = inf
            j1 = 0
            for j in range(1, cols + 1):
                if not used[j]:
                    cur = cost[i0 - 1, j - 1] - u[i0] - v[j]
                    if cur < minv[j]:
                        minv[j] = cur
                        way[j] = j0
                    if minv[j] < delta:
                        delta = minv[j]
                        j1 = j
            for j in range(cols + 1):
                if used[j]:
                    u[p[j]] += delta
                    v[j] -= delta
                else:
                    minv[j] -= delta
            j0 = j1
            if p[j0] == 0:
                break
        while True:
            j1 = way[j0]
            p[j0] = p[j1]
            j0 = j1
            if j0 == 0:
                break
    row_to_col = np.full(rows, -1, dtype=np.int64)
    value = 0.0
    for j in range(1, cols + 1):
        if p[j] != 0:
            row_to_col[p[j] - 1] = j - 1
            value += cost[p[j] - 1, j - 1]
    return value, row_to_col, u[1:], v[1:]


@njit(cache=True)
def full_cost(flow, dist, linear, perm):  # pragma: no cover - compiled
    n = perm.shape[0]
    total = 0.0
    for i in range(n):
        total += linear[i, perm[i]]
        for j in range(n):
            if i != j and flow[i, j] != 0.0:
                total += flow[i, j] * dist[perm[i], perm[j]]
    return total


@njit(cache=True)
def node_bound(flow, dist, linear, order, depth, perm, used, lin):  # pragma: no cover
    """GL bound of the node where ``order[:depth]`` are placed; returns (bound, lap, rows, cols,
    row_to_col, u, v, fixed)."""
    n = flow.shape[0]
    m = dist.shape[0]
    r = n - depth
    # unassigned facilities (rows) and free locations (cols)
    rows = order[depth:]
    cols = np.empty(m - depth, dtype=np.int64)
    c = 0
    for k in range(m):
        if not used[k]:
            cols[c] = k
            c += 1
    s = cols.shape[0]
    fixed = 0.0
    for a in range(depth):
        i = order[a]
        fixed += linear[i, perm[i]]
        for b in range(depth):
            j = order[b]
            if i != j:
                fixed += flow[i, j] * dist[perm[i], perm[j]]
    lap = np.empty((r, s))
    if r > 1:
        fa = np.empty((r, r - 1))
        for x in range(r):
            t = 0
            for y in range(r):
                if x != y:
                    fa[x, t] = -flow[rows[x], rows[y]]
                    t += 1
            fa[x].sort()
        db = np.empty((s, s - 1))
        for x in range(s):
            t = 0
            for y in range(s):
                if x != y:
                    db[x, t] = dist[cols[x], cols[y]]
                    t += 1
            db[x].sort()
        for x in range(r):
            for y in range(s):
                acc = lin[rows[x], cols[y]]
                for t in range(r - 1):
                    acc -= fa[x, t] * db[y, t]
                lap[x, y] = acc
    else:
        for x in range(r):
            for y in range(s):
                lap[x, y] = lin[rows[x], cols[y]]
    value, row_to_col, u, v = hungarian(lap, r, s)
    return fixed + value, lap, rows, cols, row_to_col, u, v, fixed


@njit(cache=True)
def add_linear(flow, dist, lin, i, k, sign):  # pragma: no cover - compiled
    """Add (sign=+1) or remove (−1) the interaction of facility i at location k to ``lin``."""
    n = flow.shape[0]
    m = dist.shape[0]
    for j in range(n):
        if j == i:
            continue
        fij = flow[i, j]
        fji = flow[j, i]
        if fij == 0.0 and fji == 0.0:
            continue
        for l in range(m):
            lin[j, l] += sign * (fji * dist[l, k] + fij * dist[k, l])


@njit(cache=True)
def search(
    flow,
    dist,
    linear,
    order,
    best_perm,
    best_value,
    integral,
    state_perm,
    state_used,
    lin,
    cand,
    ncand,
    ptr,
    depth_arr,
    node_budget,
):  # pragma: no cover - compiled
    """Run the depth-first search for at most ``node_budget`` nodes.

    The search state (``state_perm``, ``state_used``, ``lin``, ``cand``, ``ncand``, ``ptr``,
    ``depth_arr[0]``) is updated in place, so a later call continues where this one stopped.
    ``depth_arr[0] == -1`` means the search is complete (the incumbent is optimal).
    Returns (best_value, nodes explored in this call, root bound or -inf).
    """
    n = flow.shape[0]
    eps = 1e-9 * max(1.0, abs(best_value))
    nodes = 0
    depth = depth_arr[0]
    root = -np.inf
    while depth >= 0 and nodes < node_budget:
        if ptr[depth] < 0:  # entering a new node at this depth: bound it and list its children
            nodes += 1
            if depth == n:
                value = full_cost(flow, dist, linear, state_perm)
                if value < best_value - eps:
                    best_value = value
                    best_perm[:] = state_perm
                    eps = 1e-9 * max(1.0, abs(best_value))
                ptr[depth] = 0
                ncand[depth] = 0
            else:
                bound, lap, rows, cols, row_to_col, u, v, fixed = node_bound(
                    flow, dist, linear, order, depth, state_perm, state_used, lin
                )
                if depth == 0:
                    root = bound
                # the LAP solution completes the partial assignment: try it as an incumbent
                trial = state_perm.copy()
                for x in range(rows.shape[0]):
                    trial[rows[x]] = cols[row_to_col[x]]
                value = full_cost(flow, dist, linear, trial)
                if value < best_value - eps:
                    best_value = value
                    best_perm[:] = trial
                    eps = 1e-9 * max(1.0, abs(best_value))
                limit = best_value - eps
                if integral:
                    limit = best_value - 1.0 + 1e-6
                count = 0
                if bound <= limit:
                    # children: facility rows[0] (= order[depth]) on each free location,
                    # bounded by bound + reduced cost, sorted ascending
                    s = cols.shape[0]
                    keys = np.empty(s)
                    for y in range(s):
                        keys[y] = bound + lap[0, y] - u[0] - v[y]
                    idx = np.argsort(keys)
                    for y in idx:
                        if keys[y] <= limit:
                            cand[depth, count] = cols[y]
                            count += 1
                ncand[depth] = count
                ptr[depth] = 0
        if ptr[depth] >= ncand[depth]:  # no more children: backtrack
            ptr[depth] = -1
            depth -= 1
            if depth >= 0:
                i = order[depth]
                k = state_perm[i]
                add_linear(flow, dist, lin, i, k, -1.0)
                state_used[k] = False
                state_perm[i] = -1
            continue
        k = cand[depth, ptr[depth]]
        ptr[depth] += 1
        i = order[depth]
        state_perm[i] = k
        state_used[k] = True
        add_linear(flow, dist, lin, i, k, 1.0)
        depth += 1
        ptr[depth] = -1
    depth_arr[0] = depth
    return best_value, nodes, root
