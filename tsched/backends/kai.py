"""KAI Scheduler adapter: a plan becomes a PodGroup, one Pod per worker and a headless Service.

Two halves, as every executor here:

* **Pure builders** (:func:`kai_manifests`, :func:`topology_constraint`, :func:`queue_object`,
  :func:`validate_objects`) turn a plan into Kubernetes objects, tested without a cluster. The
  PodGroup (``scheduling.run.ai/v2alpha2``) gangs the workers (``minMember`` = all of them),
  names the queue, and — given the cluster model — asks KAI to keep the job within the smallest
  topology domain that holds the plan (``requiredTopologyLevel``) and to prefer the next one down
  (``preferredTopologyLevel``). Serving plans (prefill/decode replicas) get one ``subGroups``
  entry per replica, each with its own gang size and topology constraint. Each Pod is pinned to
  its planned node by node affinity, asks for one ``nvidia.com/gpu``, and carries ``RANK``,
  ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR`` (rank 0's DNS name under
  the headless Service) and ``MASTER_PORT``.

  **What Kubernetes cannot pin**: under the standard NVIDIA device plugin a Pod asks for a
  *count* of GPUs; the kubelet picks which physical GPU of the node it gets. The plan's node
  choice is enforced (node affinity); the GPU index within the node is not. The planned index is
  recorded in the ``tsched.io/planned-gpu`` annotation and ``TSCHED_PLANNED_GPU`` variable. On
  NVSwitch nodes (every GPU pair joined alike) that loses nothing; on PCIe nodes with a
  PIX/NODE/SYS matrix the intra-node part of the plan's cost is a best case.

* **Client** (:class:`KaiClient`, official ``kubernetes`` client, imported lazily): preflight
  (the queue exists, RBAC via SelfSubjectAccessReview, planned nodes exist, are schedulable, carry
  the cluster's level labels and have enough unallocated GPUs), submit (Service, PodGroup, then
  Pods; any failure deletes what this call created, in reverse order; objects of the same plan
  that already exist are adopted, objects of another plan are a conflict), watch (a watch stream
  resumed from the last resourceVersion after each timeout, relisted on 410 Gone), status and
  cancel.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tsched.cluster import Cluster
from tsched.errors import ExecutorError, InputError
from tsched.plan import Plan

__all__ = [
    "SCHEDULER_NAME",
    "QUEUE_LABEL",
    "SUBGROUP_LABEL",
    "POD_GROUP_ANNOTATION",
    "JOB_LABEL",
    "PLAN_LABEL",
    "GPU_RESOURCE",
    "GPU_PINNING",
    "DRA_DEVICE_CLASS",
    "gpu_selector",
    "DEFAULT_IMAGE",
    "job_name",
    "plan_hash",
    "kai_manifests",
    "topology_constraint",
    "queue_object",
    "validate_objects",
    "JobStatus",
    "KaiClient",
]

log = logging.getLogger(__name__)

SCHEDULER_NAME = "kai-scheduler"
QUEUE_LABEL = "kai.scheduler/queue"
SUBGROUP_LABEL = "kai.scheduler/subgroup-name"
POD_GROUP_ANNOTATION = "pod-group-name"
JOB_LABEL = "tsched.io/job"
RANK_LABEL = "tsched.io/rank"
PLAN_LABEL = "tsched.io/plan-hash"
PLANNED_GPU_ANNOTATION = "tsched.io/planned-gpu"
GPU_RESOURCE = "nvidia.com/gpu"
#: How a Pod gets its GPU: a count from the device plugin, or one exact device through a
#: Dynamic Resource Allocation claim (``resource.k8s.io/v1``, GA in Kubernetes 1.34).
GPU_PINNING = ("device-plugin", "dra")
#: The NVIDIA DRA driver's DeviceClass for whole GPUs, and the domain of its device attributes.
DRA_DEVICE_CLASS = "gpu.nvidia.com"
DRA_DRIVER = "gpu.nvidia.com"
CLAIM_API = ("resource.k8s.io", "v1")
PLANNED_NODE_ANNOTATION = "tsched.io/planned-node"
PLANNED_UUID_ANNOTATION = "tsched.io/planned-gpu-uuid"
HOSTNAME_LABEL = "kubernetes.io/hostname"
DEFAULT_IMAGE = "nvcr.io/nvidia/pytorch:25.01-py3"
DEFAULT_COMMAND = (
    "python3",
    "-c",
    "import os; print('rank', os.environ['RANK'], 'of', os.environ['WORLD_SIZE'], "
    "'on', os.environ.get('NODE_NAME'))",
)
PODGROUP_API = ("scheduling.run.ai", "v2alpha2", "podgroups")
QUEUE_API = ("scheduling.run.ai", "v2", "queues")
_CRD_FILES = {
    "PodGroup": ("scheduling.run.ai_podgroups.yaml", "v2alpha2"),
    "Queue": ("scheduling.run.ai_queues.yaml", "v2"),
}
_DNS = re.compile(r"[^a-z0-9-]+")
_LAYOUT_ROLE = re.compile(r"^(tp|pp|dp|cp|ep)\d+$|^rank\d+$")


# ---------------------------------------------------------------------------- pure builders
def plan_hash(plan: Plan) -> str:
    """A short hash of what the plan places where (same plan → same hash, across files)."""
    doc = {
        "cluster": plan.cluster,
        "workload": plan.workload,
        "assignment": [(e.worker, e.node, e.gpu) for e in plan.assignment],
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:10]


def job_name(plan: Plan) -> str:
    """A DNS-1035 name for the job: ``tsched-<workload>-<plan hash>`` (at most 52 characters,
    so Pod names ``<job>-<rank>`` stay within 63)."""
    base = _DNS.sub("-", plan.workload.lower()).strip("-") or "job"
    return f"tsched-{base[:33].strip('-')}-{plan_hash(plan)}"


def topology_constraint(
    plan: Plan, cluster: Cluster, topology: str, workers: Sequence[int] | None = None
) -> dict[str, str]:
    """``{topology, requiredTopologyLevel[, preferredTopologyLevel]}`` for the plan's span.

    The required level is the nearest level (hostname first, then the cluster's levels) whose one
    domain holds every planned node of ``workers`` (all by default); the preferred level is the
    one below it. A plan that spans the top level gets no required level.
    """
    entries = [e for e in plan.assignment if workers is None or e.worker in set(workers)]
    nodes = sorted({e.node for e in entries})
    for name in nodes:
        if name not in {n.name for n in cluster.nodes}:
            raise InputError(
                f"plan node {name!r} is not in cluster {cluster.name!r}; pass the cluster the "
                "plan was made for"
            )
    from tsched.formats.topograph import level_labels

    labels = [HOSTNAME_LABEL, *level_labels(cluster)]
    index = [cluster.node_index(n) for n in nodes]
    level = None
    if len(nodes) == 1:
        level = 0
    else:
        for k in range(len(cluster.levels)):
            if len({int(cluster.node_group[i, k]) for i in index}) == 1:
                level = k + 1
                break
    out = {"topology": topology}
    if level is None:
        out["preferredTopologyLevel"] = labels[-1]
        return out
    out["requiredTopologyLevel"] = labels[level]
    if level > 0:
        out["preferredTopologyLevel"] = labels[level - 1]
    return out


def _subgroups(plan: Plan) -> dict[str, list[int]]:
    """Replica → workers for multi-role plans (``prefill0-tp1`` → ``prefill0``); {} otherwise."""
    if plan.roles is None:
        return {}
    groups: dict[str, list[int]] = {}
    for worker, role in enumerate(plan.roles):
        head = role.split("-", 1)[0]
        if _LAYOUT_ROLE.match(head):
            return {}
        groups.setdefault(_DNS.sub("-", head.lower()).strip("-") or "group", []).append(worker)
    return groups if len(groups) > 1 else {}


def kai_manifests(
    plan: Plan,
    cluster: Cluster | None = None,
    *,
    queue: str = "default",
    namespace: str = "default",
    image: str = DEFAULT_IMAGE,
    command: Sequence[str] | None = None,
    name: str | None = None,
    priority_class: str | None = None,
    master_port: int = 29500,
    topology: str | None = None,
    gpu_pinning: str = "device-plugin",
    device_class: str = DRA_DEVICE_CLASS,
) -> list[dict[str, Any]]:
    """The objects that run ``plan`` under KAI: ``[Service, PodGroup, Pod × workers]``, and with
    ``gpu_pinning="dra"`` one ResourceClaim per worker before the Pods.

    Parameters
    ----------
    plan : Plan
        Where each worker runs.
    cluster : Cluster, optional
        The model the plan was made for. With it the PodGroup gets a topology constraint (level
        labels as :mod:`tsched.formats.k8s_topology` writes them); without it, node pinning only.
    queue, namespace, image, command, name, priority_class, master_port
        As the names say; ``name`` defaults to :func:`job_name`.
    topology : str, optional
        Name of the KAI ``Topology`` object; defaults to the one
        :func:`tsched.formats.k8s_topology.topology_object` makes for ``cluster``.
    gpu_pinning : {"device-plugin", "dra"}
        ``device-plugin`` (default): each Pod asks for one ``nvidia.com/gpu`` and the kubelet
        picks which GPU of the node. ``dra``: each Pod references a ResourceClaim whose CEL
        selector names exactly the planned GPU (:func:`gpu_selector`: its UUID when the
        cluster model records it, its index otherwise), from ``device_class``.

    Examples
    --------
    >>> import tsched
    >>> plan = tsched.solve(tsched.PlacementProblem.build(tsched.load_cluster("dgx-h100-4node"),
    ...     tsched.load_workload("llama3-8b-tp4-pp2-dp2")), method="greedy").plan()
    >>> objs = kai_manifests(plan, tsched.load_cluster("dgx-h100-4node"), queue="research")
    >>> [o["kind"] for o in objs[:3]], len(objs)
    (['Service', 'PodGroup', 'Pod'], 18)
    >>> objs[1]["spec"]["minMember"], objs[1]["spec"]["queue"]
    (16, 'research')
    """
    if not plan.assignment:
        raise InputError("plan has no workers")
    if not 0 < master_port < 65536:
        raise InputError(f"master port must be 1-65535, got {master_port}")
    for label, value in (("queue", queue), ("namespace", namespace)):
        if not value or _DNS.sub("", value) != value or len(value) > 63:
            raise InputError(
                f"--{label} {value!r}: expected a DNS label (lowercase letters, digits, '-')"
            )
    job = name or job_name(plan)
    if not re.fullmatch(r"[a-z]([-a-z0-9]{0,50}[a-z0-9])?", job):
        raise InputError(
            f"job name {job!r}: expected a DNS-1035 label of at most 52 characters "
            "(e.g. tsched-llama-0123456789)"
        )
    if gpu_pinning not in GPU_PINNING:
        raise InputError(f"--gpu-pinning {gpu_pinning!r}: expected one of {', '.join(GPU_PINNING)}")
    dra = gpu_pinning == "dra"
    digest = plan_hash(plan)
    world = len(plan.assignment)
    cmd = list(command) if command else list(DEFAULT_COMMAND)
    base_labels = {JOB_LABEL: job, PLAN_LABEL: digest, "app.kubernetes.io/managed-by": "tsched"}
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": job, "namespace": namespace, "labels": dict(base_labels)},
        "spec": {
            "clusterIP": "None",
            "selector": {JOB_LABEL: job},
            "publishNotReadyAddresses": True,
            "ports": [{"name": "rendezvous", "port": master_port, "targetPort": master_port}],
        },
    }
    spec: dict[str, Any] = {"minMember": world, "queue": queue}
    if priority_class:
        spec["priorityClassName"] = priority_class
    groups = _subgroups(plan)
    if cluster is not None:
        from tsched.formats.k8s_topology import topology_object

        topo = topology or topology_object(cluster)["metadata"]["name"]
        spec["topologyConstraint"] = topology_constraint(plan, cluster, topo)
    if groups:
        spec["subGroups"] = []
        for group, workers in groups.items():
            entry: dict[str, Any] = {"name": group, "minMember": len(workers)}
            if cluster is not None:
                entry["topologyConstraint"] = topology_constraint(plan, cluster, topo, workers)
            spec["subGroups"].append(entry)
    podgroup = {
        "apiVersion": "/".join(PODGROUP_API[:2]),
        "kind": "PodGroup",
        "metadata": {
            "name": job,
            "namespace": namespace,
            "labels": {**base_labels, QUEUE_LABEL: queue},
        },
        "spec": spec,
    }
    by_node: dict[str, list[int]] = {}
    for e in plan.assignment:
        by_node.setdefault(e.node, []).append(e.worker)
    group_of = {w: g for g, ws in groups.items() for w in ws}
    master = f"{job}-0.{job}.{namespace}.svc"
    pods = []
    claims = []
    for e in plan.assignment:
        uuid = _planned_uuid(cluster, e.node, e.gpu) if dra else None
        if dra:
            claims.append(_claim(f"{job}-{e.worker}-gpu", namespace, base_labels, e.worker,
                                 e.node, e.gpu, uuid, device_class))  # fmt: skip
        local = by_node[e.node]
        labels = {**base_labels, QUEUE_LABEL: queue, RANK_LABEL: str(e.worker),
                  POD_GROUP_ANNOTATION: job}  # fmt: skip
        if e.worker in group_of:
            labels[SUBGROUP_LABEL] = group_of[e.worker]
        env = {
            "RANK": e.worker,
            "WORLD_SIZE": world,
            "LOCAL_RANK": local.index(e.worker),
            "LOCAL_WORLD_SIZE": len(local),
            "MASTER_ADDR": master,
            "MASTER_PORT": master_port,
            "TSCHED_PLANNED_GPU": e.gpu,
        }
        if plan.roles is not None:
            env["TSCHED_ROLE"] = plan.roles[e.worker]
        pods.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"{job}-{e.worker}",
                    "namespace": namespace,
                    "labels": labels,
                    "annotations": {
                        POD_GROUP_ANNOTATION: job,
                        PLANNED_GPU_ANNOTATION: str(e.gpu),
                    },
                },
                "spec": {
                    "schedulerName": SCHEDULER_NAME,
                    "restartPolicy": "Never",
                    "hostname": f"{job}-{e.worker}",
                    "subdomain": job,
                    "affinity": {
                        "nodeAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": {
                                "nodeSelectorTerms": [
                                    {
                                        "matchExpressions": [
                                            {
                                                "key": HOSTNAME_LABEL,
                                                "operator": "In",
                                                "values": [e.node],
                                            }
                                        ]
                                    }
                                ]
                            }
                        }
                    },
                    **({"priorityClassName": priority_class} if priority_class else {}),
                    "containers": [
                        {
                            "name": "worker",
                            "image": image,
                            "command": cmd,
                            "env": [{"name": k, "value": str(v)} for k, v in env.items()]
                            + [
                                {
                                    "name": "NODE_NAME",
                                    "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}},
                                }
                            ],
                            "ports": [{"containerPort": master_port, "name": "rendezvous"}],
                            "resources": (
                                {"claims": [{"name": "gpu"}]}
                                if dra
                                else {
                                    "limits": {GPU_RESOURCE: "1"},
                                    "requests": {GPU_RESOURCE: "1"},
                                }
                            ),
                        }
                    ],
                    **(
                        {
                            "resourceClaims": [
                                {"name": "gpu", "resourceClaimName": f"{job}-{e.worker}-gpu"}
                            ]
                        }
                        if dra
                        else {}
                    ),  # fmt: skip
                },
            }
        )
        if uuid:
            pods[-1]["metadata"]["annotations"][PLANNED_UUID_ANNOTATION] = uuid
    return [service, podgroup, *claims, *pods]


def gpu_selector(uuid: str | None, index: int, driver: str = DRA_DRIVER) -> str:
    """The CEL expression that selects exactly one GPU of the DRA driver ``driver``: by its
    UUID (unique across the cluster) when known, else by its index on the node the Pod is
    pinned to.

    Examples
    --------
    >>> gpu_selector("GPU-1b2c", 3)
    "device.attributes['gpu.nvidia.com'].uuid == 'GPU-1b2c'"
    >>> gpu_selector(None, 3)
    "device.attributes['gpu.nvidia.com'].index == 3"
    """
    if uuid:
        if not re.fullmatch(r"[A-Za-z0-9-]+", uuid):
            raise InputError(f"GPU UUID {uuid!r}: expected letters, digits and '-'")
        return f"device.attributes['{driver}'].uuid == '{uuid}'"
    return f"device.attributes['{driver}'].index == {int(index)}"


def _planned_uuid(cluster: Cluster | None, node: str, gpu: int) -> str | None:
    if cluster is None:
        return None
    uuids = cluster.nodes[cluster.node_index(node)].gpu_uuids
    return uuids[gpu] if uuids else None


def _claim(
    name: str,
    namespace: str,
    labels: dict[str, str],
    rank: int,
    node: str,
    gpu: int,
    uuid: str | None,
    device_class: str,
) -> dict[str, Any]:
    """One worker's ResourceClaim: exactly one device of ``device_class``, the planned GPU."""
    annotations = {PLANNED_NODE_ANNOTATION: node, PLANNED_GPU_ANNOTATION: str(gpu)}
    if uuid:
        annotations[PLANNED_UUID_ANNOTATION] = uuid
    return {
        "apiVersion": "/".join(CLAIM_API),
        "kind": "ResourceClaim",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {**labels, RANK_LABEL: str(rank)},
            "annotations": annotations,
        },
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {
                            "deviceClassName": device_class,
                            "allocationMode": "ExactCount",
                            "count": 1,
                            "selectors": [{"cel": {"expression": gpu_selector(uuid, gpu)}}],
                        },
                    }
                ]
            }
        },
    }


def queue_object(name: str, gpu_quota: float = -1, parent: str | None = None) -> dict[str, Any]:
    """A KAI ``Queue`` (``scheduling.run.ai/v2``); ``gpu_quota`` −1 means unlimited."""
    spec: dict[str, Any] = {
        "resources": {
            "gpu": {"quota": gpu_quota, "limit": -1, "overQuotaWeight": 1},
            "cpu": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
            "memory": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
        }
    }
    if parent:
        spec["parentQueue"] = parent
    return {
        "apiVersion": "/".join(QUEUE_API[:2]),
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": spec,
    }


def validate_objects(objects: Sequence[dict[str, Any]]) -> None:
    """Check objects against their real contracts: PodGroup and Queue against the KAI CRDs'
    OpenAPI schemas, Topology as :func:`tsched.formats.k8s_topology.validate` does, core objects
    by deserialising them into the ``kubernetes`` client's models. Raises :class:`InputError`
    naming the object and field."""
    from tsched.formats.k8s_topology import check_schema, crd_schema

    for obj in objects:
        kind = obj.get("kind")
        where = f"{kind} {obj.get('metadata', {}).get('name', '?')}"
        if kind in _CRD_FILES:
            check_schema(obj, crd_schema(*_CRD_FILES[kind]), f"{where}:")
            if kind == "PodGroup":
                _check_subgroups(obj, where)
        elif kind == "Topology":
            from tsched.formats.k8s_topology import validate

            validate(obj)
        elif kind in ("Pod", "Service"):
            _deserialise(obj, f"V1{kind}", where)
        elif kind == "ResourceClaim":
            _deserialise(obj, "ResourceV1ResourceClaim", where)
            requests = obj["spec"]["devices"]["requests"]
            if len(requests) != 1 or requests[0].get("exactly", {}).get("count") != 1:
                raise InputError(f"{where}: spec.devices.requests: expected one exact device")
        else:
            raise InputError(f"{where}: no contract to check a {kind!r} against")


def _check_subgroups(obj: dict[str, Any], where: str) -> None:
    """The CRD's CEL rules tsched can check: unique subgroup names, known parents, and the
    members of the subgroups adding up to at most the gang."""
    groups = obj["spec"].get("subGroups") or []
    names = [g["name"] for g in groups]
    if len(set(names)) != len(names):
        raise InputError(f"{where}: spec.subGroups: names must be unique")
    for g in groups:
        if g.get("parent") and g["parent"] not in names:
            raise InputError(f"{where}: spec.subGroups: unknown parent {g['parent']!r}")


def _deserialise(obj: dict[str, Any], model: str, where: str) -> Any:
    try:
        from kubernetes import client
    except ImportError:  # pragma: no cover
        raise InputError("validating manifests needs tsched[kubernetes]") from None

    api = client.ApiClient()
    text = json.dumps(obj)
    try:
        try:
            return api.deserialize(text, model, "application/json")  # client >= 35
        except TypeError:  # older clients take a response object

            class _Response:
                data = text

            return api.deserialize(_Response(), model)
    except (ValueError, TypeError) as exc:
        raise InputError(f"{where}: does not deserialise as {model}: {exc}") from None


# ---------------------------------------------------------------------------- client
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
                problems.append(f"queue {queue!r}: {_reason(exc)}")
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
                    f"node {node!r} " + ("does not exist" if exc.status == 404 else _reason(exc))
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
                        raise ExecutorError(f"creating {label}: {_reason(exc)}") from None
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
                    raise ExecutorError(f"watching job {name!r}: {_reason(exc)}") from None
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


def _reason(exc: Any) -> str:
    try:
        body = json.loads(exc.body)
        return f"{exc.status} {body.get('reason', '')}: {body.get('message', '')}".strip()
    except (TypeError, ValueError, AttributeError):
        return f"{getattr(exc, 'status', '?')} {getattr(exc, 'reason', exc)}"
