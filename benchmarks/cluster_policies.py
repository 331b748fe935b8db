"""Cluster placement policies under a load sweep, with replicas, confidence intervals and buckets.

Two traces, each replayed with ``backfill`` (EASY) through every policy, in both admission
regimes, at several offered loads, several replicas per load (see :mod:`tsched.compare.study`):

* ``philly``: the four-week Philly sample on ``dgx-a100-32node`` (256 GPUs, 2 leaves × 16 DGX
  A100), day-block replicas of ``--days`` days.
* ``pollux-6``: Pollux workload 6 on its testbed (``g4dn-12xlarge-16node``, 16 × 4 T4),
  job-bootstrap replicas.

Written under ``benchmarks/results/``: ``cluster_policies.md`` (tables, goal verdicts, the
command), ``cluster_policies/runs.csv`` (one row per replay) and plots (JCT and p99 against load
with 95 % bands, bucket bars, JCT CDFs). ``--quick`` writes the ``-quick`` variants.

``--trace FILE --cluster FILE`` replaces the two studies with one of the user's own (any trace
format :func:`tsched.compare.traces.load_trace` reads, any cluster/v1 file or preset), measured
with the same replicas, intervals, buckets, ceiling and goal verdicts, and written as
``cluster_policies-NAME.md`` and ``cluster_policies-NAME/`` (``--name``, default the trace's
file stem); ``--loads`` and ``--admission`` choose the points. ``--load-basis window`` makes a
load the GPU-hours demanded inside the arrival window over capacity
(:func:`tsched.compare.study.window_load`) rather than those offered; the report gives both for
every point and warns where the offered load leaves the window far from full.

    python -m benchmarks.cluster_policies [--quick] [--ray] [--workers N]
    python -m benchmarks.cluster_policies --trace T.csv --cluster C.yaml [--loads 0.8,1.0]
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import sys
import time
from collections import defaultdict
from dataclasses import replace
from functools import cache
from pathlib import Path

import numpy as np

import tsched
from benchmarks._common import RESULTS, ROOT, machine, markdown_table, stamp, write_result
from tsched.compare.runner import parse_policies
from tsched.compare.simulator import SimConfig
from tsched.compare.study import (
    Cell,
    RunSummary,
    at_load,
    buckets,
    jitter_replica,
    replica,
    run_cells,
)
from tsched.compare.traces import load_trace
from tsched.stats import ci95, paired_ci95

TRACES = ROOT / "tests" / "data" / "traces"
CLUSTERS = ROOT / "models" / "clusters"
STUDIES = {
    "philly": ("philly_jobs_pollux_2017-10-02_2017-10-30.csv", "dgx-a100-32node.yaml"),
    "pollux-6": ("pollux_workload-6.csv", "g4dn-12xlarge-16node.yaml"),
}
# the studies this run measures: STUDIES, or the user's own (:func:`use_study`); a study in
# WINDOWED replays its first ``--days`` days a replica, the others all of their trace
ACTIVE: dict[str, tuple[str, str]] = dict(STUDIES)
WINDOWED = {"philly"}
LOAD_BASIS = ["offered"]  # what --loads means: the offered load, or the load in the window
COLUMNS: dict[str, str] = {}  # a generic CSV's column mapping (``--columns``)
BASELINES = ["first-fit", "best-fit", "kai-tas", "slurm-tree", "whole-nodes", "spread", "random",
             "greedy"]  # fmt: skip
PACKING = ["first-fit", "best-fit", "kai-tas", "slurm-tree", "whole-nodes"]
# best fit with fgd's topology reservation; fgd with the other reservation than its own
ABLATIONS_OF = {"compact": ["best-fit+topo", "fgd+count"], "any": ["best-fit+topo", "fgd+topo"]}
ABLATIONS = list(dict.fromkeys(a for names in ABLATIONS_OF.values() for a in names))
OURS = "fgd"
CEILING = "ceiling"


@cache
def cluster_file(file: str) -> tsched.Cluster:
    """A cluster under ``models/clusters/`` by file name (or a path, or a preset), loaded once
    a process."""
    path = CLUSTERS / file
    return tsched.load_cluster(path if path.exists() else file)


@cache
def trace_file(trace: str, cluster: str) -> tuple:
    """A trace under ``tests/data/traces/`` by file name, its jobs capped at ``cluster``'s
    usable GPUs."""
    c = cluster_file(cluster)
    return tuple(load_trace(TRACES / trace, mapping=COLUMNS or None,
                            max_gpus=int((~c.busy_mask).sum())))  # fmt: skip


def replica_jobs(trace: str, cluster: str, load: float, rep: int, days: float | None,
                 method: str = "jitter", basis: str = "offered") -> list:  # fmt: skip
    """Replica ``rep`` of ``trace`` (its first ``days`` days; all of it for ``None``) with
    arrivals scaled to ``load`` on ``cluster`` (file names), the offered load or the load in
    the arrival window (``basis``, :func:`tsched.compare.study.at_load`)."""
    return _replica(trace, cluster, load, rep, days, method, basis)[0]


@cache
def _replica(trace, cluster, load, rep, days, method, basis) -> tuple[list, float]:
    """:func:`replica_jobs` and the replica's arrival window after scaling, seconds."""
    c = cluster_file(cluster)
    if method == "jitter":
        jobs, span = jitter_replica(list(trace_file(trace, cluster)), rep, days)
    else:
        jobs, span = replica(list(trace_file(trace, cluster)), rep, days or 7.0)
    scaled, factor = at_load(jobs, int((~c.busy_mask).sum()), load, span, basis)
    return scaled, span * factor


def read_runs(path) -> list[RunSummary]:
    """The replays of a ``runs.csv``."""
    with open(path, newline="") as fh:
        return [RunSummary.from_row(r) for r in csv.DictReader(fh)]


def write_runs(path, rows: list[RunSummary]) -> None:
    """One CSV row per replay (:meth:`RunSummary.row`)."""
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0].row()))
        w.writeheader()
        for r in rows:
            w.writerow(r.row())


def progress_printer(total: int, t0: float, every: int = 25):
    """A ``run_cells`` progress callback: a line on stderr every ``every`` replays."""
    done = [0]

    def progress(_r):
        done[0] += 1
        if done[0] % every == 0 or done[0] == total:
            print(f"  {done[0]}/{total} replays, {time.perf_counter() - t0:.0f} s",
                  file=sys.stderr, flush=True)  # fmt: skip

    return progress


def use_study(name: str, trace: str, cluster: str, windowed: bool,
              columns: dict[str, str] | None = None) -> None:  # fmt: skip
    """Measure the user's own study ``name`` (a trace file, read with the generic ``columns``
    mapping if given, and a cluster file or preset) instead of :data:`STUDIES`; ``windowed``:
    replicas of ``--days`` days, else all of the trace."""
    COLUMNS.clear()
    COLUMNS.update(columns or {})
    ACTIVE.clear()
    ACTIVE[name] = (os.path.abspath(trace), cluster if _is_preset(cluster)
                    else os.path.abspath(cluster))  # fmt: skip
    WINDOWED.clear()
    if windowed:
        WINDOWED.add(name)


def _is_preset(cluster: str) -> bool:
    return not os.path.exists(cluster) and not (CLUSTERS / cluster).exists()


def _cluster(name: str) -> tsched.Cluster:
    return cluster_file(ACTIVE[name][1])


def _trace(name: str) -> tuple:
    return trace_file(*ACTIVE[name])


def _jobs(name: str, load: float, rep: int, days: float, method: str = "jitter") -> list:
    return _replica(*_replica_key(name, load, rep, days, method))[0]


def _replica_key(name, load, rep, days, method) -> tuple:
    if method == "jitter":  # Pollux workload 6: all of it (7.8 h)
        return (*ACTIVE[name], load, rep, days if name in WINDOWED else None, method,
                LOAD_BASIS[0])  # fmt: skip
    return (*ACTIVE[name], load, rep, days, method, LOAD_BASIS[0])


def both_loads(name: str, load: float, reps, days: float, method: str) -> tuple[float, float]:
    """The offered load and the load in the arrival window (means over ``reps``) of the
    replicas this study replays at ``load``."""
    from tsched.compare.study import offered_load, window_load

    gpus = int((~_cluster(name).busy_mask).sum())
    pairs = [(offered_load(jobs, gpus, span), window_load(jobs, gpus, span))
             for jobs, span in (_replica(*_replica_key(name, load, r, days, method))
                                for r in reps)]  # fmt: skip
    return float(np.mean([p[0] for p in pairs])), float(np.mean([p[1] for p in pairs]))


def load_note(rows, loads, days, method) -> str:
    """Markdown: per study and load point, the offered load and the load in the window, and
    where the window never fills (long jobs hold the work), a warning."""
    lines, warn = [], []
    for name in ACTIVE:
        reps = sorted({r.replica for r in rows if r.trace == name})
        pairs = [both_loads(name, x, reps, days, method) for x in loads]
        lines.append(f"| {name} | " + " | ".join(f"{o:.2f} / {w:.2f}" for o, w in pairs) + " |")
        if LOAD_BASIS[0] == "offered" and max(loads) >= 1 and pairs[-1][1] < 0.9:
            warn.append(
                f"`{name}` at offered load {loads[-1]:g} demands only {pairs[-1][1]:.2f} of "
                "the cluster inside its arrival window (its long jobs run on past it), so the "
                "queue that placement acts on barely forms; `--load-basis window` scales the "
                "arrivals to the load in the window instead."
            )
    head = "| study | " + " | ".join(f"{x:g}" for x in loads) + " |"
    return (
        "Load at each point, offered / in the window (the GPU-hours demanded before the arrival "
        "window closes, as if every job started on arrival, over capacity; mean of replicas); "
        f"the sweep's points are the {LOAD_BASIS[0]} load:\n\n{head}\n|---|"
        + "---|" * len(loads)
        + "\n"
        + "\n".join(lines)
        + "\n\n"
        + "".join(f"**Note.** {w}\n\n" for w in warn)
    )


def policies_for(admission):
    """Every baseline, the admission's ablations (:data:`ABLATIONS_OF`) and fgd."""
    return [*BASELINES, *ABLATIONS_OF[admission], OURS]


def cells(loads, replicas, admissions, days):
    out = []
    for name in ACTIVE:
        for adm in admissions:
            base = SimConfig(queue="backfill", admission=adm)
            configs = parse_policies(policies_for(adm), base)
            for load in loads:
                for rep in range(replicas):
                    for cfg in configs:
                        out.append(Cell(name, load, rep, replace(cfg, seed=rep), cfg.label))
                    # the ceiling: compact run times, count admission (placement cannot matter)
                    ceil = SimConfig(queue="backfill", policy="best-fit", stretch=False, seed=rep)
                    out.append(Cell(name, load, rep, ceil, CEILING))
    return out


def p99_floor(name, jobs) -> float:
    """The p99 of each job's compute-only run time, seconds: under the job model a job runs at
    least its compact run time times compute over compact step time (communication only adds),
    so no placement and no queue order gives a p99 JCT below this."""
    from tsched.compare.sim_state import Placer
    from tsched.compare.simulator import default_apps

    coll, apps = default_apps()
    placer = Placer(_cluster(name), SimConfig(), coll, apps)
    share = {}  # (app, GPUs) → compute over compact step time
    for j in jobs:
        if (j.app, j.gpus) not in share:
            app = apps[j.app]
            compute = float(app.compute_seconds(app.local_bsz))
            share[j.app, j.gpus] = min(1.0, compute / placer.packed_iteration(app, j.gpus))
    return float(np.percentile([j.duration * share[j.app, j.gpus] for j in jobs], 99))


def _fmt_ci(m, lo, hi, scale=3600.0):
    return f"{m / scale:.2f} ± {(hi - m) / scale:.2f}"


def mechanism(rows, loads):
    """Per trace and regime, at each load of 0.9 or more: how the policies' blocked GPU-hours
    rank against their mean JCT, their one-GPU bucket and their largest bucket (Spearman across
    the policies, replica means). A negative first figure says that the policies that strand
    the most GPUs have the lowest mean: waiting large jobs let small ones overtake them."""
    from scipy.stats import spearmanr

    by = defaultdict(list)
    for r in rows:
        if r.policy != CEILING:
            by[(r.trace, r.admission, r.load, r.policy)].append(r)
    out = []
    for name, adm, load in sorted({k[:3] for k in by}):
        if load < 0.9:
            continue
        groups = [rs for (n, a, ld, _p), rs in by.items() if (n, a, ld) == (name, adm, load)]

        def means(f, groups=groups):
            return [np.mean([f(r) for r in rs]) for rs in groups]

        blocked = means(lambda r: r.blocked_gpu_hours)
        if len(set(np.round(blocked, 6))) < 3:
            continue  # nothing stranded: placement did not matter here
        figures = (lambda r: r.jct_mean, lambda r: r.bucket_jct[0], lambda r: r.bucket_jct[3])
        ys = [means(f) for f in figures]  # a figure alike for every policy has no rank
        rho = [spearmanr(blocked, y).statistic if np.ptp(y) > 0 else math.nan for y in ys]
        out.append([name, adm, f"{load:g}", *["n/a" if x != x else f"{x:+.2f}" for x in rho]])
    if not out:
        return ""
    return (
        "\n## Why: stranded GPUs against job completion\n\n"
        "Spearman rank correlation across the policies (replica means) between blocked GPU-hours "
        "and: mean JCT, the one-GPU bucket's mean JCT, the largest bucket's mean JCT. A negative "
        "first column with a positive last one is the trade this sweep measures: the policies "
        "that strand the most GPUs make multi-node jobs wait, one-GPU jobs overtake them, and the "
        "job-count mean (95 % or more one-GPU jobs on Philly) falls while the large jobs pay.\n\n"
        + markdown_table(
            ["trace", "admission", "load", "vs mean JCT", "vs 1-GPU JCT", "vs largest bucket JCT"],
            out,
        )  # fmt: skip
        + "\n"
    )


def analyse(rows, loads, floors=None):
    """Tables and goal verdicts per trace and admission regime; ``floors`` maps a trace to the
    mean over replicas of :func:`p99_floor`."""
    by = defaultdict(list)
    for r in rows:
        by[(r.trace, r.admission, r.load, r.policy)].append(r)
    lines = []
    verdicts = []
    admissions = sorted({r.admission for r in rows if r.policy != CEILING})
    for name in ACTIVE:
        gpn = int(_cluster(name).gpus_per_node.max())
        names_b = buckets(gpn)
        for adm in admissions:
            lines.append(f"\n## {name}, `{adm}` admission\n")
            header = ["load", "policy", "mean JCT h (95% CI)", "p99 JCT h", "geo-mean JCT h",
                      "vs ceiling %", *[f"{b} h" for b in names_b], "blocked GPU-h",
                      "whole free nodes", "vs best baseline"]  # fmt: skip
            table = []
            goal_rows = []
            for load in loads:
                ceil = by.get((name, "any", load, CEILING), [])
                cm = ci95([r.jct_mean for r in ceil])[0] if ceil else math.nan
                stats = {}
                for pol in [*BASELINES, *ABLATIONS, OURS]:
                    rs = by.get((name, adm, load, pol))
                    if not rs:
                        continue
                    stats[pol] = {
                        "mean": ci95([r.jct_mean for r in rs]),
                        "p99": ci95([r.jct_p99 for r in rs]),
                        "geo": ci95([r.jct_geomean for r in rs]),
                        "buckets": [ci95([r.bucket_jct[k] for r in rs]) for k in range(4)],
                        "blocked": ci95([r.blocked_gpu_hours for r in rs]),
                        "whole": ci95([r.whole_free_nodes for r in rs]),
                        "n": len(rs),
                        "jobs": int(np.median([r.jobs for r in rs])),
                        "by_replica": {
                            "mean": {r.replica: r.jct_mean for r in rs},
                            "p99": {r.replica: r.jct_p99 for r in rs},
                        },
                    }
                base = [p for p in BASELINES if p in stats]
                if not base:
                    continue
                best = min(base, key=lambda p: stats[p]["mean"][0])
                best_p99 = min(base, key=lambda p: stats[p]["p99"][0])
                for pol, st in stats.items():
                    verdict = ""
                    if pol == OURS or pol in ABLATIONS:
                        verdict = _versus(st, stats[best], best)
                    elif pol == best:
                        verdict = "best baseline (mean)"
                    m = st["mean"]
                    table.append([
                        f"{load:.2f}", pol, _fmt_ci(*m), _fmt_ci(*st["p99"]),
                        _fmt_ci(*st["geo"]),
                        f"{(m[0] / cm - 1) * 100:+.1f}" if cm == cm else "n/a",
                        *[("–" if math.isnan(b[0]) else f"{b[0] / 3600:.2f}")
                          for b in st["buckets"]],
                        f"{st['blocked'][0]:,.0f}", f"{st['whole'][0]:.1f}", verdict,
                    ])  # fmt: skip
                ceil_ci = _fmt_ci(*ci95([r.jct_mean for r in ceil])) if ceil else "n/a"
                table.append([f"{load:.2f}", CEILING, ceil_ci, "", "", "0.0", *[""] * 4, "", "",
                              ""])  # fmt: skip
                if OURS in stats:
                    goal_rows.append((load, stats, best, best_p99, cm))
            lines.append(markdown_table(header, table))
            ref = min(loads, key=lambda ld: abs(ld - 1.0))
            size_rows = []
            for pol in [*BASELINES, *ABLATIONS, OURS]:
                rs = by.get((name, adm, ref, pol))
                if not rs:
                    continue
                cells_b = []
                for k in range(4):
                    j = np.mean([r.bucket_jct[k] for r in rs]) / 3600
                    q = np.mean([r.bucket_queue[k] for r in rs]) / 3600
                    s = np.mean([r.bucket_slowdown[k] for r in rs])
                    cells_b.append("–" if math.isnan(j) else f"{j:.2f} / {q:.2f} / {s:.2f}")
                size_rows.append([pol, *cells_b])
            lines.append(
                f"\nBy job size at load {ref:g}: mean JCT h / mean queueing h / "
                "geo-mean slowdown (JCT over compact run time), mean of replicas.\n"
            )
            lines.append(markdown_table(["policy", *names_b], size_rows))
            verdicts += _goals(name, adm, goal_rows, names_b, floors or {})
    return "\n".join(lines), verdicts


def _versus(st, other, name):
    (m, lo, hi), (bm, blo, bhi) = st["mean"], other["mean"]
    d = (m / bm - 1) * 100
    if hi < blo:
        out = f"{d:+.1f}% vs {name}: lower (CIs apart)"
    elif lo > bhi:
        out = f"{d:+.1f}% vs {name}: higher (CIs apart)"
    else:
        out = f"{d:+.1f}% vs {name}: no difference claimed (CIs overlap)"
    return f"{out}; paired {_paired(st, other, 'mean')}"


def _paired(st, other, figure):
    """The paired interval of ``figure`` (``mean`` or ``p99`` JCT) against the other policy
    on the replicas both replayed, as text."""
    return paired_text(st["by_replica"][figure], other["by_replica"][figure])


def paired_text(ours, theirs) -> str:
    """:func:`tsched.stats.paired_ci95` of two policies' figures by replica, as
    text: the difference as a share of ``theirs``, its interval, and what it says."""
    m, lo, hi, n = paired_ci95(ours, theirs)
    if n < 2:
        return "n/a"
    word = "lower" if hi < 0 else "higher" if lo > 0 else "no difference"
    return f"{m * 100:+.1f}% [{lo * 100:+.1f}, {hi * 100:+.1f}]: {word}"


def _goals(name, adm, goal_rows, names_b, floors):
    out = []
    if name == "pollux-6":
        for load, stats, _best, _, _cm in goal_rows:
            if "spread" not in stats:
                continue
            g = stats[OURS]["geo"][0] / stats["spread"]["geo"][0] - 1
            pack = [p for p in PACKING if p in stats]
            bp = min(pack, key=lambda p: stats[p]["p99"][0])
            p99 = stats[OURS]["p99"][0] / stats[bp]["p99"][0] - 1
            within = stats[OURS]["p99"][0] <= stats[bp]["p99"][2]
            ok = g <= 0.05 and p99 <= 0
            out.append(f"- {name} `{adm}` load {load:.2f}: geo-mean JCT {g * 100:+.1f}% vs spread "
                       f"(goal ≤ +5%), p99 {p99 * 100:+.1f}% vs {bp} (goal ≤ 0%; within its CI: "
                       f"{'yes' if within else 'no'}): **{'met' if ok else 'not met'}**"
                       + ("" if ok or not (g <= 0.05 and within) else
                          " (met within the CI)")
                       + f"; p99 paired vs {bp} "
                       + _paired(stats[OURS], stats[bp], "p99")
                       + ("" if p99 <= 0 else _few_jobs(stats[OURS]["jobs"],
                                                        stats[OURS]["p99"][0]
                                                        - stats[bp]["p99"][0])))  # fmt: skip
        return out
    for load, stats, best, best_p99, cm in goal_rows:
        ours, b = stats[OURS], stats[best]
        no_worse = ours["mean"][0] <= b["mean"][2]
        mean_gain = 1 - ours["mean"][0] / b["mean"][0]
        p99_gain = 1 - ours["p99"][0] / stats[best_p99]["p99"][0]
        apart = ours["mean"][2] < b["mean"][1] and ours["p99"][2] < stats[best_p99]["p99"][1]
        worst = max(
            (ours["buckets"][k][0] / b["buckets"][k][0] - 1, names_b[k])
            for k in range(4)
            if not math.isnan(b["buckets"][k][0]) and not math.isnan(ours["buckets"][k][0])
        )
        line = (f"- {name} `{adm}` load {load:.2f}: mean JCT {-mean_gain * 100:+.1f}% vs "
                f"{best}, p99 {-p99_gain * 100:+.1f}% vs {best_p99} (negative: fgd lower); worst "
                f"bucket {worst[1]} {worst[0] * 100:+.1f}%; mean no worse within CI: "
                f"**{'yes' if no_worse else 'no'}** (paired: mean {_paired(ours, b, 'mean')}, "
                f"p99 {_paired(ours, stats[best_p99], 'p99')})")  # fmt: skip
        if not no_worse or (load >= 0.9 and mean_gain < 0.05):
            line += below_ceiling(ours, b, best, cm, names_b)
        if load >= 0.9:
            win = mean_gain >= 0.05 and p99_gain >= 0.10 and apart and worst[0] <= 0.02
            line += (
                "; ≥5 % / ≥10 % with CIs apart, no bucket > 2 % worse: "
                f"**{'met' if win else 'not met'}**"
            )
            floor = floors.get(name)
            if floor:
                room = 1 - floor / stats[best_p99]["p99"][0]
                line += (f" (p99 floor {floor / 3600:.2f} h: no policy's p99 can be more than "
                         f"{room * 100:.1f} % below {best_p99}'s)")  # fmt: skip
        out.append(line)
    return out


def below_ceiling(ours: dict, best: dict, name: str, ceiling: float, names_b) -> str:
    """The clause of a missed mean goal that says why: the baseline's mean is below the
    ceiling's and its larger jobs finish later than under fgd.

    The ceiling replays every job at its compact run time under count admission. A baseline
    whose mean is below it while its jobs of more than one GPU finish later than under fgd
    has lowered the job-count mean by letting small jobs overtake larger ones. The clause
    gives both distances to the ceiling and, of the buckets above one GPU, the one whose mean
    JCT is the most above fgd's. It is empty where the baseline is not 2 % below the ceiling
    (the goal's tolerance), no such bucket is more than 2 % above fgd's, or no ceiling was
    replayed. Means are in seconds, as in the report's statistics.

    >>> h = 3600.0
    >>> ours = {"mean": (7.66 * h,), "buckets": [(6.99 * h,), (9.19 * h,), (31.33 * h,),
    ...                                          (24.44 * h,)]}
    >>> spread = {"mean": (6.49 * h,), "buckets": [(5.76 * h,), (9.02 * h,), (31.15 * h,),
    ...                                            (30.36 * h,)]}
    >>> sizes = ["1 GPU", "2-7 GPUs", "8 GPUs", ">8 GPUs"]
    >>> print(below_ceiling(ours, spread, "spread", 7.81 * h, sizes))
     (why: spread's mean is 16.9 % below the ceiling's and fgd's 1.9 % below; spread's jobs of \
>8 GPUs average 30.36 h against fgd's 24.44 h: its lower mean is small jobs overtaking larger \
ones)
    >>> below_ceiling(ours, spread, "spread", 6.0 * h, sizes)
    ''
    """
    if not ceiling == ceiling or best["mean"][0] >= 0.98 * ceiling:  # NaN: no ceiling
        return ""
    rise = {i: best["buckets"][i][0] / ours["buckets"][i][0] for i in range(1, len(names_b))
            if best["buckets"][i][0] > 0 and ours["buckets"][i][0] > 0}  # NaN compares False
    k = max(rise, key=rise.get, default=None)
    if k is None or rise[k] <= 1.02:
        return ""
    gap = 1 - ours["mean"][0] / ceiling
    return (f" (why: {name}'s mean is {(1 - best['mean'][0] / ceiling) * 100:.1f} % below the "
            f"ceiling's and fgd's {abs(gap) * 100:.1f} % {'below' if gap >= 0 else 'above'}; "
            f"{name}'s jobs of {names_b[k]} average {best['buckets'][k][0] / 3600:.2f} h "
            f"against fgd's {ours['buckets'][k][0] / 3600:.2f} h: its lower mean is small jobs "
            "overtaking larger ones)")  # fmt: skip


def _few_jobs(jobs: int, gap: float) -> str:
    """Why a p99 over few jobs moves: which of a replica's longest JCTs it lies between."""
    if jobs >= 1000 or jobs < 2:
        return ""
    low = int(math.floor(0.99 * (jobs - 1)))  # numpy's linear percentile: sorted[low], [low+1]
    a, b = jobs - low, jobs - low - 1  # ranks from the longest (1)
    rank = {1: "longest", 2: "2nd longest", 3: "3rd longest"}
    text = " and ".join(rank.get(k, f"{k}th longest") for k in (a, b))  # b ≥ 1 for jobs ≥ 2
    return (f" (why: the p99 of {jobs} jobs lies between a replica's {text} JCT, so two jobs' "
            f"waits and placements set it; the gap is {gap / 60:+.1f} min)")  # fmt: skip


def _colour(policy):
    """One colour per policy in every plot; fgd in black."""
    if policy == OURS:
        return "black"
    import matplotlib

    order = [*BASELINES, *ABLATIONS]
    k = order.index(policy) if policy in order else len(order)
    return matplotlib.colormaps["tab10" if k < 10 else "Dark2"](k % 10)


def plots(rows, loads, folder):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    by = defaultdict(list)
    for r in rows:
        by[(r.trace, r.admission, r.load, r.policy)].append(r)
    admissions = sorted({r.admission for r in rows if r.policy != CEILING})
    pols = [*BASELINES, *ABLATIONS, OURS]
    for name in ACTIVE:
        gpn = int(_cluster(name).gpus_per_node.max())
        fig, axes = plt.subplots(2, len(admissions), figsize=(6.5 * len(admissions), 8),
                                 squeeze=False)  # fmt: skip
        for col, adm in enumerate(admissions):
            for row, (key, title) in enumerate((("jct_mean", "mean JCT"), ("jct_p99", "p99 JCT"))):
                ax = axes[row][col]
                for pol in [*pols, CEILING]:
                    a = "any" if pol == CEILING else adm
                    pts = [(ld, ci95([getattr(r, key) / 3600 for r in by[(name, a, ld, pol)]]))
                           for ld in loads if by.get((name, a, ld, pol))]  # fmt: skip
                    if not pts:
                        continue
                    x = [p[0] for p in pts]
                    m = np.array([p[1] for p in pts])
                    style = {"lw": 2.5 if pol == OURS else 1, "color": _colour(pol)}
                    if pol == CEILING:
                        style = {"ls": "--", "color": "0.55"}
                    elif pol in ABLATIONS:
                        style["ls"] = ":"
                    (line,) = ax.plot(x, m[:, 0], marker="o", ms=3, label=pol, **style)
                    ax.fill_between(x, m[:, 1], m[:, 2], alpha=0.12, color=line.get_color())
                ax.set_yscale("log")
                ax.set_xlabel(
                    "offered load (GPU-hours offered / capacity)"
                    if LOAD_BASIS[0] == "offered"
                    else "load in the arrival window (GPU-hours demanded in it / capacity)"
                )
                ax.set_ylabel(f"{title} (h), 95% CI band")
                ax.set_title(f"{name}: {title}, {adm} admission")
                ax.grid(alpha=0.3)
        for ax in axes[0]:  # each admission's own policies (the ablations differ)
            ax.legend(fontsize=7, ncol=2)
        fig.tight_layout()
        p = folder / f"{name}-load.png"
        fig.savefig(p, dpi=110)
        plt.close(fig)
        paths.append(p)
        # buckets at the load nearest 1.0, and CDFs there
        ref = min(loads, key=lambda ld: abs(ld - 1.0))
        names_b = buckets(gpn)
        fig, axes = plt.subplots(2, len(admissions), figsize=(6.5 * len(admissions), 8),
                                 squeeze=False)  # fmt: skip
        for col, adm in enumerate(admissions):
            ax = axes[0][col]
            present = [p for p in pols if by.get((name, adm, ref, p))]
            width = 0.8 / max(len(present), 1)
            for i, pol in enumerate(present):
                st = [ci95([r.bucket_jct[k] / 3600 for r in by[(name, adm, ref, pol)]])
                      for k in range(4)]  # fmt: skip
                m = np.array(st)
                ax.bar(np.arange(4) + i * width, m[:, 0], width, yerr=m[:, 2] - m[:, 0],
                       label=pol, color=_colour(pol))  # fmt: skip
            ax.set_xticks(np.arange(4) + 0.4 - width / 2, names_b)
            ax.set_ylabel("mean JCT (h), 95% CI")
            ax.set_title(f"{name}: by job size, load {ref:.2f}, {adm} admission")
            ax = axes[1][col]
            for pol in present:
                rs = [r for r in by[(name, adm, ref, pol)] if r.replica == 0]
                if rs and rs[0].jct_quantiles:
                    x = np.asarray(rs[0].jct_quantiles) / 3600
                    ax.plot(x, np.linspace(0, 1, len(x)), label=pol, color=_colour(pol),
                            lw=2.5 if pol == OURS else 1)  # fmt: skip
            ax.set_xscale("log")
            ax.set_xlabel("JCT (h), replica 0")
            ax.set_ylabel("share of jobs")
            ax.set_title(f"{name}: JCT CDF, load {ref:.2f}, {adm} admission")
            ax.grid(alpha=0.3)
        for ax in axes[0]:
            ax.legend(fontsize=7, ncol=2)
        fig.tight_layout()
        p = folder / f"{name}-buckets.png"
        fig.savefig(p, dpi=110)
        plt.close(fig)
        paths.append(p)
    return paths


def _loads(text: str) -> list[float]:
    from tsched.errors import InputError

    try:
        out = sorted({float(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise InputError(f"--loads: expected comma-separated numbers, got {text!r}") from None
    if not out or min(out) <= 0:
        raise InputError(f"--loads: expected positive offered loads, got {text!r}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 loads, 3 replicas, 2 days")
    parser.add_argument("--ray", action="store_true", help="run the replays as Ray tasks")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                        help="processes when not on Ray (default: all cores)")  # fmt: skip
    parser.add_argument("--replicas", type=int, default=None)
    parser.add_argument(
        "--days",
        type=float,
        default=None,
        help="days of Philly (of --trace: all of it unless given) per replay",
    )
    parser.add_argument(
        "--replica-method",
        choices=("jitter", "days"),
        default="jitter",
        help="jitter: the trace perturbed (default); days: day-block bootstrap",
    )
    parser.add_argument("--trace", metavar="CSV", help="the user's own trace (with --cluster)")
    parser.add_argument("--cluster", metavar="PATH", help="its cluster: cluster/v1 file or preset")
    parser.add_argument("--columns", metavar="MAP", help="--trace: generic CSV mapping")
    parser.add_argument("--name", help="--trace: the study's name (default: the file stem)")
    parser.add_argument("--loads", metavar="L,…", help="offered loads (default 0.6–1.4)")
    parser.add_argument("--admission", choices=("any", "compact", "both"), default="both")
    parser.add_argument(
        "--load-basis",
        choices=("offered", "window"),
        default="offered",
        help="what a load means: offered GPU-hours over capacity (default) or those demanded "
        "inside the arrival window",
    )
    parser.add_argument("--out", metavar="DIR", help="where to write (default benchmarks/results)")
    parser.add_argument("--from-csv", metavar="CSV", help="rewrite the report from a runs.csv")
    args = parser.parse_args(argv)
    from tsched.errors import InputError

    try:
        return _main(args)
    except (InputError, OSError) as exc:
        print(f"cluster_policies: {exc}", file=sys.stderr)
        return 2


def _main(args) -> int:
    from tsched.compare.traces import parse_mapping
    from tsched.errors import InputError

    if bool(args.trace) != bool(args.cluster):
        raise InputError("--trace and --cluster go together")
    if args.trace:
        name = args.name or os.path.splitext(os.path.basename(args.trace))[0]
        if not name.replace("-", "").replace("_", "").replace(".", "").isalnum():
            raise InputError(f"--name: expected letters, digits, '-', '_' or '.', got {name!r}")
        use_study(name, args.trace, args.cluster, args.days is not None,
                  parse_mapping(args.columns) if args.columns else None)  # fmt: skip
        for n in ACTIVE:  # fail here, before any replay, on a bad file
            _trace(n)
    elif args.columns or args.name:
        raise InputError("--columns and --name go with --trace")
    LOAD_BASIS[0] = args.load_basis
    if args.quick:
        loads, replicas, days = [0.8, 1.0, 1.2], 3, 2.0
    else:
        loads, replicas, days = [0.6, 0.8, 0.9, 1.0, 1.2, 1.4], 5, 4.0
    loads = _loads(args.loads) if args.loads else loads
    replicas = args.replicas or replicas
    if replicas < 2:
        raise InputError("--replicas: expected at least 2 (an interval needs two)")
    days = args.days or days
    admissions = ["any", "compact"] if args.admission == "both" else [args.admission]
    t0 = time.perf_counter()
    if args.from_csv:
        rows = read_runs(args.from_csv)
        return report(args, rows, sorted({r.load for r in rows}), replicas, days, None)
    todo = cells(loads, replicas, admissions, days)
    for c in todo:  # a load out of reach fails here, before any replay (replicas are cached)
        _jobs(c.trace, c.load, c.replica, days, args.replica_method)
    rows = run_cells(
        todo,
        lambda c: _jobs(c.trace, c.load, c.replica, days, args.replica_method),
        lambda c: _cluster_path(c.trace),
        workers=args.workers,
        use_ray=args.ray,
        progress=progress_printer(len(todo), t0),
    )
    return report(args, rows, loads, replicas, days, time.perf_counter() - t0)


def _cluster_path(name: str) -> str:
    """What a worker process loads the study's cluster from: a path, or a preset name."""
    file = ACTIVE[name][1]
    return file if _is_preset(file) else str(CLUSTERS / file)


def _result_name(args) -> str:
    """``cluster_policies``, ``-NAME`` for a user's study, ``-quick`` for ``--quick``."""
    own = "" if ACTIVE.keys() == STUDIES.keys() and not args.trace else "-" + "-".join(ACTIVE)
    basis = "" if args.load_basis == "offered" else "-window"
    return "cluster_policies" + own + basis + ("-quick" if args.quick else "")


def _command(args) -> str:
    cmd = "python -m benchmarks.cluster_policies" + (" --quick" if args.quick else "")
    for flag in ("trace", "cluster", "columns", "name", "loads", "days", "replicas"):
        value = getattr(args, flag)
        if value is not None:
            cmd += f" --{flag} {value}"
    if args.admission != "both":
        cmd += f" --admission {args.admission}"
    if args.load_basis != "offered":
        cmd += f" --load-basis {args.load_basis}"
    return cmd


def _about(name: str, days: float, method: str) -> str:
    """One sentence on what a study replays."""
    trace, cluster = ACTIVE[name]
    c = _cluster(name)
    n, usable = len(_trace(name)), int((~c.busy_mask).sum())
    nodes, gpn = int(c.gpus_per_node.size), int(c.gpus_per_node.max())
    part = (
        f"its first {days:g} days a replica, of {n:,} jobs in all"
        if name in WINDOWED or method == "days"
        else f"all {n:,} jobs"
    )
    return (
        f"`{name}`: `{os.path.basename(trace)}` ({part}) on `{os.path.basename(cluster)}` "
        f"({usable:,} GPUs, {nodes} nodes of up to {gpn})"
    )


def report(args, rows, loads, replicas, days, total):
    """Writes runs.csv (unless the rows came from it), the plots and the markdown."""
    from tsched.errors import InputError

    missing = sorted(set(ACTIVE) - {r.trace for r in rows})
    if missing:
        raise InputError(
            f"{args.from_csv or 'runs'}: no replays of {', '.join(missing)} (a runs.csv of a "
            "user's study needs its --trace and --cluster again)"
        )
    rows = [r for r in rows if r.trace in ACTIVE]
    result = _result_name(args)
    out = Path(args.out) if args.out else RESULTS
    folder = out / result
    folder.mkdir(parents=True, exist_ok=True)
    meta = folder / "meta.json"
    if total is not None:
        write_runs(folder / "runs.csv", rows)
        meta.write_text(json.dumps({"minutes": total / 60, "workers": args.workers,
                                    "ray": args.ray}))  # fmt: skip
    run = (
        json.loads(meta.read_text())
        if meta.exists()
        else {"minutes": float("nan"), "workers": 0, "ray": False}
    )
    pics = plots(rows, loads, folder)
    # run times do not depend on the load (it scales arrival times only): one floor a trace
    floors = {
        name: float(np.mean([
            p99_floor(name, _jobs(name, loads[0], rep, days, args.replica_method))
            for rep in sorted({r.replica for r in rows if r.trace == name})
        ]))
        for name in ACTIVE
    }  # fmt: skip
    tables, verdicts = analyse(rows, loads, floors)
    print("\n".join(verdicts), file=sys.stderr)
    text = (
        f"# Cluster placement policies: load sweep with replicas\n\n`{_command(args)}` — "
        f"{machine()}; {len(rows)} replays in {run['minutes']:.1f} min ({run['workers']} "
        f"processes{', Ray' if run['ray'] else ''}).\n\n"
        f"Queue: `backfill` (EASY). Loads {', '.join(f'{x:g}' for x in loads)} ("
        + (
            "offered GPU-hours over capacity"
            if LOAD_BASIS[0] == "offered"
            else "GPU-hours demanded inside the arrival window over capacity"
        )
        + ", reached by scaling arrival times). "
        f"{replicas} replicas per load, "
        + (
            "each the trace with a random 1 % of its jobs left out and every arrival moved by up "
            "to ±5 minutes: "
            if args.replica_method == "jitter"
            else "day-block bootstraps: "
        )
        + "; ".join(_about(name, days, args.replica_method) for name in ACTIVE)
        + ". Every policy replays the same replicas. Intervals: Student-t 95 % over replicas; a "
        "difference is claimed only where intervals do not overlap. `paired`: the Student-t "
        "95 % interval of the difference replica by replica (the same jobs, so the spread "
        "between replicas, which widens each policy's own interval, drops out), as a share of "
        "the other policy's mean; shown beside the claim, not in its place. `vs ceiling`: mean "
        "JCT over the ceiling's (every job at its compact run time, count admission, the same "
        "replica). "
        "Under `compact` admission a policy can beat the ceiling's mean: jobs that wait for a "
        "compact placement let small jobs overtake them, a queue-order effect. "
        "`blocked GPU-h`: GPU-hours free while a waiting job would have fit them by count. "
        "Buckets: mean JCT per job size.\n\n"
        "Policies: baselines "
        + ", ".join(f"`{p}`" for p in BASELINES)
        + f"; tsched's `{OURS}`; ablations "
        + ", ".join(f"`{p}`" for p in ABLATIONS)
        + " (best fit with fgd's topology reservation; fgd with the other "
        "reservation than its own: a count under compact admission, topology under count "
        "admission), which say which of fgd's parts wins what. Under `any` admission fgd holds "
        "a job back for "
        "a compact placement when one is expected sooner than the scattered placement would "
        "slow the job (the job model prices the delay).\n\n"
        + load_note(rows, loads, days, args.replica_method)
        + mechanism(rows, loads)
        + "\n## Goals\n\n"
        + "\n".join(verdicts)
        + "\n"
        + tables
        + "\n\nPlots: "
        + ", ".join(f"`{p.relative_to(out)}`" for p in pics)
        + "\n"
    )
    if args.out:
        (out / f"{result}.md").write_text(stamp(text))
    else:
        write_result(result, text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
