"""A Dynamo service that outlives a node: the replacement of a lost replica, planned on what is
left (:func:`plan_replacement`, pure), and the detached :class:`Supervisor` that watches a
running service and carries it out.

A replica is **lost** when its node leaves the Ray cluster (Ray marks it dead) or the detached
actor owning its engine is gone while the node lives (killed, crashed). In both cases the
replica's guardian has stopped, or is stopping, its engine (SIGHUP, or the owner's lease running
out); Dynamo's frontend drops the instance when its discovery lease lapses and keeps serving
from the other replicas. The supervisor then

1. releases what the lost replica held (its actor, its placement group),
2. reads the live cluster (alive nodes, free GPUs: those of the surviving replicas are held by
   their placement groups),
3. plans the replacement with the same planner as the service: the replica's own traffic (its
   TP all-reduce) plus, as a per-GPU cost, its traffic to the replicas that stay where they are
   (the KV transfer between prefill and decode), on the nodes with enough free GPUs for a whole
   replica,
4. reserves the planned GPUs and starts a new owner and engine there under the same name, and
   waits for it to be healthy.

Each step is an event (``replica-lost``, ``replica-replaced`` with the new node, the service's
objective after the move, the planning time and the seconds from loss to healthy, or
``replace-failed`` with the reason, retried every ``retry`` seconds: a node coming back, or GPUs
freed elsewhere, lets a later try succeed). ``tsched dynamo status`` shows them;
``tsched dynamo down`` stops the supervisor first, so nothing is started behind it.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from tsched.backends.dynamo.process import Replica, dynamo_processes, replicas_of
from tsched.backends.dynamo.spec import DynamoSpec, service_workload
from tsched.cluster import Cluster
from tsched.errors import ExecutorError, InputError
from tsched.plan import Plan, PlanEntry

__all__ = ["Replacement", "plan_replacement", "service_objective", "Supervisor"]

log = logging.getLogger(__name__)


class Replacement:
    """Where a lost replica goes: the new :class:`Replica`, the service's plan with it moved,
    and what the planner said (status, the replica's objective and gap, seconds spent)."""

    def __init__(self, replica: Replica, plan: Plan, result: Any, seconds: float) -> None:
        self.replica = replica
        self.plan = plan
        self.status = result.status
        self.objective = result.objective
        self.gap = result.gap
        self.seconds = seconds


def service_objective(plan: Plan, spec: DynamoSpec, cluster: Cluster) -> float:
    """The service's seconds per iteration with its workers where ``plan`` puts them (every
    node of the plan must be in ``cluster``). Returned in the replacement's plan when every
    replica has a live node, None while another one is still lost."""
    workload = service_workload(spec)
    where = np.zeros(workload.workers, dtype=np.int64)
    for e in plan.assignment:
        where[e.worker] = cluster.gpu_id(e.node, e.gpu)
    seconds = cluster.pair_seconds_per_gb(where[workload.src], where[workload.dst])
    return float(np.dot(workload.gb, seconds))


def plan_replacement(
    plan: Plan,
    spec: DynamoSpec,
    lost: str,
    now: Cluster,
    *,
    method: str = "auto",
    time_limit: float | None = 5.0,
    seed: int = 0,
) -> Replacement:
    """Plan where replica ``lost`` of the service running as ``plan`` goes on ``now``, the
    cluster as it is (dead nodes left out, held GPUs busy; see
    :func:`tsched.backends.replan.live_cluster`). The other replicas stay where they are.

    Raises
    ------
    ExecutorError
        No alive node has enough free GPUs (of an allowed model) for the whole replica.

    Examples
    --------
    >>> import tsched
    >>> from tsched.backends.dynamo import spec_from_dict
    >>> spec = spec_from_dict({"tsched": "dynamo/v1", "name": "s", "engine": "mocker",
    ...                        "model": {"name": "tiny"},
    ...                        "serving": {"decode": {"replicas": 2, "tp": 2}}})
    >>> cluster = tsched.load_cluster("dgx-h100-4node")
    >>> problem = tsched.PlacementProblem.build(cluster, service_workload(spec))
    >>> plan = tsched.solve(problem, method="greedy").plan()
    >>> first = replicas_of(plan, spec)[0].node
    >>> now = replace(cluster, nodes=tuple(n for n in cluster.nodes if n.name != first))
    >>> moved = plan_replacement(plan, spec, "decode0", now, method="greedy")
    >>> moved.replica.node != first, len(moved.replica.gpus)
    (True, 2)
    """
    from tsched.problem import PlacementProblem
    from tsched.solvers.registry import solve

    start = time.perf_counter()
    replicas = {r.name: r for r in replicas_of(plan, spec)}
    if lost not in replicas:
        raise InputError(f"service {spec.name!r} has no replica {lost!r} "
                         f"(replicas: {', '.join(replicas)})")  # fmt: skip
    old = replicas[lost]
    workload = service_workload(spec)
    mine = np.asarray(old.workers, dtype=np.int64)
    problem = PlacementProblem.build(now, replace(workload, name=f"{spec.name}-{lost}"))
    # whole nodes only: a TP group cannot span nodes
    node_of = now.gpu_node[problem.locations] if len(problem.locations) else np.zeros(0, int)
    counts = np.bincount(node_of, minlength=len(now.nodes))
    usable = np.flatnonzero(counts[node_of] >= len(mine))
    if not len(usable):
        most = int(counts.max()) if len(counts) else 0
        raise ExecutorError(
            f"no alive node has {len(mine)} free GPUs for replica {lost!r} (the most on one "
            f"node is {most})"
        )
    sub = problem.restrict(mine, usable, name=f"{spec.name}-{lost}@{now.name}")
    sub = replace(sub, linear=_to_fixed(workload, old, replicas, now, sub))
    result = solve(sub, method=method, time_limit=time_limit, seed=seed)
    if result.assignment is not None:
        chosen = node_of[usable[np.asarray(result.assignment)]]
        if len(set(chosen.tolist())) > 1:  # split: plan again on the node holding most
            node = int(np.bincount(chosen).argmax())
            keep = np.flatnonzero(node_of[usable] == node)
            sub = problem.restrict(mine, usable[keep], name=sub.name)
            sub = replace(sub, linear=_to_fixed(workload, old, replicas, now, sub))
            result = solve(sub, method=method, time_limit=time_limit, seed=seed)
            usable = usable[keep]
    if result.assignment is None:
        raise ExecutorError(f"no placement for replica {lost!r}: {result.message}")
    gpus = problem.locations[usable[np.asarray(result.assignment)]]
    node = now.nodes[int(now.gpu_node[gpus[0]])]
    local = tuple(int(now.gpu_local[g]) for g in gpus)
    new = Replica(old.name, old.role, node.name, local, old.workers)
    kind = now.node_types[node.type]
    entries = {w: PlanEntry(w, node.name, g, kind.gpu_model, kind.memory_gb)
               for w, g in zip(old.workers, local, strict=True)}  # fmt: skip
    assignment = tuple(entries.get(e.worker, e) for e in plan.assignment)
    moved = replace(plan, assignment=assignment)
    names = {n.name for n in now.nodes}
    whole = all(e.node in names for e in assignment)  # else another replica is lost too
    objective = service_objective(moved, spec, now) if whole else None
    moved = replace(moved, objective=objective, bound=None, gap=None, status="feasible",
                    method=f"{plan.method}+replace({result.method})",
                    message=f"replica {lost} moved from {old.node} to {node.name}")  # fmt: skip
    return Replacement(new, moved, result, time.perf_counter() - start)


def _to_fixed(
    workload: Any, old: Replica, replicas: dict[str, Replica], now: Cluster, sub: Any
) -> np.ndarray:
    """Per (replica worker, candidate GPU) seconds of the traffic between the replica and the
    workers that stay (both directions), as the sub-problem's linear term; a replica lost too
    (its node is not in ``now``) is placed after this one, so its traffic is not priced."""
    mine = {w: k for k, w in enumerate(old.workers)}
    names = {n.name for n in now.nodes}
    fixed = {w: now.gpu_id(r.node, g) for r in replicas.values()
             if r.name != old.name and r.node in names
             for w, g in zip(r.workers, r.gpus, strict=True)}  # fmt: skip
    linear = np.zeros((len(mine), len(sub.locations)))
    for s, d, gb in zip(workload.src.tolist(), workload.dst.tolist(), workload.gb.tolist(),
                        strict=True):  # fmt: skip
        if s in mine and d in fixed:
            k, other = mine[s], fixed[d]
        elif d in mine and s in fixed:
            k, other = mine[d], fixed[s]
        else:
            continue
        there = np.full(len(sub.locations), other, dtype=np.int64)
        linear[k] += gb * now.pair_seconds_per_gb(sub.locations, there)
    return linear


class Supervisor:
    """A detached Ray actor that watches a running service and replaces a lost replica (see the
    module's description). Started by :func:`tsched.backends.dynamo.up` last, stopped by
    :func:`tsched.backends.dynamo.down` first."""

    def __init__(
        self,
        spec: DynamoSpec,
        plan: Plan,
        workdir: str,
        model: Cluster | None = None,
        method: str = "auto",
        time_limit: float = 5.0,
        period: float = 1.0,
        retry: float = 10.0,
    ) -> None:
        self.spec, self.plan, self.work = spec, plan, Path(workdir)
        self.model, self.method, self.time_limit = model, method, time_limit
        self.period, self.retry = period, retry
        self.started = time.time()
        self.replicas = {r.name: r for r in replicas_of(plan, spec)}
        self.generation = dict.fromkeys(self.replicas, 0)
        self.pending: dict[str, dict[str, Any]] = {}  # lost replica → its loss event
        self.next_try: dict[str, float] = {}
        self.events: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    # ------------------------------------------------------------ what status reads
    def receipt(self) -> dict[str, Any]:
        """Shaped as a guardian's receipt, so status lists the supervisor as a part."""
        return {"healthy_at": self.started, "runs": [{"pid": os.getpid()}],
                "restarts": sum(e["event"] == "replica-replaced" for e in self.events),
                "end_reason": None if self.thread.is_alive() else "stopped"}  # fmt: skip

    def state(self) -> dict[str, Any]:
        with self.lock:
            return {
                "events": list(self.events),
                "replacing": sorted(self.pending),
                "replicas": {
                    n: {"node": r.node, "gpus": list(r.gpus)}
                    for n, r in sorted(self.replicas.items())
                },  # fmt: skip
                "objective": self.plan.objective,
            }

    def stop(self, timeout: float = 120.0) -> dict[str, Any]:
        """Stop watching; a replacement under way is undone before this returns."""
        self._stop.set()
        self.thread.join(timeout)
        return self.state()

    # ------------------------------------------------------------ the watch
    def _event(self, **fields: Any) -> dict[str, Any]:
        event = {"at": round(time.time(), 3), **fields}
        with self.lock:
            self.events.append(event)
        try:
            with open(self.work / "events.jsonl", "a") as fh:
                fh.write(json.dumps(event) + "\n")
        except OSError as exc:
            log.warning("writing events: %s", exc)
        return event

    def _loop(self) -> None:
        import ray

        while not self._stop.wait(self.period):
            try:
                self._check(ray)
            except Exception as exc:  # keep watching; say what went wrong
                log.exception("supervising %s", self.spec.name)
                self._event(event="supervisor-error", error=f"{type(exc).__name__}: {exc}")

    def _check(self, ray: Any) -> None:
        from tsched.backends.dynamo.owners import find_parts
        from tsched.backends.ray import live_nodes

        alive, _ = live_nodes(ray)
        parts = find_parts(ray, self.spec.name)
        for name, replica in self.replicas.items():
            if name in self.pending:
                continue
            if replica.node not in alive:
                reason = f"node {replica.node} is dead"
            elif name not in parts:
                reason = "its owner actor is gone"
            else:
                continue
            self._lose(ray, name, replica, reason, parts.get(name))
        for name in sorted(self.pending):
            if self._stop.is_set():
                return
            if time.monotonic() >= self.next_try.get(name, 0.0):
                self._replace(ray, name)

    def _lose(self, ray: Any, name: str, replica: Replica, reason: str, actor: Any) -> None:
        from tsched.backends.dynamo.owners import find_groups, group_name, teardown

        event = self._event(event="replica-lost", part=name, node=replica.node,
                            gpus=list(replica.gpus), reason=reason)  # fmt: skip
        with self.lock:
            self.pending[name] = {**event, "_t": time.monotonic()}
        mine = group_name(self.spec.name, name, self.generation[name])
        groups = [g for g in find_groups(self.spec.name) if _group_called(g, mine)]
        teardown(ray, [actor] if actor is not None else [], groups)
        generation = self.generation[name]
        tag = f".{generation}" if generation else ""  # the lost owner's lease: nobody beats it
        (self.work / f"{self.spec.name}-{name}{tag}.lease").unlink(missing_ok=True)
        receipt = self.work / f"{name}.receipt.json"  # kept beside the replacement's
        if receipt.exists():
            receipt.replace(self.work / f"{name}.lost-{self.generation[name]}.receipt.json")

    def _replace(self, ray: Any, name: str) -> None:
        from tsched.backends.dynamo.owners import start_replica, teardown, wait_healthy
        from tsched.backends.ray import live_nodes
        from tsched.backends.replan import live_cluster

        lost = self.pending[name]
        try:
            alive, free = live_nodes(ray)
            model = self.model
            if model is None:
                from tsched.discovery.ray import inventory

                model = inventory(timeout=20).cluster
            now = live_cluster(model, alive, free)
            moved = plan_replacement(self.plan, self.spec, name, now, method=self.method,
                                     time_limit=self.time_limit)  # fmt: skip
        except (ExecutorError, InputError) as exc:
            self._failed(name, str(exc))
            return
        except Exception as exc:  # a bug or Ray's trouble: said, and tried again later
            self._failed(name, f"{type(exc).__name__}: {exc}")
            return
        generation = self.generation[name] + 1
        actor = pg = None
        try:
            engines, _ = dynamo_processes(moved.plan, self.spec, self.work)
            gspec = next(g for r, g in engines if r.name == name)
            actor, pg = start_replica(ray, self.spec.name, moved.replica, gspec, self.work,
                                      generation)  # fmt: skip
            wait_healthy(ray, [actor], [gspec.name], self.spec.health_timeout, stop=self._stop)
        except Exception as exc:
            teardown(ray, [actor] if actor is not None else [], [pg] if pg is not None else [])
            self._failed(name, f"{type(exc).__name__}: {exc}")
            return
        with self.lock:
            self.plan = moved.plan
            self.replicas[name] = moved.replica
            self.generation[name] = generation
            del self.pending[name]
        (self.work / "plan.json").write_text(json.dumps(moved.plan.to_dict(), indent=1))
        self._event(event="replica-replaced", part=name, from_node=lost["node"],
                    node=moved.replica.node, gpus=list(moved.replica.gpus),
                    objective=moved.plan.objective, replica_status=moved.status,
                    replica_gap=moved.gap, plan_seconds=round(moved.seconds, 3),
                    seconds=round(time.monotonic() - lost["_t"], 3))  # fmt: skip

    def _failed(self, name: str, reason: str) -> None:
        self.next_try[name] = time.monotonic() + self.retry
        self._event(event="replace-failed", part=name, reason=reason, retry_in=self.retry)


def _group_called(group: Any, name: str) -> bool:
    from ray.util.placement_group import placement_group_table

    try:
        return placement_group_table(group).get("name") == name
    except Exception:
        return False
