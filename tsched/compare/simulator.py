"""Event-driven cluster simulation: arrivals, a queue policy, placement, completion, preemption.

A job of the trace runs ``duration`` seconds on its most compact placement; on the GPUs it
actually gets it runs ``duration × t(placement) / t(compact)``, where ``t`` is the iteration time
of its class under the job time model (:mod:`tsched.compare.jobmodel`). Placement is a tsched
solver (``greedy``, ``auto``, ``pack``, ``random``, ``kai-tas`` …) solving the job's ring
all-reduce traffic on the free GPUs. A one-GPU job has no traffic, so every free GPU costs the
same to the solver; it goes to the fullest node that has room (``random``: any free GPU;
``spread``: the emptiest node), which keeps whole nodes free for large jobs.

Queue policies (:data:`QUEUES`):

``fifo``
    Arrival order; the head of the queue blocks the jobs behind it.
``sjf``
    Shortest ``duration`` first (an oracle on the trace's run time); the head blocks.
``backfill``
    FIFO with EASY backfilling: the head job reserves the earliest time enough GPUs free up;
    a later job may start now if it fits and ends before that time, or leaves enough GPUs for
    the head (a count of GPUs, not a topology check).
``fair``
    Fair share with GPU-time budgets: a tenant's share of the cluster is its budget over the
    budgets of the tenants with work; jobs are taken from the tenant furthest below its share
    of the GPU-seconds used in a sliding window, and within it from the project furthest below
    its share (budgets ``"tenant"`` and ``"tenant/project"``). A job that does not fit may
    preempt jobs of tenants above their share that have run at least ``min_runtime`` seconds
    (the protected time), only where the GPUs they free give it a placement its policy and
    admission regime take: the fairness order's victims, or where those free the wrong nodes
    (``compact`` admission) the fewest victims' GPUs that clear one node, or whole nodes, for
    it. A preempted job returns to the queue and keeps its progress.

Every policy replays the same jobs in the same order with the same seed (matched traces).

A replay is a :class:`Simulation`: its core here (arrivals, completions, starts and stops, the
order of a pass, the time series) and its parts beside it, each readable and testable alone:
:mod:`tsched.compare.queues` (fair share, EASY and relaxed backfilling),
:mod:`tsched.compare.preemption` (fair share's preemption, consolidation),
:mod:`tsched.compare.releases` (when GPUs come free) and :mod:`tsched.compare.sim_state` (the
waiting queue, GPU-time usage, placement).
"""

from __future__ import annotations

import bisect
import heapq
import math
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from tsched.cluster import Cluster
from tsched.compare.jobmodel import AppModel, CollectiveModel
from tsched.compare.preemption import Preemption
from tsched.compare.queues import Backfill, FairShare
from tsched.compare.records import JobRecord
from tsched.compare.releases import ReleaseTable
from tsched.compare.sim_config import (
    QUEUES,
    SimConfig,
    SimResult,
    Snapshot,
    default_apps,
    representative_jobs,
)
from tsched.compare.sim_state import Placer, SimJob, Usage, WaitingQueue, tally
from tsched.compare.traces import TraceJob
from tsched.errors import InputError

__all__ = [
    "QUEUES",
    "SimConfig",
    "Simulation",
    "SimResult",
    "Snapshot",
    "simulate",
    "default_apps",
    "representative_jobs",
]



class Simulation(FairShare, Backfill, Preemption):
    """One replay of ``jobs`` on ``cluster`` (its busy GPUs stay busy): :meth:`run` it once.

    The state is the replay's: ``free`` (which GPUs are free), ``state`` (each job's
    :class:`~tsched.compare.sim_state.SimJob`), ``queue`` (the jobs waiting), ``running``,
    ``by_end`` (the running jobs by end), ``events`` (completions, a heap) and ``releases``
    (:class:`~tsched.compare.releases.ReleaseTable`). The queue disciplines, preemption and
    consolidation are methods of its parts (:class:`~tsched.compare.queues.FairShare`,
    :class:`~tsched.compare.queues.Backfill`, :class:`~tsched.compare.preemption.Preemption`).

    Raises
    ------
    InputError
        A job asks for more GPUs than the cluster has free at best, or names a workload class
        without a job model.
    """

    def __init__(
        self,
        jobs: Sequence[TraceJob],
        cluster: Cluster,
        config: SimConfig | None = None,
        *,
        collective: CollectiveModel | None = None,
        apps: Mapping[str, AppModel] | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> None:
        config = config or SimConfig()
        if collective is None or apps is None:
            coll0, apps0 = default_apps()
            collective = collective or coll0
            apps = apps if apps is not None else apps0
        self.jobs, self.cluster, self.config, self.progress = jobs, cluster, config, progress
        self.placer = placer = Placer(cluster, config, collective, apps)
        self.usable = int((~cluster.busy_mask).sum())
        for j in jobs:
            placer.app(j)
            if j.gpus > self.usable:
                raise InputError(
                    f"job {j.name!r} asks for {j.gpus} GPUs; cluster {cluster.name!r} has "
                    f"{self.usable} usable (drop such jobs with max_gpus when loading the trace)"
                )
        self.order = sorted(range(len(jobs)), key=lambda k: (jobs[k].submit, k))
        self.state = state = [SimJob(jobs[k], k) for k in range(len(jobs))]
        self.free = ~cluster.busy_mask.copy()
        self.gpu_end = np.full(cluster.n_gpus, np.inf)  # when each GPU's running job ends
        self.node_gpus = cluster.gpus_per_node
        self.node_sizes = self.node_gpus.tolist()
        self.gmax = int(self.node_gpus.max())  # the largest node's GPUs
        self.always_busy = (np.bincount(cluster.gpu_node[cluster.busy_mask],
                                        minlength=cluster.n_nodes) > 0)  # fmt: skip
        # whether a job must sit compactly: one node for a job of up to a node, whole nodes for
        # a larger one (compact admission, or the whole-nodes rule under any admission)
        self.whole_only = config.admission == "compact" or placer.rule == "whole-nodes"
        self.events: list[tuple[float, int, int, int]] = []  # (time, seq, job, run_id)
        self.seq = 0
        self.snapshots: dict[str, Snapshot] = {}
        if config.queue == "sjf":
            self.queue = WaitingQueue(lambda k: (state[k].trace.duration * state[k].remaining,
                                                 state[k].trace.submit))  # fmt: skip
        else:
            self.queue = WaitingQueue(lambda k: (state[k].trace.submit,))
        self.running: set[int] = set()
        self.by_end: list[tuple[float, int]] = []  # (end, job index) of the running jobs
        self.running_tenants: dict[str, int] = {}
        self.usage = Usage()
        self.budgets = dict(config.budgets)
        # fgd's expected shapes: the last shape_window arrivals, and the jobs still waiting that
        # arrived before them; per size [jobs, Σ run time, Σ run time × fragment loss]
        self.recent: deque[tuple[float, int, int, float, float]] = deque()  # (arrived, job, …)
        self.window: dict[int, list[float]] = {}
        self.aged: dict[int, list[float]] = {}
        self.aged_jobs: set[int] = set()
        self.deadlines: dict[int, float] = {}  # relaxed backfilling's bound per head job
        self.wake_at = -math.inf  # a pending consolidation wake-up (an event of job −1)
        self.releases = ReleaseTable(cluster)
        self.series: dict[str, list[float]] = {
            k: [] for k in ("t", "busy", "queued", "frag", "whole", "blocked")
        }
        self.done = 0
        placer.hold = self.releases.hold
        placer.releases = self.releases.releases
        placer.pressure = self.pressure
        placer.clock = lambda: self.releases.clock
        placer.wait = (self.compact_wait if config.admission == "any" and placer.rule == "fgd"
                       else None)  # fmt: skip

    # -- when GPUs come free -------------------------------------------------------------------

    def room_soonest(self, n: int, skip: set[int]) -> tuple[float, int] | None:
        """:meth:`ReleaseTable.room_soonest` on the GPUs free now."""
        per_node = np.bincount(self.cluster.gpu_node[self.free], minlength=self.cluster.n_nodes)
        return self.releases.room_soonest(n, per_node, skip)

    def compact_wait(self, n: int, mask: np.ndarray) -> float:
        """Seconds until ``n`` GPUs are free compactly if nothing else starts: one node with
        room for a job of up to a node, else ``⌈n/G⌉`` nodes of ``G`` GPUs with all their jobs
        ended (nodes with GPUs busy outside the replay never are). Only nodes the job may wait
        on count: a node where ``mask`` withholds free GPUs (kept for the head job of
        ``backfill``) is left out, since those GPUs go to the head, not to this job. A positive
        finite wait is always some running job's end, and fgd holds a job back only on one, so a
        job held back for locality always has an event to wake it."""
        cluster = self.cluster
        now = self.releases.clock
        withheld = np.bincount(cluster.gpu_node[self.free & ~mask], minlength=cluster.n_nodes) > 0
        if n > self.gmax:  # the fewest nodes: largest ones, whole
            k = math.ceil(n / self.gmax)
            usable = ~self.always_busy & ~withheld & (self.node_gpus == self.gmax)
            ends = np.sort(np.maximum(self.releases.node_end()[usable] - now, 0.0))
            return float(ends[k - 1]) if k <= len(ends) else math.inf
        got = self.room_soonest(n, set(np.flatnonzero(withheld).tolist()))
        return math.inf if got is None else got[0]

    def pressure(self, duration: float, n_free: int) -> float:
        """Demand for the free GPUs while a job of ``duration`` runs: the GPUs waiting plus the
        GPUs expected to arrive meanwhile (the rate of the arrivals in fgd's shape window), over
        the free GPUs, at most 1. Fragments cost only if some job would have used the GPUs they
        strand."""
        waiting = sum(size * k for size, k in self.queue.sizes.items())
        rate = 0.0
        now, recent = self.releases.clock, self.recent
        if len(recent) > 1 and now > recent[0][0]:
            gpus = sum(g * row[0] for g, row in self.window.items())
            rate = gpus / (now - recent[0][0])
        return min(1.0, (waiting + rate * duration) / max(n_free, 1))

    # -- starting and stopping jobs ------------------------------------------------------------

    @staticmethod
    def tenant_key(j: SimJob) -> str:
        return j.trace.tenant

    @staticmethod
    def project_key(j: SimJob) -> str:
        return f"{j.trace.tenant}/{j.trace.project}"

    def start(self, j: SimJob, gpus: np.ndarray, objective: float, now: float) -> None:
        """Start (or restart) job ``j`` on ``gpus``."""
        placer, config, cluster = self.placer, self.config, self.cluster
        app = placer.app(j.trace)
        _t_iter, share = placer.iteration(app, gpus)
        slowdown = placer.slowdown(app, gpus)
        if j.index in self.aged_jobs:
            self.aged_jobs.discard(j.index)
            rt = j.trace.duration
            tally(self.aged, j.trace.gpus, -1, -rt, -rt * self.loss_of(j))
        j.gpus = gpus
        j.started = now
        # every start after the first is a restart (after a preemption or a move)
        j.overhead = config.restart_cost if j.first_start >= 0 else 0.0
        j.restart_gpu_s += j.overhead * len(gpus)
        j.runtime = j.remaining * j.trace.duration * slowdown + j.overhead
        if j.first_start < 0:
            j.first_start = now
        nodes, counts = np.unique(cluster.gpu_node[gpus], return_counts=True)
        j.node_counts = list(zip(nodes.tolist(), counts.tolist()))
        j.nodes = max(j.nodes, len(nodes))
        j.domains = max(j.domains, len(np.unique(placer.domain_of_node[nodes])))
        j.comm_share = share
        j.objective = objective
        if j.trace.name in config.snapshot_jobs and j.trace.name not in self.snapshots:
            if placer.rule is not None:  # rules do not price the ring; the picture does
                objective = placer.ring_objective(j.trace, gpus)
            busy = np.flatnonzero(~self.free)
            self.snapshots[j.trace.name] = Snapshot(now, np.array(gpus), busy, objective)
        end = now + j.runtime
        self.free[gpus] = False
        self.gpu_end[gpus] = end
        self.releases.add(j.index, end, j.node_counts)
        self.running.add(j.index)
        bisect.insort(self.by_end, (end, j.index))
        self.running_tenants[j.trace.tenant] = self.running_tenants.get(j.trace.tenant, 0) + 1
        self.usage.change(self.tenant_key(j), now, len(gpus))
        self.usage.change(self.project_key(j), now, len(gpus))
        j.run_id += 1
        self.seq += 1
        heapq.heappush(self.events, (end, self.seq, j.index, j.run_id))

    def stop(self, j: SimJob, now: float) -> None:
        """Take job ``j`` off its GPUs."""
        assert j.gpus is not None
        self.free[j.gpus] = True
        self.gpu_end[j.gpus] = np.inf
        self.releases.remove(j.index, j.node_counts)
        self.running.discard(j.index)
        at = bisect.bisect_left(self.by_end, (j.started + j.runtime, j.index))
        assert self.by_end[at][1] == j.index
        del self.by_end[at]
        tenants = self.running_tenants
        tenants[j.trace.tenant] -= 1
        if not tenants[j.trace.tenant]:
            del tenants[j.trace.tenant]
        self.usage.change(self.tenant_key(j), now, -len(j.gpus))
        self.usage.change(self.project_key(j), now, -len(j.gpus))

    def halt(self, j: SimJob, now: float) -> None:
        """Stop a running job keeping its progress (its checkpoint); its completion event is
        now stale."""
        work = j.runtime - j.overhead  # the restart's seconds are no progress
        done_frac = max(now - j.started - j.overhead, 0.0) / work if work > 0 else 1.0
        j.remaining = max(j.remaining * (1.0 - done_frac), 0.0)
        self.stop(j, now)
        j.run_id += 1
        j.gpus = None

    def preempt(self, j: SimJob, now: float) -> None:
        """Halt a running job and queue it again."""
        self.halt(j, now)
        j.preemptions += 1
        self.enqueue(j.index)

    def protected(self, j: SimJob, now: float) -> bool:
        """Inside its minimum-runtime protection (its restart not counted), or started this
        instant (no job moves or is preempted twice in one pass)."""
        return now - j.started < j.overhead + self.config.min_runtime or j.started >= now

    def enqueue(self, k: int) -> None:
        j = self.state[k]
        self.queue.add(k, j.trace.tenant, self.project_key(j), j.trace.submit, j.trace.gpus)

    def try_start(self, k: int, now: float, mask: np.ndarray | None = None) -> bool:
        """Start job ``k`` where its placement rule puts it on ``mask`` (default: the free
        GPUs); whether it started."""
        j = self.state[k]
        placed = self.placer.place(j.trace, self.free if mask is None else mask, waiter=k)
        if placed is None:
            return False
        self.start(j, placed[0], placed[1], now)
        return True

    # -- fgd's expected shapes -----------------------------------------------------------------

    def expected_shapes(self) -> dict[int, float]:
        from tsched.compare.placement import expected_shapes as shapes_of

        window, aged = self.window, self.aged
        sizes = set(window) | set(aged)
        tallied = {g: [window.get(g, [0.0] * 3)[i] + aged.get(g, [0.0] * 3)[i] for i in range(3)]
                   for g in sizes}  # fmt: skip
        shapes = shapes_of({g: g * t[1] for g, t in tallied.items()}, {}, {})
        if self.config.admission != "any":
            return shapes
        # under any admission a fragment is usable, at the slowdown of the job that takes it:
        # each shape's weight is scaled by the share of GPU-time its jobs lose there
        return {g: w * (tallied[g][2] / tallied[g][1] if tallied[g][1] > 0 else 1.0)
                for g, w in shapes.items()}  # fmt: skip

    def loss_of(self, j: SimJob) -> float:
        """What a job loses on a fragment (fgd under any admission; 1 under compact)."""
        return self.placer.fragment_loss(j.trace) if self.config.admission == "any" else 1.0

    def shape_arrival(self, k: int, now: float) -> None:
        """Feeds an arrival into the shapes ``fgd`` expects. An arrival that leaves the window
        while it still waits keeps counting (as ``aged``) until it starts."""
        if self.placer.rule != "fgd":
            return
        j = self.state[k]
        g, rt = j.trace.gpus, j.trace.duration
        loss = rt * self.loss_of(j)
        self.recent.append((now, k, g, rt, loss))
        tally(self.window, g, 1, rt, loss)
        if len(self.recent) > self.config.shape_window:
            _, k0, g0, rt0, l0 = self.recent.popleft()
            tally(self.window, g0, -1, -rt0, -l0)
            if self.state[k0].first_start < 0:  # still waiting for its first start
                self.aged_jobs.add(k0)
                tally(self.aged, g0, 1, rt0, l0)

    # -- a pass, an event, the replay ----------------------------------------------------------

    def schedule(self, now: float) -> None:
        """One scheduling pass: the queue discipline, then consolidation, backfilling or
        preemption where configured."""
        queue, config = self.queue, self.config
        if not len(queue):
            return
        if self.placer.rule == "fgd":  # the shapes fgd expects, once a pass
            self.placer.set_shapes(self.expected_shapes())
        if config.queue != "fair":
            while len(queue) and self.try_start(queue.head(), now):
                queue.remove(queue.head())
            if config.consolidate != "none" and len(queue):
                self.consolidate(now)
                while len(queue) and self.try_start(queue.head(), now):
                    queue.remove(queue.head())
            if config.queue == "backfill" and len(queue):
                self.backfill(now)
            return
        self.fair_pass(now)
        if config.consolidate != "none" and len(queue):
            self.consolidate(now)
            self.fair_pass(now)
        if config.preemption and len(queue):
            self.preempt_pass(now)

    def record(self, now: float) -> None:
        """The time series after an event."""
        s, free, cluster = self.series, self.free, self.cluster
        s["t"].append(now)
        n_free = int(free.sum())
        s["busy"].append(self.usable - n_free)
        s["queued"].append(len(self.queue))
        if n_free:
            per_node = np.bincount(cluster.gpu_node[free], minlength=cluster.n_nodes)
            whole_nodes = per_node == self.node_gpus
            whole = int(per_node[whole_nodes].sum())
            s["frag"].append(1.0 - whole / n_free)
            s["whole"].append(int(whole_nodes.sum()))
        else:
            s["frag"].append(0.0)
            s["whole"].append(0)
        smallest = self.queue.smallest()
        s["blocked"].append(n_free if len(self.queue) and smallest <= n_free else 0)

    def _stalled(self) -> InputError:
        head = self.state[self.queue.head()].trace
        cluster, config = self.cluster, self.config
        idle_nodes = int((np.bincount(cluster.gpu_node[cluster.busy_mask],
                                      minlength=cluster.n_nodes) == 0).sum())  # fmt: skip
        return InputError(
            f"simulation stalled with {len(self.queue)} job(s) waiting that no placement fits "
            f"(policy {config.policy!r}, {config.admission} admission): job {head.name!r} "
            f"asks for {head.gpus} GPUs and the idle cluster cannot give them that way "
            f"({self.usable} usable GPUs, {idle_nodes} nodes without busy GPUs)"
        )

    def run(self) -> SimResult:
        """Replay every job to its end; the records and the time series."""
        t_wall = time.perf_counter()
        jobs, order, state, events = self.jobs, self.order, self.state, self.events
        n_jobs = len(jobs)
        next_arrival = 0
        while self.done < n_jobs:
            t_arr = jobs[order[next_arrival]].submit if next_arrival < n_jobs else math.inf
            t_evt = events[0][0] if events else math.inf
            now = min(t_arr, t_evt)
            self.releases.clock = now
            if now == math.inf:
                raise self._stalled()
            while events and events[0][0] <= now:
                _t, _s, k, run_id = heapq.heappop(events)
                if k < 0:
                    continue  # a consolidation wake-up: the pass below looks again
                j = state[k]
                if run_id != j.run_id or j.gpus is None:
                    continue
                self.stop(j, now)
                j.remaining = 0.0
                j.end = now
                j.gpus = None
                self.done += 1
                if self.progress:
                    self.progress(self.done, n_jobs)
            while next_arrival < n_jobs and jobs[order[next_arrival]].submit <= now:
                self.enqueue(order[next_arrival])
                self.shape_arrival(order[next_arrival], now)
                next_arrival += 1
            self.schedule(now)
            self.record(now)
        return self._result(time.perf_counter() - t_wall)

    def _result(self, wall: float) -> SimResult:
        config, s = self.config, self.series
        records = [
            JobRecord.of(
                config.label,
                j.trace.name,
                j.trace.submit,
                j.first_start,
                j.end,
                j.trace.gpus,
                nodes=j.nodes,
                objective=j.objective,
                tenant=j.trace.tenant,
                app=j.trace.app,
                domains=j.domains,
                comm_share=j.comm_share,
                preemptions=j.preemptions,
                ideal=j.trace.duration,
                migrations=j.migrations,
                restart_gpu_s=j.restart_gpu_s,
            )
            for j in self.state
        ]
        end = s["t"][-1] if s["t"] else 0.0
        tenants = {j.trace.tenant for j in self.state}
        return SimResult(
            config,
            records,
            np.asarray(s["t"]),
            np.asarray(s["busy"]),
            np.asarray(s["queued"]),
            np.asarray(s["frag"]),
            {t: self.usage.total(t, end) for t in sorted(tenants)},
            wall,
            self.snapshots,
            np.asarray(s["whole"]),
            np.asarray(s["blocked"]),
        )


def simulate(
    jobs: Sequence[TraceJob],
    cluster: Cluster,
    config: SimConfig | None = None,
    *,
    collective: CollectiveModel | None = None,
    apps: Mapping[str, AppModel] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> SimResult:
    """Replay ``jobs`` on ``cluster`` (its busy GPUs stay busy) and return one record per job
    (:class:`Simulation`).

    Raises
    ------
    InputError
        A job asks for more GPUs than the cluster has free at best, or names a workload class
        without a job model.

    Examples
    --------
    >>> from tsched import presets
    >>> from tsched.compare.traces import TraceJob
    >>> jobs = [TraceJob("a", 0, 8, 100.0, "bert"), TraceJob("b", 10, 8, 100.0, "bert")]
    >>> cluster = presets.cluster("dgx-h100-4node")  # two GPUs busy
    >>> greedy = simulate(jobs, cluster, SimConfig(policy="greedy"))
    >>> [(round(r.jct, 1), r.nodes) for r in greedy.records]
    [(100.0, 1), (100.0, 1)]
    >>> pack = simulate(jobs, cluster, SimConfig(policy="pack"))  # b straddles two nodes
    >>> [(round(r.jct, 1), r.nodes) for r in pack.records]
    [(100.0, 1), (104.2, 2)]
    """
    sim = Simulation(jobs, cluster, config, collective=collective, apps=apps, progress=progress)
    return sim.run()
