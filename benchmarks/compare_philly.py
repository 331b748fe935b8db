"""Placement policies on the four-week Philly sample (46,070 jobs) and on Pollux workload 6.

Three comparisons, each a matched trace (every policy replays the same jobs in the same order
with the same seed), written under ``benchmarks/results/compare/<name>/`` (records, summary,
report and plots) with the headline table in ``benchmarks/results/compare_philly.md``:

* ``philly-1024``: Philly on ``fabric-1024`` (128 DGX H100). Target: ≤ 2 minutes per policy with
  ``greedy`` placement.
* ``philly-256``: Philly on ``dgx-a100-32node`` (256 GPUs), a loaded cluster where queue policies
  and placement matter; FIFO and fair share.
* ``pollux-6``: Pollux workload 6 on its own testbed (``g4dn-12xlarge-16node``, 64 T4).

    python -m benchmarks.compare_philly [--quick]
"""

from __future__ import annotations

import argparse
import json
import time

import tsched
from benchmarks._common import RESULTS, ROOT, machine, markdown_table, write_result
from tsched.compare.report import write_report
from tsched.compare.runner import parse_policies, sweep
from tsched.compare.simulator import SimConfig
from tsched.compare.traces import load_trace

TRACES = ROOT / "tests" / "data" / "traces"
CLUSTERS = ROOT / "models" / "clusters"


def study(name, trace, cluster_file, policies, queue, limit=None, folder="compare"):
    cluster = tsched.load_cluster(CLUSTERS / cluster_file)
    usable = int((~cluster.busy_mask).sum())
    jobs = load_trace(TRACES / trace, limit=limit, max_gpus=usable)
    configs = parse_policies(policies, SimConfig(queue=queue))
    start = time.perf_counter()
    results = sweep(jobs, cluster, configs)
    total = time.perf_counter() - start
    out = RESULTS / folder / name
    paths = write_report(out, results, usable_gpus=usable,
                         title=f"{trace} on {cluster.name} ({queue})")  # fmt: skip
    print(f"{name}: {len(jobs)} jobs, {len(configs)} policies, {total:.0f} s")
    summary = json.loads(paths[2].read_text())  # summary.json: what the report shows
    rows = []
    for s in summary["runs"]:
        p = summary["paired_with_baseline"].get(s["label"], {"jct_ratio_geomean": 1.0})
        rows.append([
            name, cluster.name, queue, f"{len(jobs):,}", s["label"],
            f"{s['jct_mean'] / 3600:.2f}", f"{s['jct_p50'] / 3600:.2f}",
            f"{s['jct_p95'] / 3600:.2f}", f"{s['jct_p99'] / 3600:.2f}",
            f"{s['queue_delay_mean'] / 3600:.2f}", f"{s['utilisation']:.1%}",
            f"{s['multi_node_jobs']}", f"{p['jct_ratio_geomean']:.3f}",
            f"{s['simulation_seconds']:.1f}",
        ])  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="first 5,000 Philly jobs")
    args = parser.parse_args(argv)
    limit = 5000 if args.quick else None
    folder = "compare-quick" if args.quick else "compare"  # never overwrite the full results
    philly = "philly_jobs_pollux_2017-10-02_2017-10-30.csv"
    rows = []
    rows += study("philly-1024", philly, "fabric-1024.yaml", "greedy,pack,random,kai-tas",
                  "fifo", limit, folder)  # fmt: skip
    for queue in ("fifo", "fair"):
        rows += study(f"philly-256-{queue}", philly, "dgx-a100-32node.yaml",
                      "greedy,pack,random,kai-tas,greedy+frag", queue, limit, folder)  # fmt: skip
    for queue in ("fifo", "backfill"):
        rows += study(f"pollux-6-{queue}", "pollux_workload-6.csv", "g4dn-12xlarge-16node.yaml",
                      "greedy,pack,random,spread,kai-tas,greedy+frag,auto", queue,
                      folder=folder)  # fmt: skip
    header = ["study", "cluster", "queue", "jobs", "policy", "avg JCT h", "p50 h", "p95 h",
              "p99 h", "avg queue h", "utilisation", "multi-node jobs",
              "JCT geo-mean vs first", "sim s"]  # fmt: skip
    table = markdown_table(header, rows)
    print(table)
    cmd = "python -m benchmarks.compare_philly" + (" --quick" if args.quick else "")
    write_result(
        "compare_philly" + ("-quick" if args.quick else ""),
        f"# Placement policies on real traces\n\n`{cmd}` — {machine()}\n\n"
        "Matched traces: each study replays the same jobs in the same order with seed 0; "
        "'JCT geo-mean vs first' pairs every job with its JCT under the study's first policy. "
        "Folders with records, summary, report and plots: `benchmarks/results/compare/`.\n\n"
        + table
        + "\n",
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
