"""``tsched kai manifest|submit|status|cancel``: run a plan under the KAI Scheduler."""

from __future__ import annotations

import argparse
import json
from typing import Any

from tsched.cli._common import integer, number
from tsched.errors import ExecutorError

__all__ = ["add_parsers"]


def _objects(args: argparse.Namespace) -> tuple[list[dict[str, Any]], Any]:
    from tsched.backends.kai import DEFAULT_IMAGE, kai_manifests, validate_objects
    from tsched.plan import read_plan
    from tsched.presets import load_cluster

    plan = read_plan(args.plan)
    cluster = load_cluster(args.cluster) if args.cluster else None
    objects = kai_manifests(
        plan,
        cluster,
        queue=args.queue,
        namespace=args.namespace,
        image=args.image or DEFAULT_IMAGE,
        command=list(args.cmd_argv or []) or None,
        name=args.name,
        priority_class=args.priority_class,
        master_port=args.master_port,
        gpu_pinning=args.gpu_pinning,
        device_class=args.device_class,
    )
    import importlib.util

    if all(importlib.util.find_spec(m) for m in ("jsonschema", "kubernetes")):
        validate_objects(objects)
    else:  # the objects are still right; only the contract check needs the extra
        import sys

        sys.stderr.write(
            "tsched: note: not validated against the KAI CRDs (pip install 'tsched[kubernetes]')\n"
        )
    return objects, cluster


def cmd_manifest(args: argparse.Namespace) -> int:
    import yaml

    objects, _cluster = _objects(args)
    print(yaml.safe_dump_all(objects, sort_keys=False), end="")
    return 0


def _client(args: argparse.Namespace) -> Any:
    from tsched.backends.kai import KaiClient

    return KaiClient.from_kubeconfig(args.kubeconfig, args.context)


def _api_errors(func: Any) -> Any:
    """Turn the client's transport and API errors into ExecutorError (exit 3, one line)."""

    def wrapped(args: argparse.Namespace) -> int:
        try:
            from kubernetes.client.rest import ApiException
            from urllib3.exceptions import HTTPError
        except ImportError:
            raise ExecutorError("this needs tsched[kubernetes]") from None
        try:
            return int(func(args))
        except ApiException as exc:
            from tsched.backends.kai import api_reason

            raise ExecutorError(f"Kubernetes API: {api_reason(exc)}") from None
        except HTTPError as exc:
            raise ExecutorError(f"cannot reach the Kubernetes API: {exc}") from None

    return wrapped


@_api_errors
def cmd_submit(args: argparse.Namespace) -> int:
    from rich.console import Console

    objects, cluster = _objects(args)
    client = _client(args)
    quiet = args.quiet or args.json
    err = Console(stderr=True, quiet=quiet, highlight=False)
    if not args.skip_preflight:
        problems = client.preflight(objects, cluster)
        if problems:
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            raise ExecutorError(f"preflight: {problems[0]}{more}")
    with err.status(f"submitting {len(objects)} objects…"):
        result = client.submit(objects)
    out: dict[str, Any] = {
        "name": result.name,
        "namespace": result.namespace,
        "created": result.created,
        "adopted": result.adopted,
    }
    err.print(
        f"{result.name}: created {len(result.created)}, adopted {len(result.adopted)} object(s) "
        f"in namespace {result.namespace}"
    )
    code = 0
    if args.wait:
        with err.status(f"waiting for {result.name}…") as status:
            final = client.watch(
                result.namespace,
                result.name,
                timeout=args.timeout,
                on_change=lambda s: status.update(f"{result.name}: {s.phase} {s.pods}"),
            )
        out["status"] = final.to_dict()
        code = {"succeeded": 0, "failed": 3}.get(final.phase, 3)
        err.print(f"{result.name}: {final.phase}" + "".join(f"\n  {r}" for r in final.reasons))
    if args.json:
        print(json.dumps(out))
    elif not quiet:
        print(result.name)
    return code


@_api_errors
def cmd_status(args: argparse.Namespace) -> int:
    status = _client(args).status(args.namespace, args.job)
    if args.json:
        print(json.dumps(status.to_dict()))
    else:
        print(f"{status.name}: {status.phase}")
        for pod, phase in status.pods.items():
            print(f"  {pod}: {phase}")
        for reason in status.reasons:
            print(f"  {reason}")
    return 0 if status.phase != "missing" else 1


@_api_errors
def cmd_cancel(args: argparse.Namespace) -> int:
    deleted = _client(args).cancel(args.namespace, args.job)
    if args.json:
        print(json.dumps({"name": args.job, "deleted": deleted}))
    else:
        print(f"{args.job}: deleted {len(deleted)} object(s)")
    return 0 if deleted else 1


def add_parsers(sub: Any) -> None:
    from tsched.backends.kai import DRA_DEVICE_CLASS, GPU_PINNING

    p = sub.add_parser("kai", help="run a plan under the KAI Scheduler (Kubernetes)")
    kai = p.add_subparsers(dest="kai_command", metavar="ACTION", parser_class=type(p))
    kai.required = True

    def plan_args(q: argparse.ArgumentParser) -> None:
        q.add_argument("plan", metavar="PLAN.json")
        q.add_argument("--cluster", metavar="PATH", help="cluster model the plan was made for "
                       "(adds the topology constraint)")  # fmt: skip
        q.add_argument("--queue", default="default", help="KAI queue (default: default)")
        q.add_argument("--namespace", default="default", help="namespace (default: default)")
        q.add_argument("--image", default=None, help="container image")
        q.add_argument("--name", default=None, help="job name (default: from the plan)")
        q.add_argument("--priority-class", default=None, help="priorityClassName")
        q.add_argument(
            "--master-port", type=integer(1, 65535), default=29500, help="rendezvous port"
        )
        q.add_argument(
            "--gpu-pinning",
            choices=GPU_PINNING,
            default="device-plugin",
            help="device-plugin: a GPU count per pod (the kubelet picks which); dra: one "
            "ResourceClaim per worker naming exactly the planned GPU (Kubernetes >= 1.34 with "
            "the NVIDIA DRA driver)",
        )
        q.add_argument(
            "--device-class",
            default=DRA_DEVICE_CLASS,
            help=f"DeviceClass of the claims (default {DRA_DEVICE_CLASS})",
        )
        q.set_defaults(cmd_argv=None)

    def api_args(q: argparse.ArgumentParser) -> None:
        q.add_argument("--kubeconfig", default=None, help="kubeconfig file (default: in-cluster "
                       "or ~/.kube/config)")  # fmt: skip
        q.add_argument("--context", default=None, help="kubeconfig context")
        q.add_argument("--json", action="store_true", help="one JSON document on stdout")

    q = kai.add_parser("manifest", help="print the PodGroup, Pods and Service as YAML")
    plan_args(q)
    q.set_defaults(func=cmd_manifest)

    q = kai.add_parser("submit", help="preflight, create the objects (rolled back on failure)")
    plan_args(q)
    api_args(q)
    q.add_argument("--wait", action="store_true", help="watch until the job ends")
    q.add_argument("--timeout", type=number(positive=True), default=3600.0, help="--wait limit, s")
    q.add_argument("--skip-preflight", action="store_true", help="submit without checks")
    q.add_argument("--quiet", action="store_true", help="no progress on stderr")
    q.set_defaults(func=cmd_submit)

    actions = (
        ("status", cmd_status, "phase of a submitted job"),
        ("cancel", cmd_cancel, "delete a job's pods, PodGroup and Service"),
    )
    for action, func, text in actions:
        q = kai.add_parser(action, help=text)
        q.add_argument("job", metavar="JOB", help="job name (what submit printed)")
        q.add_argument("--namespace", default="default")
        api_args(q)
        q.set_defaults(func=func)
