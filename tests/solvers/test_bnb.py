from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import linear_sum_assignment

import tsched
from tests.conftest import QAPLIB, brute_force
from tsched.formats.qaplib import read_dat
from tsched.problem import PlacementProblem
from tsched.solvers import _bnb_kernel as kernel
from tsched.solvers.bnb import reference_branch_and_bound


@given(st.integers(1, 7), st.integers(0, 3), st.integers(0, 2**31))
@settings(max_examples=60, deadline=None)
def test_hungarian_matches_scipy_and_duals_are_feasible(rows, extra, seed) -> None:
    rng = np.random.default_rng(seed)
    cost = rng.random((rows, rows + extra)) * 10
    value, row_to_col, u, v = kernel.hungarian(cost, rows, rows + extra)
    r, c = linear_sum_assignment(cost)
    assert value == pytest.approx(cost[r, c].sum())
    assert sorted(row_to_col) == sorted(set(row_to_col))
    assert np.all(cost - u[:, None] - v[None, :] >= -1e-9)  # dual feasible
    assert np.all(v <= 1e-12)  # column prices never positive (rectangular case)
    assert u.sum() + v.sum() == pytest.approx(value)


@given(st.integers(3, 7), st.integers(0, 2), st.integers(0, 2**31))
@settings(max_examples=30, deadline=None)
def test_kernel_equals_reference_and_brute_force(n, extra, seed) -> None:
    rng = np.random.default_rng(seed)
    f = rng.integers(0, 9, (n, n)) * (rng.random((n, n)) < 0.7)
    d = rng.integers(0, 9, (n + extra, n + extra))
    problem = PlacementProblem.from_qap(f, d)
    optimum, _ = brute_force(problem)
    ref_value, ref_perm = reference_branch_and_bound(problem)
    result = tsched.solve(problem, method="bnb")
    assert ref_value == pytest.approx(optimum)
    assert result.status == "optimal" and result.objective == pytest.approx(optimum)
    assert result.bound == pytest.approx(optimum)


@pytest.mark.parametrize(
    ("name", "optimum"), [("nug12", 578), ("chr12a", 9552), ("had12", 1652), ("scr12", 31410)]
)
def test_qaplib_proved(name: str, optimum: int) -> None:
    inst = read_dat(QAPLIB / "instances" / f"{name}.dat")
    result = tsched.solve_qap(inst.flow, inst.distance, method="bnb", time_limit=120)
    assert result.status == "optimal" and result.objective == optimum
    assert result.bound == optimum and result.gap == 0
    assert result.stats["kernel"] in ("numba", "python")


def test_time_limit_returns_bound_and_gap() -> None:
    inst = read_dat(QAPLIB / "instances" / "tai20a.dat")
    result = tsched.solve_qap(inst.flow, inst.distance, method="bnb", time_limit=1.0)
    assert result.status == "feasible" and result.wall_time < 5
    assert 0 < result.bound <= 703482 <= result.objective
    assert 0 < result.gap < 1


def test_hint_is_used_as_incumbent() -> None:
    inst = read_dat(QAPLIB / "instances" / "nug12.dat")
    sol = np.array([12, 7, 9, 3, 4, 8, 11, 1, 5, 6, 10, 2]) - 1  # the optimum from nug12.sln
    result = tsched.solve_qap(inst.flow, inst.distance, method="bnb", options={"hint": sol})
    assert result.status == "optimal" and result.objective == 578
