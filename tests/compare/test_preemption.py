"""tsched.compare.preemption: which victims fair share takes, alone and in a hand-built state."""

from __future__ import annotations

import numpy as np

from tests.compare.sim_helpers import FLAT, job, one_node
from tsched.compare.jobmodel import CollectiveModel
from tsched.compare.preemption import victim_sets
from tsched.compare.simulator import SimConfig, Simulation

SIZES = np.array([4, 4, 4])


def sets(victims, need, per_node, counts, whole_only=True):
    on = [{} for _ in SIZES]
    for r, where in counts.items():
        for node, _c in where:
            on[node][r] = 0
    return list(victim_sets(victims, need, np.array(per_node), counts, on, SIZES, whole_only))


def test_without_compact_admission_the_fairness_orders_prefix_is_the_only_set() -> None:
    counts = {1: [(0, 2)], 2: [(1, 2)], 3: [(2, 4)]}
    assert sets([3, 1, 2], 3, [0, 1, 0], counts, whole_only=False) == [[3]]
    assert sets([1, 2, 3], 3, [0, 0, 0], counts, whole_only=False) == [[1, 2]]


def test_one_node_sets_come_cheapest_first_after_the_prefix() -> None:
    # 3 GPUs: the prefix (job 2) frees them by count, but on node 1, which then has 2; one
    # node's room costs 2 GPUs on node 0 (1 free there already + job 1) or 4 on node 2 (job 3);
    # node 1 never has room (its one victim frees 2)
    counts = {1: [(0, 2)], 2: [(1, 2)], 3: [(2, 4)]}
    assert sets([2, 1, 3], 3, [1, 0, 0], counts) == [[2], [1], [3]]
    # a one-node set equal to the prefix is not tried twice
    assert sets([1, 2, 3], 3, [1, 0, 0], counts) == [[1], [3]]


def test_whole_nodes_are_cleared_only_where_every_job_is_a_victim() -> None:
    # a job of 8 GPUs: node 1 holds a job that may not be preempted (4), so nodes 0 and 2
    counts = {1: [(0, 4)], 2: [(2, 2)], 5: [(2, 2)]}
    on = [{1: 0}, {4: 0}, {2: 0, 5: 0}]
    got = list(victim_sets([2, 1, 5], 8, np.array([0, 0, 0]), counts, on, SIZES, True))
    assert got[0] == [2, 1, 5]  # the prefix frees 8 by count
    assert all(4 not in s for s in got)
    on[2][6] = 0  # a job that is no victim on node 2 too: no whole-node set beyond the prefix
    assert list(victim_sets([2, 1, 5], 8, np.array([0, 0, 0]), counts, on, SIZES, True)) == [
        [2, 1, 5]
    ]


def test_a_tenant_below_its_share_preempts_the_latest_started_job_of_one_above_it() -> None:
    jobs = [job("a1", 0, 2, 10_000, tenant="a"), job("a2", 0, 2, 10_000, tenant="a"),
            job("b", 0, 2, 100, tenant="b")]  # fmt: skip
    cfg = SimConfig(policy="pack", queue="fair", min_runtime=60.0)
    sim = Simulation(jobs, one_node(4), cfg, collective=CollectiveModel(), apps=FLAT)
    sim.start(sim.state[0], np.array([0, 1]), 0.0, now=0.0)
    sim.start(sim.state[1], np.array([2, 3]), 0.0, now=30.0)
    sim.enqueue(2)
    sim.releases.clock = 100.0
    sim.preempt_pass(100.0)
    assert sim.state[1].preemptions == 1 and sim.state[0].preemptions == 0
    assert sim.state[2].gpus is not None and sorted(sim.state[2].gpus.tolist()) == [2, 3]
    assert 1 in sim.queue.keys and 2 not in sim.queue.keys


def test_no_job_inside_its_protection_is_preempted() -> None:
    jobs = [job("a1", 0, 4, 10_000, tenant="a"), job("b", 0, 2, 100, tenant="b")]
    cfg = SimConfig(policy="pack", queue="fair", min_runtime=600.0)
    sim = Simulation(jobs, one_node(4), cfg, collective=CollectiveModel(), apps=FLAT)
    sim.start(sim.state[0], np.array([0, 1, 2, 3]), 0.0, now=0.0)
    sim.enqueue(1)
    sim.preempt_pass(100.0)
    assert sim.state[0].preemptions == 0 and 1 in sim.queue.keys
    sim.preempt_pass(700.0)
    assert sim.state[0].preemptions == 1 and sim.state[1].gpus is not None
