"""``tsched sandbox up|status|down``: a local Ray cluster that emulates a cluster model;
``tsched ray start-flags``: the ``ray start`` line of every node of a real cluster."""

from __future__ import annotations

import argparse
import json
from typing import Any

from tsched.cli._common import (
    EXIT_INFEASIBLE,
    EXIT_OK,
    add_cluster_argument,
    integer,
    stderr_console,
)

__all__ = ["add_parsers"]


def cmd_up(args: argparse.Namespace) -> int:
    from tsched.backends import sandbox
    from tsched.presets import load_cluster

    cluster = load_cluster(args.cluster)
    err = stderr_console(args.quiet or args.json)
    with err.status(f"starting a sandbox of {cluster.name}…") as shown:

        def on_node(k: int, n: int, name: str) -> None:
            shown.update(f"starting {name} ({k + 1}/{n}) of the {cluster.name} sandbox…")

        state = sandbox.up(cluster, max_nodes=args.max_nodes, on_node=on_node)
    if args.json:
        print(json.dumps(state))
        return EXIT_OK
    gpus = sum(n["gpus"] for n in state["nodes"])
    print(f"sandbox of {state['cluster']} up at {state['address']}: {len(state['nodes'])} nodes, "
          f"{gpus} free GPUs (simulated)")  # fmt: skip
    _print_nodes(cluster, state)
    print("tsched commands that talk to Ray use it when given no --address; "
          "stop it with `tsched sandbox down`")  # fmt: skip
    return EXIT_OK


def _print_nodes(cluster: Any, state: dict[str, Any]) -> None:
    for node in state["nodes"]:
        at = " ".join(
            f"{k}={v}" for k, v in cluster.nodes[cluster.node_index(node["name"])].at.items()
        )
        free = f"{node['free_gpus']}/{node['gpus']}" if "free_gpus" in node else f"{node['gpus']}"
        alive = "" if node.get("alive", True) else "  (not alive)"
        print(f"  {node['name']:12} {free:>5} GPUs  {at}{alive}")


def cmd_status(args: argparse.Namespace) -> int:
    from tsched.backends import sandbox

    state = sandbox.status()
    if args.json:
        print(json.dumps(state))
    elif state is None:
        print("no sandbox is up (tsched sandbox up)")
    elif not state["up"]:
        print(f"sandbox of {state['cluster']} is not answering at {state['address']} "
              f"(tsched sandbox down clears it)")  # fmt: skip
    else:
        from tsched.presets import load_cluster

        alive = sum(1 for n in state["nodes"] if n["alive"])
        print(f"sandbox of {state['cluster']} at {state['address']}: "
              f"{alive}/{len(state['nodes'])} nodes alive, since {state['started']}")  # fmt: skip
        _print_nodes(load_cluster(state["cluster_file"]), state)
        print(f"placement groups {state['placement_groups']}, "
              f"named actors {state['named_actors']}")  # fmt: skip
    healthy = state is not None and state["up"] and all(n["alive"] for n in state["nodes"])
    return EXIT_OK if healthy else EXIT_INFEASIBLE


def cmd_down(args: argparse.Namespace) -> int:
    from tsched.backends import sandbox

    err = stderr_console(args.quiet or args.json)
    with err.status("stopping the sandbox…"):
        stopped = sandbox.down()
    if args.json:
        print(json.dumps(stopped))
    elif stopped is None:
        print("no sandbox was up")
    else:
        print(f"sandbox of {stopped['cluster']} at {stopped['address']} is down "
              f"({stopped['processes']} processes stopped)")  # fmt: skip
    return EXIT_OK


def cmd_start_flags(args: argparse.Namespace) -> int:
    import shlex

    from tsched.backends.ray import ray_start_lines
    from tsched.presets import load_cluster

    cluster = load_cluster(args.cluster)
    lines = ray_start_lines(cluster, args.node or None, args.head)
    if args.json:
        print(json.dumps([{"node": n, "argv": shlex.split(line), "line": line}
                          for n, line in lines]))  # fmt: skip
        return EXIT_OK
    for node, line in lines:
        head = " (head)" if " --head " in f" {line} " else ""
        print(f"# {node}{head}")
        print(line)
    return EXIT_OK


def add_parsers(sub: Any) -> None:
    from tsched.backends.sandbox import DEFAULT_MAX_NODES

    p = sub.add_parser("sandbox", help="a local Ray cluster that emulates a cluster model")
    sb = p.add_subparsers(dest="sandbox_command", metavar="ACTION", parser_class=type(p))
    sb.required = True
    q = sb.add_parser("up", help="start one raylet per node with simulated GPUs")
    add_cluster_argument(q)
    q.add_argument(
        "--max-nodes",
        type=integer(1),
        default=DEFAULT_MAX_NODES,
        metavar="N",
        help=f"refuse models with more nodes (default {DEFAULT_MAX_NODES})",
    )
    q.set_defaults(func=cmd_up)
    q = sb.add_parser("status", help="the sandbox's nodes and free GPUs")
    q.set_defaults(func=cmd_status)
    q = sb.add_parser("down", help="stop every process of the sandbox (idempotent)")
    q.set_defaults(func=cmd_down)
    for q in sb.choices.values():
        q.add_argument("--json", action="store_true", help="one JSON document on stdout")
        q.add_argument("--quiet", action="store_true", help="no progress on stderr")

    p = sub.add_parser("ray", help="Ray conventions (start-flags)")
    rs = p.add_subparsers(dest="ray_command", metavar="ACTION", parser_class=type(p))
    rs.required = True
    q = rs.add_parser(
        "start-flags",
        help="the `ray start` line of every node of a cluster model",
        description="Print, for every node of the cluster model, the `ray start` line that gives "
        "it the tsched.io/* labels and one tsched_gpu_<node>_<i> resource per GPU. Without "
        "--head the model's first node is the head and the others join it at <name>:6379.",
    )
    q.add_argument("cluster", metavar="CLUSTER", help="cluster/v1 file or preset")
    q.add_argument("--node", action="append", metavar="NAME", help="only this node (repeatable)")
    q.add_argument("--head", metavar="ADDRESS", help="host:port of a running head to join")
    q.add_argument("--json", action="store_true", help="one JSON document on stdout")
    q.set_defaults(func=cmd_start_flags)
