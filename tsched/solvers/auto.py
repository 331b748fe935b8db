"""``method="auto"``: pick a method by size and structure and record why.

Today the choice is the topology-aware greedy with swap refinement for every instance; the
exact and large-scale methods register themselves here as they arrive. The chosen method and the
reason are in ``result.stats["auto_choice"]`` and ``result.message``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from tsched.problem import PlacementProblem
from tsched.solvers.registry import SolverOutput, get_solver, register

__all__ = ["auto"]


@register("auto", description="choose a method by size and structure (records the choice)")
def auto(
    problem: PlacementProblem, *, time_limit: float | None, seed: int, options: dict[str, Any]
) -> SolverOutput:
    method = "greedy"
    why = "greedy construction + swap refinement (the only general method installed)"
    out = get_solver(method).fn(problem, time_limit=time_limit, seed=seed, options={})
    stats = {**out.stats, "auto_choice": method, "auto_reason": why}
    return replace(out, method=method, stats=stats, message=f"auto → {method}: {out.message}")
