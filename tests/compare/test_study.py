"""Studies: load scaling, replicas, size buckets, the ceiling, serial and parallel runs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.compare.rule_helpers import fabric, rule_job, sim
from tsched.compare.runner import parse_policies
from tsched.compare.simulator import SimConfig
from tsched.compare.study import (
    at_load,
    bucket_of,
    offered_load,
    replica,
    window_load,
)
from tsched.errors import InputError


def test_ceiling_equals_every_policy_where_placement_cannot_matter() -> None:
    rng = np.random.default_rng(3)
    c = fabric(nodes_per_leaf=1, leaves=1, gpus=8)  # one node: every placement is the same
    jobs = [rule_job(f"j{k}", float(t), int(g), float(d)) for k, (t, g, d) in
            enumerate(zip(np.sort(rng.uniform(0, 500, 60)), rng.choice([1, 2, 4, 8], 60),
                          rng.uniform(5, 80, 60)))]  # fmt: skip
    ceiling, _ = sim(jobs, c, "best-fit", queue="fifo", stretch=False)
    for policy in ("first-fit", "best-fit", "kai-tas", "slurm-tree", "whole-nodes", "spread",
                   "random", "fgd", "greedy"):  # fmt: skip
        for admission in ("any", "compact"):
            recs, _ = sim(jobs, c, policy, queue="fifo", admission=admission)
            assert [recs[j.name].jct for j in jobs] == pytest.approx(
                [ceiling[j.name].jct for j in jobs]
            ), (policy, admission)


def test_blocked_gpu_hours_count_free_gpus_a_waiting_job_could_use_by_count() -> None:
    c = fabric(nodes_per_leaf=1, leaves=2)
    jobs = [rule_job("a", 0, 3, 3600), rule_job("b", 0, 3, 7200), rule_job("c", 0, 2, 10)]
    _, res = sim(jobs, c, "first-fit", queue="fifo", admission="compact")
    # c (2 GPUs) waits an hour while 2 GPUs (1 + 1) are free
    assert res.blocked_gpu_hours == pytest.approx(2.0)
    # c runs on n0 from 3600 to 3610; n0 is then wholly free until b ends at 7200
    assert res.mean_whole_free_nodes == pytest.approx((7200 - 3610) / 7200)


def test_load_scaling_reaches_the_asked_load() -> None:
    jobs = [rule_job(f"j{k}", k * 100.0, 2, 500.0) for k in range(11)]
    assert offered_load(jobs, 4) == pytest.approx(11 * 2 * 500 / (4 * 1000))
    scaled, factor = at_load(jobs, 4, 0.5)
    assert offered_load(scaled, 4) == pytest.approx(0.5)
    assert factor == pytest.approx(2.75 / 0.5)


def test_window_load_counts_only_the_work_before_the_window_closes() -> None:
    jobs = [
        rule_job("a", 0.0, 2, 500.0),
        rule_job("b", 900.0, 2, 500.0),
        rule_job("late", 1200.0, 4, 50.0),
    ]
    # a: 2 x 500 inside; b: 2 x 100 of its 500 before 1000 s; late arrives after the window
    assert window_load(jobs, 4, 1000.0) == pytest.approx((1000 + 200) / 4000)
    assert offered_load(jobs, 4, 1000.0) == pytest.approx((1000 + 1000 + 200) / 4000)


def test_window_basis_compresses_arrivals_until_the_window_holds_the_load() -> None:
    # long jobs: each runs 10 x the gap between arrivals, so much of the work ends past the window
    jobs = [rule_job(f"j{k}", k * 100.0, 2, 1000.0) for k in range(11)]
    scaled, factor = at_load(jobs, 4, 0.9, basis="window")
    assert window_load(scaled, 4) == pytest.approx(0.9, rel=1e-8)
    offered_factor = at_load(jobs, 4, 0.9)[1]
    assert factor < offered_factor  # compressed further than the offered basis
    assert offered_load(scaled, 4) > 0.9
    # short jobs that end inside the window (closing 100 s after the last arrival): bases agree
    short = [rule_job(f"s{k}", k * 100.0, 2, 10.0) for k in range(11)]
    assert at_load(short, 4, 0.1, 1100.0, "window")[1] == pytest.approx(
        at_load(short, 4, 0.1, 1100.0)[1]
    )
    # however hard the arrivals are compressed, 11 jobs of 2 GPUs hold at most this much of 4
    limit = sum(2 * (1000.0 - k * 100.0) for k in range(11)) / (4 * 1000.0)
    with pytest.raises(InputError, match=f"at most {limit:.3g} of the window"):
        at_load(jobs, 4, limit + 0.01, basis="window")
    with pytest.raises(InputError, match="expected one of offered, window"):
        at_load(jobs, 4, 0.5, basis="busy")


def test_day_block_replicas_keep_each_days_arrivals() -> None:
    day = 86400.0
    jobs = [
        rule_job(f"d{d}-{k}", d * day + k * 600.0, 1, 60.0) for d in range(5) for k in range(d + 1)
    ]
    a, span = replica(jobs, 1, days=3)
    assert span == 3 * day
    # each slot holds one whole source day: its job count is that day's index + 1
    for slot in range(3):
        inside = [j for j in a if slot * day <= j.submit < (slot + 1) * day]
        src = {j.name.split("-")[0] for j in inside}
        assert len(src) == 1 and len(inside) == int(src.pop()[1:]) + 1
    assert replica(jobs, 1, days=3)[0] == a  # a pure function of (trace, index)
    assert any(replica(jobs, k, days=3)[0] != a for k in range(2, 8))  # other seeds differ


def test_size_buckets_are_node_relative() -> None:
    assert bucket_of(np.array([1, 2, 7, 8, 9, 64]), 8).tolist() == [0, 1, 1, 2, 3, 3]
    assert bucket_of(np.array([1, 3, 4, 6]), 4).tolist() == [0, 1, 2, 3]


def _cells():
    from dataclasses import replace as _replace

    from tsched.compare.study import Cell
    from tsched.compare.traces import load_trace

    root = Path(__file__).parents[2]
    jobs = load_trace(root / "tests/data/traces/pollux_workload-6.csv", limit=40)
    path = str(root / "models/clusters/g4dn-12xlarge-16node.yaml")
    cells = [Cell("p", 1.0, r, _replace(cfg, seed=r), cfg.label)
             for cfg in parse_policies("fgd,best-fit", SimConfig(queue="backfill"))
             for r in range(2)]  # fmt: skip
    return jobs, path, cells


def _figures(rows):
    return [(r.policy, r.replica, r.jct_mean, r.jct_p99, np.nan_to_num(r.bucket_jct).tolist())
            for r in rows]  # fmt: skip


def test_study_runs_alike_serially_and_in_a_process_pool() -> None:
    from tsched.compare.study import run_cells

    jobs, path, cells = _cells()
    serial = run_cells(cells, lambda c: jobs, lambda c: path)
    pooled = run_cells(cells, lambda c: jobs, lambda c: path, workers=2)
    assert _figures(serial) == _figures(pooled)
    assert [r.policy for r in serial] == ["fgd", "fgd", "best-fit", "best-fit"]


@pytest.mark.ray
def test_study_runs_alike_on_ray(ray_cluster) -> None:
    from tsched.compare.study import run_cells

    jobs, path, cells = _cells()
    serial = run_cells(cells, lambda c: jobs, lambda c: path)
    remote = run_cells(cells, lambda c: jobs, lambda c: path, use_ray=True)
    assert _figures(serial) == _figures(remote)
