"""Simulated annealing (``method="anneal"``) with O(n) swap deltas.

Same sub-problem as :mod:`tsched.solvers.tabu` (the greedy plan's GPUs plus free ones of its
domain, or all locations of a raw QAP). The start temperature is calibrated from sampled deltas:
the mean uphill move is accepted with probability 1/2 at the start, and each cooling cycle
(50·k² moves, at least 1,000) ends a thousand times colder, then reheats from the best plan.
Seeded and reproducible under an iteration budget. Not exact.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tsched.problem import PlacementProblem, objective
from tsched.solvers.base import Assignment, Count, SolverOutput, register
from tsched.solvers.tabu import MAX_LOCATIONS, prepare_search, run_chunks, start_permutation

__all__ = ["anneal", "calibrate_temperature"]


def _kernel() -> Any:
    """The compiled kernels, imported on first use (numba is slow to import)."""
    from tsched.solvers import _local_kernel

    return _local_kernel


def calibrate_temperature(sub: Any, seed: int, samples: int = 500) -> tuple[float, float]:
    """(start, end) temperatures from the mean uphill delta of random exchanges."""
    rng = np.random.default_rng(seed)
    k = len(sub.pos)
    perm = np.arange(k, dtype=np.int64)
    ups = []
    for _ in range(samples):
        r = int(rng.integers(0, sub.n_real))
        s = int(rng.integers(0, k - 1))
        s += s >= r
        value = _kernel().swap_delta(sub.flow, sub.dist, sub.linear, perm, r, s)
        if value > 0:
            ups.append(value)
    mean = float(np.mean(ups)) if ups else 1.0
    t_start = mean / np.log(2.0)
    return t_start, t_start / 1000.0


@register(
    "anneal",
    supports_hint=True,
    description="simulated annealing, calibrated temperature, reheats; numba kernel",
    options={
        "iterations": "moves without a time limit (default 2000·k)",
        "hint": "a starting assignment (default: greedy; raw QAPs: the better of greedy and FAQ)",
        "max_locations": f"sub-problem size (default {MAX_LOCATIONS})",
    },
    kinds={"iterations": Count(1), "hint": Assignment(), "max_locations": Count(1)},
)
def anneal(
    problem: PlacementProblem, *, time_limit: float | None, seed: int, options: dict[str, Any]
) -> SolverOutput:
    search = prepare_search(problem, options, seed, time_limit)
    if search.trivial:
        return SolverOutput(search.starts[0], message="anneal: nothing to exchange")
    sub, time_limit, target = search.sub, search.time_limit, search.target
    k = len(sub.pos)
    begin_perm = start_permutation(sub, min(search.starts, key=lambda a: objective(problem, a)))
    t_start, t_end = calibrate_temperature(sub, seed)
    iterations = int(options.get("iterations", 2000 * k if time_limit is None else 10**12))
    cycle = max(1000, 50 * k * k)

    def step(perm: np.ndarray, budget: int, chunk_seed: int) -> Any:
        return _kernel().anneal(
            sub.flow,
            sub.dist,
            sub.linear,
            perm,
            sub.n_real,
            budget,
            cycle,
            t_start,
            t_end,
            chunk_seed % (2**31),
            target,
        )

    perm, value, moves = run_chunks(sub, step, time_limit, iterations, seed, target, begin_perm)
    return SolverOutput(
        sub.assignment(perm),
        iterations=moves,
        message=f"anneal: {moves} moves over {k} locations",
        stats={"locations": k, "t_start": t_start, "t_end": t_end},
    )
