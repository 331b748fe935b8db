"""The processes of a Dynamo service, built without running anything: replicas from a plan, each
engine's command line and environment, the frontend and the tsched router, under a guardian."""

from __future__ import annotations

import collections
import os
import socket
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tsched.backends.dynamo.spec import DynamoSpec, service_workload
from tsched.errors import ExecutorError, InputError
from tsched.plan import Plan

__all__ = [
    "Replica",
    "free_port",
    "loopback_env",
    "replicas_of",
    "dynamo_processes",
    "router_process",
]


_TP_FLAG = {"vllm": "--tensor-parallel-size", "sglang": "--tp", "trtllm": "--tensor-parallel-size"}


@dataclass(frozen=True)
class Replica:
    """One engine instance: its role (``prefill``, ``decode`` or ``agg``), its node and GPUs."""

    name: str
    role: str
    node: str
    gpus: tuple[int, ...]
    workers: tuple[int, ...]


def replicas_of(plan: Plan, spec: DynamoSpec) -> list[Replica]:
    """Group the plan's workers by replica (roles ``prefill0-tp1`` …), one node per replica."""
    workload = service_workload(spec)
    roles = plan.roles or workload.roles
    if roles is None or len(roles) != len(plan.assignment):
        raise InputError(
            f"plan has {len(plan.assignment)} workers; service {spec.name!r} needs "
            f"{workload.workers} (plan made for another service?)"
        )
    groups: dict[str, list[Any]] = {}
    for e in plan.assignment:
        groups.setdefault(roles[e.worker].split("-", 1)[0], []).append(e)
    out = []
    for name, entries in groups.items():
        nodes = {e.node for e in entries}
        if len(nodes) != 1:
            raise InputError(
                f"replica {name!r} spans nodes {sorted(nodes)}: a TP group must stay on one node"
            )
        kind = name.rstrip("0123456789")
        role = "agg" if not spec.disaggregated else kind
        out.append(Replica(name, role, entries[0].node, tuple(e.gpu for e in entries),
                           tuple(e.worker for e in entries)))  # fmt: skip
    return out


def loopback_env(namespace: str, file_kv: Path | None) -> dict[str, str]:
    """Dynamo's environment for processes on this host: ``namespace``, the TCP request plane
    and ZMQ events on 127.0.0.1, no hub downloads, and file discovery in ``file_kv`` (when
    given)."""
    env = {
        "DYN_NAMESPACE": namespace,
        "DYN_REQUEST_PLANE": "tcp",
        "DYN_EVENT_PLANE": "zmq",
        "DYN_TCP_RPC_HOST": "127.0.0.1",
        "DYN_TCP_RESPONSE_STREAM_HOST": "127.0.0.1",
        "DYN_EVENT_PLANE_HOST": "127.0.0.1",
        "DYN_SYSTEM_HOST": "127.0.0.1",
        "HF_HUB_OFFLINE": "1",
        "PYTHONUNBUFFERED": "1",
    }
    if file_kv is not None:
        env["DYN_DISCOVERY_BACKEND"] = "file"
        env["DYN_FILE_KV"] = str(file_kv)
    return env


def _base_env(spec: DynamoSpec, workdir: Path) -> dict[str, str]:
    kv = workdir / "kv" if spec.discovery == "file" else None
    return {**loopback_env(spec.namespace, kv), **spec.env}


#: Ports :func:`free_port` handed out in this process, most recent last: a port is free when
#: checked but taken only when its process binds it, so one handed out is not handed out again
#: (two of a sandbox's Ray ports once came out equal).
_ISSUED: collections.OrderedDict[int, None] = collections.OrderedDict()
_ISSUED_KEPT = 2048


def free_port(low: int = 20000, high: int = 32767) -> int:
    """A free TCP port in [low, high], none handed out before by this process (the last
    :data:`_ISSUED_KEPT`). Dynamo 1.6 reads ``DYN_SYSTEM_PORT`` as a signed 16-bit integer, so
    ports above 32767 (the kernel's usual ephemeral range) make workers exit."""
    import random

    rng = random.Random()
    for _ in range(200):
        port = rng.randint(low, high)
        if port in _ISSUED:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _ISSUED[port] = None
        while len(_ISSUED) > _ISSUED_KEPT:
            _ISSUED.popitem(last=False)
        return port
    raise ExecutorError(f"no free port in {low}-{high}")


def dynamo_processes(
    plan: Plan,
    spec: DynamoSpec,
    workdir: str | os.PathLike[str],
    ports: Sequence[int] | None = None,
) -> tuple[list[tuple[Replica, Any]], Any]:
    """Pure translation: ``([(replica, GuardSpec)], frontend GuardSpec)``.

    ``ports`` are the replicas' system (health) ports, in replica order; free ones are picked when
    omitted. Each engine gets ``CUDA_VISIBLE_DEVICES`` = its planned GPU indices.
    """
    work = Path(workdir)
    base = _base_env(spec, work)
    replicas = replicas_of(plan, spec)
    ports = list(ports) if ports is not None else [free_port() for _ in replicas]
    out = []
    for replica, port in zip(replicas, ports, strict=True):
        argv = [sys.executable, "-m", f"dynamo.{spec.engine}", "--model-path", spec.model_path,
                "--model-name", spec.model_name]  # fmt: skip
        if spec.disaggregated:
            argv += ["--disaggregation-mode", replica.role]
        if spec.engine in _TP_FLAG:
            argv += [_TP_FLAG[spec.engine], str(len(replica.gpus))]
        argv += list(spec.engine_args)
        env = {
            **base,
            "DYN_SYSTEM_PORT": str(port),
            # /health answers 200 once the generate endpoint serves (else it stays 503)
            "DYN_SYSTEM_USE_ENDPOINT_HEALTH_STATUS": '["generate"]',
            "CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in replica.gpus),
        }
        ready = {"url": f"http://127.0.0.1:{port}/health", "contains": '"status":"ready"'}
        out.append((replica, _guarded(spec, replica.name, argv, env, (ready,), work)))
    url = f"http://{spec.frontend_host}:{spec.frontend_port}"
    completion = {"model": spec.model_name, "prompt": "hello", "max_tokens": 4}
    argv = (sys.executable, "-m", "dynamo.frontend", "--http-host", spec.frontend_host,
            "--http-port", str(spec.frontend_port))  # fmt: skip
    checks = (
        {"url": f"{url}/health", "contains": '"instances"'},
        {"url": f"{url}/v1/models", "contains": f'"{spec.model_name}"'},
        {"url": f"{url}/v1/completions", "body": completion, "contains": '"choices"'},
    )
    frontend = _guarded(spec, "frontend", argv, base, checks, work)
    return out, frontend


def router_process(spec: DynamoSpec, workdir: str | os.PathLike[str], replicas: int) -> Any:
    """The guarded ``tsched agents serve`` of a ``router: tsched`` service (None without one):
    one replica per serving worker the frontend lists (``--dynamo-frontend``, this service's
    namespace, waiting for ``replicas``); healthy once its ``/health`` says ok."""

    router = spec.router
    if router is None:
        return None
    work = Path(workdir)
    front = _reachable(spec.frontend_host)
    argv = [sys.executable, "-m", "tsched", "agents", "serve",
            "--dynamo-frontend", f"http://{front}:{spec.frontend_port}",
            "--dynamo-namespace", spec.namespace, "--replicas", str(replicas),
            "--policy", router.policy, "--host", router.host, "--port", str(router.port),
            "--tick", f"{router.tick_seconds:g}", "--quiet"]  # fmt: skip
    if router.capacity_tokens is not None:
        argv += ["--capacity-tokens", str(router.capacity_tokens)]
    if router.engine_profile is not None:
        argv += ["--engine", router.engine_profile]
    ok = {"url": f"http://{_reachable(router.host)}:{router.port}/health",
          "contains": '"status": "ok"'}  # fmt: skip
    return _guarded(spec, "router", argv, {"PYTHONUNBUFFERED": "1"}, (ok,), work)


def _reachable(host: str) -> str:
    """Where this host reaches a server bound to ``host`` (a wildcard bind: loopback)."""
    return "127.0.0.1" if host in ("0.0.0.0", "") else host


def _guarded(
    spec: DynamoSpec,
    part: str,
    argv: Sequence[str],
    env: Mapping[str, str],
    checks: tuple[Mapping[str, Any], ...],
    work: Path,
) -> Any:
    """A part of the service under a guardian with the spec's restart and lease settings; its
    receipt and log are ``PART.receipt.json`` and ``PART.log`` in ``work``."""
    from tsched.backends.guardian import GuardSpec

    return GuardSpec(
        name=f"{spec.name}-{part}",
        argv=tuple(argv),
        env=env,
        checks=checks,
        health_timeout=spec.health_timeout,
        restart=spec.restart,
        max_restarts=spec.max_restarts,
        lease_timeout=spec.lease_timeout,
        receipt=str(work / f"{part}.receipt.json"),
        log_file=str(work / f"{part}.log"),
    )
