"""nccl-tests output → measured link figures (with age), and plan validation against live state."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace

import pytest

import tsched
from tests.conftest import DATA
from tsched.formats.nccl_tests import (
    apply_measurement,
    check_fresh,
    link_for_run,
    parse_nccl_tests,
)
from tsched.plan import Plan, require_valid, validate_plan

HEADER = (DATA / "nccl-tests" / "all_reduce_perf.template.txt").read_text()


def ranks(hosts: list[str]) -> str:
    return "\n".join(
        f"#  Rank {r:2d} Group  0 Pid  {1000 + r} on {h} device  {r % 8} [0x18] NVIDIA H100"
        for r, h in enumerate(hosts)
    )


def test_parse_and_attribute_to_levels() -> None:
    cluster = tsched.load_cluster("dgx-h100-4node")  # node001/002 on leaf l0, 003/004 on l1
    intra = parse_nccl_tests(HEADER.format(ranks=ranks(["node001"] * 8)))
    assert intra.sizes[-1] == 1073741824 and intra.peak_busbw == pytest.approx(188.89)
    assert link_for_run(cluster, intra) == "nvlink"
    leaf = parse_nccl_tests(HEADER.format(ranks=ranks(["node001"] * 8 + ["node002"] * 8)))
    assert link_for_run(cluster, leaf) == "leaf"
    spine = parse_nccl_tests(HEADER.format(ranks=ranks(["node001"] * 8 + ["node003"] * 8)))
    assert link_for_run(cluster, spine) == "spine"
    measured = apply_measurement(cluster, "leaf", leaf.peak_busbw, "2026-11-01T00:00:00+00:00")
    assert measured.links["leaf"].bandwidth == pytest.approx(188.89)
    assert measured.links["leaf"].provenance == "measured"
    assert measured.links["nvlink"] == cluster.links["nvlink"]


def test_measurements_expire() -> None:
    cluster = apply_measurement(
        tsched.load_cluster("dgx-h100-4node"), "leaf", 40.0, "2026-11-01T00:00:00Z"
    )
    now = dt.datetime(2026, 11, 1, 12, tzinfo=dt.timezone.utc)
    check_fresh(cluster, max_age_s=86400, now=now)
    with pytest.raises(tsched.InputError, match="measured 12.0 h ago"):
        check_fresh(cluster, max_age_s=3600, now=now)


def test_measured_provenance_survives_the_yaml_round_trip(tmp_path) -> None:
    cluster = apply_measurement(
        tsched.load_cluster("dgx-h100-4node"), "spine", 31.5, "2026-11-01T00:00:00+00:00"
    )
    path = tmp_path / "c.yaml"
    tsched.write_cluster(cluster, path)
    again = tsched.read_cluster(path)
    assert again.links["spine"] == cluster.links["spine"]
    bad = path.read_text().replace("provenance: measured", "provenance: guessed")
    path.write_text(bad)
    with pytest.raises(tsched.InputError, match="links.spine.provenance"):
        tsched.read_cluster(path)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("hello\n", "no result rows"),
        (HEADER.format(ranks=""), "no '# Rank N"),
    ],
)
def test_bad_nccl_output(text: str, message: str) -> None:
    with pytest.raises(tsched.InputError, match=message):
        parse_nccl_tests(text, "run.txt")


def test_unknown_host_in_a_run() -> None:
    run = parse_nccl_tests(HEADER.format(ranks=ranks(["elsewhere"] * 2)))
    with pytest.raises(tsched.InputError, match="elsewhere"):
        link_for_run(tsched.load_cluster("dgx-h100-4node"), run)


# ---------------------------------------------------------------------- validation
def _plan() -> tuple[tsched.Cluster, Plan]:
    cluster = tsched.load_cluster("dgx-h100-4node")
    workload = tsched.load_workload("llama3-8b-tp4-pp2-dp2")
    result = tsched.solve(tsched.PlacementProblem.build(cluster, workload), method="greedy")
    return cluster, result.plan()


def test_a_fresh_plan_validates() -> None:
    cluster, plan = _plan()
    assert validate_plan(plan, cluster) == []
    assert plan.assignment[0].gpu_model == "H100" and plan.assignment[0].memory_gb == 80
    require_valid(plan, cluster)


def test_drift_is_reported_per_worker() -> None:
    cluster, plan = _plan()
    first, second = plan.assignment[0], plan.assignment[1]
    busy = cluster.with_busy({first.node: [first.gpu]})
    drift = validate_plan(plan, busy)
    assert [(d.worker, d.reason) for d in drift] == [(0, "GPU is busy")]
    gone = tsched.Cluster(
        cluster.name,
        cluster.links,
        cluster.levels,
        cluster.node_types,
        tuple(n for n in cluster.nodes if n.name != second.node),
    )
    reasons = {d.reason for d in validate_plan(plan, gone)}
    assert reasons == {"node is gone"}
    with pytest.raises(tsched.InputError, match="plan no longer matches"):
        require_valid(plan, gone)
    # the same node names with other GPUs: A100 40 GB
    nt = next(iter(cluster.node_types.values()))
    changed = tsched.Cluster(
        cluster.name,
        cluster.links,
        cluster.levels,
        {nt.name: replace(nt, gpu_model="A100", memory_gb=40)},
        cluster.nodes,
    )
    reasons = {d.reason for d in validate_plan(plan, changed) if d.worker == 0}
    assert reasons == {"model is A100, planned H100", "memory is 40 GB, planned 80 GB"}
