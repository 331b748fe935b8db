"""The Ray side of a Dynamo service's parts: the detached actor that owns one guarded process,
the names a service's actors and placement groups go by, reserving a replica's GPUs and starting
its owner, waiting for health, and tearing down."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import threading
import time
from pathlib import Path
from typing import Any

from tsched.errors import ExecutorError

__all__ = [
    "RAY_NAMESPACE",
    "Owner",
    "actor_name",
    "group_name",
    "connect",
    "start_replica",
    "start_part",
    "wait_healthy",
    "teardown",
    "find_parts",
    "find_groups",
    "local_node",
]

log = logging.getLogger(__name__)

RAY_NAMESPACE = "tsched"
#: A part's name after the service's prefix: ``frontend``, ``router``, ``supervisor``, ``decode0``
_PART = re.compile(r"[a-z]+[0-9]*")
#: A replica's placement group after the prefix: ``pg-decode0-0`` (replica, generation)
_GROUP = re.compile(r"pg-([a-z]+[0-9]+)-([0-9]+)")


class Owner:
    """A detached Ray actor owning one engine: it runs the engine's guardian and beats its
    lease. Killing the actor (its process) stops the engine through the guardian."""

    def __init__(self, spec_json: str, workdir: str, generation: int = 0) -> None:
        from dataclasses import replace

        from tsched.backends.guardian import GuardSpec, Lease, launch

        spec = GuardSpec.from_json(spec_json)
        # a replacement beats a lease of its own: the lost owner's guardian, if it still runs,
        # never sees the new owner's beats as its own
        tag = f".{generation}" if generation else ""
        self.lease = Lease(Path(workdir) / f"{spec.name}{tag}.lease")
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
        self.lease.path.unlink(missing_ok=True)  # nothing is left to beat it
        return self.receipt()


def actor_name(service: str, part: str) -> str:
    """The name of a service's actor (``part``: a replica, ``frontend``, ``router``,
    ``supervisor``) in :data:`RAY_NAMESPACE`."""
    return f"tsched-dynamo-{service}-{part}"


def group_name(service: str, replica: str, generation: int = 0) -> str:
    """The placement group holding a replica's GPUs; each replacement is a new generation."""
    return actor_name(service, f"pg-{replica}-{generation}")


def connect(address: str | None) -> Any:
    from tsched.discovery.ray import connect as ray_connect

    return ray_connect(address, ExecutorError)


def local_node(ray: Any) -> Any:
    """A scheduling strategy that puts a CPU part (frontend, router, supervisor) on this
    machine's node: the frontend is reached at its host from here, and a part left to Ray's
    choice may land on a GPU node and die with it (a soft affinity does not prevent that: Ray
    spills a zero-CPU actor to another node while this one starts workers)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)


def start_replica(
    ray: Any, service: str, replica: Any, gspec: Any, workdir: Path, generation: int = 0
) -> tuple[Any, Any]:
    """Reserve ``replica``'s planned GPUs (a placement group of one bundle pinned to its node)
    and start the detached actor that owns its engine; returns (actor, group). The caller
    waits for health and tears both down on failure."""
    from ray.util.placement_group import placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    from tsched.backends.ray import NODE_LABEL, gpu_resource

    gpus = {gpu_resource(replica.node, g): 1.0 for g in replica.gpus}
    pg = placement_group([{**gpus, "CPU": 0.01}], strategy="PACK",
                         bundle_label_selector=[{NODE_LABEL: replica.node}],
                         name=group_name(service, replica.name, generation),
                         lifetime="detached")  # fmt: skip
    try:
        if not pg.wait(60):
            raise ExecutorError(f"reserving {replica.name}'s GPUs on {replica.node} timed out")
        owner = ray.remote(num_cpus=0, max_restarts=0)(Owner)
        actor = owner.options(
            name=actor_name(service, replica.name),
            namespace=RAY_NAMESPACE,
            lifetime="detached",
            scheduling_strategy=PlacementGroupSchedulingStrategy(
                pg, placement_group_bundle_index=0
            ),
            resources=gpus,
        ).remote(gspec.to_json(), str(workdir), generation)
    except BaseException:
        teardown(ray, [], [pg])
        raise
    return actor, pg


def start_part(ray: Any, service: str, part: str, gspec: Any, workdir: Path) -> Any:
    """Start the detached actor owning a CPU part (frontend, router) on this node."""
    owner = ray.remote(num_cpus=0, max_restarts=0)(Owner)
    return owner.options(
        name=actor_name(service, part), namespace=RAY_NAMESPACE, lifetime="detached",
        scheduling_strategy=local_node(ray),
    ).remote(gspec.to_json(), str(workdir))  # fmt: skip


def wait_healthy(
    ray: Any,
    actors: list[Any],
    names: list[str],
    timeout: float,
    stop: threading.Event | None = None,
) -> None:
    """Wait until every actor's guardian reports its process healthy; raise
    :class:`ExecutorError` naming the part that ended, or those still waiting after
    ``timeout`` seconds (or when ``stop`` is set)."""
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
        if pending and stop is not None and stop.is_set():
            raise ExecutorError(f"stopped while starting {', '.join(pending)}")
        if pending and time.monotonic() > deadline:
            raise ExecutorError(f"not healthy after {timeout:g} s: {', '.join(pending)}")
        time.sleep(0.2)


def teardown(ray: Any, actors: list[Any], groups: list[Any]) -> list[dict[str, Any]]:
    """Stop each actor's process (in the order given) and kill the actor, then remove the
    placement groups and wait until their GPUs on live nodes are free again; returns the
    guardians' receipts (an actor already dead gives none: its guardian stopped itself)."""
    from ray.util.placement_group import placement_group_table, remove_placement_group

    from tsched.backends.ray import wait_released

    receipts = []
    for actor in actors:
        try:
            receipts.append(ray.get(actor.stop.remote(), timeout=60))
        except Exception as exc:
            log.warning("stopping %s: %s", actor, exc)
        try:
            ray.kill(actor)
        except Exception:
            pass
    for pg in groups:
        try:
            bundles = (placement_group_table(pg).get("bundles") or {}).values()
            held = [k for b in bundles for k in b if k.startswith("tsched_gpu_")]
            remove_placement_group(pg)
            wait_released(pg, held)  # the GPUs are free again when this returns
        except Exception as exc:
            log.warning("releasing placement group: %s", exc)
    return receipts


def find_groups(service: str) -> list[Any]:
    """The live placement groups holding ``service``'s replicas, whichever namespace created
    them (a named group is looked up in the caller's namespace only, and ``tsched dynamo down``
    runs in a new process, so in another anonymous namespace than the ``up`` that made them)."""
    from ray._raylet import PlacementGroupID
    from ray.util.placement_group import PlacementGroup, placement_group_table

    prefix = actor_name(service, "")
    out = []
    for hex_id, entry in placement_group_table().items():
        name = entry.get("name") or ""
        if not name.startswith(prefix) or entry.get("state") == "REMOVED":
            continue
        if _GROUP.fullmatch(name[len(prefix) :]):
            out.append(PlacementGroup(PlacementGroupID(bytes.fromhex(hex_id))))
    return out


def find_parts(ray: Any, service: str) -> dict[str, Any]:
    """The live actors of ``service`` by part name (another service whose name starts with
    this one's is not matched: part names have no hyphen)."""
    prefix = actor_name(service, "")
    out = {}
    for entry in ray.util.list_named_actors(all_namespaces=True):
        name = entry["name"]
        if entry.get("namespace") != RAY_NAMESPACE or not name.startswith(prefix):
            continue
        if not _PART.fullmatch(name[len(prefix) :]):
            continue
        try:
            out[name[len(prefix) :]] = ray.get_actor(name, namespace=RAY_NAMESPACE)
        except ValueError:  # gone meanwhile
            continue
    return out
