"""NVIDIA Topograph: its simulation model YAML, and the node labels it puts on Kubernetes nodes.

Model (Topograph ≥ 1.0): ``switches:`` maps a switch id to ``{switches: [children], labels,
annotations}``; ``blocks:`` lists ``{switch: <leaf id>, nodes: [hostlists], annotations}`` with
the accelerator (NVLink) domain in the annotation ``accelerator.topology.test/domain`` and an
optional sub-domain in ``accelerator.topology.test/sub-domain``. A switch named only as a child
or a block's ``switch`` is a leaf.

Node labels, in the three generations Topograph has used (read from a ``kubectl get nodes -o
json`` document, nearest level first):

=================  ===========================================================================
``nvidia-v1``      ``network.topology.nvidia.com/{accelerator, block, spine, datacenter}``
``nvidia-v2``      ``network.topology.nvidia.com/{accelerator, leaf, spine, core}``
``topograph``      ``accelerator.topograph.run/domain``, ``accelerator.topograph.run/sub-domain``
                   and ``fabric.topograph.run/tier-0 … tier-N``
=================  ===========================================================================

In the current scheme fabric tier 0 is the switch nearest the node and the depth is whatever
the fabric has (a node list may carry ``tier-0`` only). Labels numbered from ``tier-1`` (an
earlier numbering) are read too. The accelerator domain becomes the ``nvl`` level, the
sub-domain (a rack within a multi-rack NVLink domain) the nearer ``nvl-sub`` level, and the
fabric tiers ``leaf``, ``spine``, ``core`` (``tier4`` …). Labels are written in the current
``topograph`` scheme unless asked.

A node's GPUs come from its ``status.capacity`` (``nvidia.com/gpu``) or the GPU Feature
Discovery labels ``nvidia.com/gpu.count``, ``nvidia.com/gpu.product`` and
``nvidia.com/gpu.memory`` (MiB); nodes of different GPU counts or models get node types of their
own, nodes with no GPUs are left out, and nodes that say nothing get the default node type.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

from tsched._io import load_yaml_text, read_text
from tsched.cluster import Cluster, LinkClass, NodeType
from tsched.errors import InputError
from tsched.formats.topology import (
    ACCELERATOR_LEVELS,
    NVL_LEVEL,
    NVL_SUB_LEVEL,
    SwitchTree,
    cluster_from_tree,
    hostlist_expand,
)

__all__ = [
    "SCHEMES",
    "read_model",
    "parse_model",
    "cluster_from_labels",
    "read_nodes_json",
    "labels_from_cluster",
    "nodes_document",
    "level_labels",
    "fabric_tiers",
    "SUB_DOMAIN_LABEL",
]

DOMAIN_ANNOTATION = "accelerator.topology.test/domain"
SUB_DOMAIN_ANNOTATION = "accelerator.topology.test/sub-domain"
#: The accelerator sub-domain label (current scheme only; its key is fixed in Topograph).
SUB_DOMAIN_LABEL = "accelerator.topograph.run/sub-domain"
#: First fabric tier number Topograph writes (tier 0 is the switch nearest the node).
FIRST_TIER = 0
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
        kids_doc = spec.get("switches") or []
        if not isinstance(kids_doc, list):
            raise InputError(
                f"{source}: switches.{name}.switches: expected a list of switch ids, got "
                f"{type(kids_doc).__name__} {kids_doc!r}"
            )
        kids = [str(k) for k in kids_doc]
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
        if not isinstance(block["nodes"], list):
            raise InputError(f"{where}.nodes: expected a list of hostlists, e.g. [node[1-4]]")
        nodes: list[str] = []
        for item in block["nodes"]:
            try:
                nodes.extend(hostlist_expand(str(item)))
            except InputError as exc:
                raise InputError(f"{where}.nodes: {exc}") from None
        tree.switches.setdefault(leaf, ([], []))[1].extend(nodes)
        annotations = block.get("annotations") or {}
        if not isinstance(annotations, dict):
            raise InputError(f"{where}.annotations: expected a mapping of annotation → value")
        domain = annotations.get(DOMAIN_ANNOTATION)
        sub_domain = annotations.get(SUB_DOMAIN_ANNOTATION)
        for node in nodes:
            if domain is not None:
                tree.domains[node] = str(domain)
            if sub_domain is not None:
                tree.sub_domains[node] = str(sub_domain)
    tree.check(source)
    return tree


def read_model(path: str | os.PathLike[str]) -> SwitchTree:
    return parse_model(load_yaml_text(read_text(path, "Topograph model"), str(path)), str(path))


def is_node_list(text: str) -> bool:
    """Whether YAML text is a Kubernetes List (``kubectl get nodes -o yaml``) rather than a
    Topograph model (a cheap look at its top-level keys; the readers check the rest)."""
    return bool(re.search(r"^kind:\s*List\s*$", text, re.MULTILINE)) and bool(
        re.search(r"^items:", text, re.MULTILINE)
    )


# ---------------------------------------------------------------------- node labels
def fabric_tiers(keys: Any, source: str = "node labels") -> tuple[str, ...]:
    """The ``fabric.topograph.run/tier-N`` keys among ``keys``, nearest first: numbered from 0
    (Topograph ≥ 1.0) or from 1 (an earlier numbering), without gaps."""
    found = sorted({int(m.group(1)) for k in keys if (m := _TIER.match(k))})
    if not found:
        return ()
    if found[0] not in (0, 1) or found != list(range(found[0], found[-1] + 1)):
        raise InputError(
            f"{source}: fabric tier labels {found} skip a tier (expected tier-0 … tier-N, "
            "nearest switch first)"
        )
    return tuple(f"fabric.topograph.run/tier-{k}" for k in found)


def _detect(labels: list[dict[str, str]]) -> str:
    keys = {k for lab in labels for k in lab}
    if any(_TIER.match(k) for k in keys) or {SCHEMES["topograph"][0], SUB_DOMAIN_LABEL} & keys:
        return "topograph"
    if any(k in keys for k in SCHEMES["nvidia-v2"][1][:1] + SCHEMES["nvidia-v2"][1][2:]):
        return "nvidia-v2"
    if any(k in keys for k in SCHEMES["nvidia-v1"][1]) or SCHEMES["nvidia-v1"][0] in keys:
        return "nvidia-v1"
    raise InputError(
        "no Topograph topology labels on any node (expected network.topology.nvidia.com/… or "
        "fabric.topograph.run/tier-N / accelerator.topograph.run/domain)"
    )


def _require(nodes, index: int, node: str, key: str, source: str) -> str:
    labels = nodes[index][1]
    if key not in labels:
        raise InputError(
            f"{source}: items[{index}] (node {node!r}): missing label {key!r} that other nodes "
            "carry"
        )
    return labels[key]


def cluster_from_labels(
    nodes: list[tuple[str, dict[str, str]]],
    name: str,
    source: str,
    node_type: NodeType | None = None,
    intra_link: LinkClass | None = None,
    node_types: dict[str, NodeType] | None = None,
) -> Cluster:
    """A cluster from (node name, labels) pairs.

    Every fabric tier a node list carries must be on every node, without a gap (Topograph writes
    the tiers its configuration enables, for every node). The accelerator domain and sub-domain
    are per node, as Topograph writes them: a node outside any NVLink domain (a plain server on
    the same leaves as NVL72 racks) carries neither, and is a domain of its own at that level,
    priced by the level above; a sub-domain is a level between the node and its domain, and one
    sub-domain lies in one domain. ``node_types`` (node name → type) gives nodes a type of their
    own (mixed GPU counts); the others get ``node_type``.

    Examples
    --------
    >>> nodes = [("rack1-a", {"accelerator.topograph.run/domain": "nvl1",
    ...                       "fabric.topograph.run/tier-0": "leaf1"}),
    ...          ("rack1-b", {"accelerator.topograph.run/domain": "nvl1",
    ...                       "fabric.topograph.run/tier-0": "leaf1"}),
    ...          ("server", {"fabric.topograph.run/tier-0": "leaf1"})]
    >>> cluster = cluster_from_labels(nodes, "mixed", "nodes.json")
    >>> cluster.levels, [dict(n.at) for n in cluster.nodes][2]
    (('nvl', 'leaf'), {'leaf': 'leaf1'})
    """
    scheme = _detect([lab for _, lab in nodes])
    accel, tiers = SCHEMES[scheme]
    _check_nodes(nodes, accel, source)
    if scheme == "topograph":
        tiers = fabric_tiers({k for _, lab in nodes for k in lab}, source)
    present = [t for t in tiers if any(t in lab for _, lab in nodes)]
    if present != list(tiers[: len(present)]):
        raise InputError(
            f"{source}: label {tiers[len(present) - 1] if present else tiers[0]!r} is missing "
            f"on every node but higher tiers are set ({scheme} labels)"
        )
    tiers_of: dict[str, set[str]] = {}
    for _, lab in nodes:
        for tier in present:
            if tier in lab:
                tiers_of.setdefault(lab[tier], set()).add(tier)
    tree = SwitchTree()
    for index, (node, labels) in enumerate(nodes):
        chain = []
        for tier in present:
            value = _require(nodes, index, node, tier, source)
            # a value used on two tiers gets the tier as a prefix
            chain.append(
                value if len(tiers_of[value]) == 1 else f"{tier.rsplit('/', 1)[1]}-{value}"
            )
        if accel in labels:
            tree.domains[node] = labels[accel]
        if scheme == "topograph" and SUB_DOMAIN_LABEL in labels:
            tree.sub_domains[node] = labels[SUB_DOMAIN_LABEL]
        if not chain:
            chain = ["fabric=all"]
        for k, switch in enumerate(chain):
            kids, members = tree.switches.setdefault(switch, ([], []))
            if k == 0:
                members.append(node)
            elif chain[k - 1] not in kids:
                kids.append(chain[k - 1])
    cluster = cluster_from_tree(tree, name, source, node_type, intra_link)
    return _with_node_types(cluster, node_types) if node_types else cluster


def _check_nodes(nodes: list[tuple[str, dict[str, str]]], accel: str, source: str) -> None:
    """One-line errors naming the node and the label: a node listed twice, a fabric tier
    skipped on a node, a sub-domain without a domain, a sub-domain in two domains."""
    seen: dict[str, int] = {}
    domain_of_sub: dict[str, tuple[str, str]] = {}
    for index, (node, labels) in enumerate(nodes):
        where = f"{source}: items[{index}] (node {node!r})"
        if node in seen:
            raise InputError(f"{where}: listed twice (also items[{seen[node]}])")
        seen[node] = index
        numbers = sorted(int(m.group(1)) for k in labels if (m := _TIER.match(k)))
        if numbers and numbers != list(range(numbers[0], numbers[-1] + 1)):
            gap = next(k for k in range(numbers[0], numbers[-1]) if k not in numbers)
            raise InputError(
                f"{where}: label 'fabric.topograph.run/tier-{gap}' is missing between tiers "
                f"{numbers[0]} and {numbers[-1]} (a tier is skipped)"
            )
        sub = labels.get(SUB_DOMAIN_LABEL)
        if sub is None:
            continue
        domain = labels.get(accel)
        if domain is None:
            raise InputError(
                f"{where}: label {SUB_DOMAIN_LABEL}={sub!r} without {accel!r} (a sub-domain "
                "lies in an accelerator domain)"
            )
        first = domain_of_sub.setdefault(sub, (domain, node))
        if first[0] != domain:
            raise InputError(
                f"{where}: label {SUB_DOMAIN_LABEL}={sub!r} puts it in domain {domain!r}, but "
                f"node {first[1]!r} has it in domain {first[0]!r} (a sub-domain is in one domain)"
            )


def _with_node_types(cluster: Cluster, node_types: dict[str, NodeType]) -> Cluster:
    """The cluster with the given nodes switched to their own node types."""
    from dataclasses import replace

    types = dict(cluster.node_types)
    for node_type in node_types.values():
        if node_type.name in types and types[node_type.name] != node_type:
            raise InputError(f"{cluster.source}: two node types named {node_type.name!r}")
        types[node_type.name] = node_type
    nodes = tuple(
        replace(n, type=node_types[n.name].name) if n.name in node_types else n
        for n in cluster.nodes
    )
    used = {n.type for n in nodes}
    return replace(cluster, node_types={k: v for k, v in types.items() if k in used}, nodes=nodes)


#: GPU Feature Discovery labels (NVIDIA GPU Operator) and the device plugin's resource.
GPU_COUNT_LABEL, GPU_PRODUCT_LABEL = "nvidia.com/gpu.count", "nvidia.com/gpu.product"
GPU_MEMORY_LABEL, GPU_RESOURCE = "nvidia.com/gpu.memory", "nvidia.com/gpu"


def _gpu_spec(
    item: dict[str, Any], labels: dict[str, str], where: str
) -> tuple[int, str, float] | None:
    """(GPU count, model, memory GB) a Node object states, or None when it says nothing."""
    status = item.get("status")
    capacity = (status.get("capacity") if isinstance(status, dict) else None) or {}
    raw = capacity.get(GPU_RESOURCE, labels.get(GPU_COUNT_LABEL))
    if raw is None:
        return None
    try:
        count = int(str(raw))
    except ValueError:
        raise InputError(f"{where}: GPU count {raw!r} is not an integer") from None
    memory = labels.get(GPU_MEMORY_LABEL)
    try:
        memory_gb = round(float(memory) / 1024.0, 1) if memory else 0.0
    except ValueError:
        raise InputError(f"{where}: label {GPU_MEMORY_LABEL}={memory!r} is not MiB") from None
    return count, labels.get(GPU_PRODUCT_LABEL, ""), memory_gb


def _labels(value: Any, where: str) -> dict[str, str]:
    """A node's labels: a mapping of strings to strings, as Kubernetes writes them."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InputError(f"{where}: expected a mapping of label → value, got {value!r}")
    for key, text in value.items():
        if not isinstance(text, str):
            raise InputError(
                f"{where}.{key}: label values are strings, got {type(text).__name__} {text!r}"
            )
    return value


def read_nodes_json(
    path: str | os.PathLike[str],
    node_type: NodeType | None = None,
    intra_link: LinkClass | None = None,
) -> Cluster:
    """A cluster from ``kubectl get nodes -o json`` output (a List of Node objects), or the same
    List as ``kubectl get nodes -o yaml`` writes it (a file named ``.yaml`` or ``.yml``)."""
    source = str(path)
    text = read_text(path, "kubectl nodes list")
    if str(path).endswith((".yaml", ".yml")):
        doc = load_yaml_text(text, source)
    else:
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError(f"{source}:{exc.lineno}:{exc.colno}: not JSON ({exc.msg})") from None
    items = doc.get("items") if isinstance(doc, dict) else None
    if not isinstance(items, list):
        raise InputError(
            f"{source}: expected a Kubernetes List with 'items' (kubectl get nodes -o json)"
        )
    nodes = []
    specs: dict[str, tuple[int, str, float]] = {}
    for i, item in enumerate(items):
        meta = item.get("metadata") if isinstance(item, dict) else None
        if not isinstance(meta, dict) or "name" not in meta:
            raise InputError(f"{source}: items[{i}]: no metadata.name")
        labels = dict(_labels(meta.get("labels"), f"{source}: items[{i}].metadata.labels"))
        spec = _gpu_spec(item, labels, f"{source}: items[{i}] (node {meta['name']!r})")
        if spec is not None and spec[0] == 0:
            continue  # a node without GPUs is not a place for workers
        if spec is not None:
            specs[str(meta["name"])] = spec
        nodes.append((str(meta["name"]), labels))
    if not nodes:
        raise InputError(f"{source}: no node with GPUs")
    name = os.path.splitext(os.path.basename(source))[0]
    types: dict[str, NodeType] = {}
    if specs:
        from tsched.formats.topology import default_node_type

        base, link = (node_type, intra_link) if node_type and intra_link else default_node_type()
        intra_link = link
        node_type = base
        for node, (count, model, memory) in specs.items():
            same = count == base.gpus and (not model or model == base.gpu_model)
            if same and not memory:
                continue
            # one name per distinct (count, model, memory): two types never share a name
            type_name = f"{count}x{model or base.gpu_model}" + (f"-{memory:g}GB" if memory else "")
            type_name = type_name.replace(" ", "-")
            types[node] = NodeType(type_name, count, model or base.gpu_model, memory,
                                   intra=link.name if count > 1 else None)  # fmt: skip
    return cluster_from_labels(nodes, name, source, node_type, intra_link, types)


def _scheme_labels(cluster: Cluster, scheme: str) -> tuple[str, list[str], tuple[str, ...]]:
    """(accelerator label, network levels nearest first, their labels) under ``scheme``."""
    if scheme not in SCHEMES:
        raise InputError(f"label scheme {scheme!r}: expected one of {', '.join(SCHEMES)}")
    accel, tiers = SCHEMES[scheme]
    network = [lv for lv in cluster.levels if lv not in ACCELERATOR_LEVELS]
    if scheme == "topograph":
        tiers = tuple(
            f"fabric.topograph.run/tier-{k}" for k in range(FIRST_TIER, FIRST_TIER + len(network))
        )
    elif len(network) > len(tiers):
        raise InputError(
            f"cluster {cluster.name!r} has {len(network)} network levels; the {scheme} scheme "
            f"has {len(tiers)} (use --label-scheme topograph)"
        )
    if NVL_SUB_LEVEL in cluster.levels and scheme != "topograph":
        raise InputError(
            f"cluster {cluster.name!r} has accelerator sub-domains ({NVL_SUB_LEVEL}); the "
            f"{scheme} scheme has no label for them (use --label-scheme topograph)"
        )
    return accel, network, tiers


def _level_label(level: str, accel: str, network: list[str], tiers: tuple[str, ...]) -> str:
    if level == NVL_LEVEL:
        return accel
    if level == NVL_SUB_LEVEL:
        return SUB_DOMAIN_LABEL
    return tiers[network.index(level)]


def labels_from_cluster(cluster: Cluster, scheme: str = "topograph") -> dict[str, dict[str, str]]:
    """Node name → topology labels for a cluster's levels (``nvl`` → the accelerator label,
    ``nvl-sub`` → the sub-domain label, network levels → fabric tiers from 0)."""
    accel, network, tiers = _scheme_labels(cluster, scheme)
    out: dict[str, dict[str, str]] = {}
    for node in cluster.nodes:
        out[node.name] = {
            _level_label(level, accel, network, tiers): node.at[level]
            for level in cluster.levels
            if level in node.at
        }
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
    """The node label of each cluster level, nearest first (for Topology objects and KAI
    topology constraints)."""
    accel, network, tiers = _scheme_labels(cluster, scheme)
    return [_level_label(level, accel, network, tiers) for level in cluster.levels]
