"""scipy's FAQ (``method="faq"``): Fast Approximate QAP (Vogelstein et al. 2015), best of k
randomised starts.

FAQ relaxes the permutation to a doubly stochastic matrix, runs Frank–Wolfe on the relaxed
objective and projects back with a linear assignment. It needs dense square matrices: the flow
is padded with zero rows to the m locations (O(m²) memory, O(m³) per iteration), so it is meant
for problems up to about a thousand locations. Per-location linear costs are not modelled by
FAQ; its plans are still scored on the full objective. Used as a baseline and as a start for
tabu search on raw QAPs, where its plans often lie in a better basin than a greedy start.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from tsched.problem import PlacementProblem, objective
from tsched.solvers.base import Count, SolverOutput, register

__all__ = ["faq", "faq_best"]


def faq_best(
    problem: PlacementProblem, starts: int, seed: int, deadline: float | None = None
) -> tuple[np.ndarray, int]:
    """Best FAQ plan over ``starts`` randomised starts (at least one; fewer if ``deadline``, a
    ``time.perf_counter()`` value, passes). Returns (assignment, starts run)."""
    from scipy.optimize import quadratic_assignment  # slow to import: only when used

    n, m = problem.n_workers, problem.n_locations
    flow = np.zeros((m, m))
    flow[:n, :n] = problem.flow_dense()
    dist = problem.distance()
    rng = np.random.default_rng(seed)
    best, best_value, run = None, np.inf, 0
    for _ in range(max(1, starts)):
        res = quadratic_assignment(
            flow, dist, method="faq", options={"P0": "randomized", "rng": rng}
        )
        a = np.asarray(res.col_ind[:n], dtype=np.int64)
        value = objective(problem, a)
        run += 1
        if value < best_value:
            best, best_value = a, value
        if deadline is not None and time.perf_counter() > deadline:
            break
    assert best is not None
    return best, run


@register(
    "faq",
    baseline=True,
    description="scipy FAQ (Frank-Wolfe on the relaxation), best of k randomised starts",
    options={"starts": "randomised starts (default 10)"},
    kinds={"starts": Count(1, 100_000)},
)
def faq(
    problem: PlacementProblem, *, time_limit: float | None, seed: int, options: dict[str, Any]
) -> SolverOutput:
    deadline = None if time_limit is None else time.perf_counter() + time_limit
    assignment, run = faq_best(problem, int(options.get("starts", 10)), seed, deadline)
    return SolverOutput(assignment, iterations=run, message=f"scipy FAQ, best of {run} starts")
