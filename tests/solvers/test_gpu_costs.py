"""Per-GPU linear costs (``gpu_costs``): the format, every solver and bound, the LAP path and
independent components planned one after another."""

from __future__ import annotations

import numpy as np
import pytest

import tsched
from tests.conftest import MODELS, brute_force, small_cluster
from tsched.errors import InputError
from tsched.formats.workload_yaml import parse_workload_text, read_workload, write_workload
from tsched.problem import PlacementProblem, cost_by_link, objective
from tsched.solvers.bounds import (
    basic_bound,
    best_bound,
    gilmore_lawler_bound,
    linear_floor,
    profile_bound,
    spectral_bound,
)
from tsched.solvers.registry import solve, solvers
from tsched.workload import GpuCosts, Workload

HEAD = "tsched: workload/v1\nname: w\nworkers: 2\n"


def parse(body: str, base=None) -> Workload:
    return parse_workload_text(HEAD + body, "w.yaml", base=base)


# ---------------------------------------------------------------------- the format
def test_entries_whole_nodes_and_repeats_add_up() -> None:
    w = parse(
        "gpu_costs:\n"
        "  - {worker: 0, node: n1, gpu: 2, seconds: 0.5}\n"
        "  - {worker: 0, node: n1, gpu: 2, seconds: 0.25}\n"
        "  - {worker: 1, node: n3, seconds: -0.1}\n"
    )
    assert w.n_edges == 0
    cl = small_cluster()
    table = w.gpu_costs.table(cl, 2, np.arange(cl.n_gpus))
    assert table[0, 4 + 2] == pytest.approx(0.75) and np.count_nonzero(table[0]) == 1
    assert np.allclose(table[1, 12:16], -0.1) and np.count_nonzero(table[1]) == 4
    # busy GPUs are not locations: their costs are left out, the others keep their columns
    busy = small_cluster({"n1": (0, 1)})
    p = PlacementProblem.build(busy, w)
    assert p.linear.shape == (2, 14) and p.linear[0, 4] == pytest.approx(0.75)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("gpu_costs:\n  - {worker: 2, node: n0, seconds: 1}\n", "gpu_costs[0].worker: 2 is not"),
        ("gpu_costs:\n  - {worker: 0, node: n0, gpu: 0}\n", "missing required key 'seconds'"),
        ("gpu_costs:\n  - {worker: 0, node: n0, seconds: .nan}\n", "finite"),
        ("gpu_costs: []\ngpu_costs_file: c.npy\n", "at most one of gpu_costs, gpu_costs_file"),
        ("gpu_costs_file: c.csv\n", "expected a .npy table"),
        ("gpu_costs_file: missing.npy\n", "file not found"),
    ],
)
def test_bad_costs_are_refused_by_file_and_field(body: str, message: str, tmp_path) -> None:
    with pytest.raises(InputError, match="w.yaml") as err:
        parse(body, base=tmp_path)
    assert message in str(err.value)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("{worker: 0, node: nope, seconds: 1}", "gpu_costs[0].node: cluster 'small' has no node"),
        ("{worker: 0, node: n0, gpu: 4, seconds: 1}", "gpu_costs[0].gpu: node 'n0' has GPUs 0..3"),
    ],
)
def test_costs_are_checked_against_the_cluster(entry: str, message: str) -> None:
    w = parse(f"gpu_costs:\n  - {entry}\n")
    with pytest.raises(InputError) as err:
        PlacementProblem.build(small_cluster(), w)
    assert message in str(err.value) and "w.yaml" in str(err.value)


def test_cost_table_file_round_trips(tmp_path) -> None:
    cl = small_cluster()
    table = np.arange(2 * cl.n_gpus, dtype=float).reshape(2, cl.n_gpus) / 100
    np.save(tmp_path / "c.npy", table)
    w = parse("gpu_costs_file: c.npy\ntraffic:\n  - {src: 0, dst: 1, gb: 1}\n", base=tmp_path)
    p = PlacementProblem.build(cl, w)
    assert np.array_equal(p.linear, table)
    write_workload(w, tmp_path / "out.yaml")
    back = read_workload(tmp_path / "out.yaml")
    assert np.array_equal(PlacementProblem.build(cl, back).linear, table)
    np.save(tmp_path / "narrow.npy", table[:, :5])
    narrow = parse("gpu_costs_file: narrow.npy\n", base=tmp_path)
    with pytest.raises(InputError, match="5 columns but cluster 'small' has 16 GPUs"):
        PlacementProblem.build(cl, narrow)


# ---------------------------------------------------------------------- solvers and bounds
def _mixed_problem(seed: int, n: int = 5) -> PlacementProblem:
    """Traffic that links some workers plus per-GPU costs of both signs, on 8 PCIe GPUs."""
    rng = np.random.default_rng(seed)
    cl = tsched.presets.cluster("pcie-8gpu")
    edges = [(0, 1, 5.0), (1, 0, 5.0), (2, 3, 4.0), (3, 2, 4.0), (1, 2, 1.0)]
    costs = GpuCosts(matrix=rng.uniform(-0.05, 0.2, (n, cl.n_gpus)))
    return PlacementProblem.build(cl, Workload.from_edges("mixed", n, edges, gpu_costs=costs))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_bound_stays_below_the_optimum_with_negative_costs(seed: int) -> None:
    p = _mixed_problem(seed)
    optimum, _ = brute_force(p)
    for bound in (basic_bound, gilmore_lawler_bound, profile_bound, spectral_bound):
        value = bound(p)
        assert value is None or value <= optimum + 1e-9, bound.__name__
    assert best_bound(p)[0] <= optimum + 1e-9
    # the floor is the per-GPU costs' own optimum: below the whole optimum, above row minima
    assert p.linear.min(axis=1).sum() - 1e-12 <= linear_floor(p) <= optimum + 1e-9


@pytest.mark.parametrize("method", [m for m, i in solvers().items() if i.installed()])
def test_every_solvers_plan_and_bound_bracket_the_optimum_and_exact_ones_reach_it(
    method: str,
) -> None:
    p = _mixed_problem(0)
    optimum, _ = brute_force(p)
    r = solve(p, method=method, seed=0, time_limit=5)
    assert r.objective >= optimum - 1e-9 and r.bound <= optimum + 1e-9
    if solvers()[method].exact or method == "auto":
        assert r.status == "optimal" and r.objective == pytest.approx(optimum)


@pytest.mark.parametrize("method", ["greedy", "hierarchical", "tabu", "anneal", "auto", "cpsat"])
def test_searches_follow_the_costs_to_the_cheap_node(method: str) -> None:
    """A TP4 ring whose GPUs cost 1 s everywhere but on n3: every search must end on n3 (the
    traffic alone does not prefer any node)."""
    cl = small_cluster()
    ring = [(i, (i + 1) % 4, 1.0) for i in range(4)]
    entries = [(w, f"n{k}") for w in range(4) for k in range(3)]
    costs = GpuCosts(
        worker=np.array([w for w, _ in entries]),
        node=tuple(n for _, n in entries),
        gpu=np.full(len(entries), -1),
        seconds=np.ones(len(entries)),
    )
    p = PlacementProblem.build(cl, Workload.from_edges("ring", 4, ring, gpu_costs=costs))
    r = solve(p, method=method, seed=0, time_limit=3)
    assert sorted(cl.gpu_node[r.gpus].tolist()) == [3, 3, 3, 3], r.message
    assert cost_by_link(p, r.assignment) == {"nvlink": pytest.approx(4 / 400), "gpu_costs": 0.0}


def test_without_traffic_auto_solves_a_linear_assignment_exactly() -> None:
    w = read_workload(MODELS / "workloads" / "cache-affinity.yaml")
    cl = tsched.presets.cluster("dgx-h100-4node")
    p = PlacementProblem.build(cl, w)
    r = solve(p, seed=0)
    assert (r.status, r.method, r.stats["bound_source"]) == ("optimal", "lap", "linear-assignment")
    # node002 has 6 free GPUs: six of workers 0-7 read locally, two remotely; 8 and 9 locally
    assert r.objective == pytest.approx(6 * 0.01 + 2 * 0.04 + 2 * 0.01)
    nodes = [cl.nodes[k].name for k in cl.gpu_node[r.gpus]]
    assert nodes[8:] == ["node004", "node004"] and nodes[:8].count("node002") == 6
    # the same answer as scipy on the dense table, and as a brute-force-free check: every
    # heuristic is at least as expensive
    assert r.objective <= solve(p, method="greedy", seed=0).objective + 1e-12


def test_components_are_planned_one_after_another_heaviest_first() -> None:
    two = read_workload(MODELS / "workloads" / "two-jobs.yaml")
    # the two jobs plus one worker without traffic
    w = Workload("two-jobs-and-one", 21, two.src, two.dst, two.gb)
    cl = tsched.presets.cluster("dgx-h100-4node")
    p = PlacementProblem.build(cl, w)
    assert [len(c) for c in p.components()] == [8, 12, 1]
    r = solve(p, seed=0, time_limit=8)
    assert r.method == "components" and r.stats["components"] == [8, 12, 1]
    # job A alone fills a node; job B's run alone proves 0.3556 on all GPUs: the parts' bounds
    # add up to the plan, which the bounds of the whole problem (gap 6 %) cannot prove
    assert r.status == "optimal" and r.bound == pytest.approx(r.objective)
    assert best_bound(p)[0] < 0.95 * r.objective
    assert len(set(cl.gpu_node[r.gpus[:8]].tolist())) == 1
    # one plan per component in order (a component whose own best plan was taken is first
    # solved alone on every GPU, for its bound), then the worker without traffic
    plans = [s["stage"].split(" (")[0].split(" and the ")[0] for s in r.stats["auto_steps"]
             if not s["stage"].endswith("for its bound")]  # fmt: skip
    assert plans == ["construction of the whole", "component 1 of 2", "component 2 of 2",
                     "1 workers without traffic"]  # fmt: skip


def test_a_whole_plan_its_bound_proves_is_not_decomposed() -> None:
    cl = tsched.presets.cluster("leaf-spine-64")
    ring = lambda ws, gb: [(a, ws[(k + 1) % len(ws)], gb) for k, a in enumerate(ws)]  # noqa: E731
    edges = ring(list(range(8)), 20.0) + ring(list(range(8, 12)), 5.0) + ring([12, 13], 1.0)
    p = PlacementProblem.build(cl, Workload.from_edges("three-jobs", 15, edges))
    assert [len(c) for c in p.components()] == [8, 4, 2, 1]
    r = solve(p, seed=0, time_limit=5)
    assert (r.method, r.status) == ("greedy", "optimal")
    assert [s["method"] for s in r.stats["auto_steps"]] == ["greedy"]


def test_restrict_keeps_the_sub_problems_objective() -> None:
    p = _mixed_problem(1)
    sub = p.restrict(np.array([2, 3]), np.array([1, 4, 6]))
    a = np.array([2, 0])  # workers 2, 3 on locations 6 and 1
    assert objective(sub, a) == pytest.approx(
        4.0 * p.pair_distance(np.array([6]), np.array([1]))[0] * 2 + p.linear[2, 6] + p.linear[3, 1]
    )
    assert sub.locations.tolist() == p.locations[[1, 4, 6]].tolist()
