"""``tsched show PLAN.json -o OUT.png|svg|html``: a picture of a plan on its cluster."""

from __future__ import annotations

import argparse
from typing import Any

from tsched.cli._common import EXIT_OK, stderr_console
from tsched.errors import InputError

__all__ = ["add_parsers", "load_plan_models"]


def load_plan_models(
    plan: Any, cluster: str | None, workload: str | None, plan_path: str | None = None
) -> tuple[Any, Any]:
    """The cluster and workload to draw a plan with: the given files or presets, else where the
    plan says they came from (its ``sources``, as given when it was solved: a path from the
    current folder or from the plan's, or a preset), else the presets the plan names. A
    workload that cannot be found is left out (no traffic drawn)."""
    from tsched import presets
    from tsched.presets import load_cluster, load_workload

    sources = dict(plan.sources or {})
    cluster = cluster or _found(sources.get("cluster"), plan_path, presets.CLUSTERS)
    workload = workload or _found(sources.get("workload"), plan_path, presets.WORKLOADS)
    if cluster is None:
        if plan.cluster not in presets.CLUSTERS:
            where = f"{plan_path}: " if plan_path else ""
            recorded = sources.get("cluster")
            found = f" and its recorded source {recorded!r} is not found" if recorded else ""
            raise InputError(
                f"{where}cluster: the plan's cluster {plan.cluster!r} is not a preset{found}; "
                "give its model with --cluster FILE"
            )
        cluster = plan.cluster
    if workload is None and plan.workload in presets.WORKLOADS:
        workload = plan.workload
    return load_cluster(cluster), (load_workload(workload) if workload else None)


def _found(source: str | None, plan_path: str | None, names: dict[str, str]) -> str | None:
    """A recorded source that can be read: a file from here or from the plan's folder, or a
    preset name; None otherwise."""
    from pathlib import Path

    if not source:
        return None
    if Path(source).exists() or (source in names and not Path(source).suffix):
        return source
    if plan_path is not None:
        beside = Path(plan_path).parent / source
        if beside.exists():
            return str(beside)
    return None


def cmd_show(args: argparse.Namespace) -> int:
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
