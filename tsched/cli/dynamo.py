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
    if args.plan:
        plan = read_plan(args.plan)
    elif args.cluster:
        problem = PlacementProblem.build(load_cluster(args.cluster), service_workload(spec))
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
                   address=args.address, timeout=args.timeout)  # fmt: skip
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
    q.add_argument("--method", default="auto", help="solver when planning (default auto)")
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
