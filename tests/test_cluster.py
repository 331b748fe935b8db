from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import DATA, MODELS, small_cluster
from tsched.cluster import Cluster, LinkClass, Node, NodeType
from tsched.errors import InputError
from tsched.formats.cluster_yaml import (
    cluster_from_dict,
    cluster_to_dict,
    parse_cluster_text,
    read_cluster,
    write_cluster,
)


def test_distance_by_level(cluster4: Cluster) -> None:
    d = cluster4.distance_matrix()
    assert d.shape == (16, 16)
    assert np.all(np.diag(d) == 0)
    assert d[0, 1] == pytest.approx(1 / 400)  # same node
    assert d[0, 4] == pytest.approx(1 / 50)  # n0, n1 share leaf l0
    assert d[0, 8] == pytest.approx(1 / 20)  # different leaves: spine
    assert np.array_equal(d, d.T)
    meet = cluster4.meet_level_matrix()
    assert meet[0, 1] == 0 and meet[0, 4] == 1 and meet[0, 12] == 2


def test_nodes_sharing_no_level_meet_at_last_level() -> None:
    links = {
        "nv": LinkClass("nv", 100),
        "leaf": LinkClass("leaf", 10),
        "core": LinkClass("core", 5),
    }
    types = {"t": NodeType("t", 2, intra="nv")}
    nodes = (Node("a", "t", {"leaf": "x"}), Node("b", "t", {"leaf": "y"}), Node("c", "t", {}))
    c = Cluster("c", links, ("leaf", "core"), types, nodes)
    d = c.distance_matrix()
    assert d[0, 2] == pytest.approx(1 / 5) and d[0, 4] == pytest.approx(1 / 5)
    assert c.node_meet_level()[0, 1] == 2


def test_intra_matrix_and_pair_lookup_agree_with_dense() -> None:
    c = read_cluster(MODELS / "clusters/pcie-8gpu-server.yaml")
    d = c.distance_matrix()
    assert d[0, 1] == pytest.approx(1 / 24)  # PIX
    assert d[0, 2] == pytest.approx(1 / 20)  # NODE
    assert d[0, 4] == pytest.approx(1 / 12)  # SYS
    assert d[0, 8] == pytest.approx(1 / 12.5)  # other server
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 16, 500), rng.integers(0, 16, 500)
    assert np.allclose(c.pair_seconds_per_gb(a, b), d[a, b])
    sub = rng.choice(16, 9, replace=False)
    assert np.array_equal(c.distance_matrix(sub), d[np.ix_(sub, sub)])
    assert np.array_equal(c.link_index_matrix(sub), c.link_index_matrix()[np.ix_(sub, sub)])


def test_subset_distance_on_generated_fabric() -> None:
    c = read_cluster(MODELS / "clusters/fabric-1024.yaml")
    assert c.n_gpus == 1024
    full = c.distance_matrix()
    gpus = np.random.default_rng(1).choice(1024, 300, replace=False)
    assert np.array_equal(c.distance_matrix(gpus), full[np.ix_(gpus, gpus)])
    # node 0 and node 15 share leaf0; node 16 is on leaf1
    assert full[0, 15 * 8] == pytest.approx(1 / 50) and full[0, 16 * 8] == pytest.approx(1 / 50)
    assert c.node_meet_level()[0, 15] == 1 and c.node_meet_level()[0, 16] == 2


def test_generate_fanout_groups_and_busy() -> None:
    c = read_cluster(MODELS / "clusters/hgx-h200-16node.yaml")
    assert [n.at["leaf"] for n in c.nodes[:9]] == ["leaf0"] * 8 + ["leaf1"]
    assert {n.at["spine"] for n in c.nodes} == {"spine0"}
    assert c.nodes[2].name == "h200-03" and c.nodes[2].busy == (0, 1, 2, 3)
    assert int(c.busy_mask.sum()) == 4 + 2 + 8


def test_round_trip_is_lossless(tmp_path) -> None:
    for name in ("pcie-8gpu-server", "gb200-nvl72-4rack", "hgx-h200-16node"):
        c = read_cluster(MODELS / f"clusters/{name}.yaml")
        out = tmp_path / f"{name}.yaml"
        write_cluster(c, out)
        back = read_cluster(out)
        assert back == c
        assert cluster_to_dict(back) == cluster_to_dict(c)
        assert np.array_equal(back.distance_matrix(), c.distance_matrix())


def test_with_busy_marks_more_gpus(cluster4: Cluster) -> None:
    c = cluster4.with_busy({"n1": [0, 3]})
    assert int(c.free_mask().sum()) == 14
    with pytest.raises(InputError, match="no node named 'zz'"):
        cluster4.with_busy({"zz": [0]})


BASE = """
tsched: cluster/v1
name: t
links:
  nvlink: {bandwidth: 450}
  leaf: {bandwidth: 50}
levels: [leaf]
node_types:
  box: {gpus: 4, intra: nvlink}
nodes:
  - {name: a, type: box, at: {leaf: l0}}
  - {name: b, type: box, at: {leaf: l0}}
"""


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            "{name: b, type: box, at: {leaf: l0}}",
            "{name: b, tpye: box, at: {leaf: l0}}",
            r"t\.yaml: nodes\[1\]\.tpye: unknown key 'tpye'",
        ),
        (
            "leaf: {bandwidth: 50}",
            "leaf: {bandwidth: -5}",
            r"links\.leaf\.bandwidth: must be > 0, got -5",
        ),
        ("leaf: {bandwidth: 50}", "leaf: {bandwidth: 0}", r"links\.leaf\.bandwidth: must be > 0"),
        (
            "leaf: {bandwidth: 50}",
            "leaf: {bandwidth: 1e-300}",
            r"links\.leaf\.bandwidth: must be .*GB/s, 1e-06\.\.1e\+09, got 1e-300",
        ),
        (
            "{name: b, type: box,",
            "{name: b, type: rack,",
            r"nodes\[1\]\.type: undefined node type 'rack' \(defined: box\)",
        ),
        (
            "{name: b, type: box, at: {leaf: l0}}",
            "{name: b, type: box, at: {leaf: l0}, busy: [4]}",
            r"nodes\[1\]\.busy: GPU index 4 out of range .* \(valid: 0\.\.3\)",
        ),
        ("{name: b, type:", "{name: a, type:", r"nodes\[1\]\.name: duplicate node name 'a'"),
        ("levels: [leaf]", "levels: [tor]", r"levels\[0\]: level 'tor' has no link class"),
        (
            "box: {gpus: 4, intra: nvlink}",
            "box: {gpus: 4, intra: pcie}",
            r"node_types\.box\.intra: unknown link class 'pcie'",
        ),
        ("tsched: cluster/v1", "tsched: cluster/v9", r"tsched: expected 'cluster/v1'"),
        (
            "{name: a, type: box, at: {leaf: l0}}",
            "{name: a, type: box, at: {rack: r0}}",
            r"nodes\[0\]\.at\.rack: unknown level 'rack'",
        ),
        (
            "  nvlink: {bandwidth: 450}\n  leaf: {bandwidth: 50}\n",
            "  1.5\n",
            r"t\.yaml: links: expected a mapping .*got float 1\.5",
        ),
        (
            "  box: {gpus: 4, intra: nvlink}\n",
            "  true\n",
            r"t\.yaml: node_types: expected a mapping .*got bool True",
        ),
        (
            "box: {gpus: 4, intra: nvlink}",
            "box: {gpus: 1000000000000, intra: nvlink}",
            r"node_types\.box\.gpus: must be 1\.\.1024, got 1000000000000",
        ),
        ("nodes:\n", "busy: true\nnodes:\n", r"t\.yaml: busy: expected a mapping .*got bool"),
    ],
)
def test_bad_cluster_input(old: str, new: str, message: str) -> None:
    assert old in BASE
    with pytest.raises(InputError, match=message):
        parse_cluster_text(BASE.replace(old, new, 1), "t.yaml")


def test_numbers_with_an_exponent_are_numbers() -> None:
    cluster = parse_cluster_text(BASE.replace("{bandwidth: 450}", "{bandwidth: 4.5e2}"), "t.yaml")
    assert cluster.links["nvlink"].bandwidth == 450.0


def test_a_mistyped_node_count_is_refused_before_any_node_is_built() -> None:
    text = BASE.split("nodes:")[0] + "generate:\n  - {type: box, count: 1000000000000}\n"
    with pytest.raises(InputError, match=r"generate\[0\]\.count: 1,000,000,000,000 nodes of 4 "
                       r"GPUs would give the cluster more than 2,097,152 GPUs"):  # fmt: skip
        parse_cluster_text(text, "t.yaml")


def test_yaml_syntax_error_reports_line_and_column() -> None:
    with pytest.raises(InputError, match=r"^t\.yaml:6:\d+: YAML syntax error"):
        parse_cluster_text(
            BASE.replace("nvlink: {bandwidth: 450}", "nvlink: {bandwidth: 450"), "t.yaml"
        )


def test_missing_file() -> None:
    with pytest.raises(InputError, match=r"nope\.yaml: cluster file not found"):
        read_cluster("nope.yaml")


def test_intra_matrix_must_be_square_and_symmetric() -> None:
    base = cluster_to_dict(read_cluster(MODELS / "clusters/pcie-8gpu-server.yaml"))
    matrix = base["node_types"]["pcie-l40s"]["intra_matrix"]
    matrix[0][1] = "SYS"
    with pytest.raises(InputError, match=r"intra_matrix\[0\]\[1\]: matrix must be symmetric"):
        cluster_from_dict(base, "p.yaml")
    base["node_types"]["pcie-l40s"]["intra_matrix"] = matrix[:7]
    with pytest.raises(InputError, match=r"intra_matrix: must be 8x8"):
        cluster_from_dict(base, "p.yaml")


def test_generate_fanout_must_cover_nearest_levels() -> None:
    text = BASE.split("nodes:")[0] + "generate:\n  - {type: box, count: 4, fanout: {spine: 2}}\n"
    with pytest.raises(InputError, match=r"generate\[0\]\.fanout\.spine: unknown key"):
        parse_cluster_text(text, "g.yaml")


def test_many_nodes_without_levels_is_an_error() -> None:
    with pytest.raises(InputError, match="2 nodes need at least one network level"):
        Cluster(
            "x",
            {"nv": LinkClass("nv", 10)},
            (),
            {"t": NodeType("t", 1)},
            (Node("a", "t"), Node("b", "t")),
        )


def test_small_cluster_helper_matches_yaml_form() -> None:
    c = small_cluster(busy={"n0": (1,)})
    assert int(c.free_mask().sum()) == 15 and c.gpu_id("n2", 3) == 11
    with pytest.raises(InputError, match="GPUs 0..3, not 4"):
        c.gpu_id("n2", 4)


def test_gpu_uuids_are_recorded_checked_and_round_trip(tmp_path) -> None:
    from dataclasses import replace

    import tsched
    from tsched.formats.cluster_yaml import read_cluster, write_cluster

    base = tsched.load_cluster("dgx-h100-4node")
    nodes = tuple(replace(n, gpu_uuids=tuple(f"GPU-{k}-{i}" for i in range(8)))
                  for k, n in enumerate(base.nodes))  # fmt: skip
    cluster = replace(base, nodes=nodes)
    write_cluster(cluster, tmp_path / "c.yaml")
    back = read_cluster(tmp_path / "c.yaml")
    assert [n.gpu_uuids for n in back.nodes] == [n.gpu_uuids for n in nodes]
    assert back.with_busy({"node001": [3]}).nodes[0].gpu_uuids == nodes[0].gpu_uuids
    with pytest.raises(tsched.InputError, match=r"nodes\[1\]\.gpu_uuids.*7 UUIDs for node type"):
        replace(base, nodes=(nodes[0], replace(nodes[1], gpu_uuids=nodes[1].gpu_uuids[:7]),
                             *nodes[2:]))  # fmt: skip
    with pytest.raises(tsched.InputError, match=r"UUID 'GPU-0-0' is also on node 'node001'"):
        replace(base, nodes=(nodes[0], replace(nodes[1], gpu_uuids=nodes[0].gpu_uuids),
                             *nodes[2:]))  # fmt: skip


def test_nvml_records_put_uuids_on_the_node() -> None:
    from tsched.formats.nvidia_smi import cluster_from_topo, parse_topo

    text = (DATA / "nvidia-smi-topo" / "hgx-h200-8gpu-10nic.txt").read_text()
    uuids = tuple(f"GPU-h200-{i}" for i in range(8))
    cluster = cluster_from_topo(parse_topo(text, "t"), "h200", gpu_uuids=uuids)
    assert cluster.nodes[0].gpu_uuids == uuids


def test_implicit_node_distances_match_the_tables(monkeypatch) -> None:
    """Above NODE_TABLE_LIMIT nodes no N × N table is built: meet levels, links and costs come
    from the groups; they must agree with the tables exactly."""
    import tsched.cluster as cluster_module
    from tsched import presets
    from tsched.problem import PlacementProblem

    cl = presets.cluster("leaf-spine-64").with_busy({"node01": [0, 1, 2]})
    nodes = np.arange(cl.n_nodes)
    table = cl.node_meet_level()
    assert np.array_equal(cl.meet_between(nodes, nodes), table)
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, cl.n_gpus, 500), rng.integers(0, cl.n_gpus, 500)
    dense_links = cl.pair_link_index(a, b)
    cost = np.concatenate([[0.0], cl.link_seconds_per_gb])[cl.node_link_index().astype(int) + 1]
    assert np.allclose(cl.node_cost_between(nodes[:5], nodes), cost[:5])
    monkeypatch.setattr(cluster_module, "NODE_TABLE_LIMIT", 0)
    fresh = presets.cluster("leaf-spine-64").with_busy({"node01": [0, 1, 2]})
    assert np.array_equal(fresh.pair_link_index(a, b), dense_links)
    assert "node_link" not in fresh._cache and "node_meet" not in fresh._cache
    w = presets.workload("llama3-8b-tp8-dp2")
    p = PlacementProblem.build(fresh, w)
    d = fresh.distance_matrix(p.locations)
    assert p.min_pair_distance() == pytest.approx(d[~np.eye(len(d), dtype=bool)].min())
