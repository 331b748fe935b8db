"""The comparison runner: policies by name, seeds, serial and Ray sweeps."""

from __future__ import annotations

import pytest

import tsched
from tests.compare.rule_helpers import BUSY, fabric, view
from tests.compare.sim_helpers import FLAT, G4DN, TRACES, job, one_node
from tsched.compare.jobmodel import (
    CollectiveModel,
)
from tsched.compare.placement import (
    place,
)
from tsched.compare.report import pair
from tsched.compare.runner import parse_policies, sweep
from tsched.compare.simulator import SimConfig, simulate
from tsched.compare.traces import TraceJob, load_trace
from tsched.errors import InputError


def test_same_seed_same_records_and_matched_pairing() -> None:
    jobs = load_trace(TRACES / "pollux_workload-6.csv", limit=60)
    c = tsched.load_cluster(G4DN)
    a = simulate(jobs, c, SimConfig(policy="random", seed=3))
    b = simulate(jobs, c, SimConfig(policy="random", seed=3))
    assert a.records == b.records
    g = simulate(jobs, c, SimConfig(policy="greedy"))
    p = pair(g.records, a.records)
    assert p["jobs"] == 60
    assert p["faster_share"] + p["slower_share"] > 0  # random places differently: it shows
    assert pair(g.records, g.records)["jct_ratio_median"] == 1.0
    with pytest.raises(ValueError, match="not matched"):
        pair(g.records, a.records[:-1])


def test_unknown_policy_queue_and_class_are_refused() -> None:
    with pytest.raises(InputError, match="unknown policy 'nope'"):
        parse_policies("greedy,nope")
    with pytest.raises(InputError, match="queue policy 'lifo'"):
        SimConfig(queue="lifo")
    with pytest.raises(InputError, match="workload class 'y' has no job model"):
        simulate([TraceJob("j", 0, 1, 1.0, "y")], one_node(), collective=CollectiveModel(),
                 apps=FLAT)  # fmt: skip
    with pytest.raises(InputError, match="asks for 9 GPUs"):
        simulate([job("j", 0, 9, 1.0)], one_node(), collective=CollectiveModel(), apps=FLAT)
    assert [c.label for c in parse_policies("greedy,greedy+frag")] == ["greedy", "greedy+frag"]


@pytest.mark.ray
def test_ray_sweep_matches_the_serial_sweep(ray_cluster) -> None:
    jobs = load_trace(TRACES / "pollux_workload-6.csv", limit=30)
    c = tsched.load_cluster(G4DN)
    configs = parse_policies("greedy,random")
    serial = sweep(jobs, c, configs, seeds=2)
    remote = sweep(jobs, c, configs, seeds=2, use_ray=True)
    assert [r.config for r in remote] == [r.config for r in serial]
    assert [r.records for r in remote] == [r.records for r in serial]


def test_unknown_rule_and_bad_policy_suffixes_are_refused() -> None:
    c = fabric()
    with pytest.raises(InputError, match="unknown placement rule"):
        place("nope", view(c, BUSY), 1)
    with pytest.raises(InputError, match=r"\+frag applies to solvers"):
        parse_policies("best-fit+frag")
    with pytest.raises(InputError, match="unknown policy"):
        parse_policies("fgd,bogus")
    with pytest.raises(InputError, match="admission"):
        SimConfig(admission="loose")
    with pytest.raises(InputError, match="apply to solvers"):
        SimConfig(policy="fgd", fragmentation_aware=True)
    for bad in ("fgd+slack", "fgd+slack-1", "fgd+slackinf", "fgd+slackx"):
        with pytest.raises(InputError, match=r"\+slack takes a share of the head's run time"):
            parse_policies(bad)
    with pytest.raises(InputError, match="slack must be a finite share"):
        SimConfig(slack=-0.5)


def test_policy_labels_say_what_runs() -> None:
    compact = SimConfig(admission="compact")
    labels = [c.label for c in parse_policies("pack,fgd,fgd+count,best-fit+topo,greedy", compact)]
    assert labels == ["first-fit", "fgd", "fgd+count", "best-fit+topo", "greedy"]
    # under count admission fgd reserves a count, so +count names nothing new
    assert [c.label for c in parse_policies("fgd,fgd+topo")] == ["fgd", "fgd+topo"]
    with pytest.raises(InputError, match="'fgd\\+count' runs as 'fgd', already named as 'fgd'"):
        parse_policies("fgd,fgd+count")
    with pytest.raises(InputError, match="'best-fit' is named twice"):
        parse_policies("best-fit,best-fit")
    with pytest.raises(InputError, match="'first-fit' runs as 'first-fit', already named as"):
        parse_policies("pack,first-fit")
    slack = parse_policies("fgd+slack0.25,best-fit+topo+slack1,fgd+slack0", compact)
    assert [c.label for c in slack] == ["fgd+slack0.25", "best-fit+topo+slack1", "fgd"]
    assert [c.slack for c in slack] == [0.25, 1.0, 0.0]
