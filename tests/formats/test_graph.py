"""A cluster as a graph: GraphML and node-link JSON read back by networkx with every GPU, switch
and link attribute, from the command line too."""

from __future__ import annotations

import io
import json

import networkx as nx
import numpy as np
import pytest

import tsched
from tests.conftest import MODELS
from tsched.cli import main
from tsched.formats.graph import cluster_graph, graph_text

NVL72 = str(MODELS / "clusters" / "gb200-nvl72-4rack.yaml")


@pytest.mark.parametrize("source", ["dgx-h100-4node", "pcie-8gpu", NVL72])
def test_the_graph_prices_every_gpu_pair_as_the_cluster_does(source: str) -> None:
    cluster = tsched.load_cluster(source)
    g = cluster_graph(cluster)
    gpus = [n for n, kind in g.nodes(data="kind") if kind == "gpu"]
    assert len(gpus) == cluster.n_gpus
    assert sum(busy for _, busy in g.nodes(data="busy") if busy is not None) == int(
        cluster.busy_mask.sum()
    )
    # a pair on one server is joined directly by its class; a pair on two servers meets at
    # its lowest common switch (the highest level on the tree's path), whose class is the
    # cluster's for that pair
    gpu_of = {
        f"{node.name}/gpu{i}": cluster.gpu_id(k, i)
        for k, node in enumerate(cluster.nodes)
        for i in range(int(cluster.gpus_per_node[k]))
    }
    rng = np.random.default_rng(0)
    for _ in range(60):
        a, b = (str(x) for x in rng.choice(gpus, 2, replace=False))
        pair = cluster.pair_link_index(np.array([gpu_of[a]]), np.array([gpu_of[b]]))
        want = cluster.link_names[int(pair[0])]
        if g.has_edge(a, b):
            got = g.edges[a, b]["link"]
        else:
            path = nx.shortest_path(g, a, b)
            top = max(cluster.levels.index(g.nodes[p]["level"]) for p in path
                      if g.nodes[p]["kind"] == "switch")  # fmt: skip
            got = cluster.link_names[int(cluster.level_link[top])]
        assert got == want, (a, b)


@pytest.mark.parametrize("fmt", ["graphml", "node-link"])
def test_graph_files_load_back_with_the_same_gpus_and_link_attributes(fmt, capsys, tmp_path):
    out = tmp_path / f"fabric.{fmt}"
    code = main(["topology", "convert", str(MODELS / "clusters" / "fabric-1024.yaml"),
                 "--to", fmt, "-o", str(out)])  # fmt: skip
    assert code == 0
    text = out.read_text()
    g = (nx.read_graphml(io.StringIO(text)) if fmt == "graphml"
         else nx.node_link_graph(json.loads(text), edges="edges"))  # fmt: skip
    cluster = tsched.load_cluster(str(MODELS / "clusters" / "fabric-1024.yaml"))
    assert sum(1 for _, k in g.nodes(data="kind") if k == "gpu") == cluster.n_gpus == 1024
    assert g.graph["levels"] == ",".join(cluster.levels)
    for _, _, data in g.edges(data=True):
        link = cluster.links[data["link"]]
        assert (data["bandwidth"], data["latency"]) == (link.bandwidth, link.latency)
    assert graph_text(cluster, fmt) == text
