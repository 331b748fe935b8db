"""The switch tree every network-topology format shares, Slurm hostlists, and the conversions
between a tree and a tsched :class:`~tsched.cluster.Cluster`.

A :class:`SwitchTree` is what Slurm's ``topology/tree``, Topograph's models and its node labels
all describe: switches with child switches or nodes, plus an optional accelerator (NVLink)
domain per node. In a cluster, the tree's tiers become network levels, nearest first: the
accelerator domain (``nvl``) when there is one, then the leaf tier, then each tier above
(``leaf``, ``spine``, ``core``; ``tier4`` … beyond three). The GPUs inside a node are not in any
of these formats, so conversions take a node type (``default_node_type``: 8 GPUs on NVLink) and
mark the link figures they fill in as ``default`` provenance.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from tsched.cluster import Cluster, LinkClass, Node, NodeType
from tsched.errors import InputError

__all__ = [
    "hostlist_expand",
    "hostlist_compress",
    "SwitchTree",
    "tier_names",
    "cluster_from_tree",
    "tree_from_cluster",
    "default_node_type",
    "one_type_cluster",
    "DEFAULT_LEVEL_GBPS",
    "NVL_LEVEL",
    "NVL_SUB_LEVEL",
    "ACCELERATOR_LEVELS",
]

#: Default bandwidth (GB/s per GPU per direction) of each level when a format gives none: an
#: NVLink 5 domain for accelerator domains, one 400 Gb/s NIC per GPU for the network tiers.
DEFAULT_LEVEL_GBPS = {"nvl": 900.0, "network": 50.0}
#: The accelerator (NVLink) domain level, and its optional sub-domain (a rack of a multi-rack
#: NVLink domain, Topograph's ``accelerator.topograph.run/sub-domain``), which is nearer.
NVL_LEVEL, NVL_SUB_LEVEL = "nvl", "nvl-sub"
ACCELERATOR_LEVELS = (NVL_SUB_LEVEL, NVL_LEVEL)

_RANGE = re.compile(r"\[([^\[\]]*)\]")


# ---------------------------------------------------------------------- hostlists
def _split_top(expr: str) -> list[str]:
    """Split on commas that are not inside brackets."""
    out, depth, cur = [], 0, []
    for ch in expr:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise InputError(f"hostlist {expr!r}: ']' without '['")
        if ch == "," and depth == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth != 0:
        raise InputError(f"hostlist {expr!r}: '[' without ']'")
    out.append("".join(cur))
    return [p.strip() for p in out if p.strip()]


def _expand_one(part: str, whole: str) -> list[str]:
    m = _RANGE.search(part)
    if m is None:
        return [part]
    head, tail = part[: m.start()], part[m.end() :]
    values: list[str] = []
    for item in m.group(1).split(","):
        item = item.strip()
        if re.fullmatch(r"\d+", item):
            values.append(item)
        elif re.fullmatch(r"\d+-\d+", item):
            lo, hi = item.split("-")
            if int(hi) < int(lo):
                raise InputError(f"hostlist {whole!r}: range {item!r} runs backwards")
            width = len(lo) if lo.startswith("0") else 0
            values.extend(str(k).zfill(width) for k in range(int(lo), int(hi) + 1))
        else:
            raise InputError(
                f"hostlist {whole!r}: bad range {item!r} (expected N or N-M, e.g. node[001-016])"
            )
    out = []
    for v in values:
        out.extend(_expand_one(head + v + tail, whole))
    return out


def hostlist_expand(expr: str) -> list[str]:
    """Expand a Slurm hostlist (``node[001-003,7],gpu-a``) into names, in order.

    >>> hostlist_expand("n[01-03,7],login")
    ['n01', 'n02', 'n03', 'n7', 'login']
    """
    names: list[str] = []
    for part in _split_top(expr.strip()):
        names.extend(_expand_one(part, expr))
    return names


def hostlist_compress(names: Iterable[str]) -> str:
    """The shortest-form hostlist of ``names`` (runs of one prefix, width and suffix merged;
    order kept by first appearance of each group).

    >>> hostlist_compress(["n01", "n02", "n03", "n07", "login"])
    'n[01-03,07],login'
    """
    groups: dict[tuple[str, int, str], list[int]] = {}
    plain: dict[str, None] = {}
    order: list[tuple[str, int, str] | str] = []
    for name in names:
        m = re.fullmatch(r"(.*?)(\d+)(\D*)", name)
        if m is None:
            if name not in plain:
                plain[name] = None
                order.append(name)
            continue
        key = (m.group(1), len(m.group(2)), m.group(3))
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append(int(m.group(2)))
    parts = []
    for key in order:
        if isinstance(key, str):
            parts.append(key)
            continue
        prefix, width, suffix = key
        nums = sorted(set(groups[key]))
        if len(nums) == 1:
            parts.append(f"{prefix}{str(nums[0]).zfill(width)}{suffix}")
            continue
        runs, start, prev = [], nums[0], nums[0]
        for k in nums[1:] + [None]:
            if k is not None and k == prev + 1:
                prev = k
                continue
            a, b = str(start).zfill(width), str(prev).zfill(width)
            runs.append(a if start == prev else f"{a}-{b}")
            if k is not None:
                start = prev = k
        parts.append(f"{prefix}[{','.join(runs)}]{suffix}")
    return ",".join(parts)


# ---------------------------------------------------------------------- the switch tree
@dataclass
class SwitchTree:
    """Switches (name → child switches, nodes), an accelerator domain per node (optional), and
    a display name per switch (Topograph's model names behind Slurm's ids)."""

    switches: dict[str, tuple[list[str], list[str]]] = field(default_factory=dict)
    domains: dict[str, str] = field(default_factory=dict)
    #: per node, its accelerator sub-domain (within its domain); optional
    sub_domains: dict[str, str] = field(default_factory=dict)
    comments: dict[str, str] = field(default_factory=dict)

    def roots(self) -> list[str]:
        children = {c for kids, _ in self.switches.values() for c in kids}
        return [s for s in self.switches if s not in children]

    def top_down(self) -> list[str]:
        """Every switch, from the roots down, tier by tier (the order files list them in)."""
        order: list[str] = []
        frontier = self.roots()
        while frontier:
            order.extend(frontier)
            frontier = [kid for name in frontier for kid in self.switches[name][0]]
        return order

    def check(self, source: str) -> None:
        """Undefined child switches, cycles, a switch or node with two parents: InputError."""
        parent: dict[str, str] = {}
        node_parent: dict[str, str] = {}
        for name, (kids, nodes) in self.switches.items():
            for kid in kids:
                if kid not in self.switches:
                    raise InputError(f"{source}: switch {name!r} names undefined switch {kid!r}")
                if kid in parent:
                    raise InputError(
                        f"{source}: switch {kid!r} has two parents ({parent[kid]!r}, {name!r})"
                    )
                parent[kid] = name
            for node in nodes:
                if node in node_parent:
                    raise InputError(
                        f"{source}: node {node!r} is under two switches "
                        f"({node_parent[node]!r}, {name!r})"
                    )
                node_parent[node] = name
        for start in self.switches:
            seen = {start}
            cur = start
            while cur in parent:
                cur = parent[cur]
                if cur in seen:
                    raise InputError(f"{source}: switch {start!r} is in a cycle")
                seen.add(cur)
        if self.switches and not self.roots():
            raise InputError(f"{source}: every switch has a parent (a cycle)")

    def node_paths(self) -> dict[str, list[str]]:
        """Per node, its switches from the leaf up to the root."""
        parent = {kid: name for name, (kids, _) in self.switches.items() for kid in kids}
        out: dict[str, list[str]] = {}
        for name, (_, nodes) in self.switches.items():
            for node in nodes:
                path = [name]
                while path[-1] in parent:
                    path.append(parent[path[-1]])
                out[node] = path
        return out


def tier_names(tiers: int) -> list[str]:
    """Level names of a tree with ``tiers`` switch tiers, nearest first."""
    base = ["leaf", "spine", "core"]
    return base[:tiers] if tiers <= 3 else base + [f"tier{k}" for k in range(4, tiers + 1)]


def default_node_type(
    gpus: int = 8, model: str = "H100", intra_gbps: float = 450.0
) -> tuple[NodeType, LinkClass]:
    """The node type conversions use when a format says nothing about GPUs."""
    link = LinkClass("nvlink", intra_gbps, 2.0, "default")
    return NodeType("node", gpus, model, 0.0, intra="nvlink" if gpus > 1 else None), link


def cluster_from_tree(
    tree: SwitchTree,
    name: str,
    source: str,
    node_type: NodeType | None = None,
    intra_link: LinkClass | None = None,
    bandwidth: Mapping[str, float] | None = None,
    provenance: str = "default",
) -> Cluster:
    """A cluster from a switch tree: levels ``[nvl-sub?, nvl?] + leaf, spine, …``; one node
    type."""
    tree.check(source)
    paths = tree.node_paths()
    missing = [n for n in {**tree.sub_domains, **tree.domains} if n not in paths]
    nodes_order = list(paths) + missing
    if not nodes_order:
        raise InputError(f"{source}: no nodes")
    tiers = max((len(p) for p in paths.values()), default=0)
    names = tier_names(tiers)
    levels = (
        ([NVL_SUB_LEVEL] if tree.sub_domains else [])
        + ([NVL_LEVEL] if tree.domains else [])
        + names
    )
    if node_type is None or intra_link is None:
        node_type, intra_link = default_node_type()
    bandwidth = dict(bandwidth or {})
    links = {intra_link.name: intra_link} if node_type.gpus > 1 else {}
    for level in levels:
        if level in bandwidth:
            links[level] = LinkClass(level, float(bandwidth[level]), 0.0, "imported")
        else:
            gbps = DEFAULT_LEVEL_GBPS["nvl" if level in ACCELERATOR_LEVELS else "network"]
            links[level] = LinkClass(level, gbps, 0.0, provenance)
    nodes = []
    for node in nodes_order:
        at: dict[str, str] = {}
        path = paths.get(node, [])
        # a shallower branch is padded at the top: its root stands for the missing tiers
        path = path + [path[-1]] * (tiers - len(path)) if path else []
        for k, switch in enumerate(path):
            at[names[k]] = switch
        if node in tree.domains:
            at[NVL_LEVEL] = tree.domains[node]
        if node in tree.sub_domains:
            at[NVL_SUB_LEVEL] = tree.sub_domains[node]
        nodes.append(Node(node, node_type.name, at))
    return one_type_cluster(name, links, levels, node_type, nodes, source)


def one_type_cluster(
    name: str,
    links: Mapping[str, LinkClass],
    levels: Iterable[str],
    node_type: NodeType,
    nodes: Iterable[Node],
    source: str,
) -> Cluster:
    """A cluster whose nodes all have ``node_type`` (what imported topologies give)."""
    return Cluster(
        name=name,
        links=dict(links),
        levels=tuple(levels),
        node_types={node_type.name: node_type},
        nodes=tuple(nodes),
        source=source,
    )


def tree_from_cluster(cluster: Cluster) -> SwitchTree:
    """The switch tree of a cluster's network levels (an ``nvl`` level becomes accelerator
    domains, ``nvl-sub`` their sub-domains). Group names are kept, prefixed with the level where
    two levels share a name."""
    levels = [lv for lv in cluster.levels if lv not in ACCELERATOR_LEVELS]
    if not levels:
        raise InputError(f"cluster {cluster.name!r} has no network levels to write as switches")
    # make names unique across levels up front so a later clash does not rename earlier ones
    all_groups: dict[str, set[str]] = {}
    for node in cluster.nodes:
        for lv in levels:
            if lv in node.at:
                all_groups.setdefault(node.at[lv], set()).add(lv)
    tree = SwitchTree()
    for node in cluster.nodes:
        chain = []
        for lv in levels:
            group = node.at.get(lv)
            if group is None:
                raise InputError(
                    f"cluster {cluster.name!r}: node {node.name!r} has no {lv!r} group; a "
                    "switch tree needs every node under every level"
                )
            chain.append(group if len(all_groups[group]) == 1 else f"{lv}-{group}")
        for k, switch in enumerate(chain):
            kids, nodes = tree.switches.setdefault(switch, ([], []))
            if k == 0:
                nodes.append(node.name)
            else:
                child = chain[k - 1]
                if child not in kids:
                    kids.append(child)
        if NVL_LEVEL in cluster.levels and NVL_LEVEL in node.at:
            tree.domains[node.name] = node.at[NVL_LEVEL]
        if NVL_SUB_LEVEL in cluster.levels and NVL_SUB_LEVEL in node.at:
            tree.sub_domains[node.name] = node.at[NVL_SUB_LEVEL]
    tree.check(f"cluster {cluster.name!r}")
    return tree
