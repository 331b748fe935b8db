"""NVIDIA Dynamo lifecycle: placement-aware replicas, Ray-owned GPUs, guarded engine processes.

One module per stage: :mod:`~tsched.backends.dynamo.spec` (the service spec and its traffic),
:mod:`~tsched.backends.dynamo.model` (the mocker's tiny model files),
:mod:`~tsched.backends.dynamo.process` (command lines and environments, pure) and
:mod:`~tsched.backends.dynamo.lifecycle` (Ray ownership: up, status, down).

A **service spec** (``tsched: dynamo/v1``) names the model, the engine (``vllm``, ``sglang``,
``trtllm`` or ``mocker``) and the pools — aggregated (decode replicas only) or disaggregated
(prefill replicas feeding decode replicas) — with TP per replica. From it:

1. :func:`service_workload` is the traffic the planner places: TP all-reduces inside each
   replica and the KV-cache transfer from prefill to decode replicas
   (:func:`tsched.workload.serving_traffic`). A plan keeps each TP group on NVLink and puts
   prefill replicas near the decode replicas they feed.
2. :func:`replicas_of` groups the plan's workers into replicas (one node each; a TP group cannot
   span nodes) and :func:`dynamo_processes` gives each its process: module and arguments,
   ``CUDA_VISIBLE_DEVICES`` from the planned GPUs, ports, and Dynamo's environment (namespace,
   discovery backend, request and event planes), plus the frontend process.
3. :func:`up` reserves the GPUs as one Ray placement group (a bundle per replica, pinned to its
   planned node and GPUs) and starts one **detached** Ray actor per replica — it owns the
   bundle and runs the replica's :mod:`~tsched.backends.guardian`, beating its lease — plus a
   frontend actor; it waits until every engine is healthy and the frontend lists the model and
   answers a real completion. Any failure tears down what it started. The service outlives the
   CLI call; :func:`status` and :func:`down` find it again by name.
4. With ``router: tsched`` (aggregated services), :func:`router_process` adds tsched's
   program-aware proxy (:mod:`tsched.agentic.proxy`) in front: one more guarded process, owned
   by a detached actor like the rest, started once the frontend lists every replica. It reaches
   each replica through the frontend pinned to that worker, so agents talk to the proxy and the
   proxy decides which replica runs each program's next call, and when.

If an actor dies (``ray.kill``, a crash, its node), its guardian gets SIGHUP from the kernel or
sees its lease expire and stops the engine: no orphan process on any path. Every guardian writes
a receipt of what ran and how it ended.

The defaults target one machine (file discovery under a shared work directory, TCP request
plane, ZMQ events on 127.0.0.1); for several hosts set ``discovery: {backend: etcd}`` and the
hosts in ``env``.
"""

from __future__ import annotations

from tsched.backends.dynamo.lifecycle import (
    RAY_NAMESPACE,
    down,
    serving_instances,
    status,
    up,
    wait_listed,
)
from tsched.backends.dynamo.model import tiny_model_files, tiny_model_path, write_tiny_model
from tsched.backends.dynamo.process import (
    Replica,
    dynamo_processes,
    free_port,
    loopback_env,
    replicas_of,
    router_process,
)
from tsched.backends.dynamo.spec import (
    ENGINES,
    ROUTER_KINDS,
    ROUTER_POLICIES,
    DynamoSpec,
    RouterSpec,
    mocker_capacity,
    read_spec,
    service_workload,
    spec_from_dict,
)

__all__ = [
    "tiny_model_path",
    "tiny_model_files",
    "write_tiny_model",
    "ENGINES",
    "DynamoSpec",
    "Replica",
    "read_spec",
    "spec_from_dict",
    "service_workload",
    "replicas_of",
    "dynamo_processes",
    "router_process",
    "RouterSpec",
    "serving_instances",
    "wait_listed",
    "up",
    "status",
    "down",
    "ROUTER_POLICIES",
    "ROUTER_KINDS",
    "mocker_capacity",
    "free_port",
    "loopback_env",
    "RAY_NAMESPACE",
]
