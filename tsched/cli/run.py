"""``tsched run ray PLAN (--entrypoint MOD:FN | -- CMD …)``: run a plan's workers on Ray."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from tsched.cli._common import integer, number
from tsched.errors import InputError

__all__ = ["add_parsers"]


def cmd_run_ray(args: argparse.Namespace) -> int:
    from tsched.backends.ray import run
    from tsched.plan import read_plan

    command = list(args.cmd_argv or [])
    if bool(args.entrypoint) == bool(command):
        raise InputError("tsched run ray: give --entrypoint MODULE:FUNCTION or -- COMMAND …")
    plan = read_plan(args.plan)
    quiet = args.quiet or args.json
    from rich.console import Console

    err = Console(stderr=True, quiet=quiet, highlight=False)
    options = {"reservation_timeout": args.reservation_timeout,
               "execution_timeout": args.execution_timeout, "address": args.address,
               "master_port": args.master_port}  # fmt: skip
    restarts: list[Any] = []
    if not args.replan:
        if args.max_restarts is not None or args.min_workers is not None:
            raise InputError("--max-restarts and --min-workers go with --replan")
        with err.status(f"reserving {len(plan.assignment)} GPUs and running {args.plan}…"):
            results = run(plan, entrypoint=args.entrypoint or None, command=command or None,
                          **options)  # fmt: skip
    else:
        from tsched.backends.replan import DEFAULT_RESTARTS, run_replanning
        from tsched.cli._common import load_plan_models

        model, workload = load_plan_models(plan, args.cluster, args.workload, args.plan)
        if workload is None:
            raise InputError(f"{args.plan}: --replan needs the plan's workload: its recorded "
                             "source is not found (give --workload FILE|PRESET)")  # fmt: skip

        def said(r: Any) -> None:
            gap = "" if r.gap is None else f", gap {100 * r.gap:.2f}%"
            sys.stderr.write(
                f"tsched: restart {r.restart}: lost {', '.join(r.lost_nodes)}; re-planned "
                f"{r.workers} workers in {r.replan_seconds:.2f} s ({r.status}, objective "
                f"{r.objective:.4g} s/iteration{gap})\n"
            )

        with err.status(f"reserving {len(plan.assignment)} GPUs and running {args.plan}…"):
            results, restarts, plan = run_replanning(
                plan, model, workload, entrypoint=args.entrypoint or None,
                command=command or None,
                max_restarts=DEFAULT_RESTARTS if args.max_restarts is None else args.max_restarts,
                min_workers=args.min_workers, method=args.method, time_limit=args.time_limit,
                on_restart=None if quiet else said, **options,
            )  # fmt: skip
    rows = [
        {
            "rank": r.rank,
            "node": r.node,
            "cuda_visible_devices": r.cuda_visible_devices,
            "seconds": round(r.seconds, 3),
            "value": _jsonable(r.value),
        }
        for r in results
    ]
    if args.json:
        doc = {"plan": str(args.plan), "workers": rows}
        if args.replan:
            doc["restarts"] = [r.to_dict() for r in restarts]
        print(json.dumps(doc))
        return 0
    from rich.table import Table

    out = Console(highlight=False)
    again = f" after {len(restarts)} restart(s)" if restarts else ""
    table = Table(title=f"{args.plan}: {len(rows)} workers ran where planned{again}")
    for col in ("rank", "node", "CUDA_VISIBLE_DEVICES", "seconds", "result"):
        table.add_column(col)
    for r in rows:
        table.add_row(
            str(r["rank"]), r["node"], r["cuda_visible_devices"], f"{r['seconds']:.3f}",
            _brief(r["value"], max(12, out.width - 56)),
        )  # fmt: skip
    out.print(table)
    return 0


def _brief(value: Any, width: int = 32) -> str:
    """A worker's result on one short line: a mapping as ``key=value`` pairs, cut at ``width``
    characters (``--json`` has it whole)."""
    text = " ".join(f"{k}={v}" for k, v in value.items()) if isinstance(value, dict) else str(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return repr(value)


def add_parsers(sub: Any) -> None:
    from tsched.backends.replan import DEFAULT_RESTARTS

    p = sub.add_parser("run", help="execute a plan (ray)")
    rsub = p.add_subparsers(dest="backend", metavar="ray", required=True)
    r = rsub.add_parser(
        "ray",
        help="run one task per worker on its planned node and GPU",
        description="tsched run ray PLAN --entrypoint pkg.mod:fn | -- CMD …",
    )
    r.add_argument("plan", metavar="PLAN.json")
    r.add_argument("--entrypoint", metavar="MODULE:FUNCTION", default=None)
    r.add_argument(
        "--address", default=None, help="Ray address (default: the sandbox's, else auto)"
    )
    r.add_argument("--reservation-timeout", type=number(positive=True), default=60.0, metavar="S")
    r.add_argument("--execution-timeout", type=number(positive=True), default=None, metavar="S")
    r.add_argument("--master-port", type=integer(1, 65535), default=29500)
    g = r.add_argument_group("when a node dies (--replan)")
    g.add_argument("--replan", action="store_true",
                   help="on a lost node, release everything, re-plan on the GPUs still alive "
                        "and start again")  # fmt: skip
    g.add_argument("--max-restarts", type=integer(0, 100), default=None, metavar="K",
                   help=f"restarts allowed (default {DEFAULT_RESTARTS})")  # fmt: skip
    g.add_argument("--min-workers", type=integer(1), default=None, metavar="N",
                   help="allow a smaller data-parallel degree, down to N workers, when the "
                        "full size no longer fits")  # fmt: skip
    g.add_argument(
        "--cluster",
        default=None,
        help="the cluster model (default: where the plan records it came from)",
    )
    g.add_argument(
        "--workload",
        default=None,
        help="the workload (default: where the plan records it came from)",
    )
    g.add_argument("--method", default="auto", help="solver of the re-plans (default auto)")
    g.add_argument("--time-limit", type=number(positive=True), default=None, metavar="S")
    r.add_argument("--json", action="store_true")
    r.add_argument("--quiet", action="store_true")
    r.set_defaults(cmd_argv=[])  # what follows `--` on the command line (see tsched.cli.main)
    r.set_defaults(func=cmd_run_ray)
