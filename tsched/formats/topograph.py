"""NVIDIA Topograph: its simulation model YAML, and the node labels it puts on Kubernetes nodes.

Model (Topograph ≥ 1.0): ``switches:`` maps a switch id to ``{switches: [children], labels,
annotations}``; ``blocks:`` lists ``{switch: <leaf id>, nodes: [hostlists], annotations}`` with
the accelerator (NVLink) domain in the annotation ``accelerator.topology.test/domain``. A switch
named only as a child or a block's ``switch`` is a leaf.

Node labels, in the three generations Topograph has used (read from a ``kubectl get nodes -o
json`` document, nearest level first):

=================  ===========================================================================
``nvidia-v1``      ``network.topology.nvidia.com/{accelerator, block, spine, datacenter}``
``nvidia-v2``      ``network.topology.nvidia.com/{accelerator, leaf, spine, core}``
``topograph``      ``accelerator.topograph.run/domain`` + ``fabric.topograph.run/tier-1 …``
=================  ===========================================================================

The accelerator label becomes the ``nvl`` level; the network tiers become ``leaf``, ``spine``,
``core`` (``tier4`` …). Writing labels uses the current ``topograph`` scheme unless asked.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

from tsched._io import load_yaml_text, read_text
from tsched.cluster import Cluster, LinkClass, NodeType
from tsched.errors import InputError
from tsched.formats.topology import SwitchTree, cluster_from_tree, hostlist_expand

__all__ = [
    "SCHEMES",
    "read_model",
    "parse_model",
    "cluster_from_labels",
    "read_nodes_json",
    "labels_from_cluster",
    "nodes_document",
    "level_labels",
]

DOMAIN_ANNOTATION = "accelerator.topology.test/domain"
NV = "network.topology.nvidia.com/"
#: Label scheme → (accelerator label, network tier labels nearest first).
SCHEMES: dict[str, tuple[str, tuple[str, ...]]] = {
    "nvidia-v1": (NV + "accelerator", (NV + "block", NV + "spine", NV + "datacenter")),
    "nvidia-v2": (NV + "accelerator", (NV + "leaf", NV + "spine", NV + "core")),
    "topograph": ("accelerator.topograph.run/domain", ()),  # tiers: fabric.topograph.run/tier-N
}
_TIER = re.compile(r"^fabric\.topograph\.run/tier-(\d+)$")


# ---------------------------------------------------------------------- model YAML
def parse_model(data: Any, source: str) -> SwitchTree:
    if not isinstance(data, dict) or "blocks" not in data:
        raise InputError(f"{source}: expected a Topograph model with 'switches' and 'blocks'")
    unknown = set(data) - {"switches", "blocks"}
    if unknown:
        raise InputError(
            f"{source}: unknown key {sorted(unknown)[0]!r} (a Topograph model has switches, "
            "blocks; older models with nodes/capacity_blocks are not supported)"
        )
    tree = SwitchTree()
    switches = data.get("switches") or {}
    if not isinstance(switches, dict):
        raise InputError(f"{source}: switches: expected a mapping of switch id → spec")
    for name, spec in switches.items():
        spec = spec or {}
        if not isinstance(spec, dict):
            raise InputError(f"{source}: switches.{name}: expected a mapping")
        kids = [str(k) for k in spec.get("switches") or []]
        tree.switches.setdefault(str(name), ([], []))[0].extend(kids)
        for kid in kids:
            tree.switches.setdefault(kid, ([], []))
    blocks = data.get("blocks")
    if not isinstance(blocks, list):
        raise InputError(f"{source}: blocks: expected a list")
    for i, block in enumerate(blocks):
        where = f"{source}: blocks[{i}]"
        if not isinstance(block, dict) or "switch" not in block or "nodes" not in block:
            raise InputError(f"{where}: expected {{switch: LEAF, nodes: [hostlists]}}")
        leaf = str(block["switch"])
        nodes: list[str] = []
        for item in block["nodes"]:
            try:
                nodes.extend(hostlist_expand(str(item)))
            except InputError as exc:
                raise InputError(f"{where}.nodes: {exc}") from None
        tree.switches.setdefault(leaf, ([], []))[1].extend(nodes)
        domain = (block.get("annotations") or {}).get(DOMAIN_ANNOTATION)
        if domain is not None:
            for node in nodes:
                tree.domains[node] = str(domain)
    tree.check(source)
    return tree


def read_model(path: str | os.PathLike[str]) -> SwitchTree:
    return parse_model(load_yaml_text(read_text(path, "Topograph model"), str(path)), str(path))


# ---------------------------------------------------------------------- node labels
def _detect(labels: list[dict[str, str]]) -> str:
    keys = {k for lab in labels for k in lab}
    if any(_TIER.match(k) for k in keys) or SCHEMES["topograph"][0] in keys:
        return "topograph"
    if any(k in keys for k in SCHEMES["nvidia-v2"][1][:1] + SCHEMES["nvidia-v2"][1][2:]):
        return "nvidia-v2"
    if any(k in keys for k in SCHEMES["nvidia-v1"][1]) or SCHEMES["nvidia-v1"][0] in keys:
        return "nvidia-v1"
    raise InputError(
        "no Topograph topology labels on any node (expected network.topology.nvidia.com/… or "
        "fabric.topograph.run/tier-N / accelerator.topograph.run/domain)"
    )


def cluster_from_labels(
    nodes: list[tuple[str, dict[str, str]]],
    name: str,
    source: str,
    node_type: NodeType | None = None,
    intra_link: LinkClass | None = None,
) -> Cluster:
    """A cluster from (node name, labels) pairs. Every labelled level must be on every node."""
    scheme = _detect([lab for _, lab in nodes])
    accel, tiers = SCHEMES[scheme]
    if scheme == "topograph":
        found = sorted({int(m.group(1)) for _, lab in nodes for k in lab if (m := _TIER.match(k))})
        if found and found != list(range(1, found[-1] + 1)):
            raise InputError(f"{source}: tier labels {found} skip a tier (expected 1 … N)")
        tiers = tuple(f"fabric.topograph.run/tier-{k}" for k in found)
    present = [t for t in tiers if any(t in lab for _, lab in nodes)]
    if present != list(tiers[: len(present)]):
        raise InputError(
            f"{source}: label {tiers[len(present) - 1] if present else tiers[0]!r} is missing "
            f"on every node but higher tiers are set ({scheme} labels)"
        )
    has_accel = any(accel in lab for _, lab in nodes)
    tiers_of: dict[str, set[str]] = {}
    for _, lab in nodes:
        for tier in present:
            if tier in lab:
                tiers_of.setdefault(lab[tier], set()).add(tier)
    tree = SwitchTree()
    for index, (node, lab) in enumerate(nodes):
        chain = []
        for tier in present:
            if tier not in lab:
                raise InputError(
                    f"{source}: items[{index}] (node {node!r}): missing label {tier!r} that "
                    "other nodes carry"
                )
            value = lab[tier]  # a value used on two tiers gets the tier as a prefix
            chain.append(
                value if len(tiers_of[value]) == 1 else f"{tier.rsplit('/', 1)[1]}-{value}"
            )
        if has_accel:
            if accel not in lab:
                raise InputError(
                    f"{source}: items[{index}] (node {node!r}): missing label {accel!r} that "
                    "other nodes carry"
                )
            tree.domains[node] = lab[accel]
        if not chain:
            chain = ["fabric=all"]
        for k, switch in enumerate(chain):
            kids, members = tree.switches.setdefault(switch, ([], []))
            if k == 0:
                members.append(node)
            elif chain[k - 1] not in kids:
                kids.append(chain[k - 1])
    return cluster_from_tree(tree, name, source, node_type, intra_link)


def read_nodes_json(
    path: str | os.PathLike[str],
    node_type: NodeType | None = None,
    intra_link: LinkClass | None = None,
) -> Cluster:
    """A cluster from ``kubectl get nodes -o json`` output (a List of Node objects)."""
    source = str(path)
    try:
        doc = json.loads(read_text(path, "kubectl nodes JSON"))
    except json.JSONDecodeError as exc:
        raise InputError(f"{source}:{exc.lineno}:{exc.colno}: not JSON ({exc.msg})") from None
    items = doc.get("items") if isinstance(doc, dict) else None
    if not isinstance(items, list):
        raise InputError(f"{source}: expected a Kubernetes List with 'items' (kubectl -o json)")
    nodes = []
    for i, item in enumerate(items):
        meta = item.get("metadata") if isinstance(item, dict) else None
        if not isinstance(meta, dict) or "name" not in meta:
            raise InputError(f"{source}: items[{i}]: no metadata.name")
        nodes.append((str(meta["name"]), dict(meta.get("labels") or {})))
    name = os.path.splitext(os.path.basename(source))[0]
    return cluster_from_labels(nodes, name, source, node_type, intra_link)


def _scheme_labels(cluster: Cluster, scheme: str) -> tuple[str, list[str], tuple[str, ...]]:
    """(accelerator label, network levels nearest first, their labels) under ``scheme``."""
    if scheme not in SCHEMES:
        raise InputError(f"label scheme {scheme!r}: expected one of {', '.join(SCHEMES)}")
    accel, tiers = SCHEMES[scheme]
    network = [lv for lv in cluster.levels if lv != "nvl"]
    if scheme == "topograph":
        tiers = tuple(f"fabric.topograph.run/tier-{k}" for k in range(1, len(network) + 1))
    elif len(network) > len(tiers):
        raise InputError(
            f"cluster {cluster.name!r} has {len(network)} network levels; the {scheme} scheme "
            f"has {len(tiers)} (use --label-scheme topograph)"
        )
    return accel, network, tiers


def labels_from_cluster(cluster: Cluster, scheme: str = "topograph") -> dict[str, dict[str, str]]:
    """Node name → topology labels for a cluster's levels (``nvl`` → the accelerator label)."""
    accel, network, tiers = _scheme_labels(cluster, scheme)
    out: dict[str, dict[str, str]] = {}
    for node in cluster.nodes:
        labels = {}
        if "nvl" in node.at:
            labels[accel] = node.at["nvl"]
        for level, label in zip(network, tiers):
            if level in node.at:
                labels[label] = node.at[level]
        out[node.name] = labels
    return out


def nodes_document(labels: dict[str, dict[str, str]]) -> dict[str, Any]:
    """A Kubernetes List of Node objects carrying only names and labels (readable back by
    :func:`read_nodes_json`; apply with ``kubectl label`` or a merge patch)."""
    return {
        "apiVersion": "v1",
        "kind": "List",
        "items": [
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": n, "labels": lab}}
            for n, lab in labels.items()
        ],
    }


def level_labels(cluster: Cluster, scheme: str = "topograph") -> list[str]:
    """The node label of each cluster level, nearest first (for Topology objects)."""
    accel, network, tiers = _scheme_labels(cluster, scheme)
    out = []
    for level in cluster.levels:
        out.append(accel if level == "nvl" else tiers[network.index(level)])
    return out
