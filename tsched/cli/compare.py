"""``tsched compare``: replay a trace through placement policies; ``tsched compare calibrate``:
fit and check the job time model on measured step times."""

from __future__ import annotations

import argparse
import json
from typing import Any

from tsched.cli._common import MAX_SEEDS, integer, number, progress
from tsched.errors import InputError

__all__ = ["add_parsers"]


def _budgets(text: str | None) -> dict[str, float]:
    out: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in (text or "").split(","))):
        key, sep, value = part.partition("=")
        try:
            out[key.strip()] = float(value)
        except ValueError:
            sep = ""
        if not sep or not key.strip():
            raise InputError(
                f"--budgets: expected TENANT=WEIGHT or TENANT/PROJECT=WEIGHT pairs, got {part!r}"
            )
    return out


def cmd_compare(args: argparse.Namespace) -> int:
    if args.action == "calibrate":
        return cmd_calibrate(args)
    from tsched.compare.calibrate import load_jobmodel
    from tsched.compare.report import write_report
    from tsched.compare.runner import parse_policies
    from tsched.compare.simulator import SimConfig, representative_jobs
    from tsched.compare.traces import load_trace, parse_mapping
    from tsched.presets import load_cluster

    for flag in ("trace", "policies", "cluster", "out"):
        if not getattr(args, flag):
            raise InputError(f"tsched compare: --{flag} is required")
    cluster = load_cluster(args.cluster)
    usable = int((~cluster.busy_mask).sum())
    jobs = load_trace(
        args.trace,
        mapping=parse_mapping(args.columns) if args.columns else None,
        limit=args.limit,
        max_gpus=usable,
    )
    budgets = _budgets(args.budgets)
    base = SimConfig(
        queue=args.queue,
        time_limit=args.time_limit,
        budgets=budgets,
        window=args.window,
        min_runtime=args.min_runtime,
        preemption=not args.no_preemption,
        restart_cost=args.restart_cost,
        snapshot_jobs=representative_jobs(jobs),
        admission=args.admission,
        consolidate=args.consolidate,
        max_moves=args.max_moves,
    )
    configs = parse_policies(args.policies, base)
    collective = apps = None
    if args.jobmodel:
        collective, apps = load_jobmodel(args.jobmodel)
    quiet = args.quiet or args.json
    if args.live:
        results = _live(args, jobs, cluster, configs, collective, apps, quiet)
    else:
        results = _simulate(args, jobs, cluster, configs, collective, apps, quiet)
    paths = write_report(
        args.out,
        results,
        usable_gpus=usable,
        title=f"{args.trace} on {cluster.name} ({args.queue}, {args.admission} admission"
        f"{', live' if args.live else ''})",
        seeds=args.seeds,
        budgets=budgets,
        plots=not args.no_plots,
        cluster=cluster,
    )
    summary = json.loads(paths[2].read_text())
    if args.json:
        print(json.dumps(summary))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{len(jobs)} jobs on {cluster.name}, queue {args.queue}")
    for col in ("policy", "avg JCT (h)", "p95 (h)", "p99 (h)", "queue delay (h)", "util",
                "run s"):  # fmt: skip
        table.add_column(col)
    for s in summary["runs"]:
        table.add_row(
            s["label"], f"{s['jct_mean'] / 3600:.3f}", f"{s['jct_p95'] / 3600:.3f}",
            f"{s['jct_p99'] / 3600:.3f}", f"{s['queue_delay_mean'] / 3600:.3f}",
            f"{s['utilisation']:.1%}", f"{s['simulation_seconds']:.1f}",
        )  # fmt: skip
    con = Console(highlight=False)
    con.print(table)
    con.print(f"wrote {', '.join(p.name for p in paths)} to {args.out}")
    return 0


def _simulate(
    args: argparse.Namespace, jobs: Any, cluster: Any, configs: Any, collective: Any, apps: Any,
    quiet: bool,
) -> list[Any]:  # fmt: skip
    from tsched.compare.runner import sweep

    with progress(quiet) as bar:
        runs = len(configs) * args.seeds
        task = bar.add_task(f"{runs} runs", total=runs)
        jobs_task = bar.add_task(f"{len(jobs)} jobs", total=len(jobs), visible=not args.ray)

        def on_job(done: int, total: int) -> None:
            if done % 200 == 0 or done == total:
                bar.update(jobs_task, completed=done)

        return sweep(
            jobs,
            cluster,
            configs,
            args.seeds,
            collective=collective,
            apps=apps,
            use_ray=args.ray,
            ray_address=args.address,
            progress=lambda _res: bar.advance(task),
            on_job=on_job,
        )


def _live(
    args: argparse.Namespace, jobs: Any, cluster: Any, configs: Any, collective: Any, apps: Any,
    quiet: bool,
) -> list[Any]:  # fmt: skip
    from rich.console import Console

    from tsched.compare.ray_replay import replay_trace

    if args.seeds != 1 or args.ray:
        raise InputError("tsched compare --live runs one seed and does not take --ray")
    err = Console(stderr=True, quiet=quiet)
    with err.status(f"replaying {len(jobs)} jobs on Ray under {len(configs)} policies…"):
        return replay_trace(
            jobs,
            cluster,
            configs,
            time_scale=args.time_scale,
            collective=collective,
            apps=apps,
            address=args.address,
        )


def cmd_calibrate(args: argparse.Namespace) -> int:
    from tsched.compare.calibrate import (
        calibrate,
        load_jobmodel,
        read_placements,
        write_calibration,
    )
    from tsched.presets import load_cluster

    for flag in ("placements", "cluster", "out"):
        if not getattr(args, flag):
            raise InputError(f"tsched compare calibrate: --{flag} is required")
    cluster = load_cluster(args.cluster)
    rows = read_placements(args.placements)
    collective = load_jobmodel(args.jobmodel)[0] if args.jobmodel else None
    if args.network == "fixed" and collective is None:
        from tsched.compare.simulator import default_apps

        collective = default_apps()[0]
    quiet = args.quiet or args.json
    apps = sorted({r.application for r in rows})
    with progress(quiet) as bar:
        task = bar.add_task("calibrating", total=len(apps))
        predictions, summary = calibrate(
            rows,
            cluster,
            fit_max_nodes=args.fit_max_nodes,
            network=args.network,
            collective=collective,
            progress=lambda _name: bar.advance(task),
            shots=args.shots,
        )
    paths = write_calibration(args.out, predictions, summary, cluster)
    if args.json:
        print(json.dumps(summary))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{args.placements}: {summary['protocol']}")
    for col in ("application", "fit rows", "φ", "predicted", "rank corr", "median error",
                "own fit", "shape ceiling", "ceiling"):  # fmt: skip
        table.add_column(col)
    for name, e in summary["applications"].items():
        table.add_row(
            name, str(e["fit_rows"]), f"{e['network_factor']:.3g}", str(e["predicted_rows"]),
            f"{e.get('rank_correlation', float('nan')):.3f}",
            f"{e.get('median_relative_error', float('nan')):.1%}",
            f"{e.get('own_fit_rank_correlation', float('nan')):.3f}",
            f"{e.get('shape_ceiling_rank_correlation', float('nan')):.3f}",
            f"{e.get('ceiling_rank_correlation', float('nan')):.3f}",
        )  # fmt: skip
    con = Console(highlight=False)
    con.print(table)
    con.print(f"wrote {', '.join(p.name for p in paths)} to {args.out}")
    return 0


def add_parsers(sub: Any) -> None:
    from tsched.compare.placement import ADMISSIONS
    from tsched.compare.simulator import QUEUES

    p = sub.add_parser(
        "compare",
        help="replay a job trace through placement policies (or: compare calibrate …)",
        description="Replay a trace through placement policies and write records, a summary, "
        "a report and plots; `tsched compare calibrate` fits and checks the job time model.",
    )
    p.add_argument("action", nargs="?", choices=("calibrate",), help="calibrate the job model")
    p.add_argument("--trace", metavar="CSV", help="trace file (format detected from the header)")
    p.add_argument("--columns", metavar="MAP", help="generic CSV mapping, e.g. "
                   "submit=start,gpus=num_gpu,duration=runtime,tenant=user")  # fmt: skip
    p.add_argument("--policies", metavar="A,B,…", help="placement rules (fgd, first-fit, "
                   "best-fit, kai-tas, slurm-tree, whole-nodes, spread, random) or solver names "
                   "(+frag: fragmentation-aware; +topo/+count: backfill reservation; +slackS: "
                   "relaxed backfill, the head may slip by S x its run time; +kai/+tsched: "
                   "consolidation), e.g. fgd,best-fit+slack0.25,best-fit+tsched")  # fmt: skip
    p.add_argument("--cluster", metavar="PATH", help="cluster/v1 file or preset")
    p.add_argument("--queue", default="fifo", choices=QUEUES, help="queue policy (default fifo)")
    p.add_argument("--admission", default="any", choices=ADMISSIONS,
                   help="any: start when enough GPUs are free anywhere (default); compact: one "
                   "node for a job that fits one, whole nodes for larger ones")  # fmt: skip
    p.add_argument(
        "--seeds", type=integer(1, MAX_SEEDS), default=1, help="seeds per policy (default 1)"
    )
    p.add_argument("--budgets", metavar="T=W,…", help="fair-share budgets (tenant or "
                   "tenant/project)")  # fmt: skip
    p.add_argument(
        "--window", type=number(positive=True), default=6 * 3600.0, help="fair-share window, s"
    )
    p.add_argument("--min-runtime", type=number(minimum=0.0), default=600.0,
                   help="protected runtime before preemption, s")  # fmt: skip
    p.add_argument("--no-preemption", action="store_true", help="fair share never preempts")
    p.add_argument(
        "--restart-cost",
        type=number(minimum=0.0),
        default=0.0,
        help="seconds a preempted or moved job takes to restart (default 0)",
    )
    p.add_argument(
        "--consolidate",
        default="none",
        choices=("none", "kai", "tsched"),
        help="when the head job does not fit (compact admission): move running jobs "
        "by KAI's consolidation rule, or by a tsched defragmentation plan taken when "
        "it costs less than the head's wait (default none; or +kai, +tsched)",
    )
    p.add_argument("--max-moves", type=integer(0), default=2,
                   help="times one job may be moved by consolidation (default 2)")  # fmt: skip
    p.add_argument(
        "--time-limit", type=number(positive=True), default=1.0, help="seconds per placement solve"
    )
    p.add_argument("--limit", type=integer(1), default=None, help="first N jobs of the trace")
    p.add_argument("--jobmodel", metavar="JSON", help="job model (jobmodel/v1) to use")
    p.add_argument("--ray", action="store_true", help="run the sweep as Ray tasks")
    p.add_argument("--live", action="store_true", help="run the jobs for real on the Ray "
                   "cluster (--address) whose model is --cluster")  # fmt: skip
    p.add_argument("--time-scale", type=number(positive=True), default=0.001,
                   help="--live: scale submit times and durations (default 0.001)")  # fmt: skip
    p.add_argument("--address", default=None,
                   help="Ray address (--ray default: a local one; --live: the sandbox's, "
                        "else auto)")  # fmt: skip
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.add_argument("--placements", metavar="CSV", help="calibrate: measured step times")
    p.add_argument("--fit-max-nodes", type=integer(1), default=1,
                   help="calibrate: fit applications on rows spanning <= K nodes")  # fmt: skip
    p.add_argument("--network", default="loo", choices=("loo", "fixed"),
                   help="calibrate: fit the network leaving each application out (loo) or "
                   "take the cluster's figures (fixed)")  # fmt: skip
    p.add_argument("--shots", type=integer(0), default=0, metavar="K",
                   help="calibrate: fit each application's network factor on K of its own "
                   "multi-node rows, left out of the scoring (default 0)")  # fmt: skip
    p.add_argument("--out", metavar="DIR", help="output folder")
    p.add_argument("--json", action="store_true", help="print the summary as JSON on stdout")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(func=cmd_compare)
