"""Reader and writer of the ``tsched: cluster/v1`` YAML format (DESIGN.md §3).

Besides explicit ``nodes``, a compact ``generate`` list builds large uniform fabrics::

    generate:
      - type: dgx-h100
        count: 2048                      # nodes in this block
        fanout: {leaf: 16, spine: 8}     # 16 nodes per leaf group, 8 leaf groups per spine group
        name: "node{index:04d}"          # Python format; index counts from `start` (default 1)
        at: {core: c0}                   # fixed groups for levels that fanout does not cover

Generated group names are ``<level><k>`` with ``k`` counted per level across all generate
entries, so two entries never share a leaf by accident. A top-level ``busy`` mapping
(``{node name: [local GPU indices]}``) marks GPUs busy on any node, generated or explicit.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tsched._io import atomic_write_text, dump_yaml, load_yaml_text, read_text
from tsched.cluster import MAX_CLUSTER_GPUS, Cluster, LinkClass, Node, NodeType
from tsched.formats.check import Checker, join

__all__ = [
    "CLUSTER_VERSION",
    "cluster_from_dict",
    "cluster_to_dict",
    "read_cluster",
    "write_cluster",
    "parse_cluster_text",
]

CLUSTER_VERSION = "cluster/v1"
#: Allowed ``links.<k>.provenance`` values ("" = not stated).
PROVENANCES = ("", "measured", "imported", "advertised", "default")
_TOP_KEYS = (
    "tsched",
    "name",
    "links",
    "levels",
    "node_types",
    "nodes",
    "generate",
    "busy",
    "description",
)


def read_cluster(path: str | os.PathLike[str]) -> Cluster:
    """Read a ``cluster/v1`` YAML file.

    Raises
    ------
    InputError
        Missing file, YAML syntax error (with line and column), unknown key (with its path),
        or a semantic error (undefined node type, bad bandwidth, busy index out of range …).

    Examples
    --------
    >>> import tempfile, pathlib, tsched
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "cluster.yaml"
    >>> tsched.write_cluster(tsched.load_cluster("dgx-h100-4node"), path)
    >>> cluster = tsched.read_cluster(path)
    >>> cluster.name, cluster.n_nodes, cluster.levels
    ('dgx-h100-4node', 4, ('leaf', 'spine'))
    """
    text = read_text(path, "cluster")
    return parse_cluster_text(text, str(path))


def parse_cluster_text(text: str, source: str) -> Cluster:
    """Parse ``cluster/v1`` YAML text; ``source`` names it in error messages."""
    return cluster_from_dict(load_yaml_text(text, source), source)


def cluster_from_dict(data: Any, source: str = "cluster") -> Cluster:
    """Build a :class:`Cluster` from plain data (a parsed ``cluster/v1`` document)."""
    ck = Checker(source)
    doc = ck.mapping(
        data,
        "",
        required=("tsched", "name", "links", "node_types"),
        optional=_TOP_KEYS,
        example="tsched: cluster/v1",
    )
    if doc["tsched"] != CLUSTER_VERSION:
        raise ck.fail("tsched", f"expected {CLUSTER_VERSION!r}, got {doc['tsched']!r}")
    name = ck.string(doc["name"], "name")

    links_doc = ck.mapping(
        doc["links"],
        "links",
        free_keys=True,
        example="{nvlink: {bandwidth: 450, latency: 2}}",
    )
    links: dict[str, LinkClass] = {}
    for key, spec in links_doc.items():
        where = join("links", key)
        spec = ck.mapping(
            spec,
            where,
            required=("bandwidth",),
            optional=("latency", "provenance", "measured_at"),
            example="{bandwidth: 50, latency: 5}",
        )
        provenance = str(spec.get("provenance", ""))
        if provenance not in PROVENANCES:
            raise ck.fail(
                join(where, "provenance"),
                f"expected one of {', '.join(PROVENANCES[1:])}, got {provenance!r}",
            )
        links[key] = LinkClass(
            key,
            ck.number(spec["bandwidth"], join(where, "bandwidth"), positive=True),
            ck.number(spec.get("latency", 0.0), join(where, "latency"), minimum=0.0),
            provenance,
            str(spec.get("measured_at", "")),
        )

    levels_doc = ck.sequence(doc.get("levels", []), "levels", example="[leaf, spine]")
    levels = tuple(ck.string(v, join("levels", i)) for i, v in enumerate(levels_doc))

    types_doc = ck.mapping(
        doc["node_types"],
        "node_types",
        free_keys=True,
        example="{dgx-h100: {gpus: 8, intra: nvlink}}",
    )
    node_types = {key: _node_type(ck, key, spec) for key, spec in types_doc.items()}

    if "nodes" not in doc and "generate" not in doc:
        raise ck.fail("", "missing 'nodes' (a list of nodes) or 'generate' (a compact form)")
    nodes: list[Node] = []
    for i, spec in enumerate(ck.sequence(doc.get("nodes", []), "nodes")):
        where = join("nodes", i)
        spec = ck.mapping(
            spec,
            where,
            required=("name", "type"),
            optional=("at", "busy", "gpu_uuids"),
            example="{name: node001, type: dgx-h100, at: {leaf: l0}}",
        )
        at = _groups(ck, spec.get("at", {}), join(where, "at"))
        busy = _indices(ck, spec.get("busy", []), join(where, "busy"))
        uuids = [
            ck.string(u, join(where, f"gpu_uuids[{k}]"))
            for k, u in enumerate(ck.sequence(spec.get("gpu_uuids", []), join(where, "gpu_uuids")))
        ]
        nodes.append(
            Node(
                ck.string(spec["name"], join(where, "name")),
                ck.string(spec["type"], join(where, "type")),
                at,
                busy,
                tuple(uuids),
            )
        )
    counters: dict[str, int] = {}
    gpus = sum(node_types[n.type].gpus for n in nodes if n.type in node_types)
    for i, spec in enumerate(ck.sequence(doc.get("generate", []), "generate")):
        more = _generate(ck, spec, join("generate", i), levels, counters, node_types, gpus)
        gpus += sum(node_types[n.type].gpus for n in more if n.type in node_types)
        nodes.extend(more)

    if "busy" in doc:
        busy_doc = ck.mapping(doc["busy"], "busy", free_keys=True, example="{node0001: [0, 1]}")
        index = {n.name: k for k, n in enumerate(nodes)}
        for node_name, idx in busy_doc.items():
            where = join("busy", node_name)
            if node_name not in index:
                raise ck.fail(where, f"no node named {node_name!r}")
            k = index[node_name]
            old = nodes[k]
            nodes[k] = Node(old.name, old.type, old.at, old.busy + _indices(ck, idx, where))
    return Cluster(
        name,
        links,
        levels,
        node_types,
        tuple(nodes),
        source=source,
        description=str(doc.get("description", "")),
    )


def _node_type(ck: Checker, key: str, spec: Any) -> NodeType:
    where = join("node_types", key)
    spec = ck.mapping(
        spec,
        where,
        required=("gpus",),
        optional=("gpu", "intra", "intra_matrix", "nics", "nic_affinity"),
        example="{gpus: 8, gpu: {model: H100, memory_gb: 80}, intra: nvlink}",
    )
    gpus = ck.integer(spec["gpus"], join(where, "gpus"), minimum=1)
    gpu = ck.mapping(spec.get("gpu", {}), join(where, "gpu"), optional=("model", "memory_gb"))
    model = ck.string(gpu.get("model", "GPU"), join(where, "gpu.model"))
    memory = ck.number(gpu.get("memory_gb", 0.0), join(where, "gpu.memory_gb"), minimum=0.0)
    intra = ck.string(spec["intra"], join(where, "intra")) if "intra" in spec else None
    matrix = None
    if "intra_matrix" in spec:
        rows = ck.sequence(spec["intra_matrix"], join(where, "intra_matrix"))
        matrix = tuple(
            tuple(str(c) for c in ck.sequence(r, join(join(where, "intra_matrix"), a)))
            for a, r in enumerate(rows)
        )
    nics, nic_gbps = 0, 0.0
    if "nics" in spec:
        nic = ck.mapping(
            spec["nics"],
            join(where, "nics"),
            required=("count", "gbps"),
            example="{count: 8, gbps: 400}",
        )
        nics = ck.integer(nic["count"], join(where, "nics.count"), minimum=0)
        nic_gbps = ck.number(nic["gbps"], join(where, "nics.gbps"), minimum=0.0)
    affinity = None
    if "nic_affinity" in spec:
        rows = ck.sequence(spec["nic_affinity"], join(where, "nic_affinity"))
        affinity = tuple(
            tuple(
                ck.string(n, join(join(where, "nic_affinity"), f"{a}][{b}"))
                for b, n in enumerate(ck.sequence(r, join(join(where, "nic_affinity"), a)))
            )
            for a, r in enumerate(rows)
        )
    return NodeType(key, gpus, model, memory, intra, matrix, nics, nic_gbps, affinity)


def _groups(ck: Checker, value: Any, where: str) -> dict[str, str]:
    doc = ck.mapping(
        value,
        where,
        free_keys=True,
        example="{leaf: l0, spine: s0}",
    )
    return {level: ck.string(group, join(where, level)) for level, group in doc.items()}


def _indices(ck: Checker, value: Any, where: str) -> tuple[int, ...]:
    items = ck.sequence(value, where, example="[0, 1]")
    return tuple(ck.integer(v, join(where, i), minimum=0) for i, v in enumerate(items))


def _generate(
    ck: Checker,
    spec: Any,
    where: str,
    levels: tuple[str, ...],
    counters: dict[str, int],
    node_types: Mapping[str, NodeType],
    gpus_before: int,
) -> list[Node]:
    """The nodes of one ``generate`` entry, after ``gpus_before`` GPUs of earlier nodes (the
    cluster's GPU limit is checked before any node is built)."""
    spec = ck.mapping(
        spec,
        where,
        required=("type", "count"),
        optional=("fanout", "name", "start", "at"),
        example="{type: dgx-h100, count: 64, fanout: {leaf: 8, spine: 4}}",
    )
    type_name = ck.string(spec["type"], join(where, "type"))
    count = ck.integer(spec["count"], join(where, "count"), minimum=1)
    per_node = node_types[type_name].gpus if type_name in node_types else 1
    if gpus_before + count * per_node > MAX_CLUSTER_GPUS:
        raise ck.fail(
            join(where, "count"),
            f"{count:,} nodes of {per_node} GPUs would give the cluster more than "
            f"{MAX_CLUSTER_GPUS:,} GPUs",
        )
    fanout_doc = ck.mapping(
        spec.get("fanout", {}),
        join(where, "fanout"),
        optional=levels,
        example="{leaf: 16, spine: 8}",
    )
    fanout = [
        ck.integer(fanout_doc[lv], join(where, f"fanout.{lv}"), minimum=1)
        for lv in levels
        if lv in fanout_doc
    ]
    covered = levels[: len(fanout)]
    if set(fanout_doc) != set(covered):
        raise ck.fail(
            join(where, "fanout"),
            "must cover the nearest levels in order "
            f"(levels: {list(levels)}; e.g. fanout: {{{levels[0] if levels else 'leaf'}: 16}})",
        )
    fixed = _groups(ck, spec.get("at", {}), join(where, "at"))
    for lv in fixed:
        if lv in covered:
            raise ck.fail(join(where, f"at.{lv}"), f"level {lv!r} is already set by fanout")
    pattern = spec.get("name", "node{index:05d}")
    if not isinstance(pattern, str) or "{index" not in pattern:
        raise ck.fail(
            join(where, "name"),
            f"expected a format with {{index}}, e.g. 'node{{index:04d}}', got {pattern!r}",
        )
    start = ck.integer(spec.get("start", 1), join(where, "start"), minimum=0)
    base = {lv: counters.get(lv, 0) for lv in covered}
    nodes = []
    size = 1
    sizes = []
    for f in fanout:
        size *= f
        sizes.append(size)  # nodes per group at this level
    for k in range(count):
        try:
            node_name = pattern.format(index=start + k)
        except (KeyError, IndexError, ValueError) as exc:
            raise ck.fail(join(where, "name"), f"bad name format {pattern!r}: {exc}") from exc
        at = dict(fixed)
        for lv, per in zip(covered, sizes):
            at[lv] = f"{lv}{base[lv] + k // per}"
        nodes.append(Node(node_name, type_name, at, ()))
    for lv, per in zip(covered, sizes):
        counters[lv] = base[lv] + -(-count // per)
    return nodes


def cluster_to_dict(cluster: Cluster) -> dict[str, Any]:
    """Plain data for a cluster (explicit nodes); ``cluster_from_dict`` reads it back equal."""
    types: dict[str, Any] = {}
    for key, nt in cluster.node_types.items():
        spec: dict[str, Any] = {
            "gpus": nt.gpus,
            "gpu": {"model": nt.gpu_model, "memory_gb": _num(nt.memory_gb)},
        }
        if nt.intra is not None:
            spec["intra"] = nt.intra
        if nt.intra_matrix is not None:
            spec["intra_matrix"] = [list(r) for r in nt.intra_matrix]
        if nt.nics:
            spec["nics"] = {"count": nt.nics, "gbps": _num(nt.nic_gbps)}
        if nt.nic_affinity is not None:
            spec["nic_affinity"] = [list(r) for r in nt.nic_affinity]
        types[key] = spec
    nodes = []
    for n in cluster.nodes:
        entry: dict[str, Any] = {"name": n.name, "type": n.type}
        if n.at:
            entry["at"] = dict(n.at)
        if n.busy:
            entry["busy"] = list(n.busy)
        if n.gpu_uuids:
            entry["gpu_uuids"] = list(n.gpu_uuids)
        nodes.append(entry)
    return {
        "tsched": CLUSTER_VERSION,
        "name": cluster.name,
        **({"description": cluster.description} if cluster.description else {}),
        "links": {k: _link_dict(v) for k, v in cluster.links.items()},
        "levels": list(cluster.levels),
        "node_types": types,
        "nodes": nodes,
    }


def _link_dict(link: LinkClass) -> dict[str, Any]:
    out: dict[str, Any] = {"bandwidth": _num(link.bandwidth), "latency": _num(link.latency)}
    if link.provenance:
        out["provenance"] = link.provenance
    if link.measured_at:
        out["measured_at"] = link.measured_at
    return out


def write_cluster(cluster: Cluster, path: str | os.PathLike[str]) -> None:
    """Write ``cluster`` as ``cluster/v1`` YAML, atomically (old file intact on failure).

    Examples
    --------
    >>> import tempfile, pathlib, tsched
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "pcie.yaml"
    >>> tsched.write_cluster(tsched.load_cluster("pcie-8gpu"), path)
    >>> path.read_text().splitlines()[0]
    'tsched: cluster/v1'
    """
    atomic_write_text(Path(path), dump_yaml(cluster_to_dict(cluster)))


def _num(x: float) -> int | float:
    return int(x) if float(x).is_integer() else float(x)
