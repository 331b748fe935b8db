"""Agentic studies: many simulated runs (policy × seed × concurrency), their summary with 95 %
confidence intervals, and the files ``tsched agents simulate`` writes.

Output folder:

- ``summary.json``: ``{policy: {metric: mean, …, "ci95": {metric: [low, high]}, "seeds": K,
  "by_concurrency": {C: {metric: mean}}}}`` — the top-level metrics are at the workload's own
  concurrency (or the largest swept), means over seeds; :data:`~tsched.agentic.sim.METRICS`.
- ``records.csv``: one row per LLM step (policy, seed, concurrency, program, turn, replica,
  times, tokens).
- ``meta.json``: the workload, engine profile, replicas, capacity and the command's settings.
- plots: ``throughput.png`` (steps/min against concurrency, one line per policy, 95 % bands),
  ``cache_hit_rate.png``, ``kv_imbalance.png`` and ``step_latency.png`` (p50 and p99).
"""

from __future__ import annotations

import csv
import io
import json
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tsched._io import atomic_write_text, save_figure
from tsched.agentic.core import SchedulerConfig
from tsched.agentic.engine import EngineProfile
from tsched.agentic.sim import METRICS, RECORD_FIELDS, SimResult, simulate
from tsched.agentic.workload import AgenticWorkload
from tsched.stats import ci95

__all__ = ["PLOTS", "Cell", "run_cells", "summarize", "write_outputs"]

log = logging.getLogger(__name__)

PLOTS = ("throughput.png", "cache_hit_rate.png", "kv_imbalance.png", "step_latency.png")


@dataclass(frozen=True)
class Cell:
    """One simulated run."""

    workload: AgenticWorkload
    profile: EngineProfile
    replicas: int
    capacity_tokens: int
    policy: str
    seed: int
    config: SchedulerConfig | None = None
    horizon: float | None = None
    keep_records: bool = True
    warmup: float = 0.0

    @property
    def concurrency(self) -> int:
        return self.workload.concurrency or 0


def _run(cell: Cell) -> SimResult:
    return simulate(
        cell.workload,
        cell.profile,
        replicas=cell.replicas,
        capacity_tokens=cell.capacity_tokens,
        policy=cell.policy,
        seed=cell.seed,
        config=cell.config,
        horizon=cell.horizon,
        keep_records=cell.keep_records,
        warmup=cell.warmup,
    )


def run_cells(
    cells: Sequence[Cell],
    *,
    use_ray: bool = False,
    progress: Callable[[Cell, SimResult], None] | None = None,
) -> list[SimResult]:
    """Run every cell serially or as Ray tasks (one CPU each); results in cell order, the same
    either way (each run is deterministic in its seed)."""
    out: list[SimResult | None] = [None] * len(cells)
    if use_ray:
        import ray

        if not ray.is_initialized():
            ray.init(logging_level="ERROR", log_to_driver=False, include_dashboard=False)
        remote = ray.remote(num_cpus=1)(_run)
        futures = [remote.remote(c) for c in cells]
        index = {f: k for k, f in enumerate(futures)}
        pending = list(futures)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            k = index[ready[0]]
            out[k] = res = ray.get(ready[0])
            if progress:
                progress(cells[k], res)
    else:
        for k, cell in enumerate(cells):
            out[k] = res = _run(cell)
            if progress:
                progress(cell, res)
    return [r for r in out if r is not None]


def summarize(
    cells: Sequence[Any], results: Sequence[Any], *, headline: int | None = None
) -> dict[str, dict[str, Any]]:
    """``summary.json``'s content: per policy, means over seeds with 95 % intervals, at the
    ``headline`` concurrency (default: the largest), and every concurrency under
    ``by_concurrency``. A cell needs ``policy`` and ``concurrency``; a result ``metrics`` and
    ``counters`` (a simulated run's, or a measured one's)."""
    groups: dict[str, dict[int, list[SimResult]]] = {}
    for cell, res in zip(cells, results, strict=True):
        groups.setdefault(cell.policy, {}).setdefault(cell.concurrency, []).append(res)
    summary: dict[str, dict[str, Any]] = {}
    for policy, by_c in groups.items():
        top = headline if headline in by_c else max(by_c)
        entry: dict[str, Any] = {}
        ci: dict[str, list[float]] = {}
        for metric in METRICS:
            values = [r.metrics[metric] for r in by_c[top] if not math.isnan(r.metrics[metric])]
            mean, low, high = ci95(values) if values else (math.nan, math.nan, math.nan)
            entry[metric] = _num(mean)
            ci[metric] = [_num(low), _num(high)]
        entry["ci95"] = ci
        entry["seeds"] = len(by_c[top])
        entry["concurrency"] = top
        counters: dict[str, float] = {}
        for key in ("pauses", "resumes", "preemptions", "warm_resumes", "migrations", "held_calls"):
            counters[key] = _num(sum(r.counters.get(key, 0) for r in by_c[top]) / len(by_c[top]))
        entry["counters"] = counters
        entry["by_concurrency"] = {
            str(c): {m: _num(ci95([r.metrics[m] for r in rs])[0]) if rs else None for m in METRICS}
            | {
                f"{m}_ci95": [_num(x) for x in ci95([r.metrics[m] for r in rs])[1:]]
                for m in (
                    "steps_per_min",
                    "cache_hit_rate",
                    "kv_imbalance",
                    "p50_step_s",
                    "p99_step_s",
                )  # fmt: skip
            }
            for c, rs in sorted(by_c.items())
        }
        summary[policy] = entry
    return summary


def _num(x: float) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else round(float(x), 4)


def records_csv(cells: Sequence[Cell], results: Sequence[SimResult]) -> str:
    buf = io.StringIO()
    fields = ("concurrency", *RECORD_FIELDS)
    writer = csv.DictWriter(buf, fieldnames=fields, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for cell, res in zip(cells, results, strict=True):
        for rec in res.records:
            row = dict(rec)
            row["concurrency"] = cell.concurrency
            for key in ("requested", "sent", "done", "latency_s", "queue_s"):
                row[key] = f"{row[key]:.4f}"
            writer.writerow(row)
    return buf.getvalue()


def write_outputs(
    out: str | Path,
    cells: Sequence[Cell],
    results: Sequence[SimResult],
    summary: dict[str, dict[str, Any]],
    meta: dict[str, Any],
    *,
    plots: bool = True,
) -> list[Path]:
    """Write ``summary.json``, ``records.csv``, ``meta.json`` and the plots into ``out``."""
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in (
        ("summary.json", json.dumps(summary, indent=2) + "\n"),
        ("meta.json", json.dumps(meta, indent=2) + "\n"),
        ("records.csv", records_csv(cells, results)),
    ):
        atomic_write_text(folder / name, text)
        written.append(folder / name)
    if plots:
        import importlib.util

        if importlib.util.find_spec("matplotlib") is None:
            log.warning("matplotlib is not installed: no plots (pip install 'tsched[plot]')")
        else:
            written += plot_summary(summary, folder)
    return written


def plot_summary(summary: dict[str, dict[str, Any]], folder: Path) -> list[Path]:
    """The study's pictures: each metric against concurrency (a bar per policy for one point)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    specs = (
        ("throughput.png", "steps_per_min", "steps / min", "Throughput"),
        ("cache_hit_rate.png", "cache_hit_rate", "cached / prompt tokens", "KV cache hit rate"),
        (
            "kv_imbalance.png",
            "kv_imbalance",
            "max − min KV use across replicas",
            "KV imbalance",
        ),  # fmt: skip
    )
    for name, metric, ylabel, title in (*specs, ("step_latency.png", "p50_step_s", "", "")):
        fig, ax = plt.subplots(figsize=(6.4, 4.0))
        metrics = ("p50_step_s", "p99_step_s") if name == "step_latency.png" else (metric,)
        for k, (policy, entry) in enumerate(summary.items()):
            conc = [int(c) for c in entry["by_concurrency"]]
            for m, style in zip(metrics, ("-", "--"), strict=False):
                ys = [entry["by_concurrency"][str(c)][m] for c in conc]
                ys = [math.nan if y is None else y for y in ys]
                label = policy if len(metrics) == 1 else f"{policy} {m[:3]}"
                color = f"C{k}"
                if len(conc) == 1:
                    ax.bar(k + (0.4 if style == "--" else 0), ys[0], width=0.4, color=color,
                           alpha=1.0 if style == "-" else 0.5, label=label)  # fmt: skip
                    band = entry["by_concurrency"][str(conc[0])].get(f"{m}_ci95")
                    if band and None not in band:
                        ax.errorbar(k + (0.4 if style == "--" else 0), ys[0],
                                    yerr=[[ys[0] - band[0]], [band[1] - ys[0]]], color="black",
                                    capsize=3)  # fmt: skip
                else:
                    ax.plot(conc, ys, style, marker="o", color=color, label=label)
                    band = [entry["by_concurrency"][str(c)].get(f"{m}_ci95") for c in conc]
                    if all(b and None not in b for b in band):
                        ax.fill_between(conc, [b[0] for b in band], [b[1] for b in band],
                                        color=color, alpha=0.15)  # fmt: skip
        single = all(len(e["by_concurrency"]) == 1 for e in summary.values())
        if single:
            ax.set_xticks(range(len(summary)), list(summary), rotation=20)
        else:
            ax.set_xlabel("programs in flight (concurrency)")
        ax.set_ylabel(ylabel or "seconds per LLM call")
        ax.set_title(title or "Step latency (p50 solid, p99 dashed)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        paths.append(save_figure(fig, folder / name))
    return paths
