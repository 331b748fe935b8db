"""Scale run of the core: cluster build, distance matrix, and greedy vs baselines at 16,384 GPUs.

Measures, side by side in one process (medians of repeats):

1. reading the 16,384-GPU fabric (``generate`` form) and the explicit 2,048-node form;
2. the full 16,384 x 16,384 distance matrix;
3. ``tsched solve --cluster models/clusters/fabric-16384.yaml --workload
   models/workloads/gpt3-175b-tp8-pp8-dp64.yaml --json`` as a subprocess (the whole CLI,
   start-up included; default method and greedy), with the workload as ``layout:`` and as an
   explicit block-style traffic list, wall time and peak memory;
4. greedy and the baselines (pack, spread, random, kai-tas) on the same 4,096-worker problem,
   whole and fragmented (a third of the nodes half busy), with objective, bound and gap, and
   Scotch's static mapping (``scotch_gmap`` onto a ``tleaf`` target, see ``benchmarks/_scotch.py``)
   where it is installed, timed as the mapping run alone and scored with tsched's objective;
5. stages by size, 64 to 131,072 GPUs (``--quick``: to 16,384): leaf/spine/core fabrics of
   DGX H100 nodes (16 per leaf, 8 leaves per spine group) with a TP8 × PP8 × DP job on a quarter
   of the GPUs; each stage timed in-process on fresh objects (read the cluster and workload
   files, build the problem, greedy's construction, each lower bound cheapest first), then the
   whole CLI (``--method greedy`` and ``auto``) as a subprocess with its wall time and peak
   memory (``ru_maxrss`` of the child).

    python -m benchmarks.core_at_scale [--quick]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import tsched
from benchmarks import _scotch as scotch
from benchmarks._common import ROOT, machine, markdown_table, timed, write_result

CLUSTER = ROOT / "models/clusters/fabric-16384.yaml"
WORKLOAD = ROOT / "models/workloads/gpt3-175b-tp8-pp8-dp64.yaml"
METHODS = ("greedy", "kai-tas", "pack", "spread", "random")


def fragmented(cluster: tsched.Cluster, seed: int = 0) -> tsched.Cluster:
    """A third of the nodes get 4 of their 8 GPUs busy, chosen at random (seeded)."""
    rng = np.random.default_rng(seed)
    nodes = rng.choice(cluster.n_nodes, cluster.n_nodes // 3, replace=False)
    busy = {cluster.nodes[i].name: sorted(rng.choice(8, 4, replace=False).tolist()) for i in nodes}
    return cluster.with_busy(busy)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    args = parser.parse_args(argv)
    repeats = 1 if args.quick else 3
    lines = [
        f"# Core scale run\n\nMachine: {machine()}\n",
        f"Command: `python -m benchmarks.core_at_scale{' --quick' if args.quick else ''}` "
        f"(medians of {repeats} runs)\n",
    ]

    t_gen, _, cluster = timed(lambda: tsched.read_cluster(CLUSTER), repeats)
    with tempfile.TemporaryDirectory() as tmp:
        explicit = Path(tmp) / "explicit.yaml"
        tsched.write_cluster(cluster, explicit)
        t_exp, _, _ = timed(lambda: tsched.read_cluster(explicit), repeats)
    t_dist, _, _ = timed(lambda: cluster.distance_matrix().shape, repeats)
    t_wl, _, workload = timed(lambda: tsched.read_workload(WORKLOAD), repeats)
    rows = [
        ["read cluster (generate form, 2,048 nodes)", f"{t_gen:.3f}"],
        ["read cluster (explicit form, 2,048 nodes)", f"{t_exp:.3f}"],
        ["distance matrix 16,384 x 16,384 (float64)", f"{t_dist:.3f}"],
        [f"read workload ({workload.workers} workers, {workload.n_edges} edges)", f"{t_wl:.3f}"],
    ]

    lines.append("## Timings (seconds)\n\n" + markdown_table(["step", "median s"], rows) + "\n")
    lines.append(whole_commands(workload, repeats))

    for label, cl in (("whole", cluster), ("fragmented", fragmented(cluster))):
        problem = tsched.PlacementProblem.build(cl, workload)
        table = []
        best = None
        results = {}
        for method in METHODS:
            t, _, r = timed(lambda m=method, p=problem: tsched.solve(p, method=m, seed=0), repeats)
            results[method] = (t, r)
            best = r.objective if best is None else min(best, r.objective)
        for method, (t, r) in results.items():
            table.append(
                [
                    method,
                    r.status,
                    f"{r.objective:.2f}",
                    f"{r.bound:.2f}",
                    f"{100 * r.gap:.1f}",
                    f"{r.objective / best:.3f}",
                    f"{t:.3f}",
                ]
            )
        if scotch.available():
            assignment, seconds, note = scotch.scotch_map(problem)
            if assignment is None:
                table.append(["scotch_gmap", note, "-", "-", "-", "-", f"{seconds:.3f}"])
            else:
                value = tsched.objective(problem, assignment)
                bound = results["greedy"][1].bound
                table.append(["scotch_gmap", "feasible", f"{value:.2f}", f"{bound:.2f}",
                              f"{100 * (value - bound) / value:.1f}", f"{value / best:.3f}",
                              f"{seconds:.3f}"])  # fmt: skip
        free = int(cl.free_mask().sum())
        lines.append(
            f"## {workload.name} on {cl.name}, {label} ({free} free GPUs)\n\n"
            + markdown_table(
                ["method", "status", "objective s", "bound s", "gap %", "vs best", "median s"],
                table,
            )
            + "\n"
        )
    lines.append(
        "Bounds: the best bound tsched knows for the problem without search (`packing`: each "
        "level's cut bounded by the traffic no spread over the domains keeps inside them, by "
        "the lines of the layout each domain must touch, or by the traffic Laplacian's "
        "eigenvalues). It is computed once per problem (a tenth of a second or so for "
        "layouts, from their product structure: the stage table below; inside the CLI times "
        "above) and cached, so the per-method medians exclude it. Same bound for every method "
        "of a table: the gaps compare plans.\n"
    )
    lines.append(stages_by_size(args.quick))
    text = "\n".join(lines)
    print(text)
    write_result("core_at_scale", text)
    return 0


#: GPUs per fabric in the stage table (131,072 skipped with --quick).
SIZES = (64, 1024, 4096, 16384, 131072)


def _fabric_text(gpus: int) -> str:
    nodes = gpus // 8
    text = CLUSTER.read_text()
    return text.replace("count: 2048", f"count: {nodes}").replace(
        "name: fabric-16384", f"name: fabric-{gpus}"
    )


def _job_text(gpus: int) -> str:
    workers = gpus // 4
    pp = min(8, workers // 8)
    dp = workers // (8 * pp)
    text = WORKLOAD.read_text()
    return text.replace("layout: {tp: 8, pp: 8, dp: 64}", f"layout: {{tp: 8, pp: {pp}, dp: {dp}}}")


#: Runs a command as its only child and prints the child's peak RSS (KiB) on stderr's last line.
_PEAK = (
    "import resource, subprocess, sys; r = subprocess.run(sys.argv[1:]); "
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); "
    "sys.exit(r.returncode)"
)


def _cli(cmd: list[str]) -> tuple[float, float, dict]:
    """Wall seconds, peak MB and the JSON document of one CLI run."""
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", _PEAK, *cmd], check=True, capture_output=True,
                         text=True)  # fmt: skip
    wall = time.perf_counter() - start
    peak = int(out.stderr.strip().splitlines()[-1]) / 1024
    return wall, peak, json.loads(out.stdout)


def whole_commands(workload: tsched.Workload, repeats: int) -> str:
    """The 4,096-worker job as ``layout:`` and as an explicit block-style traffic list (PyYAML's
    default dump), each solved by the whole CLI with the default method (auto) and greedy:
    median wall seconds, the largest peak RSS, status and gap."""
    import yaml

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        explicit = Path(tmp) / "explicit.yaml"
        pairs = zip(workload.src.tolist(), workload.dst.tolist(), workload.gb.tolist(), strict=True)
        traffic = [{"src": s, "dst": d, "gb": g} for s, d, g in pairs]
        doc = {"tsched": "workload/v1", "name": workload.name, "workers": workload.workers,
               "traffic": traffic}  # fmt: skip
        explicit.write_text(yaml.safe_dump(doc))
        for form, path in (("layout:", WORKLOAD), ("explicit block-style list", explicit)):
            for method in ("auto (default)", "greedy"):
                cmd = [sys.executable, "-m", "tsched", "solve", "--cluster", str(CLUSTER),
                       "--workload", str(path), "--json", "--quiet"]  # fmt: skip
                if method == "greedy":
                    cmd += ["--method", "greedy"]
                runs = [_cli(cmd) for _ in range(repeats)]
                doc = runs[-1][2]
                rows.append([form, method, f"{np.median([r[0] for r in runs]):.2f}",
                             f"{max(r[1] for r in runs):.0f}", doc["status"],
                             f"{100 * doc['gap']:.2g}", f"{doc['objective']:.2f}"])  # fmt: skip
        size = explicit.stat().st_size
    return (
        f"## The whole command, 4,096 workers on 16,384 GPUs (explicit list: {workload.n_edges:,}"
        f" pairs, {size / 1e6:.1f} MB)\n\n"
        + markdown_table(
            ["workload form", "method", "median s", "peak MB", "status", "gap %", "objective"], rows
        )  # fmt: skip
        + "\nWall time of `python -m tsched solve --cluster models/clusters/fabric-16384.yaml "
        "--workload FILE --json --quiet` as a child process (start-up, reading, solving, "
        "printing), medians; peak resident memory of the child. The explicit list carries no "
        "layout: its product structure is found from the pairs.\n"
    )


def stages_by_size(quick: bool) -> str:
    """Table 5 of the module doc."""
    from tsched.solvers import _densest_kernel as kernel
    from tsched.solvers import bounds
    from tsched.solvers.greedy import construct_cluster

    # Load the compiled knapsack once (numba's import and cache: about 0.5 s, once per process)
    # so the stage columns are steady-state times; the CLI columns include such loads.
    kernel.knapsack(np.zeros(3), np.array([2, 2], dtype=np.int64), 2)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for gpus in SIZES[:-1] if quick else SIZES:
            cpath, wpath = Path(tmp) / f"c{gpus}.yaml", Path(tmp) / f"w{gpus}.yaml"
            cpath.write_text(_fabric_text(gpus))
            wpath.write_text(_job_text(gpus))
            t = {}
            start = time.perf_counter()
            cluster = tsched.read_cluster(cpath)
            t["cluster"] = time.perf_counter() - start
            start = time.perf_counter()
            workload = tsched.read_workload(wpath)
            t["workload"] = time.perf_counter() - start
            start = time.perf_counter()
            problem = tsched.PlacementProblem.build(cluster, workload)
            t["build"] = time.perf_counter() - start
            start = time.perf_counter()
            construct_cluster(problem)
            t["greedy"] = time.perf_counter() - start
            for name in ("basic", "profile", "spectral", "packing"):
                start = time.perf_counter()
                getattr(bounds, f"{name}_bound")(problem)
                t[name] = time.perf_counter() - start
            cli = {}
            for method in ("greedy", "auto"):
                cli[method] = _cli([sys.executable, "-m", "tsched", "solve", "--cluster",
                                    str(cpath), "--workload", str(wpath), "--method", method,
                                    "--json", "--quiet"])  # fmt: skip
            doc = cli["auto"][2]
            rows.append(
                [f"{gpus:,}", f"{workload.workers:,}"]
                + [
                    f"{t[k]:.3f}"
                    for k in (
                        "cluster",
                        "workload",
                        "build",
                        "greedy",
                        "basic",
                        "profile",
                        "spectral",
                        "packing",
                    )
                ]  # fmt: skip
                + [
                    f"{cli['greedy'][0]:.2f}",
                    f"{cli['greedy'][1]:.0f}",
                    f"{cli['auto'][0]:.2f}",
                    f"{cli['auto'][1]:.0f}",
                    doc["status"],
                    f"{100 * doc['gap']:.2f}",
                ]  # fmt: skip
            )
    head = ["GPUs", "workers", "read cluster", "read workload", "build", "greedy construct",
            "basic bound", "profile bound", "spectral bound", "packing bound", "CLI greedy s",
            "CLI greedy MB",
            "CLI auto s", "CLI auto MB", "auto status", "auto gap %"]  # fmt: skip
    return (
        "## Stages by size (seconds; CLI: whole command, start-up included, peak RSS)\n\n"
        + markdown_table(head, rows)
        + "\nThe spectral bound reads the exact Laplacian spectrum off the layout's product "
        "structure (a Kronecker sum of one small graph per dimension), so it costs milliseconds "
        "at any size; above 4,096 nodes no node × node table is built. The packing bound "
        "(densest subgraphs of the factor graphs, and the lines each domain must touch) is "
        "sparse too; its column is timed after the compiled knapsack has been loaded once. "
        "`auto` stops when a bound meets its plan, else at its 10 s default "
        "budget.\n"
    )


if __name__ == "__main__":
    raise SystemExit(main())
