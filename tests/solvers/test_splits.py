"""Components no domain can hold: their candidates, their least cut, and the bound they add."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import check_lagrangian_bound, fabric
from tsched.problem import PlacementProblem
from tsched.solvers.bounds.lagrange import lagrangian_bound
from tsched.solvers.bounds.splits import (
    least_cut,
    oversized_components,
    pieces_cut,
    threshold_components,
)
from tsched.workload import Workload


@given(st.integers(0, 2**31), st.integers(3, 12))
@settings(max_examples=60, deadline=None)
def test_least_cut_is_the_minimum_cut(seed, k) -> None:
    """Against networkx's Stoer–Wagner on the set's own graph built here (members a subset of a
    larger numbering, pairs outside the set ignored, disconnected sets cut for free)."""
    rng = np.random.default_rng(seed)
    n = k + 3
    members = np.sort(rng.choice(n, size=k, replace=False))
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n) if rng.random() < 0.5]
    if not pairs:
        return
    rows = np.array([p[0] for p in pairs])
    cols = np.array([p[1] for p in pairs])
    weights = rng.choice([0.0, 0.5, 1.0, 7.25], size=len(pairs))
    got = least_cut(members, rows, cols, weights)
    g = nx.Graph()
    g.add_nodes_from(members.tolist())
    inside = set(members.tolist())
    for i, j, x in zip(rows.tolist(), cols.tolist(), weights.tolist(), strict=True):
        if i in inside and j in inside and x > 0:
            g.add_edge(i, j, weight=x)
    want = nx.stoer_wagner(g)[0] if nx.is_connected(g) else 0.0
    assert got == pytest.approx(want, rel=1e-9, abs=1e-12)


def test_oversized_components_of_a_ring_of_groups() -> None:
    """Two rings of three pairs (heavy pairs inside a pair, lighter ones around the ring), one
    light pair between the rings; domains of 4: each ring (6 workers) is oversized at the ring
    weight and split in at least two parts, the two together (12) in at least three."""
    rows, cols, w = [], [], []
    for ring in range(2):
        base = 6 * ring
        for g in range(3):
            rows.append(base + 2 * g), cols.append(base + 2 * g + 1), w.append(10.0)
            rows.append(base + 2 * g + 1), cols.append(base + (2 * g + 2) % 6), w.append(2.0)
    rows.append(0), cols.append(6), w.append(0.5)
    cands = oversized_components(
        threshold_components(12, np.array(rows), np.array(cols), np.array(w)), 4
    )
    assert [c.threshold for c in cands] == [2.0, 0.5]
    assert cands[0].parts == (2, 2)
    assert sorted(len(m) for m in cands[0].members) == [6, 6]
    assert cands[1].parts == (3,)
    inside = cands[0].inside(np.array(rows), np.array(cols))
    assert inside.sum() == 12 and not inside[-1]


@given(st.integers(0, 2**31), st.integers(4, 6))
@settings(max_examples=60, deadline=None)
def test_bound_with_splits_never_exceeds_the_optimum(seed, n) -> None:
    """Rings of heavy pairs with light chords on nodes of 2–3 free GPUs (a ring no node holds
    must be cut twice): the bound stays at or below the optimum found by enumeration, with and
    without worker counts, on one costed level (a single leaf) and on two."""
    rng = np.random.default_rng(seed)
    nodes = int(rng.integers(2, 4))
    cluster = fabric(nodes, int(rng.integers(1, 3)), gpus=3)
    busy = {f"n{i}": [0] for i in range(nodes) if rng.random() < 0.4}
    cluster = cluster.with_busy(busy)
    f = rng.choice([0.0, 0.5, 1.0], size=(n, n), p=[0.6, 0.2, 0.2])
    order = rng.permutation(n)
    for a, b in zip(order, np.roll(order, -1), strict=True):
        f[a, b] = f[b, a] = float(rng.choice([3.0, 8.0]))
    f = np.triu(f, 1)
    problem = PlacementProblem.build(cluster, Workload.from_matrix("w", f + f.T))
    check_lagrangian_bound(problem)


def test_a_ring_no_rack_holds_is_cut_twice() -> None:
    """A TP4·PP2·DP10 job on four NVL72 racks of 7 free trays (28 GPUs) each, so that no rack
    holds a pipeline stage (40 workers): pricing each rack on its own lets racks keep whole
    arcs of one stage's data-parallel ring, which no tiling of the two rings has. With the
    stages' least cut the bound rises above the packing bound and is still below a plan."""
    import tsched
    from tests.conftest import nvl72_tp4_pp4_dp8
    from tsched.solvers.bounds import packing_bound
    from tsched.workload import Layout

    base = nvl72_tp4_pp4_dp8()
    cl = base.cluster
    busy = {cl.nodes[i].name: [0, 1, 2, 3] for i in range(72) if i % 18 >= 7}
    job = Workload.from_layout("j", Layout(tp=4, pp=2, dp=10), base.workload.model)
    problem = PlacementProblem.build(cl.with_busy(busy), job)
    plan = tsched.solve(problem, method="hierarchical", seed=0)
    before = packing_bound(problem)
    value = lagrangian_bound(problem, seconds=30)
    assert value is not None
    assert value > before * (1 + 1e-3)
    assert value <= plan.objective * (1 + 1e-9)


def test_pieces_of_four_rings_on_racks_that_tile_two() -> None:
    """Four rings of 17 two-worker blocks (heavy inside a block, two light ranks around the
    ring) on domains that hold 10, 9, 8, 8, 8, 8, 7, 7, 5, 4, 4, 3, 3, 2, 1, 1 blocks: only two
    rings fit in two pieces (10 + 7 and 9 + 8), so ten pieces at least, each ring piece cutting
    two light pairs: 20, where counting each ring alone (two pieces each) gives 16. Splitting
    a block costs 10 more than it could save."""
    rows, cols, w = [], [], []
    for ring in range(4):
        base = 34 * ring
        for b in range(17):
            a, nxt = base + 2 * b, base + 2 * ((b + 1) % 17)
            rows += [a, a, a + 1]
            cols += [a + 1, nxt, nxt + 1]
            w += [10.0, 1.0, 1.0]
    rows, cols, w = np.array(rows), np.array(cols), np.array(w)
    blocks = [10, 9, 8, 8, 8, 8, 7, 7, 5, 4, 4, 3, 3, 2, 1, 1]
    caps = 2 * np.array(blocks) + np.array([1, 0] * 8)  # a free GPU left over in some
    cands = oversized_components(threshold_components(136, rows, cols, w), int(caps.max()))
    rings = next(c for c in cands if c.threshold == 1.0)
    assert [len(b) for b in rings.blocks] == [17] * 4
    assert rings.parts == (2, 2, 2, 2)
    assert pieces_cut(rings, caps, rows, cols, w) == pytest.approx(20.0, rel=1e-5)
    roomy = np.full(8, 18)  # nine blocks each: two pieces per ring (9 + 8) suffice
    assert pieces_cut(rings, roomy, rows, cols, w) == pytest.approx(16.0, rel=1e-5)
