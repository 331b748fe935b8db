"""tsched.compare.queues: fair share's order and backfilling, on hand-built replay states."""

from __future__ import annotations

import numpy as np
import pytest

from tests.compare.sim_helpers import FLAT, job, one_node
from tsched.compare.jobmodel import CollectiveModel
from tsched.compare.simulator import SimConfig, Simulation


def blocked(slack: float = 0.0, reservation: str | None = None, waiting=(1, 2, 3)) -> Simulation:
    """One 4-GPU node: a 2-GPU job runs until 100 s; the head wants all 4 GPUs (100 s of
    work); behind it a 2-GPU job of 50 s and one of 200 s (``waiting``: those queued)."""
    jobs = [job("run", 0, 2, 100), job("head", 1, 4, 100), job("short", 2, 2, 50),
            job("long", 3, 2, 200)]  # fmt: skip
    cfg = SimConfig(policy="pack", queue="backfill", slack=slack, reservation=reservation)
    sim = Simulation(jobs, one_node(4), cfg, collective=CollectiveModel(), apps=FLAT)
    sim.start(sim.state[0], np.array([0, 1]), 0.0, now=0.0)
    for k in waiting:
        sim.enqueue(k)
    sim.releases.clock = 3.0
    return sim


@pytest.mark.parametrize("reservation", ["count", "topology"])
def test_easy_starts_only_what_ends_before_the_heads_reservation(reservation) -> None:
    sim = blocked(reservation=reservation)
    sim.backfill(3.0)
    assert sim.state[2].gpus is not None  # short ends at 53 s, before the head's 100 s
    assert sim.state[3].gpus is None  # long would hold the head's GPUs until 203 s
    assert sim.queue.head() == 1


def test_relaxed_backfilling_lets_the_head_slip_by_its_slack() -> None:
    # slack 1.1: the head may start as late as 100 + 1.1 × 100 = 210 s; long ends at 203 s
    sim = blocked(slack=1.0, waiting=(1, 3))
    sim.backfill(3.0)
    assert sim.state[3].gpus is None  # 200 s late is more than 1.0 × 100
    sim = blocked(slack=1.1, waiting=(1, 3))
    sim.backfill(3.0)
    assert sim.state[3].gpus is not None
    assert sim.deadlines[1] == pytest.approx(210.0)
    # the bound is fixed when the job first heads the queue
    assert sim.relaxed(sim.state[1], 150.0) == pytest.approx(210.0)
    assert sim.relaxed(sim.state[1], 400.0) == 400.0


def test_fair_share_starts_the_tenant_furthest_below_its_share_first() -> None:
    jobs = [job("a-run", 0, 2, 1_000, tenant="a"), job("a-wait", 1, 2, 100, tenant="a"),
            job("b-wait", 2, 2, 100, tenant="b")]  # fmt: skip
    cfg = SimConfig(policy="pack", queue="fair", budgets={"a": 1.0, "b": 1.0})
    sim = Simulation(jobs, one_node(4), cfg, collective=CollectiveModel(), apps=FLAT)
    sim.start(sim.state[0], np.array([0, 1]), 0.0, now=0.0)
    sim.enqueue(1)
    sim.enqueue(2)
    assert sim.shares(10.0) == {"a": 0.5, "b": 0.5}
    ratios = sim.tenant_ratios(10.0)
    assert ratios["a"] > ratios["b"] == 0.0
    sim.fair_pass(10.0)
    assert sim.state[2].gpus is not None and sim.state[1].gpus is None  # b first: room for one
