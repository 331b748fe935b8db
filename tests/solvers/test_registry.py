"""The shared solver suite: every registered method must pass it.

Heuristics must return valid assignments, a bound never above the true optimum, and never claim
``optimal`` unless the bound proves it; exact methods must equal brute force.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import QAPLIB, brute_force, small_cluster
from tsched.errors import InputError, SolverNotAvailableError
from tsched.formats.qaplib import read_dat
from tsched.problem import PlacementProblem, objective
from tsched.solvers.registry import SolverOutput, register, solve, solvers
from tsched.workload import Layout, ModelSpec, Workload

METHODS = [name for name, info in solvers().items() if info.installed()]
TOL = 1e-9


def random_qap(seed: int, n: int, m: int | None = None) -> PlacementProblem:
    rng = np.random.default_rng(seed)
    m = m or n
    f = rng.integers(0, 10, (n, n)) * (rng.random((n, n)) < 0.7)
    np.fill_diagonal(f, 0)
    pts = rng.random((m, 2)) * 10
    d = np.abs(pts[:, None, :] - pts[None, :, :]).sum(-1).round()
    return PlacementProblem.from_qap(f, d, name=f"rand{seed}")


def small_hier_problem(seed: int) -> PlacementProblem:
    c = small_cluster(busy={"n0": (0, 1), "n2": (1,)}, gpus=2)
    rng = np.random.default_rng(seed)
    f = rng.random((5, 5)) * (rng.random((5, 5)) < 0.5)
    np.fill_diagonal(f, 0)
    return PlacementProblem.build(c, Workload.from_matrix("w", f))


def check_result(problem: PlacementProblem, result, optimum: float | None = None) -> None:
    assert result.status in ("optimal", "feasible"), result
    a = result.assignment
    assert a is not None and len(np.unique(a)) == problem.n_workers
    assert result.objective == pytest.approx(objective(problem, a))
    if result.bound is not None:
        assert result.bound <= result.objective + TOL * max(1, abs(result.objective))
        if optimum is not None:
            assert result.bound <= optimum + TOL * max(1, abs(optimum))
        assert result.gap == pytest.approx(
            0 if result.objective == 0 else (result.objective - result.bound) / result.objective
        )
    if result.status == "optimal" and optimum is not None:
        assert result.objective == pytest.approx(optimum)
    if optimum is not None:
        assert result.objective >= optimum - TOL * max(1, abs(optimum))


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("seed", range(4))
def test_flat_qap_against_brute_force(method: str, seed: int) -> None:
    problem = random_qap(seed, n=6 if seed % 2 else 5, m=7 if seed == 3 else None)
    optimum, _ = brute_force(problem)
    result = solve(problem, method=method, seed=0)
    check_result(problem, result, optimum)
    if solvers()[method].exact:
        assert result.status == "optimal" and result.objective == pytest.approx(optimum)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("seed", range(3))
def test_hierarchical_cluster_against_brute_force(method: str, seed: int) -> None:
    problem = small_hier_problem(seed)
    optimum, _ = brute_force(problem)
    result = solve(problem, method=method, seed=0)
    check_result(problem, result, optimum)
    assert result.plan().assignment[0].node in {"n0", "n1", "n2", "n3"}


@pytest.mark.parametrize("method", METHODS)
def test_qaplib_nug12_valid_and_bounded(method: str) -> None:
    inst = read_dat(QAPLIB / "instances" / "nug12.dat")
    problem = PlacementProblem.from_qap(inst.flow, inst.distance, name="nug12")
    result = solve(problem, method=method, seed=0, time_limit=5)
    check_result(problem, result, optimum=578)


@pytest.mark.parametrize("method", METHODS)
def test_infeasible_instance(method: str) -> None:
    c = small_cluster(busy={"n0": (0, 1, 2, 3), "n1": (0, 1, 2, 3)})
    w = Workload.from_edges("big", 9, [(0, 1, 1.0)])
    result = solve(PlacementProblem.build(c, w), method=method)
    assert result.status == "infeasible" and result.assignment is None
    assert "needs 9 GPUs" in result.message and result.objective is None


@pytest.mark.parametrize("method", METHODS)
def test_tiny_time_limit_still_valid(method: str) -> None:
    problem = random_qap(7, n=40)
    result = solve(problem, method=method, time_limit=0.05, seed=1)
    check_result(problem, result)


@pytest.mark.parametrize("method", METHODS)
def test_same_seed_same_answer(method: str) -> None:
    problem = random_qap(11, n=7, m=9)  # small enough that exact methods finish
    a = solve(problem, method=method, seed=5)
    b = solve(problem, method=method, seed=5)
    assert np.array_equal(a.assignment, b.assignment) and a.objective == b.objective


@pytest.mark.parametrize("method", METHODS)
def test_unknown_option_rejected_with_valid_keys(method: str) -> None:
    with pytest.raises(
        InputError,
        match=rf"method '{method}': unknown option 'bogus' "
        r"\(valid options: .*\)",
    ):
        solve(random_qap(0, 4), method=method, options={"bogus": 1})


def test_unknown_method_lists_valid_ones() -> None:
    with pytest.raises(InputError, match=r"unknown method 'nope' \(valid methods: .*greedy"):
        solve(random_qap(0, 4), method="nope")


@pytest.mark.parametrize("bad", [0, -1, float("nan"), "5"])
def test_bad_time_limit(bad) -> None:
    with pytest.raises(InputError, match="time_limit: must be a positive number"):
        solve(random_qap(0, 4), method="greedy", time_limit=bad)


def test_missing_backend_names_extra() -> None:
    @register(
        "needs-missing", description="test", required_modules=("no_such_module_xyz",), extra="numba"
    )
    def _fn(problem, *, time_limit, seed, options):  # pragma: no cover - never runs
        return SolverOutput(None)

    try:
        with pytest.raises(SolverNotAvailableError, match=r"pip install 'tsched\[numba\]'"):
            solve(random_qap(0, 4), method="needs-missing")
    finally:
        from tsched.solvers.base import unregister

        unregister("needs-missing")


def test_heuristic_never_claims_optimal_without_bound() -> None:
    problem = random_qap(3, n=8)
    optimum, _ = brute_force(problem)
    for method in ("random", "spread", "greedy"):
        r = solve(problem, method=method, seed=2)
        if r.status == "optimal":
            assert r.bound is not None and r.bound == pytest.approx(r.objective)
            assert r.objective == pytest.approx(optimum)


# ---------------------------------------------------------------------- behaviour per method
def test_greedy_keeps_tp_groups_on_nvlink_and_beats_baselines() -> None:
    c = small_cluster(busy={"n0": (0,)}, gpus=8)
    lay = Layout(tp=4, dp=2, pp=2)
    w = Workload.from_layout(
        "w", lay, ModelSpec(params_b=1, hidden=4096, layers=8, seq_len=4096, micro_batches=4)
    )
    p = PlacementProblem.build(c, w)
    greedy = solve(p, method="greedy")
    nodes = c.gpu_node[greedy.gpus]
    for group in lay.groups("tp"):
        assert len(set(nodes[group])) == 1
    for baseline in ("pack", "spread", "random", "kai-tas"):
        assert greedy.objective <= solve(p, method=baseline).objective + 1e-12


def test_pack_spread_kai_tas_shapes() -> None:
    c = small_cluster(busy={"n0": (0, 1, 2)})  # n0 has 1 free, others 4
    w = Workload.from_edges("w", 4, [(0, 1, 1.0)])
    p = PlacementProblem.build(c, w)
    pack = solve(p, method="pack")
    assert [e.node for e in pack.plan().assignment] == ["n0", "n1", "n1", "n1"]
    spread = solve(p, method="spread")
    assert [e.node for e in spread.plan().assignment] == ["n0", "n1", "n2", "n3"]
    kai = solve(p, method="kai-tas", options={"required_level": "leaf", "preferred_level": "node"})
    # fullest leaf that fits 4 is l0 (5 free); inside it the emptiest node first
    assert [e.node for e in kai.plan().assignment] == ["n1"] * 4
    kai = solve(p, method="kai-tas", options={"required_level": "node"})
    assert len({e.node for e in kai.plan().assignment}) == 1
    none = solve(
        PlacementProblem.build(c, Workload.from_edges("w", 5, [])),
        method="kai-tas",
        options={"required_level": "node"},
    )
    assert none.status == "no_solution" and "no node domain has 5 free GPUs" in none.message
    with pytest.raises(
        InputError,
        match=r"required_level='rack' is not a level \(valid: node, "
        r"leaf, spine\)",
    ):
        solve(p, method="kai-tas", options={"required_level": "rack"})


def test_random_depends_on_seed() -> None:
    p = random_qap(2, n=10, m=30)
    a = solve(p, method="random", seed=1).assignment
    b = solve(p, method="random", seed=2).assignment
    assert not np.array_equal(a, b)


def test_greedy_on_qaplib_within_reason() -> None:
    inst = read_dat(QAPLIB / "instances" / "nug12.dat")
    r = solve(PlacementProblem.from_qap(inst.flow, inst.distance), method="greedy")
    assert r.objective <= 578 * 1.10  # construction + swaps: within 10% on nug12


def test_auto_records_its_choice() -> None:
    r = solve(random_qap(1, 6), method="auto")
    assert r.stats["auto_choice"] == r.method and r.stats["auto_reason"]


def test_auto_stops_at_the_asked_gap() -> None:
    from tests.conftest import fabric
    from tsched.errors import InputError
    from tsched.workload import Workload

    rng = np.random.default_rng(3)  # random traffic: no bound meets the first plan
    f = rng.random((40, 40)) * (rng.random((40, 40)) < 0.3)
    np.fill_diagonal(f, 0)
    loose_problem = PlacementProblem.build(fabric(8, 4), Workload.from_matrix("w", f))
    loose = solve(loose_problem, method="auto", seed=0, time_limit=30, options={"gap": 0.5})
    assert 0 < loose.gap <= 0.5 and "within the asked gap 50 %" in loose.message
    assert [s["method"] for s in loose.stats["auto_steps"]] == ["greedy"]
    assert loose.wall_time < 15  # stopped at the gap, long before its limit
    for bad in (-0.1, 1.0, "lots"):
        with pytest.raises(InputError, match="option gap="):
            solve(loose_problem, method="auto", options={"gap": bad})
