"""What a cluster replay is asked and what it returns: the queue disciplines, :class:`SimConfig`,
:class:`SimResult` and its snapshots, and the default job time model."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from tsched.compare.jobmodel import AppModel, CollectiveModel
from tsched.compare.records import JobRecord
from tsched.compare.traces import TraceJob
from tsched.errors import InputError

__all__ = ["QUEUES", "default_apps", "SimConfig", "Snapshot", "representative_jobs", "SimResult"]


QUEUES = ("fifo", "sjf", "backfill", "fair")


def default_apps() -> tuple[CollectiveModel, dict[str, AppModel]]:
    """The job model shipped with tsched: Pollux's four applications and the collective figures
    fitted on the Pollux testbed (``tsched/data/jobmodel/pollux-testbed.json``)."""
    from importlib import resources

    from tsched.compare.calibrate import load_jobmodel

    path = resources.files("tsched") / "data" / "jobmodel" / "pollux-testbed.json"
    with resources.as_file(path) as p:
        coll, apps = load_jobmodel(p)
    # Classes of the Pollux workloads without measurements take the nearest measured model,
    # with their own gradient size.
    from tsched.compare.calibrate import GRADIENT_GB

    proxies = {"deepspeech2": "bert", "yolov3": "imagenet"}
    for name, base in proxies.items():
        if name not in apps and base in apps:
            b = apps[base]
            apps[name] = replace(b, name=name, gradient_gb=GRADIENT_GB[name])
    return coll, apps


@dataclass(frozen=True)
class SimConfig:
    """Settings of one simulation run.

    Parameters
    ----------
    policy : str
        Placement method: a registered solver name.
    queue : str
        One of :data:`QUEUES`.
    seed : int
        Seed of the solvers and of ``random`` placement.
    time_limit : float
        Seconds each multi-GPU placement may take (solvers that use it).
    fragmentation_aware : bool
        A job smaller than a node goes to the fullest node with room and a larger job to the
        fullest domain with room, keeping whole nodes and domains free for large jobs.
    budgets : mapping
        Fair share budgets: ``{"tenant": w, "tenant/project": w}``; tenants not named get 1.
    window : float
        Sliding window of the fair-share usage, seconds.
    min_runtime : float
        Protected runtime before a job may be preempted (``fair``), seconds; after a restart it
        counts from the end of the restart (``restart_cost``).
    preemption : bool
        Whether ``fair`` may preempt.
    restart_cost : float
        Seconds a preempted job spends before it computes again when it restarts (reloading
        its checkpoint and state); 0 makes a preemption free.
    scan_depth : int
        How many waiting jobs behind the head ``backfill`` tries, and ``fair`` per project, in
        one pass (as Slurm's ``bf_max_job_test``); bounds the cost of a pass on long queues.
    snapshot_jobs : tuple of str
        Jobs (by name) whose first placement is kept, with the GPUs busy at that moment, in
        ``SimResult.snapshots`` (for pictures; see :func:`representative_jobs`).
    admission : str
        ``any`` (a job starts when enough GPUs are free anywhere) or ``compact`` (one node for a
        job that fits one, whole nodes for larger ones; see :mod:`tsched.compare.placement`).
    reservation : str or None
        What ``backfill``'s head job reserves: ``count`` (a number of GPUs, EASY as published)
        or ``topology`` (the GPUs its placement rule would give it at the earliest time it can
        start; later jobs that would still run then must avoid them). ``None``: the policy's
        own (``topology`` for ``fgd`` under ``compact`` admission, ``count`` otherwise; with
        ``topology`` under ``any``, a head job that ``fgd`` holds back for locality reserves a
        compact placement).
    stretch : bool
        Whether a job's run time follows its placement (the job model); ``False`` runs every job
        at its compact run time, the ceiling no placement can beat.
    shape_window : int
        Recent arrivals whose GPU-time (with that of older jobs still waiting) weighs the job
        shapes ``fgd`` expects.
    model_margin : float
        Speed-ups the job model predicts for a scattered placement smaller than this share of
        the run time are not acted on by ``fgd`` (the model's median relative error is 3–14 %
        per application in calibration; ``benchmarks/results/calibration``).
    consolidate : str
        What happens when the job at the head of the queue does not fit (``compact``
        admission): ``none``, ``kai`` (KAI Scheduler's consolidation action) or ``tsched`` (a
        defragmentation plan, taken when it costs less than the head's wait); see
        :mod:`tsched.compare.consolidation`. A moved job keeps its progress and pays
        ``restart_cost``; a job inside its ``min_runtime`` protection never moves.
    max_moves : int
        Times one job may be moved by consolidation at most.
    kai_victims : int
        KAI's ``maxNumberConsolidationPreemptees``: victims one consolidation may take at most.
    slack : float
        Relaxed backfilling (``backfill``): a later job may start if it ends by the head's
        first shadow time plus ``slack`` × the head's run time, so the head's start slips by at
        most that share of its run time (Ward, Mahood and West, JSSPP 2002; Talby and
        Feitelson's slack-based backfilling, IPPS 1999). 0 is EASY as published.
    """

    policy: str = "greedy"
    queue: str = "fifo"
    seed: int = 0
    time_limit: float = 1.0
    fragmentation_aware: bool = False
    budgets: Mapping[str, float] = field(default_factory=dict)
    window: float = 6 * 3600.0
    min_runtime: float = 600.0
    preemption: bool = True
    restart_cost: float = 0.0
    scan_depth: int = 500
    snapshot_jobs: tuple[str, ...] = ()
    admission: str = "any"
    reservation: str | None = None
    stretch: bool = True
    shape_window: int = 256
    model_margin: float = 0.1
    slack: float = 0.0
    consolidate: str = "none"
    max_moves: int = 2
    kai_victims: int = 16

    def __post_init__(self) -> None:
        from tsched.compare.consolidation import CONSOLIDATE

        if self.consolidate not in CONSOLIDATE:
            raise InputError(
                f"consolidate {self.consolidate!r}: expected one of {', '.join(CONSOLIDATE)}"
            )
        if self.max_moves < 0 or self.kai_victims < 1:
            raise InputError("consolidation: max_moves must be >= 0 and kai_victims >= 1")
        from tsched.compare.placement import ADMISSIONS, RULES, canonical

        if self.fragmentation_aware and canonical(self.policy) in RULES:
            raise InputError(
                f"policy {self.policy!r}: fragmentation-aware subsets apply to solvers; the "
                "rule chooses its own domain"
            )
        if self.admission not in ADMISSIONS:
            raise InputError(
                f"admission {self.admission!r}: expected one of {', '.join(ADMISSIONS)}"
            )
        if self.consolidate != "none" and self.admission != "compact":
            raise InputError(
                f"consolidate {self.consolidate!r} needs compact admission: under "
                f"{self.admission!r} admission a job starts wherever enough GPUs are free, so "
                "no move would let it start sooner"
            )
        if self.reservation not in (None, "count", "topology"):
            raise InputError(f"reservation {self.reservation!r}: expected 'count' or 'topology'")
        if not (self.slack >= 0 and math.isfinite(self.slack)):
            raise InputError(f"slack must be a finite share >= 0, got {self.slack}")
        if not 0.0 <= self.model_margin < 1.0:
            raise InputError(f"model_margin must be in [0, 1), got {self.model_margin}")
        if self.shape_window < 1:
            raise InputError(f"shape_window must be >= 1, got {self.shape_window}")
        if self.queue not in QUEUES:
            raise InputError(f"queue policy {self.queue!r}: expected one of {', '.join(QUEUES)}")
        for key, w in self.budgets.items():
            if not w > 0:
                raise InputError(f"budget {key!r}: expected a weight > 0, got {w!r}")
        if self.scan_depth < 1:
            raise InputError(f"scan_depth must be >= 1, got {self.scan_depth}")
        if not self.window > 0 or self.min_runtime < 0:
            raise InputError("fair share: window must be > 0 and min_runtime >= 0")
        if not (self.restart_cost >= 0 and math.isfinite(self.restart_cost)):
            raise InputError(f"restart_cost must be finite seconds >= 0, got {self.restart_cost}")

    @property
    def reserves(self) -> str:
        """The reservation ``backfill`` makes under this config."""
        if self.reservation is not None:
            return self.reservation
        return self._own_reservation

    @property
    def _own_reservation(self) -> str:
        # under count admission a count serves: the head may start on any GPUs, and a job that
        # waits for locality keeps its node through the locality locks (with a topology
        # reservation there Pollux's p99 is no lower: 8.28 ± 0.21 and 8.26 ± 0.18 h at loads
        # 1.2 and 1.4 against 8.23 ± 0.06 and 8.12 ± 0.03; cluster_policies.md, fgd+topo)
        return "topology" if self.policy == "fgd" and self.admission == "compact" else "count"

    @property
    def label(self) -> str:
        from tsched.compare.placement import canonical

        frag = "+frag" if self.fragmentation_aware else ""
        own = self._own_reservation
        resv = ""
        if self.reserves != own:
            resv = "+topo" if self.reserves == "topology" else "+count"
        slack = f"+slack{self.slack:g}" if self.slack > 0 else ""
        moves = "" if self.consolidate == "none" else f"+{self.consolidate}"
        return f"{canonical(self.policy)}{frag}{resv}{slack}{moves}"


@dataclass(frozen=True)
class Snapshot:
    """A job's first placement: when, on which GPUs (worker order), and which other GPUs were
    busy then (global GPU indices)."""

    time: float
    gpus: np.ndarray
    busy: np.ndarray
    objective: float = 0.0


def representative_jobs(jobs: Sequence[TraceJob], count: int = 3) -> tuple[str, ...]:
    """Names of up to ``count`` multi-GPU jobs spread over the sizes of a trace: the largest,
    then the upper quartile and the median of the multi-GPU jobs' GPU counts (the earliest
    submitted job of each size). The same jobs for every policy, so their placements compare."""
    multi = sorted((j for j in jobs if j.gpus > 1), key=lambda j: (j.gpus, j.submit, j.name))
    if not multi:
        return ()
    sizes = np.array([j.gpus for j in multi])
    picks: list[str] = []
    for q in (1.0, 0.75, 0.5, 0.25, 0.0)[: max(count, 0) + 2]:
        size = sizes[min(int(round(q * (len(sizes) - 1))), len(sizes) - 1)]
        first = next(j for j in multi if j.gpus == size)
        if first.name not in picks:
            picks.append(first.name)
        if len(picks) == count:
            break
    return tuple(picks)


@dataclass
class SimResult:
    """Records and time series of one run."""

    config: SimConfig
    records: list[JobRecord]
    times: np.ndarray  # event times, s
    busy_gpus: np.ndarray  # GPUs running jobs after each event
    queued: np.ndarray  # jobs waiting after each event
    fragmentation: np.ndarray  # share of free GPUs not on wholly free nodes
    usage_by_tenant: dict[str, float]  # GPU-seconds
    wall_time: float
    snapshots: dict[str, Snapshot] = field(default_factory=dict)  # config.snapshot_jobs
    whole_free: np.ndarray = field(default_factory=lambda: np.zeros(0))  # wholly free nodes
    blocked: np.ndarray = field(default_factory=lambda: np.zeros(0))  # free GPUs while a
    # waiting job fits them by count: capacity lost to fragmentation (and to queue order)

    def _integral(self, values: np.ndarray) -> float:
        if len(self.times) < 2:
            return 0.0
        return float(np.sum(values[:-1] * np.diff(self.times)))

    @property
    def blocked_gpu_hours(self) -> float:
        """GPU-hours free while some waiting job would have fit them by count."""
        return self._integral(self.blocked) / 3600.0

    @property
    def mean_whole_free_nodes(self) -> float:
        span = self.times[-1] - self.times[0] if len(self.times) > 1 else 0.0
        return self._integral(self.whole_free) / span if span > 0 else 0.0
