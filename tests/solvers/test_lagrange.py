"""The Lagrangian bound: the levels coupled through their pairs (valid, and what it proves)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tsched
from tests.conftest import check_lagrangian_bound, fabric
from tsched.problem import PlacementProblem
from tsched.solvers.bounds import nested_bound, packing_bound, partition_bound
from tsched.solvers.bounds.lagrange import lagrangian_bound
from tsched.workload import Workload


@given(st.integers(0, 2**31), st.integers(3, 5))
@settings(max_examples=60, deadline=None)
def test_lagrangian_bound_never_exceeds_the_optimum(seed, n) -> None:
    """Traffic of three weights (so the multipliers have classes to move) on two or three
    nodes of 2–3 free GPUs, two to a leaf: node and leaf cuts both cost, and the bound with
    its searched multipliers stays at or below the optimum found by enumeration."""
    rng = np.random.default_rng(seed)
    nodes = int(rng.integers(2, 4))
    cluster = fabric(nodes, 2, gpus=3)
    busy = {f"n{i}": [0] for i in range(nodes) if rng.random() < 0.4}
    cluster = cluster.with_busy(busy)
    f = rng.choice([0.0, 1.0, 2.0, 5.0], size=(n, n), p=[0.4, 0.3, 0.2, 0.1])
    np.fill_diagonal(f, 0)
    problem = PlacementProblem.build(cluster, Workload.from_matrix("w", f))
    check_lagrangian_bound(problem)


def test_lagrangian_bound_proves_the_fragmented_moe_job() -> None:
    """TP2·EP8·DP2 on a fragmented 64-GPU fabric (a whole and a half-free node per leaf): the
    packing, partition and nested bounds price a spine split between the replicas and nodes
    that hold whole expert columns of both, which no plan has (72.109 against 73.681). Moving
    part of the data-parallel pairs' node saving to the spine level makes both levels price
    the spread a plan has, and the bound meets the plan."""
    from benchmarks.clusters import fabric as leaf_spine
    from benchmarks.clusters import fragment, job

    problem = PlacementProblem.build(fragment(leaf_spine(8, 2, 2), 12), job(2, 1, 2, ep=8))
    plan = tsched.solve(problem, method="hierarchical", seed=0)  # no deadline: one plan anywhere
    separate = max(packing_bound(problem), partition_bound(problem), nested_bound(problem))
    assert separate < plan.objective * (1 - 0.01)
    value = lagrangian_bound(problem, seconds=60)
    assert value is not None
    assert value == pytest.approx(plan.objective, rel=1e-9)


def test_auto_proves_the_fragmented_moe_job_with_it() -> None:
    """``auto`` runs the bound before its final exact model, says so in its steps, and
    returns the plan as proved optimal, the bound's source named."""
    from benchmarks.clusters import fabric as leaf_spine
    from benchmarks.clusters import fragment, job

    problem = PlacementProblem.build(fragment(leaf_spine(8, 2, 2), 12), job(2, 1, 2, ep=8))
    out = tsched.solve(problem, method="auto", seed=0, time_limit=30)
    assert out.status == "optimal"
    assert out.stats["bound_source"] == "lagrangian"
    stages = [row["method"] for row in out.stats["auto_steps"]]
    assert "lagrangian" in stages
