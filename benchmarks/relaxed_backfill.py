"""Relaxed backfilling against placement: which moves the mean job completion time.

EASY backfilling lets a later job start only if it leaves the head job's reservation alone.
Relaxed backfilling (``+slackS``, :class:`tsched.compare.simulator.SimConfig`) lets it start if
the head's start slips by at most ``S`` × the head's run time, the bound fixed when the job first
heads the queue. The slack is a queue discipline, open to every placement rule, so it is
measured on two of them (``best-fit`` and ``fgd``) at several slacks, next to every baseline
with plain EASY: the same replicas, loads and intervals as :mod:`benchmarks.cluster_policies`
(the Philly sample, first 4 days, on ``dgx-a100-32node``; all of Pollux workload 6 on
``g4dn-12xlarge-16node``; jittered replicas; Student-t 95 % intervals; paired intervals
replica by replica).

Writes ``benchmarks/results/relaxed_backfill.md``, ``relaxed_backfill/runs.csv`` and a plot
(``-quick``: two loads, three replicas, two days of Philly).

    python -m benchmarks.relaxed_backfill [--quick] [--workers N] [--from-csv CSV]
"""

from __future__ import annotations

import argparse
import os
import time
from collections import defaultdict
from dataclasses import replace

import numpy as np

from benchmarks._common import RESULTS, machine, markdown_table, write_result
from benchmarks.cluster_policies import (
    BASELINES,
    CLUSTERS,
    STUDIES,
    WINDOWED,
    _fmt_ci,
    cluster_file,
    paired_text,
    progress_printer,
    read_runs,
    replica_jobs,
    write_runs,
)
from tsched.compare.runner import parse_policies
from tsched.compare.simulator import SimConfig
from tsched.compare.study import Cell, buckets, run_cells
from tsched.stats import ci95

SLACKS = (0.1, 0.25, 0.5, 1.0)
RELAXED = ("best-fit", "fgd")  # the rules measured with each slack


def policies(slacks) -> list[str]:
    """Every baseline and fgd with plain EASY; best-fit and fgd with each slack."""
    return [*BASELINES, "fgd", *(f"{r}+slack{s:g}" for s in slacks for r in RELAXED)]


def cells(loads, replicas, slacks) -> list[Cell]:
    out = []
    for name in STUDIES:
        for adm in ("any", "compact"):
            configs = parse_policies(policies(slacks), SimConfig(queue="backfill", admission=adm))
            for load in loads:
                for rep in range(replicas):
                    for cfg in configs:
                        out.append(Cell(f"{name}/{adm}", load, rep, replace(cfg, seed=rep),
                                        cfg.label))  # fmt: skip
    return out


def _jobs(cell: Cell, days: float) -> list:
    name = cell.trace.split("/")[0]
    trace, cluster = STUDIES[name]
    return replica_jobs(trace, cluster, cell.load, cell.replica, days if name in WINDOWED else None)


def _stats(rs) -> dict:
    return {
        "mean": ci95([r.jct_mean for r in rs]),
        "p99": ci95([r.jct_p99 for r in rs]),
        "buckets": [float(np.mean([r.bucket_jct[k] for r in rs])) for k in range(4)],
        "by": {
            "mean": {r.replica: r.jct_mean for r in rs},
            "p99": {r.replica: r.jct_p99 for r in rs},
        },
    }


def analyse(rows, slacks) -> tuple[str, list[str]]:
    by = defaultdict(list)
    for r in rows:
        by[(r.trace, r.load, r.policy)].append(r)
    text, verdicts = [], []
    for key in sorted(
        {r.trace for r in rows}, key=lambda k: (list(STUDIES).index(k.split("/")[0]), k)
    ):
        name, adm = key.split("/")
        names_b = buckets(int(cluster_file(STUDIES[name][1]).gpus_per_node.max()))
        table = []
        for load in sorted({r.load for r in rows if r.trace == key}):
            st = {p: _stats(by[(key, load, p)]) for p in policies(slacks) if by.get((key, load, p))}
            base = [p for p in BASELINES if p in st]
            best = min(base, key=lambda p: st[p]["mean"][0])
            best_p99 = min(base, key=lambda p: st[p]["p99"][0])
            for pol, s in st.items():
                rule = pol.split("+slack")[0]
                vs_plain = (
                    paired_text(s["by"]["mean"], st[rule]["by"]["mean"]) if pol != rule else ""
                )
                table.append([
                    f"{load:.2f}", pol, _fmt_ci(*s["mean"]), _fmt_ci(*s["p99"]),
                    *("–" if np.isnan(b) else f"{b / 3600:.2f}" for b in s["buckets"]),
                    vs_plain,
                    "best baseline (mean)" if pol == best else
                    paired_text(s["by"]["mean"], st[best]["by"]["mean"]) if pol not in base
                    else "",
                ])  # fmt: skip
            for slack in slacks:
                ours, theirs = st.get(f"fgd+slack{slack:g}"), st.get(f"best-fit+slack{slack:g}")
                if ours is None:
                    continue
                b = st[best]
                gain = 1 - ours["mean"][0] / b["mean"][0]
                apart = ours["mean"][2] < b["mean"][1] or ours["mean"][1] > b["mean"][2]
                no_worse = ours["mean"][0] <= b["mean"][2]
                worst = max(
                    (ours["buckets"][k] / b["buckets"][k] - 1, names_b[k])
                    for k in range(4)
                    if not (np.isnan(b["buckets"][k]) or np.isnan(ours["buckets"][k]))
                )
                p99 = ours["p99"][0] / st[best_p99]["p99"][0] - 1
                verdicts.append(
                    f"- {name} `{adm}` load {load:.2f}, fgd+slack{slack:g}: mean "
                    f"{-gain * 100:+.1f}% vs {best} ({'CIs apart' if apart else 'CIs overlap'}; "
                    f"no worse within its CI: {'yes' if no_worse else 'no'}), worst bucket "
                    f"{worst[1]} {worst[0] * 100:+.1f}%, p99 {p99 * 100:+.1f}% vs {best_p99}; "
                    f"vs best-fit+slack{slack:g} (the same slack, best fit's placement): mean "
                    + (paired_text(ours["by"]["mean"], theirs["by"]["mean"]) if theirs else "n/a")
                )
        text.append(f"\n## {name}, `{adm}` admission\n")
        text.append(markdown_table(
            ["load", "policy", "mean JCT h (95% CI)", "p99 JCT h", *[f"{b} h" for b in names_b],
             "paired mean vs the same rule, EASY", "paired mean vs best baseline"],
            table,
        ))  # fmt: skip
    return "\n".join(text), verdicts


def plot(rows, slacks, folder) -> list:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by = defaultdict(list)
    for r in rows:
        by[(r.trace, r.policy)].append(r)
    keys = sorted({r.trace for r in rows})
    fig, axes = plt.subplots(1, len(keys), figsize=(5 * len(keys), 4.2), squeeze=False)
    for ax, key in zip(axes[0], keys, strict=True):
        loads = sorted({r.load for r in rows if r.trace == key})
        best = {}  # the best plain baseline's mean at each load
        for ld in loads:
            means = {p: np.mean([r.jct_mean for r in by[(key, p)] if r.load == ld])
                     for p in BASELINES if by.get((key, p))}  # fmt: skip
            best[ld] = min(means.values()) / 3600
        ax.plot(loads, [best[ld] for ld in loads], color="0.5", lw=3, alpha=0.5,
                label="best baseline, EASY")  # fmt: skip
        cmap = matplotlib.colormaps["viridis"]
        for i, s in enumerate((0.0, *slacks)):
            for rule, ls in (("fgd", "-"), ("best-fit", ":")):
                pol = rule if s == 0 else f"{rule}+slack{s:g}"
                pts = [ci95([r.jct_mean / 3600 for r in by[(key, pol)] if r.load == ld])
                       for ld in loads]  # fmt: skip
                m = np.array(pts)
                colour = "black" if s == 0 else cmap(i / (len(slacks) + 0.5))
                ax.plot(loads, m[:, 0], ls=ls, marker="o", ms=3, color=colour, label=pol)
                if rule == "fgd":
                    ax.fill_between(loads, m[:, 1], m[:, 2], color=colour, alpha=0.1)
        ax.set_yscale("log")
        ax.set_xlabel("offered load")
        ax.set_ylabel("mean JCT (h), fgd with 95% band")
        ax.set_title(key.replace("/", ", ") + " admission")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=6, ncol=2)
    fig.tight_layout()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "mean-jct.png"
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
        loads, replicas, days, slacks = [0.9, 1.2], 3, 2.0, (0.25, 1.0)
    else:
        loads, replicas, days, slacks = [0.6, 0.8, 0.9, 1.0, 1.2, 1.4], 5, 4.0, SLACKS
    suffix = "-quick" if args.quick else ""
    folder = RESULTS / f"relaxed_backfill{suffix}"
    t0 = time.perf_counter()
    if args.from_csv:
        rows = read_runs(args.from_csv)
        minutes = float("nan")
    else:
        todo = cells(loads, replicas, slacks)
        rows = run_cells(todo, lambda c: _jobs(c, days),
                         lambda c: str(CLUSTERS / STUDIES[c.trace.split("/")[0]][1]),
                         workers=args.workers,
                         progress=progress_printer(len(todo), t0, 50))  # fmt: skip
        folder.mkdir(parents=True, exist_ok=True)
        write_runs(folder / "runs.csv", rows)
        minutes = (time.perf_counter() - t0) / 60
        (folder / "minutes.txt").write_text(f"{minutes:.2f}\n")
    if minutes != minutes and (folder / "minutes.txt").exists():
        minutes = float((folder / "minutes.txt").read_text())
    tables, verdicts = analyse(rows, slacks)
    pics = plot(rows, slacks, folder)
    cmd = "python -m benchmarks.relaxed_backfill" + (" --quick" if args.quick else "")
    text = (
        "# Relaxed backfilling against placement\n\n"
        f"`{cmd}` — {machine()}; {len(rows)} replays in {minutes:.1f} min.\n\n"
        + __doc__.split("\n\n")[1].replace("\n", " ")
        + f"\n\nLoads {', '.join(f'{x:g}' for x in sorted({r.load for r in rows}))}; "
        f"{replicas} replicas a load; Philly {days:g} days a replica. Slacks "
        + ", ".join(f"{s:g}" for s in slacks)
        + " (shares of the head's run time). `paired`: the Student-t 95 % interval of the "
        "difference replica by replica, as a share of the other's mean.\n\n## Verdicts\n\n"
        + "\n".join(verdicts)
        + "\n"
        + tables
        + "\n\nPlot: "
        + ", ".join(f"`{p.relative_to(RESULTS)}`" for p in pics)
        + "\n"
    )
    write_result(f"relaxed_backfill{suffix}", text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
