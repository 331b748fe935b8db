"""Slurm on Kubernetes (Slinky): the ConfigMap that holds Slurm's topology, as Topograph's
``slinky`` engine writes it, read and written.

Topograph's slinky engine renders Slurm's topology (``topology/tree`` or ``topology/block``) and
stores it in a ConfigMap of the Slinky cluster's namespace: its name is the engine's
``topologyConfigmapName`` (``slurm-config`` in Topograph's examples), the data key its
``topologyConfigPath`` (``topology.conf``), and it annotates the object with
``topograph.run/engine: slinky``, ``topograph.run/plugin`` and, for blocks,
``topograph.run/block-sizes``. slurmctld mounts the key as its ``topology.conf`` (or
``topology.yaml`` for Slurm's YAML form). The reader takes a ConfigMap as ``kubectl get
configmap -o yaml|json`` prints it: the key ``topology.yaml`` or ``topology.conf``, else its
only key.
"""

from __future__ import annotations

from typing import Any

import yaml

from tsched.cluster import Cluster
from tsched.errors import InputError
from tsched.formats.slurm import (
    BlockTopology,
    blocks_from_cluster,
    parse_topology_conf,
    write_block,
    write_tree,
)
from tsched.formats.slurm_yaml import parse_topology_yaml
from tsched.formats.topology import SwitchTree, tree_from_cluster

__all__ = [
    "DEFAULT_NAME",
    "DEFAULT_KEY",
    "PLUGINS",
    "is_configmap",
    "parse_configmap",
    "configmap",
]

#: Topograph's examples' ConfigMap name and data key for the slinky engine.
DEFAULT_NAME, DEFAULT_KEY = "slurm-config", "topology.conf"
#: The Slurm topology plugins a ConfigMap can hold.
PLUGINS = ("tree", "block")
_KEYS = ("topology.yaml", "topology.conf")


def is_configmap(doc: Any) -> bool:
    """Whether parsed YAML or JSON is a Kubernetes ConfigMap."""
    return isinstance(doc, dict) and doc.get("kind") == "ConfigMap"


def parse_configmap(
    doc: Any, source: str, topology: str | None = None
) -> tuple[str, SwitchTree | BlockTopology]:
    """``(kind, topology)`` of the Slurm topology a ConfigMap holds (``topology`` picks one of a
    topology.yaml's); kind ``tree`` or ``block``.

    Examples
    --------
    >>> cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "slurm-config"},
    ...       "data": {"topology.conf": "SwitchName=s1 Nodes=n[1-2]\\nSwitchName=s2 "
    ...                                 "Nodes=n[3-4]\\nSwitchName=root Switches=s[1-2]\\n"}}
    >>> kind, tree = parse_configmap(cm, "cm.yaml")
    >>> kind, tree.node_paths()["n3"]
    ('tree', ['s2', 'root'])
    """
    meta = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
    where = f"{source}: ConfigMap {meta.get('name', '?')!r}"
    data = doc.get("data")
    if not isinstance(data, dict) or not data:
        raise InputError(f"{where}: data: expected the key topology.conf or topology.yaml")
    key = next((k for k in _KEYS if k in data), None)
    if key is None:
        if len(data) != 1:
            raise InputError(f"{where}: data: no key topology.conf or topology.yaml (keys: "
                             f"{', '.join(sorted(map(str, data)))})")  # fmt: skip
        key = next(iter(data))
    text = data[key]
    if not isinstance(text, str):
        raise InputError(f"{where}: data.{key}: expected the file's text, got {text!r}")
    inner = f"{source}: data.{key}"
    if key.endswith((".yaml", ".yml")) or text.lstrip().startswith(("- topology", "---")):
        _, kind, topo = parse_topology_yaml(text, inner, topology)
        return kind, topo
    if topology is not None:
        raise InputError(f"{inner}: --topology {topology!r} names one of a topology.yaml's "
                         "topologies; this key holds a topology.conf")  # fmt: skip
    return parse_topology_conf(text, inner)


def configmap(
    cluster: Cluster,
    *,
    name: str = DEFAULT_NAME,
    namespace: str = "slurm",
    plugin: str = "tree",
    key: str = DEFAULT_KEY,
) -> str:
    """The ConfigMap (YAML) that gives a Slinky cluster the cluster's Slurm topology, laid out
    as Topograph's slinky engine writes it (``kubectl apply -f`` it, or point the engine's
    ``topologyConfigmapName`` at it)."""
    if plugin not in PLUGINS:
        raise InputError(f"--slurm-plugin {plugin!r}: expected one of {', '.join(PLUGINS)}")
    annotations = {"topograph.run/plugin": f"topology/{plugin}"}
    if plugin == "tree":
        text = write_tree(tree_from_cluster(cluster))
    else:
        blocks = blocks_from_cluster(cluster)
        text = write_block(blocks)
        annotations["topograph.run/block-sizes"] = ",".join(str(s) for s in blocks.sizes)
    doc = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "annotations": annotations},
        "data": {key: text},
    }
    return yaml.dump(doc, Dumper=_LiteralDumper, sort_keys=False)


class _LiteralDumper(yaml.SafeDumper):
    """Writes multi-line text as a ``|`` block, as ConfigMaps are written by hand and by
    kubectl (one file per data key, readable in the YAML)."""


def _text(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    return dumper.represent_scalar("tag:yaml.org,2002:str", value,
                                   style="|" if "\n" in value else None)  # fmt: skip


_LiteralDumper.add_representer(str, _text)
