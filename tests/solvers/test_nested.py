"""The nested bound's min-plus programme, its minimiser traced back, and the plan laid on it."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import fabric, mixtral
from tsched.problem import PlacementProblem, objective
from tsched.solvers.bounds.nested import nested_bound, nested_counts, nested_min
from tsched.solvers.hierarchical import hierarchical, spread_locations
from tsched.workload import Layout, Workload

MOE = mixtral()


def _tree(rng: np.random.Generator) -> tuple[list[np.ndarray], np.ndarray]:
    """Live nodes with 1–4 free GPUs in 1–3 leaves of 1–3 nodes, leaves in 1–2 spines."""
    nodes, leaves, spines = [], [], []
    node = leaf = 0
    for spine in range(int(rng.integers(1, 3))):
        for _ in range(int(rng.integers(1, 3))):
            for _ in range(int(rng.integers(1, 4))):
                nodes.append(node)
                leaves.append(leaf)
                spines.append(spine)
                node += 1
            leaf += 1
    chain = [np.array(nodes), np.array(leaves), np.array(spines)]
    return chain, rng.integers(1, 5, size=len(nodes))


def _spent(chain: list[np.ndarray], costs: list[np.ndarray], counts: np.ndarray) -> float:
    """Σ over every domain of every level of its cost at its worker count."""
    total = 0.0
    for level, ids in enumerate(chain):
        for dom in np.unique(ids):
            total += costs[level][int(counts[ids == dom].sum())]
    return total


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**31))
def test_the_traced_counts_attain_the_programmes_minimum(seed: int) -> None:
    """Against enumeration of every count vector: the programme's value is the least total,
    and the counts traced back fit the free GPUs, sum to n and attain it."""
    rng = np.random.default_rng(seed)
    chain, free = _tree(rng)
    n = int(rng.integers(1, free.sum() + 1))
    costs = [rng.random(n + 1) * 10 for _ in chain]
    value = nested_min(chain, free, costs, n)
    counts = nested_counts(chain, free, costs, n)
    assert value is not None and counts is not None
    assert counts.sum() == n and np.all(counts >= 0) and np.all(counts <= free)
    assert np.isclose(_spent(chain, costs, counts), value)
    least = min(
        _spent(chain, costs, np.array(c))
        for c in itertools.product(*(range(int(f) + 1) for f in free))
        if sum(c) == n
    )
    assert np.isclose(value, least)


def test_spread_locations_take_each_nodes_count() -> None:
    cluster = fabric(4, 2).with_busy({"n1": [0, 3], "n2": range(8)})
    job = Workload.from_layout("moe", Layout(tp=2, dp=2, ep=4), MOE)
    problem = PlacementProblem.build(cluster, job)
    nodes, counts = np.array([0, 1, 3]), np.array([3, 6, 7])
    locs = spread_locations(problem, nodes, counts)
    assert len(locs) == 16 and len(np.unique(locs)) == 16
    taken = np.bincount(cluster.gpu_node[problem.locations[locs]], minlength=4)
    assert taken.tolist() == [3, 6, 0, 7]


def _fragmented_moe() -> PlacementProblem:
    """TP2 × EP8 × DP4 (64 workers) on two spines of two leaves of four 8-GPU nodes, each leaf
    with one whole free node and the rest partly busy."""
    busy = {}
    for i in range(16):
        if i % 4:
            busy[f"n{i}"] = list(range(8 - (i % 4) * 2))  # 2, 4 or 6 free
    cluster = fabric(16, 4).with_busy(busy)
    job = Workload.from_layout("moe", Layout(tp=2, dp=4, ep=8), MOE)
    return PlacementProblem.build(cluster, job)


def test_the_decomposition_laid_on_the_bounds_spread_meets_the_bound() -> None:
    """Each leaf has one whole node and partly busy ones; the plan laid on the spread the nested
    bound prices meets that bound (so it is optimal), where the decomposition's own candidate
    sets alone end 30 % above it."""
    problem = _fragmented_moe()
    bound = nested_bound(problem)
    assert bound is not None
    nodes, counts = problem.peek("nested_spread")
    assert counts.sum() == problem.n_workers
    assert problem.cluster is not None
    free = np.bincount(problem.cluster.gpu_node[problem.locations])[nodes]
    assert np.all(counts <= free)
    laid = hierarchical(problem, time_limit=None, seed=0, options={})
    assert laid.stats["locations"] == "the nested bound's spread"
    assert objective(problem, laid.assignment) <= bound * (1 + 1e-9)
    alone = hierarchical(_fragmented_moe(), time_limit=None, seed=0, options={})  # no bound run
    assert objective(problem, alone.assignment) > 1.2 * bound
