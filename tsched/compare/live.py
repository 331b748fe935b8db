"""Live mode: a matched trace replayed through the Ray executor, with wall-clock JCTs.

Each trace job becomes a real Ray job: its plan is solved by the policy on the model of the live
cluster, its workers are reserved on the planned nodes and GPUs and run for the job's duration
(scaled by ``time_scale``) stretched by the job time model for the GPUs they got — the same
rule the simulator applies. Jobs run one at a time in arrival order (FIFO). The records have the
simulator's schema with ``source="executed"``, so simulated and executed runs share one report.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from tsched.cluster import Cluster
from tsched.compare.jobmodel import AppModel, CollectiveModel
from tsched.compare.records import JobRecord
from tsched.compare.simulator import SimConfig, SimResult, _Placer, default_apps
from tsched.compare.traces import TraceJob
from tsched.errors import InputError

__all__ = ["replay_trace", "result_from_records"]


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
    import time

    from tsched.backends.ray import ReplayJob, replay
    from tsched.discovery.ray import connect
    from tsched.errors import ExecutorError
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
    connect(address, error=ExecutorError)
    by_name = {j.name: j for j in jobs}
    out = []
    for cfg in configs:
        placer = _Placer(cluster, cfg, collective, apps)
        replay_jobs = []
        for j in jobs:
            app = placer.app(j)
            n = j.gpus
            ring = [(i, (i + 1) % n, 2.0 * (n - 1) / n * app.gradient_gb) for i in range(n)]
            work = Workload.from_edges(j.name, n, ring if n > 1 else [])
            replay_jobs.append(ReplayJob(j.name, j.submit * time_scale, work))

        def seconds_of(job: Any, gpus: np.ndarray, placer: _Placer = placer) -> float:
            trace = by_name[job.name]
            app = placer.app(trace)
            ratio = placer.iteration(app, gpus)[0] / placer.packed_iteration(app, len(gpus))
            return trace.duration * time_scale * ratio

        start = time.perf_counter()
        records = replay(
            replay_jobs,
            [cfg.policy],
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
