"""Where a policy's lower mean JCT comes from, and fgd on clusters it was not tuned on.

Two parts, each replayed with ``backfill`` (EASY), five jittered replicas per point (the
replicas of :mod:`benchmarks.cluster_policies`), Student-t 95 % intervals:

* **Queue order** (the Philly sample on ``dgx-a100-32node``, first 4 days). For every policy,
  next to the job-count mean JCT and mean wait, the *work-weighted* mean wait: each job's wait
  weighted by its GPU-time (GPUs × compact run time), Σ g·d·w / Σ g·d. A placement that lets the
  cluster do more work lowers both means; a policy that only reorders the queue (small jobs
  overtake large ones) lowers the count mean and raises the work-weighted one. On a
  single-server queue the work-weighted wait of non-preemptive, work-conserving orders is
  fixed (Kleinrock's conservation law); for gangs on many GPUs it is not a law, so it is
  measured here.
* **Held out**: fgd against every baseline on pairs of trace and cluster that neither fgd's
  rules nor its figures were tuned on: Pollux workload 6 and the Philly sample (first 2 days)
  on ``hgx-h200-16node`` (16 × 8 H200 on NVLink, 8 NICs a server, some GPUs busy), both
  admission regimes.

Writes ``benchmarks/results/queue_order.md`` (``-quick``: fewer loads and replicas).

    python -m benchmarks.queue_order [--quick] [--workers N]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace

import numpy as np

from benchmarks._common import machine, markdown_table, write_result
from benchmarks.cluster_policies import (
    BASELINES,
    STUDIES,
    _fmt_ci,
    cluster_file,
    paired_text,
    replica_jobs,
)
from tsched.compare.runner import parse_policies
from tsched.compare.simulator import SimConfig, simulate
from tsched.compare.study import work_weighted_wait
from tsched.stats import ci95

PHILLY, DGX = STUDIES["philly"]
POLLUX = STUDIES["pollux-6"][0]
HELD_OUT = "hgx-h200-16node.yaml"
ORDER_POLICIES = ["best-fit", "whole-nodes", "spread", "fgd"]


def replay(trace: str, cluster: str, days: float | None, load: float, rep: int,
           admission: str, policy: str) -> dict[str, float]:  # fmt: skip
    """One replay: job-count mean JCT and wait, the work-weighted wait, p99 JCT (hours)."""
    jobs = replica_jobs(trace, cluster, load, rep, days)
    cfg = parse_policies([policy], SimConfig(queue="backfill", admission=admission))[0]
    res = simulate(jobs, cluster_file(cluster), replace(cfg, seed=rep))
    dur = {j.name: j.duration for j in jobs}
    g = np.array([r.gpus for r in res.records], dtype=float)
    d = np.array([dur[r.job] for r in res.records])
    w = np.array([r.queue_delay for r in res.records])
    jct = np.array([r.jct for r in res.records])
    return {
        "mean": float(jct.mean()) / 3600,
        "p99": float(np.percentile(jct, 99)) / 3600,
        "wait": float(w.mean()) / 3600,
        "work_wait": work_weighted_wait(g, d, w) / 3600,
    }


def _fmt(values) -> str:
    """Mean ± Student-t 95 % half-width of figures in hours."""
    return _fmt_ci(*ci95(values), scale=1.0)


def _run(tasks, workers):
    if workers <= 1:
        return [replay(*t) for t in tasks]
    with ProcessPoolExecutor(workers) as pool:
        return list(pool.map(replay, *zip(*tasks, strict=True)))


def _paired_text(ours, theirs) -> str:
    """The paired interval of two lists of figures, replica by replica."""
    return paired_text(dict(enumerate(ours)), dict(enumerate(theirs)))


def queue_order(loads, reps, workers) -> str:
    tasks = [(PHILLY, DGX, 4.0, load, rep, adm, pol)
             for adm in ("any", "compact") for load in loads for pol in ORDER_POLICIES
             for rep in range(reps)]  # fmt: skip
    out = dict(zip(tasks, _run(tasks, workers), strict=True))
    rows = []
    for adm in ("any", "compact"):
        for load in loads:
            ref = [out[(PHILLY, DGX, 4.0, load, r, adm, "best-fit")]
                   for r in range(reps)]  # fmt: skip
            for pol in ORDER_POLICIES:
                rs = [out[(PHILLY, DGX, 4.0, load, r, adm, pol)]
                      for r in range(reps)]  # fmt: skip
                vs = ""
                if pol != "best-fit":
                    mean = _paired_text([x["mean"] for x in rs], [x["mean"] for x in ref])
                    ww = _paired_text([x["work_wait"] for x in rs], [x["work_wait"] for x in ref])
                    vs = f"mean {mean}; work-weighted wait {ww}"
                rows.append([adm, f"{load:g}", pol, _fmt([x["mean"] for x in rs]),
                             _fmt([x["wait"] for x in rs]), _fmt([x["work_wait"] for x in rs]),
                             vs])  # fmt: skip
    return markdown_table(["admission", "load", "policy", "mean JCT h", "mean wait h",
                           "work-weighted wait h", "paired vs best-fit"], rows)  # fmt: skip


def held_out(loads, reps, workers) -> str:
    pairs = [("pollux-6", POLLUX, None), ("philly (2 days)", PHILLY, 2.0)]
    cluster = HELD_OUT
    pols = [*BASELINES, "fgd"]
    tasks = [(trace, cluster, days, load, rep, adm, pol)
             for _, trace, days in pairs for adm in ("any", "compact") for load in loads
             for pol in pols for rep in range(reps)]  # fmt: skip
    out = dict(zip(tasks, _run(tasks, workers), strict=True))
    rows = []
    for label, trace, days in pairs:
        for adm in ("any", "compact"):
            for load in loads:
                res = {p: [out[(trace, cluster, days, load, r, adm, p)] for r in range(reps)]
                       for p in pols}  # fmt: skip
                best = min(BASELINES, key=lambda p: np.mean([x["mean"] for x in res[p]]))
                best99 = min(BASELINES, key=lambda p: np.mean([x["p99"] for x in res[p]]))
                ours = res["fgd"]
                fm = np.mean([x["mean"] for x in ours])
                bhi = ci95([x["mean"] for x in res[best]])[2]
                rows.append([
                    label, adm, f"{load:g}", _fmt([x["mean"] for x in ours]),
                    f"{best} {_fmt([x['mean'] for x in res[best]])}",
                    _paired_text([x["mean"] for x in ours], [x["mean"] for x in res[best]]),
                    "yes" if fm <= bhi else "no",
                    f"{_fmt([x['p99'] for x in ours])} vs {best99} "
                    f"{_fmt([x['p99'] for x in res[best99]])}",
                    f"{_fmt([x['work_wait'] for x in ours])} vs "
                    f"{_fmt([x['work_wait'] for x in res[best]])}",
                ])  # fmt: skip
    return markdown_table(["trace", "admission", "load", "fgd mean JCT h", "best baseline (mean)",
                           "fgd vs it, paired", "fgd no worse within its CI",
                           "p99 h: fgd vs best baseline (p99)",
                           "work-weighted wait h: fgd vs best (mean)"], rows)  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one load, 3 replicas")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args(argv)
    reps = 3 if args.quick else 5
    order_loads = [1.0] if args.quick else [1.0, 1.2]
    held_loads = [1.2] if args.quick else [0.9, 1.2]
    t0 = time.perf_counter()
    print("queue order …", file=sys.stderr, flush=True)
    order = queue_order(order_loads, reps, args.workers)
    print("held out …", file=sys.stderr, flush=True)
    held = held_out(held_loads, reps, args.workers)
    minutes = (time.perf_counter() - t0) / 60
    cmd = "python -m benchmarks.queue_order" + (" --quick" if args.quick else "")
    text = (
        f"# Queue order and held-out clusters\n\n`{cmd}` — {machine()}; {minutes:.1f} min "
        f"({args.workers} processes). `backfill` (EASY); {reps} jittered replicas a point (1 % "
        "of the jobs left out, arrivals moved by up to ±5 minutes); ± is the Student-t 95 % "
        "half-width; `paired`: the interval of the difference replica by replica, as a share "
        "of the other policy's mean.\n\n"
        "## Where a lower mean JCT comes from (Philly sample, `dgx-a100-32node`, 4 days)\n\n"
        "Work-weighted wait: each job's wait weighted by its GPUs × compact run time. A policy "
        "that does more work in the same time lowers it; one that only lets small jobs "
        "overtake large ones raises it while the job-count mean falls (on one server the "
        "work-weighted wait of every non-preemptive, work-conserving order is the same: "
        "Kleinrock's conservation law).\n\n"
        + order
        + "\n\n## Held out: `hgx-h200-16node` (16 × 8 H200, NVLink, 8 NICs a server)\n\n"
        "Neither trace was replayed on this cluster while fgd's rules were chosen. "
        "`no worse within its CI`: fgd's mean at most the upper end of the best baseline's "
        "interval (the first goal of `cluster_policies.md`).\n\n" + held + "\n"
    )
    write_result("queue_order" + ("-quick" if args.quick else ""), text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
