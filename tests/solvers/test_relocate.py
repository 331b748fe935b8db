"""Whole-block relocation: split TP groups moved into fewer nodes, priced exactly."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import fabric
from tsched.problem import PlacementProblem, objective
from tsched.solvers.hierarchical import sparse_refine, symmetric_graph
from tsched.solvers.relocate import _block_costs, _destinations, relocate_blocks
from tsched.workload import Layout, ModelSpec, Workload

DENSE = ModelSpec(params_b=13, hidden=5120, layers=40, seq_len=4096, micro_batches=8)


def _nodes(problem: PlacementProblem, assign: np.ndarray) -> np.ndarray:
    assert problem.cluster is not None
    return problem.cluster.gpu_node[problem.locations[assign]]


def _split_plan() -> tuple[PlacementProblem, np.ndarray]:
    """TP8 × DP2 on two leaves of three 8-GPU nodes. Leaf 0's nodes have 3, 3 and 2 GPUs free
    and hold TP group 0 in three pieces; group 1 is whole on node 3; nodes 4 and 5 are free."""
    cluster = fabric(6, 3).with_busy({"n0": range(5), "n1": range(5), "n2": range(6)})
    job = Workload.from_layout("tp8-dp2", Layout(tp=8, dp=2), DENSE)
    problem = PlacementProblem.build(cluster, job)
    node = cluster.gpu_node[problem.locations]
    assign = np.r_[np.flatnonzero(node <= 2), np.flatnonzero(node == 3)]
    return problem, assign


def test_a_group_in_three_pieces_moves_whole_next_to_its_partner() -> None:
    problem, assign = _split_plan()
    assert len(np.unique(_nodes(problem, assign)[:8])) == 3
    moved, count = relocate_blocks(problem, assign, symmetric_graph(problem))
    assert count == 1
    nodes = _nodes(problem, moved)
    assert len(np.unique(nodes[:8])) == 1 and nodes[0] in (4, 5)  # leaf 1, beside group 1
    assert np.array_equal(moved[8:], assign[8:])
    assert objective(problem, moved) < objective(problem, assign)


def test_sparse_refine_gathers_what_exchanges_alone_cannot() -> None:
    """One exchange at a time only cuts the group further: the descent relies on the move."""
    problem, assign = _split_plan()
    refined, _ = sparse_refine(problem, assign)
    assert len(np.unique(_nodes(problem, refined)[:8])) == 1
    assert objective(problem, refined) < objective(problem, assign)


def test_whole_blocks_and_no_room_leave_the_plan_alone() -> None:
    cluster = fabric(2, 2)
    job = Workload.from_layout("tp8-dp2", Layout(tp=8, dp=2), DENSE)
    problem = PlacementProblem.build(cluster, job)
    assign = np.arange(16)
    moved, count = relocate_blocks(problem, assign, symmetric_graph(problem))
    assert count == 0 and np.array_equal(moved, assign)
    # every GPU used: a split block has nowhere to go
    split = np.r_[np.arange(4), np.arange(8, 12), np.arange(4, 8), np.arange(12, 16)]
    moved, count = relocate_blocks(problem, split, symmetric_graph(problem))
    assert count == 0 and np.array_equal(moved, split)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**31))
def test_prices_are_the_objectives_change_and_the_plan_only_improves(seed: int) -> None:
    rng = np.random.default_rng(seed)
    gpus = int(rng.choice([4, 8]))
    nodes = int(rng.integers(4, 9))
    cluster = fabric(nodes, int(rng.integers(2, 4)), gpus=gpus)
    busy = {
        f"n{i}": rng.choice(gpus, int(rng.integers(0, gpus)), replace=False).tolist()
        for i in range(nodes)
        if rng.random() < 0.6
    }
    cluster = cluster.with_busy(busy)
    free = cluster.n_gpus - sum(len(n.busy) for n in cluster.nodes)
    tp = int(rng.choice([2, 4]))
    pp = int(rng.integers(1, 3))
    dp = max(1, min(3, free // (tp * pp)))
    if tp * pp * dp > free:
        return
    job = Workload.from_layout("job", Layout(tp=tp, pp=pp, dp=dp), DENSE)
    problem = PlacementProblem.build(cluster, job)
    if rng.random() < 0.5:  # per-GPU linear costs priced too
        problem = replace(problem, linear=rng.random((problem.n_workers, problem.n_locations)))
    assign = rng.permutation(problem.n_locations)[: problem.n_workers]
    graph = symmetric_graph(problem)
    # every destination's price is the objective's change when it is applied
    node = cluster.gpu_node[problem.locations]
    domain = cluster.level_domains(0)[node]
    used = np.zeros(problem.n_locations, dtype=bool)
    used[assign] = True
    label = np.arange(problem.n_workers) // tp
    for b in range(problem.n_workers // tp):
        members = np.flatnonzero(label == b)
        slots = _destinations(members, assign, used, node, domain, 3)
        if slots is None:
            continue
        delta = _block_costs(problem, graph, members, assign, slots)
        for row, d in zip(slots[:5], delta[:5], strict=False):
            assert len(np.unique(node[row])) <= 2
            after = assign.copy()
            after[members] = row
            assert len(np.unique(after)) == len(after)
            change = objective(problem, after) - objective(problem, assign)
            assert abs(d - change) <= 1e-9 * max(1.0, objective(problem, assign))
    moved, count = relocate_blocks(problem, assign, graph)
    assert len(np.unique(moved)) == len(moved)
    assert objective(problem, moved) <= objective(problem, assign) + 1e-9
    if count:
        assert objective(problem, moved) < objective(problem, assign)
