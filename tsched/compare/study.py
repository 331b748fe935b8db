"""Policy comparisons that hold: load sweeps, replicas, confidence intervals, size buckets, ceiling.

A single replay of an overloaded trace measures chaos, not policy. A study replays each trace at
several offered loads, several replicas per load, through every policy and admission regime, and
compares means with 95 % confidence intervals.

* **Offered load** = offered GPU-seconds (each job's GPUs × its compact run time) over the
  cluster's usable GPUs × the arrival window. A load is reached by scaling the arrival times
  (the cluster stays as it is): :func:`at_load`. The **load in the window**
  (:func:`window_load`) counts only the GPU-seconds demanded before the window closes: where long
  jobs hold much of a trace's work it is well below the offered load, and ``at_load(...,
  basis="window")`` scales the arrivals to it instead.
* **Replicas**, two methods. :func:`jitter_replica` keeps the trace as it is and perturbs it (a
  random 1 % of the jobs left out, every arrival moved by up to ±5 minutes): the intervals then
  measure how sensitive a replay is to chance, and a difference that survives them belongs to the
  policy, on this workload. :func:`replica` resamples the workload itself: a trace spanning
  several days is cut into days, and a replica is ``days`` days drawn with replacement and laid
  end to end (a day-block bootstrap, keeping each day's bursts and tenant mix); a shorter trace is
  resampled job by job. Its intervals also hold the variation between workloads, so they are
  much wider. Replica ``r`` uses seed ``r``; every policy replays the same replicas.
* **Ceiling**: per replica, the replay with every job at its compact run time and GPU-count
  admission. No placement can make a job run faster than compact or start earlier than enough
  GPUs are free, so this is what a perfect placement would give (up to queue-order effects).
* **Intervals**: the mean over replicas of each metric, with a Student-t 95 % interval
  (:func:`ci95`). A difference is claimed only where two intervals do not overlap.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

import numpy as np

from tsched.cluster import Cluster
from tsched.compare.simulator import SimConfig, SimResult, simulate
from tsched.compare.traces import TraceJob
from tsched.errors import InputError
from tsched.stats import ci95

__all__ = [
    "DAY",
    "offered_load",
    "window_load",
    "LOAD_BASES",
    "at_load",
    "replica",
    "jitter_replica",
    "buckets",
    "bucket_of",
    "ci95",
    "work_weighted_wait",
    "RunSummary",
    "summarize_run",
    "Cell",
    "run_cells",
]

DAY = 86400.0


def offered_load(jobs: Sequence[TraceJob], gpus: int, span: float | None = None) -> float:
    """Offered GPU-seconds over ``gpus`` × the arrival window (``span``; by default from the
    first to the last submit time)."""
    if not jobs:
        return 0.0
    work = math.fsum(j.gpus * j.duration for j in jobs)
    if span is None:
        span = max(j.submit for j in jobs) - min(j.submit for j in jobs)
    if span <= 0:
        raise InputError("offered load: the jobs arrive at one instant; no arrival window")
    return work / (gpus * span)


def window_load(jobs: Sequence[TraceJob], gpus: int, span: float | None = None) -> float:
    """GPU-seconds demanded inside the arrival window, over ``gpus`` × the window (``span``;
    by default from the first to the last submit time): each job counts its GPUs × the part of
    its run time before the window closes, as if it started on arrival. Below
    :func:`offered_load` by the work that runs past the window; a trace whose long jobs hold
    much of its work (Philly: jobs of weeks) offers a load in the window well under its offered
    load, and its queue builds later, if at all.

    >>> jobs = [TraceJob("a", 0.0, 2, 100.0, "bert"), TraceJob("b", 50.0, 2, 100.0, "bert")]
    >>> offered_load(jobs, 4, 100.0), window_load(jobs, 4, 100.0)  # b runs 50 s past the end
    (1.0, 0.75)
    """
    if not jobs:
        return 0.0
    submit, g, d = _arrays(jobs)
    if span is None:
        span = float(submit.max() - submit.min())
    if span <= 0:
        raise InputError("window load: the jobs arrive at one instant; no arrival window")
    left = np.clip(submit.min() + span - submit, 0.0, None)
    return float(np.sum(g * np.minimum(d, left)) / (gpus * span))


def _arrays(jobs: Sequence[TraceJob]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return (np.array([j.submit for j in jobs], dtype=float),
            np.array([j.gpus for j in jobs], dtype=float),
            np.array([j.duration for j in jobs], dtype=float))  # fmt: skip


LOAD_BASES = ("offered", "window")


def at_load(
    jobs: Sequence[TraceJob],
    gpus: int,
    load: float,
    span: float | None = None,
    basis: str = "offered",
) -> tuple[list[TraceJob], float]:
    """The jobs with arrival times scaled so the load is ``load``; and the factor. ``basis``:
    ``offered`` (:func:`offered_load`, the default) or ``window`` (:func:`window_load`; the
    arrival window scales with the arrivals, the run times stay, so compressing the arrivals
    raises the load in the window until every job runs past its end: a load at or above that
    limit is refused)."""
    if not load > 0:
        raise InputError(f"load must be > 0, got {load!r}")
    if basis not in LOAD_BASES:
        raise InputError(f"load basis: expected one of {', '.join(LOAD_BASES)}, got {basis!r}")
    t0 = min(j.submit for j in jobs)
    factor = offered_load(jobs, gpus, span) / load
    if basis == "window":
        factor = _window_factor(jobs, gpus, load, span, factor)
    return [replace(j, submit=(j.submit - t0) * factor) for j in jobs], factor


def _window_factor(jobs, gpus, load, span, hi) -> float:
    """The arrival-time factor at which :func:`window_load` is ``load`` (it falls as the
    factor grows; at the offered-load factor it is at most ``load``)."""
    from scipy.optimize import brentq

    submit, g, d = _arrays(jobs)
    rel = submit - submit.min()
    span = float(rel.max()) if span is None else float(span)
    if span <= 0:
        raise InputError("window load: the jobs arrive at one instant; no arrival window")
    left = np.clip(span - rel, 0.0, None)

    def excess(f: float) -> float:  # window load at factor f, minus the target
        return float(np.sum(g * np.minimum(d / f, left)) / (gpus * span)) - load

    limit = float(np.sum(g * left) / (gpus * span))  # every job runs past the window's end
    if load >= limit * (1 - 1e-9):
        raise InputError(
            f"window load {load:g} is out of reach on {gpus:,} GPUs: however the arrivals are "
            f"compressed, the jobs demand at most {limit:.3g} of the window (each job's GPUs "
            "from its arrival to the window's end); choose a lower load or the offered basis"
        )
    if excess(hi) >= 0:
        return hi
    lo = hi
    while excess(lo) < 0:
        lo /= 2
    return float(brentq(excess, lo, hi, xtol=1e-12 * hi, rtol=1e-10))


def jitter_replica(
    jobs: Sequence[TraceJob],
    index: int,
    days: float | None = 7.0,
    jitter: float = 300.0,
    drop: float = 0.01,
) -> tuple[list[TraceJob], float]:
    """Replica ``index`` of the trace as it is: its first ``days`` days (all of it for
    ``None``), a random ``drop`` share of the jobs left out and every arrival moved by up to
    ``±jitter`` seconds (uniform). The workload stays the trace's; what varies is what a chaotic
    replay is sensitive to, so the intervals say whether a difference survives it.

    >>> jobs = [TraceJob(f"j{k}", k * 600.0, 1, 60.0, "bert") for k in range(300)]
    >>> a, span = jitter_replica(jobs, 3, days=1)
    >>> span, 140 <= len(a) < 144  # 144 jobs in the first day, about 1 % left out
    (86400.0, True)
    >>> orig = {j.name: j.submit for j in jobs}
    >>> max(abs(j.submit - orig[j.name]) for j in a) <= 300
    True
    """
    if not jobs:
        raise InputError("replica: the trace has no jobs")
    rng = np.random.default_rng(index)
    t0 = min(j.submit for j in jobs)
    if days is not None:
        jobs = [j for j in jobs if j.submit - t0 < days * DAY]
    keep = rng.random(len(jobs)) >= drop
    shift = rng.uniform(-jitter, jitter, len(jobs))
    out = [replace(j, submit=max(j.submit - t0 + float(d), 0.0))
           for j, k, d in zip(jobs, keep, shift) if k]  # fmt: skip
    out.sort(key=lambda j: (j.submit, j.name))
    span = (
        days * DAY if days is not None else max(j.submit for j in out) - min(j.submit for j in out)
    )
    return out, span


def replica(
    jobs: Sequence[TraceJob], index: int, days: float = 7.0
) -> tuple[list[TraceJob], float]:
    """Replica ``index`` of a trace and its arrival window in seconds: a day-block bootstrap
    (see the module notes).

    >>> jobs = [TraceJob(f"j{k}", k * 3600.0 * 7, 1, 60.0, "bert") for k in range(12)]
    >>> a, span = replica(jobs, 0, days=2)
    >>> span, len(a) > 0, all(0 <= j.submit < span for j in a)
    (172800.0, True, True)
    >>> replica(jobs, 0, days=2) == (a, span)  # a pure function of (trace, index)
    True
    """
    if not jobs:
        raise InputError("replica: the trace has no jobs")
    rng = np.random.default_rng(index)
    t0 = min(j.submit for j in jobs)
    span = max(j.submit for j in jobs) - t0
    n_days = int(span // DAY) + 1
    if n_days >= 3:  # day-block bootstrap
        by_day: list[list[TraceJob]] = [[] for _ in range(n_days)]
        for j in jobs:
            by_day[int((j.submit - t0) // DAY)].append(j)
        want = max(int(round(days)), 1)
        out: list[TraceJob] = []
        for slot, d in enumerate(rng.integers(n_days, size=want)):
            base = t0 + d * DAY
            for j in by_day[d]:
                name = f"{j.name}@{slot}"
                out.append(replace(j, name=name, submit=slot * DAY + (j.submit - base)))
        out.sort(key=lambda j: (j.submit, j.name))
        return out, want * DAY
    picks = np.sort(rng.integers(len(jobs), size=len(jobs)))  # job bootstrap
    out = [replace(jobs[k], name=f"{jobs[k].name}@{i}", submit=jobs[k].submit - t0)
           for i, k in enumerate(picks)]  # fmt: skip
    out.sort(key=lambda j: (j.submit, j.name))
    return out, max(span, 1.0)


def buckets(gpus_per_node: int) -> list[str]:
    """Job-size buckets relative to a node: one GPU, under a node, a node, several nodes."""
    return ["1 GPU", f"2-{gpus_per_node - 1} GPUs", f"{gpus_per_node} GPUs",
            f">{gpus_per_node} GPUs"]  # fmt: skip


def bucket_of(gpus: np.ndarray, gpus_per_node: int) -> np.ndarray:
    """Bucket index (into :func:`buckets`) of each job size."""
    g = np.asarray(gpus)
    return np.select([g == 1, g < gpus_per_node, g == gpus_per_node], [0, 1, 2], 3)


def work_weighted_wait(
    gpus: Sequence[float], durations: Sequence[float], waits: Sequence[float]
) -> float:
    """Mean wait with each job weighted by its work, GPUs × compact run time: Σ g·d·w / Σ g·d.

    A queue order that lets small jobs overtake large ones lowers the job-count mean wait and
    raises this one; on a single server every non-preemptive, work-conserving order gives the
    same value
    (Kleinrock's conservation law), so a policy that lowers both has done more work, not only
    reordered it.

    >>> # one GPU, jobs of 1 h and 3 h arriving together: short first, or long first
    >>> work_weighted_wait([1, 1], [1.0, 3.0], [0.0, 1.0])
    0.75
    >>> work_weighted_wait([1, 1], [3.0, 1.0], [0.0, 3.0])
    0.75
    """
    g = np.asarray(gpus, dtype=np.float64) * np.asarray(durations, dtype=np.float64)
    total = float(g.sum())
    if total <= 0:
        return math.nan
    return float((g * np.asarray(waits, dtype=np.float64)).sum() / total)


@dataclass
class RunSummary:
    """The figures of one replay (seconds and GPU-hours)."""

    trace: str
    admission: str
    load: float
    replica: int
    policy: str
    jobs: int
    jct_mean: float
    jct_p99: float
    jct_geomean: float
    queue_mean: float
    slowdown_geomean: float
    bucket_jct: list[float]
    bucket_queue: list[float]
    bucket_slowdown: list[float]
    bucket_jobs: list[int]
    blocked_gpu_hours: float
    whole_free_nodes: float
    preemptions: int
    utilisation: float
    tenant_share: dict[str, float]
    sim_seconds: float
    jct_quantiles: list[float] = field(repr=False, default_factory=list)  # percentiles 0…100
    # consolidation's figures (absent from older runs.csv files, read back as the defaults)
    large_wait: float = math.nan  # mean wait of jobs of more than 8 GPUs
    work_wait: float = math.nan  # GPU-time-weighted mean wait (:func:`work_weighted_wait`)
    migrations: int = 0
    restart_gpu_hours: float = 0.0  # every restart: preemptions and moves
    move_gpu_hours: float = 0.0  # the restarts of moves alone (GPUs × restart_cost a move)
    delivered_gpu_hours: float = 0.0  # GPU-hours the jobs held, restarts included

    _LISTS = ("bucket_jct", "bucket_queue", "bucket_slowdown", "bucket_jobs")

    def row(self) -> dict[str, Any]:
        """A flat CSV row (:meth:`from_row` reads it back)."""
        out = dict(self.__dict__)
        for key in self._LISTS:
            for b, v in enumerate(out.pop(key)):
                out[f"{key}_{b}"] = v
        out["tenant_share"] = ";".join(f"{t}={s:.6g}" for t, s in self.tenant_share.items())
        out["jct_quantiles"] = ";".join(f"{q:.6g}" for q in self.jct_quantiles)
        return out

    @classmethod
    def from_row(cls, row: dict[str, str]) -> RunSummary:
        """The summary of a :meth:`row` read back from CSV."""
        kw: dict[str, Any] = {}
        for f in fields(cls):
            if f.name not in row and f.name not in cls._LISTS:
                continue  # a field newer than the file: its default
            if f.name in cls._LISTS:
                cast = int if f.name == "bucket_jobs" else float
                kw[f.name] = [cast(row[f"{f.name}_{b}"]) for b in range(4)]
            elif f.name == "tenant_share":
                pairs = [p.rsplit("=", 1) for p in row[f.name].split(";") if p]
                kw[f.name] = {t: float(v) for t, v in pairs}
            elif f.name == "jct_quantiles":
                kw[f.name] = [float(v) for v in row[f.name].split(";") if v]
            elif f.type in ("int", int):
                kw[f.name] = int(row[f.name])
            elif f.type in ("float", float):
                kw[f.name] = float(row[f.name])
            else:
                kw[f.name] = row[f.name]
        return cls(**kw)


def summarize_run(
    result: SimResult, *, trace: str, load: float, replica_index: int, gpus: int,
    gpus_per_node: int, label: str | None = None,
) -> RunSummary:  # fmt: skip
    """Per-run figures, by job-size bucket."""
    recs = result.records
    jct = np.array([r.jct for r in recs])
    queue = np.array([r.queue_delay for r in recs])
    size = np.array([r.gpus for r in recs])
    ideal = np.array([max(r.ideal, 1e-9) for r in recs])
    slow = np.maximum(jct, 1e-9) / ideal
    b = bucket_of(size, gpus_per_node)
    nan = float("nan")

    def per(v: np.ndarray, geo: bool = False) -> list[float]:
        out = []
        for k in range(4):
            m = b == k
            if not m.any():
                out.append(nan)
            elif geo:
                out.append(float(np.exp(np.log(v[m]).mean())))
            else:
                out.append(float(v[m].mean()))
        return out

    t = result.times
    span = float(t[-1] - t[0]) if len(t) > 1 else 0.0
    busy = float(np.sum(result.busy_gpus[:-1] * np.diff(t))) if len(t) > 1 else 0.0
    used = sum(result.usage_by_tenant.values()) or 1.0
    return RunSummary(
        trace=trace,
        admission=result.config.admission,
        load=load,
        replica=replica_index,
        policy=label or result.config.label,
        jobs=len(recs),
        jct_mean=float(jct.mean()),
        jct_p99=float(np.percentile(jct, 99)),
        jct_geomean=float(np.exp(np.log(np.maximum(jct, 1e-9)).mean())),
        queue_mean=float(queue.mean()),
        slowdown_geomean=float(np.exp(np.log(slow).mean())),
        bucket_jct=per(jct),
        bucket_queue=per(queue),
        bucket_slowdown=per(slow, geo=True),
        bucket_jobs=[int((b == k).sum()) for k in range(4)],
        blocked_gpu_hours=result.blocked_gpu_hours,
        whole_free_nodes=result.mean_whole_free_nodes,
        preemptions=int(sum(r.preemptions for r in recs)),
        utilisation=busy / (gpus * span) if span > 0 else 0.0,
        tenant_share={k: v / used for k, v in result.usage_by_tenant.items()},
        sim_seconds=result.wall_time,
        jct_quantiles=np.percentile(jct, np.arange(101)).tolist(),
        large_wait=float(queue[size > 8].mean()) if (size > 8).any() else nan,
        work_wait=work_weighted_wait(size, ideal, queue),
        migrations=int(sum(r.migrations for r in recs)),
        restart_gpu_hours=float(sum(r.restart_gpu_s for r in recs)) / 3600,
        move_gpu_hours=float(sum(r.migrations * r.gpus for r in recs))
        * result.config.restart_cost / 3600,
        delivered_gpu_hours=busy / 3600,
    )


@dataclass(frozen=True)
class Cell:
    """One replay of a study: a trace replica at a load under one config."""

    trace: str
    load: float
    replica: int
    config: SimConfig
    label: str


@functools.cache
def _load_cluster(path: str) -> Cluster:
    from tsched.presets import load_cluster

    return load_cluster(path)


def _run_cell(jobs: Sequence[TraceJob], cluster: Cluster | str, cell: Cell) -> RunSummary:
    c = _load_cluster(cluster) if isinstance(cluster, str) else cluster
    result = simulate(jobs, c, cell.config)
    return summarize_run(result, trace=cell.trace, load=cell.load, replica_index=cell.replica,
                         gpus=int((~c.busy_mask).sum()),
                         gpus_per_node=int(c.gpus_per_node.max()), label=cell.label)  # fmt: skip


def run_cells(
    cells: Sequence[Cell],
    jobs_of: Callable[[Cell], list[TraceJob]],
    cluster_of: Callable[[Cell], Cluster | str],
    *,
    workers: int = 1,
    use_ray: bool = False,
    progress: Callable[[RunSummary], None] | None = None,
) -> list[RunSummary]:
    """Run every cell: serially, in a process pool of ``workers``, or as Ray tasks; the results
    come back in cell order and do not depend on how they were run. ``cluster_of`` gives a
    cluster or the path of a cluster file (loaded once per process; pools need the path)."""

    def args(cell: Cell) -> tuple[Any, ...]:
        return (jobs_of(cell), cluster_of(cell), cell)

    out: list[RunSummary | None] = [None] * len(cells)
    if use_ray:
        import ray

        if not ray.is_initialized():
            ray.init(logging_level="ERROR", log_to_driver=False, include_dashboard=False)
        remote = ray.remote(num_cpus=1)(_run_cell)
        futures = [remote.remote(*args(c)) for c in cells]
        index = {f: k for k, f in enumerate(futures)}
        pending = list(futures)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            out[index[ready[0]]] = res = ray.get(ready[0])
            if progress:
                progress(res)
    elif workers > 1:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor, as_completed

        with ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn")) as pool:
            fut = {pool.submit(_run_cell, *args(c)): k for k, c in enumerate(cells)}
            for f in as_completed(fut):
                out[fut[f]] = res = f.result()
                if progress:
                    progress(res)
    else:
        for k, c in enumerate(cells):
            out[k] = res = _run_cell(*args(c))
            if progress:
                progress(res)
    return [r for r in out if r is not None]
