"""Slurm's ``topology.yaml`` (Slurm ≥ 25.05): several named topologies in one file, read and
written.

The file is a YAML list; each entry names a topology (``topology:``, first), may be the
``cluster_default``, and is exactly one of ``tree: {switches: [{switch, children | nodes}]}``,
``block: {block_sizes: [...], blocks: [{block, nodes}]}`` or ``flat: true`` (topology.yaml(5));
``children`` and ``nodes`` are Slurm hostlists. Newer Slurm releases add ``ring`` and ``torus3d``
topologies, which tsched does not model and refuses by name.

Reading picks one topology: the one named (``--topology NAME``), else the first marked
``cluster_default: true`` (what Slurm uses for partitions that name none), else the first. A
flat topology names no nodes, so it cannot be a cluster model. Writing gives the cluster's tree
as the ``cluster_default`` topology, and its accelerator domains (or blocks) as a ``block``
topology beside it when it has any.
"""

from __future__ import annotations

from typing import Any

from tsched._io import dump_yaml, load_yaml_text
from tsched.cluster import Cluster
from tsched.errors import InputError
from tsched.formats.check import Checker, join
from tsched.formats.slurm import BlockTopology, block_sizes_problem, blocks_from_cluster
from tsched.formats.topology import (
    SwitchTree,
    hostlist_compress,
    hostlist_expand,
    tree_from_cluster,
)

__all__ = [
    "TOPOLOGY_KINDS",
    "is_topology_yaml",
    "parse_topology_yaml",
    "topology_from_yaml",
    "topology_yaml",
]

#: The topology types topology.yaml(5) defines; tsched reads the first two.
TOPOLOGY_KINDS = ("tree", "block", "flat", "ring", "torus3d")


def is_topology_yaml(doc: Any) -> bool:
    """Whether parsed YAML looks like a topology.yaml: a list of mappings naming topologies."""
    return (isinstance(doc, list) and bool(doc)
            and all(isinstance(e, dict) and "topology" in e for e in doc))  # fmt: skip


def _hostlist(ck: Checker, value: Any, where: str) -> list[str]:
    """A hostlist given as text (``node[01-04]``) or as a list of them."""
    items = value if isinstance(value, list) else [value]
    names: list[str] = []
    for k, item in enumerate(items):
        if not isinstance(item, str | int) or isinstance(item, bool):
            raise ck.fail(where, f"expected a hostlist such as node[01-04], got {item!r}")
        try:
            names.extend(hostlist_expand(str(item)))
        except InputError as exc:
            raise ck.fail(join(where, k) if isinstance(value, list) else where, str(exc)) from None
    return names


def _tree(ck: Checker, doc: Any, where: str) -> SwitchTree:
    body = ck.mapping(doc, where, required=("switches",), example="{switches: [...]}")
    switches = body["switches"]
    if not isinstance(switches, list) or not switches:
        raise ck.fail(join(where, "switches"), "expected a list of {switch, children | nodes}")
    tree = SwitchTree()
    for k, entry in enumerate(switches):
        at = join(join(where, "switches"), k)
        item = ck.mapping(entry, at, required=("switch",), optional=("children", "nodes"),
                          example="{switch: s1, nodes: node[01-02]}")  # fmt: skip
        name = str(item["switch"])
        if len(name) > 64:
            raise ck.fail(join(at, "switch"), f"{name!r} is longer than 64 characters")
        if name in tree.switches and tree.switches[name] != ([], []):
            raise ck.fail(join(at, "switch"), f"switch {name!r} is defined twice")
        kids = _hostlist(ck, item["children"], join(at, "children")) if "children" in item else []
        nodes = _hostlist(ck, item["nodes"], join(at, "nodes")) if "nodes" in item else []
        if not kids and not nodes:
            raise ck.fail(at, f"switch {name!r} has neither children nor nodes")
        tree.switches[name] = (kids, nodes)
    missing = sorted({k for kids, _ in tree.switches.values() for k in kids} - set(tree.switches))
    if missing:
        raise ck.fail(join(where, "switches"), f"child switch {missing[0]!r} is not defined")
    tree.check(f"{ck.source}: {where}")
    return tree


def _block(ck: Checker, doc: Any, where: str) -> BlockTopology:
    body = ck.mapping(doc, where, required=("blocks",), optional=("block_sizes",),
                      example="{block_sizes: [4, 16], blocks: [...]}")  # fmt: skip
    topo = BlockTopology()
    blocks = body["blocks"]
    if not isinstance(blocks, list) or not blocks:
        raise ck.fail(join(where, "blocks"), "expected a list of {block, nodes}")
    seen: dict[str, str] = {}
    for k, entry in enumerate(blocks):
        at = join(join(where, "blocks"), k)
        item = ck.mapping(entry, at, required=("block", "nodes"),
                          example="{block: b1, nodes: node[01-04]}")  # fmt: skip
        name = str(item["block"])
        if name in topo.blocks:
            raise ck.fail(join(at, "block"), f"block {name!r} is defined twice")
        nodes = _hostlist(ck, item["nodes"], join(at, "nodes"))
        for node in nodes:
            if node in seen:
                raise ck.fail(join(at, "nodes"), f"node {node!r} is in block {seen[node]!r} too")
            seen[node] = name
        topo.blocks[name] = nodes
    sizes = body.get("block_sizes", [])
    if not isinstance(sizes, list) or not all(
        isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in sizes
    ):
        raise ck.fail(
            join(where, "block_sizes"), f"expected node counts like [4, 16], got {sizes!r}"
        )
    topo.sizes = list(sizes)
    problem = block_sizes_problem(topo.sizes, max(len(v) for v in topo.blocks.values()))
    if problem:
        raise ck.fail(join(where, "block_sizes"), f"{sizes}: {problem}")
    return topo


def parse_topology_yaml(
    text: str, source: str, topology: str | None = None
) -> tuple[str, str, SwitchTree | BlockTopology]:
    """``(name, kind, topology)`` of one topology of a topology.yaml: the one named, else the
    first ``cluster_default``, else the first; kind ``tree`` or ``block``.

    Examples
    --------
    >>> text = '''
    ... - topology: fabric
    ...   cluster_default: true
    ...   tree:
    ...     switches:
    ...       - {switch: root, children: "s[1-2]"}
    ...       - {switch: s1, nodes: "node[01-02]"}
    ...       - {switch: s2, nodes: "node[03-04]"}
    ... - topology: nvl
    ...   block: {block_sizes: [2], blocks: [{block: b1, nodes: "node[01-02]"},
    ...                                      {block: b2, nodes: "node[03-04]"}]}
    ... '''
    >>> name, kind, tree = parse_topology_yaml(text, "topology.yaml")
    >>> name, kind, tree.node_paths()["node03"]
    ('fabric', 'tree', ['s2', 'root'])
    >>> parse_topology_yaml(text, "topology.yaml", "nvl")[2].blocks["b2"]
    ['node03', 'node04']
    """
    return topology_from_yaml(load_yaml_text(text, source), source, topology)


def topology_from_yaml(
    doc: Any, source: str, topology: str | None = None
) -> tuple[str, str, SwitchTree | BlockTopology]:
    """:func:`parse_topology_yaml` of a topology.yaml already parsed (``doc``)."""
    ck = Checker(source)
    if not is_topology_yaml(doc):
        raise ck.fail("", "expected a topology.yaml: a list of {topology: NAME, tree | block | "
                          "flat: …}")  # fmt: skip
    names: list[str] = []
    for k, entry in enumerate(doc):
        ck.mapping(entry, f"[{k}]", required=("topology",),
                   optional=("cluster_default", *TOPOLOGY_KINDS))  # fmt: skip
        name = str(entry["topology"])
        if name in names:
            raise ck.fail(f"[{k}].topology", f"topology {name!r} is named twice")
        names.append(name)
        kinds = [kind for kind in TOPOLOGY_KINDS if kind in entry]
        if len(kinds) != 1:
            raise ck.fail(f"[{k}]", f"topology {name!r} must have exactly one of "
                          f"{', '.join(TOPOLOGY_KINDS)} (has {kinds or 'none'})")  # fmt: skip
    if topology is not None and topology not in names:
        raise ck.fail("", f"no topology named {topology!r} (topologies: {', '.join(names)})")
    if topology is not None:
        index = names.index(topology)
    else:
        index = next((k for k, e in enumerate(doc) if e.get("cluster_default") is True), 0)
    entry, name = doc[index], names[index]
    kind = next(kind for kind in TOPOLOGY_KINDS if kind in entry)
    where = f"[{index}].{kind}"
    if kind == "tree":
        return name, kind, _tree(ck, entry[kind], where)
    if kind == "block":
        return name, kind, _block(ck, entry[kind], where)
    others = [n for n, e in zip(names, doc) if "tree" in e or "block" in e]
    hint = f"; choose one with --topology ({', '.join(others)})" if others else ""
    if kind == "flat":
        raise ck.fail(where, f"topology {name!r} is flat: it names no nodes to model{hint}")
    raise ck.fail(where, f"topology {name!r} is a {kind}, which tsched does not model{hint}")


def topology_yaml(cluster: Cluster) -> str:
    """The cluster as topology.yaml: its switch tree as topology ``tree`` (the
    ``cluster_default``), and its blocks (accelerator domains, or a ``block`` level) as
    topology ``block`` when every node is in one (a mixed fleet's plain servers are in none,
    and Slurm's block plugin would leave them out)."""
    tree = tree_from_cluster(cluster)
    switches = []
    for name in tree.top_down():
        kids, nodes = tree.switches[name]
        entry: dict[str, Any] = {"switch": name}
        if kids:
            entry["children"] = hostlist_compress(kids)
        if nodes:
            entry["nodes"] = hostlist_compress(nodes)
        switches.append(entry)
    doc: list[dict[str, Any]] = [{"topology": "tree", "cluster_default": True,
                                  "tree": {"switches": switches}}]  # fmt: skip
    level = next((lv for lv in ("nvl", "block") if lv in cluster.levels), None)
    if level is not None and all(level in node.at for node in cluster.nodes):
        blocks = blocks_from_cluster(cluster)
        doc.append({
            "topology": "block",
            "cluster_default": False,
            "block": {"block_sizes": blocks.sizes,
                      "blocks": [{"block": b, "nodes": hostlist_compress(n)}
                                 for b, n in blocks.blocks.items()]},
        })  # fmt: skip
    return dump_yaml(doc)
