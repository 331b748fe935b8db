"""``tsched defrag``: which running jobs to move, and where, so that a waiting job can start."""

from __future__ import annotations

import argparse
import json
from typing import Any

from tsched.cli._common import EXIT_INFEASIBLE, EXIT_OK, integer, number, stderr_console

__all__ = ["add_parsers"]


def cmd_defrag(args: argparse.Namespace) -> int:
    from pathlib import Path

    from tsched.defrag import defrag
    from tsched.errors import InputError
    from tsched.formats.running_csv import read_running
    from tsched.presets import load_cluster

    for flag, out in (("-o", args.output), ("--picture", args.picture)):
        if out and not Path(out).parent.resolve().is_dir():  # said before any work is done
            raise InputError(f"{flag} {out}: folder {Path(out).parent} does not exist")
    cluster = load_cluster(args.cluster)
    running = read_running(args.running, cluster, args.restart_cost)
    console = stderr_console(args.quiet or args.json)
    with console.status(f"planning room for {args.gpus} GPUs on {cluster.name} "
                        f"({len(running.jobs)} running jobs)…"):  # fmt: skip
        plan = defrag(cluster, running, args.gpus, admission=args.admission,
                      restart_cost=args.restart_cost, time_limit=args.time_limit,
                      method=args.method)  # fmt: skip
    if args.picture and plan.status in ("optimal", "feasible"):
        from tsched.defrag.picture import draw_defrag

        draw_defrag(running, plan, args.picture)
    if args.output:
        plan.write(args.output)
    if args.json:
        print(json.dumps(plan.to_dict()))
    else:
        _print(plan)
    return EXIT_OK if plan.status in ("optimal", "feasible") else EXIT_INFEASIBLE


def _print(plan: Any) -> None:
    from rich.console import Console
    from rich.table import Table

    out = Console(highlight=False)
    cost = "—" if plan.cost is None else f"{plan.cost:,.0f}"
    bound = "—" if plan.bound is None else f"{plan.bound:,.0f}"
    gap = "—" if plan.gap is None else f"{plan.gap:.2%}"
    out.print(f"{plan.cluster}: {plan.gpus} GPUs ({plan.admission}) — {plan.status}, "
              f"{len(plan.moves)} job(s) moved, cost {cost} GPU-s, bound {bound}, gap {gap}, "
              f"{plan.method} in {plan.wall_time:.2f} s")  # fmt: skip
    if plan.message:
        out.print(plan.message)
    if not plan.target:
        return
    table = Table(show_edge=False, pad_edge=False)
    for name in ("job", "from", "to", "GPU-s"):
        table.add_column(name, justify="right" if name == "GPU-s" else "left")
    for m in plan.moves:
        table.add_row(m.job, _gpus(m.source), _gpus(m.dest), f"{m.cost:,.0f}")
    if plan.moves:
        out.print(table)
    out.print(f"waiting job: {_gpus(plan.target)}")


def _gpus(places: Any) -> str:
    """``node003:0-3,6 node004:0-7`` from (node, GPU) pairs."""
    by: dict[str, list[int]] = {}
    for node, gpu in places:
        by.setdefault(node, []).append(gpu)
    parts = []
    for node, gpus in by.items():
        gpus.sort()
        runs, start = [], gpus[0]
        for a, b in zip(gpus, gpus[1:] + [None], strict=True):
            if b != a + 1:
                runs.append(f"{start}-{a}" if a > start else f"{start}")
                start = b
        parts.append(f"{node}:{','.join(runs)}")
    return " ".join(parts)


def add_parsers(sub: Any) -> None:
    from tsched.defrag import ADMISSIONS, METHODS

    p = sub.add_parser(
        "defrag",
        help="which running jobs to move, and where, so that a waiting job can start",
        description="Choose which running jobs move, and where, so that a waiting job of N "
        "GPUs gets a placement its admission rule accepts, losing the fewest GPU-seconds to "
        "restarts; with a lower bound and a gap, or the reason no set of moves frees one.",
    )
    p.add_argument("--cluster", required=True, help="cluster/v1 file or preset")
    p.add_argument("--running", required=True, metavar="RUNNING.csv",
                   help="running jobs: job,node,gpu[,restart_seconds][,movable]")  # fmt: skip
    p.add_argument("--gpus", required=True, type=integer(minimum=1), metavar="N",
                   help="GPUs the waiting job needs")  # fmt: skip
    p.add_argument("--admission", choices=ADMISSIONS, default="compact",
                   help="compact (one node up to a node's size, else whole nodes and at most one "
                   "partly used node; default) or any (any free GPUs)")  # fmt: skip
    p.add_argument("--restart-cost", type=number(minimum=0), default=300.0, metavar="S",
                   help="restart seconds of a job without its own (default 300)")  # fmt: skip
    p.add_argument("--time-limit", type=number(positive=True), default=10.0, metavar="T",
                   help="seconds to search (default 10)")  # fmt: skip
    p.add_argument("--method", choices=METHODS, default="auto",
                   help="heuristic, cpsat, or auto (the heuristic, then CP-SAT on states of up "
                   "to 1,024 GPUs until proved; default)")  # fmt: skip
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    p.add_argument("-o", "--output", metavar="OUT.json", help="write the defrag/v1 plan here")
    p.add_argument("--picture", metavar="OUT.png", help="draw the state before and after")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=cmd_defrag)
