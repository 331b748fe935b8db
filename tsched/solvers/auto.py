"""``method="auto"``: pick a method by size and structure, and record why.

1. Run the topology-aware greedy (fast at any size) and compute the best lower bound
   (:func:`tsched.solvers.bounds.best_bound`). If they meet, the greedy plan is proved optimal.
2. Otherwise, if the instance is small or hierarchically compact, try to prove optimality in the
   time left: branch and bound for flat QAPs up to :data:`BNB_MAX` facilities; the hierarchical
   CP-SAT model (worker → node) for clusters whose GPUs per node are interchangeable, up to
   :data:`CPSAT_MAX_WORKERS` workers. The better of the two answers is kept.
3. Otherwise the greedy plan stands, with its bound and gap.

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
from tsched.solvers.registry import SolverOutput, get_solver, keep_better, register

__all__ = ["auto", "DEFAULT_TIME_LIMIT", "BNB_MAX", "CPSAT_MAX_WORKERS"]

DEFAULT_TIME_LIMIT = 10.0
#: Largest flat QAP handed to branch and bound.
BNB_MAX = 16
#: Largest worker count handed to the hierarchical CP-SAT model.
CPSAT_MAX_WORKERS = 256


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
    left = limit - (time.perf_counter() - start)
    n = problem.n_workers
    exact: str | None = None
    why = ""
    if problem.cluster is None or problem.n_locations <= BNB_MAX:
        if n <= BNB_MAX and problem.n_locations <= BNB_MAX + 4:
            exact, why = "bnb", f"small flat instance ({n} facilities): branch and bound"
    else:
        view, reason = hierarchical_view(problem)
        if view is not None and n <= CPSAT_MAX_WORKERS:
            exact, why = (
                "cpsat",
                (f"hierarchical model ({n} workers on {len(view.nodes)} nodes): CP-SAT"),
            )
        elif view is None:
            why = f"no exact model: {reason}"
        else:
            why = f"{n} workers exceed the exact models' reach ({CPSAT_MAX_WORKERS})"
    if exact is None or left <= 0.05:
        why = why or f"{n} workers: no exact method within reach"
        return _choose(greedy, "greedy", f"greedy + bound ({why})")
    out = get_solver(exact).fn(
        problem, time_limit=left, seed=seed, options={"hint": greedy.assignment}
    )
    return _choose(keep_better(problem, out, greedy.assignment), exact, why)


def _choose(out: SolverOutput, method: str, why: str) -> SolverOutput:
    stats = {**out.stats, "auto_choice": method, "auto_reason": why}
    return replace(
        out, method=method, stats=stats, message=f"auto → {method}: {why}. {out.message}"
    )
