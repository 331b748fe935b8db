"""Cluster model: nodes, GPUs, link classes, network hierarchy and the GPU distance matrix.

A cluster is a list of nodes, each of a *node type* (GPU count, model, memory and the link class
that joins its GPUs), placed in a hierarchy of network *levels* (nearest first, e.g.
``[leaf, spine]`` or ``[nvl, leaf, spine, core]``). Two GPUs on one node are joined by the node
type's intra-node class; two GPUs on different nodes by the nearest level whose group both nodes
share; nodes that share no level are joined by the last level.

Distances are in **seconds per GB** (``1 / bandwidth`` of the joining link class, bandwidth in GB/s
per GPU per direction), 0 between a GPU and itself. GPUs are numbered globally in node order:
node 0's GPUs first, then node 1's, and so on.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

from tsched.errors import InputError

__all__ = ["LinkClass", "NodeType", "Node", "Cluster"]

#: Link index used for "the same GPU" in link-index matrices.
SELF_LINK = -1
#: Largest node count for which N × N node tables are built; larger clusters compute meet
#: levels from the groups on demand (16,384 nodes would need 2 GiB for the float table).
NODE_TABLE_LIMIT = 4096
#: Range of a link's bandwidth, GB/s per direction: from a slow management network to far
#: beyond any fabric, so that seconds per GB times traffic never leaves float range.
MIN_BANDWIDTH, MAX_BANDWIDTH = 1e-6, 1e9
#: Most GPUs one node type may have (an NVLink domain of 576 GPUs modelled as one node fits).
MAX_NODE_GPUS = 1024
#: Most GPUs a cluster may have: 16 times the largest fabric tsched is measured on (131,072),
#: so that a mistyped count is an error, not an allocation of terabytes.
MAX_CLUSTER_GPUS = 2**21


@dataclass(frozen=True, slots=True)
class LinkClass:
    """A class of link between GPUs.

    Parameters
    ----------
    name : str
        Key of the class (``nvlink``, ``PIX``, ``leaf`` …).
    bandwidth : float
        GB/s per GPU per direction (> 0).
    latency : float
        One-way latency in µs (≥ 0). Not part of the placement objective; used by time models.
    provenance : str
        Where the bandwidth comes from: ``measured``, ``imported``, ``advertised`` (a vendor's
        figure) or ``default`` (a generic figure tsched filled in); empty when not stated.
    measured_at : str
        ISO 8601 UTC time of the measurement (``measured`` only), so stale figures can be
        refused.
    """

    name: str
    bandwidth: float
    latency: float = 0.0
    provenance: str = ""
    measured_at: str = ""

    @property
    def seconds_per_gb(self) -> float:
        """Serialisation time of one GB over this link, in seconds."""
        return 1.0 / self.bandwidth


@dataclass(frozen=True, slots=True)
class NodeType:
    """A kind of node: how many GPUs, which model, and how its GPUs are joined.

    Exactly one of ``intra`` (one link class for every GPU pair) and ``intra_matrix`` (a g×g table
    of link-class names, diagonal ignored; what ``nvidia-smi topo -m`` gives) is set when
    ``gpus > 1``.
    """

    name: str
    gpus: int
    gpu_model: str = "GPU"
    memory_gb: float = 0.0
    intra: str | None = None
    intra_matrix: tuple[tuple[str, ...], ...] | None = None
    nics: int = 0
    nic_gbps: float = 0.0
    #: Per GPU, the names of its nearest NICs (e.g. from ``nvidia-smi topo -m``); optional.
    nic_affinity: tuple[tuple[str, ...], ...] | None = None

    def link_between(self, a: int, b: int) -> str | None:
        """Name of the link class joining local GPUs ``a`` and ``b`` (``None`` when ``a == b``)."""
        if a == b:
            return None
        if self.intra_matrix is not None:
            return self.intra_matrix[a][b]
        return self.intra


@dataclass(frozen=True, slots=True)
class Node:
    """A machine: its name, node type, group per network level, busy local GPU indices, and
    (optionally, from NVML) each GPU's UUID in local index order."""

    name: str
    type: str
    at: Mapping[str, str] = field(default_factory=dict)
    busy: tuple[int, ...] = ()
    gpu_uuids: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "at", MappingProxyType(dict(self.at)))
        object.__setattr__(self, "busy", tuple(sorted({int(i) for i in self.busy})))
        object.__setattr__(self, "gpu_uuids", tuple(str(u) for u in self.gpu_uuids))


def _readonly(array: np.ndarray) -> np.ndarray:
    array = np.ascontiguousarray(array)
    array.setflags(write=False)
    return array


@dataclass(frozen=True, slots=True)
class Cluster:
    """A GPU cluster with its link classes and network hierarchy.

    Build one with :func:`tsched.load_cluster` (file or preset) or directly; the constructor
    validates cross-references (node types, link classes, busy indices, duplicate names) and raises
    :class:`~tsched.errors.InputError` naming the field, e.g. ``nodes[3].type``.

    Examples
    --------
    >>> from tsched.cluster import Cluster, LinkClass, Node, NodeType
    >>> c = Cluster(
    ...     name="two-nodes",
    ...     links={"nvlink": LinkClass("nvlink", 450), "leaf": LinkClass("leaf", 50)},
    ...     levels=("leaf",),
    ...     node_types={"dgx": NodeType("dgx", 8, "H100", 80, intra="nvlink")},
    ...     nodes=(Node("a", "dgx", {"leaf": "l0"}), Node("b", "dgx", {"leaf": "l0"}, busy=(0,))),
    ... )
    >>> c.n_gpus, int(c.free_mask().sum())
    (16, 15)
    >>> round(float(c.distance_matrix()[0, 8]), 3)
    0.02
    """

    name: str
    links: Mapping[str, LinkClass]
    levels: tuple[str, ...]
    node_types: Mapping[str, NodeType]
    nodes: tuple[Node, ...]
    source: str = field(default="", compare=False, repr=False)
    description: str = field(default="", compare=False, repr=False)

    # Derived arrays (read-only), set in __post_init__.
    link_names: tuple[str, ...] = field(init=False, repr=False, compare=False)
    link_seconds_per_gb: np.ndarray = field(init=False, repr=False, compare=False)
    node_type_index: np.ndarray = field(init=False, repr=False, compare=False)
    gpus_per_node: np.ndarray = field(init=False, repr=False, compare=False)
    node_offset: np.ndarray = field(init=False, repr=False, compare=False)
    gpu_node: np.ndarray = field(init=False, repr=False, compare=False)
    gpu_local: np.ndarray = field(init=False, repr=False, compare=False)
    node_group: np.ndarray = field(init=False, repr=False, compare=False)
    level_link: np.ndarray = field(init=False, repr=False, compare=False)
    type_intra_link: np.ndarray = field(init=False, repr=False, compare=False)
    busy_mask: np.ndarray = field(init=False, repr=False, compare=False)
    _node_index: Mapping[str, int] = field(init=False, repr=False, compare=False)
    _cache: dict[str, Any] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "links", MappingProxyType(dict(self.links)))
        set_(self, "levels", tuple(self.levels))
        set_(self, "node_types", MappingProxyType(dict(self.node_types)))
        set_(self, "nodes", tuple(self.nodes))
        set_(self, "_cache", {})
        self._validate()

        link_names = tuple(self.links)
        link_index = {name: i for i, name in enumerate(link_names)}
        set_(self, "link_names", link_names)
        set_(
            self,
            "link_seconds_per_gb",
            _readonly(np.array([self.links[k].seconds_per_gb for k in link_names], dtype=float)),
        )

        type_names = tuple(self.node_types)
        type_index = {name: i for i, name in enumerate(type_names)}
        node_type_index = np.fromiter(
            (type_index[n.type] for n in self.nodes), dtype=np.int32, count=len(self.nodes)
        )
        type_gpus = np.array([self.node_types[t].gpus for t in type_names], dtype=np.int64)
        gpus_per_node = type_gpus[node_type_index] if len(self.nodes) else np.zeros(0, np.int64)
        node_offset = np.zeros(len(self.nodes) + 1, dtype=np.int64)
        np.cumsum(gpus_per_node, out=node_offset[1:])
        n_gpus = int(node_offset[-1])
        gpu_node = np.repeat(np.arange(len(self.nodes), dtype=np.int32), gpus_per_node)
        gpu_local = (np.arange(n_gpus, dtype=np.int64) - node_offset[gpu_node]).astype(np.int32)

        # Group id per node and level; a node without a group at a level gets a group of its own.
        node_group = np.empty((len(self.nodes), len(self.levels)), dtype=np.int32)
        for col, level in enumerate(self.levels):
            ids: dict[str, int] = {}
            for row, node in enumerate(self.nodes):
                group = node.at.get(level)
                if group is None:
                    node_group[row, col] = len(ids)
                    ids[f"\0{row}"] = len(ids)
                else:
                    node_group[row, col] = ids.setdefault(group, len(ids))
        level_link = np.array([link_index[level] for level in self.levels], dtype=np.int8)

        g_max = int(type_gpus.max()) if len(type_gpus) else 0
        type_intra = np.full(
            (len(type_names), max(g_max, 1), max(g_max, 1)), SELF_LINK, dtype=np.int8
        )
        for t, name in enumerate(type_names):
            nt = self.node_types[name]
            if nt.intra_matrix is not None:
                table = np.array(
                    [[link_index.get(c, SELF_LINK) for c in row] for row in nt.intra_matrix],
                    dtype=np.int8,
                )
                type_intra[t, : nt.gpus, : nt.gpus] = table
            elif nt.intra is not None:
                type_intra[t, : nt.gpus, : nt.gpus] = link_index[nt.intra]
            np.fill_diagonal(type_intra[t], SELF_LINK)

        busy = np.zeros(n_gpus, dtype=bool)
        for i, node in enumerate(self.nodes):
            if node.busy:
                busy[node_offset[i] + np.asarray(node.busy, dtype=np.int64)] = True

        set_(self, "node_type_index", _readonly(node_type_index))
        set_(self, "gpus_per_node", _readonly(gpus_per_node))
        set_(self, "node_offset", _readonly(node_offset))
        set_(self, "gpu_node", _readonly(gpu_node))
        set_(self, "gpu_local", _readonly(gpu_local))
        set_(self, "node_group", _readonly(node_group))
        set_(self, "level_link", _readonly(level_link))
        set_(self, "type_intra_link", _readonly(type_intra))
        set_(self, "busy_mask", _readonly(busy))
        set_(self, "_node_index", MappingProxyType({n.name: i for i, n in enumerate(self.nodes)}))

    # ------------------------------------------------------------------ validation
    def _validate(self) -> None:
        src = self.source or self.name or "cluster"

        def fail(where: str, message: str) -> InputError:
            return InputError(f"{src}: {where}: {message}")

        if len(self.links) > 120:
            raise fail("links", f"at most 120 link classes are supported, got {len(self.links)}")
        lone_gpu = len(self.nodes) <= 1 and all(nt.gpus == 1 for nt in self.node_types.values())
        if not self.links and not lone_gpu:  # one GPU alone has no pair to join
            raise fail(
                "links",
                "at least one link class is required "
                "(e.g. links: {nvlink: {bandwidth: 450, latency: 2}})",
            )
        for key, link in self.links.items():
            if not MIN_BANDWIDTH <= link.bandwidth <= MAX_BANDWIDTH:
                raise fail(
                    f"links.{key}.bandwidth",
                    f"must be a positive number of GB/s, {MIN_BANDWIDTH:g}..{MAX_BANDWIDTH:g}, "
                    f"got {link.bandwidth!r}",
                )
            if not (link.latency >= 0):
                raise fail(f"links.{key}.latency", f"must be >= 0 µs, got {link.latency!r}")
        if len(set(self.levels)) != len(self.levels):
            raise fail("levels", f"duplicate level names in {list(self.levels)}")
        for i, level in enumerate(self.levels):
            if level not in self.links:
                raise fail(
                    f"levels[{i}]",
                    f"level {level!r} has no link class "
                    f"(add links.{level}: {{bandwidth: …}}; defined: {', '.join(self.links)})",
                )
        if not self.node_types:
            raise fail("node_types", "at least one node type is required")
        for key, nt in self.node_types.items():
            where = f"node_types.{key}"
            if not 1 <= nt.gpus <= MAX_NODE_GPUS:
                raise fail(f"{where}.gpus", f"must be 1..{MAX_NODE_GPUS}, got {nt.gpus!r}")
            if nt.intra is not None and nt.intra_matrix is not None:
                raise fail(where, "give either 'intra' or 'intra_matrix', not both")
            if nt.gpus > 1 and nt.intra is None and nt.intra_matrix is None:
                raise fail(
                    where,
                    f"{nt.gpus} GPUs need 'intra' (one link class for every pair) "
                    "or 'intra_matrix'",
                )
            if nt.intra is not None and nt.intra not in self.links:
                raise fail(
                    f"{where}.intra",
                    f"unknown link class {nt.intra!r} (defined: {', '.join(self.links)})",
                )
            if nt.nic_affinity is not None and len(nt.nic_affinity) != nt.gpus:
                raise fail(
                    f"{where}.nic_affinity",
                    f"needs one list of NIC names per GPU ({nt.gpus}), got {len(nt.nic_affinity)}",
                )
            if nt.intra_matrix is not None:
                rows = nt.intra_matrix
                if len(rows) != nt.gpus or any(len(r) != nt.gpus for r in rows):
                    shape = f"{len(rows)}x{max((len(r) for r in rows), default=0)}"
                    raise fail(
                        f"{where}.intra_matrix",
                        f"must be {nt.gpus}x{nt.gpus} (gpus: {nt.gpus}), got {shape}",
                    )
                for a, row in enumerate(rows):
                    for b, name in enumerate(row):
                        if a == b:
                            continue
                        if name not in self.links:
                            raise fail(
                                f"{where}.intra_matrix[{a}][{b}]",
                                f"unknown link class {name!r} (defined: {', '.join(self.links)})",
                            )
                        if rows[b][a] != name:
                            raise fail(
                                f"{where}.intra_matrix[{a}][{b}]",
                                f"matrix must be symmetric: {name!r} vs [{b}][{a}] {rows[b][a]!r}",
                            )
        seen: dict[str, int] = {}
        levels = set(self.levels)
        total = 0
        for i, node in enumerate(self.nodes):
            where = f"nodes[{i}]"
            if node.name in seen:
                raise fail(
                    f"{where}.name",
                    f"duplicate node name {node.name!r} (also nodes[{seen[node.name]}])",
                )
            seen[node.name] = i
            nt = self.node_types.get(node.type)
            if nt is None:
                raise fail(
                    f"{where}.type",
                    f"undefined node type {node.type!r} (defined: {', '.join(self.node_types)})",
                )
            total += nt.gpus
            if total > MAX_CLUSTER_GPUS:
                raise fail("nodes", f"more than {MAX_CLUSTER_GPUS:,} GPUs (at {where})")
            for level in node.at:
                if level not in levels:
                    raise fail(
                        f"{where}.at.{level}",
                        f"unknown level {level!r} (levels: {list(self.levels)})",
                    )
            for b in node.busy:
                if not 0 <= b < nt.gpus:
                    raise fail(
                        f"{where}.busy",
                        f"GPU index {b} out of range for node type "
                        f"{node.type!r} with {nt.gpus} GPUs (valid: 0..{nt.gpus - 1})",
                    )
        uuids: dict[str, str] = {}
        for i, node in enumerate(self.nodes):
            if not node.gpu_uuids:
                continue
            gpus = self.node_types[node.type].gpus
            if len(node.gpu_uuids) != gpus:
                raise fail(
                    f"nodes[{i}].gpu_uuids",
                    f"{len(node.gpu_uuids)} UUIDs for node type {node.type!r} with {gpus} GPUs "
                    "(one per GPU, in local index order)",
                )
            for uuid in node.gpu_uuids:
                if uuid in uuids:
                    raise fail(
                        f"nodes[{i}].gpu_uuids",
                        f"UUID {uuid!r} is also on node {uuids[uuid]!r} (a UUID names one GPU)",
                    )
                uuids[uuid] = node.name
        if len(self.nodes) > 1 and not self.levels:
            raise fail(
                "levels",
                f"{len(self.nodes)} nodes need at least one network level (e.g. levels: [leaf])",
            )

    # ------------------------------------------------------------------ sizes and lookups
    @property
    def n_nodes(self) -> int:
        return len(self.nodes)

    @property
    def n_gpus(self) -> int:
        return int(self.node_offset[-1])

    def node_index(self, name: str) -> int:
        """Index of the node called ``name``; :class:`InputError` if there is none."""
        try:
            return self._node_index[name]
        except KeyError:
            raise InputError(f"cluster {self.name!r} has no node named {name!r}") from None

    def gpu_id(self, node: str | int, local: int) -> int:
        """Global GPU index of local GPU ``local`` on ``node`` (name or index)."""
        i = self.node_index(node) if isinstance(node, str) else int(node)
        count = int(self.gpus_per_node[i])
        if not 0 <= local < count:
            raise InputError(f"node {self.nodes[i].name!r} has GPUs 0..{count - 1}, not {local}")
        return int(self.node_offset[i]) + int(local)

    def node_type_of(self, node: int) -> NodeType:
        return self.node_types[self.nodes[node].type]

    def gpu_models(self) -> np.ndarray:
        """GPU model name per global GPU (object array)."""
        names = np.array([self.node_types[t].gpu_model for t in self.node_types], dtype=object)
        return names[self.node_type_index][self.gpu_node]

    def gpu_memory_gb(self) -> np.ndarray:
        """GPU memory in GB per global GPU."""
        mem = np.array([self.node_types[t].memory_gb for t in self.node_types], dtype=float)
        return mem[self.node_type_index][self.gpu_node]

    def free_mask(self) -> np.ndarray:
        """Boolean mask over global GPUs: True where the GPU is not busy."""
        return ~self.busy_mask

    def with_busy(self, busy: Mapping[str, Iterable[int]]) -> Cluster:
        """A copy of this cluster with more GPUs marked busy (``{node name: [local indices]}``)."""
        extra = {name: set(map(int, idx)) for name, idx in busy.items()}
        for name in extra:
            self.node_index(name)
        nodes = tuple(
            Node(n.name, n.type, n.at, tuple(set(n.busy) | extra.get(n.name, set())), n.gpu_uuids)
            for n in self.nodes
        )
        return Cluster(
            self.name,
            self.links,
            self.levels,
            self.node_types,
            nodes,
            self.source,
            self.description,
        )

    # ------------------------------------------------------------------ hierarchy
    def meet_between(self, a: np.ndarray, b: np.ndarray, *, pairwise: bool = False) -> np.ndarray:
        """Meet levels between nodes, computed from the groups (no N × N table).

        ``(len(a), len(b))`` int8 table, or with ``pairwise`` the elementwise meet of ``a[i]``
        and ``b[i]``: 0 on the same node, ``k`` (1-based) where they first share
        ``levels[k-1]``, ``len(levels)`` where they share none. O(len·levels).
        """
        a = np.asarray(a, dtype=np.int64)
        b = np.asarray(b, dtype=np.int64)
        if not pairwise:
            a, b = a[:, None], b[None, :]
        shape = np.broadcast_shapes(a.shape, b.shape)
        meet = np.full(shape, max(len(self.levels), 1), dtype=np.int8)
        for k in range(len(self.levels) - 1, -1, -1):
            col = self.node_group[:, k]
            meet[col[a] == col[b]] = k + 1
        meet[a == b] = 0
        return meet

    def node_meet_level(self) -> np.ndarray:
        """(N, N) int8: 0 on the same node, ``k`` (1-based) where nodes first share ``levels[k-1]``.

        Nodes that share no level meet at the last level, ``len(levels)``.
        """
        cached = self._cache.get("node_meet")
        if cached is None:
            nodes = np.arange(self.n_nodes)
            cached = self._cache["node_meet"] = _readonly(self.meet_between(nodes, nodes))
        return cached

    def node_link_index(self) -> np.ndarray:
        """(N, N) int8 link index between nodes (diagonal: :data:`SELF_LINK`)."""
        cached = self._cache.get("node_link")
        if cached is None:
            if self.levels:
                table = np.concatenate([[SELF_LINK], self.level_link]).astype(np.int8)
                cached = table[self.node_meet_level()]
            else:
                cached = np.full((self.n_nodes, self.n_nodes), SELF_LINK, dtype=np.int8)
            cached = self._cache["node_link"] = _readonly(cached)
        return cached

    def level_domains(self, level: int | str) -> np.ndarray:
        """Domain id per *node* at a level (name or 0-based index); ``"node"`` gives node ids."""
        if level == "node":
            return np.arange(self.n_nodes, dtype=np.int32)
        k = self.levels.index(level) if isinstance(level, str) else int(level)
        return self.node_group[:, k]

    # ------------------------------------------------------------------ distances
    def pair_link_index(self, gpu_a: np.ndarray, gpu_b: np.ndarray) -> np.ndarray:
        """Link index joining GPU pairs elementwise (:data:`SELF_LINK` where ``a == b``).

        Vectorised over any broadcastable arrays of global GPU indices; O(len) time.
        """
        a = np.asarray(gpu_a, dtype=np.int64)
        b = np.asarray(gpu_b, dtype=np.int64)
        a, b = np.broadcast_arrays(a, b)
        na = self.gpu_node[a]
        nb = self.gpu_node[b]
        if self.n_nodes <= NODE_TABLE_LIMIT or "node_link" in self._cache:
            out = self.node_link_index()[na, nb]
        else:  # no N × N table at this size: meet levels from the groups
            table = np.concatenate([[SELF_LINK], self.level_link]).astype(np.int8)
            out = table[self.meet_between(na, nb, pairwise=True)] if self.levels else (
                np.full(na.shape, SELF_LINK, dtype=np.int8))  # fmt: skip
        same = na == nb
        if same.any():
            out = np.array(out, copy=True)
            out[same] = self.type_intra_link[
                self.node_type_index[na[same]], self.gpu_local[a[same]], self.gpu_local[b[same]]
            ]
        return out

    def pair_seconds_per_gb(self, gpu_a: np.ndarray, gpu_b: np.ndarray) -> np.ndarray:
        """Distance (seconds per GB) between GPU pairs elementwise; 0 where ``a == b``."""
        cost = np.concatenate([[0.0], self.link_seconds_per_gb])
        return cost[self.pair_link_index(gpu_a, gpu_b).astype(np.int64) + 1]

    def _expand(
        self,
        node_table: np.ndarray,
        type_table: np.ndarray,
        gpus: Sequence[int] | np.ndarray | None,
    ) -> np.ndarray:
        """Expand an (N, N) node table and (T, g, g) intra tables to a (g, g) GPU table.

        One column gather and one row gather (contiguous row copies), then each node's diagonal
        block is overwritten with its node type's intra table.
        """
        gpus = np.arange(self.n_gpus) if gpus is None else np.asarray(gpus, dtype=np.int64)
        gn = self.gpu_node[gpus]
        out = np.take(np.take(node_table, gn, axis=1), gn, axis=0)
        order = np.argsort(gn, kind="stable")
        bounds = np.flatnonzero(np.diff(gn[order])) + 1
        local = self.gpu_local[gpus]
        for block in np.split(order, bounds):
            if len(block) == 0:
                continue
            loc = local[block]
            intra = type_table[self.node_type_index[gn[block[0]]]]
            if (
                len(block) > 1
                and block[-1] - block[0] == len(block) - 1
                and np.all(np.diff(block) == 1)
            ):
                out[block[0] : block[-1] + 1, block[0] : block[-1] + 1] = intra[np.ix_(loc, loc)]
            else:
                out[np.ix_(block, block)] = intra[np.ix_(loc, loc)]
        return out

    def link_index_matrix(self, gpus: Sequence[int] | np.ndarray | None = None) -> np.ndarray:
        """(g, g) int8 link index between the given GPUs (all GPUs by default).

        Index into :attr:`link_names`; :data:`SELF_LINK` on the diagonal.
        """
        return self._expand(self.node_link_index(), self.type_intra_link, gpus)

    def level_costs(self) -> np.ndarray:
        """Seconds per GB at each network level, nearest first."""
        return self.link_seconds_per_gb[self.level_link.astype(np.int64)]

    def type_cost_table(self, dtype: type = np.float64) -> np.ndarray:
        """Cached (types, g, g) seconds per GB inside each node type (0 on the diagonal)."""
        key = f"type_cost_{np.dtype(dtype).name}"
        table = self._cache.get(key)
        if table is None:
            cost = np.concatenate([[0.0], self.link_seconds_per_gb]).astype(dtype)
            table = self._cache[key] = _readonly(cost[self.type_intra_link.astype(np.int64) + 1])
        return table

    def node_cost_between(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """(len(a), len(b)) seconds per GB between nodes (0 for a node with itself), computed
        from the groups: no N × N table, O(len(a)·len(b)·levels)."""
        if not self.levels:
            return np.zeros((len(a), len(b)))
        cost = np.concatenate([[0.0], self.level_costs()])
        return cost[self.meet_between(a, b)]

    def cost_tables(self, dtype: type = np.float64) -> tuple[np.ndarray, np.ndarray]:
        """Cached seconds-per-GB tables: (N, N) between nodes (0 on the diagonal) and
        (types, g, g) inside each node type (0 on the diagonal)."""
        key = f"cost_tables_{np.dtype(dtype).name}"
        tables = self._cache.get(key)
        if tables is None:
            cost = np.concatenate([[0.0], self.link_seconds_per_gb]).astype(dtype)
            tables = self._cache[key] = (
                _readonly(cost[self.node_link_index().astype(np.int64) + 1]),
                self.type_cost_table(dtype),
            )
        return tables

    def distance_matrix(
        self, gpus: Sequence[int] | np.ndarray | None = None, dtype: type = np.float64
    ) -> np.ndarray:
        """(g, g) distance in seconds per GB between the given GPUs (all by default).

        Notes
        -----
        O(g²) memory: 16,384 GPUs take 2 GiB in float64 (1 GiB with ``dtype=np.float32``) and
        about a second to build. Solvers at that scale use :meth:`pair_seconds_per_gb` and the
        node-level tables instead.
        """
        node_cost, type_cost = self.cost_tables(dtype)
        return self._expand(node_cost, type_cost, gpus)

    def meet_level_matrix(self, gpus: Sequence[int] | np.ndarray | None = None) -> np.ndarray:
        """(g, g) int8: 0 for GPUs on one node, ``k`` (1-based) for ``levels[k-1]``."""
        if gpus is None:
            gpus = np.arange(self.n_gpus)
        gn = self.gpu_node[np.asarray(gpus, dtype=np.int64)]
        return self.node_meet_level()[np.ix_(gn, gn)]

    # ------------------------------------------------------------------ text
    def describe(self) -> str:
        """One line: nodes, GPUs (free), levels and link classes."""
        free = int(self.free_mask().sum())
        links = ", ".join(f"{k} {v.bandwidth:g} GB/s" for k, v in self.links.items())
        levels = " < ".join(["node", *self.levels])
        return (
            f"{self.name}: {self.n_nodes} nodes, {self.n_gpus} GPUs ({free} free); "
            f"hierarchy {levels}; links {links}"
        )
