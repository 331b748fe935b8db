"""The one front door of the solvers, :func:`solve`.

Each solver is a plain function ``fn(problem, *, time_limit, seed, options) -> SolverOutput``
registered under a name with capability metadata (:mod:`tsched.solvers.base`). :func:`solve`
validates the arguments, short-cuts infeasible problems, runs the solver, recomputes the
objective in floating point from the assignment, attaches the best lower bound it knows, and
decides the status: ``optimal`` only when the solver proved it or the bound meets the objective.

The registry's lookups (:func:`solvers`, :func:`get_solver`) and its types are re-exported here
for callers of the front door; solver modules import them from :mod:`tsched.solvers.base`.
"""

from __future__ import annotations

import importlib.util
import logging
import math
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from tsched.errors import InputError, SolverError, SolverNotAvailableError
from tsched.plan import PlacementResult, relative_gap
from tsched.problem import PlacementProblem, check_assignment, objective
from tsched.solvers.base import (
    OPTIMALITY_TOLERANCE,
    SolverInfo,
    SolverOutput,
    get_solver,
    register,
    solvers,
    validate_options,
)
from tsched.solvers.bounds import best_bound, needs_assignment_solver

__all__ = ["SolverInfo", "SolverOutput", "register", "get_solver", "solvers", "solve"]

log = logging.getLogger(__name__)


def __getattr__(name: str) -> Any:  # METHODS is computed so late registrations are included
    if name == "METHODS":
        return tuple(solvers())
    raise AttributeError(name)


def solve(
    problem: PlacementProblem,
    *,
    method: str = "auto",
    time_limit: float | None = None,
    seed: int | None = None,
    options: Mapping[str, Any] | None = None,
) -> PlacementResult:
    """Solve a placement problem with the named method.

    Parameters
    ----------
    problem : PlacementProblem
    method : str
        A registered name (see ``tsched methods``); ``"auto"`` chooses by size and structure.
    time_limit : float, optional
        Seconds; solvers honour it as a budget and return the best found so far.
    seed : int, optional
        Seed for every random choice (default 0); same seed and input give the same result.
    options : dict, optional
        Solver-specific options; unknown keys raise :class:`InputError` listing the valid ones.

    Returns
    -------
    PlacementResult
        Status ``infeasible`` (not an exception) when the workload does not fit.

    Raises
    ------
    InputError
        Unknown method or option, bad time limit or seed.
    SolverNotAvailableError
        The method's optional dependency is not installed (the message names the extra).
    SolverError
        The solver returned an invalid assignment or a bound above its objective.

    Examples
    --------
    >>> import tsched
    >>> problem = tsched.PlacementProblem.build(tsched.presets.cluster("dgx-h100-4node"),
    ...                                         tsched.presets.workload("llama3-8b-tp8-dp2"))
    >>> result = tsched.solve(problem, method="greedy", seed=0)
    >>> result.status in ("optimal", "feasible")
    True
    """
    info = get_solver(method)
    opts = validate_options(info, options)
    if time_limit is not None:
        if (
            isinstance(time_limit, bool)
            or not isinstance(time_limit, (int, float))
            or not math.isfinite(time_limit)
            or time_limit <= 0
        ):
            raise InputError(
                f"time_limit: must be a positive number of seconds, "
                f"got {time_limit!r} (e.g. time_limit=10)"
            )
    if seed is None:
        seed = 0
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise InputError(f"seed: must be an integer >= 0, got {seed!r} (e.g. seed=0)")
    seed = int(seed)
    if not info.installed():
        missing = [m for m in info.required_modules if importlib.util.find_spec(m) is None]
        raise SolverNotAvailableError(
            f"method {method!r} needs {', '.join(missing)}; install it with "
            f"pip install 'tsched[{info.extra or 'all'}]'"
        )

    if needs_assignment_solver(problem):
        import scipy.optimize  # noqa: F401  loading a module is not solving time
    start = time.perf_counter()
    if not problem.feasible:
        return PlacementResult(
            "infeasible",
            None,
            None,
            None,
            None,
            method,
            time.perf_counter() - start,
            message=problem.infeasible_reason,
            seed=seed,
            problem=problem,
        )
    if opts.get("hint") is not None:
        try:
            opts["hint"] = check_assignment(problem, opts["hint"])
        except InputError as exc:
            raise InputError(f"method {method!r}: option hint: {exc}") from None
    try:
        out = info.fn(problem, time_limit=time_limit, seed=seed, options=opts)
    except (InputError, SolverNotAvailableError, SolverError):
        raise
    except MemoryError as exc:
        raise SolverError(f"method {method!r} ran out of memory on {problem.name}") from exc
    used = out.method or method
    if out.assignment is None:
        status = "infeasible" if out.proved_infeasible else "no_solution"
        return PlacementResult(
            status,
            None,
            None,
            out.bound,
            None,
            used,
            time.perf_counter() - start,
            out.iterations,
            out.message,
            dict(out.stats),
            seed,
            problem,
        )
    try:
        assignment = check_assignment(problem, out.assignment)
    except InputError as exc:
        raise SolverError(f"method {used!r} returned an invalid assignment: {exc}") from exc
    value = objective(problem, assignment)
    if out.bound is not None and out.bound >= value - 1e-9 * max(1.0, abs(value)):
        bound, source = float(out.bound), used  # the solver proved it: no need to look further
    else:
        bound, source = best_bound(problem, target=value)
        if out.bound is not None and (bound is None or out.bound > bound):
            bound, source = float(out.bound), used
    if bound is not None and bound > value + 1e-9 * max(1.0, abs(value)):
        raise SolverError(f"method {used!r}: lower bound {bound!r} exceeds objective {value!r}")
    if bound is not None:
        bound = min(bound, value)
    elif out.proved_optimal:
        bound = value
    tol = OPTIMALITY_TOLERANCE * max(1.0, abs(value))
    status = (
        "optimal"
        if (out.proved_optimal or (bound is not None and value - bound <= tol))
        else "feasible"
    )
    stats = dict(out.stats)
    stats.setdefault("bound_source", source if bound is not None else None)
    wall = time.perf_counter() - start
    log.debug(
        "%s on %s: %s objective=%g bound=%s in %.3fs",
        used,
        problem.name,
        status,
        value,
        bound,
        wall,
    )
    return PlacementResult(
        status,
        assignment,
        value,
        bound,
        relative_gap(value, bound),
        used,
        wall,
        out.iterations,
        out.message,
        stats,
        seed,
        problem,
    )
