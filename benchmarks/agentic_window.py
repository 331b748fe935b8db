"""Fairness over a window: how the stretch of time Jain's index is taken over changes it, and
what tsched's fair-share knobs trade between throughput and fairness, in simulation.

Jain's index over steps per program-second depends on the stretch it is measured over. Time
slicing serves a program in turns (a quantum of steps, then a pause while others run), so over a
stretch of only a few turns programs differ by where their turns fell; round-robin serves every
program a little all the time. The live benchmark (``agentic_live``) measures 150 s runs with
the first 60 s left out, a 90 s window; ``agentic_fairness`` measures whole runs, several
minutes each.

Window: 2 prefill-heavy replicas × 59,000 KV tokens, SWE-like programs (8 per slot of
concurrency, so that they last past the longest window), 35 and 64 in flight; round-robin,
ThunderAgent, tsched without and with fair share; windows of 30 to 360 s after a 60 s warm-up,
and the whole run; paired seeds, Student-t 95 % intervals. Frontier: 35 programs, tsched's
fair share over a grid of ``rotation_overhead`` × ``rotation_ratio`` and without it, steps/min
over round-robin's (paired) against Jain, over the live benchmark's two windows (90 s and
180 s).

Writes ``benchmarks/results/agentic_window.md``, ``agentic_window/runs.csv`` and a plot
(``--quick``: 3 seeds, 35 programs, three windows, a smaller grid).

    python -m benchmarks.agentic_window [--quick] [--ray]
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from collections import defaultdict
from typing import Any

import numpy as np

from benchmarks._common import (
    RESULTS,
    machine,
    markdown_table,
    mean_ci,
    paired_ratio,
    write_result,
    write_rows,
)
from tsched.agentic.core import SchedulerConfig
from tsched.agentic.engine import PRESETS as ENGINES
from tsched.agentic.study import Cell, run_cells
from tsched.agentic.workload import PRESETS as WORKLOADS
from tsched.stats import ci95

REPLICAS = 2
CAPACITY = 59_000
PER_SLOT = 8
WARMUP = 60.0
LIVE_WINDOW = 90.0  # agentic_live: 150 s runs, the first 60 s left out
LONG_WINDOW = 180.0  # agentic_live § prefill-heavy-long: 240 s runs
FRONTIER = (LIVE_WINDOW, LONG_WINDOW)
KEPT = (
    "steps_per_min",
    "fairness",
    "cache_hit_rate",
    "p50_step_s",
    "p99_step_s",
    "slowdown_p99",
    "pause_over_step",
)  # the metrics runs.csv keeps
LIVE_SECTIONS = ("prefill-heavy-fair", "prefill-heavy-long")  # agentic_live at 90 s and 180 s
WHOLE = "whole run"
ARMS: dict[str, tuple[str, SchedulerConfig | None]] = {
    "round-robin": ("round-robin", None),
    "thunderagent": ("thunderagent", None),
    "tsched (fair off)": ("tsched", SchedulerConfig(fair=False)),
    "tsched": ("tsched", SchedulerConfig()),
}


def grid(quick: bool) -> dict[str, SchedulerConfig]:
    """The fair-share settings of the frontier, by label (the default among them)."""
    overheads = (0.1, 0.2, 0.4) if quick else (0.05, 0.1, 0.2, 0.4, 0.8)
    ratios = (2.0,) if quick else (1.5, 2.0, 3.0)
    out = {"fair off": SchedulerConfig(fair=False)}
    for o in overheads:
        for r in ratios:
            out[f"overhead {o:g}, ratio {r:g}"] = SchedulerConfig(rotation_overhead=o,
                                                                   rotation_ratio=r)  # fmt: skip
    return out


def _cell(c: int, policy: str, config, seed: int, window: float | str) -> Cell:
    w = WORKLOADS["swe"].with_load(concurrency=c, programs=PER_SLOT * c)
    horizon, warmup = (None, 0.0) if window == WHOLE else (WARMUP + float(window), WARMUP)
    return Cell(w, ENGINES["prefill-heavy"], REPLICAS, CAPACITY, policy, seed, config=config,
                horizon=horizon, keep_records=False, warmup=warmup)  # fmt: skip


def cells(levels, windows, settings, seeds) -> list[tuple[dict[str, Any], Cell]]:
    out = []
    for c in levels:
        for window in windows:
            for arm, (policy, config) in ARMS.items():
                for seed in range(seeds):
                    key = {"study": "window", "concurrency": c, "window": window, "arm": arm,
                           "seed": seed}  # fmt: skip
                    out.append((key, _cell(c, policy, config, seed, window)))
    for window in FRONTIER:
        for label, config in settings.items():
            for seed in range(seeds):
                key = {"study": "frontier", "concurrency": 35, "window": window, "arm": label,
                       "seed": seed}  # fmt: skip
                out.append((key, _cell(35, "tsched", config, seed, window)))
    return out


def _group(rows) -> dict:
    by = defaultdict(list)
    for r in rows:
        by[(r["study"], r["concurrency"], str(r["window"]), r["arm"])].append(r)
    return by


def frontier_points(rows) -> dict[str, list[tuple[str, float, float]]]:
    """Per window, every frontier setting as (label, × round-robin, mean Jain); round-robin is
    the window study's arm at 35 programs over the same window."""
    by = _group(rows)
    out: dict[str, list[tuple[str, float, float]]] = {}
    for window in map(str, FRONTIER):
        rr = by[("window", 35, window, "round-robin")]
        pts = []
        for (study, _c, w, label), rs in by.items():
            if study == "frontier" and w == window and rr:
                jain = float(np.mean([r["fairness"] for r in rs]))
                pts.append((label, paired_ratio(rs, rr)[0], jain))
        out[window] = sorted(pts, key=lambda p: p[1])
    return out


def nearest(points, throughput: float, jain: float) -> tuple[str, float, float, float]:
    """The point closest to meeting both goals: the smallest largest shortfall, each relative
    to its goal (0 where a point meets both); (label, ×, Jain, that shortfall)."""

    def short(p) -> float:
        return max(0.0, 1 - p[1] / throughput, 1 - p[2] / jain)

    best = min(points, key=short)
    return best[0], best[1], best[2], short(best)


def window_table(rows, levels, windows) -> list[str]:
    by = _group(rows)
    out = []
    for c in levels:
        table = []
        for window in windows:
            w = str(window)
            rr = by[("window", c, w, "round-robin")]
            for arm in ARMS:
                rs = by[("window", c, w, arm)]
                x = (
                    ""
                    if arm == "round-robin"
                    else "{:.2f} [{:.2f}, {:.2f}]".format(*paired_ratio(rs, rr))
                )
                label = window if window == WHOLE else f"{float(window):g} s"
                table.append([label, arm, mean_ci(rs, "steps_per_min", 1), x,
                              mean_ci(rs, "fairness", 3)])  # fmt: skip
        out += [f"\n## Jain by window, {c} programs\n", markdown_table(
            ["window", "arm", "steps/min", "× round-robin (paired)", "Jain"], table)]  # fmt: skip
    return out


def frontier_table(rows) -> list[str]:
    pts = frontier_points(rows)
    table = []
    for window in map(str, FRONTIER):
        label = f"{float(window):g} s"
        for name, x, j in pts[window]:
            table.append([label, name, f"{x:.2f}", f"{j:.3f}"])
    return [
        "\n## Frontier, 35 programs\n",
        markdown_table(["window", "tsched setting", "× round-robin", "Jain"], table),
    ]


def verdicts(rows, levels, live: list[dict[str, Any]] | None) -> list[str]:
    by = _group(rows)
    out = []
    for c in levels:
        fair = {w: np.mean([r["fairness"] for r in rs])
                for (study, cc, w, arm), rs in by.items()
                if study == "window" and cc == c and arm == "tsched"}  # fmt: skip
        ordered = [f"{w if w == WHOLE else f'{float(w):g} s'} {j:.3f}" for w, j in fair.items()]
        out.append(f"- tsched's Jain at {c} programs by window: " + ", ".join(ordered))
    pts = frontier_points(rows)
    for window, goals in ((w, g) for w in map(str, FRONTIER) for g in ((1.8, 0.9), (1.6, 0.9))):
        if not pts.get(window):
            continue
        name, x, j, gap = nearest(pts[window], *goals)
        where = f"the {float(window):g} s window"
        met = [p for p in pts[window] if p[1] >= goals[0] and p[2] >= goals[1]]
        out.append(
            f"- over {where}, ≥ {goals[0]}× round-robin with Jain ≥ {goals[1]}: "
            + (f"**reached** by {', '.join(p[0] for p in met)}" if met else
               f"**no setting reaches it**; the nearest, {name}, makes {x:.2f}× with Jain "
               f"{j:.3f} ({gap:.0%} short of a goal)")
        )  # fmt: skip
    for c in levels:
        off = by[("window", c, WHOLE, "tsched (fair off)")]
        if off:
            out.append(
                f"- over a whole run ({PER_SLOT} programs a slot) even tsched without fair share "
                f"has Jain {np.mean([r['fairness'] for r in off]):.3f} at {c} programs: a long "
                "enough window hides who waited, so fairness is read over the live windows"
            )
    for seen in live or []:
        out.append(
            f"- live against simulated (`agentic_live.md § {seen['section']}`, tsched, "
            f"{seen['runs']:.0f} runs): Jain {seen['live']:.3f} live, {seen['sim']:.3f} "
            "simulated with the same seeds, horizon and warm-up"
        )
    return out


def live_reading(section: str) -> dict[str, Any] | None:
    """tsched's live and simulated Jain in ``agentic_live``'s runs of ``section``, if kept."""
    path = RESULTS / "agentic_live" / section / "runs.csv"
    if not path.exists():
        return None
    with open(path, newline="") as fh:
        rs = [r for r in csv.DictReader(fh) if r["arm"] == "tsched" and r.get("sim_fairness")]
    if not rs:
        return None
    return {"section": section, "runs": len(rs),
            "live": float(np.mean([float(r["fairness"]) for r in rs])),
            "sim": float(np.mean([float(r["sim_fairness"]) for r in rs]))}  # fmt: skip


def plot(rows, levels, windows, folder) -> list:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by = _group(rows)
    finite = [w for w in windows if w != WHOLE]
    fig, axes = plt.subplots(1, len(levels) + 1, figsize=(4.6 * (len(levels) + 1), 4.0))
    for ax, c in zip(axes, levels, strict=False):
        for k, arm in enumerate(ARMS):
            pts = np.array([ci95([r["fairness"] for r in by[("window", c, str(w), arm)]])
                            for w in finite])  # fmt: skip
            ax.plot(finite, pts[:, 0], marker="o", ms=3, color=f"C{k}", label=arm)
            ax.fill_between(finite, pts[:, 1], pts[:, 2], color=f"C{k}", alpha=0.12)
        ax.axhline(0.9, color="0.5", ls=":", lw=1)
        ax.axvline(LIVE_WINDOW, color="0.7", ls="--", lw=1)
        ax.set_xscale("log", base=2)
        ax.set_xticks(finite, [f"{w:g}" for w in finite])
        ax.minorticks_off()
        ax.set_xlabel("window after a 60 s warm-up (s)")
        ax.set_ylabel("Jain (steps per program-s)")
        ax.set_title(f"{c} programs, prefill-heavy")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    ax = axes[-1]
    for window, marker in zip(map(str, FRONTIER), "os", strict=True):
        label = f"{float(window):g} s window"
        pts = frontier_points(rows).get(window, [])
        ax.scatter([p[1] for p in pts], [p[2] for p in pts], marker=marker, s=18, label=label)
    ax.axhline(0.9, color="0.5", ls=":", lw=1)
    ax.axvline(1.8, color="0.5", ls=":", lw=1)
    ax.axvline(1.6, color="0.7", ls=":", lw=1)
    ax.set_xlabel("steps/min × round-robin")
    ax.set_ylabel("Jain")
    ax.set_title("tsched's fair-share settings, 35 programs")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "window.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 seeds, 35 programs, 3 windows")
    parser.add_argument("--ray", action="store_true", help="run the cells as Ray tasks")
    args = parser.parse_args(argv)
    levels = [35] if args.quick else [35, 64]
    windows: list[float | str] = [LIVE_WINDOW, LONG_WINDOW, WHOLE] if args.quick else [
        30.0, 60.0, LIVE_WINDOW, LONG_WINDOW, 360.0, WHOLE]  # fmt: skip
    seeds = 3 if args.quick else 5
    started = time.time()
    jobs = cells(levels, windows, grid(args.quick), seeds)
    print(f"agentic_window: {len(jobs)} simulated runs", file=sys.stderr)
    results = run_cells([c for _k, c in jobs], use_ray=args.ray)
    rows = [{**key, **{m: res.metrics[m] for m in KEPT}}
            for (key, _c), res in zip(jobs, results, strict=True)]  # fmt: skip
    for r in rows:
        r["window"] = str(r["window"])
    name = "agentic_window" + ("-quick" if args.quick else "")
    folder = RESULTS / name
    write_rows(folder / "runs.csv", rows)
    pics = plot(rows, levels, windows, folder)
    minutes = (time.time() - started) / 60
    text = "\n".join([
        "# Fairness over a window, and the fair-share frontier",
        "",
        f"`python -m benchmarks.agentic_window{' --quick' if args.quick else ''}` — "
        f"{len(rows)} runs in {minutes:.1f} min on {machine()}.",
        "",
        *(p.replace("\n", " ") for p in __doc__.split("\n\n")[1:3]),
        "",
        f"{seeds} seeds. tsched's defaults: `rotation_overhead` 0.2, `rotation_ratio` 2.",
        "",
        "## Findings",
        "",
        *verdicts(rows, levels, [x for x in map(live_reading, LIVE_SECTIONS) if x]),
        *window_table(rows, levels, windows),
        *frontier_table(rows),
        "",
        "Plot: " + ", ".join(f"`{p.relative_to(RESULTS)}`" for p in pics),
        "",
    ])  # fmt: skip
    write_result(name, text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
