"""Exact solving with proofs: QAPLIB n ≤ 15 and hierarchical GPU clusters of 32–512 GPUs.

For each instance and method: proved?, seconds, objective, bound, gap. QAPLIB instances come
from ``tests/data/qaplib`` (best known values from its ``index.csv``); cluster instances are
leaf/spine fabrics of DGX-style 8-GPU nodes running Megatron layouts, whole and fragmented.

    python -m benchmarks.exact [--quick] [--time-limit S]
    python -m benchmarks.exact --symmetry [--time-limit S]   # the § symmetry section

``--symmetry``: CP-SAT's node model with its symmetry breaking on and off, on random traffic
(no layout, so no bound of tsched's meets the plan and the proof is the search's alone) over
leaves of the same shape, which only the breaking of whole domains' symmetry can tell apart.
"""

from __future__ import annotations

import argparse
import csv
import time

import tsched
from benchmarks._common import ROOT, machine, markdown_table, write_result
from tsched.cluster import Cluster, LinkClass, Node, NodeType
from tsched.formats.qaplib import read_dat
from tsched.workload import Layout, ModelSpec, Workload

QAPLIB = ROOT / "tests" / "data" / "qaplib"
MODEL = ModelSpec(params_b=8, hidden=4096, layers=32, seq_len=8192, micro_batch=1, micro_batches=8)


def qaplib_instances(max_n: int) -> list[tuple[str, int, int]]:
    with open(QAPLIB / "index.csv") as handle:
        rows = [r for r in csv.DictReader(handle) if int(r["n"]) <= max_n]
    return sorted(
        ((r["instance"], int(r["n"]), int(r["best_known"])) for r in rows),
        key=lambda t: (t[1], t[0]),
    )


def fabric(nodes: int, per_leaf: int, busy_every: int = 0) -> Cluster:
    """``nodes`` 8-GPU nodes, ``per_leaf`` per leaf; every ``busy_every``-th node half busy."""
    links = {
        "nvlink": LinkClass("nvlink", 450, 2),
        "leaf": LinkClass("leaf", 50, 5),
        "spine": LinkClass("spine", 25, 8),
    }
    types = {"dgx": NodeType("dgx", 8, "H100", 80, intra="nvlink")}
    out = []
    for i in range(nodes):
        busy = (0, 1, 2, 3) if busy_every and i % busy_every == busy_every - 1 else ()
        out.append(Node(f"n{i:03d}", "dgx", {"leaf": f"l{i // per_leaf}", "spine": "s0"}, busy))
    return Cluster(
        f"fabric-{nodes * 8}{'-frag' if busy_every else ''}",
        links,
        ("leaf", "spine"),
        types,
        tuple(out),
    )


def cluster_cases(quick: bool) -> list[tuple[str, Cluster, Workload]]:
    def job(tp: int, pp: int, dp: int, ep: int = 1) -> Workload:
        moe = (
            ModelSpec(
                params_b=47,
                expert_params_b=45,
                hidden=4096,
                layers=32,
                seq_len=4096,
                micro_batches=8,
                experts=8,
                top_k=2,
            )
            if ep > 1
            else MODEL
        )
        name = f"tp{tp}-pp{pp}-dp{dp}" + (f"-ep{ep}" if ep > 1 else "")
        return Workload.from_layout(name, Layout(tp=tp, pp=pp, dp=dp, ep=ep), moe)

    cases = [
        ("32 GPUs", fabric(4, 2), job(4, 2, 4)),
        ("64 GPUs (target: proved <= 10 s)", fabric(8, 4), job(8, 2, 4)),
        ("64 GPUs, MoE", fabric(8, 4), job(2, 1, 4, ep=8)),
        ("128 GPUs", fabric(16, 8), job(8, 4, 4)),
        ("128 GPUs, fragmented", fabric(20, 4, busy_every=4), job(4, 4, 8)),
    ]
    if not quick:
        cases += [
            ("256 GPUs", fabric(32, 8), job(8, 4, 8)),
            ("512 GPUs", fabric(64, 16), job(8, 8, 8)),
            ("512 GPUs, fragmented", fabric(80, 16, busy_every=5), job(8, 8, 8)),
        ]
    return cases


def row(
    label: str,
    n: int,
    method: str,
    result: tsched.PlacementResult,
    seconds: float,
    best_known: float | None = None,
) -> list[str]:
    proved = "yes" if result.status == "optimal" else "no"
    gap = "—" if result.gap is None else f"{100 * result.gap:.3f}"
    bound = "—" if result.bound is None else f"{result.bound:.6g}"
    extra = [] if best_known is None else [f"{best_known:g}"]
    return [
        label,
        str(n),
        method,
        proved,
        f"{seconds:.2f}",
        f"{result.objective:.6g}",
        bound,
        gap,
        *extra,
    ]


def symmetry(limit: float, seeds: int = 6) -> int:
    """The § symmetry section (module docstring): 14 workers of random traffic (30 % of the
    pairs, 1–5 GB) on 8 nodes of 4 GPUs, two to a leaf, every second node half busy: four
    leaves of the same shape under one spine and no two identical nodes."""
    import numpy as np

    cluster = Cluster(
        "fabric-32-halves",
        {"nv": LinkClass("nv", 450), "leaf": LinkClass("leaf", 50),
         "spine": LinkClass("spine", 25)},
        ("leaf", "spine"),
        {"dgx": NodeType("dgx", 4, intra="nv")},
        tuple(Node(f"n{i}", "dgx", {"leaf": f"l{i // 2}"}, (0, 1) if i % 2 else ())
              for i in range(8)),
    )  # fmt: skip
    rows, proved = [], {True: 0, False: 0}
    for seed in range(seeds):
        rng = np.random.default_rng(100 + seed)
        f = rng.integers(0, 6, (14, 14)) * (rng.random((14, 14)) < 0.3)
        np.fill_diagonal(f, 0)
        problem = tsched.PlacementProblem.build(
            cluster, Workload.from_matrix(f"random-{seed}", f.astype(float))
        )
        cells = [f"random-{seed}"]
        for on in (True, False):
            start = time.perf_counter()
            result = tsched.solve(
                problem,
                method="cpsat",
                seed=0,
                time_limit=limit,
                options={"symmetry_breaking": on, "independent": True},
            )
            seconds = time.perf_counter() - start
            proved[on] += result.status == "optimal"
            cells += ["yes" if result.status == "optimal" else "no", f"{seconds:.1f}",
                      f"{result.objective:.3f}", f"{100 * (result.gap or 0):.2f}"]  # fmt: skip
        rows.append(cells)
        print(" | ".join(cells), flush=True)
    header = ["instance", "on: proved?", "on: s", "on: objective", "on: gap %",
              "off: proved?", "off: s", "off: objective", "off: gap %"]  # fmt: skip
    text = "\n".join([
        "# CP-SAT's symmetry breaking\n",
        f"Machine: {machine()}\n",
        f"Command: `python -m benchmarks.exact --symmetry --time-limit {limit:g}`\n",
        symmetry.__doc__.split("\n\n")[0].replace("\n    ", " ").replace("The § symmetry "
        "section (module docstring): ", "").strip() + " CP-SAT's node model, `independent` "
        "(no bound of tsched's as a cut), its symmetry breaking on (interchangeable nodes "
        "and whole domains ordered by first use) and off.\n",
        markdown_table(header, rows) + "\n",
        f"Proved within {limit:g} s: **{proved[True]}/{seeds} with the symmetry broken, "
        f"{proved[False]}/{seeds} without**.\n",
    ])  # fmt: skip
    write_result("exact", text, section="symmetry")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="n ≤ 12 and the small clusters")
    parser.add_argument("--time-limit", type=float, default=60.0, help="per run (default 60)")
    parser.add_argument("--symmetry", action="store_true", help="the § symmetry section only")
    args = parser.parse_args(argv)
    limit = args.time_limit
    if args.symmetry:
        return symmetry(limit)
    lines = [
        f"# Exact solving with proofs\n\nMachine: {machine()}\n",
        f"Command: `python -m benchmarks.exact{' --quick' if args.quick else ''}"
        f" --time-limit {limit:g}`. Status `optimal` (proved? yes) only when a bound meets "
        "the objective within 1e-6 relative.\n",
    ]

    rows = []
    for name, n, best in qaplib_instances(12 if args.quick else 15):
        inst = read_dat(QAPLIB / "instances" / f"{name}.dat")
        problem = tsched.PlacementProblem.from_qap(inst.flow, inst.distance, name=name)
        methods = ["bnb"] + ([] if args.quick or n > 12 else ["cpsat"])
        for method in methods:
            start = time.perf_counter()
            result = tsched.solve(problem, method=method, time_limit=limit, seed=0)
            rows.append(row(name, n, method, result, time.perf_counter() - start, best))
            print(" | ".join(rows[-1]), flush=True)
    lines.append(
        "## QAPLIB, n ≤ "
        + ("12" if args.quick else "15")
        + "\n\n"
        + markdown_table(
            [
                "instance",
                "n",
                "method",
                "proved?",
                "seconds",
                "objective",
                "bound",
                "gap %",
                "best known",
            ],
            rows,
        )
        + "\n"
    )
    lines.append(
        "`bnb` compiles its numba kernel on first use (cached afterwards); its first "
        "row includes that. `cpsat` is the flat Adams–Johnson model.\n"
    )

    rows = []
    for label, cluster, workload in cluster_cases(args.quick):
        problem = tsched.PlacementProblem.build(cluster, workload)
        for method, options in (
            ("greedy", {}),
            ("auto", {}),
            ("cpsat", {}),
            ("milp", {"backend": "highs"}),
        ):
            if method == "milp" and workload.workers > 64:
                continue
            start = time.perf_counter()
            result = tsched.solve(problem, method=method, time_limit=limit, seed=0, options=options)
            seconds = time.perf_counter() - start
            tag = f"{method} ({result.method})" if method == "auto" else method
            rows.append(
                row(
                    f"{label}: {workload.name} on {cluster.name}",
                    workload.workers,
                    tag,
                    result,
                    seconds,
                )
                + [str(result.stats.get("bound_source"))]
            )
            print(" | ".join(rows[-1]), flush=True)
    lines.append(
        "## Hierarchical clusters\n\n"
        + markdown_table(
            [
                "instance",
                "workers",
                "method",
                "proved?",
                "seconds",
                "objective s",
                "bound s",
                "gap %",
                "bound from",
            ],
            rows,
        )
        + "\n"
    )
    lines.append(
        "Bounds: `spectral` is the hierarchical cut bound (Donath–Hoffman eigenvalue "
        "bound per level), `cpsat`/`milp` the solver's own, `basic` the cheapest-link "
        "bound. MILP runs only up to 64 workers (its model has pairs × domains "
        "variables).\n"
    )
    text = "\n".join(lines)
    print(text)
    write_result("exact-quick" if args.quick else "exact", text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
