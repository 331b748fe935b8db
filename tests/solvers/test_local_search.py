"""Tabu search and annealing kernels: O(1) delta updates against recomputation, quality."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tsched
from tests.conftest import QAPLIB, moe_problem
from tsched.formats.qaplib import read_dat
from tsched.problem import PlacementProblem, objective
from tsched.solvers import _local_kernel as kernel


def random_case(seed: int, n: int, k: int, symmetric: bool = False):
    """Flow among n real facilities, distances over k locations, linear costs; asymmetric with
    a non-zero distance diagonal, or symmetric with zero diagonals."""
    rng = np.random.default_rng(seed)
    f = np.zeros((k, k))
    f[:n, :n] = rng.integers(0, 9, (n, n)) * (rng.random((n, n)) < 0.6)
    np.fill_diagonal(f, 0)
    d = rng.integers(0, 9, (k, k)).astype(float)
    np.fill_diagonal(d, rng.integers(1, 9, k))  # non-zero: asymmetric whatever else is drawn
    if symmetric:
        f, d = np.triu(f, 1) + np.triu(f, 1).T, np.triu(d, 1) + np.triu(d, 1).T
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


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"chunk": "0"}, r"option chunk='0' must be a positive integer"),
        ({"chunk": "2.5"}, r"option chunk='2.5' must be a positive integer"),
        ({"jumps": "0.5,0.1"}, r"option jumps='0.5,0.1' must be two fractions 0 < lo <= hi"),
        ({"jumps": "0,0.5"}, r"option jumps='0,0.5' must be two fractions"),
        ({"jumps": "x"}, r"option jumps='x' must be two fractions"),
    ],
)
def test_chunk_and_jumps_options_are_checked(options: dict, message: str) -> None:
    from tsched.errors import InputError

    inst = read_dat(QAPLIB / "instances" / "nug12.dat")
    with pytest.raises(InputError, match=message):
        tsched.solve_qap(inst.flow, inst.distance, method="tabu", time_limit=1, options=options)


def test_chunk_and_jumps_options_set_every_threads_restarts() -> None:
    from tsched.solvers.tabu import RESTARTS, _restarts

    assert _restarts({}, 3) == [RESTARTS[0], RESTARTS[1], RESTARTS[0]]
    assert _restarts({"chunk": "5", "jumps": "0.25,0.5"}, 2) == [(5, (0.25, 0.5))] * 2
    assert _restarts({"jumps": (0.2, 0.3)}, 2) == [(r[0], (0.2, 0.3)) for r in RESTARTS]
    inst = read_dat(QAPLIB / "instances" / "nug12.dat")
    r = tsched.solve_qap(
        inst.flow, inst.distance, method="tabu", time_limit=1,
        options={"chunk": "5", "jumps": "0.25,0.25"},
    )  # fmt: skip
    assert r.objective == 578  # nug12's optimum in a second with the options accepted


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


@given(
    st.integers(0, 2**31), st.integers(2, 8), st.integers(0, 3), st.integers(1, 8), st.booleans()
)
@settings(max_examples=100, deadline=None)
def test_symmetric_and_gram_updates_match_the_reference(seed, n, dummies, moves, sym) -> None:
    """The halved update for symmetric flows and distances (zero diagonals) and the updates
    that take the exchanged facilities' pairs from Gram tables keep the delta matrix of the
    general reference ``_update``, and the tables stay f·pᵀ (and fᵀ·p), dummies and linear
    costs included."""
    from tsched.solvers.tabu import dense_tables, symmetric

    k = n + dummies
    f, d, lin = random_case(seed, n, k, symmetric=sym)
    assert symmetric(f, d) == sym
    rng = np.random.default_rng(seed + 6)
    perm = rng.permutation(k).astype(np.int64)
    ref, gram = dense_tables(f, d, lin, perm, n)
    real = np.triu(np.ones((k, k), dtype=bool), 1)
    real[n:, n:] = False
    assert np.allclose(ref[real], kernel.delta_matrix(f, d, lin, perm, n)[real])
    fast, halved = ref.copy(), ref.copy()
    p = d[np.ix_(perm, perm)].copy()
    pt = p.T.copy()
    a, P = np.empty(k), np.empty(k)
    for _ in range(moves):
        u, v = sorted(rng.choice(k, 2, replace=False))
        if u >= n:  # two dummies: not a move
            continue
        perm[u], perm[v] = perm[v], perm[u]
        kernel._exchange_rows_cols(p, u, v)
        kernel._exchange_rows_cols(pt, u, v)
        kernel._update(f, d, lin, perm, ref, u, v, n)
        if sym:
            kernel._update_sym_gram(f, p, lin, perm, fast, u, v, n, a, P, gram[0])
            kernel._update_sym(f, p, lin, perm, halved, u, v, n, a, P)
            assert np.allclose(halved[real], ref[real])
        else:
            kernel._update_rows_gram(f, f.T.copy(), p, pt, lin, perm, fast, u, v, n, *gram)
        assert np.allclose(fast[real], ref[real])
        assert np.allclose(fast[real], kernel.delta_matrix(f, d, lin, perm, n)[real])
        assert np.allclose(gram[0], f @ p.T)
        assert sym or np.allclose(gram[1], f.T @ p)


@pytest.mark.parametrize("name", ["nug30", "sko42", "esc32a", "lipa30a", "tai20b", "bur26a"])
def test_the_gram_tables_give_the_moves_of_the_sums(name) -> None:
    """On integer tables every delta of both kinds of update is exact: with the Gram tables the
    kernel makes the very moves of the one that sums each exchanged facility's pairs afresh,
    symmetric instances (nug, sko, esc) and others (lipa, tai*b, bur) alike."""
    from tsched.solvers.tabu import dense_tables, kernel_dtype, symmetric

    inst = read_dat(QAPLIB / "instances" / f"{name}.dat")
    f, d = inst.flow.astype(float), inst.distance.astype(float)
    k = len(f)
    lin = np.zeros((k, k))
    sym = symmetric(f, d)
    dtype = kernel_dtype(f, d, lin)
    huge = kernel.INT_HUGE if dtype is np.int32 else kernel.HUGE
    perm = np.random.default_rng(3).permutation(k).astype(np.int64)
    delta, gram = dense_tables(f, d, lin, perm, k, sym)
    assert gram.shape == ((1 if sym else 2), k, k)
    if dtype is np.int32:
        delta, gram = np.rint(delta).astype(dtype), np.rint(gram).astype(dtype)
    tables = [x.astype(dtype) for x in (f, d, lin)]

    def run(table):
        return kernel.tabu_search(
            *tables, perm, k, 4000, k // 2, k, 5 * k * k, 7, -np.inf, delta.copy(), sym,
            np.zeros(1, dtype=np.int64), huge, table,
        )  # fmt: skip

    runs = [run(None), run(gram)]
    assert np.array_equal(runs[0][0], runs[1][0])
    assert runs[0][1] == runs[1][1] == kernel.cost(f, d, lin, runs[0][0])
    assert runs[0][2] == runs[1][2] == 4000


def reference_choice(delta, tabu, perm, rows, recent, stale, current, best):
    """Robust tabu search's choice as one row-major scan reads it (the kernel's first form)."""
    k = len(perm)
    chosen, chosen_r, chosen_s = np.inf, -1, -1
    for r in range(rows):
        for s in range(r + 1, k):
            value = delta[r, s]
            t_rs, t_sr = tabu[r, perm[s]], tabu[s, perm[r]]
            if t_rs < stale and t_sr < stale:
                return r, s
            if value < chosen and (
                not (t_rs >= recent and t_sr >= recent) or current + value < best - 1e-12
            ):
                chosen, chosen_r, chosen_s = value, r, s
    if chosen_r < 0:
        flat = [(delta[r, s], r, s) for r in range(rows) for s in range(r + 1, k)]
        _, chosen_r, chosen_s = min(flat)
    return chosen_r, chosen_s


@given(st.integers(0, 2**31), st.integers(2, 9), st.integers(0, 3))
@settings(max_examples=150, deadline=None)
def test_vectorised_choice_matches_the_row_major_scan(seed, n, dummies) -> None:
    """The branch-free choice (deltas, and each pair's two tabu times as min and max) picks the
    same exchange as the plain scan: forced moves first, aspiration, tabu, ties to the first."""
    rng = np.random.default_rng(seed)
    k = n + dummies
    delta = np.triu(rng.integers(-3, 4, (k, k)).astype(float), 1)
    delta[n:] = 0.0
    tabu = rng.integers(0, 40, (k, k))
    perm = rng.permutation(k).astype(np.int64)
    tmin = np.zeros((k, k))
    tmax = np.zeros((k, k), dtype=np.int32)
    least = min(kernel._mark_pairs_of(tabu, perm, tmin, tmax, w, n) for w in range(k))
    pairs = np.triu(np.ones((k, k), dtype=bool), 1)
    pairs[n:] = False
    assert least == tmax[pairs].min()
    recent = int(rng.integers(0, 45))
    stale = int(rng.choice([-1, int(rng.integers(0, 10))]))
    current, best = 10.0, float(rng.choice([10.0, 8.5, 13.0]))
    slack = best - current - 1e-12
    r, s, value, oldest = kernel._best_move(delta, tmin, tmax, n, recent, stale, slack)
    want = reference_choice(delta, tabu, perm, n, recent, stale, current, best)
    assert (r, s) == want
    assert value == delta[r, s]
    forced = least < stale
    # a whole scan reports the least later tabu time; one stopped at a forced pair does not
    assert oldest == (kernel.HUGE if forced else least)
    if not forced:  # told that no pair is forced, the scan skips that table: the same choice
        assert kernel._best_move(delta, tmin, tmax, n, recent, stale, slack, False)[:2] == want


def reference_tabu(f, d, lin, perm, n_real, moves, tenure, aspiration, sym):
    """The kernel's loop in Python with a fixed tenure, reading all three tables every move
    (no floor): the moves the kernel must make. Returns the best value after every move."""
    k = len(perm)
    perm = perm.copy()
    p = d[np.ix_(perm, perm)].copy()
    pt, ft = p.T.copy(), f.T.copy()
    never = -(k * k) - 1
    tabu = np.full((k, k), never, dtype=np.int32)
    tmin, tmax = np.full((k, k), float(never)), np.full((k, k), never, dtype=np.int32)
    delta = kernel.delta_matrix(f, d, lin, perm, n_real)
    rows = min(k, n_real)
    current = best = kernel.cost(f, d, lin, perm)
    bests = []
    for it in range(1, moves + 1):
        slack = best - current - 1e-12
        r, s, chosen, _ = kernel._best_move(
            delta, tmin, tmax, rows, it - tenure, it - aspiration, slack, True
        )
        tabu[r, perm[r]] = tabu[s, perm[s]] = it
        perm[r], perm[s] = perm[s], perm[r]
        kernel._exchange_rows_cols(p, r, s)
        current += chosen
        if sym:
            kernel._update_sym(f, p, lin, perm, delta, r, s, n_real, np.empty(k), np.empty(k))
        else:
            kernel._exchange_rows_cols(pt, r, s)
            kernel._update_rows(f, ft, p, pt, lin, perm, delta, r, s, n_real)
        for w in (r, s):
            kernel._mark_pairs_of(tabu, perm, tmin, tmax, w, rows)
        best = min(best, current)
        bests.append(best)
    return bests


@pytest.mark.parametrize("sym", [False, True])
@pytest.mark.parametrize("aspiration", [12, 40, 90])
def test_kernel_reads_the_forced_table_only_when_a_pair_may_be_stale(sym, aspiration) -> None:
    """With an aspiration of a few moves, pairs go stale and are forced all along the run: the
    kernel, which skips the table of later tabu times while its floor says no pair is stale,
    makes the moves of a scan of all three tables every move (its best after each move)."""
    n, dummies = 9, 3
    k = n + dummies
    f, d, lin = random_case(11, n, k, symmetric=sym)
    perm = np.random.default_rng(2).permutation(k).astype(np.int64)
    tenure, moves = 3, 150
    want = reference_tabu(f, d, lin, perm, n, moves, tenure, aspiration, sym)
    got = []
    for budget in range(1, moves + 1):
        _, value, made = kernel.tabu_search(
            f, d, lin, perm, n, budget, tenure, tenure, aspiration, 0, -np.inf,
            kernel.delta_matrix(f, d, lin, perm, n), sym, np.zeros(1, dtype=np.int64),
        )  # fmt: skip
        assert made == budget
        got.append(value)
    assert np.allclose(got, want)
    assert len(set(want)) > 3  # the run moves on: forced moves, not a fixed point


def test_symmetric_kernel_follows_the_general_one() -> None:
    """On a symmetric instance the halved arithmetic takes the very same moves."""
    from tsched.solvers.tabu import dense_delta_matrix, symmetric

    inst = read_dat(QAPLIB / "instances" / "nug30.dat")
    f, d = inst.flow.astype(float), inst.distance.astype(float)
    assert symmetric(f, d)
    k = len(f)
    lin = np.zeros((k, k))
    perm = np.random.default_rng(1).permutation(k).astype(np.int64)
    runs = [
        kernel.tabu_search(
            f,
            d,
            lin,
            perm,
            k,
            3000,
            27,
            34,
            5 * k * k,
            7,
            -np.inf,
            dense_delta_matrix(f, d, lin, perm, k),
            sym,
            np.zeros(1, dtype=np.int64),
        )
        for sym in (False, True)
    ]
    assert np.array_equal(runs[0][0], runs[1][0])
    assert runs[0][1] == runs[1][1] == kernel.cost(f, d, lin, runs[0][0])


@given(st.integers(0, 2**31), st.integers(2, 9), st.integers(0, 3), st.booleans())
@settings(max_examples=40, deadline=None)
def test_integer_tables_make_the_float_kernels_moves(seed, n, dummies, sym) -> None:
    """On integer data whose deltas fit, the int32 kernel's every delta is exact: from the same
    start and seed it makes the moves of the float64 kernel (plan, value and move count), with
    flows and distances scaled up to where the delta bound nears its limit."""
    from tsched.solvers.tabu import INT_DELTA_MAX, dense_delta_matrix, kernel_dtype, symmetric

    k = n + dummies
    f, d, lin = random_case(seed, n, k, symmetric=sym)
    rng = np.random.default_rng(seed + 9)
    big = np.sqrt(0.9 * INT_DELTA_MAX / (8 * (k + 6) * 64))  # F·D near the bound's limit
    f, d = f * int(big * rng.uniform(0.5, 1.0)), d * int(big * rng.uniform(0.5, 1.0))
    assert kernel_dtype(f, d, lin) is (np.int32 if kernel.HAVE_NUMBA else np.float64)
    assert symmetric(f, d) == sym
    perm = rng.permutation(k).astype(np.int64)
    delta = dense_delta_matrix(f, d, lin, perm, n)
    runs = []
    for dtype, huge in ((np.float64, kernel.HUGE), (np.int32, kernel.INT_HUGE)):
        f_, d_, lin_ = (x.astype(dtype) for x in (f, d, lin))
        runs.append(
            kernel.tabu_search(
                f_,
                d_,
                lin_,
                perm,
                n,
                300,
                2,
                4,
                5 * k * k,
                seed % 1000,
                -np.inf,
                np.rint(delta).astype(dtype),
                sym,
                np.zeros(1, dtype=np.int64),
                huge,
            )
        )
    assert np.array_equal(runs[0][0], runs[1][0])
    assert runs[0][1] == runs[1][1] == kernel.cost(f, d, lin, runs[0][0])
    assert runs[0][2] == runs[1][2]


@pytest.mark.skipif(not kernel.HAVE_NUMBA, reason="without numba the tables are float64")
def test_the_kernel_tables_are_int32_only_for_integers_that_fit() -> None:
    from tsched.solvers.tabu import kernel_dtype

    inst = read_dat(QAPLIB / "instances" / "nug12.dat")
    f, d = inst.flow.astype(float), inst.distance.astype(float)
    zero = np.zeros_like(f)
    assert kernel_dtype(f, d, zero) is np.int32
    assert kernel_dtype(f * 0.5, d, zero) is np.float64  # fractions
    assert kernel_dtype(f, d, zero + 0.25) is np.float64  # a fractional linear cost
    assert kernel_dtype(f * 10**4, d * 10**3, zero) is np.float64  # deltas may not fit
    assert kernel_dtype(f, d, zero + 2**29) is np.float64  # nor with this linear cost
    result = tsched.solve_qap(inst.flow, inst.distance, method="tabu", options={"iterations": 99})
    assert result.stats["tables"] == "int32"
    half = tsched.solve_qap(f * 0.5, d, method="tabu", options={"iterations": 99})
    assert half.stats["tables"] == "float64"


def test_threads_option_is_checked() -> None:
    from tsched.errors import InputError

    inst = read_dat(QAPLIB / "instances" / "nug12.dat")
    one = tsched.solve_qap(
        inst.flow, inst.distance, method="tabu", options={"threads": 1, "iterations": 500}
    )
    assert "threads" not in one.message
    for bad in ("0", "x", "1.5", -2, 65, 1e400):
        with pytest.raises(InputError, match=r"option threads=.* must be an integer 1\.\.64"):
            tsched.solve_qap(inst.flow, inst.distance, method="tabu", options={"threads": bad})


def test_reaching_the_bound_ends_a_threaded_solve_early() -> None:
    """From a scrambled start on a job whose optimum the bound proves, two threads end the solve
    proved long before its time limit."""
    from tests.conftest import fabric
    from tsched.workload import Layout, ModelSpec, Workload

    model = ModelSpec(params_b=7, hidden=4096, layers=32, seq_len=4096, micro_batches=8)
    problem = PlacementProblem.build(
        fabric(4, 2), Workload.from_layout("j", Layout(tp=4, pp=2, dp=2), model)
    )
    plan = tsched.solve(problem, method="greedy")
    hint = np.random.default_rng(0).permutation(plan.assignment)
    assert objective(problem, hint) > plan.objective
    result = tsched.solve(
        problem, method="tabu", time_limit=60, seed=0, options={"hint": hint, "threads": 2}
    )
    assert result.status == "optimal"
    assert result.objective == pytest.approx(result.bound)
    assert result.wall_time < 20


def test_the_halt_flag_is_set_at_the_target_and_stops_a_search() -> None:
    """The kernel sets the shared flag when it reaches the target, and a search (kernel or
    chunk loop) started under a set flag makes no move: how one thread stops the others."""
    from tsched.solvers.tabu import dense_delta_matrix, run_chunks, subproblem

    inst = read_dat(QAPLIB / "instances" / "nug12.dat")
    f, d = inst.flow.astype(float), inst.distance.astype(float)
    k = len(f)
    lin = np.zeros((k, k))
    perm = np.arange(k, dtype=np.int64)

    def run(halt, target, iterations=20_000):
        return kernel.tabu_search(
            f, d, lin, perm, k, iterations, 10, 14, 5 * k * k, 1, target,
            dense_delta_matrix(f, d, lin, perm, k), True, halt,
        )  # fmt: skip

    halt = np.zeros(1, dtype=np.int64)
    _, value, moves = run(halt, 578.0)  # nug12's optimum
    assert value == 578.0 and 0 < moves < 20_000 and halt[0] == 1
    assert run(halt, 578.0)[2] == 0  # set: no move
    _, _, moves = run(np.zeros(1, dtype=np.int64), -1.0, iterations=300)
    assert moves == 300  # unset and out of reach: the whole budget
    problem = PlacementProblem.from_qap(inst.flow, inst.distance)
    sub = subproblem(problem, np.arange(k), np.arange(0))
    calls = []

    def step(begin, budget, chunk_seed):
        calls.append(budget)
        return begin, 600.0, budget

    run_chunks(sub, step, None, 1000, 0, -1.0, None, np.ones(1, dtype=np.int64))
    assert calls == []


def test_perturbation_grows_with_chunks_without_gain_and_wraps() -> None:
    """Tabu's jumps: an eighth of the real facilities after the first chunk without gain, then
    3 % more a chunk up to a half, then an eighth again; annealing's stay at an eighth."""
    from tsched.solvers.tabu import PERTURB, RESTARTS, perturb_count

    counts = [perturb_count(100, fails, RESTARTS[1][1]) for fails in range(1, 16)]
    assert counts[:3] == [12, 15, 18]
    top = counts.index(max(counts))
    assert counts[top] > 45 and counts[top + 1] == 12  # up to nearly a half, then back
    assert all(b - a == 3 for a, b in zip(counts[:top], counts[1 : top + 1], strict=True))
    assert {perturb_count(100, fails, PERTURB) for fails in range(1, 20)} == {12}
    assert perturb_count(4, 1, RESTARTS[1][1]) == 2  # at least one real exchange pair


def test_chunks_jump_further_without_gain_and_back_after_a_gain() -> None:
    """run_chunks restarts each chunk from the best plan, perturbed more after each chunk
    without gain and by the least again after a gain."""
    from tsched.solvers.tabu import RESTARTS, perturb_count, run_chunks, subproblem

    f, d, lin = random_case(3, 64, 64, symmetric=True)
    problem = PlacementProblem.from_qap(f, d)
    sub = subproblem(problem, np.arange(64), np.arange(0))
    begins: list[np.ndarray] = []

    def step(begin, budget, chunk_seed):
        begins.append(begin.copy())
        gain = len(begins) == 12  # the twelfth chunk improves the best plan
        return begin, (-1e9 if gain else 1e9), 1

    run_chunks(sub, step, 60.0, 20, 0, -np.inf, None, None, 20, RESTARTS[1][1])
    moved = [int((b != np.arange(64)).sum()) for b in begins[1:12]]
    low = perturb_count(64, 1, RESTARTS[1][1])
    assert moved[0] <= 2 * low  # the first jump: at most 2 positions per exchange
    assert max(moved) > 2 * low  # later ones go further
    after = begins[12]  # the gain's plan itself, unperturbed
    assert np.array_equal(after, begins[11])
    assert int((begins[13] != after).sum()) <= 2 * low  # then the least jump again


def test_searches_side_by_side_run_with_one_blas_thread(monkeypatch) -> None:
    """While tabu's searches run in threads, BLAS runs one thread (its spinning workers would
    take the searches' cores), and its own count is back afterwards. BLAS is set to two
    threads first, so that one differs from it on any machine."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    import tsched.solvers.tabu as tabu_module

    def blas() -> set[int]:
        pools = threadpoolctl.threadpool_info()
        return {i["num_threads"] for i in pools if i["user_api"] == "blas"}

    seen: list[set[int]] = []

    def search(*job):
        seen.append(blas())
        return np.arange(3), float(job[0]), 1

    monkeypatch.setattr(tabu_module, "run_chunks", search)
    with threadpoolctl.threadpool_limits(limits=2, user_api="blas"):
        before = blas()
        if before != {2}:
            pytest.skip(f"BLAS threads {before or 'not visible'}: not settable to 2")
        out = tabu_module._in_threads([(1,), (2,)], 2)
        assert [o[1] for o in out] == [1.0, 2.0] and seen == [{1}, {1}]
        assert blas() == before


@given(st.integers(0, 2**31), st.integers(2, 12), st.integers(0, 4))
@settings(max_examples=80, deadline=None)
def test_crossover_keeps_what_the_parents_share(seed, n, dummies) -> None:
    """A child is a permutation; a real facility placed alike in both parents keeps its place;
    twins breed a twin, and parents one exchange apart a copy of one of them."""
    from tsched.solvers.tabu import crossover

    k = n + dummies
    rng = np.random.default_rng(seed)
    a = rng.permutation(k).astype(np.int64)
    b = a.copy()
    moved = rng.choice(n, size=int(rng.integers(0, n + 1)), replace=False)
    b[moved] = a[rng.permutation(moved)]  # b: a with some real facilities' locations shuffled
    child = crossover(a, b, n, rng)
    assert sorted(child.tolist()) == list(range(k))
    same = a[:n] == b[:n]
    assert np.array_equal(child[:n][same], a[:n][same])
    assert np.array_equal(crossover(a, a.copy(), n, rng)[:n], a[:n])
    r, s = rng.choice(n, size=2, replace=False)
    b = a.copy()
    b[[r, s]] = b[[s, r]]  # one exchange apart: the child is one of the two
    child = crossover(a, b, n, rng)[:n]
    assert np.array_equal(child, a[:n]) or np.array_equal(child, b[:n])


def test_the_elite_pool_keeps_the_best_distinct_plans() -> None:
    from tsched.solvers.tabu import Elite

    rng = np.random.default_rng(0)
    pool = Elite(2, n_real=3)
    assert pool.parents(rng) is None
    pool.offer(np.array([0, 1, 2, 3, 4]), 10.0)
    pool.offer(np.array([0, 1, 2, 4, 3]), 9.0)  # the same plan: only dummies differ
    assert pool.parents(rng) is None
    pool.offer(np.array([1, 0, 2, 3, 4]), 8.0)
    pool.offer(np.array([2, 1, 0, 3, 4]), 12.0)  # worse than both kept: not taken
    assert sorted(v for v, _ in pool.plans) == [8.0, 10.0]
    pool.offer(np.array([2, 0, 1, 3, 4]), 9.5)  # replaces the worst
    assert sorted(v for v, _ in pool.plans) == [8.0, 9.5]
    a, b = pool.parents(rng)
    assert not np.array_equal(a[:3], b[:3])


@pytest.mark.parametrize("cross", [0.0, 1.0])
def test_chunks_without_gain_start_from_a_crossover_when_asked(monkeypatch, cross) -> None:
    """With ``cross`` = 1 every chunk without gain, once two plans are kept, starts from a
    child of two of the chunks' results; with 0 none does (jumps from the best instead)."""
    import tsched.solvers.tabu as tabu_module

    k = 16
    problem = PlacementProblem.from_qap(*random_case(5, k, k, symmetric=True)[:2])
    sub = tabu_module.subproblem(problem, np.arange(k), np.arange(0))
    rng = np.random.default_rng(1)
    results: list[np.ndarray] = []
    begins: list[np.ndarray] = []
    children: list[np.ndarray] = []
    real = tabu_module.crossover

    def recorded(a, b, n_real, generator):
        assert any(np.array_equal(a, r) for r in results)
        assert any(np.array_equal(b, r) for r in results)
        children.append(real(a, b, n_real, generator))
        return children[-1]

    def step(begin, budget, chunk_seed):
        begins.append(begin.copy())
        results.append(rng.permutation(k).astype(np.int64))
        return results[-1], 100.0 + len(results), 1  # the first chunk's result stays the best

    monkeypatch.setattr(tabu_module, "crossover", recorded)
    tabu_module.run_chunks(sub, step, 60.0, 12, 0, -np.inf, None, None, 20, (0.125, 0.5), cross)
    assert len(begins) == 12
    if cross:
        assert len(children) == 11  # after the second chunk on: two results kept by then
        assert all(np.array_equal(b, c) for b, c in zip(begins[2:], children[:10], strict=True))
    else:
        assert children == []


def test_cross_option_is_checked() -> None:
    from tsched.errors import InputError
    from tsched.solvers.tabu import CROSS, _cross

    assert _cross(None, 3) == [CROSS[0], CROSS[1], CROSS[0]]
    assert _cross("0.5", 2) == [0.5, 0.5]
    assert _cross("0,1", 3) == [0.0, 1.0, 0.0]
    inst = read_dat(QAPLIB / "instances" / "nug12.dat")
    for bad in ("2", "x", "0.5,-1", ""):
        with pytest.raises(InputError, match=rf"option cross='{bad}' must be fractions 0\.\.1"):
            tsched.solve_qap(inst.flow, inst.distance, method="tabu", options={"cross": bad})
    r = tsched.solve_qap(
        inst.flow, inst.distance, method="tabu", time_limit=1, options={"cross": "1"}
    )
    assert r.objective == 578
