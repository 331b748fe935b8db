"""``method="auto"``: pick a method by size and structure, and record why.

1. Run the topology-aware greedy (fast at any size) and compute the best lower bound
   (:func:`tsched.solvers.bounds.best_bound`). If they meet, the greedy plan is proved optimal.
2. Small flat instances (up to :data:`BNB_MAX` facilities) go to branch and bound.
3. On a cluster, the hierarchical decomposition (top-down partitioning + sparse local search)
   runs too, and the better plan of the two goes on (MoE all-to-all traffic is where the
   partitioning wins; whole nodes and leaves where greedy's domain choice does).
   Above :data:`TABU_MAX_WORKERS` workers an iterated sparse local search (exchanges and moves
   near traffic partners, kicks, keep the better) improves it until the time limit.
4. Robust tabu search improves that plan (up to :data:`TABU_MAX_WORKERS` workers), stopping
   early if it reaches the bound: with all the time left, or with a third of it when the
   hierarchical CP-SAT model (worker → node, up to :data:`CPSAT_MAX_WORKERS` workers, GPUs of a
   node interchangeable) can then try to prove optimality from that plan.
5. The best plan found stands, with the best bound and its gap.

The choice and the reason are in ``result.stats["auto_choice"]`` / ``["auto_reason"]`` and in
the message. Without a time limit, ``auto`` allows itself :data:`DEFAULT_TIME_LIMIT` seconds.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from tsched.problem import PlacementProblem, objective
from tsched.solvers._hier import hierarchical_view
from tsched.solvers.bounds import best_bound
from tsched.solvers.hierarchical import sparse_refine
from tsched.solvers.registry import SolverOutput, get_solver, keep_better, register

__all__ = ["auto", "DEFAULT_TIME_LIMIT", "BNB_MAX", "CPSAT_MAX_WORKERS"]

DEFAULT_TIME_LIMIT = 10.0
#: Largest flat QAP handed to branch and bound.
BNB_MAX = 16
#: Largest worker count handed to the hierarchical CP-SAT model.
CPSAT_MAX_WORKERS = 256
#: Largest worker count improved by tabu search (its moves scan a k × k delta matrix).
TABU_MAX_WORKERS = 1024


@register(
    "auto",
    description="greedy + bound; proves small/hierarchical cases with bnb or "
    "CP-SAT; records the choice",
)
def auto(
    problem: PlacementProblem, *, time_limit: float | None, seed: int, options: dict[str, Any]
) -> SolverOutput:
    start = time.perf_counter()
    limit = DEFAULT_TIME_LIMIT if time_limit is None else time_limit
    greedy = get_solver("greedy").fn(
        problem, time_limit=max(0.05, limit / 4), seed=seed, options={}
    )
    value = objective(problem, greedy.assignment)
    bound, source = best_bound(problem)
    tol = 1e-9 * max(1.0, abs(value))
    if bound is not None and value - bound <= tol:
        return _choose(greedy, "greedy", f"greedy meets the {source} bound: proved optimal")
    n = problem.n_workers
    flat = problem.cluster is None or problem.n_locations <= BNB_MAX
    if flat and n <= BNB_MAX and problem.n_locations <= BNB_MAX + 4:
        left = limit - (time.perf_counter() - start)
        out = get_solver("bnb").fn(
            problem, time_limit=max(0.05, left), seed=seed, options={"hint": greedy.assignment}
        )
        why = f"small flat instance ({n} facilities): branch and bound"
        return _choose(keep_better(problem, out, greedy.assignment), "bnb", why)
    view, reason = (None, "raw QAP") if problem.cluster is None else hierarchical_view(problem)
    exact = view is not None and n <= CPSAT_MAX_WORKERS
    current, label = greedy, "greedy"
    if problem.cluster is not None:
        left = limit - (time.perf_counter() - start)
        share = left / 2 if n > TABU_MAX_WORKERS else left / 3  # no tabu stage above the limit
        hier = get_solver("hierarchical").fn(
            problem, time_limit=max(0.05, share), seed=seed, options={}
        )
        if objective(problem, hier.assignment) < value - tol:
            current, label = hier, "hierarchical"
        if n > TABU_MAX_WORKERS:  # too large for dense tabu: iterated sparse search to the end
            refined, moves = sparse_refine(
                problem, current.assignment, start + limit, seed=seed, kicks=-1
            )
            if objective(problem, refined) < objective(problem, current.assignment) - tol:
                message = f"{current.message} + iterated sparse search ({moves} moves)"
                current = replace(current, assignment=refined, message=message)
        best = objective(problem, current.assignment)
        if bound is not None and best - bound <= tol:
            return _choose(current, label, f"{label} meets the {source} bound: proved optimal")
    # improve the start by tabu search: all the time left, or a third of it before CP-SAT
    left = limit - (time.perf_counter() - start)
    share = left / 3 if exact else left
    if left > 0.1 and problem.n_workers <= TABU_MAX_WORKERS:
        # a raw QAP: no hint, so tabu starts from the better of greedy and FAQ
        hint = {} if problem.cluster is None else {"hint": current.assignment}
        searched = get_solver("tabu").fn(problem, time_limit=share, seed=seed, options=hint)
        if (
            searched.assignment is not None
            and objective(problem, searched.assignment)
            < objective(problem, current.assignment) - tol
        ):
            current, label = searched, "tabu"
        if objective(problem, current.assignment) - (bound if bound is not None else -1e300) <= tol:
            return _choose(current, label, f"{label} reached the {source} bound")
    left = limit - (time.perf_counter() - start)
    if not exact or left <= 0.05:
        searched = "tabu search from " if n <= TABU_MAX_WORKERS else ""
        if view is None:
            why = f"{searched}the best of greedy and hierarchical (no exact model: {reason})"
        else:
            why = (
                f"{searched}the best of greedy and hierarchical ({n} workers > {CPSAT_MAX_WORKERS})"
            )
        return _choose(current, label, why)
    assert view is not None
    out = get_solver("cpsat").fn(
        problem, time_limit=left, seed=seed, options={"hint": current.assignment}
    )
    why = (
        f"greedy, hierarchical and tabu search, then the hierarchical CP-SAT model "
        f"({n} workers on {len(view.nodes)} nodes)"
    )
    return _choose(keep_better(problem, out, current.assignment), "cpsat", why)


def _choose(out: SolverOutput, method: str, why: str) -> SolverOutput:
    stats = {**out.stats, "auto_choice": method, "auto_reason": why}
    return replace(
        out, method=method, stats=stats, message=f"auto → {method}: {why}. {out.message}"
    )
