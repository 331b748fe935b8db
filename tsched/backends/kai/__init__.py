"""KAI Scheduler adapter: a plan becomes a PodGroup, one Pod per worker and a headless Service.

Two halves, as every executor here, one module each:

* **Pure builders** (:mod:`~tsched.backends.kai.manifests`: :func:`kai_manifests`,
  :func:`topology_constraint`, :func:`queue_object`, :func:`validate_objects`) turn a plan into
  Kubernetes objects, tested without a cluster. The PodGroup (``scheduling.run.ai/v2alpha2``) gangs
  the workers (``minMember`` = all of them), names the queue, and — given the cluster model — asks
  KAI to keep the job within the smallest topology domain that holds the plan
  (``requiredTopologyLevel``) and to prefer the next one down (``preferredTopologyLevel``). Serving
  plans (prefill/decode replicas) get one ``subGroups`` entry per replica, each with its own gang
  size and topology constraint. Each Pod is pinned to its planned node by node affinity, asks for
  one ``nvidia.com/gpu``, and carries ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
  ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR`` (rank 0's DNS name under the headless Service) and
  ``MASTER_PORT``.

  **What Kubernetes cannot pin**: under the standard NVIDIA device plugin a Pod asks for a
  *count* of GPUs; the kubelet picks which physical GPU of the node it gets. The plan's node
  choice is enforced (node affinity); the GPU index within the node is not. The planned index is
  recorded in the ``tsched.io/planned-gpu`` annotation and ``TSCHED_PLANNED_GPU`` variable. On
  NVSwitch nodes (every GPU pair joined alike) that loses nothing; on PCIe nodes with a
  PIX/NODE/SYS matrix the intra-node part of the plan's cost is a best case.

* **Client** (:mod:`~tsched.backends.kai.client`: :class:`KaiClient`, official ``kubernetes``
  client, imported lazily): preflight (the queue exists, RBAC via SelfSubjectAccessReview, planned
  nodes exist, are schedulable, carry the cluster's level labels and have enough unallocated GPUs),
  submit (Service, PodGroup, then Pods; any failure deletes what this call created, in reverse
  order; objects of the same plan that already exist are adopted, objects of another plan are a
  conflict), watch (a watch stream resumed from the last resourceVersion after each timeout,
  relisted on 410 Gone), status and cancel.
"""

from __future__ import annotations

from tsched.backends.kai.client import JobStatus, KaiClient, api_reason
from tsched.backends.kai.manifests import (
    DEFAULT_IMAGE,
    DRA_DEVICE_CLASS,
    GPU_PINNING,
    GPU_RESOURCE,
    JOB_LABEL,
    PLAN_LABEL,
    POD_GROUP_ANNOTATION,
    QUEUE_LABEL,
    SCHEDULER_NAME,
    SUBGROUP_LABEL,
    gpu_selector,
    job_name,
    kai_manifests,
    plan_hash,
    queue_object,
    topology_constraint,
    validate_objects,
)

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
    "api_reason",
]
