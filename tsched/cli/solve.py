"""``tsched solve``, ``tsched qap``, ``tsched methods`` and ``tsched presets``: plan a workload,
solve a raw QAP, list the solvers and the built-in models."""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from tsched.cli._common import (
    EXIT_INFEASIBLE,
    EXIT_OK,
    add_cluster_argument,
    integer,
    number,
    parse_options,
    result_line,
    stderr_console,
)

__all__ = ["add_parsers"]


#: Seconds the command keeps for writing its output after ``auto``'s default budget.
OUTPUT_RESERVE = 0.5


def _budget(args: argparse.Namespace) -> float | None:
    """The time limit the solver gets: ``--time-limit`` when given; for ``auto`` without it,
    what is left of the default budget once start-up and reading are paid, less the output's
    reserve (the whole command within the default); otherwise none."""
    import time

    from tsched._clock import STARTED
    from tsched.solvers.auto import DEFAULT_TIME_LIMIT

    if args.time_limit is not None or args.method != "auto":
        return args.time_limit
    spent = time.perf_counter() - STARTED
    return round(max(1.0, DEFAULT_TIME_LIMIT - spent - OUTPUT_RESERVE), 2)


def _solve_and_report(problem: Any, args: argparse.Namespace, limit: float | None) -> Any:
    from tsched.solvers.registry import solve

    console = stderr_console(args.quiet or args.json)
    with console.status(
        f"solving {problem.name} with {args.method} "
        f"({problem.n_workers} workers, {problem.n_locations} free GPUs)…"
    ):
        return solve(
            problem,
            method=args.method,
            time_limit=limit,
            seed=args.seed,
            options=parse_options(args.option),
        )


def cmd_solve(args: argparse.Namespace) -> int:
    from tsched.plan import plan_table, write_plan
    from tsched.presets import load_cluster, load_workload
    from tsched.problem import GPU_COSTS_KEY, PlacementProblem

    cluster = load_cluster(args.cluster)
    if args.max_age is not None:
        from tsched.formats.nccl_tests import check_fresh

        check_fresh(cluster, args.max_age * 3600.0)
    workload = load_workload(args.workload)
    problem = PlacementProblem.build(cluster, workload)
    limit = _budget(args)
    result = _solve_and_report(problem, args, limit)
    from dataclasses import replace

    # where the models came from, as given: tsched show PLAN.json finds them without flags
    plan = replace(result.plan(), sources={"cluster": str(args.cluster),
                                           "workload": str(args.workload)})  # fmt: skip
    ok = result.assignment is not None
    validation = None
    if ok and args.validate_against:
        validation = live_validation(plan, args.validate_against)
    write = ok and (validation is None or validation["valid"])
    if write and args.output:
        write_plan(plan, args.output)
    if write and args.picture:
        from tsched.show import write_picture

        write_picture(plan, cluster, args.picture, workload, color_by=args.color_by)
    doc = None
    if args.explain:
        from tsched.explain import explain

        doc = explain(problem, result, method=args.method, time_limit=limit,
                      validation=validation)  # fmt: skip
    if args.json:
        out_doc = plan.to_dict()
        if validation is not None:
            out_doc["validation"] = validation
        if doc is not None:
            out_doc["explain"] = doc
        # indented for reading; large plans compact (the C encoder: 0.2 s less at 4,096)
        indent = 2 if len(out_doc.get("assignment", ())) <= 1024 else None
        print(json.dumps(out_doc, indent=indent))
    else:
        from rich.console import Console

        out = Console(highlight=False)
        if doc is not None:
            from rich.markup import escape

            from tsched.explain import explain_lines

            for line in explain_lines(doc):
                out.print(escape(line), soft_wrap=True)
        else:
            out.print(cluster.describe())
            out.print(workload.describe())
        if ok:
            out.print(plan_table(plan))
            out.print(result_line(result, " s/iteration", " s"), soft_wrap=True)
            links = {k: v for k, v in plan.cost_by_link.items() if k != GPU_COSTS_KEY}
            split = ", ".join(f"{k} {v:.4g} s" for k, v in links.items())
            out.print(f"communication by link: {split or 'none'}")
            if GPU_COSTS_KEY in plan.cost_by_link:
                out.print(f"per-GPU costs: {plan.cost_by_link[GPU_COSTS_KEY]:.4g} s")
            if validation is not None and doc is None:
                verdict = "valid" if validation["valid"] else "drift"
                out.print(f"live check against {validation['against']}: {verdict}")
        else:
            out.print(f"status {result.status}: {result.message}")
    if not args.quiet and args.output and write and not args.json:
        stderr_console(False).print(f"plan written to {args.output}")
    if not args.quiet and args.picture and write and not args.json:
        stderr_console(False).print(f"picture written to {args.picture}")
    if not ok:
        if not args.json:
            sys.stderr.write(f"tsched: {result.status}: {result.message}\n")
        return EXIT_INFEASIBLE
    if not write:
        assert validation is not None
        first = validation["problems"][0]
        more = len(validation["problems"]) - 1
        sys.stderr.write(
            f"tsched: plan not written: it does not hold on {validation['against']}: {first}"
            + (f" (and {more} more)" if more else "")
            + "\n"
        )
        return EXIT_INFEASIBLE
    return EXIT_OK


#: What ``--validate-against`` reads as a Ray address rather than a file.
_RAY_ADDRESS = re.compile(r"^(ray|auto|sandbox|ray://.+|[A-Za-z0-9_.\-]+:\d+)$")


def live_validation(plan: Any, against: str) -> dict[str, Any]:
    """The drift check of ``plan`` against a cluster file or a live Ray cluster.

    ``against`` is a cluster in any format ``tsched validate`` reads, or a Ray address
    (``ray``/``sandbox``: the default address, ``auto``, ``HOST:PORT``, ``ray://…``). Returns
    ``{"against", "valid", "problems"}``.
    """
    path = Path(against)
    if path.exists() or not _RAY_ADDRESS.match(against):
        from tsched.plan import validate_plan
        from tsched.presets import load_any_cluster

        current = load_any_cluster(against)
        drift = validate_plan(plan, current)
        problems = [f"worker {d.worker} on {d.node} GPU {d.gpu}: {d.reason}" for d in drift]
        return {"ran": True, "against": f"{against} ({current.name})", "valid": not drift,
                "problems": problems}  # fmt: skip
    from tsched.backends.ray import live_problems
    from tsched.discovery.ray import connect, default_address

    address = default_address() if against in ("ray", "sandbox") else against
    try:
        import ray as ray_module

        connected = ray_module.is_initialized()
    except ImportError:
        connected = False
    ray = connect(None if against in ("ray", "sandbox") else address)
    try:
        problems = live_problems(plan)
    finally:
        if not connected:  # leave a connection the caller made alone
            ray.shutdown()
    return {"ran": True, "against": f"Ray at {address}", "valid": not problems,
            "problems": problems}  # fmt: skip


def cmd_qap(args: argparse.Namespace) -> int:
    from tsched.formats.qaplib import read_dat
    from tsched.problem import PlacementProblem

    inst = read_dat(args.file)
    problem = PlacementProblem.from_qap(inst.flow, inst.distance, name=inst.name)
    args.quiet = getattr(args, "quiet", False)
    result = _solve_and_report(problem, args, _budget(args))
    doc = result.qap_dict(inst.name)
    if args.json:
        print(json.dumps(doc))
        return EXIT_OK if result.assignment is not None else EXIT_INFEASIBLE
    print(f"{inst.name}: {doc['n']} facilities")
    if result.assignment is None:
        print(f"status {result.status}: {result.message}")
    else:
        print(f"{result_line(result)}  seed {doc['seed']}")
        permutation = " ".join(str(p + 1) for p in doc["permutation"])
        print(f"permutation (1-based, location of facility i): {permutation}")
    return EXIT_OK if result.assignment is not None else EXIT_INFEASIBLE


def cmd_methods(args: argparse.Namespace) -> int:
    from tsched.solvers.registry import solvers

    rows = [
        {
            "name": s.name,
            "exact": s.exact,
            "bound": s.provides_bound,
            "installed": s.installed(),
            "baseline": s.baseline,
            "description": s.description,
            "options": sorted(s.options),
        }
        for s in solvers().values()
    ]
    if args.json:
        print(json.dumps(rows))
        return EXIT_OK
    from rich.console import Console
    from rich.table import Table

    table = Table(title="solvers")
    for col in ("name", "exact?", "bound?", "installed?", "description"):
        table.add_column(col)
    for r in rows:
        table.add_row(
            r["name"],
            _yes(r["exact"]),
            _yes(r["bound"]),
            _yes(r["installed"]),
            r["description"] + (" [baseline]" if r["baseline"] else ""),
        )
    Console(highlight=False).print(table)
    return EXIT_OK


def cmd_presets(args: argparse.Namespace) -> int:
    from tsched import presets

    rows = [
        {"kind": kind, "name": name, "description": presets.description(text)}
        for kind, table in (("cluster", presets.CLUSTERS), ("workload", presets.WORKLOADS))
        for name, text in table.items()
    ]
    if args.json:
        print(json.dumps(rows))
        return EXIT_OK
    from rich.console import Console
    from rich.table import Table

    table = Table(title="built-in presets (use the name wherever a file is expected)")
    for col in ("kind", "name", "description"):
        table.add_column(col)
    for r in rows:
        default = r["name"] in (presets.DEFAULT_CLUSTER, presets.DEFAULT_WORKLOAD)
        table.add_row(r["kind"], r["name"] + (" (default)" if default else ""), r["description"])
    Console(highlight=False).print(table)
    return EXIT_OK


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def add_parsers(sub: Any) -> None:
    from tsched import presets

    def solver_args(p: argparse.ArgumentParser, default_method: str) -> None:
        p.add_argument(
            "--method",
            default=default_method,
            help=f"solver name, see `tsched methods` (default: {default_method})",
        )
        p.add_argument(
            "--time-limit",
            type=number(positive=True),
            default=None,
            metavar="S",
            help="time budget in seconds (default for auto: the whole command within 10 s)",
        )
        p.add_argument("--seed", type=integer(0), default=0, help="random seed (default 0)")
        p.add_argument(
            "--option",
            action="append",
            metavar="KEY=VALUE",
            help="solver option, repeatable (e.g. required_level=leaf)",
        )
        p.add_argument("--json", action="store_true", help="print one JSON document on stdout")
        p.add_argument("--quiet", action="store_true", help="no progress on stderr")

    p = sub.add_parser("solve", help="place a workload on a cluster")
    add_cluster_argument(p)
    p.add_argument(
        "--workload",
        default=presets.DEFAULT_WORKLOAD,
        help=f"workload/v1 file or preset (default: {presets.DEFAULT_WORKLOAD})",
    )
    solver_args(p, "auto")
    p.add_argument("--output", "-o", metavar="PLAN.json", help="write the plan here (atomically)")
    p.add_argument(
        "--picture", metavar="PATH.png|svg|html", help="draw the plan here (see tsched show)"
    )
    from tsched.cli.show import add_color_by

    add_color_by(p)
    p.add_argument(
        "--explain",
        action="store_true",
        help="print the five checkpoints: spec, objective, interaction test, solver class, "
        "live validation (with --json: the 'explain' member)",
    )
    p.add_argument(
        "--validate-against",
        metavar="CLUSTER|RAY",
        help="check the plan against this cluster file or Ray address (ray, auto, HOST:PORT) "
        "before writing it; drift: nothing written, exit 1",
    )
    p.add_argument(
        "--max-age",
        type=number(positive=True),
        default=None,
        metavar="HOURS",
        help="refuse measured link figures older than this",
    )
    p.set_defaults(func=cmd_solve)

    p = sub.add_parser("qap", help="solve a QAPLIB instance")
    p.add_argument("file", metavar="FILE.dat")
    solver_args(p, "auto")
    p.set_defaults(func=cmd_qap)

    p = sub.add_parser("methods", help="list solvers: exact?, bound?, installed?")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_methods)

    p = sub.add_parser("presets", help="list built-in clusters and workloads")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_presets)
