"""Solver results and plans: the fixed-field result, the ``plan/v1`` JSON document, a table.

A :class:`PlacementResult` is what every solver returns (status, assignment over the problem's
locations, objective, bound, gap …). :meth:`PlacementResult.plan` turns it into a :class:`Plan`
that names nodes and GPU indices, the document executors and ``tsched validate`` consume.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tsched._io import atomic_write_text, read_text
from tsched.cluster import Cluster
from tsched.errors import InputError
from tsched.problem import PlacementProblem, cost_by_link

__all__ = [
    "STATUSES",
    "PLAN_VERSION",
    "QAP_RESULT_VERSION",
    "PlacementResult",
    "Plan",
    "PlanEntry",
    "relative_gap",
    "read_plan",
    "write_plan",
    "plan_table",
    "Drift",
    "validate_plan",
    "require_valid",
]

#: Result statuses, best first.
STATUSES = ("optimal", "feasible", "infeasible", "no_solution")
PLAN_VERSION = "plan/v1"
QAP_RESULT_VERSION = "qap-result/v1"
_PLAN_KEYS = (
    "tsched",
    "cluster",
    "workload",
    "status",
    "objective",
    "bound",
    "gap",
    "method",
    "wall_time",
    "seed",
    "assignment",
    "cost_by_link",
    "message",
    "roles",
    "sources",
)
#: What a plan's ``sources`` may name: where its cluster and workload came from, as given.
SOURCE_KEYS = ("cluster", "workload")


def relative_gap(objective: float | None, bound: float | None) -> float | None:
    """``(objective − bound) / objective``; 0 when both are 0; None when either is unknown."""
    if objective is None or bound is None:
        return None
    if objective == 0:
        return 0.0 if bound >= 0 else None
    return max(0.0, (objective - bound) / abs(objective))


@dataclass(frozen=True, slots=True)
class PlacementResult:
    """The outcome of one solve. Every field is always present (None when unknown).

    ``assignment[w]`` is the location index of worker ``w`` in ``problem.locations`` (for a raw
    QAP: the permutation). ``status`` is one of :data:`STATUSES`; ``optimal`` only when a bound
    (or an exact method's proof) matches the objective.
    """

    status: str
    assignment: np.ndarray | None
    objective: float | None
    bound: float | None
    gap: float | None
    method: str
    wall_time: float
    iterations: int = 0
    message: str = ""
    stats: Mapping[str, Any] = field(default_factory=dict)
    seed: int | None = None
    problem: PlacementProblem | None = field(default=None, repr=False, compare=False)

    @property
    def gpus(self) -> np.ndarray | None:
        """Global GPU index per worker (None without an assignment)."""
        if self.assignment is None or self.problem is None:
            return None
        return self.problem.locations[self.assignment]

    def plan(self) -> Plan:
        """The plan document: node names, GPU indices, cost split by link class."""
        problem = self.problem
        if problem is None:
            raise InputError("result has no problem attached; cannot name nodes and GPUs")
        entries: tuple[PlanEntry, ...] = ()
        by_link: dict[str, float] = {}
        if self.assignment is not None:
            cl = problem.cluster
            gpus = problem.locations[self.assignment]
            if cl is None:
                entries = tuple(PlanEntry(int(w), "qap", int(g)) for w, g in enumerate(gpus))
            else:
                nodes = cl.gpu_node[gpus]
                local = cl.gpu_local[gpus]
                models, memory = cl.gpu_models()[gpus], cl.gpu_memory_gb()[gpus]
                entries = tuple(
                    PlanEntry(w, cl.nodes[int(n)].name, int(g), str(m), float(mem))
                    for w, (n, g, m, mem) in enumerate(zip(nodes, local, models, memory))
                )
            by_link = cost_by_link(problem, self.assignment)
        return Plan(
            cluster=problem.cluster.name if problem.cluster else problem.name,
            workload=problem.workload.name if problem.workload else problem.name,
            status=self.status,
            objective=self.objective,
            bound=self.bound,
            gap=self.gap,
            method=self.method,
            wall_time=round(self.wall_time, 6),
            seed=self.seed,
            assignment=entries,
            cost_by_link=by_link,
            message=self.message,
            roles=problem.workload.roles if problem.workload else None,
        )

    def qap_dict(self, instance: str) -> dict[str, Any]:
        """The ``qap-result/v1`` document (DESIGN.md §3)."""
        return {
            "tsched": QAP_RESULT_VERSION,
            "instance": instance,
            "n": self.problem.n_workers if self.problem else None,
            "status": self.status,
            "objective": _clean(self.objective),
            "bound": _clean(self.bound),
            "gap": _clean(self.gap),
            "permutation": None if self.assignment is None else [int(x) for x in self.assignment],
            "method": self.method,
            "wall_time": round(self.wall_time, 6),
            "seed": self.seed,
        }


@dataclass(frozen=True, slots=True)
class PlanEntry:
    """Worker ``worker`` runs on GPU ``gpu`` (index within the node) of node ``node``; the GPU's
    model and memory as planned (empty / 0 when unknown) let live validation spot a changed
    machine."""

    worker: int
    node: str
    gpu: int
    gpu_model: str = ""
    memory_gb: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"worker": self.worker, "node": self.node, "gpu": self.gpu}
        if self.gpu_model:
            out["gpu_model"] = self.gpu_model
        if self.memory_gb:
            out["memory_gb"] = _num(self.memory_gb)
        return out


@dataclass(frozen=True, slots=True)
class Plan:
    """A ``plan/v1`` document: where each worker runs, and what it costs."""

    cluster: str
    workload: str
    status: str
    objective: float | None
    bound: float | None
    gap: float | None
    method: str
    wall_time: float
    seed: int | None
    assignment: tuple[PlanEntry, ...]
    cost_by_link: Mapping[str, float]
    message: str = ""
    roles: tuple[str, ...] | None = field(default=None, compare=False, repr=False)
    #: where the cluster and workload came from, as given (a file path or a preset name), so
    #: ``tsched show PLAN.json`` finds them without flags
    sources: Mapping[str, str] | None = field(default=None, compare=False, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "tsched": PLAN_VERSION,
            "cluster": self.cluster,
            "workload": self.workload,
            "status": self.status,
            "objective": _clean(self.objective),
            "bound": _clean(self.bound),
            "gap": _clean(self.gap),
            "method": self.method,
            "wall_time": round(float(self.wall_time), 6),
            "seed": self.seed,
            "assignment": [e.to_dict() for e in self.assignment],
            "cost_by_link": {k: _clean(v) for k, v in self.cost_by_link.items()},
            "message": self.message,
            **({"roles": list(self.roles)} if self.roles is not None else {}),
            **({"sources": dict(self.sources)} if self.sources else {}),
        }

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent) + "\n"

    @classmethod
    def from_dict(cls, data: Any, source: str = "plan") -> Plan:
        from tsched.formats.check import Checker, join

        ck = Checker(source)
        doc = ck.mapping(
            data,
            "",
            required=("tsched", "cluster", "workload", "status", "assignment"),
            optional=_PLAN_KEYS,
        )
        if doc["tsched"] != PLAN_VERSION:
            raise ck.fail("tsched", f"expected {PLAN_VERSION!r}, got {doc['tsched']!r}")
        status = ck.choice(doc["status"], "status", STATUSES)
        entries = []
        seen: set[int] = set()
        for i, item in enumerate(ck.sequence(doc["assignment"], "assignment")):
            where = join("assignment", i)
            item = ck.mapping(
                item, where, required=("worker", "node", "gpu"), optional=("gpu_model", "memory_gb")
            )
            worker = ck.integer(item["worker"], join(where, "worker"), minimum=0)
            if worker in seen:
                raise ck.fail(join(where, "worker"), f"worker {worker} appears twice")
            seen.add(worker)
            entries.append(
                PlanEntry(
                    worker,
                    ck.string(item["node"], join(where, "node")),
                    ck.integer(item["gpu"], join(where, "gpu"), minimum=0),
                    str(item.get("gpu_model", "")),
                    ck.number(item.get("memory_gb", 0.0), join(where, "memory_gb"), minimum=0.0),
                )
            )
        if seen and seen != set(range(len(seen))):
            raise ck.fail("assignment", f"workers must be 0..{len(seen) - 1}")

        def opt_number(key: str) -> float | None:
            value = doc.get(key)
            return None if value is None else ck.number(value, key)

        links = ck.mapping(doc.get("cost_by_link", {}), "cost_by_link", free_keys=True)
        seed = doc.get("seed")
        roles = None
        if doc.get("roles") is not None:
            items = ck.sequence(doc["roles"], "roles")
            if len(items) != len(entries):
                raise ck.fail(
                    "roles", f"expected one role per worker ({len(entries)}), got {len(items)}"
                )
            roles = tuple(ck.string(r, join("roles", i)) for i, r in enumerate(items))
        sources = None
        if doc.get("sources") is not None:
            given = ck.mapping(doc["sources"], "sources", optional=SOURCE_KEYS,
                               example="{cluster: PATH, workload: PRESET}")  # fmt: skip
            sources = {k: ck.string(v, join("sources", k)) for k, v in given.items()}
        return cls(
            cluster=ck.string(doc["cluster"], "cluster"),
            workload=ck.string(doc["workload"], "workload"),
            status=status,
            objective=opt_number("objective"),
            bound=opt_number("bound"),
            gap=opt_number("gap"),
            method=str(doc.get("method", "")),
            wall_time=float(opt_number("wall_time") or 0.0),
            seed=None if seed is None else ck.integer(seed, "seed"),
            assignment=tuple(sorted(entries, key=lambda e: e.worker)),
            cost_by_link={k: ck.number(v, join("cost_by_link", k)) for k, v in links.items()},
            message=str(doc.get("message", "")),
            roles=roles,
            sources=sources,
        )


def _num(x: float) -> int | float:
    return int(x) if float(x).is_integer() else float(x)


def _clean(x: float | None) -> float | None:
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def write_plan(plan: Plan, path: str | os.PathLike[str]) -> None:
    """Write a plan as JSON, atomically: the old file stays whole if anything fails.

    Examples
    --------
    >>> import tempfile, pathlib, tsched
    >>> problem = tsched.PlacementProblem.build(tsched.load_cluster("dgx-h100-4node"),
    ...                                         tsched.load_workload("llama3-8b-tp4-pp2-dp2"))
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "plan.json"
    >>> tsched.write_plan(tsched.solve(problem, method="greedy").plan(), path)
    >>> tsched.read_plan(path).status
    'optimal'
    """
    atomic_write_text(Path(path), plan.to_json())


def read_plan(path: str | os.PathLike[str]) -> Plan:
    """Read a ``plan/v1`` JSON file; errors name the file and field.

    Examples
    --------
    >>> import tempfile, pathlib, tsched
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "plan.json"
    >>> _ = path.write_text('{"tsched": "plan/v1", "cluster": "c", "workload": "w"}')
    >>> tsched.read_plan(path)
    Traceback (most recent call last):
    ...
    tsched.errors.InputError: ...: missing required key 'status'
    """
    text = read_text(path, "plan")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}:{exc.lineno}:{exc.colno}: JSON syntax error: {exc.msg}") from exc
    return Plan.from_dict(data, str(path))


def plan_table(plan: Plan, max_rows: int = 64) -> Any:
    """A rich Table of the plan grouped by node: node, GPU indices, workers (and roles).

    Large plans are folded to ``max_rows`` node rows, the rest summarised in a last row.
    """
    from rich.table import Table

    by_node: dict[str, list[PlanEntry]] = {}
    for entry in plan.assignment:
        by_node.setdefault(entry.node, []).append(entry)
    table = Table(title=f"{plan.workload} on {plan.cluster}", title_justify="left")
    table.add_column("node")
    table.add_column("GPUs", justify="right")
    table.add_column("workers")
    for i, (node, entries) in enumerate(by_node.items()):
        if i == max_rows:
            rest = sum(len(v) for v in list(by_node.values())[max_rows:])
            table.add_row(f"… {len(by_node) - max_rows} more nodes", "", f"{rest} workers")
            break
        entries.sort(key=lambda e: e.gpu)
        gpus = ",".join(str(e.gpu) for e in entries)
        if plan.roles is not None:
            workers = " ".join(f"{e.worker}:{plan.roles[e.worker]}" for e in entries)
        else:
            workers = " ".join(str(e.worker) for e in entries)
        table.add_row(node, gpus, workers)
    return table


# ---------------------------------------------------------------------- live validation
@dataclass(frozen=True, slots=True)
class Drift:
    """One way a planned worker's GPU no longer matches the current state."""

    worker: int
    node: str
    gpu: int
    reason: str


def validate_plan(plan: Plan, current: Cluster) -> list[Drift]:
    """Check a plan against the cluster as it is now (re-discovered or re-read).

    For every worker: the node still exists, the GPU index exists on it, the GPU is free, and
    its model and memory are what the plan recorded (when it recorded them); no two workers
    share a GPU. Returns the drift, worker by worker (empty when the plan still holds).
    """
    drift: list[Drift] = []
    used: dict[tuple[str, int], int] = {}
    models, memory, busy = current.gpu_models(), current.gpu_memory_gb(), current.busy_mask
    for e in plan.assignment:
        key = (e.node, e.gpu)
        if key in used:
            drift.append(Drift(e.worker, e.node, e.gpu, f"same GPU as worker {used[key]}"))
            continue
        used[key] = e.worker
        try:
            node = current.node_index(e.node)
        except InputError:
            drift.append(Drift(e.worker, e.node, e.gpu, "node is gone"))
            continue
        count = int(current.gpus_per_node[node])
        if e.gpu >= count:
            drift.append(Drift(e.worker, e.node, e.gpu, f"node has only {count} GPUs now"))
            continue
        g = current.gpu_id(node, e.gpu)
        if busy[g]:
            drift.append(Drift(e.worker, e.node, e.gpu, "GPU is busy"))
        if e.gpu_model and str(models[g]) != e.gpu_model:
            drift.append(
                Drift(e.worker, e.node, e.gpu, f"model is {models[g]}, planned {e.gpu_model}")
            )
        if e.memory_gb and abs(float(memory[g]) - e.memory_gb) > 1e-6 * max(1.0, e.memory_gb):
            drift.append(
                Drift(
                    e.worker,
                    e.node,
                    e.gpu,
                    f"memory is {float(memory[g]):g} GB, planned {e.memory_gb:g} GB",
                )
            )
    return drift


def require_valid(plan: Plan, current: Cluster) -> None:
    """Raise :class:`InputError` summarising the drift if the plan no longer holds (what
    executors call before reserving anything)."""
    drift = validate_plan(plan, current)
    if drift:
        first = "; ".join(
            f"worker {d.worker} on {d.node} GPU {d.gpu}: {d.reason}" for d in drift[:3]
        )
        more = f" (and {len(drift) - 3} more)" if len(drift) > 3 else ""
        raise InputError(f"plan no longer matches cluster {current.name!r}: {first}{more}")
