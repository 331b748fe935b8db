"""Live mode: a matched trace replayed through the Ray executor, with wall-clock JCTs.

Each trace job becomes a real Ray job: its plan is solved by the policy on the model of the live
cluster, its workers are reserved on the planned nodes and GPUs and run for the job's duration
(scaled by ``time_scale``) stretched by the job time model for the GPUs they got — the same
rule the simulator applies. Jobs run one at a time in arrival order (FIFO). The records have the
simulator's schema with ``source="executed"``, so simulated and executed runs share one report.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from tsched.cluster import Cluster
from tsched.compare.jobmodel import AppModel, CollectiveModel
from tsched.compare.records import JobRecord
from tsched.compare.sim_state import Placer
from tsched.compare.simulator import SimConfig, SimResult, default_apps
from tsched.compare.traces import TraceJob
from tsched.errors import ExecutorError, InputError

__all__ = ["ReplayJob", "replay", "replay_trace", "result_from_records"]


def result_from_records(
    records: Sequence[JobRecord], config: SimConfig, wall_time: float = 0.0
) -> SimResult:
    """A :class:`SimResult` (time series of busy GPUs and waiting jobs) rebuilt from records."""
    events: list[tuple[float, int, int]] = []  # (time, d_busy, d_queued)
    for r in records:
        events += [(r.submit, 0, 1), (r.start, r.gpus, -1), (r.end, -r.gpus, 0)]
    events.sort(key=lambda e: (e[0], -e[2]))
    times, busy, queued = [], [], []
    b = q = 0
    for t, db, dq in events:
        b += db
        q += dq
        if times and times[-1] == t:
            busy[-1], queued[-1] = b, q
        else:
            times.append(t)
            busy.append(b)
            queued.append(q)
    usage: dict[str, float] = {}
    for r in records:
        usage[r.tenant or "default"] = usage.get(r.tenant or "default", 0.0) + r.gpus * (
            r.end - r.start
        )
    return SimResult(
        config,
        list(records),
        np.asarray(times),
        np.asarray(busy),
        np.asarray(queued),
        np.zeros(len(times)),
        usage,
        wall_time,
    )


def replay_trace(
    jobs: Sequence[TraceJob],
    cluster: Cluster,
    configs: Sequence[SimConfig],
    *,
    time_scale: float = 1.0,
    collective: CollectiveModel | None = None,
    apps: Mapping[str, AppModel] | None = None,
    address: str | None = None,
    reservation_timeout: float = 60.0,
) -> list[SimResult]:
    """Run ``jobs`` on the live Ray cluster (modelled by ``cluster``) under each policy.

    ``time_scale`` shrinks the trace: submit times and durations are multiplied by it (0.001
    turns an hour into 3.6 s). Fragmentation-aware policies and queue policies other than
    ``fifo`` exist only in simulation.
    """

    from tsched.discovery.ray import connect
    from tsched.workload import Workload

    if not time_scale > 0:
        raise InputError(f"--time-scale must be > 0, got {time_scale!r}")
    for cfg in configs:
        if cfg.fragmentation_aware or cfg.queue != "fifo":
            raise InputError(
                f"live mode runs plain policies with the fifo queue; got {cfg.label!r} "
                f"with queue {cfg.queue!r}"
            )
    if collective is None or apps is None:
        coll0, apps0 = default_apps()
        collective = collective or coll0
        apps = apps if apps is not None else apps0
    from tsched.compare.placement import RULES
    from tsched.solvers.registry import solvers

    simulated_only = set(RULES) - set(solvers()) - {"first-fit"}
    rules = [c.policy for c in configs if c.policy in simulated_only]
    if rules:
        raise InputError(
            f"--live replays solver policies (greedy, auto, pack …); {', '.join(rules)} "
            "are cluster rules, compared in simulation only"
        )
    connect(address, error=ExecutorError)
    by_name = {j.name: j for j in jobs}
    out = []
    for cfg in configs:
        placer = Placer(cluster, cfg, collective, apps)
        replay_jobs = []
        for j in jobs:
            app = placer.app(j)
            n = j.gpus
            ring = [(i, (i + 1) % n, 2.0 * (n - 1) / n * app.gradient_gb) for i in range(n)]
            work = Workload.from_edges(j.name, n, ring if n > 1 else [])
            replay_jobs.append(ReplayJob(j.name, j.submit * time_scale, work))

        def seconds_of(job: Any, gpus: np.ndarray, placer: Placer = placer) -> float:
            trace = by_name[job.name]
            app = placer.app(trace)
            ratio = placer.iteration(app, gpus)[0] / placer.packed_iteration(app, len(gpus))
            return trace.duration * time_scale * ratio

        start = time.perf_counter()
        records = replay(
            replay_jobs,
            ["pack" if cfg.policy == "first-fit" else cfg.policy],
            cluster,
            seed=cfg.seed,
            reservation_timeout=reservation_timeout,
            seconds_of=seconds_of,
        )
        records = [
            replace(
                r,
                tenant=by_name[r.job].tenant,
                app=by_name[r.job].app,
                ideal=by_name[r.job].duration * time_scale,
            )
            for r in records
        ]
        out.append(result_from_records(records, cfg, time.perf_counter() - start))
    return out


@dataclass(frozen=True)
class ReplayJob:
    """A small job of a matched sequence: when it arrives, its traffic, and how long it runs.

    The job's workers sleep ``compute_s + iterations × objective`` seconds, the plan's
    communication time stretched by ``iterations``: on simulated GPUs the run exercises the
    reservation and timing path for real, while the placement effect comes from the model.
    """

    name: str
    submit: float
    workload: Any  # tsched.Workload
    compute_s: float = 0.5
    iterations: float = 1.0


def replay(
    jobs: list[ReplayJob],
    policies: list[str],
    cluster: Any,
    *,
    reservation_timeout: float = 60.0,
    seed: int = 0,
    seconds_of: Callable[[ReplayJob, np.ndarray], float] | None = None,
) -> list[Any]:
    """Run the same job sequence through Ray under each placement policy (a solver method:
    ``auto``, ``pack``, ``random`` …), one job at a time in arrival order (FIFO), and return
    :class:`~tsched.compare.records.JobRecord` rows with ``source="executed"``.

    ``cluster`` is the model of the Ray cluster (its node names are the ``tsched.io/node``
    labels). Times are measured from the start of each policy's replay. ``seconds_of(job,
    gpus)`` (global GPU indices of the plan), when given, sets how long the job's workers run
    instead of ``compute_s + iterations × objective``.
    """
    import sys

    from tsched.backends.ray import run
    from tsched.problem import PlacementProblem
    from tsched.solvers.registry import solve

    records = []
    order = sorted(jobs, key=lambda j: (j.submit, j.name))
    for policy in policies:
        t0 = time.monotonic()
        for job in order:
            now = time.monotonic() - t0
            if now < job.submit:
                time.sleep(job.submit - now)
            problem = PlacementProblem.build(cluster, job.workload)
            result = solve(problem, method=policy, seed=seed)
            if result.assignment is None:
                raise ExecutorError(f"policy {policy!r} found no placement for job {job.name!r}")
            plan = result.plan()
            if seconds_of is not None:
                gpus = np.asarray(problem.locations)[np.asarray(result.assignment)]
                seconds = float(seconds_of(job, gpus))
            else:
                seconds = job.compute_s + job.iterations * float(result.objective or 0.0)
            start = time.monotonic() - t0
            run(
                plan,
                command=[sys.executable, "-c", f"import time; time.sleep({seconds!r})"],
                reservation_timeout=reservation_timeout,
            )
            end = time.monotonic() - t0
            records.append(
                JobRecord.of(
                    policy,
                    job.name,
                    job.submit,
                    max(start, job.submit),
                    end,
                    len(plan.assignment),
                    source="executed",
                    nodes=len({e.node for e in plan.assignment}),
                    objective=float(result.objective or 0.0),
                )
            )
    return records
