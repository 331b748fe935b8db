"""Summaries, job-by-job pairing and the comparison report (markdown + PNG plots).

``summarize`` turns one run into the numbers people compare: average / p50 / p95 / p99 JCT,
makespan, utilisation, queueing delay, queue length, fragmentation and fair share (each tenant's
share of the GPU-seconds against its budget share). ``pair`` matches two runs of the same trace
job by job. ``write_report`` writes ``records.csv``, ``records.jsonl``, ``summary.json``,
``report.md`` and the plots into one folder, and — given the cluster and runs that kept
snapshots (``SimConfig.snapshot_jobs``) — a picture of each representative job's placement
under each policy (``placement-JOB-POLICY.png``, drawn by :mod:`tsched.show`: the job's GPUs in
colour, the GPUs other jobs held at that moment greyed).
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tsched._io import atomic_write_text, save_figure
from tsched.compare.records import JobRecord, write_jsonl, write_records
from tsched.compare.simulator import SimResult

if TYPE_CHECKING:
    from tsched.cluster import Cluster

__all__ = ["summarize", "pair", "write_report", "PLOTS"]

PLOTS = ("jct_cdf.png", "utilisation.png", "slowdown_by_size.png")


def time_mean(t: np.ndarray, v: np.ndarray, window: tuple[float, float] | None = None) -> float:
    """Time-weighted mean of a step function with value v[k] on [t[k], t[k+1]), over the whole
    series or over ``window`` (``(lo, hi)``; 0 for an empty window).

    >>> t, v = np.array([0.0, 10.0, 20.0, 30.0]), np.array([2.0, 4.0, 6.0, 0.0])
    >>> time_mean(t, v), time_mean(t, v, (5.0, 25.0))  # (10 + 40 + 30) / 20
    (4.0, 4.0)
    >>> time_mean(t, v, (30.0, 40.0)), time_mean(t, v, (7.0, 7.0))  # past the last step; empty
    (0.0, 0.0)
    """
    if window is not None:
        lo, hi = window
        if hi <= lo or len(t) < 2:
            return 0.0
        dt = np.clip(t[1:], lo, hi) - np.clip(t[:-1], lo, hi)
        return float(np.sum(v[:-1] * dt) / (hi - lo))
    if len(t) < 2 or t[-1] <= t[0]:
        return float(v[0]) if len(v) else 0.0
    dt = np.diff(t)
    return float(np.sum(v[:-1] * dt) / (t[-1] - t[0]))


def summarize(
    result: SimResult, usable_gpus: int, budgets: Mapping[str, float] | None = None
) -> dict[str, Any]:
    """The headline numbers of one run (seconds unless named otherwise)."""
    recs = result.records
    jct = np.array([r.jct for r in recs])
    qd = np.array([r.queue_delay for r in recs])
    slow = np.array([r.slowdown for r in recs])
    t0 = min(r.submit for r in recs)
    makespan = max(r.end for r in recs) - t0
    gpu_seconds = float(sum(result.usage_by_tenant.values()))
    budgets = dict(budgets or {})
    tenants = sorted(result.usage_by_tenant)
    total_budget = sum(budgets.get(t, 1.0) for t in tenants)
    fairness = {
        t: {
            "share": result.usage_by_tenant[t] / gpu_seconds if gpu_seconds else 0.0,
            "budget_share": budgets.get(t, 1.0) / total_budget,
        }
        for t in tenants
    }
    return {
        "policy": result.config.label,
        "queue": result.config.queue,
        "seed": result.config.seed,
        "jobs": len(recs),
        "jct_mean": float(jct.mean()),
        "jct_p50": float(np.percentile(jct, 50)),
        "jct_p95": float(np.percentile(jct, 95)),
        "jct_p99": float(np.percentile(jct, 99)),
        "queue_delay_mean": float(qd.mean()),
        "queue_delay_p95": float(np.percentile(qd, 95)),
        "slowdown_median": float(np.nanmedian(slow)) if np.isfinite(slow).any() else None,
        "makespan": float(makespan),
        "utilisation": gpu_seconds / (usable_gpus * makespan) if makespan > 0 else 0.0,
        "queue_length_mean": time_mean(result.times, result.queued),
        "fragmentation_mean": time_mean(result.times, result.fragmentation),
        "multi_node_jobs": int(sum(r.nodes > 1 for r in recs)),
        "comm_share_mean_multi_gpu": float(np.mean([r.comm_share for r in recs if r.gpus > 1]))
        if any(r.gpus > 1 for r in recs)
        else 0.0,
        "preemptions": int(sum(r.preemptions for r in recs)),
        "migrations": int(sum(r.migrations for r in recs)),
        "restart_gpu_hours": float(sum(r.restart_gpu_s for r in recs)) / 3600.0,
        "fair_share": fairness,
        "simulation_seconds": result.wall_time,
    }


def pair(base: Sequence[JobRecord], other: Sequence[JobRecord]) -> dict[str, Any]:
    """Job-by-job comparison of two runs of the same trace (matched on job name).

    Returns the number of matched jobs, the median and geometric-mean JCT ratio (other / base)
    and the shares of jobs faster / slower by more than 1 %.

    Raises
    ------
    ValueError
        If the runs do not hold the same jobs.
    """
    a = {r.job: r.jct for r in base}
    b = {r.job: r.jct for r in other}
    if a.keys() != b.keys():
        raise ValueError("runs are not matched: they hold different jobs")
    ratios = np.array([b[k] / a[k] for k in a if a[k] > 0])
    return {
        "jobs": len(ratios),
        "jct_ratio_median": float(np.median(ratios)),
        "jct_ratio_geomean": float(np.exp(np.mean(np.log(ratios)))),
        "faster_share": float(np.mean(ratios < 0.99)),
        "slower_share": float(np.mean(ratios > 1.01)),
    }


def _label(result: SimResult, seeds: int) -> str:
    return result.config.label if seeds == 1 else f"{result.config.label}@{result.config.seed}"


def write_report(
    out: str | os.PathLike[str],
    results: Sequence[SimResult],
    *,
    usable_gpus: int,
    title: str,
    seeds: int = 1,
    budgets: Mapping[str, float] | None = None,
    plots: bool = True,
    cluster: Cluster | None = None,
) -> list[Path]:
    """Write the comparison folder; returns the paths written (placement pictures need
    ``cluster``)."""
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    records: list[JobRecord] = []
    for res in results:
        lab = _label(res, seeds)
        records.extend(r if r.policy == lab else _relabel(r, lab) for r in res.records)
    summaries = [summarize(r, usable_gpus, budgets) for r in results]
    for s, res in zip(summaries, results, strict=True):
        s["label"] = _label(res, seeds)
    base = results[0]
    pairs = {_label(r, seeds): pair(base.records, r.records) for r in results[1:]}
    written = [folder / "records.csv", folder / "records.jsonl", folder / "summary.json"]
    write_records(records, written[0])
    write_jsonl(records, written[1])
    doc = {
        "tsched": "compare/v1",
        "title": title,
        "baseline": _label(base, seeds),
        "runs": summaries,
        "paired_with_baseline": pairs,
    }
    atomic_write_text(written[2], json.dumps(doc, indent=2, allow_nan=True) + "\n")
    made = _plots(folder, results, seeds) if plots else []
    written.extend(made)
    shown: list[tuple[str, int, dict[str, tuple[Path, Any]]]] = []
    if plots and cluster is not None:
        shown = _placements(folder, results, seeds, cluster)
        written.extend(p for _, _, row in shown for p, _ in row.values())
    written.append(folder / "report.md")
    text = _markdown(title, summaries, pairs, _label(base, seeds), made)
    atomic_write_text(written[-1], text + _placement_markdown(shown, cluster))
    return written


def _relabel(r: JobRecord, label: str) -> JobRecord:
    from dataclasses import replace

    return replace(r, policy=label)


def _fmt_s(x: float) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if x >= 3600:
        return f"{x / 3600:.2f} h"
    return f"{x:.0f} s"


def _markdown(
    title: str,
    summaries: list[dict[str, Any]],
    pairs: dict[str, dict[str, Any]],
    baseline: str,
    plots: list[Path],
) -> str:
    lines = [f"# {title}", ""]
    lines += [
        "| policy | queue | jobs | avg JCT | p50 | p95 | p99 | avg queue delay | makespan "
        "| utilisation | fragmentation | multi-node jobs | preemptions | moves | restart GPU-h "
        "| sim time |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in summaries:
        lines.append(
            f"| {s['label']} | {s['queue']} | {s['jobs']} | {_fmt_s(s['jct_mean'])} "
            f"| {_fmt_s(s['jct_p50'])} | {_fmt_s(s['jct_p95'])} | {_fmt_s(s['jct_p99'])} "
            f"| {_fmt_s(s['queue_delay_mean'])} | {_fmt_s(s['makespan'])} "
            f"| {s['utilisation']:.1%} | {s['fragmentation_mean']:.1%} "
            f"| {s['multi_node_jobs']} | {s['preemptions']} | {s.get('migrations', 0)} "
            f"| {s.get('restart_gpu_hours', 0.0):.1f} | {s['simulation_seconds']:.1f} s |"
        )
    if pairs:
        lines += [
            "",
            f"## Job by job against {baseline} (same jobs, same order, same seed)",
            "",
            "| policy | matched jobs | median JCT ratio | geo-mean ratio | faster (>1 %) "
            "| slower (>1 %) |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for name, p in pairs.items():
            lines.append(
                f"| {name} | {p['jobs']} | {p['jct_ratio_median']:.3f} "
                f"| {p['jct_ratio_geomean']:.3f} | {p['faster_share']:.1%} "
                f"| {p['slower_share']:.1%} |"
            )
    fair = summaries[0]["fair_share"]
    if len(fair) > 1:
        lines += ["", "## Fair share (GPU-seconds share vs budget share)", ""]
        lines += ["| policy | " + " | ".join(fair) + " |", "|---|" + "---:|" * len(fair)]
        for s in summaries:
            lines.append(
                f"| {s['label']} | "
                + " | ".join(
                    f"{v['share']:.1%} / {v['budget_share']:.1%}" for v in s["fair_share"].values()
                )
                + " |"
            )
    if plots:
        lines += ["", "## Plots", ""]
        lines += [f"![{p.stem}]({p.name})" for p in plots]
    lines.append("")
    return "\n".join(lines)


def _plots(folder: Path, results: Sequence[SimResult], seeds: int) -> list[Path]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover - matplotlib is in [all]
        return []
    paths = []
    # JCT CDF
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for res in results:
        jct = np.sort([r.jct for r in res.records])
        ax.plot(jct, np.arange(1, len(jct) + 1) / len(jct), label=_label(res, seeds))
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (s, log)")
    ax.set_ylabel("share of jobs")
    ax.set_title("JCT distribution")
    ax.grid(alpha=0.3)
    ax.legend()
    paths.append(_save(fig, folder / PLOTS[0]))
    # utilisation and queue length
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(8, 5.5), sharex=True)
    for res in results:
        t = res.times / 3600.0
        ax1.step(t, res.busy_gpus, where="post", label=_label(res, seeds), lw=0.8)
        ax2.step(t, res.queued, where="post", lw=0.8)
    ax1.set_ylabel("busy GPUs")
    ax2.set_ylabel("jobs waiting")
    ax2.set_xlabel("time (h)")
    ax1.legend(fontsize=8)
    ax1.grid(alpha=0.3)
    ax2.grid(alpha=0.3)
    fig.suptitle("Utilisation and queue over time")
    paths.append(_save(fig, folder / PLOTS[1]))
    # slowdown per job size
    fig, ax = plt.subplots(figsize=(7, 4.5))
    sizes = sorted({r.gpus for r in results[0].records})
    width = 0.8 / max(len(results), 1)
    for k, res in enumerate(results):
        med = []
        for g in sizes:
            s = [r.slowdown for r in res.records if r.gpus == g and r.ideal > 0]
            med.append(float(np.median(s)) if s else np.nan)
        ax.bar(np.arange(len(sizes)) + k * width, med, width, label=_label(res, seeds))
    ax.set_xticks(np.arange(len(sizes)) + 0.4 - width / 2, [str(g) for g in sizes])
    ax.set_xlabel("GPUs per job")
    ax.set_ylabel("median slowdown (JCT / compact run time)")
    ax.set_yscale("log")
    ax.set_title("Slowdown by job size")
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=8)
    paths.append(_save(fig, folder / PLOTS[2]))
    return paths


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    return save_figure(fig, path, dpi=110)


def _placements(
    folder: Path, results: Sequence[SimResult], seeds: int, cluster: Cluster
) -> list[tuple[str, int, dict[str, tuple[Path, Any]]]]:
    """Draw each snapshot job's placement under each run (the first seed of each policy).

    Returns, per job, its GPU count and ``{run label: (picture path, snapshot)}``.
    """
    from tsched.plan import Plan, PlanEntry
    from tsched.show import write_picture

    first = [
        r for r in results if seeds == 1 or r.config.seed == min(x.config.seed for x in results)
    ]
    names: list[str] = []
    for res in first:
        names += [n for n in res.config.snapshot_jobs if n not in names]
    out = []
    for name in names:
        row: dict[str, tuple[Path, Any]] = {}
        size = 0
        for res in first:
            snap = res.snapshots.get(name)
            if snap is None:
                continue
            label = _label(res, seeds)
            size = len(snap.gpus)
            entries = tuple(
                PlanEntry(w, cluster.nodes[int(cluster.gpu_node[g])].name,
                          int(cluster.gpu_local[g]))
                for w, g in enumerate(snap.gpus)
            )  # fmt: skip
            plan = Plan(cluster.name, name, "feasible", snap.objective, None, None, label, 0.0,
                        res.config.seed, entries, {}, roles=("job",) * size)  # fmt: skip
            busy: dict[str, list[int]] = {}
            for g in snap.busy:
                busy.setdefault(cluster.nodes[int(cluster.gpu_node[g])].name, []).append(
                    int(cluster.gpu_local[g])
                )
            path = folder / f"placement-{_slug(name)}-{_slug(label)}.png"
            note = (f"placed by {label} at {_fmt_s(snap.time)}, ring all-reduce "
                    f"{snap.objective:.4g} s/iteration")  # fmt: skip
            write_picture(plan, cluster.with_busy(busy), path, note=note)
            row[label] = (path, snap)
        if row:
            out.append((name, size, row))
    return out


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_") or "x"


def _placement_markdown(
    shown: list[tuple[str, int, dict[str, tuple[Path, Any]]]], cluster: Cluster | None
) -> str:
    if not shown or cluster is None:
        return ""
    lines = [
        "",
        "## Representative placements",
        "",
        "The same jobs under each policy, where each was first placed: its GPUs in colour, the "
        "GPUs other jobs held at that moment in grey (largest multi-GPU job, then the upper "
        "quartile and the median of the multi-GPU sizes).",
        "",
    ]
    for name, size, row in shown:
        lines.append(f"### Job {name} ({size} GPUs)")
        lines.append("")
        lines.append("| policy | placed at | nodes | first-level domains | comm. s/iteration |")
        lines.append("|---|---:|---:|---:|---:|")
        for label, (_, snap) in row.items():
            nodes = np.unique(cluster.gpu_node[snap.gpus])
            groups = cluster.node_group[nodes, 0] if cluster.levels else nodes
            lines.append(
                f"| {label} | {_fmt_s(snap.time)} | {len(nodes)} | {len(np.unique(groups))} "
                f"| {snap.objective:.4g} |"
            )
        lines.append("")
        lines += [f"![{name} under {label}]({path.name})" for label, (path, _) in row.items()]
        lines.append("")
    return "\n".join(lines)
