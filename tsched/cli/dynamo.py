"""``tsched dynamo up|status|down``: serve a model with NVIDIA Dynamo where tsched places it."""

from __future__ import annotations

import argparse
import json
from typing import Any

from tsched.cli._common import number
from tsched.errors import InputError

__all__ = ["add_parsers"]


def cmd_up(args: argparse.Namespace) -> int:
    from tsched.backends.dynamo import read_spec, service_workload, up
    from tsched.plan import read_plan
    from tsched.presets import load_cluster
    from tsched.problem import PlacementProblem
    from tsched.solvers.registry import solve

    spec = read_spec(args.spec)
    if not args.plan and not args.cluster and args.address is None:
        from tsched.discovery.ray import default_address, sandbox_state

        sandbox = sandbox_state()
        if sandbox is not None and default_address() == sandbox["address"]:
            args.cluster = sandbox["cluster_file"]  # plan on the sandbox it will run on
    model = load_cluster(args.cluster) if args.cluster else None
    if args.plan:
        plan = read_plan(args.plan)
        if model is None and (plan.sources or {}).get("cluster"):
            from tsched.cli._common import load_plan_models

            try:  # the model it was planned on re-plans a lost replica
                model, _ = load_plan_models(plan, None, None, args.plan)
            except InputError:
                model = None  # the live cluster's inventory then
    elif model is not None:
        problem = PlacementProblem.build(model, service_workload(spec))
        result = solve(problem, method=args.method, time_limit=args.time_limit, seed=0)
        if result.assignment is None:
            raise InputError(f"no placement for {spec.name!r}: {result.message}")
        plan = result.plan()
    else:
        raise InputError(
            "tsched dynamo up: give --cluster (to plan) or --plan PLAN.json "
            "(or start a sandbox, whose cluster is the default: tsched sandbox up)"
        )
    from rich.console import Console

    err = Console(stderr=True, quiet=args.quiet or args.json, highlight=False)
    with err.status(f"starting {spec.name} ({spec.engine})…"):
        state = up(spec, plan, workdir=args.workdir or f".tsched-dynamo/{spec.name}",
                   address=args.address, timeout=args.timeout, cluster=model,
                   method=args.method, time_limit=args.time_limit)  # fmt: skip
    state["url"] = state["frontend_url"] = f"http://{spec.frontend_host}:{spec.frontend_port}"
    if spec.router is not None:  # agents talk to the program-aware proxy
        state["url"] = f"http://{spec.router.host}:{spec.router.port}"
    if args.json:
        print(json.dumps(state))
    else:
        _print(state)
    return 0


def _print(state: dict[str, Any]) -> None:
    print(f"{state['service']}: {'healthy' if state.get('healthy') else 'not healthy'}"
          + (f" at {state['url']}" if state.get("url") else ""))  # fmt: skip
    for name, part in state["parts"].items():
        print(f"  {name}: {part.get('state')} pid {part.get('pid')} "
              f"restarts {part.get('restarts', 0)}")  # fmt: skip
    for event in state.get("events", []):
        print(f"  {_event_line(event)}")


def _event_line(event: dict[str, Any]) -> str:
    """One supervisor event in words, with its local time."""
    import time

    when = time.strftime("%H:%M:%S", time.localtime(event.get("at", 0)))
    kind, part = event.get("event"), event.get("part", "")
    if kind == "replica-lost":
        return f"{when} {part} lost: {event.get('reason')}"
    if kind == "replica-replaced":
        objective = event.get("objective")
        cost = f", service objective {objective:.4g} s/iter" if objective is not None else ""
        return (f"{when} {part} replaced on {event.get('node')} GPUs "
                f"{','.join(map(str, event.get('gpus', [])))} after {event.get('seconds')} s "
                f"(planned in {event.get('plan_seconds')} s{cost})")  # fmt: skip
    if kind == "replace-failed":
        retry = event.get("retry_in")
        return f"{when} {part} not replaced: {event.get('reason')} (next try in {retry} s)"
    return f"{when} {kind}: {event.get('error', '')}"


def cmd_status(args: argparse.Namespace) -> int:
    from tsched.backends.dynamo import status

    state = status(args.service, address=args.address)
    print(json.dumps(state)) if args.json else _print(state)
    return 0 if state["healthy"] else 1


def cmd_down(args: argparse.Namespace) -> int:
    from tsched.backends.dynamo import down

    receipts = down(args.service, address=args.address)
    if args.json:
        print(json.dumps({"service": args.service, "receipts": receipts}))
    else:
        for r in receipts:
            print(f"{r.get('name')}: {r.get('end_reason')} after {len(r.get('runs', []))} run(s)")
    return 0


def add_parsers(sub: Any) -> None:
    p = sub.add_parser("dynamo", help="serve a model with NVIDIA Dynamo on planned GPUs (Ray)")
    dyn = p.add_subparsers(dest="dynamo_command", metavar="ACTION", parser_class=type(p))
    dyn.required = True
    q = dyn.add_parser("up", help="plan, reserve, start and health-gate a service")
    q.add_argument("spec", metavar="SPEC.yaml", help="dynamo/v1 service spec")
    q.add_argument(
        "--cluster",
        help="cluster model to plan on (the Ray cluster's; default: the sandbox's, when one is up)",
    )
    q.add_argument("--plan", help="use this plan instead of planning")
    q.add_argument(
        "--method",
        default="auto",
        help="solver when planning, and when re-planning a lost replica (default auto)",
    )
    q.add_argument("--time-limit", type=number(positive=True), default=10.0, help="solver time, s")
    q.add_argument("--workdir", default=None, help="receipts, logs, discovery files")
    q.add_argument(
        "--timeout", type=number(positive=True), default=None, help="health-gate limit, s"
    )
    q.add_argument("--quiet", action="store_true")
    q.set_defaults(func=cmd_up)
    actions = (
        ("status", cmd_status, "health of a running service"),
        ("down", cmd_down, "stop a service and release its GPUs"),
    )
    for action, func, text in actions:
        q = dyn.add_parser(action, help=text)
        q.add_argument("service", metavar="NAME")
        q.set_defaults(func=func)
    for q in dyn.choices.values():
        q.add_argument(
            "--address", default=None, help="Ray address (default: the sandbox's, else auto)"
        )
        q.add_argument("--json", action="store_true", help="one JSON document on stdout")
