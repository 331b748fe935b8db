"""Slurm topology.conf (tree, block), Topograph models and node labels, KAI/Kueue Topology."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import tsched
from tests.conftest import DATA, MODELS
from tsched.formats.k8s_topology import topology_object, validate
from tsched.formats.slurm import (
    blocks_from_cluster,
    cluster_from_blocks,
    parse_block,
    parse_tree,
    write_block,
    write_tree,
)
from tsched.formats.topograph import (
    SCHEMES,
    cluster_from_labels,
    labels_from_cluster,
    level_labels,
    nodes_document,
    read_model,
    read_nodes_json,
)
from tsched.formats.topology import (
    cluster_from_tree,
    hostlist_compress,
    hostlist_expand,
    tree_from_cluster,
)

TG = DATA / "topograph"


def partition_of(cluster: tsched.Cluster, level: str) -> set[frozenset[str]]:
    groups: dict[str, set[str]] = {}
    for node in cluster.nodes:
        groups.setdefault(node.at[level], set()).add(node.name)
    return {frozenset(g) for g in groups.values()}


# ---------------------------------------------------------------------- hostlists
@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ("node[001-003]", ["node001", "node002", "node003"]),
        ("a[1-2]b[3-4]", ["a1b3", "a1b4", "a2b3", "a2b4"]),
        ("tux[0-1,12],login", ["tux0", "tux1", "tux12", "login"]),
        ("switch.1.[9-11]", ["switch.1.9", "switch.1.10", "switch.1.11"]),
    ],
)
def test_hostlist_expand(expr: str, names: list[str]) -> None:
    assert hostlist_expand(expr) == names


@pytest.mark.parametrize("bad", ["n[1-", "n[3-1]", "n[a-b]", "n]1["])
def test_hostlist_errors(bad: str) -> None:
    with pytest.raises(tsched.InputError, match="hostlist"):
        hostlist_expand(bad)


def test_hostlist_round_trip() -> None:
    names = [f"srv{k:04d}" for k in (1, 2, 3, 9, 10, 20)] + ["login", "gpu-a7"]
    text = hostlist_compress(names)
    assert text == "srv[0001-0003,0009-0010,0020],login,gpu-a7"
    assert hostlist_expand(text) == names


# ---------------------------------------------------------------------- Slurm tree
def test_topograph_model_matches_the_expected_slurm_tree() -> None:
    """Topograph's CI expects this tree.conf for large.yaml: same switches, same nodes."""
    model = cluster_from_tree(read_model(TG / "large.yaml"), "large", "large.yaml")
    expected_tree = parse_tree((TG / "expected.slinky-oci-sim-tree.conf").read_text())
    assert expected_tree.comments["switch.2.1"] == "spine-1"
    expected = cluster_from_tree(expected_tree, "expected", "expected.conf")
    for level in ("leaf", "spine", "core"):
        assert partition_of(model, level) == partition_of(expected, level)
    # and our own writer round-trips the model
    ours = parse_tree(write_tree(tree_from_cluster(model)))
    again = cluster_from_tree(ours, "again", "ours")
    for level in ("leaf", "spine", "core"):
        assert partition_of(again, level) == partition_of(model, level)


def test_tree_of_a_model_file_and_back() -> None:
    cluster = tsched.load_cluster(str(MODELS / "clusters" / "dgx-a100-32node.yaml"))
    text = write_tree(tree_from_cluster(cluster))
    back = cluster_from_tree(parse_tree(text), "back", "t")
    for ours, theirs in zip(cluster.levels, back.levels):
        assert partition_of(cluster, ours) == partition_of(back, theirs)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("SwitchName=s0 Switches=s[1-2]\nSwitchName=s1 Nodes=n1\n", "undefined switch 's2'"),
        ("SwitchName=a Switches=b\nSwitchName=b Switches=a\n", "cycle"),
        ("SwitchName=s1 Nodes=n[1-2]\nSwitchName=s2 Nodes=n2\n", "node 'n2' is under two"),
        ("SwitchName=s1 Nodes=n1 Speed=10\n", ":1: unknown key 'Speed'"),
        ("SwitchName=s1\n", "neither Switches= nor Nodes="),
        ("SwitchName=s1 Nodes=n[1-\n", ":1: hostlist"),
        ("hello world\n", ":1: expected KEY=VALUE"),
    ],
)
def test_bad_tree_names_the_problem(text: str, message: str) -> None:
    with pytest.raises(tsched.InputError, match=message.replace("(", r"\(")):
        parse_tree(text, "topology.conf")


# ---------------------------------------------------------------------- Slurm block
def test_block_round_trip_and_sizes() -> None:
    nvl72 = cluster_from_tree(read_model(TG / "nvl72.yaml"), "nvl72", "nvl72.yaml")
    blocks = blocks_from_cluster(nvl72)
    assert blocks.sizes == [18, 36, 72]  # the model's comment: block sizes 18, 36, 72
    text = write_block(blocks)
    assert "BlockName=nvl-1-1 Nodes=node[1101-1118]" in text
    back = cluster_from_blocks(parse_block(text), "back", "t")
    assert back.levels == ("block", "block36", "block72")
    assert partition_of(back, "block") == partition_of(nvl72, "nvl")
    assert partition_of(back, "block36") == partition_of(nvl72, "spine")


def test_slurm_parameter_names_are_case_insensitive(tmp_path, capsys) -> None:
    """topology.conf(5): "Parameter names are case insensitive"."""
    tree = (TG / "expected.slinky-oci-sim-tree.conf").read_text()
    mixed = tree.replace("SwitchName=", "switchname=").replace("Nodes=", "NODES=")
    assert mixed != tree
    assert parse_tree(mixed).switches == parse_tree(tree).switches
    blocks = "blockname=b1 nodes=n[1-4]\nBLOCKNAME=b2 Nodes=n[5-8]\nblocksizes=4,8\n"
    assert parse_block(blocks).sizes == [4, 8] and list(parse_block(blocks).blocks) == ["b1", "b2"]
    path = tmp_path / "topology.conf"
    path.write_text(blocks)
    from tsched.cli import main

    assert main(["topology", "convert", str(path), "--to", "slurm-block"]) == 0
    assert "BlockName=b1 Nodes=n[1-4]" in capsys.readouterr().out


def test_bad_block_files() -> None:
    with pytest.raises(tsched.InputError, match="node 'n2' is in block 'b1' and 'b2'"):
        parse_block("BlockName=b1 Nodes=n[1-2]\nBlockName=b2 Nodes=n[2-3]\n", "t")
    with pytest.raises(tsched.InputError, match="multiple of the first"):
        parse_block("BlockName=b1 Nodes=n[1-4]\nBlockSizes=4,6\n", "t")


# ---------------------------------------------------------------------- Topograph labels
def test_small_tree_model_domains() -> None:
    tree = read_model(TG / "small-tree.yaml")
    assert tree.domains == {"I21": "nvl2", "I22": "nvl2", "I25": "nvl2",
                            "I34": "nvl3", "I35": "nvl3", "I36": "nvl3"}  # fmt: skip
    cluster = cluster_from_tree(tree, "small", "small-tree.yaml")
    assert cluster.levels == ("nvl", "leaf", "spine")


@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_labels_round_trip_every_generation(scheme: str, tmp_path: Path) -> None:
    cluster = cluster_from_tree(read_model(TG / "nvl72.yaml"), "nvl72", "nvl72.yaml")
    labels = labels_from_cluster(cluster, scheme)
    path = tmp_path / "nodes.json"
    path.write_text(json.dumps(nodes_document(labels)))
    back = read_nodes_json(path)
    assert back.levels == cluster.levels
    for level in cluster.levels:
        assert partition_of(back, level) == partition_of(cluster, level)
    # and the plan costs agree
    w = tsched.Workload.from_matrix("w", np.ones((4, 4)) - np.eye(4))
    a = tsched.solve(tsched.PlacementProblem.build(cluster, w), method="greedy")
    b = tsched.solve(tsched.PlacementProblem.build(back, w), method="greedy")
    assert a.objective == pytest.approx(b.objective)


@pytest.mark.parametrize(
    ("labels", "message"),
    [
        (1.5, r"n\.json: items\[0\]\.metadata\.labels: expected a mapping of label → value"),
        ({"fabric.topograph.run/tier-1": 0},
         r"labels\.fabric\.topograph\.run/tier-1: label values are strings, got int 0"),
    ],
)  # fmt: skip
def test_node_labels_must_be_a_mapping_of_strings(tmp_path, labels, message) -> None:
    doc = {"kind": "List", "items": [{"kind": "Node", "metadata": {"name": "a", "labels": labels}}]}
    path = tmp_path / "n.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(tsched.InputError, match=message):
        read_nodes_json(path)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ({"switches": {"S1": {"switches": 1.5}}}, r"switches\.S1\.switches: expected a list"),
        ({"blocks": [{"switch": "S1", "nodes": 3}]}, r"blocks\[0\]\.nodes: expected a list"),
        ({"blocks": [{"switch": "S1", "nodes": ["n1"], "annotations": [1]}]},
         r"blocks\[0\]\.annotations: expected a mapping"),
    ],
)  # fmt: skip
def test_bad_topograph_models_name_the_field(tmp_path, edit, message) -> None:
    import yaml

    doc = {"switches": {"S1": {}}, "blocks": [{"switch": "S1", "nodes": ["n1"]}], **edit}
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(tsched.InputError, match=message):
        read_model(path)


def test_labels_missing_on_a_node_name_it() -> None:
    nodes = [
        ("a", {"fabric.topograph.run/tier-1": "l0", "fabric.topograph.run/tier-2": "s0"}),
        ("b", {"fabric.topograph.run/tier-1": "l1"}),
    ]
    with pytest.raises(tsched.InputError, match=r"items\[1\] \(node 'b'\): missing label"):
        cluster_from_labels(nodes, "c", "nodes.json")
    with pytest.raises(tsched.InputError, match="no Topograph topology labels"):
        cluster_from_labels([("a", {"x": "y"})], "c", "nodes.json")


# ---------------------------------------------------------------------- KAI / Kueue
@pytest.mark.parametrize("flavour", ["kai", "kueue"])
def test_topology_objects_validate_against_the_crds(flavour: str) -> None:
    cluster = cluster_from_tree(read_model(TG / "large.yaml"), "Large Fabric", "large.yaml")
    obj = topology_object(cluster, flavour)
    validate(obj, flavour)
    labels = [lv["nodeLabel"] for lv in obj["spec"]["levels"]]
    # three tiers, numbered from 0 as Topograph >= 1.0 writes them
    assert labels[0] == "fabric.topograph.run/tier-2" and labels[-1] == "kubernetes.io/hostname"
    assert obj["metadata"]["name"] == "large-fabric"
    broken = json.loads(json.dumps(obj))
    broken["spec"]["levels"] = []
    with pytest.raises(tsched.InputError, match="spec.levels"):
        validate(broken, flavour)
    broken["spec"]["levels"] = [{"nodeLabel": "kubernetes.io/hostname"}, {"nodeLabel": "a/b"}]
    with pytest.raises(tsched.InputError, match="lowest level"):
        validate(broken, flavour)


# ---------------------------------------------------------------------- Topograph ≥ 1.0 labels
def test_current_labels_with_domain_sub_domain_and_three_tiers() -> None:
    cluster = read_nodes_json(TG / "nodes-domain-subdomain-3tiers.json")
    assert cluster.levels == ("nvl-sub", "nvl", "leaf", "spine", "core")
    assert partition_of(cluster, "nvl-sub") == {
        frozenset({f"gb-{2 * r:02d}", f"gb-{2 * r + 1:02d}"}) for r in range(4)
    }
    assert partition_of(cluster, "nvl") == {
        frozenset(f"gb-{k:02d}" for k in range(4)),
        frozenset(f"gb-{k:02d}" for k in range(4, 8)),
    }
    assert partition_of(cluster, "leaf") == partition_of(cluster, "nvl")
    assert len(partition_of(cluster, "core")) == 1
    (node_type,) = cluster.node_types.values()  # every tray says 4 GB200 GPUs of 185 GB
    assert (node_type.gpus, node_type.gpu_model, node_type.memory_gb) == (4, "NVIDIA-GB200", 185.0)
    # written back in the current scheme: tiers from 0, the sub-domain under its fixed key
    labels = labels_from_cluster(cluster)["gb-03"]
    assert labels == {
        "accelerator.topograph.run/sub-domain": "nvl1.rack01",
        "accelerator.topograph.run/domain": "nvl1",
        "fabric.topograph.run/tier-0": "s1",
        "fabric.topograph.run/tier-1": "s10",
        "fabric.topograph.run/tier-2": "s100",
    }
    with pytest.raises(tsched.InputError, match="sub-domains .* the nvidia-v2 scheme has no label"):
        labels_from_cluster(cluster, "nvidia-v2")


def test_a_node_list_with_only_tier_0_and_mixed_gpu_counts() -> None:
    cluster = read_nodes_json(TG / "nodes-tier0-only-mixed-gpus.json")
    assert [n.name for n in cluster.nodes] == ["dgx-a", "dgx-b", "l40s-a", "l40s-b"]  # no CPU node
    assert cluster.levels == ("leaf",)
    assert partition_of(cluster, "leaf") == {
        frozenset({"dgx-a", "dgx-b"}),
        frozenset({"l40s-a", "l40s-b"}),
    }
    gpus = {n.name: int(cluster.gpus_per_node[i]) for i, n in enumerate(cluster.nodes)}
    assert gpus == {"dgx-a": 8, "dgx-b": 8, "l40s-a": 4, "l40s-b": 4}
    models = {n.name: cluster.node_types[n.type].gpu_model for n in cluster.nodes}
    assert models["dgx-a"] == "NVIDIA-H100-80GB-HBM3" and models["l40s-b"] == "NVIDIA-L40S"
    assert cluster.n_gpus == 24
    # a job that fits one H100 node goes there: the planner sees the mixed counts
    w = tsched.Workload.from_matrix("w", np.ones((8, 8)) - np.eye(8))
    plan = tsched.solve(tsched.PlacementProblem.build(cluster, w), method="greedy").plan()
    assert len({e.node for e in plan.assignment}) == 1
    back = labels_from_cluster(cluster)
    assert back["l40s-a"] == {"fabric.topograph.run/tier-0": "lldp-66778899aabb"}


def test_a_node_list_as_kubectl_writes_it_in_yaml_reads_like_the_json(tmp_path, capsys) -> None:
    import yaml

    source = TG / "nodes-domain-subdomain-3tiers.json"
    path = tmp_path / "nodes.yaml"
    path.write_text(yaml.safe_dump(json.loads(source.read_text())))
    a, b = read_nodes_json(source), read_nodes_json(path)
    assert a.levels == b.levels and [n.at for n in a.nodes] == [n.at for n in b.nodes]
    from tsched.cli import main

    assert main(["topology", "convert", str(path), "--to", "slurm-tree"]) == 0
    assert "SwitchName=" in capsys.readouterr().out
    assert main(["inventory", "topograph", str(path)]) == 0


def test_the_labellers_tier_0_and_1_with_a_hashed_switch_id() -> None:
    cluster = read_nodes_json(TG / "nodes-tier0-tier1-hashed.json")
    assert cluster.levels == ("leaf", "spine")
    assert partition_of(cluster, "leaf") == {
        frozenset({"Node201", "Node202", "Node205"}),
        frozenset({"Node304", "Node305"}),
    }


def test_tiers_numbered_from_1_are_still_read_and_gaps_refused() -> None:
    old = [
        ("a", {"fabric.topograph.run/tier-1": "l0", "fabric.topograph.run/tier-2": "s0"}),
        ("b", {"fabric.topograph.run/tier-1": "l1", "fabric.topograph.run/tier-2": "s0"}),
    ]
    new = [
        (n, {k.replace("tier-1", "tier-0").replace("tier-2", "tier-1"): v for k, v in lab.items()})
        for n, lab in old
    ]
    a, b = cluster_from_labels(old, "c", "old.json"), cluster_from_labels(new, "c", "new.json")
    assert a.levels == b.levels == ("leaf", "spine")
    assert partition_of(a, "leaf") == partition_of(b, "leaf")
    gap = [("a", {"fabric.topograph.run/tier-0": "l0", "fabric.topograph.run/tier-2": "c0"})]
    with pytest.raises(tsched.InputError, match=r"gap\.json: items\[0\] \(node 'a'\): label "
                       r"'fabric\.topograph\.run/tier-1' is missing"):  # fmt: skip
        cluster_from_labels(gap, "c", "gap.json")


@pytest.mark.parametrize(
    "fixture",
    [
        "nodes-domain-subdomain-3tiers.json",
        "nodes-tier0-only-mixed-gpus.json",
        "nodes-tier0-tier1-hashed.json",
    ],
)
def test_convert_agrees_on_label_keys_everywhere(fixture: str, tmp_path: Path, capsys) -> None:
    """k8s-labels, the KAI and Kueue Topology objects and a KAI topologyConstraint name the
    same label keys; the labels read back give the same cluster."""
    from tsched.backends.kai import topology_constraint
    from tsched.cli import main

    source = str(TG / fixture)
    assert main(["topology", "convert", source, "--to", "k8s-labels"]) == 0
    written = json.loads(capsys.readouterr().out)
    keys = {k for item in written["items"] for k in item["metadata"]["labels"]}
    (tmp_path / "back.json").write_text(json.dumps(written))
    cluster, back = read_nodes_json(source), read_nodes_json(tmp_path / "back.json")
    assert back.levels == cluster.levels
    for level in cluster.levels:
        assert partition_of(back, level) == partition_of(cluster, level)
    for flavour in ("kai", "kueue"):
        assert main(["topology", "convert", source, "--to", f"{flavour}-topology"]) == 0
        import yaml

        obj = yaml.safe_load(capsys.readouterr().out)
        levels = [lv["nodeLabel"] for lv in obj["spec"]["levels"]]
        assert levels[-1] == "kubernetes.io/hostname" and set(levels[:-1]) == keys
        assert levels[:-1] == list(reversed(level_labels(cluster)))  # broadest first
    w = tsched.Workload.from_matrix("w", np.ones((12, 12)) - np.eye(12))
    plan = tsched.solve(tsched.PlacementProblem.build(cluster, w), method="greedy").plan()
    constraint = topology_constraint(plan, cluster, "tsched")
    named = {constraint.get("requiredTopologyLevel"), constraint.get("preferredTopologyLevel")}
    assert named - {None} <= keys | {"kubernetes.io/hostname"}
    tiers = [k for k in level_labels(cluster) if k.startswith("fabric.topograph.run/tier-")]
    assert tiers == [f"fabric.topograph.run/tier-{k}" for k in range(len(tiers))]  # 0 nearest
