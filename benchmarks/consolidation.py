"""Consolidation in the cluster replay: none, KAI's rule and tsched's priced plan, paired.

When the job at the head of the queue does not fit (``compact`` admission), running jobs may be
checkpointed and moved so that it does (:mod:`tsched.compare.consolidation`): ``kai`` follows
KAI Scheduler's consolidation action (victims in queue order, committed when every victim is
placed again, the moves not priced); ``tsched`` takes the cheapest plan the defragmentation
heuristic finds, only when it costs fewer GPU-seconds than the head would wait. Each placement
rule (``fgd``, ``best-fit``) is replayed with each, on the same replicas (common random
numbers): the Philly sample (first 4 days a replica) on ``dgx-a100-32node`` under fair share
(GPU-time budgets, minimum runtime 1,800 s, preemption) and under EASY backfill, and all of
Pollux workload 6 on its 16 × 4 T4 testbed; restart cost 300 s a move or preemption; at most
two moves a job. Verdicts are stated in what placement controls: the wait of jobs of more than
8 GPUs, the one-GPU jobs' JCT, blocked GPU-hours and GPU-hours lost to restarts, each as a
paired Student-t 95 % interval replica by replica.

Writes ``benchmarks/results/consolidation.md``, ``consolidation/runs.csv`` and plots
(``-quick``: two loads, three replicas, two days of Philly).

    python -m benchmarks.consolidation [--quick] [--workers N] [--from-csv CSV]
"""

from __future__ import annotations

import argparse
import math
import os
import time
from collections import defaultdict
from dataclasses import replace

import numpy as np

from benchmarks._common import RESULTS, commit, machine, markdown_table, write_result
from benchmarks.cluster_policies import (
    CLUSTERS,
    STUDIES,
    WINDOWED,
    progress_printer,
    read_runs,
    replica_jobs,
    write_runs,
)
from tsched.compare.runner import parse_policies
from tsched.compare.simulator import SimConfig
from tsched.compare.study import Cell, run_cells
from tsched.stats import ci95, paired_ci95

RULES = ("fgd", "best-fit")
RULES_OF = ("none", "kai", "tsched")
# (study, queue): the regimes replayed, all under compact admission
REGIMES = (("philly", "fair"), ("philly", "backfill"), ("pollux-6", "backfill"))
RESTART = 300.0
MIN_RUNTIME = 1800.0


def label(rule: str, how: str) -> str:
    return rule if how == "none" else f"{rule}+{how}"


def cells(loads, replicas) -> list[Cell]:
    out = []
    names = [label(r, h) for r in RULES for h in RULES_OF]
    for name, queue in REGIMES:
        base = SimConfig(queue=queue, admission="compact", restart_cost=RESTART,
                         min_runtime=MIN_RUNTIME)  # fmt: skip
        configs = parse_policies(names, base)
        for load in loads:
            for rep in range(replicas):
                for cfg in configs:
                    out.append(Cell(f"{name}/{queue}", load, rep, replace(cfg, seed=rep),
                                    cfg.label))  # fmt: skip
    return out


def _jobs(cell: Cell, days: float) -> list:
    name = cell.trace.split("/")[0]
    trace, cluster = STUDIES[name]
    return replica_jobs(trace, cluster, cell.load, cell.replica, days if name in WINDOWED else None)


def _by(rs, key) -> dict:
    return {r.replica: getattr(r, key) if isinstance(key, str) else key(r) for r in rs}


def _one_gpu(r) -> float:
    return r.bucket_jct[0]


def _pct(m, lo, hi) -> str:
    if m != m:
        return "n/a"
    word = "lower" if hi < 0 else "higher" if lo > 0 else "no difference"
    return f"{m * 100:+.1f}% [{lo * 100:+.1f}, {hi * 100:+.1f}]: {word}"


def _ci_h(values) -> str:
    v = [x for x in values if x == x]
    if not v:
        return "–"
    m, _lo, hi = ci95(v)
    return f"{m / 3600:.2f} ± {(hi - m) / 3600:.2f}"


def analyse(rows) -> tuple[str, list[str], list[dict]]:
    """Tables per regime and load, goal verdicts, and the verdicts as records (for the plots)."""
    by = defaultdict(list)
    for r in rows:
        by[(r.trace, r.load, r.policy)].append(r)
    text, verdicts, goals = [], [], []
    for regime in dict.fromkeys(r.trace for r in rows):
        table = []
        for load in sorted({r.load for r in rows if r.trace == regime}):
            for rule in RULES:
                for how in RULES_OF:
                    rs = by.get((regime, load, label(rule, how)), [])
                    if not rs:
                        continue
                    base = by[(regime, load, rule)]
                    delivered = np.mean([r.delivered_gpu_hours for r in rs])
                    table.append([
                        f"{load:.2f}", label(rule, how), _ci_h([r.large_wait for r in rs]),
                        "" if how == "none" else _pct(*paired_ci95(_by(rs, "large_wait"),
                                                                   _by(base, "large_wait"))[:3]),
                        _ci_h([_one_gpu(r) for r in rs]),
                        "" if how == "none" else _pct(*paired_ci95(_by(rs, _one_gpu),
                                                                   _by(base, _one_gpu))[:3]),
                        _ci_h([r.work_wait for r in rs]), _ci_h([r.jct_mean for r in rs]),
                        f"{np.mean([r.blocked_gpu_hours for r in rs]):.0f}",
                        f"{np.mean([r.migrations for r in rs]):.0f}",
                        f"{np.mean([r.move_gpu_hours for r in rs]):.1f}",
                        f"{100 * np.mean([r.restart_gpu_hours for r in rs]) / delivered:.2f}",
                    ])  # fmt: skip
                goals.extend(_goals(regime, load, rule, by))
        text.append(f"\n## {regime.replace('/', ', ')} (compact admission)\n")
        text.append(markdown_table(
            ["load", "policy", ">8-GPU wait h", "paired vs none", "1-GPU JCT h",
             "paired vs none", "work-weighted wait h", "mean JCT h (no goal)", "blocked GPU-h",
             "moves", "move GPU-h", "restart % of delivered"],
            table,
        ))  # fmt: skip
    for g in goals:
        verdicts.append(g["text"])
    return "\n".join(text), verdicts, goals


def _goals(regime, load, rule, by) -> list[dict]:
    """The issue's goals for ``rule`` at ``load`` (1.0 and above)."""
    none = by.get((regime, load, rule))
    ours = by.get((regime, load, f"{rule}+tsched"))
    kai = by.get((regime, load, f"{rule}+kai"))
    if load < 1.0 or not (none and ours and kai):
        return []
    bf = by.get((regime, load, "best-fit"))
    wait = paired_ci95(_by(ours, "large_wait"), _by(none, "large_wait"))
    small = paired_ci95(_by(ours, _one_gpu), _by(none, _one_gpu))
    share = float(np.mean([r.restart_gpu_hours / r.delivered_gpu_hours for r in ours]))
    vs_kai = paired_ci95(_by(ours, "large_wait"), _by(kai, "large_wait"))
    moves = (np.mean([r.move_gpu_hours for r in ours]), np.mean([r.move_gpu_hours for r in kai]))
    blocked = paired_ci95(_by(ours, "blocked_gpu_hours"), _by(bf, "blocked_gpu_hours"))
    met_wait = wait[0] <= -0.30 and wait[2] < 0
    met_small = small[2] <= 0.03
    met_share = share <= 0.02
    same = vs_kai[1] <= 0 <= vs_kai[2]
    met_kai = (vs_kai[0] <= -0.15 and vs_kai[2] < 0) or (same and moves[0] <= moves[1] / 2) or (
        vs_kai[2] < 0 and moves[0] <= moves[1] / 2)
    met_blocked = blocked[0] <= -0.40 and blocked[2] < 0
    yes = {True: "met", False: "missed"}
    text = (
        f"- {regime} load {load:.2f}, {rule}+tsched: >8-GPU wait vs {rule} {_pct(*wait[:3])} "
        f"(goal ≤ −30 %: {yes[met_wait]}); 1-GPU JCT {_pct(*small[:3])} (goal ≤ +3 %, upper "
        f"bound: {yes[met_small]}); restarts {share * 100:.2f} % of delivered GPU-h (goal ≤ 2 %: "
        f"{yes[met_share]}); vs {rule}+kai wait {_pct(*vs_kai[:3])}, move GPU-h "
        f"{moves[0]:.1f} vs {moves[1]:.1f} (goal ≥ 15 % less wait or same wait with ≤ half the "
        f"restarts: {yes[met_kai]}); blocked GPU-h vs best-fit {_pct(*blocked[:3])} "
        f"(goal ≤ −40 %: {yes[met_blocked]})"
    )
    return [{"regime": regime, "load": load, "rule": rule, "wait": wait[:3], "small": small[:3],
             "share": share, "vs_kai": vs_kai[:3], "blocked": blocked[:3], "met_wait": met_wait,
             "met_small": met_small, "met_share": met_share, "met_kai": met_kai,
             "met_blocked": met_blocked, "text": text}]  # fmt: skip


def _mean(rs, key) -> float:
    v = [key(r) if callable(key) else getattr(r, key) for r in rs]
    v = [x for x in v if x == x]
    return float(np.mean(v)) if v else math.nan


def why(rows, goals) -> list[str]:
    """Where a goal is missed, the figures that say why (from the same replays)."""
    by = defaultdict(list)
    for r in rows:
        by[(r.trace, r.load, r.policy)].append(r)
    out = []
    for g in goals:
        regime, load, rule = g["regime"], g["load"], g["rule"]
        none, ours = by[(regime, load, rule)], by[(regime, load, f"{rule}+tsched")]
        what = []
        moves = _mean(ours, "migrations")
        if moves == 0:
            name = regime.split("/")[0]
            trace, cluster = STUDIES[name]
            jobs = replica_jobs(trace, cluster, load, 0, None)
            short = np.mean([j.duration < MIN_RUNTIME for j in jobs])
            what.append(
                f"no job was moved in any replica: {short:.0%} of the jobs run shorter than the "
                f"{MIN_RUNTIME:,.0f} s protection, so few running jobs are ever movable, and "
                f"little is stranded to win back (blocked GPU-h without consolidation: "
                f"{_mean(none, 'blocked_gpu_hours'):.0f}, of "
                f"{_mean(none, 'delivered_gpu_hours'):.0f} delivered)"
            )
        else:
            if not g["met_wait"]:
                b0, b1 = _mean(none, "blocked_gpu_hours"), _mean(ours, "blocked_gpu_hours")
                what.append(
                    f">8-GPU wait {g['wait'][0] * 100:+.1f}% (goal −30 %) although blocked "
                    f"GPU-h fell {b0:.0f} → {b1:.0f} ({(b1 / b0 - 1) * 100:+.0f}%): what is "
                    "left of the wait is not fragments but GPUs busy by count"
                    + (" and the tenants' shares" if "/fair" in regime else "")
                )
            if not g["met_small"]:
                fgd_none, fgd_ours = by[(regime, load, "fgd")], by[(regime, load, "fgd+tsched")]
                m, lo, hi = g["small"]
                text = f"1-GPU JCT {m * 100:+.1f}% [{lo * 100:+.1f}, {hi * 100:+.1f}] (goal ≤ +3 %)"
                if m <= 0.03:
                    text += ": the mean is within the goal, the interval's upper end is not"
                else:
                    text += (
                        f": without consolidation {rule}'s >8-GPU jobs wait "
                        f"{_mean(none, 'large_wait') / 3600:.2f} h and one-GPU jobs overtake "
                        f"them (1-GPU JCT {_mean(none, _one_gpu) / 3600:.2f} h; fgd's "
                        f"{_mean(fgd_none, _one_gpu) / 3600:.2f} h with its large jobs waiting "
                        f"{_mean(fgd_none, 'large_wait') / 3600:.2f} h); consolidated, the "
                        f"rules meet (1-GPU {_mean(ours, _one_gpu) / 3600:.2f} h against "
                        f"fgd+tsched's {_mean(fgd_ours, _one_gpu) / 3600:.2f} h) and the "
                        f"work-weighted wait falls {_mean(none, 'work_wait') / 3600:.2f} → "
                        f"{_mean(ours, 'work_wait') / 3600:.2f} h: the one-GPU jobs give back "
                        "what they took from the large ones while those waited"
                    )
                what.append(text)
            if not g["met_kai"]:
                m, lo, hi = g["vs_kai"]
                theirs = _mean(by[(regime, load, f"{rule}+kai")], "move_gpu_hours")
                share = _mean(ours, "move_gpu_hours") / theirs if theirs > 0 else math.nan
                what.append(
                    f"against KAI: wait {m * 100:+.1f}% [{lo * 100:+.1f}, {hi * 100:+.1f}] "
                    f"(goal −15 %, the interval below zero) with {share:.0%} of its move "
                    "GPU-hours (goal for the same wait: ≤ 50 %)"
                )
            if not g["met_blocked"]:
                what.append(f"blocked GPU-h vs best-fit {g['blocked'][0] * 100:+.1f}%")
        if what:
            out.append(f"- {regime} load {load:.2f}, {rule}+tsched: " + "; ".join(what))
    return out


def plot(rows, folder) -> list:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by = defaultdict(list)
    for r in rows:
        by[(r.trace, r.policy)].append(r)
    regimes = list(dict.fromkeys(r.trace for r in rows))
    colours = {"none": "0.4", "kai": "tab:orange", "tsched": "tab:blue"}
    panels = (("large_wait", ">8-GPU jobs' mean wait (h)", 3600.0),
              (_one_gpu, "1-GPU jobs' mean JCT (h)", 3600.0),
              ("blocked_gpu_hours", "blocked GPU-hours", 1.0),
              ("move_gpu_hours", "GPU-hours lost to moves", 1.0))  # fmt: skip
    fig, axes = plt.subplots(len(panels), len(regimes), figsize=(4.6 * len(regimes), 12.5),
                             squeeze=False)  # fmt: skip
    for col, regime in enumerate(regimes):
        loads = sorted({r.load for r in rows if r.trace == regime})
        for row, (key, title, scale) in enumerate(panels):
            ax = axes[row][col]
            for rule, ls in zip(RULES, ("-", ":"), strict=True):
                for how in RULES_OF:
                    rs = by.get((regime, label(rule, how)), [])
                    pts = []
                    for ld in loads:
                        v = [(key(r) if callable(key) else getattr(r, key)) / scale
                             for r in rs if r.load == ld]  # fmt: skip
                        v = [x for x in v if x == x]
                        pts.append(ci95(v) if v else (math.nan,) * 3)
                    m = np.array(pts)
                    ax.plot(loads, m[:, 0], ls=ls, marker="o", ms=3, color=colours[how],
                            label=label(rule, how))  # fmt: skip
                    ax.fill_between(loads, m[:, 1], m[:, 2], color=colours[how], alpha=0.08)
            ax.set_xlabel("offered load")
            ax.set_ylabel(title)
            ax.grid(alpha=0.3)
            if row == 0:
                ax.set_title(regime.replace("/", ", ") + ", compact")
    axes[0][0].legend(fontsize=7, ncol=2)
    fig.tight_layout()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "consolidation.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 loads, 3 replicas, 2 days")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--from-csv", metavar="CSV", help="rewrite the report from a runs.csv")
    args = parser.parse_args(argv)
    if args.quick:
        loads, replicas, days = [1.0, 1.2], 3, 2.0
    else:
        loads, replicas, days = [0.8, 1.0, 1.2, 1.4], 5, 4.0
    suffix = "-quick" if args.quick else ""
    folder = RESULTS / f"consolidation{suffix}"
    t0 = time.perf_counter()
    if args.from_csv:
        rows = read_runs(args.from_csv)
        minutes = float("nan")
    else:
        todo = cells(loads, replicas)
        rows = run_cells(todo, lambda c: _jobs(c, days),
                         lambda c: str(CLUSTERS / STUDIES[c.trace.split("/")[0]][1]),
                         workers=args.workers,
                         progress=progress_printer(len(todo), t0, 30))  # fmt: skip
        folder.mkdir(parents=True, exist_ok=True)
        write_runs(folder / "runs.csv", rows)
        minutes = (time.perf_counter() - t0) / 60
        (folder / "minutes.txt").write_text(f"{minutes:.2f}\n")
        (folder / "commit.txt").write_text(f"{commit()}\n")
    if minutes != minutes and (folder / "minutes.txt").exists():
        minutes = float((folder / "minutes.txt").read_text())
    ran = (folder / "commit.txt").read_text().strip() if (folder / "commit.txt").exists() else "?"
    tables, verdicts, goals = analyse(rows)
    pics = plot(rows, folder)
    cmd = "python -m benchmarks.consolidation" + (" --quick" if args.quick else "")
    tally = {k: sum(g[k] for g in goals) for k in
             ("met_wait", "met_small", "met_share", "met_kai", "met_blocked")}  # fmt: skip
    text = (
        "# Consolidation: none, KAI's rule, tsched's plan\n\n"
        f"`{cmd}` — {machine()}; {len(rows)} replays in {minutes:.1f} min, replayed at commit "
        f"`{ran}` (`runs.csv`; the replay's fingerprint test holds it unchanged since).\n\n"
        + __doc__.split("\n\n")[1].replace("\n", " ")
        + f"\n\nLoads {', '.join(f'{x:g}' for x in sorted({r.load for r in rows}))}; "
        f"{replicas} replicas a load; Philly {days:g} days a replica. `paired`: the Student-t "
        "95 % interval of the difference replica by replica, as a share of the other's mean. "
        "`restart %`: GPU-hours lost to every restart (preemptions and moves) over the GPU-hours "
        "the jobs held. The job-count mean JCT is reported and carries no goal.\n\n"
        f"## Goals at load ≥ 1.0 ({len(goals)} regime × load × rule points)\n\n"
        + "\n".join(f"- {k.removeprefix('met_')}: met at {v} of {len(goals)}"
                    for k, v in tally.items())  # fmt: skip
        + "\n\n## Where a goal is missed, and why\n\n"
        + "\n".join(why(rows, goals))
        + "\n\n## Verdicts\n\n"
        + "\n".join(verdicts)
        + "\n"
        + tables
        + "\n\nPlot: "
        + ", ".join(f"`{p.relative_to(RESULTS)}`" for p in pics)
        + "\n"
    )
    write_result(f"consolidation{suffix}", text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
