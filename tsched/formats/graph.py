"""A cluster as a graph (networkx), for graph tools: GraphML and node-link JSON.

GPUs and switches are the graph's nodes; links are its edges, each with the link class's
``link`` name, ``bandwidth`` (GB/s per GPU per direction) and ``latency`` (µs):

- a GPU node ``NODE/gpuI`` has ``kind="gpu"``, ``node``, ``index``, ``model``, ``memory_gb`` and
  ``busy``;
- the GPUs of one server are joined pairwise by its intra-node class (one class, or the pair's
  entry of its ``nvidia-smi topo -m`` matrix);
- a switch node ``LEVEL:GROUP`` (``leaf:l0``, ``nvl:rack3``) has ``kind="switch"``, ``level`` and
  ``group``; each GPU is joined to the switch of the nearest level its server sits under, by
  that level's class, and each switch to the one above it, by the upper level's class.

The graph also carries the cluster's ``name`` and ``levels`` (nearest first, comma-separated in
GraphML, which has no lists). Two GPUs on different servers meet at their lowest common switch,
whose level prices them in the cluster model.
"""

from __future__ import annotations

import json
from typing import Any

from tsched.cluster import Cluster

__all__ = ["GRAPH_FORMATS", "cluster_graph", "graph_text"]

#: What ``tsched topology convert --to`` writes through this module.
GRAPH_FORMATS = ("graphml", "node-link")


def cluster_graph(cluster: Cluster) -> Any:
    """The cluster as an undirected :class:`networkx.Graph` (see the module's description).

    Examples
    --------
    >>> import tsched
    >>> g = cluster_graph(tsched.load_cluster("dgx-h100-4node"))
    >>> sum(1 for _, kind in g.nodes(data="kind") if kind == "gpu")
    32
    >>> g.edges["node001/gpu0", "node001/gpu1"]["link"], g.edges["node001/gpu0", "leaf:l0"]
    ('nvlink', {'link': 'leaf', 'bandwidth': 50.0, 'latency': 5.0})
    >>> sorted(g.neighbors("spine:s0"))
    ['leaf:l0', 'leaf:l1']
    """
    import networkx as nx

    g = nx.Graph(name=cluster.name, levels=",".join(cluster.levels))
    level_links = [cluster.link_names[int(k)] for k in cluster.level_link]
    models, memory, busy = cluster.gpu_models(), cluster.gpu_memory_gb(), cluster.busy_mask

    def link(name: str) -> dict[str, Any]:
        cls = cluster.links[name]
        return {"link": name, "bandwidth": float(cls.bandwidth), "latency": float(cls.latency)}

    for n, node in enumerate(cluster.nodes):
        node_type = cluster.node_types[node.type]
        ids = []
        for local in range(node_type.gpus):
            gpu = cluster.gpu_id(n, local)
            ids.append(f"{node.name}/gpu{local}")
            g.add_node(ids[-1], kind="gpu", node=node.name, index=local,
                       model=str(models[gpu]), memory_gb=float(memory[gpu]),
                       busy=bool(busy[gpu]))  # fmt: skip
        for a in range(len(ids)):
            for b in range(a + 1, len(ids)):
                name = node_type.link_between(a, b)
                if name is not None:
                    g.add_edge(ids[a], ids[b], **link(name))
        below = ids  # what the next switch up joins: the GPUs, then the switch under it
        for level, level_link in zip(cluster.levels, level_links, strict=True):
            group = node.at.get(level)
            if group is None:
                continue  # no switch of this level above the node: the next level takes it
            switch = f"{level}:{group}"
            g.add_node(switch, kind="switch", level=level, group=group)
            for child in below:
                g.add_edge(child, switch, **link(level_link))
            below = [switch]
    return g


def graph_text(cluster: Cluster, fmt: str) -> str:
    """The cluster's graph written as ``graphml`` or ``node-link`` JSON (networkx's own
    writers; ``networkx.node_link_graph`` and ``networkx.read_graphml`` read them back)."""
    import networkx as nx

    g = cluster_graph(cluster)
    if fmt == "graphml":
        return "\n".join(nx.generate_graphml(g)) + "\n"
    if fmt == "node-link":
        return json.dumps(nx.node_link_data(g, edges="edges"), indent=1) + "\n"
    raise ValueError(f"graph format {fmt!r}: expected one of {', '.join(GRAPH_FORMATS)}")
