"""The KAI Scheduler client: preflight, submit, watch, status and cancel through the official
``kubernetes`` client (imported lazily); see :mod:`tsched.backends.kai`."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tsched.backends.kai.manifests import (
    DRA_DRIVER,
    GPU_RESOURCE,
    JOB_LABEL,
    PLAN_LABEL,
    PLANNED_GPU_ANNOTATION,
    PLANNED_NODE_ANNOTATION,
    PLANNED_UUID_ANNOTATION,
    PODGROUP_API,
    QUEUE_API,
)
from tsched.cluster import Cluster
from tsched.errors import ExecutorError

__all__ = ["JobStatus", "KaiClient", "SubmitResult", "api_reason"]

log = logging.getLogger(__name__)


@dataclass
class JobStatus:
    """Where a submitted job stands: ``missing``, ``pending``, ``running``, ``succeeded`` or
    ``failed``, with pod phases and the reasons Kubernetes gave."""

    name: str
    phase: str
    pods: dict[str, str] = field(default_factory=dict)
    reasons: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "phase": self.phase, "pods": self.pods,
                "reasons": self.reasons}  # fmt: skip


def _phase(pods: dict[str, str], expected: int) -> str:
    if not pods:
        return "missing"
    phases = list(pods.values())
    if "Failed" in phases:
        return "failed"
    if len(phases) >= expected and all(p == "Succeeded" for p in phases):
        return "succeeded"
    if len(phases) >= expected and all(p in ("Running", "Succeeded") for p in phases):
        return "running"
    return "pending"


@dataclass
class SubmitResult:
    name: str
    namespace: str
    created: list[str]
    adopted: list[str]


class KaiClient:
    """Talks to the Kubernetes API through the official client.

    Build it from a kubeconfig (:meth:`from_kubeconfig`) or around an ``ApiClient``.
    """

    #: (verb, group, resource) the adapter needs in the job's namespace.
    PERMISSIONS = (
        ("create", "", "pods"),
        ("delete", "", "pods"),
        ("watch", "", "pods"),
        ("create", "", "services"),
        ("delete", "", "services"),
        ("create", "scheduling.run.ai", "podgroups"),
        ("delete", "scheduling.run.ai", "podgroups"),
    )
    #: What ``--gpu-pinning dra`` needs on top: claims in the namespace, and (cluster-wide)
    #: reading the ResourceSlices in which drivers publish each node's devices.
    DRA_PERMISSIONS = (
        ("create", "resource.k8s.io", "resourceclaims"),
        ("delete", "resource.k8s.io", "resourceclaims"),
        ("list", "resource.k8s.io", "resourceclaims"),
        ("list", "resource.k8s.io", "resourceslices"),
    )

    def __init__(self, api_client: Any) -> None:
        from kubernetes import client

        self.api = api_client
        self.core = client.CoreV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.authz = client.AuthorizationV1Api(api_client)
        self.resource = client.ResourceV1Api(api_client)

    @classmethod
    def from_kubeconfig(cls, path: str | None = None, context: str | None = None) -> KaiClient:
        try:
            from kubernetes import client, config
        except ImportError:
            raise ExecutorError(
                "this needs the kubernetes client (pip install 'tsched[kubernetes]')"
            ) from None
        try:
            if path is None and context is None:
                try:
                    config.load_incluster_config()
                    return cls(client.ApiClient())
                except config.ConfigException:
                    pass
            api = config.new_client_from_config(config_file=path, context=context)
        except (config.ConfigException, OSError, TypeError) as exc:
            raise ExecutorError(
                f"cannot load kubeconfig {path or '~/.kube/config'}: {exc}"
            ) from None
        return cls(api)

    # -------------------------------------------------------------- preflight
    def preflight(
        self, objects: Sequence[dict[str, Any]], cluster: Cluster | None = None
    ) -> list[str]:
        """Problems that would stop the job (empty when it can go)."""
        from kubernetes.client.rest import ApiException

        podgroup = next(o for o in objects if o["kind"] == "PodGroup")
        namespace = podgroup["metadata"]["namespace"]
        problems: list[str] = []
        queue = podgroup["spec"]["queue"]
        try:
            self.custom.get_cluster_custom_object(*QUEUE_API[:2], QUEUE_API[2], queue)
        except ApiException as exc:
            if exc.status == 404:
                problems.append(f"queue {queue!r} does not exist (deploy/kai/queue.yaml)")
            else:
                problems.append(f"queue {queue!r}: {api_reason(exc)}")
        claims = [o for o in objects if o["kind"] == "ResourceClaim"]
        for verb, group, resource in self.PERMISSIONS + (self.DRA_PERMISSIONS if claims else ()):
            if not self._allowed(verb, group, resource, namespace):
                problems.append(
                    f"not allowed to {verb} {resource}{'.' + group if group else ''} in "
                    f"namespace {namespace!r} (deploy/kai/rbac.yaml)"
                )
        problems += self._check_nodes([o for o in objects if o["kind"] == "Pod"], cluster)
        if claims and not problems:
            problems += self._check_devices(claims)
        return problems

    def _check_devices(self, claims: list[dict[str, Any]]) -> list[str]:
        """Every claim's planned GPU is published in a ResourceSlice of its node, and no other
        claim holds it."""
        by_node: dict[str, list[dict[str, Any]]] = {}
        for claim in claims:
            by_node.setdefault(
                claim["metadata"]["annotations"][PLANNED_NODE_ANNOTATION], []
            ).append(claim)
        held = self._allocated_devices()
        problems = []
        for node, node_claims in sorted(by_node.items()):
            slices = self.resource.list_resource_slice(field_selector=f"spec.nodeName={node}")
            devices = {}  # (key, value) → (pool, device name)
            for sl in slices.items:
                if sl.spec.driver != DRA_DRIVER:
                    continue
                pool = sl.spec.pool.name if sl.spec.pool else node
                for dev in sl.spec.devices or []:
                    for attr, value in (dev.attributes or {}).items():
                        key = attr.split("/", 1)[1] if attr.startswith(DRA_DRIVER + "/") else attr
                        got = value.string if value.string is not None else value.int
                        devices[(key, str(got))] = (pool, dev.name)
            if not devices:
                problems.append(
                    f"node {node!r} publishes no {DRA_DRIVER} devices in any ResourceSlice "
                    "(is the NVIDIA DRA driver installed there?)"
                )
                continue
            for claim in node_claims:
                notes = claim["metadata"]["annotations"]
                uuid = notes.get(PLANNED_UUID_ANNOTATION)
                want = ("uuid", uuid) if uuid else ("index", notes[PLANNED_GPU_ANNOTATION])
                device = devices.get(want)
                if device is None:
                    hint = "" if uuid else (
                        "; drivers that publish no 'index' attribute need the GPU UUIDs in the "
                        "cluster model (tsched inventory local|ray records them)")  # fmt: skip
                    problems.append(
                        f"node {node!r}: no {DRA_DRIVER} device with {want[0]} {want[1]!r} for "
                        f"ResourceClaim {claim['metadata']['name']}{hint}"
                    )
                elif device in held and held[device] != claim["metadata"]["name"]:
                    problems.append(
                        f"node {node!r}: GPU {want[1]} (device {device[1]}) is allocated to "
                        f"ResourceClaim {held[device]}"
                    )
        return problems

    def _allocated_devices(self) -> dict[tuple[str, str], str]:
        """(pool, device) → the claim that holds it, over all namespaces."""
        out = {}
        for claim in self.resource.list_resource_claim_for_all_namespaces().items:
            allocation = claim.status.allocation if claim.status else None
            results = allocation.devices.results if allocation and allocation.devices else []
            for r in results or []:
                out[(r.pool, r.device)] = claim.metadata.name
        return out

    def _allowed(self, verb: str, group: str, resource: str, namespace: str) -> bool:
        from kubernetes import client

        review = client.V1SelfSubjectAccessReview(
            spec=client.V1SelfSubjectAccessReviewSpec(
                resource_attributes=client.V1ResourceAttributes(
                    verb=verb, group=group, resource=resource, namespace=namespace
                )
            )
        )
        out = self.authz.create_self_subject_access_review(review)
        return bool(out.status and out.status.allowed)

    def _check_nodes(self, pods: list[dict[str, Any]], cluster: Cluster | None) -> list[str]:
        from kubernetes.client.rest import ApiException

        need: dict[str, int] = {}
        for pod in pods:
            node = _pod_node(pod)
            requests = pod["spec"]["containers"][0]["resources"].get("requests", {})
            need[node] = need.get(node, 0) + int(requests.get(GPU_RESOURCE, 0))
        expected: dict[str, dict[str, str]] = {}
        if cluster is not None:
            from tsched.formats.topograph import labels_from_cluster

            expected = labels_from_cluster(cluster)
        problems = []
        for node, count in sorted(need.items()):
            try:
                obj = self.core.read_node(node)
            except ApiException as exc:
                problems.append(
                    f"node {node!r} " + ("does not exist" if exc.status == 404 else api_reason(exc))
                )
                continue
            if obj.spec and obj.spec.unschedulable:
                problems.append(f"node {node!r} is cordoned (unschedulable)")
            labels = obj.metadata.labels or {}
            for key, value in expected.get(node, {}).items():
                if labels.get(key) != value:
                    problems.append(
                        f"node {node!r}: label {key}={labels.get(key)!r}, the cluster model says "
                        f"{value!r} (label the node or re-discover the model)"
                    )
            if count == 0:  # DRA claims: the devices are checked against ResourceSlices
                continue
            allocatable = int((obj.status.allocatable or {}).get(GPU_RESOURCE, 0))
            used = self._gpus_in_use(node)
            if allocatable - used < count:
                problems.append(
                    f"node {node!r}: {count} GPU(s) planned, {allocatable - used} of "
                    f"{allocatable} allocatable are free"
                )
        return problems

    def _gpus_in_use(self, node: str) -> int:
        pods = self.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}")
        used = 0
        for pod in pods.items:
            if pod.status and pod.status.phase in ("Succeeded", "Failed"):
                continue
            for c in pod.spec.containers or []:
                req = (c.resources.requests or {}) if c.resources else {}
                used += int(req.get(GPU_RESOURCE, 0))
        return used

    # -------------------------------------------------------------- submit
    def submit(
        self, objects: Sequence[dict[str, Any]], progress: Callable[[str], None] | None = None
    ) -> SubmitResult:
        """Create the Service, the PodGroup, then the Pods. Objects of the same plan that
        exist already are adopted; on any failure (or Ctrl-C) everything this call created is
        deleted again, newest first, and :class:`ExecutorError` says what failed."""
        from kubernetes.client.rest import ApiException

        podgroup = next(o for o in objects if o["kind"] == "PodGroup")
        namespace = podgroup["metadata"]["namespace"]
        name = podgroup["metadata"]["name"]
        digest = podgroup["metadata"]["labels"][PLAN_LABEL]
        kinds = ("Service", "PodGroup", "ResourceClaim", "Pod")
        order = sorted(objects, key=lambda o: kinds.index(o["kind"]))
        created: list[dict[str, Any]] = []
        adopted: list[str] = []
        try:
            for obj in order:
                label = f"{obj['kind']} {obj['metadata']['name']}"
                try:
                    self._create(obj)
                    created.append(obj)
                except ApiException as exc:
                    if exc.status != 409:
                        raise ExecutorError(f"creating {label}: {api_reason(exc)}") from None
                    theirs = self._read_labels(obj).get(PLAN_LABEL)
                    if theirs != digest:
                        raise ExecutorError(
                            f"{label} already exists in namespace {namespace!r} and belongs to "
                            f"another plan (plan hash {theirs!r}, ours {digest!r}); cancel it "
                            "first or choose another --name"
                        ) from None
                    adopted.append(label)
                if progress:
                    progress(label)
        except BaseException:
            self._rollback(created)
            raise
        return SubmitResult(
            name, namespace, [f"{o['kind']} {o['metadata']['name']}" for o in created], adopted
        )

    def _create(self, obj: dict[str, Any]) -> None:
        ns = obj["metadata"]["namespace"]
        if obj["kind"] == "Pod":
            self.core.create_namespaced_pod(ns, obj)
        elif obj["kind"] == "Service":
            self.core.create_namespaced_service(ns, obj)
        elif obj["kind"] == "ResourceClaim":
            self.resource.create_namespaced_resource_claim(ns, obj)
        else:
            self.custom.create_namespaced_custom_object(*PODGROUP_API[:2], ns, PODGROUP_API[2], obj)

    def _read_labels(self, obj: dict[str, Any]) -> dict[str, str]:
        ns, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
        if obj["kind"] == "Pod":
            return self.core.read_namespaced_pod(name, ns).metadata.labels or {}
        if obj["kind"] == "Service":
            return self.core.read_namespaced_service(name, ns).metadata.labels or {}
        if obj["kind"] == "ResourceClaim":
            return self.resource.read_namespaced_resource_claim(name, ns).metadata.labels or {}
        got = self.custom.get_namespaced_custom_object(*PODGROUP_API[:2], ns, PODGROUP_API[2], name)
        return got.get("metadata", {}).get("labels") or {}

    def _delete(self, kind: str, name: str, namespace: str) -> bool:
        """Delete one object; False if it was not there."""
        from kubernetes.client.rest import ApiException

        try:
            if kind == "Pod":
                self.core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
            elif kind == "Service":
                self.core.delete_namespaced_service(name, namespace)
            elif kind == "ResourceClaim":
                self.resource.delete_namespaced_resource_claim(name, namespace)
            else:
                self.custom.delete_namespaced_custom_object(
                    *PODGROUP_API[:2], namespace, PODGROUP_API[2], name
                )
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def _rollback(self, created: list[dict[str, Any]]) -> None:
        for obj in reversed(created):
            try:
                self._delete(obj["kind"], obj["metadata"]["name"], obj["metadata"]["namespace"])
            except Exception as exc:  # keep deleting the rest; say what stayed behind
                log.error("rollback: could not delete %s %s: %s", obj["kind"],
                          obj["metadata"]["name"], exc)  # fmt: skip

    # -------------------------------------------------------------- status, watch, cancel
    def _list(self, namespace: str, name: str) -> tuple[dict[str, Any], str]:
        pods = self.core.list_namespaced_pod(namespace, label_selector=f"{JOB_LABEL}={name}")
        return {p.metadata.name: p for p in pods.items}, pods.metadata.resource_version

    def _expected(self, namespace: str, name: str) -> int:
        from kubernetes.client.rest import ApiException

        try:
            pg = self.custom.get_namespaced_custom_object(
                *PODGROUP_API[:2], namespace, PODGROUP_API[2], name
            )
            return int(pg["spec"]["minMember"])
        except ApiException as exc:
            if exc.status == 404:
                return 0
            raise

    def status(self, namespace: str, name: str) -> JobStatus:
        """Phase of the job from its pods, with why pods wait or failed and the PodGroup's
        scheduling conditions (KAI's reasons for not placing the gang)."""
        pods, _rv = self._list(namespace, name)
        state = _status(name, pods, max(self._expected(namespace, name), len(pods)))
        state.reasons += self._podgroup_reasons(namespace, name)
        return state

    def _podgroup_reasons(self, namespace: str, name: str) -> list[str]:
        from kubernetes.client.rest import ApiException

        try:
            pg = self.custom.get_namespaced_custom_object(
                *PODGROUP_API[:2], namespace, PODGROUP_API[2], name
            )
        except ApiException:
            return []
        out = []
        for cond in (pg.get("status") or {}).get("schedulingConditions") or []:
            for r in cond.get("reasons") or []:
                out.append(f"PodGroup: {r.get('reason', '')}: {r.get('message', '')}".strip())
            if not cond.get("reasons") and cond.get("message"):
                out.append(f"PodGroup: {cond.get('reason', '')}: {cond['message']}")
        return out

    def watch(
        self,
        namespace: str,
        name: str,
        timeout: float = 3600.0,
        window: int = 60,
        on_change: Callable[[JobStatus], None] | None = None,
    ) -> JobStatus:
        """Follow the job's pods until it succeeds or fails, or ``timeout`` seconds pass.

        One watch stream at a time, each for at most ``window`` seconds; when the server ends a
        stream the next resumes from the last resourceVersion seen; a 410 Gone (that version
        was compacted away) relists and starts again from the list's version."""
        from kubernetes import watch
        from kubernetes.client.rest import ApiException

        deadline = time.monotonic() + timeout
        expected = self._expected(namespace, name)
        pods, rv = self._list(namespace, name)
        state = _status(name, pods, max(expected, len(pods)))
        if on_change:
            on_change(state)
        relists = 0
        while state.phase not in ("succeeded", "failed", "missing"):
            left = deadline - time.monotonic()
            if left <= 0:
                state.reasons.append(f"gave up watching after {timeout:g} s")
                return state
            stream = watch.Watch()
            try:
                for event in stream.stream(
                    self.core.list_namespaced_pod,
                    namespace,
                    label_selector=f"{JOB_LABEL}={name}",
                    resource_version=rv,
                    timeout_seconds=max(1, int(min(window, left))),
                ):
                    obj = event["object"]
                    rv = obj.metadata.resource_version or rv
                    if event["type"] == "DELETED":
                        pods.pop(obj.metadata.name, None)
                    else:
                        pods[obj.metadata.name] = obj
                    new = _status(name, pods, max(expected, len(pods)))
                    if (new.phase, new.pods) != (state.phase, state.pods) and on_change:
                        on_change(new)
                    state = new
                    if state.phase in ("succeeded", "failed", "missing"):
                        stream.stop()
                        break
            except ApiException as exc:
                if exc.status != 410:
                    raise ExecutorError(f"watching job {name!r}: {api_reason(exc)}") from None
                relists += 1
                log.info("watch of %s: resourceVersion %s is gone; relisting", name, rv)
                pods, rv = self._list(namespace, name)
                state = _status(name, pods, max(expected, len(pods)))
        return state

    def cancel(self, namespace: str, name: str) -> list[str]:
        """Delete the job's pods, ResourceClaims, PodGroup and Service; returns what was
        deleted."""
        pods, _rv = self._list(namespace, name)
        deleted = []
        for pod in sorted(pods, reverse=True):
            if self._delete("Pod", pod, namespace):
                deleted.append(f"Pod {pod}")
        from kubernetes.client.rest import ApiException

        try:
            claims = self.resource.list_namespaced_resource_claim(
                namespace, label_selector=f"{JOB_LABEL}={name}"
            ).items
        except ApiException as exc:  # a cluster without the DRA API: no claims to delete
            if exc.status not in (403, 404):
                raise
            claims = []
        for claim in sorted((c.metadata.name for c in claims), reverse=True):
            if self._delete("ResourceClaim", claim, namespace):
                deleted.append(f"ResourceClaim {claim}")
        for kind in ("PodGroup", "Service"):
            if self._delete(kind, name, namespace):
                deleted.append(f"{kind} {name}")
        return deleted


def _pod_node(pod: dict[str, Any]) -> str:
    terms = pod["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    return str(terms["nodeSelectorTerms"][0]["matchExpressions"][0]["values"][0])


def _status(name: str, pods: dict[str, Any], expected: int) -> JobStatus:
    phases = {n: (p.status.phase if p.status and p.status.phase else "Pending")
              for n, p in pods.items()}  # fmt: skip
    reasons = []
    for n, p in sorted(pods.items()):
        st = p.status
        for cond in (st.conditions or []) if st else []:
            if cond.type == "PodScheduled" and cond.status == "False":
                reasons.append(
                    f"{n}: {cond.reason or 'Unschedulable'}: {cond.message or ''}".strip()
                )
        if st and st.phase == "Failed":
            reasons.append(f"{n}: failed: {st.reason or ''} {st.message or ''}".strip())
    return JobStatus(name, _phase(phases, expected), dict(sorted(phases.items())), reasons)


def api_reason(exc: Any) -> str:
    try:
        body = json.loads(exc.body)
        return f"{exc.status} {body.get('reason', '')}: {body.get('message', '')}".strip()
    except (TypeError, ValueError, AttributeError):
        return f"{getattr(exc, 'status', '?')} {getattr(exc, 'reason', exc)}"
