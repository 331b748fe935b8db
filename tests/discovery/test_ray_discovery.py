"""Ray-wide inventory and link probes on a real local multi-node Ray cluster."""

from __future__ import annotations

import datetime as dt

import pytest

from tsched.formats.nccl_tests import check_fresh

pytestmark = pytest.mark.ray


def test_inventory_builds_the_cluster_and_reports_the_failed_node(ray_cluster) -> None:
    from tsched.discovery.ray import inventory

    inv = inventory(timeout=20)
    assert inv.failed.keys() == {"no-cpu"}
    assert "TaskUnschedulableError" in inv.failed["no-cpu"]
    assert inv.skipped == {"head": "no GPUs"}
    cluster = inv.cluster
    assert cluster is not None
    assert [n.name for n in cluster.nodes] == ["gpu-a", "gpu-b", "gpu-c"]
    assert list(cluster.gpus_per_node) == [4, 4, 8]
    assert cluster.levels == ("leaf", "spine")
    meet = cluster.node_meet_level()
    assert meet[0, 1] == 1 and meet[0, 2] == 2  # a, b share leaf l0; c is on l1
    c = cluster.node_type_of(2)
    assert (c.gpu_model, c.memory_gb) == ("H100", 80.0)
    assert all(link.provenance == "default" for link in cluster.links.values())
    # every probed node shipped its sysfs view (this machine's NICs)
    assert all(rec["nics"] for rec in inv.records.values())
    assert all("nvml_error" in rec or "nvml" in rec for rec in inv.records.values())


def test_inventory_with_a_supplied_mapping(ray_cluster) -> None:
    from tsched.discovery.ray import inventory

    mapping = {"gpu-a": {"rack": "r1"}, "gpu-b": {"rack": "r2"}, "gpu-c": {"rack": "r2"}}
    inv = inventory(timeout=20, mapping=mapping)
    assert inv.cluster is not None and inv.cluster.levels == ("rack",)
    assert inv.cluster.node_meet_level()[1, 2] == 1


def test_measure_links_one_pair_per_level_both_directions(ray_cluster) -> None:
    from tsched.discovery.ray import inventory, measure_links

    inv = inventory(timeout=20)
    measured, results = measure_links(inv, max_bytes=8 << 20, max_seconds=2.0)
    assert [m.level for m in results] == ["leaf", "spine"]
    for m in results:
        assert m.gbps > 0 and m.rtt_us > 0 and 0 < m.bytes_sent <= 2 * (8 << 20)
        link = measured.links[m.level]
        assert link.provenance == "measured" and link.bandwidth == pytest.approx(m.gbps)
    check_fresh(measured, max_age_s=3600)
    later = dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=2)
    with pytest.raises(Exception, match="measure again"):
        check_fresh(measured, max_age_s=86400, now=later)


def test_nodes_that_do_not_answer_in_time_are_reported(ray_cluster) -> None:
    from tsched.discovery.ray import inventory

    inv = inventory(timeout=0.001)
    assert inv.cluster is None
    assert inv.failed  # every node that had not answered is named, none hidden
    assert all("no answer within" in r or "Unschedulable" in r for r in inv.failed.values())
    assert len(inv.failed) + len(inv.records) == 5
