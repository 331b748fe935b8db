"""A defragmentation plan (``defrag/v1``) and the solve that makes it (:func:`defrag`)."""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass, field
from typing import Any

from tsched.cluster import Cluster
from tsched.defrag.heuristic import INF, bound_and_plan
from tsched.defrag.model import ADMISSIONS, counts_of, realise
from tsched.errors import InputError
from tsched.formats.running_csv import RunningState, read_running

__all__ = ["DEFRAG_VERSION", "METHODS", "Move", "DefragPlan", "defrag", "read_defrag"]

DEFRAG_VERSION = "defrag/v1"
METHODS = ("auto", "heuristic", "cpsat")
#: ``auto`` proves with CP-SAT on states of up to this many GPUs when the heuristic's plan is
#: not already proved by its bound
EXACT_GPUS = 1024


@dataclass(frozen=True)
class Move:
    """A running job moved: the GPUs it leaves and the GPUs it restarts on, (node, GPU) pairs."""

    job: str
    source: tuple[tuple[str, int], ...]
    dest: tuple[tuple[str, int], ...]
    cost: float

    def to_dict(self) -> dict[str, Any]:
        return {"job": self.job,
                "from": [{"node": n, "gpu": g} for n, g in self.source],
                "to": [{"node": n, "gpu": g} for n, g in self.dest],
                "cost": _num(self.cost)}  # fmt: skip


@dataclass(frozen=True)
class DefragPlan:
    """Which running jobs move where so that a waiting job of ``gpus`` GPUs gets ``target``.

    ``status``: ``optimal`` (cost proved least; a state that needs no move is optimal at 0),
    ``feasible`` (a plan, ``gap`` from the ``bound``), ``infeasible`` (no set of moves frees a
    placement; ``message`` says why), ``no_solution`` (none found in time; the bound holds).
    ``cost`` is GPU-seconds lost to restarts: Σ over moved jobs of GPUs × restart seconds."""

    cluster: str
    gpus: int
    admission: str
    status: str
    cost: float | None
    bound: float | None
    gap: float | None
    method: str
    wall_time: float
    target: tuple[tuple[str, int], ...] = ()
    moves: tuple[Move, ...] = ()
    message: str = ""
    source: str = field(default="", compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "tsched": DEFRAG_VERSION,
            "cluster": self.cluster,
            "gpus": self.gpus,
            "admission": self.admission,
            "status": self.status,
            "cost": _num(self.cost),
            "bound": _num(self.bound),
            "gap": _num(self.gap),
            "method": self.method,
            "wall_time": round(float(self.wall_time), 6),
            "target": [{"node": n, "gpu": g} for n, g in self.target],
            "moves": [m.to_dict() for m in self.moves],
            "message": self.message,
        }

    def write(self, path: str | os.PathLike[str]) -> None:
        from tsched._io import atomic_write_text

        atomic_write_text(path, json.dumps(self.to_dict(), indent=1) + "\n")


def _num(x: float | None) -> float | None:
    if x is None or not math.isfinite(x):
        return None
    return round(float(x), 6)


def read_defrag(path: str | os.PathLike[str]) -> DefragPlan:
    """Read a ``defrag/v1`` document; errors name the file and field."""
    from tsched._io import read_text
    from tsched.formats.check import Checker

    source = str(path)
    try:
        doc = json.loads(read_text(path, "defrag plan"))
    except json.JSONDecodeError as exc:
        raise InputError(f"{source}: not JSON: {exc}") from None
    ck = Checker(source)
    keys = ("tsched", "cluster", "gpus", "admission", "status", "cost", "bound", "gap",
            "method", "wall_time", "target", "moves", "message")  # fmt: skip
    doc = ck.mapping(doc, "", required=keys[:5], optional=keys)
    if doc["tsched"] != DEFRAG_VERSION:
        raise ck.fail("tsched", f"expected {DEFRAG_VERSION!r}, got {doc['tsched']!r}")

    def place(items: Any, where: str) -> tuple[tuple[str, int], ...]:
        out = []
        for k, item in enumerate(ck.sequence(items, where)):
            m = ck.mapping(item, f"{where}[{k}]", required=("node", "gpu"))
            out.append((ck.string(m["node"], f"{where}[{k}].node"),
                        ck.integer(m["gpu"], f"{where}[{k}].gpu", minimum=0)))  # fmt: skip
        return tuple(out)

    def number(key: str) -> float | None:
        value = doc.get(key)
        return None if value is None else ck.number(value, key, minimum=0)

    moves = []
    for k, m in enumerate(ck.sequence(doc.get("moves", []), "moves")):
        m = ck.mapping(m, f"moves[{k}]", required=("job", "from", "to"),
                       optional=("job", "from", "to", "cost"))  # fmt: skip
        moves.append(Move(ck.string(m["job"], f"moves[{k}].job"),
                          place(m["from"], f"moves[{k}].from"), place(m["to"], f"moves[{k}].to"),
                          ck.number(m.get("cost", 0), f"moves[{k}].cost", minimum=0)))  # fmt: skip
    from tsched.plan import STATUSES

    return DefragPlan(
        cluster=ck.string(doc["cluster"], "cluster"),
        gpus=ck.integer(doc["gpus"], "gpus", minimum=1),
        admission=ck.choice(doc["admission"], "admission", ADMISSIONS),
        status=ck.choice(doc["status"], "status", STATUSES),
        cost=number("cost"),
        bound=number("bound"),
        gap=number("gap"),
        method=ck.string(doc.get("method", "?"), "method"),
        wall_time=ck.number(doc.get("wall_time", 0.0), "wall_time", minimum=0),
        target=place(doc.get("target", []), "target"),
        moves=tuple(moves),
        message=str(doc.get("message", "")),
        source=source,
    )


def defrag(
    cluster: Cluster,
    running: RunningState | str | os.PathLike[str],
    gpus: int,
    *,
    admission: str = "compact",
    restart_cost: float = 300.0,
    time_limit: float = 10.0,
    method: str = "auto",
) -> DefragPlan:
    """Choose which running jobs move, and where, so that a waiting job of ``gpus`` GPUs gets
    a placement ``admission`` accepts, losing the fewest GPU-seconds to restarts.

    ``running``: a :class:`~tsched.formats.running_csv.RunningState` or a running-jobs CSV
    (read against ``cluster``; ``restart_cost`` for jobs without ``restart_seconds``).
    ``method``: ``heuristic`` (evict and re-place, with its bound), ``cpsat`` (the exact model
    with the heuristic's plan as a hint) or ``auto`` (the heuristic, then CP-SAT for the rest of
    ``time_limit`` on states of up to :data:`EXACT_GPUS` GPUs when the heuristic's plan is not
    proved).

    Examples
    --------
    >>> import tsched
    >>> from tsched.formats.running_csv import parse_running
    >>> cluster = tsched.load_cluster("leaf-spine-64")  # 8 nodes of 8 GPUs
    >>> names = [n.name for n in cluster.nodes]
    >>> rows = ["job,node,gpu,restart_seconds"]
    >>> rows += [f"big{i},{node},{g},600" for i, node in enumerate(names) for g in range(6)]
    >>> rows += [f"small{i},{node},6,60" for i, node in enumerate(names)]
    >>> state = parse_running("\\n".join(rows), cluster)
    >>> plan = defrag(cluster, state, 2)  # every node has one GPU free: one small job moves
    >>> plan.status, plan.cost, len(plan.moves), len(plan.moves[0].dest)
    ('optimal', 60.0, 1, 1)
    """
    if method not in METHODS:
        raise InputError(f"method: expected one of {', '.join(METHODS)}, got {method!r}")
    if admission not in ADMISSIONS:
        raise InputError(f"admission: expected one of {', '.join(ADMISSIONS)}, got {admission!r}")
    if not isinstance(running, RunningState):
        running = read_running(running, cluster, restart_cost)
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise InputError(f"gpus: expected a whole number of GPUs >= 1, got {gpus!r}")
    if gpus > cluster.n_gpus:
        raise InputError(f"gpus: {gpus} GPUs wanted, cluster {cluster.name!r} has "
                         f"{cluster.n_gpus}")  # fmt: skip
    if not math.isfinite(time_limit) or time_limit <= 0:
        raise InputError(f"time limit: expected a number > 0, got {time_limit!r}")
    start = time.perf_counter()
    counts = counts_of(running)
    found = bound_and_plan(counts, gpus, admission, deadline=start + time_limit)
    target, moved, cost, bound = found.target, found.moved, found.cost, found.bound
    used = "heuristic"
    status = "infeasible" if bound == INF else "feasible" if target is not None else "no_solution"
    message = found.reason
    if target is not None and cost <= bound + 1e-9:
        status = "optimal"
    exact = method == "cpsat" or (method == "auto" and cluster.n_gpus <= EXACT_GPUS)
    if status in ("feasible", "no_solution") and exact and admission == "compact":
        from tsched.defrag.exact import solve_exact

        left = max(0.1, time_limit - (time.perf_counter() - start))
        hint = (target, moved) if target is not None else None
        got = solve_exact(counts, gpus, time_limit=left, hint=hint, lower=bound)
        used = "heuristic+cpsat"
        if got.status == "infeasible":
            status, target, moved, cost, bound = "infeasible", None, {}, INF, INF
            message = "CP-SAT proved that no set of moves frees a placement"
        else:
            bound = max(bound, got.bound)
            if got.target is not None and got.cost < cost - 1e-9:
                target, moved, cost = got.target, got.moved, got.cost
            if target is not None:
                status = "optimal" if cost <= bound + 1e-9 else "feasible"
    return _plan(running, counts, gpus, admission, status, target, moved, cost, bound, used,
                 time.perf_counter() - start, message)  # fmt: skip


def _plan(running, counts, gpus, admission, status, target, moved, cost, bound, method, wall,
          message) -> DefragPlan:  # fmt: skip
    cl = running.cluster
    names = [n.name for n in cl.nodes]

    def where(g: int) -> tuple[str, int]:
        return names[int(cl.gpu_node[g])], int(cl.gpu_local[g])

    if target is None:
        finite = bound if bound != INF else None
        return DefragPlan(cl.name, gpus, admission, status, None, finite, None, method, wall,
                          message=message or "no plan found in the time limit",
                          source=running.source)  # fmt: skip
    got, new = realise(running.cluster, running.free_mask(), [list(j.gpus) for j in running.jobs],
                       target, moved)  # fmt: skip
    moves = tuple(
        Move(running.jobs[k].name, tuple(where(g) for g in running.jobs[k].gpus),
             tuple(where(g) for g in new[k]), float(counts.weight[k]))
        for k in sorted(new, key=lambda k: running.jobs[k].name)
    )  # fmt: skip
    gap = 0.0 if cost <= 0 else max(0.0, (cost - bound) / cost)
    return DefragPlan(cl.name, gpus, admission, status, cost, min(bound, cost), gap, method,
                      wall, tuple(where(g) for g in got), moves, message,
                      source=running.source)  # fmt: skip
