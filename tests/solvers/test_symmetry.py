"""Symmetry of the traffic: verified orbits, and the densest-subgraph searches that use them."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import fabric
from tsched.problem import PlacementProblem
from tsched.solvers.bounds import densest_weights
from tsched.solvers.bounds.symmetry import is_automorphism, worker_orbits
from tsched.workload import Layout, ModelSpec, PoolSpec, ServingSpec, Workload

DENSE = ModelSpec(params_b=8, hidden=4096, layers=32, seq_len=8192, micro_batches=8)
MOE = ModelSpec(
    params_b=47, hidden=4096, layers=32, seq_len=4096, micro_batches=8, experts=8, top_k=2,
    expert_params_b=45,
)  # fmt: skip


def _problem(workload: Workload) -> PlacementProblem:
    return PlacementProblem.build(fabric(8, per_leaf=2), workload)


def _brute(a: np.ndarray, size: int) -> float:
    return max(
        (float(a[np.ix_(c, c)].sum()) / 2 for c in itertools.combinations(range(len(a)), size)),
        default=0.0,
    )


def _layout(tp: int, pp: int, dp: int, ep: int = 1) -> Workload:
    model = MOE if ep > 1 else DENSE
    return Workload.from_layout("job", Layout(tp=tp, pp=pp, dp=dp, ep=ep), model)


def _same_rows(problem: PlacementProblem, orbit: np.ndarray) -> bool:
    """Workers of one orbit have the same sorted traffic (a necessary sign of symmetry)."""
    a = problem.flow_symmetric().toarray()
    rows = np.sort(a, axis=1)
    return all(np.allclose(rows[orbit == k], rows[orbit == k][0]) for k in np.unique(orbit))


def test_a_ring_layout_is_one_orbit_and_a_pipeline_pairs_its_stages() -> None:
    ring = _problem(_layout(2, 1, 4))
    assert worker_orbits(ring).max() == 0
    chain = _problem(_layout(1, 4, 2))  # PP 4: the end stages and the middle ones
    orbit = worker_orbits(chain)
    grid = Layout(tp=1, pp=4, dp=2).rank_grid()  # [tp, cp, ep, dp, pp]
    stage = np.empty(8, dtype=np.int64)
    stage[grid.ravel()] = np.indices(grid.shape)[4].ravel()
    assert orbit.max() + 1 == 2
    assert len(set(orbit[np.isin(stage, (0, 3))])) == 1
    assert len(set(orbit[np.isin(stage, (1, 2))])) == 1
    assert _same_rows(chain, orbit)


def test_identical_replicas_share_orbits() -> None:
    spec = ServingSpec(decode=PoolSpec(replicas=3, tp=4))
    problem = _problem(Workload.from_serving("pool", spec, DENSE))
    assert worker_orbits(problem).max() == 0


def test_a_declared_layout_whose_traffic_breaks_the_symmetry_is_not_trusted() -> None:
    """The layout's shifts are candidates only: a traffic list that is not invariant under them
    (one pair heavier) keeps its workers apart."""
    base = _layout(2, 1, 4)
    gb = base.gb.copy()
    gb[0] *= 3.0
    skewed = Workload("job", base.workers, base.src, base.dst, gb, layout=base.layout)
    problem = _problem(skewed)
    orbit = worker_orbits(problem)
    assert orbit.max() > 0
    assert _same_rows(problem, orbit)


def test_is_automorphism_checks_weights() -> None:
    a = np.array([[0, 1, 0], [1, 0, 2], [0, 2, 0]], dtype=float)
    import scipy.sparse as sp

    graph = sp.csr_array(a)
    assert is_automorphism(graph, np.array([2, 1, 0])) is False  # 1 ≠ 2
    assert is_automorphism(graph, np.array([0, 1, 2])) is True
    assert is_automorphism(sp.csr_array(np.ones((3, 3)) - np.eye(3)), np.array([1, 2, 0]))


@pytest.mark.parametrize(
    "workload",
    [_layout(2, 2, 2), _layout(2, 1, 2, ep=2), _layout(1, 2, 3), _layout(1, 1, 3, ep=4),
     _layout(2, 2, 3)],
    ids=lambda w: w.layout and f"tp{w.layout.tp}-pp{w.layout.pp}-dp{w.layout.dp}-ep{w.layout.ep}",
)  # fmt: skip
def test_densest_weights_with_symmetry_are_exact(workload: Workload) -> None:
    problem = _problem(workload)
    a = problem.flow_symmetric().toarray()
    n = len(a)
    got = densest_weights(problem, min(n, 8))
    brute = [0.0, 0.0] + [_brute(a, s) for s in range(2, min(n, 8) + 1)]
    assert np.allclose(got[: len(brute)], brute)


@given(st.integers(0, 2**31), st.integers(4, 10), st.integers(2, 6))
@settings(max_examples=30, deadline=None)
def test_connected_search_finds_the_heaviest_connected_set(seed: int, n: int, size: int) -> None:
    """ESU enumeration from a fixed vertex, compiled and plain, against brute force over the
    connected sets that hold it; cut short (one visit) it reports that it did not finish."""
    import scipy.sparse as sp
    from scipy.sparse.csgraph import connected_components

    from tsched.solvers import _densest_kernel as kernel

    size = min(size, n)
    rng = np.random.default_rng(seed)
    f = rng.integers(1, 5, (n, n)) * (rng.random((n, n)) < 0.35)
    a = np.triu(f, 1).astype(float)
    a = a + a.T
    graph = sp.csr_array(a)
    allowed = np.ones(n, dtype=bool)
    allowed[0] = False
    best = 0.0
    for rest in itertools.combinations(range(1, n), size - 1):
        members = [0, *rest]
        sub = a[np.ix_(members, members)]
        if connected_components(sp.csr_array(sub), directed=False)[0] == 1:
            best = max(best, float(sub.sum()) / 2)
    known = np.array([_brute(a, r) for r in range(size + 1)])
    args = (graph.indptr.astype(np.int64), graph.indices.astype(np.int64), graph.data)
    plain = getattr(kernel.connected_search, "py_func", kernel.connected_search)
    for fn in (kernel.connected_search, plain):
        value, finished = fn(a, *args, allowed, 0, size, known, 0.0, 10**9)
        assert finished and value == pytest.approx(best)
        if size > 2 and best > 0:
            _, finished = fn(a, *args, allowed, 0, size, known, 0.0, 0)
            assert not finished
