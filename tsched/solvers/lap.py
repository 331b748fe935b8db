"""``method="lap"``: a placement without pairwise traffic is a linear assignment problem.

When no two workers exchange traffic, the objective is Σ_i C[i, p(i)] (the workload's per-GPU
costs, ``gpu_costs``) and the choices do not interact: scipy's ``linear_sum_assignment`` (a
shortest augmenting path method, rectangular n × m) finds the optimum exactly. Without per-GPU
costs every plan costs 0 and the first n usable GPUs are taken. On a problem with traffic the
method still answers, as a reference point: the per-GPU costs' optimum with the traffic ignored,
neither proved nor bounded (``auto`` never picks it there).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tsched.problem import PlacementProblem
from tsched.solvers.base import SolverOutput, register

__all__ = ["lap", "solve_lap"]


def solve_lap(problem: PlacementProblem) -> tuple[np.ndarray, float]:
    """The optimal assignment of the linear costs alone, and its value."""
    n = problem.n_workers
    if problem.linear is None:
        return np.arange(n, dtype=np.int64), 0.0
    from scipy.optimize import linear_sum_assignment  # slow to import: only when used

    lin = problem.linear
    rows, cols = linear_sum_assignment(lin)
    assignment = np.empty(n, dtype=np.int64)
    assignment[rows] = cols
    return assignment, float(lin[rows, cols].sum())


@register(
    "lap",
    provides_bound=True,
    description="linear assignment (scipy): exact without pairwise traffic, else ignores it",
)
def lap(
    problem: PlacementProblem, *, time_limit: float | None, seed: int, options: dict[str, Any]
) -> SolverOutput:
    assignment, value = solve_lap(problem)
    what = "per-GPU costs" if problem.linear is not None else "no costs at all"
    if problem.n_edges:
        return SolverOutput(
            assignment,
            message=f"linear assignment of the {what} alone; the {problem.n_edges} traffic "
            "pairs are ignored (a quadratic assignment: use auto)",
        )
    return SolverOutput(
        assignment,
        bound=value,
        proved_optimal=True,
        message=f"linear assignment of {problem.n_workers} workers on {problem.n_locations} "
        f"GPUs ({what}): exact",
        stats={"bound_source": "linear-assignment"},
    )
