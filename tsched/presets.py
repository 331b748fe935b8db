"""Built-in clusters and workloads (the embedded defaults of ``tsched solve``), and the loaders
that take a preset name or a file: :func:`load_cluster`, :func:`load_workload`,
:func:`load_any_cluster`.

Presets are written in the same ``cluster/v1`` and ``workload/v1`` YAML as model files and go
through the same readers, so they double as format examples. Link figures are vendors' advertised
per-GPU, per-direction bandwidths (NVLink 4: 900 GB/s bidirectional → 450 GB/s; one 400 Gb/s NIC
per GPU → 50 GB/s).
"""

from __future__ import annotations

import os

from tsched.cluster import Cluster
from tsched.errors import InputError
from tsched.formats.cluster_yaml import parse_cluster_text, read_cluster
from tsched.formats.detect import Hardware, read_any_cluster
from tsched.formats.workload_yaml import parse_workload_text, read_workload
from tsched.workload import Workload

__all__ = [
    "DEFAULT_CLUSTER",
    "DEFAULT_WORKLOAD",
    "CLUSTERS",
    "WORKLOADS",
    "cluster",
    "workload",
    "load_cluster",
    "load_workload",
    "load_any_cluster",
]

DEFAULT_CLUSTER = "dgx-h100-4node"
DEFAULT_WORKLOAD = "llama3-8b-tp4-pp2-dp2"

CLUSTERS: dict[str, str] = {
    "dgx-h100-4node": """
tsched: cluster/v1
name: dgx-h100-4node
description: 4 DGX H100 (NVSwitch, 8 x 400 Gb/s NICs) on 2 leaves under 1 spine; 2 GPUs busy
links:
  nvlink: {bandwidth: 450, latency: 2, provenance: advertised}
  leaf:   {bandwidth: 50, latency: 5, provenance: advertised}
  spine:  {bandwidth: 50, latency: 8, provenance: advertised}
levels: [leaf, spine]
node_types:
  dgx-h100:
    gpus: 8
    gpu: {model: H100, memory_gb: 80}
    intra: nvlink
    nics: {count: 8, gbps: 400}
nodes:
  - {name: node001, type: dgx-h100, at: {leaf: l0, spine: s0}}
  - {name: node002, type: dgx-h100, at: {leaf: l0, spine: s0}, busy: [0, 1]}
  - {name: node003, type: dgx-h100, at: {leaf: l1, spine: s0}}
  - {name: node004, type: dgx-h100, at: {leaf: l1, spine: s0}}
""",
    "leaf-spine-64": """
tsched: cluster/v1
name: leaf-spine-64
description: 2 leaves x 4 DGX H100 nodes x 8 GPUs, all free
links:
  nvlink: {bandwidth: 450, latency: 2, provenance: advertised}
  leaf:   {bandwidth: 50, latency: 5, provenance: advertised}
  spine:  {bandwidth: 25, latency: 8, provenance: advertised}
levels: [leaf, spine]
node_types:
  dgx-h100: {gpus: 8, gpu: {model: H100, memory_gb: 80}, intra: nvlink, nics: {count: 8, gbps: 400}}
generate:
  - {type: dgx-h100, count: 8, fanout: {leaf: 4, spine: 2}, name: "node{index:02d}"}
""",
    "pcie-8gpu": """
tsched: cluster/v1
name: pcie-8gpu
description: one 2-socket PCIe Gen4 server, 8 GPUs in pairs under PCIe switches
links:
  PIX:  {bandwidth: 24, latency: 2, provenance: default}
  NODE: {bandwidth: 20, latency: 3, provenance: default}
  SYS:  {bandwidth: 12, latency: 5, provenance: default}
node_types:
  pcie8:
    gpus: 8
    gpu: {model: L40S, memory_gb: 48}
    intra_matrix:
      - [X, PIX, NODE, NODE, SYS, SYS, SYS, SYS]
      - [PIX, X, NODE, NODE, SYS, SYS, SYS, SYS]
      - [NODE, NODE, X, PIX, SYS, SYS, SYS, SYS]
      - [NODE, NODE, PIX, X, SYS, SYS, SYS, SYS]
      - [SYS, SYS, SYS, SYS, X, PIX, NODE, NODE]
      - [SYS, SYS, SYS, SYS, PIX, X, NODE, NODE]
      - [SYS, SYS, SYS, SYS, NODE, NODE, X, PIX]
      - [SYS, SYS, SYS, SYS, NODE, NODE, PIX, X]
nodes:
  - {name: pcie01, type: pcie8}
""",
    "gb200-nvl72-2rack": """
tsched: cluster/v1
name: gb200-nvl72-2rack
description: 2 GB200 NVL72 racks (18 trays x 4 GPUs, NVLink 5 across the rack), one leaf
links:
  nvlink: {bandwidth: 900, latency: 2, provenance: advertised}
  nvl:    {bandwidth: 900, latency: 3, provenance: advertised}
  leaf:   {bandwidth: 50, latency: 5, provenance: advertised}
levels: [nvl, leaf]
node_types:
  gb200-tray:
    gpus: 4
    gpu: {model: B200, memory_gb: 186}
    intra: nvlink
    nics: {count: 4, gbps: 400}
generate:
  - {type: gb200-tray, count: 36, fanout: {nvl: 18, leaf: 2}, name: "tray{index:02d}"}
""",
}

WORKLOADS: dict[str, str] = {
    "llama3-8b-tp4-pp2-dp2": """
tsched: workload/v1
name: llama3-8b-tp4-pp2-dp2
description: Llama-3 8B pre-training, TP4 x PP2 x DP2 (16 workers), 8k sequence
layout: {tp: 4, pp: 2, dp: 2}
model: {params_b: 8.0, hidden: 4096, layers: 32, seq_len: 8192, micro_batch: 1, micro_batches: 8}
""",
    "llama3-8b-tp8-dp2": """
tsched: workload/v1
name: llama3-8b-tp8-dp2
description: Llama-3 8B, TP8 x DP2 (16 workers)
layout: {tp: 8, dp: 2}
model: {params_b: 8.0, hidden: 4096, layers: 32, seq_len: 8192, micro_batch: 1, micro_batches: 8}
""",
    "llama3-70b-tp8-pp4-dp2": """
tsched: workload/v1
name: llama3-70b-tp8-pp4-dp2
description: Llama-3 70B, TP8 x PP4 x DP2 (64 workers)
layout: {tp: 8, pp: 4, dp: 2}
model: {params_b: 70.6, hidden: 8192, layers: 80, seq_len: 8192, micro_batch: 1, micro_batches: 16}
""",
    "mixtral-8x7b-tp2-ep4-dp2": """
tsched: workload/v1
name: mixtral-8x7b-tp2-ep4-dp2
description: Mixtral 8x7B MoE (top-2 of 8 experts), TP2 x EP4 x DP2 (16 workers)
layout: {tp: 2, ep: 4, dp: 2}
model: {params_b: 46.7, expert_params_b: 45.1, hidden: 4096, layers: 32, seq_len: 4096,
        micro_batch: 1, micro_batches: 8, experts: 8, top_k: 2}
""",
    "llama3-70b-serving-disagg": """
tsched: workload/v1
name: llama3-70b-serving-disagg
description: Llama-3 70B inference, 2 prefill replicas (TP4) feeding 1 decode replica (TP8)
serving:
  prefill: {replicas: 2, tp: 4}
  decode: {replicas: 1, tp: 8}
  requests_per_s: 20
  prompt_tokens: 4096
  output_tokens: 512
  kv_bytes_per_token: 327680   # 80 layers x 8 KV heads x 128 dims x 2 (K,V) x 2 bytes
model: {params_b: 70.6, hidden: 8192, layers: 80}
""",
}


def cluster(name: str) -> Cluster:
    """The built-in cluster called ``name`` (see :data:`CLUSTERS`)."""
    if name not in CLUSTERS:
        raise InputError(f"unknown cluster preset {name!r} (presets: {', '.join(CLUSTERS)})")
    return parse_cluster_text(CLUSTERS[name], f"preset:{name}")


def workload(name: str) -> Workload:
    """The built-in workload called ``name`` (see :data:`WORKLOADS`)."""
    if name not in WORKLOADS:
        raise InputError(f"unknown workload preset {name!r} (presets: {', '.join(WORKLOADS)})")
    return parse_workload_text(WORKLOADS[name], f"preset:{name}")


def description(text: str) -> str:
    """The ``description:`` line of a preset's YAML text."""
    for line in text.splitlines():
        if line.startswith("description:"):
            return line.split(":", 1)[1].strip()
    return ""


def load_cluster(source: str | os.PathLike[str]) -> Cluster:
    """A cluster from a ``cluster/v1`` file, or a preset name (see ``tsched presets``).

    Examples
    --------
    >>> import tsched
    >>> cluster = tsched.load_cluster("dgx-h100-4node")
    >>> cluster.n_gpus, int(cluster.busy_mask.sum())
    (32, 2)
    """
    text = str(source)
    if text in CLUSTERS and not os.path.exists(text):
        return cluster(text)
    _name_or_file(text, "cluster", CLUSTERS)
    return read_cluster(source)


def load_workload(source: str | os.PathLike[str]) -> Workload:
    """A workload from a ``workload/v1`` file, or a preset name (see ``tsched presets``).

    Examples
    --------
    >>> import tsched
    >>> workload = tsched.load_workload("llama3-8b-tp4-pp2-dp2")
    >>> workload.workers, workload.layout.tp, workload.layout.pp, workload.layout.dp
    (16, 4, 2, 2)
    """
    text = str(source)
    if text in WORKLOADS and not os.path.exists(text):
        return workload(text)
    _name_or_file(text, "workload", WORKLOADS)
    return read_workload(source)


def load_any_cluster(
    source: str | os.PathLike[str],
    hardware: Hardware | None = None,
    topology: str | None = None,
) -> Cluster:
    """A cluster from a preset name or a file in any topology format tsched reads
    (:func:`tsched.formats.detect.read_any_cluster`; ``hardware`` for formats without GPUs,
    ``topology`` for one of a Slurm topology.yaml's)."""
    if not os.path.exists(str(source)):
        return load_cluster(source)  # a preset name, or a clear "not found"
    return read_any_cluster(source, hardware, topology)


def _name_or_file(text: str, kind: str, names: dict[str, str]) -> None:
    """An error for a bare name (no folder, no suffix) that is neither a file nor a preset,
    listing the presets: ``gb200-nvl72-4rack`` is a file of the repository's ``models/``, not a
    preset, and "file not found" alone does not say so."""
    bare = os.sep not in text and "/" not in text and not os.path.splitext(text)[1]
    if bare and text and not os.path.exists(text):
        raise InputError(
            f"{text}: no {kind} file of that name, and no {kind} preset either (presets: "
            f"{', '.join(names)}; a file is given by its path, e.g. models/{kind}s/NAME.yaml)"
        )
