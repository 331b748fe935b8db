"""The few exception types of tsched (DESIGN.md §5).

Infeasible or out-of-time results are statuses on a :class:`~tsched.plan.PlacementResult`, never
exceptions. Exceptions are for bad input, a missing optional backend, a crashing backend and
executor failures. Each class carries the CLI exit code it maps to.
"""

from __future__ import annotations

__all__ = [
    "TschedError",
    "InputError",
    "SolverNotAvailableError",
    "DiscoveryError",
    "SolverError",
    "ExecutorError",
]


class TschedError(Exception):
    """Base class of every error tsched raises on purpose."""

    exit_code = 3


class InputError(TschedError, ValueError):
    """Bad input: a file, a field, an argument. The message names which and what was expected."""

    exit_code = 2


class SolverNotAvailableError(TschedError):
    """An optional solver backend is not installed; the message names the extra to install."""

    exit_code = 3


class SolverError(TschedError):
    """A solver backend crashed or returned something that cannot be used."""

    exit_code = 3


class ExecutorError(TschedError):
    """An executor (Ray, Kubernetes, Dynamo) failed; whatever it created has been cleaned up."""

    exit_code = 3


class DiscoveryError(TschedError):
    """A live collector could not read the machine (no driver, no permission, a node failed);
    the message says which and what to install or check."""

    exit_code = 3
