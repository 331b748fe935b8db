"""When a node dies mid-run: release everything, re-plan on the GPUs still alive, start again.

:func:`run_replanning` runs a plan with :func:`tsched.backends.ray.run`. When a worker fails and
one or more of the plan's nodes are no longer alive in the Ray cluster (the node died, was
drained or removed), it does what an elastic launcher does (torchrun's ``--max-restarts``,
Ray Train's ``FailureConfig(max_failures)``), with a plan instead of a guess:

1. everything of the failed attempt is already released (:func:`~tsched.backends.ray.run`
   cancels the tasks and removes the placement group on any failure);
2. the live cluster is read: the cluster model's nodes that Ray still reports alive, their GPUs
   whose resources are free (the drift check's view);
3. the same workload is solved again on it with the same method; when the full size no longer
   fits and ``min_workers`` allows it, a layout's data-parallel degree is lowered until it fits
   (never below ``min_workers`` workers);
4. the workers start again, each told the restart count and its new layout through the
   environment: ``TSCHED_RESTART`` (0 for the first attempt), ``TSCHED_LOST_NODES`` (every node
   lost so far, comma-separated), ``TSCHED_LAYOUT`` (``tp=…,pp=…,dp=…`` for layout workloads)
   beside ``RANK``/``WORLD_SIZE``, so the entrypoint can resume from its checkpoint.

A worker that fails while every node of the plan is alive is the application's failure, not
the cluster's: it is raised as it is, with no restart. Each restart is a :class:`Restart`
record (which node was lost, the new plan's objective and gap, how long the re-plan took).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from tsched.cluster import Cluster
from tsched.errors import ExecutorError, InputError
from tsched.plan import Plan
from tsched.workload import Workload

__all__ = ["DEFAULT_RESTARTS", "Restart", "live_cluster", "shrink_workload", "run_replanning"]

#: Restarts allowed when none is given (``--max-restarts``).
DEFAULT_RESTARTS = 3


@dataclass(frozen=True)
class Restart:
    """One restart: the nodes lost, the new plan's size, objective and gap, the re-plan's
    seconds (reading the live cluster and solving)."""

    restart: int
    lost_nodes: tuple[str, ...]
    workers: int
    status: str
    objective: float | None
    gap: float | None
    replan_seconds: float

    def to_dict(self) -> dict[str, Any]:
        return {"restart": self.restart, "lost_nodes": list(self.lost_nodes),
                "workers": self.workers, "status": self.status, "objective": self.objective,
                "gap": self.gap, "replan_seconds": round(self.replan_seconds, 3)}  # fmt: skip


def live_cluster(model: Cluster, alive: Mapping[str, Any], free: Mapping[str, set[str]]) -> Cluster:
    """The cluster model as Ray sees it now: only the nodes ``alive`` names (node name → Ray's
    node record), each GPU busy unless its resource is among the node's ``free`` ones.

    Examples
    --------
    >>> import tsched
    >>> from tsched.backends.ray import gpu_resource
    >>> model = tsched.load_cluster("dgx-h100-4node")
    >>> alive = {"node001": {}, "node003": {}}
    >>> free = {"node001": {gpu_resource("node001", g) for g in range(8)},
    ...         "node003": {gpu_resource("node003", g) for g in range(4)}}
    >>> now = live_cluster(model, alive, free)
    >>> [n.name for n in now.nodes], int(now.free_mask().sum())
    (['node001', 'node003'], 12)
    """
    from tsched.backends.ray import gpu_resource

    nodes = []
    for node in model.nodes:
        if node.name not in alive:
            continue
        count = model.node_types[node.type].gpus
        gone = {
            g for g in range(count) if gpu_resource(node.name, g) not in free.get(node.name, ())
        }
        nodes.append(replace(node, busy=tuple(sorted(set(node.busy) | gone))))
    if not nodes:
        raise ExecutorError(f"no node of cluster {model.name!r} is alive in the Ray cluster")
    return replace(model, nodes=tuple(nodes))


def shrink_workload(workload: Workload, min_workers: int) -> list[Workload]:
    """Smaller versions of a layout workload, largest first: the same layout and model with a
    lower data-parallel degree, down to ``min_workers`` workers (none for other workloads)."""
    layout, model = workload.layout, workload.model
    if layout is None or model is None or layout.dp < 2:
        return []
    out = []
    for dp in range(layout.dp - 1, 0, -1):
        smaller = replace(layout, dp=dp)
        if smaller.workers < min_workers:
            break
        try:
            out.append(Workload.from_layout(f"{workload.name}-dp{dp}", smaller, model,
                                            gpu_models=workload.gpu_models,
                                            memory_gb=workload.memory_gb))  # fmt: skip
        except InputError:  # a degree the layout does not allow (e.g. EP must divide it)
            continue
    return out


def _layout_text(workload: Workload) -> str:
    layout = workload.layout
    if layout is None:
        return ""
    return ",".join(f"{d}={layout.size(d)}" for d in ("tp", "cp", "ep", "dp", "pp")
                    if layout.size(d) > 1) or "tp=1"  # fmt: skip


def run_replanning(
    plan: Plan,
    model: Cluster,
    workload: Workload,
    *,
    entrypoint: str | None = None,
    command: Sequence[str] | None = None,
    max_restarts: int = DEFAULT_RESTARTS,
    min_workers: int | None = None,
    method: str = "auto",
    time_limit: float | None = None,
    seed: int = 0,
    on_restart: Callable[[Restart], None] | None = None,
    **run_options: Any,
) -> tuple[list[Any], list[Restart], Plan]:
    """Run ``plan``, re-planning on what is left each time a node of the plan dies (see the
    module's description). Returns the last attempt's worker results, the restarts and the
    plan that finished.

    Raises
    ------
    ExecutorError
        A worker failed with every node of its plan alive (the application's failure), the
        restarts are used up, or no plan fits the GPUs still alive (not even shrunk to
        ``min_workers``); everything is released first, as :func:`tsched.backends.ray.run`
        always does.
    """
    from tsched.backends.ray import live_nodes, run
    from tsched.discovery.ray import connect
    from tsched.problem import PlacementProblem
    from tsched.solvers.registry import solve

    if max_restarts < 0:
        raise InputError(f"--max-restarts: expected 0 or more, got {max_restarts}")
    if workload.workers != len(plan.assignment):
        raise InputError(f"workload {workload.name!r} has {workload.workers} workers; the plan "
                         f"places {len(plan.assignment)}")  # fmt: skip
    restarts: list[Restart] = []
    lost: list[str] = []
    current, current_workload = plan, workload
    base_env = dict(run_options.pop("env", None) or {})
    while True:
        env = {**base_env, "TSCHED_RESTART": str(len(restarts)),
               "TSCHED_LOST_NODES": ",".join(lost),
               "TSCHED_LAYOUT": _layout_text(current_workload)}  # fmt: skip
        try:
            results = run(current, entrypoint, None if command is None else list(command),
                          env=env, **run_options)  # fmt: skip
            return results, restarts, current
        except ExecutorError as exc:
            ray = connect(run_options.get("address"), ExecutorError)
            alive, free = live_nodes(ray)
            gone = sorted({e.node for e in current.assignment} - set(alive))
            if not gone:
                raise  # every node is alive: the application failed, not the cluster
            if len(restarts) >= max_restarts:
                raise ExecutorError(f"{exc} — lost node(s) {', '.join(gone)}; no restart left "
                                    f"({max_restarts} used)") from None  # fmt: skip
            start = time.perf_counter()
            lost += [n for n in gone if n not in lost]
            now = live_cluster(model, alive, free)
            candidates = [workload] + (shrink_workload(workload, min_workers)
                                       if min_workers is not None else [])  # fmt: skip
            result = None
            for candidate in candidates:
                problem = PlacementProblem.build(now, candidate)
                result = solve(problem, method=method, time_limit=time_limit, seed=seed)
                if result.assignment is not None:
                    current_workload = candidate
                    break
            if result is None or result.assignment is None:
                smallest = candidates[-1].workers
                raise ExecutorError(
                    f"{exc} — lost node(s) {', '.join(gone)}; no plan of {smallest} or more "
                    f"workers fits the {int(now.free_mask().sum())} GPUs still alive"
                ) from None
            current = replace(result.plan(), sources=plan.sources)
            record = Restart(len(restarts) + 1, tuple(gone), current_workload.workers,
                             result.status, result.objective, result.gap,
                             time.perf_counter() - start)  # fmt: skip
            restarts.append(record)
            if on_restart is not None:
                on_restart(record)
