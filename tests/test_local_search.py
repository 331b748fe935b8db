"""Tabu search and annealing kernels: O(1) delta updates against recomputation, quality."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import QAPLIB, moe_problem
from hypothesis import given, settings
from hypothesis import strategies as st

import tsched
from tsched.formats.qaplib import read_dat
from tsched.problem import PlacementProblem, objective
from tsched.solvers import _local_kernel as kernel


def random_case(seed: int, n: int, k: int):
    rng = np.random.default_rng(seed)
    f = np.zeros((k, k))
    f[:n, :n] = rng.integers(0, 9, (n, n)) * (rng.random((n, n)) < 0.6)
    np.fill_diagonal(f, 0)
    d = rng.integers(0, 9, (k, k)).astype(float)  # asymmetric, non-zero diagonal
    lin = np.zeros((k, k))
    lin[:n] = rng.integers(0, 5, (n, k))
    return f, d, lin


@given(st.integers(0, 2**31), st.integers(2, 7), st.integers(0, 3), st.integers(1, 6))
@settings(max_examples=60, deadline=None)
def test_delta_matrix_update_matches_recomputation(seed, n, dummies, moves) -> None:
    k = n + dummies
    f, d, lin = random_case(seed, n, k)
    rng = np.random.default_rng(seed + 1)
    perm = rng.permutation(k).astype(np.int64)
    delta = kernel.delta_matrix(f, d, lin, perm)
    for _ in range(moves):
        u, v = sorted(rng.choice(k, 2, replace=False))
        before = kernel.cost(f, d, lin, perm)
        assert delta[u, v] == pytest.approx(kernel.swap_delta(f, d, lin, perm, u, v))
        perm[u], perm[v] = perm[v], perm[u]
        assert kernel.cost(f, d, lin, perm) - before == pytest.approx(
            kernel.swap_delta(f, d, lin, perm, u, v) * -1
        )
        kernel._update(f, d, lin, perm, delta, u, v, n)
        fresh = kernel.delta_matrix(f, d, lin, perm)
        real = np.triu(np.ones((k, k), dtype=bool), 1)
        real[n:, n:] = False
        assert np.allclose(delta[real], fresh[real])


def test_swap_delta_matches_problem_objective() -> None:
    rng = np.random.default_rng(4)
    problem = PlacementProblem.from_qap(rng.integers(0, 9, (6, 6)), rng.integers(0, 9, (6, 6)))
    f = problem.flow_dense()
    lin = problem.linear if problem.linear is not None else np.zeros((6, 6))
    perm = rng.permutation(6).astype(np.int64)
    assert kernel.cost(f, problem.distance(), lin, perm) == pytest.approx(objective(problem, perm))


@pytest.mark.parametrize("method", ["tabu", "anneal"])
def test_reaches_nug12_optimum(method: str) -> None:
    inst = read_dat(QAPLIB / "instances" / "nug12.dat")
    result = tsched.solve_qap(
        inst.flow, inst.distance, method=method, seed=0, options={"iterations": 20_000}
    )
    assert result.objective <= 578 * 1.02


@pytest.mark.parametrize("method", ["tabu", "anneal"])
def test_improves_greedy_on_moe_traffic(method: str) -> None:
    problem = moe_problem()
    greedy = tsched.solve(problem, method="greedy")
    result = tsched.solve(problem, method=method, seed=0, options={"iterations": 5000})
    assert result.objective <= greedy.objective
    assert result.bound <= result.objective


def test_tenure_option_is_checked() -> None:
    from tsched.errors import InputError

    inst = read_dat(QAPLIB / "instances" / "nug12.dat")
    r = tsched.solve_qap(
        inst.flow, inst.distance, method="tabu", options={"tenure": "10,14", "iterations": 500}
    )
    assert r.objective >= 578
    with pytest.raises(InputError, match=r"option tenure='x' must be two integers"):
        tsched.solve_qap(inst.flow, inst.distance, method="tabu", options={"tenure": "x"})


@pytest.mark.parametrize("method", ["tabu", "anneal"])
def test_same_seed_same_result_under_an_iteration_budget(method: str) -> None:
    inst = read_dat(QAPLIB / "instances" / "tai20a.dat")
    runs = [
        tsched.solve_qap(
            inst.flow, inst.distance, method=method, seed=3, options={"iterations": 3000}
        )
        for _ in range(2)
    ]
    assert np.array_equal(runs[0].assignment, runs[1].assignment)


@given(st.integers(0, 2**31), st.integers(2, 9), st.integers(0, 4))
@settings(max_examples=60, deadline=None)
def test_dense_delta_matrix_matches_the_kernel(seed, n, dummies) -> None:
    from tsched.solvers.tabu import dense_delta_matrix

    k = n + dummies
    f, d, lin = random_case(seed, n, k)
    perm = np.random.default_rng(seed + 2).permutation(k).astype(np.int64)
    fast = dense_delta_matrix(f, d, lin, perm, n)
    slow = kernel.delta_matrix(f, d, lin, perm, n)
    assert np.allclose(fast, slow, atol=1e-9 * max(1.0, np.abs(slow).max()))


@given(st.integers(0, 2**31), st.integers(2, 7), st.integers(0, 3), st.integers(1, 6))
@settings(max_examples=60, deadline=None)
def test_row_contiguous_update_matches_the_reference(seed, n, dummies, moves) -> None:
    """The tabu kernel's fast update (fᵀ and the permuted distances kept current) gives the
    same delta matrix as the reference ``_update``."""
    k = n + dummies
    f, d, lin = random_case(seed, n, k)
    rng = np.random.default_rng(seed + 3)
    perm = rng.permutation(k).astype(np.int64)
    ref = kernel.delta_matrix(f, d, lin, perm, n)
    fast = ref.copy()
    ft = f.T.copy()
    p = d[np.ix_(perm, perm)].copy()
    pt = p.T.copy()
    for _ in range(moves):
        u, v = sorted(rng.choice(n if dummies == 0 else k, 2, replace=False))
        if u >= n:
            continue
        perm[u], perm[v] = perm[v], perm[u]
        kernel._exchange_rows_cols(p, u, v)
        kernel._exchange_rows_cols(pt, u, v)
        assert np.array_equal(p, d[np.ix_(perm, perm)])
        kernel._update(f, d, lin, perm, ref, u, v, n)
        kernel._update_rows(f, ft, p, pt, lin, perm, fast, u, v, n)
        real = np.triu(np.ones((k, k), dtype=bool), 1)
        real[n:, n:] = False
        assert np.allclose(fast[real], ref[real])
