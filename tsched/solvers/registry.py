"""Solver registry and the one front door, :func:`solve`.

Each solver is a plain function ``fn(problem, *, time_limit, seed, options) -> SolverOutput``
registered under a name with capability metadata. :func:`solve` validates the arguments,
short-cuts infeasible problems, runs the solver, recomputes the objective in floating point from
the assignment, attaches the best lower bound it knows, and decides the status: ``optimal`` only
when the solver proved it or the bound meets the objective.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from tsched.errors import InputError, SolverError, SolverNotAvailableError
from tsched.plan import PlacementResult, relative_gap
from tsched.problem import PlacementProblem, check_assignment, objective

__all__ = ["SolverInfo", "SolverOutput", "register", "get_solver", "solvers", "solve"]

log = logging.getLogger(__name__)

#: Modules that register built-in solvers when imported.
_BUILTIN_MODULES = (
    "tsched.solvers.baselines",
    "tsched.solvers.greedy",
    "tsched.solvers.bnb",
    "tsched.solvers.tabu",
    "tsched.solvers.anneal",
    "tsched.solvers.hierarchical",
    "tsched.solvers.faq",
    "tsched.solvers.cpsat",
    "tsched.solvers.milp",
    "tsched.solvers.lap",
    "tsched.solvers.auto",
)
#: Relative gap under which a bound is taken to meet the objective (float costs are scaled to
#: integers by CP-SAT and MILP backends, so proofs hold up to this tolerance).
OPTIMALITY_TOLERANCE = 1e-6


@dataclass(frozen=True, slots=True)
class SolverOutput:
    """What a solver function hands back to :func:`solve`."""

    assignment: np.ndarray | None
    bound: float | None = None
    proved_optimal: bool = False
    proved_infeasible: bool = False
    iterations: int = 0
    message: str = ""
    stats: Mapping[str, Any] = field(default_factory=dict)
    method: str | None = None  # the method actually used (set by meta-solvers such as auto)


SolverFn = Callable[..., SolverOutput]


class OptionKind:
    """How :func:`validate_options` reads one option's value: ``read(method, key, value)``
    returns it converted, or raises :class:`InputError` naming the method, the option, the bad
    value and what was expected."""

    expected = ""

    def read(self, method: str, key: str, value: Any) -> Any:
        raise NotImplementedError

    def fail(self, method: str, key: str, value: Any) -> InputError:
        return InputError(f"method {method!r}: option {key}={value!r} must be {self.expected}")


@dataclass(frozen=True)
class Count(OptionKind):
    """An integer in [``minimum``, ``maximum``] (a whole float such as the command line's
    ``1e3`` counts)."""

    minimum: int
    maximum: int | None = None

    @property
    def expected(self) -> str:  # type: ignore[override]
        top = f"..{self.maximum}" if self.maximum is not None else " or more"
        return f"an integer {self.minimum}{top}"

    def read(self, method: str, key: str, value: Any) -> int:
        number: Any = value
        if isinstance(value, str):
            try:
                number = float(value.strip())
            except ValueError:
                raise self.fail(method, key, value) from None
        if isinstance(number, bool) or not isinstance(number, int | float | np.integer):
            raise self.fail(method, key, value)
        if not math.isfinite(number) or number != int(number):
            raise self.fail(method, key, value)
        count = int(number)
        if count < self.minimum or (self.maximum is not None and count > self.maximum):
            raise self.fail(method, key, value)
        return count


@dataclass(frozen=True)
class Flag(OptionKind):
    """``true`` or ``false`` (a boolean, or its name)."""

    expected = "true or false"

    def read(self, method: str, key: str, value: Any) -> bool:
        if isinstance(value, bool | np.bool_):
            return bool(value)
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            return value.strip().lower() == "true"
        raise self.fail(method, key, value)


@dataclass(frozen=True)
class Assignment(OptionKind):
    """A location per worker: a sequence of integers, or their list ``0,5,3`` as text
    (checked against the problem when it is solved)."""

    expected = "a location per worker, integers (e.g. hint=0,1,2,3)"

    def read(self, method: str, key: str, value: Any) -> np.ndarray:
        items = value.split(",") if isinstance(value, str) else value
        if isinstance(items, int | np.integer) and not isinstance(items, bool):
            items = [items]
        try:
            plan = np.asarray(items)
        except (TypeError, ValueError):
            raise self.fail(method, key, value) from None
        if plan.dtype.kind in "US":
            try:
                plan = np.array([int(str(x).strip()) for x in plan.ravel()])
            except ValueError:
                raise self.fail(method, key, value) from None
        if plan.ndim != 1 or not len(plan) or plan.dtype.kind not in "iu":
            raise self.fail(method, key, value)
        return plan.astype(np.int64)


@dataclass(frozen=True, slots=True)
class SolverInfo:
    """A registered solver and what it can do."""

    name: str
    fn: SolverFn
    description: str
    exact: bool = False
    provides_bound: bool = False
    supports_hint: bool = False
    required_modules: tuple[str, ...] = ()
    extra: str = ""
    options: Mapping[str, str] = field(default_factory=dict)
    baseline: bool = False
    kinds: Mapping[str, OptionKind] = field(default_factory=dict)

    def installed(self) -> bool:
        """True when every required module can be found (checked without importing it)."""
        return all(importlib.util.find_spec(m) is not None for m in self.required_modules)


_REGISTRY: dict[str, SolverInfo] = {}


def register(
    name: str,
    *,
    description: str,
    exact: bool = False,
    provides_bound: bool = False,
    supports_hint: bool = False,
    required_modules: tuple[str, ...] = (),
    extra: str = "",
    options: Mapping[str, str] | None = None,
    baseline: bool = False,
    kinds: Mapping[str, OptionKind] | None = None,
) -> Callable[[SolverFn], SolverFn]:
    """Decorator: register ``fn`` as solver ``name``. ``options`` maps option keys to help,
    ``kinds`` some of them to how their values are read (:class:`Count`, :class:`Flag`,
    :class:`Assignment`); the solver reads the others itself."""
    unknown = set(kinds or {}) - set(options or {})
    assert not unknown, f"{name}: kinds for undocumented options {sorted(unknown)}"

    def deco(fn: SolverFn) -> SolverFn:
        _REGISTRY[name] = SolverInfo(
            name,
            fn,
            description,
            exact,
            provides_bound,
            supports_hint,
            required_modules,
            extra,
            dict(options or {}),
            baseline,
            dict(kinds or {}),
        )
        return fn

    return deco


def _load_builtin() -> None:
    for module in _BUILTIN_MODULES:
        importlib.import_module(module)


def solvers() -> dict[str, SolverInfo]:
    """All registered solvers by name, in registration order."""
    _load_builtin()
    return dict(_REGISTRY)


def get_solver(method: str) -> SolverInfo:
    """The solver called ``method``; :class:`InputError` listing the valid names otherwise."""
    table = solvers()
    if method not in table:
        raise InputError(
            f"unknown method {method!r} (valid methods: {', '.join(table)}; e.g. method='greedy')"
        )
    return table[method]


def __getattr__(name: str) -> Any:  # METHODS is computed so late registrations are included
    if name == "METHODS":
        return tuple(solvers())
    raise AttributeError(name)


def keep_better(problem: PlacementProblem, out: SolverOutput, start: np.ndarray) -> SolverOutput:
    """``out`` with its assignment replaced by ``start`` when the start is strictly better.

    Exact backends stopped by a time limit can return a worse incumbent than the hint they were
    given (some ignore warm starts); their bound stays valid either way.
    """
    if out.assignment is None or objective(problem, start) < objective(problem, out.assignment):
        return replace(
            out,
            assignment=np.asarray(start),
            proved_optimal=False,
            message=out.message + "; kept the better start",
        )
    return out


def validate_options(info: SolverInfo, options: Mapping[str, Any] | None) -> dict[str, Any]:
    """Reject option keys the solver does not know, listing the valid ones, and values its
    :class:`OptionKind` refuses; returns the options with those values converted."""
    options = dict(options or {})
    unknown = sorted(set(options) - set(info.options))
    if unknown:
        valid = ", ".join(sorted(info.options)) or "none"
        raise InputError(
            f"method {info.name!r}: unknown option {unknown[0]!r} (valid options: {valid})"
        )
    for key, kind in info.kinds.items():
        if key in options:
            options[key] = kind.read(info.name, key, options[key])
    return options


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

    from tsched.solvers.bounds import needs_assignment_solver

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
    from tsched.solvers.bounds import best_bound

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
