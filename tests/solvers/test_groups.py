"""The domain-capacity bound: heavy groups that no spread can keep whole, checked against
optima proved by CP-SAT's flat model without tsched's bounds."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tsched
from tests.conftest import fabric
from tsched.problem import PlacementProblem
from tsched.solvers.bounds import best_bound, nested_bound, packing_bound
from tsched.solvers.bounds.groups import heavy_groups
from tsched.workload import Layout, ModelSpec, PoolSpec, ServingSpec, Workload

MODEL = ModelSpec(params_b=8, hidden=4096, layers=32, seq_len=8192, micro_batches=8)


def _flat_optimum(problem: PlacementProblem) -> float:
    """The optimum by CP-SAT's flat (Adams–Johnson) model, proved without tsched's bounds."""
    out = tsched.solve(
        problem, method="cpsat", seed=0, time_limit=60,
        options={"model": "flat", "independent": True},
    )  # fmt: skip
    assert out.status == "optimal"
    return out.objective


def test_heavy_groups_are_the_tp_rings_and_their_least_cut() -> None:
    workload = Workload.from_layout("j", Layout(tp=4, pp=2), MODEL)
    problem = PlacementProblem.build(fabric(4, 2, gpus=4), workload)
    groups = heavy_groups(problem)
    assert groups is not None and (groups.size, groups.count) == (4, 2)
    ring = problem.flow_symmetric().toarray()[:4, :4]
    assert groups.least_cut == pytest.approx(2 * ring[ring > 0].min())


def test_replicas_that_cannot_all_sit_on_whole_nodes_cost_their_splits() -> None:
    """Three TP4 replicas, two whole free nodes and two half-free ones: one replica must be
    split, cutting two edges of its ring; the packing bound sees it and meets the optimum."""
    spec = ServingSpec(decode=PoolSpec(replicas=3, tp=4))
    workload = Workload.from_serving("pool", spec, MODEL)
    cluster = fabric(4, 2, gpus=4).with_busy({"n2": [0, 1], "n3": [0, 1]})
    problem = PlacementProblem.build(cluster, workload)
    optimum = _flat_optimum(problem)
    whole_only = PlacementProblem.build(fabric(4, 2, gpus=4), workload)
    assert optimum > best_bound(whole_only, thorough=True)[0] + 1e-9  # the split costs
    assert packing_bound(problem) == pytest.approx(optimum, rel=1e-9)


@given(st.integers(0, 2**31))
@settings(max_examples=12, deadline=None)
def test_group_bounds_never_exceed_the_optimum(seed: int) -> None:
    """Random partly busy nodes of 4 GPUs, TP4 replicas or TP × PP pipelines: the packing and
    nested bounds (both with the heavy groups' forms) stay at or below the proved optimum."""
    rng = np.random.default_rng(seed)
    nodes = int(rng.integers(3, 5))
    busy = {}
    for k in range(nodes):
        taken = int(rng.choice([0, 0, 1, 2, 3]))
        if taken:
            busy[f"n{k}"] = sorted(rng.choice(4, taken, replace=False).tolist())
    cluster = fabric(nodes, 2, gpus=4).with_busy(busy)
    free = cluster.n_gpus - sum(len(v) for v in busy.values())
    if rng.random() < 0.5:
        replicas = int(min(2, free // 4))
        if replicas < 1:
            return
        spec = ServingSpec(decode=PoolSpec(replicas=replicas, tp=4))
        workload = Workload.from_serving("pool", spec, MODEL)
    else:
        if free < 8:
            return
        workload = Workload.from_layout("j", Layout(tp=int(rng.choice([2, 4])), pp=2), MODEL)
    problem = PlacementProblem.build(cluster, workload)
    if problem.n_workers > problem.n_locations:
        return
    optimum = _flat_optimum(problem)
    for bound in (packing_bound(problem), nested_bound(problem)):
        assert bound is None or bound <= optimum * (1 + 1e-9) + 1e-12


def _node_optimum(problem: PlacementProblem) -> float:
    """The optimum by CP-SAT's worker → node model, proved without tsched's bounds (exact
    here: a node's GPUs are alike)."""
    out = tsched.solve(problem, method="cpsat", seed=0, time_limit=60,
                       options={"independent": True})  # fmt: skip
    assert out.status == "optimal"
    return out.objective


def _split_job(seed: int) -> PlacementProblem | None:
    """A TP × DP job of up to 12 workers (data-parallel rings between the TP groups) on 4–6
    partly busy nodes of 4 GPUs, two or three to a leaf: groups must be split, and half-free
    nodes could keep pairs between groups."""
    rng = np.random.default_rng(seed)
    nodes = int(rng.integers(4, 7))
    busy = {}
    for k in range(nodes):
        taken = int(rng.choice([0, 1, 2, 2, 2, 3]))
        if taken:
            busy[f"n{k}"] = sorted(rng.choice(4, taken, replace=False).tolist())
    cluster = fabric(nodes, int(rng.integers(2, 4)), gpus=4).with_busy(busy)
    free = cluster.n_gpus - sum(len(v) for v in busy.values())
    tp = int(rng.choice([2, 4]))
    dp = int(min(rng.integers(2, 7), free // tp))
    if dp < 2 or tp * dp > 12:
        return None
    problem = PlacementProblem.build(
        cluster, Workload.from_layout("j", Layout(tp=tp, dp=dp), MODEL)
    )
    return problem if problem.n_workers <= problem.n_locations else None


def _nested_with_shares(problem: PlacementProblem, shares: tuple[float, ...]) -> float | None:
    import tsched.solvers.bounds.nested as nested

    fresh = PlacementProblem.build(problem.cluster, problem.workload)  # nothing cached
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(nested, "GROUP_SHARES", shares)
        return nested_bound(fresh)


@given(st.integers(0, 2**31))
@settings(max_examples=16, deadline=None)
def test_group_forms_with_pieces_never_exceed_the_optimum(seed: int) -> None:
    """The nested bound with every share of the pieces form (0 … 1) stays at or below the
    optimum of :func:`_split_job`'s jobs."""
    problem = _split_job(seed)
    if problem is None:
        return
    bound = _nested_with_shares(problem, (0.0, 0.25, 0.5, 0.75, 1.0))
    assert bound is None or bound <= _node_optimum(problem) * (1 + 1e-9) + 1e-12


def test_pieces_form_charges_groups_cut_in_more_than_two() -> None:
    """TP4 × DP3 on six partly busy nodes: counting split groups alone lets half-free nodes
    keep pairs between groups as if each split group had two pieces; charging the pieces
    beyond two raises the nested bound (14.929 → 15.419) towards the optimum (15.782)."""
    problem = _split_job(103)
    assert problem is not None
    alone = _nested_with_shares(problem, (0.0,))
    shared = _nested_with_shares(problem, (0.0, 0.25, 0.5))
    optimum = _node_optimum(problem)
    assert alone is not None and shared is not None
    assert alone * (1 + 1e-3) < shared <= optimum * (1 + 1e-9)
