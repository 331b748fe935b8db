"""``tsched agents``: program-aware scheduling of agent workflows — ``simulate`` (discrete-event
study), ``serve`` (the OpenAI-compatible proxy) and ``bench`` (drive a live service)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from tsched.cli._common import EXIT_OK, MAX_SEEDS, integer, number
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


def _policies(text: str, flag: str = "--policies") -> list[str]:
    from tsched.agentic.core import POLICIES

    names = [p.strip() for p in text.split(",") if p.strip()]
    if not names:
        raise InputError(f"{flag}: give at least one policy, e.g. round-robin,tsched")
    for name in names:
        if name not in POLICIES:
            raise InputError(
                f"{flag}: unknown agentic policy {name!r} (valid: {', '.join(POLICIES)})"
            )
    if len(set(names)) != len(names):
        raise InputError(f"{flag}: a policy is named twice in {text!r}")
    if flag == "--policy" and len(names) != 1:
        raise InputError(f"--policy: one policy, got {text!r}")
    return names


def cmd_simulate(args: argparse.Namespace) -> int:
    from tsched.agentic.engine import load_engine_profile
    from tsched.agentic.study import Cell, run_cells, summarize, write_outputs
    from tsched.agentic.workload import load_agentic_workload
    from tsched.cli._common import progress

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
    config = _fair_config(args)
    cells = [
        Cell(w, profile, args.replicas, args.capacity_tokens, policy, seed, config=config,
             horizon=args.duration)
        for w in variants
        for policy in policies
        for seed in range(args.seeds)
    ]
    quiet = args.quiet or args.json
    with progress(quiet) as bar:
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


def _fair_args(p: Any) -> None:
    """tsched's fair share between programs (:class:`~tsched.agentic.core.SchedulerConfig`)."""
    p.add_argument("--no-fair-share", action="store_true",
                   help="tsched: no time-sliced fair share (paused programs resume in queue "
                   "order; the fastest progressing never give way)")  # fmt: skip
    p.add_argument("--rotation-overhead", type=number(positive=True), default=0.2,
                   help="tsched fair share: replica time rotation may cost by the profile's "
                   "estimate; sizes the quantum (default 0.2)")  # fmt: skip
    p.add_argument("--quantum-steps", type=integer(1), default=None,
                   help="tsched fair share: steps a resumed program runs before it may give "
                   "way (default: sized from the engine profile)")  # fmt: skip
    p.add_argument("--pause-bound", type=number(minimum=0.0), default=9.5,
                   help="tsched fair share: a call waiting this many mean steps goes first and "
                   "active programs give way for it (0: no bound; default 9.5)")  # fmt: skip
    p.add_argument("--rotation-ratio", type=number(minimum=1.0), default=2.0,
                   help="tsched fair share: a program gives way to a paused one progressing "
                   "this many times slower (default 2)")  # fmt: skip


def _fair_config(args: argparse.Namespace, **extra: Any) -> Any:
    from tsched.agentic.core import SchedulerConfig

    return SchedulerConfig(fair=not args.no_fair_share, rotation_overhead=args.rotation_overhead,
                           quantum_steps=args.quantum_steps, rotation_ratio=args.rotation_ratio,
                           pause_bound=args.pause_bound or None, **extra)  # fmt: skip


def cmd_serve(args: argparse.Namespace) -> int:
    from pathlib import Path

    from tsched.agentic.engine import load_engine_profile
    from tsched.agentic.proxy import ProxySettings, dynamo_backends, parse_capacities, serve
    from tsched.cli._common import stderr_console

    console = stderr_console(args.quiet)
    policy = _policies(args.policy, "--policy")[0]
    profile = load_engine_profile(args.engine)
    if bool(args.backend) == bool(args.dynamo_frontend):
        raise InputError("give the replicas as --backend URL (repeated) or --dynamo-frontend URL")
    if args.replicas is not None and args.replicas < 1:
        raise InputError(f"--replicas: expected >= 1, got {args.replicas}")
    if args.dynamo_frontend:
        backends = dynamo_backends(
            args.dynamo_frontend,
            namespace=args.dynamo_namespace,
            replicas=args.replicas,
            timeout=args.discovery_timeout,
        )
    else:
        backends = tuple(args.backend)
    token = None
    if args.token_file:
        try:
            token = Path(args.token_file).read_text().strip()
        except OSError as exc:
            raise InputError(f"--token-file {args.token_file}: cannot read: {exc}") from None
        if not token:
            raise InputError(f"--token-file {args.token_file}: the file is empty")
    if args.port < 0 or args.port > 65535:
        raise InputError(f"--port: expected 0..65535, got {args.port}")
    if args.tick <= 0:
        raise InputError(f"--tick: expected seconds > 0, got {args.tick}")
    config = _fair_config(
        args, tick_seconds=args.tick, idle_ttl=args.idle_ttl if args.idle_ttl > 0 else None
    )
    settings = ProxySettings(
        backends=backends,
        capacities=parse_capacities(
            _int_list(args.capacity_tokens, "--capacity-tokens"), backends
        ),  # fmt: skip
        policy=policy,
        host=args.host,
        port=args.port,
        token=token,
        max_body_bytes=int(args.max_body_mb * (1 << 20)),
        backend_timeout=args.backend_timeout,
        config=config,
        profile=profile,
    )
    if args.host not in ("127.0.0.1", "localhost", "::1") and token is None:
        console.print(
            f"[yellow]warning:[/] serving on {args.host} without a bearer token (--token-file)"
        )

    def ready(url: str) -> None:
        console.print(
            f"tsched agents: {settings.policy} proxy on {url} → {', '.join(backends)}",
            soft_wrap=True,
        )
        sys.stderr.flush()

    serve(settings, ready=ready)
    return EXIT_OK


def cmd_bench(args: argparse.Namespace) -> int:
    import asyncio

    from tsched.agentic.bench import run_bench
    from tsched.agentic.study import summarize, write_outputs
    from tsched.agentic.workload import load_agentic_workload
    from tsched.cli._common import progress

    workload = load_agentic_workload(args.workload)
    if args.concurrency is not None:
        if not workload.closed_loop:
            raise InputError("--concurrency: the workload is open loop (arrival_rate)")
        if args.concurrency < 1:
            raise InputError(f"--concurrency: expected >= 1, got {args.concurrency}")
        workload = workload.with_load(concurrency=args.concurrency)
    if args.programs is not None:
        if args.programs < 1:
            raise InputError(f"--programs: expected >= 1, got {args.programs}")
        workload = workload.with_load(programs=args.programs)
    if args.seeds < 1:
        raise InputError(f"--seeds: expected >= 1, got {args.seeds}")
    arms = []
    for item in args.target:
        name, sep, url = item.partition("=")
        if not sep:
            name, url = item, item
        if not url.startswith(("http://", "https://")):
            raise InputError(f"--target {item!r}: expected URL or NAME=URL (http://HOST:PORT)")
        arms.append((name, url.rstrip("/")))
    if len({a for a, _ in arms}) != len(arms):
        raise InputError("--target: two arms have the same name")
    cells, results = [], []
    quiet = args.quiet or args.json
    with progress(quiet) as bar:
        task = bar.add_task("benchmarking", total=len(arms) * args.seeds)
        for seed in range(args.seeds):
            for name, url in arms:  # arms interleaved per seed: drift hits all alike
                res = asyncio.run(
                    run_bench(
                        workload,
                        url,
                        seed=seed,
                        model=args.model,
                        id_in=args.id_in,
                        release=args.release,
                        duration=args.duration,
                        timeout=args.timeout,
                    )  # fmt: skip
                )
                if not res.records:
                    raise_backend(url, res.errors)
                cells.append(_Point(name, workload.concurrency or 0))
                results.append(res)
                bar.advance(task)
    summary = summarize(cells, results, headline=workload.concurrency)
    for name, _ in arms:
        errs: dict[str, int] = {}
        for cell, res in zip(cells, results, strict=True):
            if cell.policy == name:
                for k, v in res.errors.items():
                    errs[k] = errs.get(k, 0) + v
        summary[name]["errors"] = errs
    meta = {
        "tsched": "agents-bench/v1",
        "command": "tsched " + " ".join(sys.argv[1:]),
        "workload": workload.to_data(),
        "targets": dict(arms),
        "seeds": args.seeds,
        "duration_s": args.duration,
    }
    write_outputs(args.out, cells, results, summary, meta, plots=not args.no_plots)
    if args.json:
        print(json.dumps(summary))
    elif not args.quiet:
        _print_table(summary)
    return EXIT_OK


class _Point:
    def __init__(self, policy: str, concurrency: int) -> None:
        self.policy = policy
        self.concurrency = concurrency


def raise_backend(url: str, errors: dict[str, int]) -> None:
    from tsched.errors import ExecutorError

    detail = ", ".join(f"{k} ×{v}" for k, v in errors.items()) or "no answer"
    raise ExecutorError(f"--target {url}: no call succeeded ({detail})")


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
    s.add_argument("--replicas", type=integer(1), required=True, help="engine replicas")
    s.add_argument(
        "--capacity-tokens",
        type=integer(1),
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
    s.add_argument(
        "--seeds", type=integer(1, MAX_SEEDS), default=3, help="runs per policy (default 3)"
    )
    s.add_argument(
        "--concurrency",
        metavar="C1,C2,…",
        help="sweep programs in flight (closed loop); programs scale alike",
    )
    s.add_argument("--programs", type=integer(1), default=None, help="programs per run (override)")
    s.add_argument(
        "--duration",
        type=number(positive=True),
        default=None,
        metavar="S",
        help="stop each run after S simulated seconds",
    )
    _fair_args(s)
    s.add_argument("--ray", action="store_true", help="run the sweep as Ray tasks")
    s.add_argument("--out", required=True, metavar="DIR", help="output folder")
    s.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    s.add_argument("--json", action="store_true", help="print summary.json on stdout")
    s.add_argument("--quiet", action="store_true", help="no progress or table")
    s.set_defaults(func=cmd_simulate)  # fmt: skip

    v = asub.add_parser(
        "serve",
        help="the program-aware OpenAI-compatible proxy in front of engine replicas",
        description="Serve /v1/chat/completions and /v1/completions, scheduling each agent "
        "program's calls across --backend replicas; /programs, /programs/release, /health, "
        "/metrics. Binds 127.0.0.1 unless --host says otherwise.",
    )
    v.add_argument(
        "--dynamo-frontend",
        metavar="URL",
        help="instead of --backend: one replica per serving worker this Dynamo frontend lists "
        "(each reached through it, pinned)",
    )
    v.add_argument(
        "--dynamo-namespace", metavar="NS", help="with --dynamo-frontend: only this namespace"
    )
    v.add_argument(
        "--replicas",
        type=integer(1),
        metavar="N",
        help="with --dynamo-frontend: wait until N serving workers are listed",
    )
    v.add_argument(
        "--discovery-timeout",
        type=number(positive=True),
        default=60.0,
        metavar="S",
        help="with --dynamo-frontend: seconds to wait for the workers (default 60)",
    )
    v.add_argument(
        "--backend",
        action="append",
        metavar="URL[#instance=ID]",
        help="an engine replica's OpenAI-compatible base URL, or one worker behind a Dynamo "
        "frontend that serves several (its instance id, as the frontend's /health lists it); "
        "repeat per replica",
    )
    v.add_argument(
        "--policy", default="tsched", help=f"one of {', '.join(POLICIES)} (default tsched)"
    )
    v.add_argument("--host", default="127.0.0.1", help="listen address (default 127.0.0.1)")
    v.add_argument(
        "--port", type=integer(0, 65535), default=8300, help="listen port (default 8300)"
    )
    v.add_argument(
        "--capacity-tokens",
        metavar="N[,N…]",
        help="KV capacity per replica, tokens (one for all or one per backend; "
        "default: read from each backend's /metrics)",
    )
    v.add_argument(
        "--engine",
        default="mocker",
        metavar="PRESET|FILE",
        help="engine-profile/v1 of the replicas, for tsched's cost model",
    )
    v.add_argument(
        "--tick", type=number(positive=True), default=5.0, help="scheduler tick, s (default 5)"
    )
    v.add_argument(
        "--idle-ttl",
        type=number(minimum=0.0),
        default=600.0,
        help="tsched: release a program idle this long, s (0: never; default 600)",
    )
    v.add_argument(
        "--token-file",
        metavar="PATH",
        help="require 'Authorization: Bearer <token>' with the token in this file",
    )
    v.add_argument(
        "--max-body-mb", type=number(positive=True), default=8.0, help="largest request body, MiB"
    )
    v.add_argument(
        "--backend-timeout",
        type=number(positive=True),
        default=600.0,
        help="seconds a backend call may take (default 600)",
    )
    _fair_args(v)
    v.add_argument("--quiet", action="store_true", help="no start-up line")
    v.set_defaults(func=cmd_serve)  # fmt: skip

    b = asub.add_parser(
        "bench",
        help="drive an agentic workload against live services and measure them",
        description="Run the workload's programs against each --target (the proxy, a Dynamo "
        "frontend, a router) and write the simulator's files from measured responses.",
    )
    b.add_argument("--workload", required=True, metavar="PRESET|FILE")
    b.add_argument(
        "--target",
        action="append",
        required=True,
        metavar="[NAME=]URL",
        help="a service's base URL, optionally named (repeat: arms of one run)",
    )
    b.add_argument("--out", required=True, metavar="DIR")
    b.add_argument(
        "--seeds", type=integer(1, MAX_SEEDS), default=1, help="runs per arm (default 1)"
    )
    b.add_argument("--concurrency", type=integer(1), default=None, help="programs in flight")
    b.add_argument("--programs", type=integer(1), default=None, help="programs per run")
    b.add_argument(
        "--duration",
        type=number(positive=True),
        default=None,
        metavar="S",
        help="stop starting calls after S seconds",
    )
    b.add_argument("--model", default="tiny", help="model name the service serves")
    b.add_argument(
        "--id-in",
        default="header",
        choices=("header", "body"),
        help="program id as x-dynamo-session-id header (default) or body program_id",
    )
    b.add_argument(
        "--release",
        default="programs",
        choices=("programs", "session-final", "none"),
        help="how a finished program is released: POST /programs/release (the tsched proxy; "
        "default), a one-token call with x-dynamo-session-final (Dynamo's ThunderAgent router), "
        "or none (a plain frontend)",
    )
    b.add_argument("--timeout", type=number(positive=True), default=600.0, help="seconds per call")
    b.add_argument("--no-plots", action="store_true")
    b.add_argument("--json", action="store_true", help="print summary.json on stdout")
    b.add_argument("--quiet", action="store_true")
    b.set_defaults(func=cmd_bench)  # fmt: skip
