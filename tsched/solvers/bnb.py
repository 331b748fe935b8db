"""Exact branch and bound for flat QAPs (``method="bnb"``).

Depth-first search over facilities (heaviest flow first) with the Gilmore–Lawler bound at every
node, child pruning by the linear assignment's dual prices, and the LAP solution of every node
tried as an incumbent; the start incumbent comes from the greedy solver. The kernel is compiled
with numba when it is installed (``pip install 'tsched[numba]'``) and runs as plain Python
otherwise; :func:`reference_branch_and_bound` is a small pure-numpy version the tests compare
with.

Exact: status ``optimal`` when the search completes. Out of time, it returns the best assignment
with the root bound. Needs the dense distance matrix, so it is meant for n up to about 15
(exponential in n); it proves nug12-size QAPLIB instances in seconds.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from tsched.problem import PlacementProblem, objective
from tsched.solvers.base import Assignment, Count, SolverOutput, get_solver, register
from tsched.solvers.bounds import min_scalar_products

__all__ = ["bnb", "reference_branch_and_bound"]


def _kernel() -> Any:
    """The compiled kernels, imported on first use (numba is slow to import)."""
    from tsched.solvers import _bnb_kernel

    return _bnb_kernel


#: Time limit used when none is given (seconds).
DEFAULT_TIME_LIMIT = 60.0
#: Nodes explored per kernel call between time checks.
NODE_BUDGET = 20_000


def _dense(problem: PlacementProblem) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    flow = np.ascontiguousarray(problem.flow_dense(), dtype=np.float64)
    dist = np.ascontiguousarray(problem.distance(), dtype=np.float64)
    if problem.linear is not None:
        linear = np.ascontiguousarray(problem.linear, dtype=np.float64)
    else:
        linear = np.zeros((problem.n_workers, problem.n_locations))
    return flow, dist, linear


@register(
    "bnb",
    exact=True,
    provides_bound=True,
    supports_hint=True,
    description="branch and bound with Gilmore-Lawler bounds (numba kernel), small QAPs",
    options={
        "hint": "a starting assignment (array of locations) to use as incumbent",
        "node_budget": f"nodes per kernel call between time checks (default {NODE_BUDGET})",
    },
    kinds={"hint": Assignment(), "node_budget": Count(1)},
)
def bnb(
    problem: PlacementProblem, *, time_limit: float | None, seed: int, options: dict[str, Any]
) -> SolverOutput:
    start = time.perf_counter()
    limit = DEFAULT_TIME_LIMIT if time_limit is None else time_limit
    flow, dist, linear = _dense(problem)
    n, m = flow.shape[0], dist.shape[0]
    if m > n and np.any(flow < 0):
        return SolverOutput(
            None,
            message="bnb: negative flows need as many locations as "
            "facilities (the bound's rearrangement step)",
        )
    hint = options.get("hint")
    if hint is None:
        greedy = get_solver("greedy").fn(
            problem, time_limit=max(0.05, limit / 10), seed=seed, options={}
        )
        hint = greedy.assignment
    best_perm = np.asarray(hint, dtype=np.int64).copy()
    best_value = float(_kernel().full_cost(flow, dist, linear, best_perm))
    integral = bool(
        np.all(flow == np.round(flow))
        and np.all(dist == np.round(dist))
        and np.all(linear == np.round(linear))
    )
    order = np.argsort(-(flow.sum(axis=0) + flow.sum(axis=1)), kind="stable").astype(np.int64)
    state_perm = np.full(n, -1, dtype=np.int64)
    state_used = np.zeros(m, dtype=np.bool_)
    lin = linear.copy()
    cand = np.zeros((n + 1, m), dtype=np.int64)
    ncand = np.zeros(n + 1, dtype=np.int64)
    ptr = np.full(n + 1, -1, dtype=np.int64)
    depth = np.zeros(1, dtype=np.int64)
    max_budget = int(options.get("node_budget", NODE_BUDGET))
    budget = 16  # grows once the time per node is known, so short limits are honoured
    nodes = 0
    root_bound = -np.inf
    while depth[0] >= 0:
        tick = time.perf_counter()
        best_value, explored, root = _kernel().search(
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
            depth,
            budget,
        )
        now = time.perf_counter()
        nodes += explored
        root_bound = max(root_bound, root)
        left = limit - (now - start)
        if left <= 0:
            break
        per_node = (now - tick) / max(explored, 1)
        budget = int(min(max_budget, max(16, 0.5 * left / max(per_node, 1e-9))))
    proved = bool(depth[0] < 0)
    stats = {
        "nodes": nodes,
        "kernel": "numba" if _kernel().HAVE_NUMBA else "python",
        "root_bound": None if not np.isfinite(root_bound) else float(root_bound),
    }
    message = (
        f"bnb: proved optimal after {nodes} nodes"
        if proved
        else f"bnb: stopped by the time limit ({limit:g} s) after {nodes} nodes"
    )
    bound = best_value if proved else (float(root_bound) if np.isfinite(root_bound) else None)
    return SolverOutput(
        best_perm,
        bound=bound,
        proved_optimal=proved,
        iterations=nodes,
        message=message,
        stats=stats,
    )


def reference_branch_and_bound(problem: PlacementProblem) -> tuple[float, np.ndarray]:
    """Plain recursive branch and bound with the Gilmore–Lawler bound (numpy + scipy LAP).

    Slow, small and obviously correct: the tests check the kernel against it. O(exponential).
    """
    from scipy.optimize import linear_sum_assignment  # slow to import: only when used

    flow, dist, linear = _dense(problem)
    n, m = flow.shape[0], dist.shape[0]
    best = [np.inf, np.zeros(n, dtype=np.int64)]

    def bound(perm: np.ndarray, free: np.ndarray) -> float:
        placed = np.flatnonzero(perm >= 0)
        rest = np.flatnonzero(perm < 0)
        fixed = float(linear[placed, perm[placed]].sum())
        fixed += float(
            (flow[np.ix_(placed, placed)] * dist[np.ix_(perm[placed], perm[placed])]).sum()
        )
        lin = linear[np.ix_(rest, free)].copy()
        lin += flow[np.ix_(rest, placed)] @ dist[np.ix_(free, perm[placed])].T
        lin += flow[np.ix_(placed, rest)].T @ dist[np.ix_(perm[placed], free)]
        if len(rest) > 1:
            fr = flow[np.ix_(rest, rest)]
            dr = dist[np.ix_(free, free)]
            k, s = len(rest), len(free)
            a = fr[~np.eye(k, dtype=bool)].reshape(k, k - 1)
            b = dr[~np.eye(s, dtype=bool)].reshape(s, s - 1)
            lin = lin + min_scalar_products(a, b)
        rows, cols = linear_sum_assignment(lin)
        return fixed + float(lin[rows, cols].sum())

    def visit(perm: np.ndarray) -> None:
        free = np.setdiff1d(np.arange(m), perm[perm >= 0])
        if np.all(perm >= 0):
            value = objective(problem, perm)
            if value < best[0]:
                best[0], best[1] = value, perm.copy()
            return
        if bound(perm, free) >= best[0] - 1e-9:
            return
        i = int(np.flatnonzero(perm < 0)[0])
        for k in free:
            perm[i] = k
            visit(perm)
            perm[i] = -1

    visit(np.full(n, -1, dtype=np.int64))
    return float(best[0]), best[1]
