"""Shared types of the solvers: what a solver returns, how it is registered and found.

Every algorithm module imports this base module (never the front door,
:mod:`tsched.solvers.registry`): it registers its solver function with :func:`register` and
hands back a :class:`SolverOutput`. The front door imports the algorithms, so the package has no
import circle (scipy.optimize and networkx are laid out the same way).
"""

from __future__ import annotations

import importlib
import importlib.util
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from tsched.errors import InputError
from tsched.problem import PlacementProblem, objective

__all__ = [
    "SolverInfo",
    "SolverOutput",
    "OptionKind",
    "Count",
    "Flag",
    "Assignment",
    "register",
    "unregister",
    "get_solver",
    "solvers",
    "keep_better",
    "validate_options",
    "BUILTIN_MODULES",
    "OPTIMALITY_TOLERANCE",
]

#: Modules that register built-in solvers when imported.
BUILTIN_MODULES = (
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


def unregister(name: str) -> None:
    """Remove solver ``name`` from the registry (for plug-ins and tests; built-ins come back
    only with a fresh interpreter)."""
    _REGISTRY.pop(name, None)


def _load_builtin() -> None:
    for module in BUILTIN_MODULES:
        importlib.import_module(module)


def solvers() -> dict[str, SolverInfo]:
    """All registered solvers by name, in registration order (``tsched.methods``).

    Examples
    --------
    >>> import tsched
    >>> table = tsched.methods()
    >>> "auto" in table and "cpsat" in table, table["cpsat"].exact
    (True, True)
    """
    _load_builtin()
    return dict(_REGISTRY)


def get_solver(method: str) -> SolverInfo:
    """The solver called ``method``; :class:`InputError` listing the valid names otherwise.

    Examples
    --------
    >>> import tsched
    >>> info = tsched.get_solver("greedy")
    >>> info.name, info.exact, info.provides_bound
    ('greedy', False, False)
    """
    table = solvers()
    if method not in table:
        raise InputError(
            f"unknown method {method!r} (valid methods: {', '.join(table)}; e.g. method='greedy')"
        )
    return table[method]


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
