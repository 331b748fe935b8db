"""Densest weights of large sets from a layout's fibers: never below the true densest weight
(checked by enumerating every subset), exact on a ring of cliques, and the rack cut they give
checked against an optimum CP-SAT proves without tsched's bounds."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tsched
from tsched.cluster import Cluster, LinkClass, Node, NodeType
from tsched.problem import PlacementProblem, objective
from tsched.solvers.bounds import nested_bound, packing_bound
from tsched.solvers.bounds.densest import densest_weights
from tsched.solvers.bounds.fibers import fiber_weights
from tsched.workload import Layout, ModelSpec, Workload

MOE = ModelSpec(
    params_b=47, expert_params_b=45, hidden=4096, layers=32, seq_len=4096, micro_batches=8,
    experts=12, top_k=2,
)  # fmt: skip
DENSE = ModelSpec(params_b=8, hidden=4096, layers=32, seq_len=8192, micro_batches=8)


def _racks(racks: int, trays: int, busy: dict[str, list[int]] | None = None) -> Cluster:
    """Racks of ``trays`` 4-GPU trays in one NVLink domain (trays and rack on links of equal
    cost), racks joined by a leaf: the rack is the only boundary with a cost."""
    links = {"nv": LinkClass("nv", 900), "rack": LinkClass("rack", 900),
             "leaf": LinkClass("leaf", 50)}  # fmt: skip
    types = {"tray": NodeType("tray", 4, intra="nv")}
    nodes = tuple(
        Node(f"t{i}", "tray", {"rack": f"r{i // trays}", "leaf": "l0"})
        for i in range(racks * trays)
    )
    return Cluster("racks", links, ("rack", "leaf"), types, nodes).with_busy(busy or {})


def _brute_densest(problem: PlacementProblem) -> np.ndarray:
    """``D[s]`` by enumerating every subset (tiny jobs only)."""
    a = problem.flow_symmetric().toarray()
    n = len(a)
    out = np.zeros(n + 1)
    for s in range(2, n + 1):
        out[s] = max(
            0.5 * a[np.ix_(c, c)].sum() for c in map(list, itertools.combinations(range(n), s))
        )
    return out


def test_a_ring_of_expert_cliques_gets_its_exact_densest_weights() -> None:
    """EP3 × DP5 (15 workers): the expert cliques along the data-parallel ring are the fibers,
    and the programme over them is exact for every set size."""
    workload = Workload.from_layout("moe", Layout(ep=3, dp=5), MOE)
    problem = PlacementProblem.build(_racks(2, 4), workload)
    table = fiber_weights(problem, 15)
    assert table is not None and len(table) == 16
    assert table == pytest.approx(_brute_densest(problem), rel=1e-9)


@pytest.mark.parametrize(
    "layout", [Layout(tp=2, pp=4, dp=2), Layout(tp=2, ep=2, dp=3), Layout(tp=1, pp=4, dp=3)]
)
def test_fiber_weights_are_never_below_the_densest_weights(layout: Layout) -> None:
    workload = Workload.from_layout("j", layout, MOE if layout.ep > 1 else DENSE)
    problem = PlacementProblem.build(_racks(2, 4), workload)
    table = fiber_weights(problem, problem.n_workers)
    assert table is not None
    exact = _brute_densest(problem)
    assert np.all(table >= exact - 1e-9 * max(1.0, exact.max()))


@given(st.integers(0, 2**31))
@settings(max_examples=15, deadline=None)
def test_banded_traffic_of_random_weights_is_bounded(seed: int) -> None:
    """An explicit traffic list on a 4 × 3 grid, pairs only inside a row or between neighbouring
    rows (cyclically), random weights: the fibers (rows) bound every densest set from above."""
    rng = np.random.default_rng(seed)
    rows, cols = 4, 3
    edges = []
    for r, c in itertools.product(range(rows), range(cols)):
        u = r * cols + c
        for r2, c2 in itertools.product(range(rows), range(cols)):
            v = r2 * cols + c2
            near = (r2 - r) % rows in (0, 1)
            if v != u and near and rng.random() < 0.6:
                edges.append((u, v, float(rng.uniform(1, 10))))
    workload = Workload.from_edges("banded", rows * cols, edges)
    problem = PlacementProblem.build(_racks(2, 4), workload)
    table = fiber_weights(problem, rows * cols)
    if table is None:  # the pairs drawn admit no grid numbering: nothing is claimed
        return
    exact = _brute_densest(problem)
    assert np.all(table >= exact - 1e-9 * max(1.0, exact.max()))


def test_the_searched_weights_stay_where_they_are_tighter() -> None:
    """Up to the searched sizes the fiber table is never below the exact search's weights, so
    taking the smaller of the two changes nothing there."""
    workload = Workload.from_layout("moe", Layout(ep=4, dp=12), MOE)
    problem = PlacementProblem.build(_racks(4, 6), workload)
    table = fiber_weights(problem, 24)
    exact = densest_weights(problem, 8)
    assert table is not None
    assert np.all(table[:9] >= exact[:9] - 1e-9 * exact.max())
    assert table[:9] == pytest.approx(exact[:9], rel=1e-9)  # a ring of cliques: both exact


def _rack_optimum(problem: PlacementProblem, cluster: Cluster) -> float:
    """The optimum over two racks by enumerating which workers go to the first: inside a rack
    every pair costs the same (trays and rack on equal links), so only the split matters."""
    nodes = cluster.gpu_node[problem.locations]
    rack = np.array([cluster.nodes[int(g)].at["rack"] for g in nodes])
    slots = [np.flatnonzero(rack == r) for r in ("r0", "r1")]
    n = problem.n_workers
    best = np.inf
    for mask in range(1 << n):
        first = np.array([(mask >> i) & 1 for i in range(n)], dtype=bool)
        if first.sum() > len(slots[0]) or (~first).sum() > len(slots[1]):
            continue
        assignment = np.empty(n, dtype=np.int64)
        assignment[first] = slots[0][: first.sum()]
        assignment[~first] = slots[1][: (~first).sum()]
        best = min(best, objective(problem, assignment))
    return float(best)


@pytest.mark.parametrize(
    "busy, layout",
    [
        ({"t0": [0, 1, 2], "t3": [0, 1, 2], "t4": [0, 1]}, Layout(ep=2, dp=6)),
        ({"t0": [0, 1], "t3": [0, 1, 2], "t4": [0, 1, 2]}, Layout(ep=3, dp=4)),
    ],
)
def test_the_rack_cut_of_an_expert_ring_meets_the_optimum(
    busy: dict[str, list[int]], layout: Layout
) -> None:
    """12 workers on two racks of 12 GPUs with 9–10 and 6–7 free: neither rack holds the ring,
    and the racks are larger than the searched sizes (8), so only the fiber weights see what
    each share costs. The packing bound meets the optimum found by enumerating every split."""
    cluster = _racks(2, 3, busy)
    problem = PlacementProblem.build(cluster, Workload.from_layout("moe", layout, MOE))
    optimum = _rack_optimum(problem, cluster)
    bound = packing_bound(problem)
    assert bound is not None and bound <= optimum * (1 + 1e-9)
    assert bound == pytest.approx(optimum, rel=1e-9)
    assert tsched.solve(problem, method="auto", seed=0).status == "optimal"


@given(st.integers(0, 2**31))
@settings(max_examples=10, deadline=None)
def test_bounds_with_fibers_never_exceed_the_optimum(seed: int) -> None:
    """Random busy GPUs on two racks of 12 and a random small layout (rings of expert
    cliques, pipelines): the packing and nested bounds, fiber weights included, stay at or
    below the optimum found by enumerating every split over the racks."""
    rng = np.random.default_rng(seed)
    busy = {}
    for tray in range(6):
        taken = int(rng.choice([0, 0, 1, 2, 3]))
        if taken:
            busy[f"t{tray}"] = sorted(rng.choice(4, taken, replace=False).tolist())
    cluster = _racks(2, 3, busy)
    layouts = [Layout(ep=2, dp=int(rng.integers(3, 7))), Layout(ep=3, dp=int(rng.integers(3, 5))),
               Layout(tp=2, pp=2, dp=3), Layout(tp=1, pp=4, dp=3)]  # fmt: skip
    layout = layouts[int(rng.integers(len(layouts)))]
    workload = Workload.from_layout("j", layout, MOE if layout.ep > 1 else DENSE)
    problem = PlacementProblem.build(cluster, workload)
    if problem.n_workers > problem.n_locations:
        return
    optimum = _rack_optimum(problem, cluster)
    for bound in (packing_bound(problem), nested_bound(problem)):
        assert bound is None or bound <= optimum * (1 + 1e-9)
