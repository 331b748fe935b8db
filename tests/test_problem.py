from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import small_cluster
from tsched.errors import InputError
from tsched.problem import (
    PlacementProblem,
    check_assignment,
    cost_by_link,
    move_delta,
    objective,
    swap_delta,
    swap_deltas_dense,
)
from tsched.workload import Workload


def dense_objective(problem: PlacementProblem, a: np.ndarray) -> float:
    f = problem.flow_dense()
    d = problem.distance()
    value = float((f * d[np.ix_(a, a)]).sum())
    if problem.linear is not None:
        value += float(problem.linear[np.arange(len(a)), a].sum())
    return value


@st.composite
def qap_instances(draw, symmetric: bool = False, with_diag: bool = True):
    n = draw(st.integers(2, 7))
    m = draw(st.integers(n, n + 3))
    seed = draw(st.integers(0, 2**31))
    rng = np.random.default_rng(seed)
    f = rng.integers(0, 6, (n, n)).astype(float) * (rng.random((n, n)) < 0.6)
    d = rng.integers(0, 9, (m, m)).astype(float)
    if symmetric:
        f, d = f + f.T, d + d.T
    if not with_diag:
        np.fill_diagonal(f, 0)
        np.fill_diagonal(d, 0)
    a = rng.permutation(m)[:n]
    return PlacementProblem.from_qap(f, d), a, rng


@given(qap_instances())
@settings(max_examples=150, deadline=None)
def test_objective_matches_dense_definition(case) -> None:
    problem, a, _ = case
    assert objective(problem, a) == pytest.approx(dense_objective(problem, a))


@given(qap_instances())
@settings(max_examples=150, deadline=None)
def test_swap_and_move_deltas_match_recomputation(case) -> None:
    problem, a, rng = case
    n, m = problem.n_workers, problem.n_locations
    r, s = rng.choice(n, 2, replace=False)
    b = a.copy()
    b[r], b[s] = a[s], a[r]
    expected = objective(problem, b) - objective(problem, a)
    assert swap_delta(problem, a, r, s) == pytest.approx(expected, abs=1e-9)
    free = np.setdiff1d(np.arange(m), a)
    if len(free):
        loc = int(rng.choice(free))
        c = a.copy()
        c[r] = loc
        assert move_delta(problem, a, r, loc) == pytest.approx(
            objective(problem, c) - objective(problem, a), abs=1e-9
        )


@given(qap_instances())
@settings(max_examples=150, deadline=None)
def test_dense_swap_delta_vector_matches_recomputation(case) -> None:
    problem, a, rng = case
    n, m = problem.n_workers, problem.n_locations
    pos = np.concatenate([a, np.setdiff1d(np.arange(m), a)])  # free locations as dummies
    f = np.zeros((m, m))
    f[:n, :n] = problem.flow_dense()
    d = problem.distance()[np.ix_(pos, pos)]
    lin = None
    if problem.linear is not None:
        lin = np.zeros((m, m))
        lin[:n] = problem.linear[:, pos]
    r = int(rng.integers(0, n))
    deltas = swap_deltas_dense(f, d, r, linear_pos=lin)
    base = objective(problem, a)
    for s in range(m):
        p = pos.copy()
        p[r], p[s] = p[s], p[r]
        assert deltas[s] == pytest.approx(objective(problem, p[:n]) - base, abs=1e-9)


def test_cluster_problem_honours_busy_and_constraints() -> None:
    c = small_cluster(busy={"n0": (0, 1)})
    w = Workload.from_edges("w", 3, [(0, 1, 1.0)], gpu_models=("H100",), memory_gb=40)
    p = PlacementProblem.build(c, w)
    assert p.n_locations == 14 and 0 not in p.locations and 1 not in p.locations
    w2 = Workload.from_edges("w", 3, [(0, 1, 1.0)], gpu_models=("A100",))
    p2 = PlacementProblem.build(c, w2)
    assert not p2.feasible and "14 free but not of model A100" in p2.infeasible_reason
    w3 = Workload.from_edges("w", 3, [(0, 1, 1.0)], memory_gb=100)
    assert "under 100 GB" in PlacementProblem.build(c, w3).infeasible_reason


def test_cluster_objective_without_dense_matrix_and_breakdown() -> None:
    c = small_cluster()
    rng = np.random.default_rng(3)
    w = Workload.from_matrix("w", rng.random((10, 10)) * (rng.random((10, 10)) < 0.5))
    p = PlacementProblem.build(c, w)
    a = rng.permutation(16)[:10]
    value = objective(p, a)  # uses pair lookups: no dense matrix cached yet
    assert "distance" not in p._cache
    assert value == pytest.approx(dense_objective(p, a))
    parts = cost_by_link(p, a)
    assert sum(parts.values()) == pytest.approx(value)
    assert set(parts) <= {"nvlink", "leaf", "spine"}


def test_min_pair_distance_on_cluster_and_qap() -> None:
    c = small_cluster(busy={"n0": (0, 1, 2), "n1": (0, 1, 2), "n2": (0, 1, 2), "n3": (0, 1, 2)})
    w = Workload.from_edges("w", 2, [(0, 1, 1.0)])
    p = PlacementProblem.build(c, w)  # one free GPU per node: no two share a node
    assert p.min_pair_distance() == pytest.approx(1 / 50)
    q = PlacementProblem.from_qap(np.ones((2, 2)), np.array([[9, 3], [4, 9]]))
    assert q.min_pair_distance() == 3


@pytest.mark.parametrize(
    ("assignment", "message"),
    [
        ([0, 1], r"expected 3 locations"),
        ([0, 1, 1], r"location 1 is used by more than one"),
        ([0, 1, 99], r"assignment\[2\]: location 99 out of range"),
        ([0.0, 1.0, 2.0], r"expected integer location indices"),
    ],
)
def test_check_assignment(assignment, message) -> None:
    p = PlacementProblem.from_qap(np.ones((3, 3)), np.ones((4, 4)))
    with pytest.raises(InputError, match=message):
        check_assignment(p, np.array(assignment))


def test_qap_matrix_errors() -> None:
    with pytest.raises(InputError, match=r"flow matrix must be square"):
        PlacementProblem.from_qap(np.ones((2, 3)), np.ones((3, 3)))
    with pytest.raises(InputError, match=r"distance matrix has NaN"):
        PlacementProblem.from_qap(np.ones((2, 2)), np.array([[0, np.nan], [1, 0]]))


@given(qap_instances())
@settings(max_examples=60, deadline=None)
def test_basic_bound_never_above_brute_force(case) -> None:
    from tests.conftest import brute_force
    from tsched.solvers.bounds import basic_bound

    problem, _, _ = case
    if problem.n_workers > 6:
        return
    optimum, _ = brute_force(problem)
    bound = basic_bound(problem)
    assert bound is not None and bound <= optimum + 1e-9
