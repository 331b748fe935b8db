"""A Dynamo service's life on Ray: :func:`up` reserves the planned GPUs and starts detached actors
that own the guarded processes; :func:`status` and :func:`down` find them again by name."""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

from tsched.backends.dynamo.owners import (
    RAY_NAMESPACE,
    actor_name,
    connect,
    find_groups,
    find_parts,
    local_node,
    start_part,
    start_replica,
    teardown,
    wait_healthy,
)
from tsched.backends.dynamo.process import _reachable, dynamo_processes, router_process
from tsched.backends.dynamo.spec import DynamoSpec
from tsched.cluster import Cluster
from tsched.errors import ExecutorError
from tsched.plan import Plan

__all__ = ["RAY_NAMESPACE", "up", "serving_instances", "wait_listed", "status", "down"]

log = logging.getLogger(__name__)


def up(
    spec: DynamoSpec,
    plan: Plan,
    *,
    workdir: str | os.PathLike[str],
    address: str | None = None,
    timeout: float | None = None,
    cluster: Cluster | None = None,
    method: str = "auto",
    time_limit: float = 5.0,
) -> dict[str, Any]:
    """Reserve, start and health-gate the service; returns its status. On any failure,
    everything started is stopped and released before :class:`ExecutorError` is raised.

    With ``spec.replace_lost`` (the default), a detached supervisor
    (:class:`~tsched.backends.dynamo.healing.Supervisor`) then watches the service and replaces
    a replica whose node dies, planning on ``cluster`` (the model the service was planned on;
    the live Ray cluster's inventory when None) with ``method`` and ``time_limit``."""
    from tsched.backends.ray import live_problems

    ray = connect(address)
    work = Path(workdir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    if find_parts(ray, spec.name) or find_groups(spec.name):
        raise ExecutorError(f"service {spec.name!r} is already up (tsched dynamo down {spec.name})")
    problems = live_problems(plan)
    if problems:
        raise ExecutorError("plan refused, nothing reserved: " + "; ".join(problems[:3]))
    engines, frontend = dynamo_processes(plan, spec, work)
    actors: list[Any] = []
    groups: list[Any] = []
    limit = timeout or spec.health_timeout + 60
    try:
        for replica, gspec in engines:
            actor, pg = start_replica(ray, spec.name, replica, gspec, work)
            actors.append(actor)
            groups.append(pg)
        wait_healthy(ray, actors, [g.name for _, g in engines], limit)
        actors.append(start_part(ray, spec.name, "frontend", frontend, work))
        wait_healthy(ray, actors[-1:], [frontend.name], limit)
        serving = sum(1 for r, _ in engines if r.role != "prefill")
        front = f"http://{_reachable(spec.frontend_host)}:{spec.frontend_port}"
        listed, _ = wait_listed(front, serving, limit)
        if len(listed) < serving:
            raise ExecutorError(
                f"the frontend lists {len(listed)} of {serving} replicas after {limit:g} s"
            )
        router = router_process(spec, work, serving)
        if router is not None:
            actors.append(start_part(ray, spec.name, "router", router, work))
            wait_healthy(ray, actors[-1:], [router.name], limit)
        (work / "plan.json").write_text(json.dumps(plan.to_dict(), indent=1))
        if spec.replace_lost:
            from tsched.backends.dynamo.healing import Supervisor

            actors.append(
                ray.remote(num_cpus=0, max_restarts=0)(Supervisor).options(
                    name=actor_name(spec.name, "supervisor"), namespace=RAY_NAMESPACE,
                    lifetime="detached", scheduling_strategy=local_node(ray),
                ).remote(spec, plan, str(work), cluster, method, time_limit)
            )  # fmt: skip
            ray.get(actors[-1].receipt.remote(), timeout=60)
    except BaseException:
        teardown(ray, list(reversed(actors)), groups)
        raise
    return status(spec.name, address=address)


def serving_instances(
    health: bytes | str, *, namespace: str | None = None, component: str | None = None
) -> set[int]:
    """Instance ids of the serving workers a Dynamo frontend's ``/health`` body lists (endpoint
    ``generate``, prefill workers left out), optionally of one namespace and component; an
    unreadable body lists none."""
    try:
        doc = json.loads(health)
    except (ValueError, UnicodeDecodeError):
        return set()
    out = set()
    for inst in (doc.get("instances") or []) if isinstance(doc, dict) else []:
        if not isinstance(inst, dict) or inst.get("endpoint") != "generate":
            continue
        if inst.get("component") == "prefill" or not isinstance(inst.get("instance_id"), int):
            continue
        if namespace is not None and inst.get("namespace") != namespace:
            continue
        if component is not None and inst.get("component") != component:
            continue
        out.add(inst["instance_id"])
    return out


def wait_listed(
    frontend: str,
    want: int | None,
    timeout: float,
    *,
    namespace: str | None = None,
    component: str | None = None,
) -> tuple[set[int], str]:
    """Poll the frontend at base URL ``frontend`` until its ``/health`` lists ``want`` serving
    workers (any, when None) or ``timeout`` seconds pass; returns the ids last listed and what
    the last poll said (for the caller's error)."""
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + timeout
    found: set[int] = set()
    last = "no answer"
    while True:
        try:
            with urllib.request.urlopen(frontend + "/health", timeout=10) as resp:
                found = serving_instances(resp.read(), namespace=namespace, component=component)
            last = f"{len(found)} serving workers listed"
        except (urllib.error.URLError, OSError) as exc:
            last = str(exc)
        if found and (want is None or len(found) >= want):
            return found, last
        if time.monotonic() >= deadline:
            return found, last
        time.sleep(0.2)


def status(service: str, *, address: str | None = None) -> dict[str, Any]:
    """Each part of a running service (health, pid, restarts, how it ended if it did), the
    replicas being replaced, and the supervisor's events (a replica lost, replaced, or not
    replaced and why)."""
    ray = connect(address)
    parts = find_parts(ray, service)
    if not parts:
        raise ExecutorError(f"no service {service!r} is up")
    out: dict[str, Any] = {"service": service, "parts": {}}
    for name, actor in sorted(parts.items()):
        try:
            r = ray.get(actor.receipt.remote(), timeout=30)
        except Exception as exc:
            out["parts"][name] = {"state": "owner-lost", "error": str(exc)}
            continue
        runs = r.get("runs") or [{}]
        state = "up" if r.get("healthy_at") and not r.get("end_reason") else (
            r.get("end_reason") or "starting"
        )  # fmt: skip
        out["parts"][name] = {"state": state, "pid": runs[-1].get("pid"),
                              "restarts": r.get("restarts", 0)}  # fmt: skip
    if "supervisor" in parts:
        try:
            watch = ray.get(parts["supervisor"].state.remote(), timeout=30)
        except Exception as exc:
            watch = {"events": [], "replacing": [], "error": str(exc)}
        out["events"] = watch.get("events", [])
        out["replicas"] = watch.get("replicas", {})
        for name in watch.get("replacing", []):
            out["parts"].setdefault(name, {"state": "replacing", "pid": None, "restarts": 0})
    out["healthy"] = all(p.get("state") == "up" for p in out["parts"].values())
    return out


def down(service: str, *, address: str | None = None) -> list[dict[str, Any]]:
    """Stop the supervisor (so nothing is replaced behind this call), then every part of
    ``service`` (router, then frontend, first), kill their actors, release the GPUs; returns
    the guardians' receipts."""
    ray = connect(address)
    parts = find_parts(ray, service)
    supervisor = parts.pop("supervisor", None)
    if supervisor is not None:
        try:
            ray.get(supervisor.stop.remote(), timeout=180)
        except Exception as exc:
            log.warning("stopping the supervisor of %s: %s", service, exc)
        ray.kill(supervisor)
        parts = find_parts(ray, service)  # what it may have started meanwhile
        parts.pop("supervisor", None)
    groups = find_groups(service)
    if not parts and not groups and supervisor is None:
        raise ExecutorError(f"no service {service!r} is up")
    first = {"router": 0, "frontend": 1}
    order = sorted(parts, key=lambda n: (first.get(n, 2), n))
    return teardown(ray, [parts[n] for n in order], groups)
