"""Slurm ``topology.conf``: the tree plugin (``SwitchName= Switches= Nodes=``) and the block
plugin (``BlockName= Nodes=``, ``BlockSizes=``), read and written.

Tree: every ``SwitchName`` line names a switch and either its child switches or its nodes (both
Slurm hostlists); ``LinkSpeed=`` is accepted and ignored. Comments start with ``#``; a comment
``# <id>=<name>`` just before a switch line (what Topograph writes) is kept as the switch's
display name. Block: each ``BlockName`` groups nodes into a block (an NVLink domain or rack);
``BlockSizes`` lists the node counts of aggregated blocks (the first is the base block size):
consecutive base blocks form the larger ones, which become the levels above ``block``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from tsched._io import read_text
from tsched.cluster import Cluster, LinkClass, Node, NodeType
from tsched.errors import InputError
from tsched.formats.topology import (
    DEFAULT_LEVEL_GBPS,
    SwitchTree,
    default_node_type,
    hostlist_compress,
    hostlist_expand,
    one_type_cluster,
)

__all__ = [
    "parse_tree",
    "write_tree",
    "BlockTopology",
    "parse_block",
    "write_block",
    "cluster_from_blocks",
    "blocks_from_cluster",
    "read_topology_conf",
    "parse_topology_conf",
    "block_sizes_problem",
]

_PAIR = re.compile(r"(\w+)=(\S+)")
#: The keys tsched reads, by their lower-case form: Slurm's parameter names are case
#: insensitive (topology.conf(5)), so ``switchname=`` is ``SwitchName=``.
_KEYS = {k.lower(): k for k in ("SwitchName", "Switches", "Nodes", "LinkSpeed", "BlockName",
                                "BlockSizes")}  # fmt: skip


def _records(text: str, source: str) -> list[tuple[int, dict[str, str], str]]:
    """(line number, key=value pairs, preceding comment) per non-comment line."""
    out = []
    comment = ""
    for k, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            comment = line[1:].strip()
            continue
        line = line.split("#", 1)[0].strip()
        pairs = {_KEYS.get(key.lower(), key): value for key, value in _PAIR.findall(line)}
        leftover = _PAIR.sub("", line).strip()
        if leftover or not pairs:
            raise InputError(f"{source}:{k}: expected KEY=VALUE pairs, got {raw.strip()!r}")
        out.append((k, pairs, comment))
        comment = ""
    return out


# ---------------------------------------------------------------------- tree
def parse_tree(text: str, source: str = "topology.conf") -> SwitchTree:
    """Read a ``topology/tree`` file into a :class:`SwitchTree` (checked: no undefined switch,
    no cycle, no node under two switches)."""
    tree = SwitchTree()
    for k, pairs, comment in _records(text, source):
        unknown = set(pairs) - {"SwitchName", "Switches", "Nodes", "LinkSpeed"}
        if unknown:
            raise InputError(
                f"{source}:{k}: unknown key {sorted(unknown)[0]!r} in a tree topology "
                "(expected SwitchName, Switches, Nodes, LinkSpeed)"
            )
        if "SwitchName" not in pairs:
            raise InputError(f"{source}:{k}: missing SwitchName= (is this a block topology?)")
        name = pairs["SwitchName"]
        if name in tree.switches:
            raise InputError(f"{source}:{k}: switch {name!r} defined twice")
        try:
            kids = hostlist_expand(pairs.get("Switches", ""))
            nodes = hostlist_expand(pairs.get("Nodes", ""))
        except InputError as exc:
            raise InputError(f"{source}:{k}: {exc}") from None
        if not kids and not nodes:
            raise InputError(f"{source}:{k}: switch {name!r} has neither Switches= nor Nodes=")
        tree.switches[name] = (kids, nodes)
        if comment and "=" in comment:
            key, _, label = comment.partition("=")
            if key.strip() == name:
                tree.comments[name] = label.strip()
    tree.check(source)
    return tree


def write_tree(tree: SwitchTree) -> str:
    """``topology/tree`` text: switches from the roots down, each with its display name as a
    ``# id=name`` comment when it has one."""
    lines: list[str] = []
    for name in tree.top_down():
        kids, nodes = tree.switches[name]
        if name in tree.comments:
            lines.append(f"# {name}={tree.comments[name]}")
        part = f"Switches={hostlist_compress(kids)}" if kids else ""
        if nodes:
            part = (part + " " if part else "") + f"Nodes={hostlist_compress(nodes)}"
        lines.append(f"SwitchName={name} {part}")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------- block
@dataclass
class BlockTopology:
    """Blocks in file order (name → nodes) and the aggregate sizes in nodes."""

    blocks: dict[str, list[str]] = field(default_factory=dict)
    sizes: list[int] = field(default_factory=list)


def parse_block(text: str, source: str = "topology.conf") -> BlockTopology:
    topo = BlockTopology()
    seen: dict[str, str] = {}
    for k, pairs, _ in _records(text, source):
        if "BlockSizes" in pairs:
            if set(pairs) != {"BlockSizes"}:
                raise InputError(f"{source}:{k}: BlockSizes= must stand on its own line")
            try:
                topo.sizes = [int(v) for v in pairs["BlockSizes"].split(",")]
            except ValueError:
                raise InputError(
                    f"{source}:{k}: BlockSizes={pairs['BlockSizes']!r}: expected node counts "
                    "like 18,36,72"
                ) from None
            continue
        unknown = set(pairs) - {"BlockName", "Nodes"}
        if unknown or "BlockName" not in pairs or "Nodes" not in pairs:
            raise InputError(
                f"{source}:{k}: expected BlockName=NAME Nodes=HOSTLIST"
                + (f" (unknown key {sorted(unknown)[0]!r})" if unknown else "")
            )
        name = pairs["BlockName"]
        if name in topo.blocks:
            raise InputError(f"{source}:{k}: block {name!r} defined twice")
        try:
            nodes = hostlist_expand(pairs["Nodes"])
        except InputError as exc:
            raise InputError(f"{source}:{k}: {exc}") from None
        for node in nodes:
            if node in seen:
                raise InputError(
                    f"{source}:{k}: node {node!r} is in block {seen[node]!r} and {name!r}"
                )
            seen[node] = name
        topo.blocks[name] = nodes
    if not topo.blocks:
        raise InputError(f"{source}: no BlockName= lines")
    base = max(len(v) for v in topo.blocks.values())
    problem = block_sizes_problem(topo.sizes, base)
    if problem:
        raise InputError(f"{source}: BlockSizes={','.join(map(str, topo.sizes))}: {problem}")
    return topo


def block_sizes_problem(sizes: list[int], largest: int) -> str:
    """What is wrong with a block plugin's sizes (node counts) for blocks of at most
    ``largest`` nodes, or "": each size must be a multiple of the first (the base block size),
    which must not exceed the largest block.

    >>> block_sizes_problem([4, 16], 4), block_sizes_problem([0], 4) != ""
    ('', True)
    """
    if sizes and min(sizes) < 1:
        return "node counts must be 1 or more"
    if sizes and (sizes[0] > largest or any(s % sizes[0] for s in sizes)):
        return (f"each size must be a multiple of the first, which must not exceed the largest "
                f"block ({largest} nodes)")  # fmt: skip
    return ""


def write_block(topo: BlockTopology) -> str:
    lines = [
        f"BlockName={name} Nodes={hostlist_compress(nodes)}" for name, nodes in topo.blocks.items()
    ]
    if topo.sizes:
        lines.append("BlockSizes=" + ",".join(str(s) for s in topo.sizes))
    return "\n".join(lines) + "\n"


def cluster_from_blocks(
    topo: BlockTopology,
    name: str,
    source: str,
    node_type: NodeType | None = None,
    intra_link: LinkClass | None = None,
) -> Cluster:
    """Levels ``block`` then ``block<size>`` for each larger BlockSizes entry (consecutive base
    blocks grouped, as Slurm aggregates them)."""
    if node_type is None or intra_link is None:
        node_type, intra_link = default_node_type()
    base = topo.sizes[0] if topo.sizes else max(len(v) for v in topo.blocks.values())
    bigger = list(topo.sizes[1:])
    levels = ["block"] + [f"block{s}" for s in bigger]
    if not bigger:
        levels.append("fabric")  # between blocks
    links = {intra_link.name: intra_link} if node_type.gpus > 1 else {}
    for k, level in enumerate(levels):
        gbps = DEFAULT_LEVEL_GBPS["nvl" if k == 0 else "network"]
        links[level] = LinkClass(level, gbps, 0.0, "default")
    nodes = []
    for index, (block, members) in enumerate(topo.blocks.items()):
        for node in members:
            at = {"block": block}
            for size in bigger:
                at[f"block{size}"] = f"agg{size}-{index * base // size}"
            if not bigger:
                at["fabric"] = "fabric"
            nodes.append(Node(node, node_type.name, at))
    return one_type_cluster(name, links, levels, node_type, nodes, source)


def blocks_from_cluster(cluster: Cluster) -> BlockTopology:
    """Blocks from the cluster's first level (``nvl`` or ``block`` when present)."""
    if not cluster.levels:
        raise InputError(f"cluster {cluster.name!r} has no levels to write as blocks")
    level = next((lv for lv in ("nvl", "block") if lv in cluster.levels), cluster.levels[0])
    topo = BlockTopology()
    for node in cluster.nodes:
        group = node.at.get(level)
        if group is None:
            raise InputError(f"cluster {cluster.name!r}: node {node.name!r} has no {level!r} group")
        topo.blocks.setdefault(group, []).append(node.name)
    base = min(len(v) for v in topo.blocks.values())
    sizes = {base}
    # aggregate sizes from the levels above: nodes per domain where that is base × 2^k
    for upper in cluster.levels[cluster.levels.index(level) + 1 :]:
        counts: dict[str, int] = {}
        for node in cluster.nodes:
            if upper in node.at:
                counts[node.at[upper]] = counts.get(node.at[upper], 0) + 1
        if counts:
            size = min(counts.values())
            ratio = size // base
            if size % base == 0 and ratio & (ratio - 1) == 0:
                sizes.add(size)
    topo.sizes = sorted(sizes)
    return topo


def read_topology_conf(path: str | os.PathLike[str]) -> tuple[str, SwitchTree | BlockTopology]:
    """Read a ``topology.conf`` of either plugin: ("tree", tree) or ("block", blocks)."""
    return parse_topology_conf(read_text(path, "Slurm topology.conf"), str(path))


def parse_topology_conf(text: str, source: str) -> tuple[str, SwitchTree | BlockTopology]:
    """A ``topology.conf``'s text, of either plugin: ("tree", tree) or ("block", blocks)."""
    if re.search(r"^\s*BlockName\s*=", text, re.MULTILINE | re.IGNORECASE):
        return "block", parse_block(text, source)
    return "tree", parse_tree(text, source)
