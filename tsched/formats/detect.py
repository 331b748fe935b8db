"""Which topology format a file is, and its reader: the sniffing behind ``tsched validate``,
``tsched topology convert`` and ``tsched solve --validate-against``.

Formats that describe no GPUs (Slurm ``topology.conf``, Topograph models and node lists without
GPU labels) take them from a :class:`Hardware` description; the command line's
``--gpus/--gpu-model/--memory-gb/--intra-gbps/--host`` fill one.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace
from pathlib import Path

from tsched._io import load_yaml_text, read_text
from tsched.cluster import Cluster, LinkClass, NodeType
from tsched.errors import InputError
from tsched.formats import slinky, slurm, slurm_yaml, topograph
from tsched.formats.cluster_yaml import read_cluster
from tsched.formats.nvidia_smi import cluster_from_topo, parse_topo
from tsched.formats.topology import SwitchTree, cluster_from_tree, default_node_type

__all__ = ["Hardware", "SOURCES", "read_any_cluster", "read_topology", "read_slurm"]

#: The readers :func:`read_topology` can be asked for by name.
SOURCES = ("nvidia-smi", "topograph", "slurm")


@dataclass(frozen=True, slots=True)
class Hardware:
    """What a node looks like where the format does not say: GPUs per node, their model and
    memory (GB; 0 unknown), the intra-node bandwidth (GB/s per direction) and, for nvidia-smi
    output, the node's name (default: the file's stem)."""

    gpus: int = 8
    gpu_model: str = "H100"
    memory_gb: float = 0.0
    intra_gbps: float = 450.0
    host: str | None = None

    def node_type(self) -> tuple[NodeType, LinkClass]:
        """The node type and intra-node link class these figures describe."""
        node_type, link = default_node_type(self.gpus, self.gpu_model, self.intra_gbps)
        if self.memory_gb:
            node_type = replace(node_type, memory_gb=self.memory_gb)
        return node_type, link


def read_any_cluster(
    path: str | os.PathLike[str],
    hardware: Hardware | None = None,
    topology: str | None = None,
) -> Cluster:
    """A cluster from a file in any format tsched reads, told apart by its content.

    cluster/v1 YAML, Slurm ``topology.conf`` (tree or block) or ``topology.yaml`` (``topology``
    names one of its topologies), a Slinky ConfigMap holding either, a Topograph model,
    ``kubectl get nodes -o json|yaml`` output with Topograph labels, or ``nvidia-smi topo -m``
    output.

    Raises
    ------
    InputError
        The file is missing, a folder, or in none of those formats (the message lists them).

    Examples
    --------
    >>> import tempfile, pathlib
    >>> conf = pathlib.Path(tempfile.mkdtemp()) / "topology.conf"
    >>> _ = conf.write_text("SwitchName=leaf0 Nodes=n[1-2]\\nSwitchName=leaf1 Nodes=n[3-4]\\n"
    ...                     "SwitchName=spine Switches=leaf[0-1]\\n")
    >>> cluster = read_any_cluster(conf, Hardware(gpus=4))
    >>> cluster.n_nodes, cluster.n_gpus, cluster.levels
    (4, 16, ('leaf', 'spine'))
    """
    hardware = hardware or Hardware()
    p = Path(path)
    if p.is_dir():
        raise InputError(f"{p}: expected a topology file, found a folder")
    try:  # undecodable bytes are kept as U+FFFD: the file is told apart, or refused, by content
        text = p.read_bytes().decode("utf-8", errors="replace")
    except FileNotFoundError:
        raise InputError(f"{p}: topology file not found") from None
    except OSError as exc:
        raise InputError(f"{p}: cannot read topology file: {exc}") from exc
    name = p.stem
    node_type, link = hardware.node_type()
    slurm_like = (
        re.search(r"^kind:\s*ConfigMap\s*$", text, re.MULTILINE)
        or (p.suffix == ".json" and re.search(r'"kind"\s*:\s*"ConfigMap"', text))
        or re.search(r"^-\s+topology\s*:", text, re.MULTILINE)
    )
    if slurm_like:
        return _slurm_cluster(*_slurm_from_text(text, str(p), topology), p, hardware)
    if p.suffix == ".json":
        return topograph.read_nodes_json(p, node_type, link)
    if "tsched: cluster/v1" in text:
        return read_cluster(p)
    if re.search(r"^\s*(SwitchName|BlockName)\s*=", text, re.MULTILINE | re.IGNORECASE):
        return _slurm_cluster(*slurm.parse_topology_conf(text, str(p)), p, hardware)
    if "GPU0" in text and ("NV" in text or "PIX" in text or "SYS" in text):
        return cluster_from_topo(parse_topo(text, str(p)), hardware.host or name,
                                 hardware.gpu_model)  # fmt: skip
    if p.suffix in (".yaml", ".yml") and topograph.is_node_list(text):
        return topograph.read_nodes_json(p, node_type, link)
    if "blocks:" in text:
        return cluster_from_tree(topograph.read_model(p), name, str(p), node_type, link)
    raise InputError(
        f"{p}: not a format tsched reads (cluster/v1 YAML, Slurm topology.conf, Topograph model "
        "YAML, kubectl nodes JSON, nvidia-smi topo -m output, Slurm topology.yaml, Slinky "
        "ConfigMap)"
    )


def read_topology(
    source: str,
    path: str | os.PathLike[str],
    hardware: Hardware | None = None,
    topology: str | None = None,
) -> Cluster:
    """A cluster from the reader ``source`` names (one of :data:`SOURCES`), and only that one:
    a file of another format is an error, not a guess (``tsched inventory SOURCE FILE``).
    ``slurm`` takes a topology.conf, a topology.yaml (``topology`` picks one of its
    topologies) or a Slinky ConfigMap holding either."""
    if source not in SOURCES:
        raise InputError(f"unknown topology source {source!r} (valid: {', '.join(SOURCES)})")
    hardware = hardware or Hardware()
    p = Path(path)
    if source == "nvidia-smi":
        text = read_text(p, "nvidia-smi topo -m output")
        return cluster_from_topo(parse_topo(text, str(p)), hardware.host or p.stem,
                                 hardware.gpu_model, hardware.memory_gb)  # fmt: skip
    node_type, link = hardware.node_type()
    if source == "topograph":
        if p.suffix == ".json" or topograph.is_node_list(read_text(p, "Topograph file")):
            return topograph.read_nodes_json(p, node_type, link)
        return cluster_from_tree(topograph.read_model(p), p.stem, str(p), node_type, link)
    return _slurm_cluster(*read_slurm(p, topology), p, hardware)


def read_slurm(
    path: str | os.PathLike[str], topology: str | None = None
) -> tuple[str, SwitchTree | slurm.BlockTopology]:
    """``(kind, topology)`` from a Slurm topology in any of its forms: ``topology.conf`` (tree
    or block plugin), ``topology.yaml`` (``topology`` names one, else the cluster default) or
    a Slinky ConfigMap (YAML or JSON) holding either."""
    return _slurm_from_text(read_text(path, "Slurm topology"), str(path), topology)


def _slurm_from_text(
    text: str, source: str, topology: str | None
) -> tuple[str, SwitchTree | slurm.BlockTopology]:
    """:func:`read_slurm` of a file's text: parsed as YAML once, for a ConfigMap or a
    topology.yaml, else read as a topology.conf."""
    try:  # JSON is YAML too; a topology.conf may not parse as YAML at all
        doc = load_yaml_text(text, source)
    except InputError:
        doc = None
    if slinky.is_configmap(doc):
        return slinky.parse_configmap(doc, source, topology)
    if slurm_yaml.is_topology_yaml(doc):
        _, kind, topo = slurm_yaml.topology_from_yaml(doc, source, topology)
        return kind, topo
    if topology is not None:
        raise InputError(f"{source}: --topology {topology!r} names one of a topology.yaml's "
                         "topologies; this is not a topology.yaml")  # fmt: skip
    return slurm.parse_topology_conf(text, source)  # its errors name the non-KEY=VALUE line


def _slurm_cluster(kind: str, topo: object, p: Path, hardware: Hardware | None) -> Cluster:
    node_type, link = (hardware or Hardware()).node_type()
    if kind == "block":
        return slurm.cluster_from_blocks(topo, p.stem, str(p), node_type, link)  # type: ignore[arg-type]
    return cluster_from_tree(topo, p.stem, str(p), node_type, link)  # type: ignore[arg-type]
