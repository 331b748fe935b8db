"""A replay's running state: the jobs, each tenant's usage, the waiting queue, and the placer that
asks a placement rule (or a solver) for GPUs."""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tsched.cluster import Cluster
from tsched.compare.jobmodel import (
    AppModel,
    CollectiveModel,
    _network_link,
    allreduce_seconds,
    packed_gpus,
)
from tsched.compare.sim_config import SimConfig
from tsched.compare.traces import TraceJob
from tsched.errors import InputError

__all__ = ["SHORTCUTS", "SimJob", "Usage", "WaitingQueue", "Placer", "tally"]


# shortcuts that skip work whose outcome is known (a job no compact placement is free for, the
# running jobs that end before a reservation could fit): off, a replay takes the long way to
# the same result (the tests compare the two)
SHORTCUTS = True


@dataclass
class SimJob:
    trace: TraceJob
    index: int
    remaining: float = 1.0  # fraction of the work left
    first_start: float = -1.0
    started: float = 0.0
    runtime: float = 0.0  # of the current run
    overhead: float = 0.0  # seconds of the current run spent restarting, not computing
    gpus: np.ndarray | None = None
    run_id: int = 0
    preemptions: int = 0
    migrations: int = 0
    restart_gpu_s: float = 0.0
    nodes: int = 0
    domains: int = 0
    comm_share: float = 0.0
    objective: float = 0.0
    end: float = -1.0
    node_counts: list[tuple[int, int]] = field(default_factory=list)  # of the current run


def tally(table: dict[int, list[float]], size: int, jobs: int, rt: float, loss: float) -> None:
    """Adds to ``table[size]``'s [jobs, Σ run time, Σ run time × loss]; drops it at no jobs."""
    row = table.setdefault(size, [0.0, 0.0, 0.0])
    row[0] += jobs
    row[1] += rt
    row[2] += loss
    if row[0] <= 0:
        del table[size]


class Usage:
    """Exact sliding-window GPU-seconds per key: piecewise-linear cumulative usage."""

    def __init__(self) -> None:
        self.rate: dict[str, float] = {}
        self.t: dict[str, list[float]] = {}
        self.cum: dict[str, list[float]] = {}

    def change(self, key: str, now: float, delta: float) -> None:
        ts = self.t.setdefault(key, [now])
        cs = self.cum.setdefault(key, [0.0])
        r = self.rate.get(key, 0.0)
        c = cs[-1] + r * (now - ts[-1])
        if ts[-1] == now:
            cs[-1] = c
        else:
            ts.append(now)
            cs.append(c)
        self.rate[key] = r + delta

    def _at(self, key: str, when: float) -> float:
        ts, cs = self.t.get(key), self.cum.get(key)
        if not ts or when <= ts[0]:
            return 0.0
        k = bisect.bisect_right(ts, when) - 1
        rate = (cs[k + 1] - cs[k]) / (ts[k + 1] - ts[k]) if k + 1 < len(ts) else self.rate[key]
        return cs[k] + rate * (when - ts[k])

    def window(self, key: str, now: float, width: float) -> float:
        return self._at(key, now) - self._at(key, now - width)

    def total(self, key: str, now: float) -> float:
        return self._at(key, now)


class WaitingQueue:
    """Waiting jobs in the queue policy's order, and per tenant and project in submit order."""

    def __init__(self, key: Callable[[int], tuple[float, ...]]) -> None:
        self.key = key
        self.items: list[tuple[Any, ...]] = []
        self.keys: dict[int, tuple[Any, ...]] = {}
        self.where: dict[int, tuple[str, str, tuple[float, int]]] = {}
        self.groups: dict[str, dict[str, list[tuple[float, int]]]] = {}
        self.sizes: dict[int, int] = {}  # waiting jobs per GPU count
        self._size: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self.items)

    def order(self) -> list[int]:
        return [item[-1] for item in self.items]

    def head(self) -> int:
        return int(self.items[0][-1])

    def smallest(self) -> int:
        return min(self.sizes) if self.sizes else 0

    def add(self, k: int, tenant: str, project: str, submit: float, size: int = 1) -> None:
        self._size[k] = size
        self.sizes[size] = self.sizes.get(size, 0) + 1
        kk = (*self.key(k), k)
        bisect.insort(self.items, kk)
        self.keys[k] = kk
        entry = (submit, k)
        bisect.insort(self.groups.setdefault(tenant, {}).setdefault(project, []), entry)
        self.where[k] = (tenant, project, entry)

    def remove(self, k: int) -> None:
        size = self._size.pop(k)
        self.sizes[size] -= 1
        if not self.sizes[size]:
            del self.sizes[size]
        kk = self.keys.pop(k)
        del self.items[bisect.bisect_left(self.items, kk)]
        tenant, project, entry = self.where.pop(k)
        projects = self.groups[tenant]
        jobs = projects[project]
        del jobs[bisect.bisect_left(jobs, entry)]
        if not jobs:
            del projects[project]
            if not projects:
                del self.groups[tenant]


class Placer:
    """Places a job on the free GPUs with the policy's solver; caches iteration times."""

    def __init__(self, cluster: Cluster, config: SimConfig, coll: CollectiveModel,
                 apps: Mapping[str, AppModel]) -> None:  # fmt: skip
        self.cluster = cluster
        self.config = config
        self.coll = coll
        self.apps = apps
        self.rng = np.random.default_rng(config.seed)
        self._iter_cache: dict[tuple[Any, ...], tuple[float, float]] = {}
        self._packed: dict[tuple[str, int], float] = {}
        from tsched.compare.placement import RULES, canonical

        self.rule = canonical(config.policy) if canonical(config.policy) in RULES else None
        # rules refuse a job no compact placement is free for under compact admission; random
        # is left to draw its node keys on every call, as its seeded stream expects
        self.screens = (SHORTCUTS and self.rule not in (None, "random")
                        and config.admission == "compact")  # fmt: skip
        self.shapes: Mapping[int, float] | None = None  # set by the simulation for fgd
        self.tables: dict[int, np.ndarray] | None = None
        self.hold: Callable[[], np.ndarray] | None = None  # seconds until each node is idle
        # per node, seconds until each running job ends and the GPUs it gives back
        self.releases: Callable[[], tuple[np.ndarray, np.ndarray]] | None = None
        self.pressure: Callable[[float, int], float] | None = None  # fgd's fragment weight
        # seconds until a compact placement of n GPUs among those a mask leaves a job
        self.wait: Callable[[int, np.ndarray], float] | None = None
        self.clock: Callable[[], float] | None = None
        self.deferred: dict[int, float] = {}  # job index → when fgd first held it for locality
        self._loss: dict[tuple[str, int], float] = {}
        levels = cluster.levels
        self.domain_of_node = (
            cluster.node_group[:, 0].astype(np.int64)
            if levels
            else np.zeros(cluster.n_nodes, dtype=np.int64)
        )

    def app(self, job: TraceJob) -> AppModel:
        try:
            return self.apps[job.app]
        except KeyError:
            raise InputError(
                f"job {job.name!r}: workload class {job.app!r} has no job model; known: "
                f"{', '.join(sorted(self.apps))}"
            ) from None

    def iteration(self, app: AppModel, gpus: np.ndarray) -> tuple[float, float]:
        """(seconds per iteration, communication share) of ``app`` on ``gpus``."""
        c = self.cluster
        nodes = c.gpu_node[gpus]
        counts = np.bincount(nodes)
        used = np.flatnonzero(counts)
        if len(used) == 1:
            local = tuple(np.sort(c.gpu_local[gpus]).tolist())
            key: tuple[Any, ...] = (app.name, 1, int(c.node_type_index[nodes[0]]), local)
        else:
            # the time depends on the shape and on the link class the allreduce prices
            link = _network_link(c, gpus)
            key = (app.name, len(gpus), len(used), int(counts.max()), link)
        hit = self._iter_cache.get(key)
        if hit is None:
            compute = float(app.compute_seconds(app.local_bsz))
            comm = allreduce_seconds(c, gpus, app.gradient_gb, self.coll, app.sync_overhead_s)
            if len(used) > 1:
                comm *= app.network_factor  # 1 unless fitted on the application's own rows
            g = self.coll.overlap
            total = (compute**g + comm**g) ** (1 / g) if comm > 0 else compute
            hit = (total, 1.0 - compute / total)
            self._iter_cache[key] = hit
        return hit

    def packed_iteration(self, app: AppModel, n: int) -> float:
        key = (app.name, n)
        if key not in self._packed:
            self._packed[key] = self.iteration(app, packed_gpus(self.cluster, n))[0]
        return self._packed[key]

    def set_shapes(self, shapes: Mapping[int, float]) -> None:
        """The job shapes ``fgd`` weighs, and each node size's fragmentation table for them."""
        from tsched.compare.placement import fragmentation

        self.shapes = shapes or None
        self.tables = None
        if shapes:
            self.tables = {
                int(g): fragmentation(np.arange(int(g) + 1), int(g), shapes)
                for g in np.unique(self.cluster.gpus_per_node)
            }

    def fragment_loss(self, job: TraceJob) -> float:
        """The share of its GPU-time ``job`` loses on fragments: ``1 − 1/s`` for its slowdown
        ``s`` split evenly over one node more than it needs (0 where that is no slower)."""
        key = (job.app, job.gpus)
        hit = self._loss.get(key)
        if hit is None:
            c, n = self.cluster, job.gpus
            nodes = min(math.ceil(n / int(c.gpus_per_node.max())) + 1, n, c.n_nodes)
            order = np.argsort(-c.gpus_per_node, kind="stable")[:nodes]
            per = [n // nodes + (i < n % nodes) for i in range(nodes)]
            hit = 0.0
            if nodes > 1 and all(p <= c.gpus_per_node[k] for p, k in zip(per, order)):
                gpus = np.concatenate([c.node_offset[k] + np.arange(p) for p, k in zip(per, order)])
                hit = max(0.0, 1.0 - 1.0 / self.slowdown(self.app(job), gpus.astype(np.int64)))
            self._loss[key] = hit
        return hit

    def slowdown(self, app: AppModel, gpus: np.ndarray) -> float:
        """Run time on ``gpus`` over the compact run time (1 when stretch is off)."""
        if not self.config.stretch:
            return 1.0
        return self.iteration(app, gpus)[0] / self.packed_iteration(app, len(gpus))

    def place(
        self, job: TraceJob, free: np.ndarray, waiter: int | None = None
    ) -> tuple[np.ndarray, float] | None:
        """GPUs for ``job`` among ``free`` (a bool mask), and the plan's objective; None if the
        policy finds no placement (or none its admission regime allows). ``waiter``: the job's
        index when it may wait for a compact placement (``fgd``; ``None`` for hypothetical
        masks)."""
        n = job.gpus
        c = self.cluster
        free_idx = np.flatnonzero(free)
        if len(free_idx) < n:
            return None
        free_per_node = np.bincount(c.gpu_node[free_idx], minlength=c.n_nodes)
        if self.screens:
            from tsched.compare.placement import compact_room

            if not compact_room(free_per_node, c.gpus_per_node, n):
                return None
        if self.rule is not None:
            from tsched.compare.placement import View, place

            app = self.app(job)
            fgd = self.rule == "fgd"
            defers = fgd and waiter is not None and self.wait is not None and self.clock is not None
            now = self.clock() if defers and self.clock else 0.0
            view = View(c, free, free_per_node, self.config.admission, self.rng, self.shapes,
                        lambda g: self.slowdown(app, g),
                        hold=self.hold() if fgd and self.hold else None, tables=self.tables,
                        releases=self.releases() if fgd and self.releases else None,
                        duration=job.duration if fgd else None,
                        weight=self.pressure(job.duration, len(free_idx))
                        if fgd and self.pressure else 1.0,
                        wait=self._wait_within(free) if defers else None,
                        waited=now - self.deferred.get(waiter, now) if defers else 0.0,
                        margin=self.config.model_margin)  # fmt: skip
            gpus = place(self.rule, view, n)
            if gpus is None:
                if defers:  # enough GPUs are free: fgd held the job back for locality
                    self.deferred.setdefault(waiter, now)
                return None
            if waiter is not None:
                self.deferred.pop(waiter, None)
            return gpus, 0.0
        compact = self.config.admission == "compact"
        if n == 1:
            return self._place_one(free_idx, free_per_node), 0.0
        locations = free_idx
        if compact:
            from tsched.compare.placement import compact_nodes

            ok = compact_nodes(free_per_node, c.gpus_per_node, n)
            locations = free_idx[ok[c.gpu_node[free_idx]]]
            if len(locations) < n:
                return None
        if self.config.fragmentation_aware:
            locations = self._fragmentation_subset(n, locations, free_per_node)
        got = self._solve(job, n, locations)
        if got is not None and compact:
            from tsched.compare.placement import View, admits_compact, place

            if not admits_compact(c, got[0]):  # the solver spread it: compact best fit instead
                view = View(c, free, free_per_node, "compact")
                gpus = place("best-fit", view, n)
                return None if gpus is None else (gpus, 0.0)
        return got

    def _wait_within(self, free: np.ndarray) -> Callable[[int], float]:
        """The wait for a compact placement as the job sees it: among the GPUs its mask leaves
        it, not those the mask keeps for another job (``backfill``'s reservation for the head),
        which a compact placement free only there cannot be had by this job."""
        wait = self.wait
        assert wait is not None
        return lambda n: wait(n, free)

    def _place_one(self, free_idx: np.ndarray, free_per_node: np.ndarray) -> np.ndarray:
        c = self.cluster
        policy = self.config.policy
        if policy == "random":
            return np.array([free_idx[self.rng.integers(len(free_idx))]])
        has = free_per_node > 0
        if policy == "spread":
            node = int(np.argmax(np.where(has, free_per_node, -1)))
        else:
            score = np.where(has, free_per_node, np.iinfo(np.int64).max)
            if self.config.fragmentation_aware:  # fullest domain first, then fullest node
                dom_free = np.bincount(self.domain_of_node, weights=free_per_node)
                score = score + dom_free[self.domain_of_node] * (c.gpus_per_node.max() + 1)
            node = int(np.argmin(score))
        local = free_idx[c.gpu_node[free_idx] == node]
        return local[:1]

    def _fragmentation_subset(
        self, n: int, free_idx: np.ndarray, free_per_node: np.ndarray
    ) -> np.ndarray:
        """Free GPUs of the fullest node (job smaller than a node) or the fullest domain that
        holds the job; all free GPUs when none does alone."""
        c = self.cluster
        gpn = int(c.gpus_per_node.max())
        node_of = c.gpu_node[free_idx]
        if n <= gpn:
            fits = np.flatnonzero(free_per_node >= n)
            if len(fits):
                node = fits[np.argmin(free_per_node[fits])]
                return free_idx[node_of == node]
        dom_free = np.bincount(self.domain_of_node, weights=free_per_node)
        fits = np.flatnonzero(dom_free >= n)
        if len(fits):
            dom = fits[np.argmin(dom_free[fits])]
            return free_idx[self.domain_of_node[node_of] == dom]
        return free_idx

    def ring_problem(self, job: TraceJob, locations: np.ndarray) -> Any:
        """The job's ring all-reduce as a placement problem on ``locations``."""
        from tsched.problem import PlacementProblem

        n = job.gpus
        app = self.app(job)
        ring = np.arange(n)
        gb = np.full(n, 2.0 * (n - 1) / n * max(app.gradient_gb, 1e-9))
        return PlacementProblem(
            name=job.name,
            n_workers=n,
            locations=np.asarray(locations),
            src=ring,
            dst=np.roll(ring, -1),
            gb=gb,
            cluster=self.cluster,
        )

    def ring_objective(self, job: TraceJob, gpus: np.ndarray) -> float:
        """The ring's communication seconds per iteration with worker ``k`` on ``gpus[k]``."""
        from tsched.problem import objective

        if len(gpus) < 2:
            return 0.0
        return float(objective(self.ring_problem(job, gpus), np.arange(len(gpus))))

    def _solve(
        self, job: TraceJob, n: int, locations: np.ndarray
    ) -> tuple[np.ndarray, float] | None:
        from tsched.solvers.registry import solve

        problem = self.ring_problem(job, locations)
        result = solve(
            problem,
            method=self.config.policy,
            time_limit=self.config.time_limit,
            seed=int(self.rng.integers(2**31)),
        )
        if result.assignment is None:
            return None
        return np.asarray(locations)[np.asarray(result.assignment)], float(result.objective)
