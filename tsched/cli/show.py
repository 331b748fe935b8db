"""``tsched show PLAN.json -o OUT.png|svg|html``: a picture of a plan on its cluster."""

from __future__ import annotations

import argparse
from typing import Any

from tsched.cli._common import EXIT_OK, stderr_console
from tsched.errors import InputError

__all__ = ["add_parsers"]


def cmd_show(args: argparse.Namespace) -> int:
    from tsched.cli._common import load_plan_models
    from tsched.plan import read_plan
    from tsched.show import write_picture

    plan = read_plan(args.plan)
    cluster, workload = load_plan_models(plan, args.cluster, args.workload, args.plan)
    _check_fits(plan, cluster, args.plan)
    err = stderr_console(args.quiet)
    with err.status(f"drawing {args.plan}…"):
        path = write_picture(plan, cluster, args.output, workload, color_by=args.color_by)
    if workload is None:
        err.print(f"no workload for {plan.workload!r}: traffic not drawn (give --workload FILE)")
    if not args.quiet:
        print(f"picture of {plan.workload} on {cluster.name} written to {path}")
    return EXIT_OK


def _check_fits(plan: Any, cluster: Any, source: str) -> None:
    """Every planned GPU exists on the cluster the plan is drawn on, or an error naming the
    plan file and the entry."""
    for k, entry in enumerate(plan.assignment):
        try:
            cluster.gpu_id(entry.node, entry.gpu)
        except InputError as exc:
            raise InputError(f"{source}: assignment[{k}] (worker {entry.worker}): not on "
                             f"cluster {cluster.name!r}: {exc}") from None  # fmt: skip


def add_color_by(p: argparse.ArgumentParser) -> None:
    from tsched.show import COLOR_BY

    p.add_argument(
        "--color-by",
        default="auto",
        choices=COLOR_BY,
        help="worker groups to colour: TP/CP/EP group, DP replica, pipeline stage, serving "
        "replica, worker or traffic component (default: auto)",
    )


def add_parsers(sub: Any) -> None:
    p = sub.add_parser(
        "show",
        help="draw a plan: PNG, SVG or one self-contained HTML file",
        description="Draw a plan on its cluster: the hierarchy (levels, nodes, GPUs), every GPU "
        "coloured by its worker group, busy GPUs grey, the traffic between nodes by weight, and "
        "traffic and cost by link class.",
    )
    p.add_argument("plan", metavar="PLAN.json")
    p.add_argument("-o", "--output", required=True, metavar="OUT.png|svg|html")
    p.add_argument("--cluster", help="cluster/v1 file or preset (default: where the plan "
                   "records it came from, else the plan's cluster if a preset)")  # fmt: skip
    p.add_argument("--workload", help="workload/v1 file or preset, for the traffic (default: "
                   "where the plan records it came from, else the plan's if a preset)")  # fmt: skip
    add_color_by(p)
    p.add_argument("--quiet", action="store_true", help="print nothing")
    p.set_defaults(func=cmd_show)
