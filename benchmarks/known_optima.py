"""Random small clusters with optima proved independently: are the bounds valid, does auto prove?

Instances come from a seed: leaf/spine/core fabrics of 2–8 nodes of 2, 4 or 8 GPUs, whole or
fragmented (a random mix of free and half-free nodes in each leaf), and on them either a
parallel layout (TP, PP, DP, EP; 4–16 workers, MoE traffic when EP > 1, DP = 3 included) or
random sparse traffic (5–13 workers); at most 24 free GPUs. For each:

- the optimum, by CP-SAT's worker → node model with ``independent`` (none of tsched's bounds:
  no early stop, no cut on the objective), up to ``--exact-limit`` seconds;
- tsched's best lower bound, default and thorough (``best_bound``), each checked against that
  optimum: a bound above it is a bug, counted in the summary;
- ``auto`` at its default budget: proved or not, and how far its plan is above the optimum.

"hard": greedy's plan does not meet the thorough bound, so auto had to search.

    python -m benchmarks.known_optima [--instances 30] [--seed 0] [--exact-limit 60] [--quick]
        [--section NAME]   # a variant (another seed) as a section of the same report
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import numpy as np

import tsched
from benchmarks import clusters
from benchmarks._common import machine, markdown_table, write_result
from tsched.cluster import Cluster
from tsched.problem import PlacementProblem
from tsched.solvers.bounds import best_bound
from tsched.solvers.bounds.lagrange import lagrangian_bound
from tsched.workload import Layout, ModelSpec, Workload

DENSE = ModelSpec(params_b=8, hidden=4096, layers=32, seq_len=8192, micro_batch=1, micro_batches=8)
MOE = ModelSpec(
    params_b=47, hidden=4096, layers=32, seq_len=4096, micro_batch=1, micro_batches=8,
    experts=8, top_k=2, expert_params_b=45,
)  # fmt: skip
#: Most free GPUs of an instance (the independent proof must stay within reach).
MAX_LOCATIONS = 24


def fabric(nodes: int, per_leaf: int, leaves_per_spine: int, gpus: int) -> Cluster:
    """Nodes of ``gpus`` H100s: NVLink 450, leaf 50, spine 25 and core 12.5 GB/s."""
    name = f"fabric-{nodes}x{gpus}"
    return clusters.fabric(nodes, per_leaf, leaves_per_spine, gpus, (450, 50, 25, 12.5), name)


def fragment(cluster: Cluster, rng: np.random.Generator) -> Cluster:
    """Each node free, half free or busy at random, at least one node kept free."""
    busy: dict[str, list[int]] = {}
    for node in cluster.nodes[1:]:
        g = int(cluster.gpus_per_node[0])
        draw = rng.random()
        take = g if draw < 0.4 else g // 2 if draw < 0.8 else 0
        if take < g:
            busy[node.name] = sorted(rng.choice(g, g - take, replace=False).tolist())
    return cluster.with_busy(busy)


def instances(seed: int, count: int) -> list[tuple[str, PlacementProblem]]:
    rng = np.random.default_rng(seed)
    out: list[tuple[str, PlacementProblem]] = []
    while len(out) < count:
        gpus = int(rng.choice([2, 4, 8]))
        nodes = int(rng.integers(2, 9))
        cluster = fabric(nodes, int(rng.choice([1, 2])), int(rng.choice([1, 2])), gpus)
        if rng.random() < 0.6:
            cluster = fragment(cluster, rng)
        if rng.random() < 0.5:
            tp, pp, dp, ep = (int(rng.choice(v)) for v in ([1, 2, 4], [1, 2], [1, 2, 3], [1, 2, 4]))
            layout = Layout(tp=tp, pp=pp, dp=dp, ep=ep)
            if not 4 <= layout.workers <= 16:
                continue
            name = f"tp{tp}-pp{pp}-dp{dp}" + (f"-ep{ep}" if ep > 1 else "")
            workload = Workload.from_layout(name, layout, MOE if ep > 1 else DENSE)
        else:
            n = int(rng.integers(5, 14))
            f = rng.integers(1, 10, (n, n)) * (rng.random((n, n)) < 0.35)
            np.fill_diagonal(f, 0)
            workload = Workload.from_matrix(f"random-{n}", f.astype(float))
        problem = PlacementProblem.build(cluster, workload)
        if not problem.feasible or problem.n_locations > MAX_LOCATIONS:
            continue
        out.append((f"{workload.name} on {cluster.name} ({problem.n_locations} free)", problem))
    return out


def pct(value: float, optimum: float) -> float:
    return 100.0 * (value - optimum) / optimum if optimum else 0.0


def run(label: str, problem: PlacementProblem, exact_limit: float) -> dict[str, Any]:
    start = time.perf_counter()
    exact = tsched.solve(
        problem, method="cpsat", seed=0, time_limit=exact_limit,
        options={"independent": True},
    )  # fmt: skip
    exact_s = time.perf_counter() - start
    proved = exact.stats.get("cpsat_status") == "OPTIMAL"

    def fresh() -> PlacementProblem:  # a problem's cache keeps bounds: none may help the next
        return PlacementProblem.build(problem.cluster, problem.workload)

    default, _ = best_bound(fresh())
    bounded = fresh()
    thorough, source = best_bound(bounded, thorough=True)
    greedy = tsched.solve(bounded, method="greedy", seed=0)
    start = time.perf_counter()
    auto = tsched.solve(fresh(), method="auto", seed=0)
    auto_s = time.perf_counter() - start
    coupled = lagrangian_bound(fresh())
    optimum = min(exact.objective, auto.objective) if proved else None
    tol = 1e-6 * max(1.0, abs(optimum or 0.0))
    highest = max(default or 0.0, thorough or 0.0, coupled or 0.0, auto.bound or 0.0)
    valid = optimum is None or highest <= optimum + tol
    return {
        "label": label,
        "workers": problem.n_workers,
        "optimum": optimum,
        "exact_s": exact_s,
        "default": default,
        "thorough": thorough,
        "lagrangian": coupled,
        "source": source,
        "valid": valid,
        "hard": greedy.objective - (thorough or 0.0) > 1e-9 * max(1.0, greedy.objective),
        "auto": auto.objective,
        "auto_proved": auto.status == "optimal",
        "auto_s": auto_s,
        "auto_choice": auto.stats.get("auto_choice", ""),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--exact-limit", type=float, default=60.0)
    parser.add_argument("--quick", action="store_true", help="8 instances, 20 s proofs")
    parser.add_argument("--section", default=None, help="write as this section of the report")
    args = parser.parse_args(argv)
    count, limit = (8, 20.0) if args.quick else (args.instances, args.exact_limit)
    rows, results = [], []
    for label, problem in instances(args.seed, count):
        r = run(label, problem, limit)
        results.append(r)
        opt = r["optimum"]

        def below(b: float | None, opt: float | None = opt) -> str:
            if b is None or opt is None:
                return "—"
            return (
                f"{max(0.0, -pct(b, opt)):.2f}" if b <= opt * (1 + 1e-6) else f"{-pct(b, opt):.2f}"
            )

        rows.append(
            [
                r["label"],
                str(r["workers"]),
                "not proved" if opt is None else f"{opt:.4f}",
                f"{r['exact_s']:.1f}",
                below(r["default"]),
                below(r["thorough"]),
                below(r["lagrangian"]),
                r["source"] or "—",
                "yes" if r["valid"] else "**NO**",
                "yes" if r["hard"] else "no",
                "—" if opt is None else f"{pct(r['auto'], opt):.3f}",
                "yes" if r["auto_proved"] else "no",
                r["auto_choice"],
                f"{r['auto_s']:.1f}",
            ]
        )
        print(" | ".join(rows[-1]), flush=True)
    known = [r for r in results if r["optimum"] is not None]
    hard = [r for r in known if r["hard"]]
    invalid = sum(not r["valid"] for r in results)
    at_opt = [r for r in known if r["auto"] <= r["optimum"] * (1 + 1e-6)]
    worst = max((pct(r["auto"], r["optimum"]) for r in known), default=0.0)
    summary = [
        ["instances", str(len(results))],
        ["optimum proved independently", f"{len(known)}/{len(results)}"],
        ["bounds above the optimum (default, thorough, lagrangian or auto's)", str(invalid)],
        ["lagrangian bound above the thorough one",
         str(sum((r["lagrangian"] or 0.0) > (r["thorough"] or 0.0) * (1 + 1e-9)
                 for r in results))],
        ["auto proved optimal", f"{sum(r['auto_proved'] for r in known)}/{len(known)}"],
        ["auto proved optimal, hard ones", f"{sum(r['auto_proved'] for r in hard)}/{len(hard)}"],
        ["auto's plan at the optimum", f"{len(at_opt)}/{len(known)}"],
        ["auto's worst plan above the optimum", f"{worst:.3f} %"],
        ["auto seconds, median (max)", f"{statistics.median(r['auto_s'] for r in results):.1f} "
         f"({max(r['auto_s'] for r in results):.1f})"],
    ]  # fmt: skip
    header = ["instance", "workers", "optimum", "proof s", "default bound % below",
              "thorough bound % below", "lagrangian % below", "thorough source",
              "bounds valid", "hard",
              "auto % above", "auto proved", "auto choice", "auto s"]  # fmt: skip
    command = "python -m benchmarks.known_optima" + (
        " --quick"
        if args.quick
        else f" --instances {count} --seed {args.seed} --exact-limit {limit:g}"
    ) + (f" --section {args.section}" if args.section else "")
    text = "\n".join(
        [
            "# Random small clusters with optima proved independently\n",
            f"Machine: {machine()}\n",
            f"Command: `{command}`\n",
            "Optimum: CP-SAT's worker → node model with `independent` (none of tsched's "
            f"bounds), up to {limit:g} s. Bounds: `best_bound`, default and thorough, and the "
            "Lagrangian bound (3 s), as % below the optimum (a negative figure would be a "
            "bound above it); auto's own bound is checked too. Auto: default budget (10 s). "
            "Hard: greedy's plan does not meet the thorough bound.\n",
            markdown_table(["", ""], summary) + "\n",
            markdown_table(header, rows) + "\n",
        ]
    )
    name = "known_optima" + ("-quick" if args.quick else "")
    write_result(name, text, section=args.section)
    return 1 if invalid else 0


if __name__ == "__main__":
    raise SystemExit(main())
