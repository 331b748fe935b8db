"""KAI Scheduler manifests: a plan becomes a PodGroup, one Pod per worker and a headless Service
(pure builders, tested without a cluster; see :mod:`tsched.backends.kai`)."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from typing import Any

from tsched.cluster import Cluster
from tsched.errors import InputError
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
    "DEFAULT_IMAGE",
    "plan_hash",
    "job_name",
    "topology_constraint",
    "kai_manifests",
    "gpu_selector",
    "queue_object",
    "validate_objects",
]


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
