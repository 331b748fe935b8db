"""Scaling curve: seconds against cluster size for ``auto``, ``hierarchical`` and ``greedy``.

Leaf/spine fabrics of 8-GPU nodes from 1,024 to 131,072 GPUs, each with a 3D-parallel job on
a quarter of its GPUs (TP8 × PP8 × DP, 256 → 32,768 workers), whole and fragmented (a third of
the nodes half busy, a sixth fully busy). Every row is one fresh problem, so the seconds include
the lower bound and every cache warm-up; ``greedy`` is the construction alone, with the bound.
Targets: ``auto`` within 60 s for 4,096 workers on 16,384 GPUs on 2 cores, within 5 % of the
bound; 32,768 workers on 131,072 GPUs within 10 s and 3 %. Where ``scotch_gmap`` is
installed, Scotch's static mapping of the same problem is a column too
(:mod:`benchmarks._scotch`; mapping run only, no bound).

    python -m benchmarks.solver_scaling [--quick]
    python -m benchmarks.solver_scaling --cli [--repeats 5]

``--cli``: the whole command at 131,072 GPUs (``python -m tsched solve --json --quiet`` as a
child process, start-up and reading inside auto's 10 s default), whole and fragmented, as the
report's ``cli`` section.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import tsched
from benchmarks import _scotch as scotch
from benchmarks._common import machine, markdown_table, write_result
from benchmarks.clusters import fabric, job
from tsched.cluster import Cluster
from tsched.problem import PlacementProblem, objective

METHODS = ("auto", "hierarchical", "greedy")


def scatter(cluster: Cluster, seed: int = 0) -> Cluster:
    """A third of the nodes half busy and a sixth fully busy, chosen at random (seeded)."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(cluster.n_nodes)
    half, full = order[: cluster.n_nodes // 3], order[cluster.n_nodes // 3 : cluster.n_nodes // 2]
    busy = {cluster.nodes[i].name: sorted(rng.choice(8, 4, replace=False).tolist()) for i in half}
    busy.update({cluster.nodes[i].name: list(range(8)) for i in full})
    return cluster.with_busy(busy)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="up to 4,096 GPUs")
    parser.add_argument("--time-limit", type=float, default=None, help="auto's limit")
    parser.add_argument("--cli", action="store_true", help="the whole command at 131,072 GPUs")
    parser.add_argument("--repeats", type=int, default=5, help="CLI runs per cluster (--cli)")
    args = parser.parse_args(argv)
    if args.cli:
        return cli_runs(args.repeats)
    sizes = (1024, 2048, 4096) if args.quick else (1024, 2048, 4096, 8192, 16384, 131072)
    tsched.solve(  # compile the kernels outside the timings
        PlacementProblem.build(fabric(8, 4, 2), job(8, 2, 2)), method="hierarchical"
    )
    rows = []
    for gpus in sizes:
        nodes = gpus // 8
        base = fabric(nodes, 16, 8)
        workload = job(8, 8, gpus // 4 // 64)
        for label, cluster in (("whole", base), ("fragmented", scatter(base))):
            cells = [f"{gpus:,}", label, f"{workload.workers:,}"]
            for method in METHODS:
                problem = PlacementProblem.build(cluster, workload)
                start = time.perf_counter()
                limit = args.time_limit if method == "auto" else None
                result = tsched.solve(problem, method=method, seed=0, time_limit=limit)
                seconds = time.perf_counter() - start
                gap = "" if result.gap is None else f"{100 * result.gap:.2f}"
                cells += [f"{seconds:.2f}", f"{result.objective:.2f}", gap]
            if scotch.available():
                problem = PlacementProblem.build(cluster, workload)
                assignment, seconds, note = scotch.scotch_map(problem)
                value = note if assignment is None else f"{objective(problem, assignment):.2f}"
                cells += [f"{seconds:.2f}", value]
            rows.append(cells)
            print(" | ".join(cells), flush=True)
    header = ["GPUs", "cluster", "workers"]
    for method in METHODS:
        header += [f"{method} s", f"{method} objective", f"{method} gap %"]
    if scotch.available():
        header += ["Scotch s", "Scotch objective"]
    text = "\n".join(
        [
            "# Scaling curve\n",
            f"Machine: {machine()}\n",
            f"Command: `python -m benchmarks.solver_scaling{' --quick' if args.quick else ''}`\n",
            "Seconds per fresh problem, bound included (the gap is to tsched's best lower "
            "bound: the packing bound, sparse at any size).\n",
            markdown_table(header, rows) + "\n",
        ]
    )
    print(text)
    write_result("solver_scaling-quick" if args.quick else "solver_scaling", text)
    return 0


#: The 131,072-GPU fabric of the table as a cluster file (``generate`` form, as
#: :func:`benchmarks.clusters.fabric` builds it) and the job as a workload file.
CLI_CLUSTER = """tsched: cluster/v1
name: fabric-131072
links: {nvlink: {bandwidth: 450}, leaf: {bandwidth: 50}, spine: {bandwidth: 50},
        core: {bandwidth: 25}}
levels: [leaf, spine, core]
node_types:
  dgx: {gpus: 8, gpu: {model: H100}, intra: nvlink}
generate:
  - {type: dgx, count: 16384, fanout: {leaf: 16, spine: 8}, at: {core: c0}}
"""
CLI_WORKLOAD = """tsched: workload/v1
name: tp8-pp8-dp512
layout: {tp: 8, pp: 8, dp: 512}
model: {params_b: 70, hidden: 8192, layers: 80, seq_len: 8192, micro_batch: 1,
        micro_batches: 16}
"""


def _busy_yaml(cluster: Cluster) -> str:
    """The fragmented table's busy GPUs as a cluster file's ``busy:`` map."""
    lines = ["busy:"]
    lines += [f"  {node.name}: {list(node.busy)}" for node in cluster.nodes if node.busy]
    return "\n".join(lines) + "\n"


def cli_runs(repeats: int) -> int:
    """``--cli``: wall seconds, status and gap of the whole command, ``repeats`` times per
    cluster (whole; fragmented as in the table), written as the ``cli`` section."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        workload = Path(tmp) / "job.yaml"
        workload.write_text(CLI_WORKLOAD)
        whole = Path(tmp) / "whole.yaml"
        whole.write_text(CLI_CLUSTER)
        fragmented = Path(tmp) / "fragmented.yaml"
        fragmented.write_text(CLI_CLUSTER + _busy_yaml(scatter(fabric(16384, 16, 8))))
        for label, cluster in (("whole", whole), ("fragmented", fragmented)):
            runs = []
            for _ in range(repeats):
                cmd = [sys.executable, "-m", "tsched", "solve", "--cluster", str(cluster),
                       "--workload", str(workload), "--json", "--quiet"]  # fmt: skip
                start = time.perf_counter()
                out = subprocess.run(cmd, check=True, capture_output=True, text=True)
                runs.append((time.perf_counter() - start, json.loads(out.stdout)))
                doc = runs[-1][1]
                print(f"{label}: {runs[-1][0]:.2f} s, {doc['status']}, "
                      f"gap {100 * doc['gap']:.2f} %", flush=True)  # fmt: skip
            gaps = [100 * doc["gap"] for _, doc in runs]
            walls = [wall for wall, _ in runs]
            rows.append([label, repeats, f"{statistics.median(walls):.2f}",
                         f"{min(walls):.2f}–{max(walls):.2f}", f"{statistics.median(gaps):.2f}",
                         f"{min(gaps):.2f}–{max(gaps):.2f}",
                         sum(wall <= 10.0 for wall in walls)])  # fmt: skip
    header = ["cluster", "runs", "median s", "s range", "median gap %", "gap range %",
              "runs within 10 s"]  # fmt: skip
    text = "\n".join(
        [
            "# cli\n",
            f"Machine: {machine()}\n",
            f"Command: `python -m benchmarks.solver_scaling --cli --repeats {repeats}`\n",
            "32,768 workers (TP8 × PP8 × DP512) on the 131,072-GPU fabric of the table, whole "
            "and fragmented as there, by the whole command: `python -m tsched solve --cluster "
            "FILE --workload FILE --json --quiet` as a child process, default method (`auto`, "
            "10 s), wall time including start-up and reading the files.\n",
            markdown_table(header, rows) + "\n",
        ]
    )
    print(text)
    write_result("solver_scaling", text, section="cli")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
