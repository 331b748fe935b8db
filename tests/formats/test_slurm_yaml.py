"""Slurm's topology.yaml and Slinky's ConfigMap: read (each topology of a topology.yaml, the
cluster default by default), written, read back, and bad input named by file and field."""

from __future__ import annotations

import json

import pytest
import yaml

import tsched
from tests.conftest import DATA, MODELS
from tsched.cli import main
from tsched.formats.detect import read_any_cluster, read_slurm, read_topology
from tsched.formats.slurm_yaml import parse_topology_yaml, topology_yaml

SLURM = DATA / "slurm"
CONF = DATA / "topograph" / "expected.slinky-oci-sim-tree.conf"
NVL72 = MODELS / "clusters" / "gb200-nvl72-4rack.yaml"


def groups(cluster, level: str) -> list[list[str]]:
    """The nodes of each group of ``level``, as sorted lists (names of groups aside)."""
    out: dict[str, list[str]] = {}
    for node in cluster.nodes:
        if level in node.at:
            out.setdefault(node.at[level], []).append(node.name)
    return sorted(sorted(v) for v in out.values())


def test_topology_yaml_reads_its_cluster_default_or_the_one_named() -> None:
    tree = read_topology("slurm", SLURM / "topology.yaml")
    assert tree.levels == ("leaf", "spine", "core") and tree.n_nodes == 16
    assert groups(tree, "leaf")[0] == ["gpu01", "gpu02", "gpu03", "gpu04"]
    assert groups(tree, "spine")[1] == [f"gpu{k:02d}" for k in range(9, 17)]
    racks = read_topology("slurm", SLURM / "topology.yaml", topology="racks")
    assert racks.levels == ("block", "block8")
    assert groups(racks, "block")[3] == ["gpu13", "gpu14", "gpu15", "gpu16"]
    assert groups(racks, "block8") == [[f"gpu{k:02d}" for k in range(1, 9)],
                                       [f"gpu{k:02d}" for k in range(9, 17)]]  # fmt: skip
    assert read_any_cluster(SLURM / "topology.yaml").levels == tree.levels  # sniffed


@pytest.mark.parametrize(
    ("topology", "message"),
    [
        ("everything", r"topology\.yaml: \[2\]\.flat: topology 'everything' is flat: it names no "
                       r"nodes to model; choose one with --topology \(fabric, racks\)"),
        ("nope", r"topology\.yaml: no topology named 'nope' \(topologies: fabric, racks, "
                 r"everything\)"),
    ],
)  # fmt: skip
def test_a_topology_yaml_refuses_what_it_cannot_model(topology, message) -> None:
    with pytest.raises(tsched.InputError, match=message):
        read_slurm(SLURM / "topology.yaml", topology)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("- topology: t\n  ring: {rings: []}\n", r"x\.yaml: \[0\]\.ring: topology 't' is a ring, "
                                                 r"which tsched does not model"),
        ("- topology: t\n  tree: {switches: [{switch: s, nodes: 'n[1-'}]}\n",
         r"x\.yaml: \[0\]\.tree\.switches\[0\]\.nodes: hostlist 'n\[1-'"),
        ("- topology: t\n  tree: {switches: [{nodes: n1}]}\n",
         r"x\.yaml: \[0\]\.tree\.switches\[0\]: missing required key 'switch'"),
        ("- topology: t\n  block: {blocks: [{block: a, nodes: n1}, {block: b, nodes: 'n[1-2]'}]}\n",
         r"x\.yaml: \[0\]\.block\.blocks\[1\]\.nodes: node 'n1' is in block 'a' too"),
        ("- topology: t\n  tree: {switches: [{switch: r, children: s1}]}\n",
         r"x\.yaml: \[0\]\.tree\.switches: child switch 's1' is not defined"),
        ("- topology: t\n  flat: true\n  tree: {switches: []}\n",
         r"x\.yaml: \[0\]: topology 't' must have exactly one of"),
        ("- topology: t\n  flat: true\n- topology: t\n  flat: true\n",
         r"x\.yaml: \[1\]\.topology: topology 't' is named twice"),
    ],
)  # fmt: skip
def test_bad_topology_yaml_is_named_by_field(text, message) -> None:
    with pytest.raises(tsched.InputError, match=message) as err:
        parse_topology_yaml(text, "x.yaml")
    assert "\n" not in str(err.value)


def test_topology_yaml_round_trips_a_cluster_with_its_blocks(tmp_path) -> None:
    cluster = tsched.load_cluster(str(NVL72))
    path = tmp_path / "topology.yaml"
    path.write_text(topology_yaml(cluster))
    doc = yaml.safe_load(path.read_text())
    assert [(t["topology"], t["cluster_default"]) for t in doc] == [("tree", True),
                                                                    ("block", False)]  # fmt: skip
    tree, blocks = read_topology("slurm", path), read_topology("slurm", path, topology="block")
    assert groups(tree, "leaf") == groups(cluster, "leaf")
    assert groups(tree, "spine") == groups(cluster, "spine")
    assert groups(blocks, "block") == groups(cluster, "nvl")


def test_a_slinky_configmap_reads_as_its_topology_conf(capsys, tmp_path) -> None:
    direct = read_topology("slurm", CONF)
    from_cm = read_topology("slurm", SLURM / "slinky-configmap-tree.yaml")
    assert from_cm.levels == direct.levels == ("leaf", "spine", "core")
    assert [n.name for n in from_cm.nodes] == [n.name for n in direct.nodes]
    for level in from_cm.levels:
        assert groups(from_cm, level) == groups(direct, level)
    # as kubectl -o json prints it, and through the command line
    as_json = tmp_path / "cm.json"
    as_json.write_text(
        json.dumps(yaml.safe_load((SLURM / "slinky-configmap-tree.yaml").read_text()))
    )
    out = tmp_path / "c.yaml"
    assert main(["inventory", "slurm", str(as_json), "--gpus", "4", "-o", str(out)]) == 0
    assert tsched.read_cluster(out).n_gpus == 4 * direct.n_nodes
    capsys.readouterr()


@pytest.mark.parametrize("plugin", ["tree", "block"])
def test_a_slinky_configmap_is_written_as_topograph_writes_it_and_reads_back(
    plugin, capsys, tmp_path
) -> None:
    out = tmp_path / "cm.yaml"
    argv = ["topology", "convert", str(NVL72), "--to", "slinky-configmap",
            "--configmap-name", "slurm-topology", "--namespace", "hpc",
            "--slurm-plugin", plugin, "-o", str(out)]  # fmt: skip
    assert main(argv) == 0
    doc = yaml.safe_load(out.read_text())
    assert doc["kind"] == "ConfigMap" and list(doc["data"]) == ["topology.conf"]
    assert doc["metadata"]["name"] == "slurm-topology" and doc["metadata"]["namespace"] == "hpc"
    assert doc["metadata"]["annotations"]["topograph.run/plugin"] == f"topology/{plugin}"
    cluster, back = tsched.load_cluster(str(NVL72)), read_topology("slurm", out)
    if plugin == "tree":
        assert groups(back, "leaf") == groups(cluster, "leaf")
    else:
        assert groups(back, "block") == groups(cluster, "nvl")
    assert "|" in out.read_text()  # the file's text as a block, readable
    capsys.readouterr()


def test_a_configmap_without_a_topology_key_says_which_keys_it_has(tmp_path) -> None:
    path = tmp_path / "cm.yaml"
    path.write_text(yaml.safe_dump({"kind": "ConfigMap", "metadata": {"name": "x"},
                                    "data": {"slurm.conf": "a", "gres.conf": "b"}}))  # fmt: skip
    with pytest.raises(tsched.InputError, match=r"cm\.yaml: ConfigMap 'x': data: no key "
                                                r"topology\.conf or topology\.yaml \(keys: "
                                                r"gres\.conf, slurm\.conf\)"):  # fmt: skip
        read_slurm(path)
