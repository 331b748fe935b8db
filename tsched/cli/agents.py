"""``tsched agents``: program-aware scheduling of agent workflows — ``simulate`` (discrete-event
study), ``serve`` (the OpenAI-compatible proxy) and ``bench`` (drive a live service)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from tsched.cli._common import EXIT_OK
from tsched.errors import InputError

__all__ = ["add_parsers"]


def _int_list(text: str | None, flag: str) -> list[int] | None:
    if not text:
        return None
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise InputError(
            f"{flag}: expected whole numbers separated by commas, got {text!r}"
        ) from None
    if not values or min(values) < 1:
        raise InputError(f"{flag}: expected numbers >= 1, got {text!r}")
    return values


def _policies(text: str) -> list[str]:
    from tsched.agentic.core import POLICIES

    names = [p.strip() for p in text.split(",") if p.strip()]
    if not names:
        raise InputError("--policies: give at least one policy, e.g. round-robin,tsched")
    for name in names:
        if name not in POLICIES:
            raise InputError(
                f"--policies: unknown agentic policy {name!r} (valid: {', '.join(POLICIES)})"
            )
    if len(set(names)) != len(names):
        raise InputError(f"--policies: a policy is named twice in {text!r}")
    return names


def cmd_simulate(args: argparse.Namespace) -> int:
    from tsched.agentic.engine import load_engine_profile
    from tsched.agentic.study import Cell, run_cells, summarize, write_outputs
    from tsched.agentic.workload import load_agentic_workload
    from tsched.cli.compare import _progress

    workload = load_agentic_workload(args.workload)
    profile = load_engine_profile(args.engine)
    policies = _policies(args.policies)
    if args.replicas < 1 or args.replicas > 1024:
        raise InputError(f"--replicas: expected 1..1024, got {args.replicas}")
    if args.capacity_tokens < profile.block_size:
        raise InputError(
            f"--capacity-tokens: expected at least one KV block ({profile.block_size} tokens), "
            f"got {args.capacity_tokens}"
        )
    if args.seeds < 1:
        raise InputError(f"--seeds: expected >= 1, got {args.seeds}")
    if args.programs is not None and args.programs < 1:
        raise InputError(f"--programs: expected >= 1, got {args.programs}")
    levels = _int_list(args.concurrency, "--concurrency")
    if levels and not workload.closed_loop:
        raise InputError(
            f"--concurrency: workload {workload.name!r} is open loop (arrival_rate); "
            "concurrency applies to closed-loop workloads"
        )
    variants = []
    for c in levels or [workload.concurrency or 0]:
        w = workload
        if levels:
            per = workload.programs / max(workload.concurrency or 1, 1)
            w = w.with_load(concurrency=c, programs=args.programs or max(c, round(c * per)))
        elif args.programs:
            w = w.with_load(programs=args.programs)
        variants.append(w)
    cells = [
        Cell(w, profile, args.replicas, args.capacity_tokens, policy, seed, horizon=args.duration)
        for w in variants
        for policy in policies
        for seed in range(args.seeds)
    ]
    quiet = args.quiet or args.json
    with _progress(quiet) as bar:
        task = bar.add_task("simulating", total=len(cells))
        results = run_cells(cells, use_ray=args.ray, progress=lambda c, r: bar.advance(task))
    summary = summarize(cells, results, headline=workload.concurrency)
    meta = {
        "tsched": "agents-simulate/v1",
        "command": "tsched " + " ".join(sys.argv[1:]) if sys.argv else "",
        "workload": workload.to_data(),
        "engine": profile.to_data(),
        "replicas": args.replicas,
        "capacity_tokens": args.capacity_tokens,
        "policies": policies,
        "seeds": args.seeds,
        "concurrency": levels or [workload.concurrency],
        "duration_s": args.duration,
    }
    write_outputs(args.out, cells, results, summary, meta, plots=not args.no_plots)
    if args.json:
        print(json.dumps(summary))
    elif not args.quiet:
        _print_table(summary)
    return EXIT_OK


def _print_table(summary: dict[str, dict[str, Any]]) -> None:
    from tsched.cli._common import stderr_console

    header = (
        f"{'policy':14s} {'steps/min':>16s} {'hit':>6s} {'p50 s':>7s} {'p99 s':>7s} {'fair':>6s}"
    )
    lines = [header]
    for policy, e in summary.items():
        low, high = e["ci95"]["steps_per_min"]
        band = f"±{(high - low) / 2:.1f}" if low is not None and high is not None else ""
        lines.append(
            f"{policy:14s} {e['steps_per_min']:9.1f} {band:>6s} {e['cache_hit_rate']:6.3f} "
            f"{e['p50_step_s']:7.2f} {e['p99_step_s']:7.2f} {e['fairness']:6.3f}"
        )
    stderr_console(False).print("\n".join(lines))


def add_parsers(sub: Any) -> None:
    from tsched.agentic.core import POLICIES

    p = sub.add_parser(
        "agents",
        help="program-aware scheduling of agent workflows (simulate, serve, bench)",
        description="Schedule agent programs (LLM calls between tool calls) on inference "
        "replicas: simulate policies, serve the proxy, or drive a live service.",
    )
    asub = p.add_subparsers(dest="agents_command", metavar="ACTION")
    asub.required = True
    s = asub.add_parser(
        "simulate",
        help="discrete-event study of agentic policies on mocker-like engines",
        description="Simulate agent programs on engine replicas under each policy and write "
        "summary.json, records.csv, meta.json and plots into --out.",
    )
    s.add_argument(
        "--workload",
        required=True,
        metavar="PRESET|FILE",
        help="agentic-workload/v1 file or preset (swe, openhands, heavy-tail)",
    )
    s.add_argument(
        "--engine",
        default="mocker",
        metavar="PRESET|FILE",
        help="engine-profile/v1 file or preset (mocker, prefill-heavy; default mocker)",
    )
    s.add_argument("--replicas", type=int, required=True, help="engine replicas")
    s.add_argument(
        "--capacity-tokens",
        type=int,
        required=True,
        metavar="N",
        help="KV capacity of each replica, tokens",
    )
    s.add_argument(
        "--policies",
        required=True,
        metavar="A,B,…",
        help=f"agentic policies: {', '.join(POLICIES)}",
    )
    s.add_argument("--seeds", type=int, default=3, help="runs per policy (default 3)")
    s.add_argument(
        "--concurrency",
        metavar="C1,C2,…",
        help="sweep programs in flight (closed loop); programs scale alike",
    )
    s.add_argument("--programs", type=int, default=None, help="programs per run (override)")
    s.add_argument(
        "--duration",
        type=float,
        default=None,
        metavar="S",
        help="stop each run after S simulated seconds",
    )
    s.add_argument("--ray", action="store_true", help="run the sweep as Ray tasks")
    s.add_argument("--out", required=True, metavar="DIR", help="output folder")
    s.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    s.add_argument("--json", action="store_true", help="print summary.json on stdout")
    s.add_argument("--quiet", action="store_true", help="no progress or table")
    s.set_defaults(func=cmd_simulate)  # fmt: skip
