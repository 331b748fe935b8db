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

import time

#: When tsched was first imported, before its own imports (the CLI's default budget counts
#: from here: start-up and reading a large file are part of the command's time).
STARTED = time.perf_counter()

import os

import numpy as np

from tsched import presets
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
from tsched.problem import PlacementProblem, cost_by_link, objective
from tsched.solvers.registry import get_solver, solve
from tsched.solvers.registry import solvers as methods
from tsched.workload import Layout, ModelSpec, Workload

__version__ = "0.1.0"

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
]


def load_cluster(source: str | os.PathLike[str]) -> Cluster:
    """A cluster from a ``cluster/v1`` file, or a preset name (see ``tsched presets``)."""
    text = str(source)
    if text in presets.CLUSTERS and not os.path.exists(text):
        return presets.cluster(text)
    _name_or_file(text, "cluster", presets.CLUSTERS)
    return read_cluster(source)


def load_workload(source: str | os.PathLike[str]) -> Workload:
    """A workload from a ``workload/v1`` file, or a preset name (see ``tsched presets``)."""
    text = str(source)
    if text in presets.WORKLOADS and not os.path.exists(text):
        return presets.workload(text)
    _name_or_file(text, "workload", presets.WORKLOADS)
    return read_workload(source)


def _name_or_file(text: str, kind: str, names: dict[str, str]) -> None:
    """An error for a bare name (no folder, no suffix) that is neither a file nor a preset,
    listing the presets: ``gb200-nvl72-4rack`` is a file of the repository's ``models/``, not a
    preset, and "file not found" alone does not say so."""
    bare = os.sep not in text and "/" not in text and not os.path.splitext(text)[1]
    if bare and text and not os.path.exists(text):
        raise InputError(
            f"{text}: no {kind} file of that name, and no {kind} preset either (presets: "
            f"{', '.join(names)}; a file is given by its path, e.g. models/{kind}s/NAME.yaml)"
        )


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
