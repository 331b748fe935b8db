"""A Dynamo service's life on Ray: :func:`up` reserves the planned GPUs and starts detached actors
that own the guarded processes; :func:`status` and :func:`down` find them again by name."""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

from tsched.backends.dynamo.process import _reachable, dynamo_processes, router_process
from tsched.backends.dynamo.spec import DynamoSpec
from tsched.errors import ExecutorError
from tsched.plan import Plan

__all__ = ["RAY_NAMESPACE", "up", "serving_instances", "wait_listed", "status", "down"]

log = logging.getLogger(__name__)


RAY_NAMESPACE = "tsched"


class _Owner:
    """A detached Ray actor owning one engine: it runs the engine's guardian and beats its
    lease. Killing the actor (its process) stops the engine through the guardian."""

    def __init__(self, spec_json: str, workdir: str) -> None:
        from dataclasses import replace

        from tsched.backends.guardian import GuardSpec, Lease, launch

        spec = GuardSpec.from_json(spec_json)
        self.lease = Lease(Path(workdir) / f"{spec.name}.lease")
        self.spec = replace(spec, lease_file=str(self.lease.path), owner_pid=os.getpid())
        self.proc = launch(self.spec, Path(workdir) / f"{spec.name}.guardian.json")
        self._stop = threading.Event()
        period = max(self.spec.lease_timeout / 4.0, 0.2)

        def beat() -> None:
            while not self._stop.wait(period):
                self.lease.beat()

        threading.Thread(target=beat, daemon=True).start()

    def receipt(self) -> dict[str, Any]:
        try:
            data = json.loads(Path(self.spec.receipt or "").read_text())
        except (OSError, ValueError):
            data = {}
        data["guardian_running"] = self.proc.poll() is None
        return data

    def stop(self, timeout: float = 30.0) -> dict[str, Any]:
        self._stop.set()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except Exception:
                self.proc.kill()
                self.proc.wait()
        return self.receipt()


def _actor_name(service: str, part: str) -> str:
    return f"tsched-dynamo-{service}-{part}"


def _connect(address: str | None) -> Any:
    from tsched.discovery.ray import connect

    return connect(address, ExecutorError)


def up(
    spec: DynamoSpec,
    plan: Plan,
    *,
    workdir: str | os.PathLike[str],
    address: str | None = None,
    timeout: float | None = None,
) -> dict[str, Any]:
    """Reserve, start and health-gate the service; returns its status. On any failure,
    everything started is stopped and released before :class:`ExecutorError` is raised."""
    from tsched.backends.ray import NODE_LABEL, gpu_resource, live_problems

    ray = _connect(address)
    from ray.util.placement_group import placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    work = Path(workdir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    if _find(ray, spec.name):
        raise ExecutorError(f"service {spec.name!r} is already up (tsched dynamo down {spec.name})")
    problems = live_problems(plan)
    if problems:
        raise ExecutorError("plan refused, nothing reserved: " + "; ".join(problems[:3]))
    engines, frontend = dynamo_processes(plan, spec, work)
    bundles = [{**{gpu_resource(r.node, g): 1.0 for g in r.gpus}, "CPU": 0.01} for r, _ in engines]
    selectors = [{NODE_LABEL: r.node} for r, _ in engines]
    pg = placement_group(bundles, strategy="PACK", bundle_label_selector=selectors,
                         name=_actor_name(spec.name, "pg"), lifetime="detached")  # fmt: skip
    actors: list[Any] = []
    limit = timeout or spec.health_timeout + 60
    try:
        if not pg.wait(60):
            raise ExecutorError(f"reservation of {len(bundles)} replica bundles timed out")
        owner = ray.remote(num_cpus=0, max_restarts=0)(_Owner)
        for k, (replica, gspec) in enumerate(engines):
            actors.append(
                owner.options(
                    name=_actor_name(spec.name, replica.name),
                    namespace=RAY_NAMESPACE,
                    lifetime="detached",
                    scheduling_strategy=PlacementGroupSchedulingStrategy(
                        pg, placement_group_bundle_index=k
                    ),
                    resources={gpu_resource(replica.node, g): 1.0 for g in replica.gpus},
                ).remote(gspec.to_json(), str(work))
            )
        _wait_healthy(ray, actors, [g.name for _, g in engines], limit)

        def start_part(part: str, gspec: Any) -> None:  # a CPU part: frontend, router
            actors.append(
                owner.options(
                    name=_actor_name(spec.name, part), namespace=RAY_NAMESPACE,
                    lifetime="detached",
                ).remote(gspec.to_json(), str(work))
            )  # fmt: skip
            _wait_healthy(ray, actors[-1:], [gspec.name], limit)

        start_part("frontend", frontend)
        serving = sum(1 for r, _ in engines if r.role != "prefill")
        front = f"http://{_reachable(spec.frontend_host)}:{spec.frontend_port}"
        listed, _ = wait_listed(front, serving, limit)
        if len(listed) < serving:
            raise ExecutorError(
                f"the frontend lists {len(listed)} of {serving} replicas after {limit:g} s"
            )
        router = router_process(spec, work, serving)
        if router is not None:
            start_part("router", router)
    except BaseException:
        _teardown(ray, actors, pg)
        raise
    return status(spec.name, address=address)


def _wait_healthy(ray: Any, actors: list[Any], names: list[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    pending = dict(zip(names, actors, strict=True))
    while pending:
        for name, actor in list(pending.items()):
            r = ray.get(actor.receipt.remote(), timeout=30)
            if r.get("healthy_at"):
                del pending[name]
            elif r.get("end_reason") or not r.get("guardian_running", True):
                raise ExecutorError(
                    f"{name} did not come up: {r.get('end_reason') or 'guardian exited'} "
                    "(its log and receipt are in the work directory)"
                )
        if pending and time.monotonic() > deadline:
            raise ExecutorError(f"not healthy after {timeout:g} s: {', '.join(pending)}")
        time.sleep(0.2)


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


def _teardown(ray: Any, actors: list[Any], pg: Any) -> list[dict[str, Any]]:
    from ray.util.placement_group import remove_placement_group

    receipts = []
    for actor in reversed(actors):
        try:
            receipts.append(ray.get(actor.stop.remote(), timeout=60))
        except Exception as exc:  # the actor may be dead already; its guardian stops itself
            log.warning("stopping %s: %s", actor, exc)
        try:
            ray.kill(actor)
        except Exception:
            pass
    if pg is not None:
        from ray.util.placement_group import placement_group_table

        from tsched.backends.ray import wait_released

        try:
            bundles = (placement_group_table(pg).get("bundles") or {}).values()
            held = [k for b in bundles for k in b if k.startswith("tsched_gpu_")]
            remove_placement_group(pg)
            wait_released(pg, held)  # the GPUs are free again when down returns
        except Exception as exc:
            log.warning("releasing placement group: %s", exc)
    return receipts


def _find_group(name: str) -> Any:
    """The live placement group called ``name``, whichever namespace created it (a named group
    is looked up in the caller's namespace only, and ``tsched dynamo down`` runs in a new
    process, so in another anonymous namespace than the ``up`` that created it)."""
    from ray._raylet import PlacementGroupID
    from ray.util.placement_group import PlacementGroup, placement_group_table

    for hex_id, entry in placement_group_table().items():
        if entry.get("name") == name and entry.get("state") != "REMOVED":
            return PlacementGroup(PlacementGroupID(bytes.fromhex(hex_id)))
    return None


def _find(ray: Any, service: str) -> dict[str, Any]:
    prefix = _actor_name(service, "")
    out = {}
    for entry in ray.util.list_named_actors(all_namespaces=True):
        if entry.get("namespace") == RAY_NAMESPACE and entry["name"].startswith(prefix):
            try:
                out[entry["name"][len(prefix) :]] = ray.get_actor(
                    entry["name"], namespace=RAY_NAMESPACE
                )
            except ValueError:
                continue
    return out


def status(service: str, *, address: str | None = None) -> dict[str, Any]:
    """Each part of a running service: health, pid, restarts, how it ended (if it did)."""
    ray = _connect(address)
    parts = _find(ray, service)
    if not parts:
        raise ExecutorError(f"no service {service!r} is up")
    out: dict[str, Any] = {"service": service, "parts": {}}
    for name, actor in sorted(parts.items()):
        if name == "pg":
            continue
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
    out["healthy"] = all(p.get("state") == "up" for p in out["parts"].values())
    return out


def down(service: str, *, address: str | None = None) -> list[dict[str, Any]]:
    """Stop every part of ``service`` (router, then frontend, first), kill its actors, release
    its GPUs; returns the guardians' receipts."""
    ray = _connect(address)
    parts = _find(ray, service)
    pg = _find_group(_actor_name(service, "pg"))
    if not parts and pg is None:
        raise ExecutorError(f"no service {service!r} is up")
    first = {"router": 0, "frontend": 1}
    order = sorted(parts, key=lambda n: (first.get(n, 2), n))
    return _teardown(ray, [parts[n] for n in reversed(order)], pg)
