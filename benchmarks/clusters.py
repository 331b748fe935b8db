"""Hierarchical GPU clusters, 64 → 16,384 GPUs: tsched's methods against the baselines.

Each instance is a leaf/spine fabric of DGX-style 8-GPU nodes or GB200 NVL72 racks (4-GPU trays
in 72-GPU NVLink domains), *whole* (every GPU free) or *fragmented*: in every leaf (NVL72: every
rack) some nodes are fully busy and some half busy, so that no leaf holds a whole pipeline
(TP × PP GPUs) and the free capacity is scattered over the fabric. Jobs are 3D-parallel (dense)
and MoE (EP all-to-all) layouts.

Methods, side by side in one process: ``auto`` and ``hierarchical`` (tsched), ``tabu`` (up to
1,024 workers), ``greedy``, the baselines ``kai-tas``, ``pack``, ``random``, and scipy's FAQ
(``method="faq"``: ``quadratic_assignment(method="faq")``, best of 10 randomised starts, flow
padded with zero rows to the free GPUs; only up to 1,024 free GPUs, as it needs dense m × m
matrices). The bound is tsched's best lower bound for the instance; ``vs best`` compares with
the best plan any method found. ``hierarchical/grow`` and ``hierarchical/metis`` run the
decomposition with one partitioner each (``hierarchical`` keeps the better): the evaluation of
METIS against tsched's own graph growing. Where ``scotch_gmap`` is installed, Scotch's static
mapping is a column too (:mod:`benchmarks._scotch`: whole uniform trees as ``tleaf`` targets,
busy GPUs as isolated vertices fixed on them; a mapping that is not a placement is reported as
such), timed over the mapping run only.

    python -m benchmarks.clusters [--quick]
    python -m benchmarks.clusters --settle SECONDS

``--settle`` answers, for every instance of up to 256 GPUs, whether a remaining gap is the
plan's or the bound's: ``auto`` at its default budget, then CP-SAT's worker → node model from
auto's plan for as long as it is given, and where that proves nothing, each domain of the
coarsest level the plan spans solved alone from it with the rest fixed (:func:`by_domain`;
section ``settle`` of ``benchmarks/results/clusters.md``).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import tsched
from benchmarks import _scotch as scotch
from benchmarks._common import machine, markdown_table, write_result
from tsched.cluster import Cluster
from tsched.formats.cluster_yaml import cluster_from_dict
from tsched.problem import PlacementProblem, objective
from tsched.solvers.auto import TABU_MAX_WORKERS
from tsched.solvers.bounds import best_bound
from tsched.workload import Layout, ModelSpec, Workload

DENSE = ModelSpec(
    params_b=70, hidden=8192, layers=80, seq_len=8192, micro_batch=1, micro_batches=16
)
MOE = ModelSpec(
    params_b=141,
    expert_params_b=135,
    hidden=6144,
    layers=56,
    seq_len=4096,
    micro_batches=8,
    experts=8,
    top_k=2,
)
FAQ_MAX_LOCATIONS = 1024
SUMMARY = [
    "instance",
    "auto gap %",
    "auto",
    "hierarchical",
    "hier. grow only",
    "hier. METIS only",
    "greedy",
    "kai-tas",
    "FAQ x10",
    "Scotch",
]


def fabric(
    nodes: int,
    per_leaf: int,
    leaves_per_spine: int,
    gpus: int = 8,
    bandwidth: tuple[float, float, float, float] = (450, 50, 50, 25),
    name: str | None = None,
) -> Cluster:
    """H100 nodes (by default DGX: 8 GPUs, NVLink 450 GB/s) on leaves and spines (50 GB/s) under
    a core (25 GB/s); ``bandwidth`` gives NVLink, leaf, spine and core in that order."""
    name = name or f"fabric-{gpus * nodes}"
    links = dict(zip(("nvlink", "leaf", "spine", "core"), bandwidth))
    doc = {
        "tsched": "cluster/v1",
        "name": name,
        "links": {link: {"bandwidth": value} for link, value in links.items()},
        "levels": ["leaf", "spine", "core"],
        "node_types": {"dgx": {"gpus": gpus, "gpu": {"model": "H100"}, "intra": "nvlink"}},
        "generate": [
            {
                "type": "dgx",
                "count": nodes,
                "fanout": {"leaf": per_leaf, "spine": leaves_per_spine},
                "at": {"core": "c0"},
            }
        ],
    }
    return cluster_from_dict(doc, name)


def nvl72(racks: int) -> Cluster:
    """GB200 NVL72 racks: 18 trays × 4 GPUs in one NVLink domain; racks on leaves (50 GB/s)."""
    doc = {
        "tsched": "cluster/v1",
        "name": f"nvl72-{72 * racks}",
        "links": {
            "nvlink": {"bandwidth": 900},
            "nvl": {"bandwidth": 900},
            "leaf": {"bandwidth": 50},
            "spine": {"bandwidth": 50},
        },
        "levels": ["nvl", "leaf", "spine"],
        "node_types": {"tray": {"gpus": 4, "gpu": {"model": "B200"}, "intra": "nvlink"}},
        "generate": [
            {
                "type": "tray",
                "count": 18 * racks,
                "fanout": {"nvl": 18, "leaf": 4},
                "at": {"spine": "s0"},
            }
        ],
    }
    return cluster_from_dict(doc, f"nvl72-{72 * racks}")


def fragment(cluster: Cluster, free_per_domain: int, seed: int = 0) -> Cluster:
    """In each first-level domain (leaf; NVL72: rack) leave ``free_per_domain`` GPUs free, on a
    random mix of free and half-free nodes; the domain's other nodes are busy."""
    rng = np.random.default_rng(seed)
    level = cluster.level_domains(0)
    busy: dict[str, list[int]] = {}
    for dom in np.unique(level):
        nodes = rng.permutation(np.flatnonzero(level == dom))
        g = int(cluster.gpus_per_node[nodes[0]])
        free = 0
        for node in nodes:
            take = max(0, min(g if rng.random() < 0.5 else g // 2, free_per_domain - free))
            free += take
            if take < g:
                busy[cluster.nodes[node].name] = sorted(
                    rng.choice(g, g - take, replace=False).tolist()
                )
    return cluster.with_busy(busy)


def job(tp: int, pp: int, dp: int, ep: int = 1) -> Workload:
    name = f"tp{tp}-pp{pp}-dp{dp}" + (f"-ep{ep}" if ep > 1 else "")
    return Workload.from_layout(name, Layout(tp=tp, pp=pp, dp=dp, ep=ep), MOE if ep > 1 else DENSE)


def instances(quick: bool) -> list[tuple[str, Cluster, Workload]]:
    """(label, cluster, job); fragmented leaves keep ¾ of a pipeline (TP × PP GPUs) free, or
    ¾ of a leaf for MoE jobs (no PP), so no leaf holds a whole pipeline."""
    cases: list[tuple[Cluster, Workload, int]] = [
        (fabric(8, 2, 2), job(8, 2, 2), 12),
        (fabric(8, 2, 2), job(2, 1, 2, ep=8), 12),
        (nvl72(4), job(4, 4, 8), 48),
        (fabric(32, 4, 4), job(8, 4, 4), 24),
        (fabric(32, 4, 4), job(2, 1, 8, ep=8), 24),
    ]
    if not quick:
        cases += [
            (fabric(128, 8, 4), job(8, 8, 8), 48),
            (nvl72(16), job(4, 8, 16), 48),
            (fabric(512, 8, 8), job(8, 8, 32), 48),
            (fabric(2048, 16, 8), job(8, 8, 64), 48),
        ]
    out = []
    for cluster, workload, free in cases:
        out.append(("whole", cluster, workload))
        out.append((f"fragmented, {free} free per leaf", fragment(cluster, free), workload))
    return out


def run_case(
    label: str, cluster: Cluster, workload: Workload, limit: float
) -> tuple[str, list[list[Any]]]:
    problem = PlacementProblem.build(cluster, workload)
    bound, source = best_bound(problem, thorough=True)
    methods: dict[str, Callable[[], np.ndarray]] = {}
    for name in ("auto", "hierarchical", "tabu", "greedy", "kai-tas", "pack", "random"):
        if name == "tabu" and problem.n_workers > TABU_MAX_WORKERS:
            continue
        timed = name in ("auto", "tabu")

        def call(m: str = name, t: bool = timed) -> np.ndarray:
            return tsched.solve(problem, method=m, seed=0, time_limit=limit if t else None)

        methods[name] = call
    for part in ("grow", "metis"):  # the partitioner evaluation: each one alone

        def call_part(p: str = part) -> np.ndarray:
            return tsched.solve(problem, method="hierarchical", options={"partitioner": p})

        methods[f"hierarchical/{part}"] = call_part
    if problem.n_locations <= FAQ_MAX_LOCATIONS:
        methods["FAQ x10"] = lambda: tsched.solve(problem, method="faq", seed=0)
    rows = {}
    notes: dict[str, str] = {}
    for name, fn in methods.items():
        start = time.perf_counter()
        out = fn()
        seconds = time.perf_counter() - start
        assignment = out if isinstance(out, np.ndarray) else out.assignment
        if assignment is None:  # kai-tas: no domain at its required level holds the gang
            rows[name] = (np.inf, seconds)
            continue
        rows[name] = (objective(problem, assignment), seconds)
    if scotch.available():
        assignment, seconds, note = scotch.scotch_map(problem)
        rows["Scotch"] = (np.inf if assignment is None else objective(problem, assignment),
                          seconds)  # fmt: skip
        if assignment is None:
            notes["Scotch"] = note
    best = min(v for v, _ in rows.values())
    table = []
    for name, (value, seconds) in rows.items():
        if not np.isfinite(value):
            table.append([name, notes.get(name, "no plan"), "", "n/a", f"{seconds:.2f}"])
            continue
        gap = max(value - bound, 0.0) / value if bound is not None and value > 0 else float("nan")
        table.append(
            [
                name,
                f"{value:.3f}",
                f"{100 * gap:.2f}",
                f"{100 * (value / best - 1):.2f}",
                f"{seconds:.2f}",
            ]
        )
    free = int(cluster.free_mask().sum())
    head = (
        f"### {workload.name} ({workload.workers} workers) on {cluster.name}, {label} "
        f"({free} of {cluster.n_gpus} GPUs free)\n\nBound: {bound:.3f} ({source})\n"
    )
    return head, table


SETTLE_MAX_GPUS = 256


def by_domain(
    problem: PlacementProblem, plan: np.ndarray, seconds: float
) -> tuple[np.ndarray, int]:
    """(plan, domains re-solved): for each domain of the coarsest level the plan spans, CP-SAT's
    worker → node model on its workers and free GPUs alone from the plan, everything else
    fixed, for ``seconds`` each; only where every pair leaving the domain costs the same from
    each of its GPUs (partners in other top domains), so the sub-problem's optimum is exact."""
    cl = problem.cluster
    assert cl is not None
    plan = np.array(plan)
    node = cl.gpu_node[problem.locations]
    for level in range(len(cl.levels) - 1, -1, -1):
        doms = cl.level_domains(level)[node]
        if len(np.unique(doms[plan])) > 1:
            break
    else:
        return plan, 0
    parts = 0
    for dom in np.unique(doms[plan]):
        workers = np.flatnonzero(doms[plan] == dom)
        locs = np.flatnonzero(doms == dom)
        inside = np.zeros(problem.n_workers, dtype=bool)
        inside[workers] = True
        leaving = inside[problem.src] != inside[problem.dst]
        outer = np.where(inside[problem.src], problem.dst, problem.src)[leaving]
        if np.any(doms[plan[outer]] == dom):
            continue  # a partner outside the sub-problem on this domain's GPUs
        targets = np.unique(plan[outer])
        far = problem.pair_distance(np.repeat(targets, len(locs)), np.tile(locs, len(targets)))
        if len(targets) and np.any(np.ptp(far.reshape(len(targets), len(locs)), axis=1) > 0):
            continue  # leaving pairs cost more from some GPUs than from others
        sub = problem.restrict(workers, locs)
        hint = np.searchsorted(locs, plan[workers])
        out = tsched.solve(sub, method="cpsat", seed=0, time_limit=seconds, options={"hint": hint})
        if objective(sub, out.assignment) < objective(sub, hint) - 1e-9:
            plan[workers] = locs[out.assignment]
        parts += 1
    return plan, parts


def settle(seconds: float) -> int:
    """Exact runs on the instances of up to :data:`SETTLE_MAX_GPUS` GPUs (module docstring)."""
    rows = []
    for label, cluster, workload in instances(quick=True):
        if cluster.n_gpus > SETTLE_MAX_GPUS:
            continue
        problem = PlacementProblem.build(cluster, workload)
        start = time.perf_counter()
        auto = tsched.solve(problem, method="auto", seed=0)
        auto_s = time.perf_counter() - start
        best, bound, how, exact_s = auto.objective, auto.bound, "auto", 0.0
        if auto.status != "optimal" and (auto.gap is None or auto.gap > 1e-6):
            start = time.perf_counter()
            exact = tsched.solve(
                problem, method="cpsat", seed=0, time_limit=seconds,
                options={"hint": auto.assignment, "model": "hierarchical"},
            )  # fmt: skip
            exact_s = time.perf_counter() - start
            best = min(best, exact.objective)
            bound = max(bound or 0.0, exact.bound or 0.0)
            how = "cpsat"
            plan = exact.assignment if exact.objective <= auto.objective else auto.assignment
            if bound < best * (1 - 1e-6):  # not proved: each top domain alone, the rest fixed
                start = time.perf_counter()
                plan, parts = by_domain(problem, plan, seconds)
                exact_s += time.perf_counter() - start
                if objective(problem, plan) < best * (1 - 1e-9):
                    best, how = objective(problem, plan), f"cpsat, then {parts} domains alone"
        proved = bound is not None and bound >= best * (1 - 1e-6)
        plan_share = 100 * (auto.objective - best) / auto.objective
        bound_share = 100 * (best - (auto.bound or 0.0)) / best
        rows.append(
            [
                f"{workload.name} on {cluster.name} ({label})",
                f"{auto.objective:.3f}",
                f"{100 * (auto.gap or 0):.2f}",
                f"{auto_s:.1f}",
                f"{best:.3f}" + ("" if proved else f" (bound {bound:.3f})"),
                "yes" if proved else "no",
                how,
                f"{exact_s:.0f}",
                f"{plan_share:.2f}" if proved else f"≥ {plan_share:.2f}",
                f"{bound_share:.2f}" if proved else f"≤ {bound_share:.2f}",
            ]
        )
        print(" | ".join(rows[-1]), flush=True)
    header = ["instance", "auto objective", "auto gap %", "auto s", "optimum", "proved?",
              "exact method", "exact s", "plan's share %", "bound's share %"]  # fmt: skip
    text = "\n".join(
        [
            "# Hierarchical GPU clusters: whose is the gap?\n",
            f"Machine: {machine()}\n",
            f"Command: `python -m benchmarks.clusters --settle {seconds:g}`\n",
            "For every instance of up to 256 GPUs: `auto` at its default budget, then, where "
            "it is not proved, CP-SAT's worker → node model started from auto's plan with "
            f"{seconds:g} s. The plan's share is how far auto's plan is above the best plan "
            "known; the bound's share how far auto's bound is below it. Where CP-SAT does not "
            "prove its plan either, the optimum lies between the bound shown and that plan; "
            "then each domain of the coarsest level the plan spans is solved alone from it, "
            f"everything else fixed ({seconds:g} s each, where the pairs leaving it cost the "
            "same from all its GPUs), and a better plan found so is the best known.\n",
            markdown_table(header, rows) + "\n",
        ]
    )
    write_result("clusters", text, section="settle")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the instances up to 288 GPUs")
    parser.add_argument("--time-limit", type=float, default=None, help="for auto and tabu")
    parser.add_argument(
        "--settle", type=float, metavar="SECONDS", help="exact runs on the ≤ 256-GPU instances"
    )
    args = parser.parse_args(argv)
    if args.settle:
        return settle(args.settle)
    limit = args.time_limit or (2.0 if args.quick else 10.0)
    name = "clusters-quick" if args.quick else "clusters"
    lines = [
        f"# Hierarchical GPU clusters\n\nMachine: {machine()}\n",
        f"Command: `python -m benchmarks.clusters{' --quick' if args.quick else ''}` "
        f"(auto and tabu: {limit:g} s; the others run to completion)\n",
        "Columns: objective (seconds of communication per iteration), gap to the bound (%), "
        "excess over the best plan any method found (%), wall seconds. `auto` runs first and "
        "its seconds include computing the lower bound (the spectral bound's eigenvalues: up "
        "to a few seconds at 2,048-4,096 workers), which its time limit does not cover; the "
        "other methods reuse the cached bound.\n",
    ]
    summary = []
    for label, cluster, workload in instances(args.quick):
        head, table = run_case(label, cluster, workload, limit)
        text = (
            head + "\n" + markdown_table(["method", "objective", "gap %", "vs best %", "s"], table)
        )
        print(text + "\n", flush=True)
        lines.append(text + "\n")
        ours = {row[0]: row for row in table}
        summary.append(
            [
                f"{workload.name} on {cluster.name} ({label})",
                ours["auto"][2],
                ours["auto"][3],
                ours["hierarchical"][3],
                ours["hierarchical/grow"][3],
                ours["hierarchical/metis"][3],
                ours["greedy"][3],
                ours["kai-tas"][3],
                ours.get("FAQ x10", ["", "", "", "n/a"])[3],
                ours.get("Scotch", ["", "", "", "n/a"])[3],
            ]
        )
    lines.insert(
        3,
        "## Summary (excess over the best plan found, %)\n\n"
        + markdown_table(
            SUMMARY,
            summary,
        )
        + "\n",
    )
    text = "\n".join(lines)
    write_result(name, text)
    print(
        markdown_table(
            SUMMARY,
            summary,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
