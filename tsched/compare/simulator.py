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
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
import operator
import time
from collections import defaultdict, deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from tsched.cluster import Cluster
from tsched.compare import sim_state
from tsched.compare.jobmodel import AppModel, CollectiveModel
from tsched.compare.records import JobRecord
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
    "SimResult",
    "Snapshot",
    "simulate",
    "default_apps",
    "representative_jobs",
]


def simulate(
    jobs: Sequence[TraceJob],
    cluster: Cluster,
    config: SimConfig | None = None,
    *,
    collective: CollectiveModel | None = None,
    apps: Mapping[str, AppModel] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> SimResult:
    """Replay ``jobs`` on ``cluster`` (its busy GPUs stay busy) and return one record per job.

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
    config = config or SimConfig()
    if collective is None or apps is None:
        coll0, apps0 = default_apps()
        collective = collective or coll0
        apps = apps if apps is not None else apps0
    placer = Placer(cluster, config, collective, apps)
    usable = int((~cluster.busy_mask).sum())
    idle_nodes = int((np.bincount(cluster.gpu_node[cluster.busy_mask], minlength=cluster.n_nodes)
                      == 0).sum())  # fmt: skip
    for j in jobs:
        placer.app(j)
        if j.gpus > usable:
            raise InputError(
                f"job {j.name!r} asks for {j.gpus} GPUs; cluster {cluster.name!r} has {usable} "
                "usable (drop such jobs with max_gpus when loading the trace)"
            )
    t_wall = time.perf_counter()
    order = sorted(range(len(jobs)), key=lambda k: (jobs[k].submit, k))
    state = [SimJob(jobs[k], k) for k in range(len(jobs))]
    free = ~cluster.busy_mask.copy()
    gpu_end = np.full(cluster.n_gpus, np.inf)  # when each GPU's running job ends
    node_gpus = cluster.gpus_per_node
    node_sizes = node_gpus.tolist()
    gmax = int(node_gpus.max())  # the largest node's GPUs
    events: list[tuple[float, int, int, int]] = []  # (time, seq, job, run_id)
    seq = 0
    watch = set(config.snapshot_jobs)
    snapshots: dict[str, Snapshot] = {}
    if config.queue == "sjf":
        queue = WaitingQueue(lambda k: (state[k].trace.duration * state[k].remaining,
                                    state[k].trace.submit))  # fmt: skip
    else:
        queue = WaitingQueue(lambda k: (state[k].trace.submit,))
    running_tenants: dict[str, int] = {}
    # fgd's expected shapes: the last shape_window arrivals, and the jobs still waiting that
    # arrived before them; per size [jobs, Σ run time, Σ run time × fragment loss]
    recent: deque[tuple[float, int, int, float, float]] = deque()  # (arrived, job, ...)
    window: dict[int, list[float]] = {}
    aged: dict[int, list[float]] = {}
    aged_jobs: set[int] = set()
    usage = Usage()
    budgets = dict(config.budgets)
    running: set[int] = set()
    by_end: list[tuple[float, int]] = []  # (end, job index) of the running jobs, sorted
    series_t: list[float] = []
    series_busy: list[int] = []
    series_q: list[int] = []
    series_frag: list[float] = []
    series_whole: list[int] = []
    series_blocked: list[int] = []
    done = 0
    next_arrival = 0
    n_jobs = len(jobs)

    on_node: list[dict[int, float]] = [{} for _ in range(cluster.n_nodes)]
    clock = [0.0]
    # per node, the end of each running job (ascending; inf pads) and the GPUs it frees there
    release_end = np.full((cluster.n_nodes, 4), np.inf)
    release_gpus = np.zeros((cluster.n_nodes, 4), dtype=np.int64)

    # what the release table gives, kept until the table or the clock changes (a deep queue
    # asks for it once per waiting job an event); read-only for its callers
    derived: dict[str, Any] = {}

    def node_end() -> np.ndarray:
        """When each node's running jobs have all ended (``-inf`` for an idle node)."""
        if "end" not in derived:
            derived["end"] = np.where(np.isinf(release_end), -np.inf, release_end).max(axis=1)
        return derived["end"]

    def at_clock(key: str, make: Callable[[], Any]) -> Any:
        got = derived.get(key)
        if got is None or got[0] != clock[0]:
            got = derived[key] = (clock[0], make())
        return got[1]

    placer.hold = lambda: at_clock("hold", lambda: np.maximum(node_end() - clock[0], 0.0))

    def release_row(node: int) -> None:
        nonlocal release_end, release_gpus
        derived.clear()
        ends = sorted((e, r) for r, e in on_node[node].items())
        if len(ends) > release_end.shape[1]:  # widen the table
            grow = len(ends) - release_end.shape[1] + 4
            release_end = np.pad(release_end, ((0, 0), (0, grow)), constant_values=np.inf)
            release_gpus = np.pad(release_gpus, ((0, 0), (0, grow)))
        release_end[node] = np.inf
        release_gpus[node] = 0
        for i, (end, r) in enumerate(ends):
            release_end[node, i] = end
            release_gpus[node, i] = dict(state[r].node_counts)[node]

    def releases() -> tuple[np.ndarray, np.ndarray]:
        """Per node, the seconds until each of its running jobs ends (ascending; ``inf``
        pads) and the GPUs that job gives back there (0 pads)."""
        return at_clock("releases", lambda: (np.maximum(release_end - clock[0], 0.0),
                                             release_gpus))  # fmt: skip

    placer.releases = releases

    def pressure(duration: float, n_free: int) -> float:
        """Demand for the free GPUs while a job of ``duration`` runs: the GPUs waiting plus the
        GPUs expected to arrive meanwhile (the rate of the arrivals in fgd's shape window), over
        the free GPUs, at most 1. Fragments cost only if some job would have used the GPUs they
        strand."""
        waiting = sum(size * k for size, k in queue.sizes.items())
        rate = 0.0
        if len(recent) > 1 and clock[0] > recent[0][0]:
            gpus = sum(g * row[0] for g, row in window.items())
            rate = gpus / (clock[0] - recent[0][0])
        return min(1.0, (waiting + rate * duration) / max(n_free, 1))

    placer.pressure = pressure
    placer.clock = lambda: clock[0]

    always_busy = np.bincount(cluster.gpu_node[cluster.busy_mask], minlength=cluster.n_nodes) > 0

    def compact_wait(n: int, mask: np.ndarray) -> float:
        """Seconds until ``n`` GPUs are free compactly if nothing else starts: one node with
        room for a job of up to a node, else ``⌈n/G⌉`` nodes of ``G`` GPUs with all their jobs
        ended (nodes with GPUs busy outside the replay never are). Only nodes the job may wait
        on count: a node where ``mask`` withholds free GPUs (kept for the head job of
        ``backfill``) is left out, since those GPUs go to the head, not to this job. A positive
        finite wait is always some running job's end, and fgd holds a job back only on one, so a
        job held back for locality always has an event to wake it."""
        now = clock[0]
        withheld = np.bincount(cluster.gpu_node[free & ~mask], minlength=cluster.n_nodes) > 0
        if n > gmax:  # the fewest nodes: largest ones, whole
            k = math.ceil(n / gmax)
            usable = ~always_busy & ~withheld & (node_gpus == gmax)
            ends = np.sort(np.maximum(node_end()[usable] - now, 0.0))
            return float(ends[k - 1]) if k <= len(ends) else math.inf
        got = room_soonest(n, set(np.flatnonzero(withheld).tolist()))
        return math.inf if got is None else got[0]

    def room_times(n: int, per_node: np.ndarray) -> np.ndarray:
        """Per node, the end of the running job by which ``n`` GPUs are free there if nothing
        else starts (``per_node`` free now): ``-inf`` where they are free now, ``inf`` where
        they never are."""
        reach = per_node[:, None] + np.cumsum(release_gpus, axis=1) >= n
        at = release_end[np.arange(cluster.n_nodes), reach.argmax(axis=1)]
        return np.where(per_node >= n, -np.inf, np.where(reach.any(axis=1), at, np.inf))

    def room_soonest(n: int, skip: set[int]) -> tuple[float, int] | None:
        """``(seconds, node)``: the node (not in ``skip``) where ``n`` GPUs are expected free
        soonest if nothing else starts, and when (the lowest index on a tie); None if no node
        ever has room."""
        when = room_times(n, np.bincount(cluster.gpu_node[free], minlength=cluster.n_nodes))
        when[list(skip)] = np.inf
        now_ok = np.flatnonzero(when == -np.inf)
        if len(now_ok):
            return 0.0, int(now_ok[0])
        when = when - clock[0]
        node = int(np.argmin(when))
        return None if math.isinf(when[node]) else (float(when[node]), node)

    placer.wait = compact_wait if config.admission == "any" and placer.rule == "fgd" else None
    # whether a job must sit compactly: one node for a job of up to a node, whole nodes for a
    # larger one (compact admission, or the whole-nodes rule under any admission)
    whole_only = config.admission == "compact" or placer.rule == "whole-nodes"

    def tenant_key(j: SimJob) -> str:
        return j.trace.tenant

    def project_key(j: SimJob) -> str:
        return f"{j.trace.tenant}/{j.trace.project}"

    def start(j: SimJob, gpus: np.ndarray, objective: float, now: float) -> None:
        nonlocal seq
        app = placer.app(j.trace)
        _t_iter, share = placer.iteration(app, gpus)
        slowdown = placer.slowdown(app, gpus)
        if j.index in aged_jobs:
            aged_jobs.discard(j.index)
            rt = j.trace.duration
            tally(aged, j.trace.gpus, -1, -rt, -rt * loss_of(j))
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
        if j.trace.name in watch and j.trace.name not in snapshots:
            if placer.rule is not None:  # rules do not price the ring; the picture does
                objective = placer.ring_objective(j.trace, gpus)
            busy = np.flatnonzero(~free)
            snapshots[j.trace.name] = Snapshot(now, np.array(gpus), busy, objective)
        free[gpus] = False
        gpu_end[gpus] = now + j.runtime
        for node in nodes:
            on_node[node][j.index] = now + j.runtime
            release_row(node)
        running.add(j.index)
        bisect.insort(by_end, (now + j.runtime, j.index))
        running_tenants[j.trace.tenant] = running_tenants.get(j.trace.tenant, 0) + 1
        usage.change(tenant_key(j), now, len(gpus))
        usage.change(project_key(j), now, len(gpus))
        j.run_id += 1
        seq += 1
        heapq.heappush(events, (now + j.runtime, seq, j.index, j.run_id))

    def stop(j: SimJob, now: float) -> None:
        assert j.gpus is not None
        free[j.gpus] = True
        gpu_end[j.gpus] = np.inf
        for node, _count in j.node_counts:
            del on_node[node][j.index]
            release_row(node)
        running.discard(j.index)
        at = bisect.bisect_left(by_end, (j.started + j.runtime, j.index))
        assert by_end[at][1] == j.index
        del by_end[at]
        running_tenants[j.trace.tenant] -= 1
        if not running_tenants[j.trace.tenant]:
            del running_tenants[j.trace.tenant]
        usage.change(tenant_key(j), now, -len(j.gpus))
        usage.change(project_key(j), now, -len(j.gpus))

    def halt(j: SimJob, now: float) -> None:
        """Stop a running job keeping its progress (its checkpoint); its completion event is
        now stale."""
        work = j.runtime - j.overhead  # the restart's seconds are no progress
        done_frac = max(now - j.started - j.overhead, 0.0) / work if work > 0 else 1.0
        j.remaining = max(j.remaining * (1.0 - done_frac), 0.0)
        stop(j, now)
        j.run_id += 1
        j.gpus = None

    def preempt(j: SimJob, now: float) -> None:
        halt(j, now)
        j.preemptions += 1
        enqueue(j.index)

    def protected(j: SimJob, now: float) -> bool:
        """Inside its minimum-runtime protection (its restart not counted), or started this
        instant (no job moves or is preempted twice in one pass)."""
        return now - j.started < j.overhead + config.min_runtime or j.started >= now

    def consolidate(now: float) -> None:
        """When the head of the queue does not fit: move running jobs so that it does (the
        configured rule, :mod:`tsched.compare.consolidation`) and start it."""
        from tsched.compare.consolidation import Running, kai_consolidate, tsched_consolidate

        nonlocal seq, wake_at
        if config.consolidate == "kai" and placer.rule == "spread":
            return  # KAI disables consolidation under the spread strategy
        k = queue.head()
        head = state[k]
        need = head.trace.gpus
        if int(free.sum()) < need:
            return  # moving jobs frees no GPU
        held = [Running(r, state[r].gpus, state[r].migrations < config.max_moves
                        and not protected(state[r], now), state[r].trace.submit)
                for r in sorted(running)]  # fmt: skip
        # look again when the next protection ends (as KAI's periodic cycle would), if no
        # event comes sooner
        ends = [state[r.index].started + state[r.index].overhead + config.min_runtime
                for r in held if not r.movable and state[r.index].migrations < config.max_moves]
        soon = min((t for t in ends if t > now), default=math.inf)
        if soon < math.inf and not wake_at > now:
            wake_at = soon
            seq += 1
            heapq.heappush(events, (soon, seq, -1, 0))
        if not any(r.movable for r in held):
            return
        if config.consolidate == "kai":
            plan = kai_consolidate(cluster, free, held, need, config.admission,
                                   config.restart_cost, config.kai_victims)  # fmt: skip
        else:
            worth = need * compact_wait(need, free)  # GPU-seconds the head would wait
            plan = tsched_consolidate(cluster, free, held, need, config.admission,
                                      config.restart_cost, worth)  # fmt: skip
        if plan is None:
            return
        for r in plan.moves:
            halt(state[r], now)
        for r, gpus in plan.moves.items():
            state[r].migrations += 1
            start(state[r], gpus, placer.ring_objective(state[r].trace, gpus), now)
        start(head, plan.target, placer.ring_objective(head.trace, plan.target), now)
        queue.remove(k)

    def enqueue(k: int) -> None:
        j = state[k]
        queue.add(k, j.trace.tenant, project_key(j), j.trace.submit, j.trace.gpus)

    def shares(now: float) -> dict[str, float]:
        """Budget share of each tenant with work (running or queued)."""
        active = set(queue.groups) | set(running_tenants)
        total = sum(budgets.get(t, 1.0) for t in active)
        return {t: budgets.get(t, 1.0) / total for t in active}

    def occupancy(key: str, now: float) -> float:
        """GPUs held by ``key``: the mean of its sliding-window average and what it holds now,
        so a tenant's standing reflects its recent past and reacts to each start."""
        past = usage.window(key, now, config.window) / config.window
        return 0.5 * (past + usage.rate.get(key, 0.0))

    def tenant_ratios(now: float) -> dict[str, float]:
        return {t: occupancy(t, now) / (s * usable) for t, s in shares(now).items()}

    def fair_pass(now: float) -> None:
        """Start jobs one at a time from the tenant (then project) furthest below its share."""
        sh = shares(now)
        tenants = set(queue.groups)
        depth = config.scan_depth
        while tenants and free.any():
            n_free = int(free.sum())
            tenant = min(tenants, key=lambda t: (occupancy(t, now) / sh[t], t))
            projects = queue.groups[tenant]
            placed = False
            for proj in sorted(
                projects, key=lambda p: (occupancy(p, now) / budgets.get(p, 1.0), p)
            ):
                for _submit, k in projects[proj][:depth]:
                    if state[k].trace.gpus <= n_free and try_start(k, now):
                        queue.remove(k)
                        placed = True
                        break
                if placed:
                    break
            if not placed or tenant not in queue.groups:
                tenants.discard(tenant)

    def expected_shapes() -> dict[int, float]:
        from tsched.compare.placement import expected_shapes as shapes_of

        sizes = set(window) | set(aged)
        tally = {g: [window.get(g, [0.0] * 3)[i] + aged.get(g, [0.0] * 3)[i] for i in range(3)]
                 for g in sizes}  # fmt: skip
        shapes = shapes_of({g: g * t[1] for g, t in tally.items()}, {}, {})
        if config.admission != "any":
            return shapes
        # under any admission a fragment is usable, at the slowdown of the job that takes it:
        # each shape's weight is scaled by the share of GPU-time its jobs lose there
        return {g: w * (tally[g][2] / tally[g][1] if tally[g][1] > 0 else 1.0)
                for g, w in shapes.items()}  # fmt: skip

    def loss_of(j: SimJob) -> float:
        """What a job loses on a fragment (fgd under any admission; 1 under compact)."""
        return placer.fragment_loss(j.trace) if config.admission == "any" else 1.0

    def shape_arrival(k: int, now: float) -> None:
        """Feeds an arrival into the shapes ``fgd`` expects. An arrival that leaves the window
        while it still waits keeps counting (as ``aged``) until it starts."""
        if placer.rule != "fgd":
            return
        j = state[k]
        g, rt = j.trace.gpus, j.trace.duration
        loss = rt * loss_of(j)
        recent.append((now, k, g, rt, loss))
        tally(window, g, 1, rt, loss)
        if len(recent) > config.shape_window:
            _, k0, g0, rt0, l0 = recent.popleft()
            tally(window, g0, -1, -rt0, -l0)
            if state[k0].first_start < 0:  # still waiting for its first start
                aged_jobs.add(k0)
                tally(aged, g0, 1, rt0, l0)

    def try_start(k: int, now: float, mask: np.ndarray | None = None) -> bool:
        j = state[k]
        placed = placer.place(j.trace, free if mask is None else mask, waiter=k)
        if placed is None:
            return False
        start(j, placed[0], placed[1], now)
        return True

    def schedule(now: float) -> None:
        if not len(queue):
            return
        if placer.rule == "fgd":  # the shapes fgd expects, once a pass
            placer.set_shapes(expected_shapes())
        q = config.queue
        if q != "fair":
            while len(queue) and try_start(queue.head(), now):
                queue.remove(queue.head())
            if config.consolidate != "none" and len(queue):
                consolidate(now)
                while len(queue) and try_start(queue.head(), now):
                    queue.remove(queue.head())
            if q == "backfill" and len(queue):
                backfill(now)
            return
        fair_pass(now)
        if config.consolidate != "none" and len(queue):
            consolidate(now)
            fair_pass(now)
        if config.preemption and len(queue):
            preempt_pass(now)

    def locality_locks(now: float) -> dict[int, tuple[int, float]]:
        """Nodes kept for the jobs fgd holds back for locality (``any`` admission): in queue
        order, each held job of up to a node keeps the node where room for it is expected
        soonest (a node no earlier held job keeps), until that time. ``backfill`` starts no
        other job there that would still run then, so the wait the job was held on is not
        taken from it by jobs behind it. Returns ``{node: (job index, until)}``."""
        locks: dict[int, tuple[int, float]] = {}
        if placer.wait is None or not placer.deferred:
            return locks
        held = sorted(queue.keys[k] for k in placer.deferred if k in queue.keys)
        for key in held:
            k = int(key[-1])
            if bisect.bisect_left(queue.items, key) > config.scan_depth:
                break
            if state[k].trace.gpus <= gmax:
                got = room_soonest(state[k].trace.gpus, set(locks))
                if got is not None and got[0] > 0:
                    locks[got[1]] = (k, now + got[0])
        return locks

    deadlines: dict[int, float] = {}
    wake_at = -math.inf  # a pending consolidation wake-up (an event of job −1)

    def relaxed(head: SimJob, shadow: float) -> float:
        """The time by which backfilled jobs must end to keep off the head's reservation: its
        shadow time, or with ``slack`` the first shadow time it had as head plus ``slack`` ×
        its run time (relaxed backfilling: the head's start slips by at most that)."""
        if config.slack <= 0 or shadow == math.inf:
            return shadow
        k = head.index
        if k not in deadlines:
            deadlines[k] = shadow + config.slack * head.trace.duration
        return max(shadow, deadlines[k])

    def backfill(now: float) -> None:
        """EASY: later jobs start now if they end before the head's reservation or leave it
        enough GPUs."""
        head = state[queue.head()]
        n_free = int(free.sum())
        if config.reserves == "topology":
            backfill_topology(now, head, n_free)
            return
        avail, shadow = n_free, math.inf
        for end, ending in itertools.groupby(by_end, key=operator.itemgetter(0)):
            for g in sorted(len(state[r].gpus) for _end, r in ending):  # smallest first
                avail += g
                if avail >= head.trace.gpus:
                    shadow = end
                    break
            if shadow < math.inf:
                break
        extra = [avail - head.trace.gpus]
        locks = locality_locks(now)
        shadow = relaxed(head, shadow)

        def admit(k: int, need: int, est: float) -> np.ndarray | None:
            ok = free if now + est <= shadow or need <= extra[0] else None
            if ok is None or not locks:
                return ok
            kept = [node for node, (owner, until) in locks.items()
                    if owner != k and now + est > until]  # fmt: skip
            return ok & ~np.isin(cluster.gpu_node, kept) if kept else ok

        def started(k: int, need: int, est: float) -> None:
            if now + est > shadow:
                extra[0] -= need

        backfill_pass(now, n_free, admit, started)

    def backfill_pass(
        now: float,
        n_free: int,
        admit: Callable[[int, int, float], np.ndarray | None],
        started: Callable[[int, int, float], None] | None = None,
        fallback: Callable[[int, int, float], np.ndarray | None] | None = None,
    ) -> None:
        """Tries the waiting jobs behind the head in order: ``admit(job, gpus, estimated run
        time)`` gives the free GPUs a job may take (``None``: it may not start now), and
        ``fallback`` (same arguments), when the job does not start there, other GPUs it may
        take. ``started`` hears of each job started."""
        from tsched.compare.placement import compact_limits

        # where the placer refuses every job no compact placement is free for, the largest
        # jobs the free GPUs hold compactly, until the next start (a deep queue tries many)
        screens = placer.screens
        limits: tuple[int, int] | None = None
        for k in [item[-1] for item in queue.items[1 : 1 + config.scan_depth]]:
            if n_free == 0:
                break
            j = state[k]
            need = j.trace.gpus
            if need > n_free:
                continue
            est = j.remaining * j.trace.duration
            ok = False
            for choose in (admit, fallback):
                mask = choose(k, need, est) if choose is not None else None
                if mask is None:
                    continue
                if screens:  # every mask is part of ``free``: no room there, none in it
                    if limits is None:
                        per_node = np.bincount(cluster.gpu_node[free], minlength=cluster.n_nodes)
                        limits = compact_limits(per_node, node_gpus)
                    if limits[0 if need <= gmax else 1] < need:
                        continue  # the placer would refuse it
                if need <= int(mask.sum()) and try_start(k, now, mask):
                    ok = True
                    break
            if ok:
                limits = None
                queue.remove(k)
                n_free -= need
                if started:
                    started(k, need, est)

    def earliest_fit(need: int, n_free: int, per_node: np.ndarray, one_node: bool,
                     whole_nodes: bool) -> float:  # fmt: skip
        """The earliest end of a running job by which, if nothing else starts, ``need`` GPUs are
        free (``per_node`` free now), on one node if ``one_node``, and on whole nodes but one if
        ``whole_nodes``: a lower bound on when a job of ``need`` GPUs can start there (``-inf``:
        now; ``inf``: never)."""
        t = -math.inf
        if n_free < need:  # by count: the (need − n_free)-th GPU to come free
            ends = gpu_end[gpu_end < math.inf]
            k = need - n_free - 1
            t = float(np.partition(ends, k)[k]) if k < len(ends) else math.inf
        if one_node:
            t = max(t, float(room_times(need, per_node).min()))
        if whole_nodes:
            final = per_node + release_gpus.sum(axis=1)
            whole_at = np.where(per_node == node_gpus, -np.inf,
                                np.where(final == node_gpus, node_end(), np.inf))  # fmt: skip
            order = np.argsort(whole_at, kind="stable")
            reach = np.flatnonzero(np.cumsum(node_gpus[order]) + gmax - 1 >= need)
            t = max(t, float(whole_at[order[reach[0]]]) if len(reach) else math.inf)
        return t

    def backfill_topology(now: float, head: SimJob, n_free: int) -> None:
        """EASY with a reservation that names GPUs: the head job gets the GPUs its rule would
        give it at the earliest time it can start (the shadow time); a later job starts now if
        it ends before then, or on GPUs outside that reservation, or where its rule puts it if
        the head still has a placement at the shadow time without those GPUs (that placement
        becomes the reservation)."""
        free_now = np.bincount(cluster.gpu_node[free], minlength=cluster.n_nodes)
        size = node_sizes
        need = head.trace.gpus
        from tsched.compare.placement import is_compact, node_count

        # fgd's compact under ``any`` is the fewest nodes, whole or not
        waits_compact = config.admission == "any" and head.index in placer.deferred
        fewest = node_count(cluster, need) if waits_compact and need > gmax else 0
        # the running jobs that end before the first time the head could fit free nothing the
        # head can use: skip them at once (a deep queue on thousands of GPUs has many)
        skip = 0
        if sim_state.SHORTCUTS:
            first = earliest_fit(need, n_free, free_now,
                                 need <= gmax and (whole_only or waits_compact),
                                 need > gmax and whole_only)  # fmt: skip
            if first > -math.inf:
                skip = bisect.bisect_left(by_end, (first, -1))
        released: list[np.ndarray] = []
        if skip:  # the GPUs of the jobs that end before ``first``
            released.append(np.flatnonzero(gpu_end < first))
            free_now = free_now + np.bincount(cluster.gpu_node[released[0]],
                                              minlength=cluster.n_nodes)  # fmt: skip
        per_node = free_now.tolist()
        most = int(free_now.max())  # the most free GPUs on one node
        whole_gpus = int(node_gpus[free_now == node_gpus].sum())
        avail = n_free + sum(len(g) for g in released)
        shadow, reserved = math.inf, None
        for end, r in itertools.islice(by_end, skip, None):
            g = state[r].gpus
            assert g is not None
            released.append(g)
            for node, k in state[r].node_counts:
                per_node[node] += k
                most = max(most, per_node[node])
                if per_node[node] == size[node]:
                    whole_gpus += size[node]
            avail += len(g)
            if avail < need:
                continue
            # a cheap necessary condition of a compact placement before asking the rule
            if need <= gmax and (whole_only or waits_compact) and most < need:
                continue
            if need > gmax and whole_only and whole_gpus + gmax - 1 < need:
                continue
            if need > gmax and waits_compact and sum(heapq.nlargest(fewest, per_node)) < need:
                continue  # its fewest nodes cannot hold it yet
            future = free.copy()
            future[np.concatenate(released)] = True
            got = placer.place(head.trace, future)
            if got is not None and waits_compact and not is_compact(cluster, got[0]):
                continue  # the head waits for locality: it reserves a compact placement
            if got is not None:
                shadow, reserved = end, got[0]
                break
        # the GPUs the head may start on at the shadow time, less those of the jobs started
        # meanwhile that will still run then
        shadow = relaxed(head, shadow)
        at_shadow = None
        if reserved is not None:  # every job that ends by the shadow time frees its GPUs
            at_shadow = free.copy()
            for _end, r in by_end[: bisect.bisect_right(by_end, (shadow, math.inf))]:
                at_shadow[state[r].gpus] = True
        plan: dict[str, Any] = {"reserved": reserved, "next": None, "failed": math.inf}

        def admit(k: int, need: int, est: float) -> np.ndarray:
            # a job still running at the shadow time keeps off the reserved GPUs
            if now + est <= shadow or plan["reserved"] is None:
                return free
            outside = free.copy()
            outside[plan["reserved"]] = False
            return outside

        def fallback(k: int, need: int, est: float) -> np.ndarray | None:
            """The reservation names the GPUs the head's rule picks, but any placement the head
            would take at the shadow time serves it as well: a job that does not fit outside
            the reservation may start where the rule puts it if the head still has a placement
            at the shadow time without those GPUs (which then becomes its reservation)."""
            plan["next"] = None
            if at_shadow is None or now + est <= shadow or need >= plan["failed"]:
                return None
            got = placer.place(state[k].trace, free)
            left = at_shadow.copy()
            if got is not None:
                left[got[0]] = False
            moved = None if got is None else placer.place(head.trace, left)
            if moved is None or (waits_compact and not is_compact(cluster, moved[0])):
                plan["failed"] = need  # a job as large fails alike until the plan changes
                return None
            plan["next"] = (k, moved[0])
            only = np.zeros_like(free)
            only[got[0]] = True
            return only

        def started(k: int, need: int, est: float) -> None:
            if at_shadow is None or now + est <= shadow:
                return
            gpus = state[k].gpus
            assert gpus is not None
            at_shadow[gpus] = False
            if plan["next"] is not None and plan["next"][0] == k:
                plan["reserved"] = plan["next"][1]
            plan["next"], plan["failed"] = None, math.inf

        backfill_pass(now, n_free, admit, started, fallback)

    def preempt_pass(now: float) -> None:
        """Fair share's preemption: while a tenant below its share has a waiting job that
        preempting jobs of tenants above theirs would start, start it (the furthest below its
        share first; its jobs in arrival order, one of each size, as the same size frees the
        same room). The rounds are bounded by the jobs there are."""
        for _round in range(len(queue) + len(running)):
            ratio = tenant_ratios(now)
            needy = sorted((t for t in queue.groups if ratio.get(t, 0.0) < 1.0),
                           key=lambda t: (ratio[t], t))  # fmt: skip
            victims = sorted(
                (
                    r
                    for r in running
                    if ratio.get(state[r].trace.tenant, 0.0) > 1.0
                    # protected until it has computed min_runtime, its restart not counted;
                    # never the instant it started (no two jobs swapping within one pass)
                    and now - state[r].started >= state[r].overhead + config.min_runtime
                    and state[r].started < now
                ),
                key=lambda r: (-ratio[state[r].trace.tenant], -state[r].started, r),
            )
            if not needy or not victims:
                return
            room = int(free.sum()) + sum(len(state[r].gpus) for r in victims)
            if not any(_preempt_for_tenant(t, now, victims, room) for t in needy):
                return

    def _preempt_for_tenant(tenant: str, now: float, victims: list[int], room: int) -> bool:
        """Whether a preemption starts one of ``tenant``'s waiting jobs (one of each size, up
        to ``room``: the GPUs free and the victims' together)."""
        waiting = sorted(item for jobs in queue.groups[tenant].values()
                         for item in jobs[: config.scan_depth])  # fmt: skip
        tried: set[int] = set()
        for _submit, k in waiting[: config.scan_depth]:
            size = state[k].trace.gpus
            if size <= room and size not in tried:
                if _preempt_for(k, now, victims):
                    return True
                tried.add(size)
        return False

    def _preempt_for(k: int, now: float, victims: list[int]) -> bool:
        """Preempt some of ``victims`` (running jobs of tenants above their share, past their
        protected time, in fairness order: furthest above share, then the latest started) for
        job ``k``, only where the GPUs they free give ``k`` a placement its policy and
        admission regime take. The fairness order's prefix that frees enough GPUs comes
        first; where that leaves no such placement (under compact admission: freed GPUs on
        other nodes than the job needs), the fewest victims' GPUs that clear room on one
        node, or whole nodes, instead. Where none does, nobody is preempted. ``k`` starts on
        the freed room and the jobs behind it may take what is left in the same pass.
        Returns whether ``k`` started (``victims`` and the free GPUs hold its GPUs by
        count)."""
        j = state[k]
        for chosen in _victim_sets(victims, j.trace.gpus):
            mask = free.copy()
            for r in chosen:
                mask[state[r].gpus] = True
            placed = placer.place(j.trace, mask)
            if placed is not None:
                break
        else:
            return False
        for r in chosen:
            preempt(state[r], now)
        start(j, placed[0], placed[1], now)
        queue.remove(k)
        fair_pass(now)
        return True

    def _victim_sets(victims: list[int], need: int) -> Iterator[list[int]]:
        """Sets of victims to try for a job of ``need`` GPUs, in order: the fairness order's
        prefix that frees ``need`` GPUs; then, where a job must sit compactly, the cheapest
        (fewest GPUs preempted) set that leaves one node with ``need`` free GPUs, or that
        clears whole nodes (together with those already whole) of ``need`` GPUs."""
        freed, prefix = int(free.sum()), []
        for r in victims:
            if freed >= need:
                break
            prefix.append(r)
            freed += len(state[r].gpus)
        yield prefix
        if not whole_only:
            return
        per_node = np.bincount(cluster.gpu_node[free], minlength=cluster.n_nodes)
        order = {r: i for i, r in enumerate(victims)}
        cost = {r: len(state[r].gpus) for r in victims}
        on = defaultdict(list)  # per node its victims, in fairness order, and their GPUs there
        for r in victims:
            for node, count in state[r].node_counts:
                on[node].append((r, count))
        options = []
        if need <= gmax:  # one node: victims there in fairness order until it has room
            for node, here in on.items():
                if node_sizes[node] < need or per_node[node] >= need:
                    continue
                room, picked = int(per_node[node]), []
                for r, count in here:
                    picked.append(r)
                    room += count
                    if room >= need:
                        options.append((sum(cost[v] for v in picked), node, picked))
                        break
        else:  # whole nodes: clear the nodes whose every job is a victim, cheapest first
            got = int(node_gpus[per_node == node_gpus].sum())  # the whole free nodes
            clearable = [(sum(cost[r] for r in on_node[node]), node, list(on_node[node]))
                         for node in on if all(r in order for r in on_node[node])]  # fmt: skip
            cleared: set[int] = set()
            for _c, node, jobs_here in sorted(clearable):
                if got >= need:
                    break
                cleared.update(jobs_here)
                got += node_sizes[node]
            if got >= need and cleared:
                options.append((sum(cost[r] for r in cleared), -1,
                                sorted(cleared, key=order.__getitem__)))  # fmt: skip
        for _c, _node, picked in sorted(options, key=lambda o: (o[0], o[1])):
            if picked != prefix:
                yield picked

    def record(now: float) -> None:
        series_t.append(now)
        n_free = int(free.sum())
        series_busy.append(usable - n_free)
        series_q.append(len(queue))
        if n_free:
            per_node = np.bincount(cluster.gpu_node[free], minlength=cluster.n_nodes)
            whole_nodes = per_node == node_gpus
            whole = int(per_node[whole_nodes].sum())
            series_frag.append(1.0 - whole / n_free)
            series_whole.append(int(whole_nodes.sum()))
        else:
            series_frag.append(0.0)
            series_whole.append(0)
        smallest = queue.smallest()
        series_blocked.append(n_free if len(queue) and smallest <= n_free else 0)

    while done < n_jobs:
        t_arr = jobs[order[next_arrival]].submit if next_arrival < n_jobs else math.inf
        t_evt = events[0][0] if events else math.inf
        now = min(t_arr, t_evt)
        clock[0] = now
        if now == math.inf:
            head = state[queue.head()].trace
            raise InputError(
                f"simulation stalled with {len(queue)} job(s) waiting that no placement fits "
                f"(policy {config.policy!r}, {config.admission} admission): job {head.name!r} "
                f"asks for {head.gpus} GPUs and the idle cluster cannot give them that way "
                f"({usable} usable GPUs, {idle_nodes} nodes without busy GPUs)"
            )
        while events and events[0][0] <= now:
            _t, _s, k, run_id = heapq.heappop(events)
            if k < 0:
                continue  # a consolidation wake-up: the pass below looks again
            j = state[k]
            if run_id != j.run_id or j.gpus is None:
                continue
            stop(j, now)
            j.remaining = 0.0
            j.end = now
            j.gpus = None
            done += 1
            if progress:
                progress(done, n_jobs)
        while next_arrival < n_jobs and jobs[order[next_arrival]].submit <= now:
            enqueue(order[next_arrival])
            shape_arrival(order[next_arrival], now)
            next_arrival += 1
        schedule(now)
        record(now)

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
        for j in state
    ]
    end = series_t[-1] if series_t else 0.0
    tenants = {j.trace.tenant for j in state}
    return SimResult(
        config,
        records,
        np.asarray(series_t),
        np.asarray(series_busy),
        np.asarray(series_q),
        np.asarray(series_frag),
        {t: usage.total(t, end) for t in sorted(tenants)},
        time.perf_counter() - t_wall,
        snapshots,
        np.asarray(series_whole),
        np.asarray(series_blocked),
    )
