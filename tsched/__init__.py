"""tsched: topology-aware GPU placement planning.

Workers → GPUs as a quadratic assignment problem over the cluster's link hierarchy, solved by a
registry of methods that always report a lower bound and a gap.

>>> import tsched
>>> cluster = tsched.presets.cluster("dgx-h100-4node")
>>> workload = tsched.presets.workload("llama3-8b-tp4-pp2-dp2")
>>> result = tsched.solve(tsched.PlacementProblem.build(cluster, workload), seed=0)
>>> result.status in ("optimal", "feasible")
True
"""

from __future__ import annotations

from tsched._clock import STARTED as STARTED  # first: the start-up time counts from here

__version__ = "0.1.0"

from typing import TYPE_CHECKING

from tsched import defrag, presets
from tsched.cluster import Cluster, LinkClass, Node, NodeType
from tsched.errors import (
    ExecutorError,
    InputError,
    SolverError,
    SolverNotAvailableError,
    TschedError,
)
from tsched.formats.cluster_yaml import read_cluster, write_cluster
from tsched.formats.workload_yaml import read_workload, write_workload
from tsched.plan import STATUSES, PlacementResult, Plan, read_plan, write_plan
from tsched.presets import load_cluster, load_workload
from tsched.problem import PlacementProblem, cost_by_link, objective
from tsched.solvers.registry import get_solver, solve
from tsched.solvers.registry import solvers as methods
from tsched.workload import Layout, ModelSpec, Workload

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "Cluster",
    "LinkClass",
    "Node",
    "NodeType",
    "Workload",
    "Layout",
    "ModelSpec",
    "PlacementProblem",
    "PlacementResult",
    "Plan",
    "STATUSES",
    "TschedError",
    "InputError",
    "SolverError",
    "SolverNotAvailableError",
    "ExecutorError",
    "load_cluster",
    "load_workload",
    "read_cluster",
    "write_cluster",
    "read_workload",
    "write_workload",
    "read_plan",
    "write_plan",
    "solve",
    "solve_qap",
    "methods",
    "get_solver",
    "objective",
    "cost_by_link",
    "presets",
    "defrag",
]


def solve_qap(
    flow: np.ndarray,
    distance: np.ndarray,
    *,
    method: str = "auto",
    time_limit: float | None = None,
    seed: int | None = None,
    options: dict | None = None,
    name: str = "qap",
) -> PlacementResult:
    """Solve a raw QAP: minimise Σ_ij flow[i, j]·distance[p(i), p(j)] (QAPLIB's definition).

    ``result.assignment`` is the 0-based permutation p.

    Examples
    --------
    >>> import numpy as np, tsched
    >>> flow, distance = np.array([[0, 3], [3, 0]]), np.array([[0, 1], [1, 0]])
    >>> r = tsched.solve_qap(flow, distance, method="greedy")
    >>> r.objective, r.status
    (6.0, 'optimal')
    """
    problem = PlacementProblem.from_qap(flow, distance, name=name)
    return solve(problem, method=method, time_limit=time_limit, seed=seed, options=options)


def __dir__() -> list[str]:
    """The public API (``dir(tsched)``), not the helpers the package imports."""
    return sorted([*__all__, "STARTED", "__version__"])
