"""Topograph node labels of a mixed fleet: accelerator domains and sub-domains on some nodes
only, 2- and 3-tier fabrics, the round trip label for label, and bad labels named."""

from __future__ import annotations

import json

import numpy as np
import pytest

import tsched
from tests.conftest import DATA
from tsched.cli import main
from tsched.formats.topograph import SUB_DOMAIN_LABEL, cluster_from_labels, read_nodes_json

MIXED = DATA / "topograph" / "nodes-mixed-fleet.json"
ACCEL = "accelerator.topograph.run/domain"
TIER = "fabric.topograph.run/tier-{}"
TOPOLOGY = ("fabric.topograph.run/", "accelerator.topograph.run/")


def labels_of(path) -> dict[str, dict[str, str]]:
    """Each node's topology labels (fabric tiers, accelerator domain and sub-domain)."""
    items = json.loads(path.read_text())["items"]
    return {i["metadata"]["name"]: {k: v for k, v in i["metadata"]["labels"].items()
                                    if k.startswith(TOPOLOGY)} for i in items}  # fmt: skip


def link(cluster, a: str, b: str) -> str:
    """The link class joining GPU 0 of node ``a`` and GPU 0 (or 1 on one node) of ``b``."""
    ga, gb = cluster.gpu_id(a, 0), cluster.gpu_id(b, 1 if a == b else 0)
    return cluster.link_names[int(cluster.pair_link_index(np.array([ga]), np.array([gb]))[0])]


def test_a_mixed_fleet_reads_into_the_right_nesting() -> None:
    cluster = read_nodes_json(MIXED)
    assert cluster.levels == ("nvl-sub", "nvl", "leaf", "spine", "core")
    assert cluster.n_nodes == 13 and cluster.n_gpus == 8 * 4 + 5 * 8
    servers = [n for n in cluster.nodes if n.name.startswith("hgx")]
    assert all("nvl" not in n.at and "nvl-sub" not in n.at for n in servers)
    assert {n.at["nvl"] for n in cluster.nodes if n.name.startswith("gb")} == {"nvl1", "nvl2"}
    # NVLink inside a rack and across the racks of one domain; a plain server shares no NVLink
    # with anyone, so a server and a tray, or two servers, on one leaf meet at the leaf
    assert link(cluster, "gb-100", "gb-101") == "nvl-sub"
    assert link(cluster, "gb-100", "gb-110") == "nvl"
    assert link(cluster, "gb-100", "gb-200") == "spine"  # two domains on two leaves
    assert link(cluster, "hgx-0", "hgx-1") == "leaf"
    assert link(cluster, "hgx-0", "gb-100") == "leaf"
    assert link(cluster, "hgx-3", "hgx-0") == "core"  # another spine
    assert {cluster.node_types[n.type].gpus for n in cluster.nodes} == {4, 8}


def test_a_two_tier_fabric_of_the_same_fleet(tmp_path) -> None:
    doc = json.loads(MIXED.read_text())
    for item in doc["items"]:
        item["metadata"]["labels"].pop(TIER.format(2))
    path = tmp_path / "two-tier.json"
    path.write_text(json.dumps(doc))
    cluster = read_nodes_json(path)
    assert cluster.levels == ("nvl-sub", "nvl", "leaf", "spine")
    assert link(cluster, "hgx-3", "hgx-0") == "spine"  # no shared spine: the last level


def test_labels_round_trip_label_for_label_absent_ones_absent(capsys, tmp_path) -> None:
    model = tmp_path / "mixed.yaml"
    assert main(["inventory", "topograph", str(MIXED), "-o", str(model)]) == 0
    assert tsched.read_cluster(model).n_gpus == 72
    out = tmp_path / "labels.json"
    assert main(["topology", "convert", str(model), "--to", "topograph", "-o", str(out)]) == 0
    assert labels_of(out) == labels_of(MIXED)
    capsys.readouterr()


@pytest.mark.parametrize(
    ("nodes", "message"),
    [
        ([("a", {TIER.format(0): "l0", TIER.format(2): "c0"})],
         r"node 'a'\): label 'fabric\.topograph\.run/tier-1' is missing between tiers 0 and 2"),
        ([("a", {TIER.format(0): "l0", ACCEL: "nvl1", SUB_DOMAIN_LABEL: "r1"}),
          ("b", {TIER.format(0): "l0", ACCEL: "nvl2", SUB_DOMAIN_LABEL: "r1"})],
         r"items\[1\] \(node 'b'\): label accelerator\.topograph\.run/sub-domain='r1' puts it "
         r"in domain 'nvl2', but node 'a' has it in domain 'nvl1'"),
        ([("a", {TIER.format(0): "l0", SUB_DOMAIN_LABEL: "r1"})],
         r"node 'a'\): label accelerator\.topograph\.run/sub-domain='r1' without "
         r"'accelerator\.topograph\.run/domain'"),
        ([("a", {TIER.format(0): "l0", ACCEL: "nvl1"}),
          ("a", {TIER.format(0): "l0", ACCEL: "nvl2"})],
         r"items\[1\] \(node 'a'\): listed twice \(also items\[0\]\)"),
    ],
)  # fmt: skip
def test_bad_labels_are_one_line_errors_naming_the_node_and_label(nodes, message) -> None:
    with pytest.raises(tsched.InputError, match=message) as err:
        cluster_from_labels(nodes, "c", "nodes.json")
    assert "\n" not in str(err.value) and str(err.value).startswith("nodes.json: items[")
