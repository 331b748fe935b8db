"""CP-SAT and MILP models beyond the shared suite: proofs the bounds alone cannot give."""

from __future__ import annotations

import inspect
import json

import numpy as np
import pytest

import tsched
from tests.conftest import MODELS, fabric, moe_problem
from tsched.cli import main
from tsched.errors import InputError
from tsched.problem import PlacementProblem
from tsched.solvers.node_model import hierarchical_view
from tsched.workload import Workload


@pytest.fixture(scope="module")
def unproved_by_bounds() -> PlacementProblem:
    """16 workers of random traffic on 4 nodes: no bound meets greedy's plan, so a search must
    prove the optimum. (Parallel layouts of this size are proved by the partition bound.)"""
    rng = np.random.default_rng(1)
    f = rng.integers(0, 4, (16, 16)) * (rng.random((16, 16)) < 0.3)
    np.fill_diagonal(f, 0)
    problem = PlacementProblem.build(fabric(4, 2), Workload.from_matrix("w", f.astype(float)))
    greedy = tsched.solve(problem, method="greedy")
    assert greedy.status == "feasible" and greedy.gap > 1e-3
    return problem


def test_cpsat_hierarchical_proves_what_bounds_cannot(unproved_by_bounds) -> None:
    r = tsched.solve(unproved_by_bounds, method="cpsat", time_limit=30)
    assert r.status == "optimal" and r.stats["model"] == "hierarchical"
    assert r.stats["cpsat_status"] == "OPTIMAL" and r.gap < 1e-6
    assert r.stats["anytime"] and r.stats["anytime"][-1][1] >= r.objective - 1e-9


@pytest.mark.parametrize("backend", ["highs", "cbc"])
def test_milp_hierarchical_agrees_with_cpsat(unproved_by_bounds, backend: str) -> None:
    cp = tsched.solve(unproved_by_bounds, method="cpsat", time_limit=30)
    mi = tsched.solve(
        unproved_by_bounds, method="milp", time_limit=60, options={"backend": backend}
    )
    assert mi.status == "optimal" and mi.objective == pytest.approx(cp.objective, rel=1e-9)
    assert mi.bound <= mi.objective and mi.stats["backend"] == backend


def test_hierarchical_view_applies_only_to_uniform_nested_clusters() -> None:
    pcie = tsched.read_cluster(MODELS / "clusters/pcie-8gpu-server.yaml")
    w = Workload.from_edges("w", 3, [(0, 1, 1.0)])
    view, why = hierarchical_view(PlacementProblem.build(pcie, w))
    assert view is None and "intra-node link cost" in why
    view, why = hierarchical_view(PlacementProblem.build(fabric(4, 2), w))
    assert view is not None and why == "ok"
    with pytest.raises(InputError, match="hierarchical model does not apply"):
        tsched.solve(
            PlacementProblem.build(pcie, Workload.from_edges("w", 9, [(0, 8, 1.0)])),
            method="cpsat",
            options={"model": "hierarchical"},
        )


def test_model_costs_match_objective() -> None:
    rng = np.random.default_rng(0)
    c = fabric(4, 2, gpus=4).with_busy({"n1": [0]})
    f = rng.random((9, 9)) * (rng.random((9, 9)) < 0.4)
    np.fill_diagonal(f, 0)
    problem = PlacementProblem.build(c, Workload.from_matrix("w", f))
    view, _ = hierarchical_view(problem)
    for _ in range(20):
        a = rng.permutation(problem.n_locations)[:9]
        nodes = np.searchsorted(view.nodes, c.gpu_node[problem.locations[a]])
        assert view.cost(nodes) == pytest.approx(tsched.objective(problem, a))


def test_milp_backend_option_is_checked() -> None:
    p = PlacementProblem.from_qap(np.ones((3, 3)), np.ones((3, 3)))
    with pytest.raises(InputError, match=r"backend='gurobi' \(valid: highs, cbc\)"):
        tsched.solve(p, method="milp", options={"backend": "gurobi"})


def test_milp_json_output_stays_clean(capfd) -> None:
    """HiGHS writes a banner on the process's stdout even when told not to: with ``--json`` the
    document stays the only output, and stderr stays silent (file descriptors captured, so
    the native library's writes count); the message gives HiGHS's own status."""
    code = main(
        ["solve", "--method", "milp", "--json", "--time-limit", "3",
         "--cluster", str(MODELS / "clusters" / "hgx-h200-16node.yaml"),
         "--workload", str(MODELS / "workloads" / "mixtral-8x22b-tp2-ep8-dp2.yaml")]
    )  # fmt: skip
    out, err = capfd.readouterr()
    doc = json.loads(out)
    assert code == 0 and doc["method"] == "milp" and doc["status"] in ("optimal", "feasible")
    assert "(highs)" in doc["message"] and err == ""
    # a stop at the time limit is not called optimal (PuLP's own word for it is "Optimal"),
    # and is named as what it is
    if doc["status"] == "feasible":
        assert "Optimal" not in doc["message"] and "Time limit reached" in doc["message"]


@pytest.mark.parametrize("method", ["cpsat", "milp"])
def test_never_worse_than_the_start(method: str) -> None:
    problem = moe_problem()
    greedy = tsched.solve(problem, method="greedy")
    result = tsched.solve(
        problem, method=method, time_limit=1.0, options={"hint": greedy.assignment}
    )
    assert result.objective <= greedy.objective + 1e-12
    assert result.bound <= result.objective


def test_cpsat_proves_a_plan_far_cheaper_than_its_largest_saving() -> None:
    """Nine workers on two 8-GPU nodes under three network levels, one GPU busy: the best plan
    costs far less than 1, the proof tolerance then being 1e-6 absolute, while the largest
    saving is larger. Rounded up on a fixed scale, the savings left CP-SAT's proved optimum
    1.2e-6 below the plan; the scale now grows with the plan's cheapness: proved."""
    traffic = np.array(
        [[0, 0, 0, 0, 0, 3, 0, 2, 0], [0, 0, 0, 0, 0, 6, 0, 9, 0], [0, 0, 0, 9, 6, 0, 3, 2, 1],
         [0, 7, 0, 0, 0, 4, 0, 8, 0], [0, 2, 0, 3, 0, 0, 4, 0, 0], [0, 0, 0, 0, 6, 0, 0, 0, 0],
         [0, 4, 0, 8, 0, 0, 0, 0, 4], [1, 0, 4, 3, 1, 3, 0, 0, 0], [0] * 9], dtype=float,
    )  # fmt: skip
    from tsched.formats.cluster_yaml import cluster_from_dict

    links = {"nvlink": 450, "leaf": 50, "spine": 25, "core": 12.5}
    doc = {
        "tsched": "cluster/v1", "name": "two", "levels": ["leaf", "spine", "core"],
        "links": {k: {"bandwidth": v} for k, v in links.items()},
        "node_types": {"d": {"gpus": 8, "gpu": {"model": "H100"}, "intra": "nvlink"}},
        "generate": [{"type": "d", "count": 2, "fanout": {"leaf": 1, "spine": 1},
                      "at": {"core": "c0"}}],
    }  # fmt: skip
    cluster = cluster_from_dict(doc, "two")
    cluster = cluster.with_busy({cluster.nodes[0].name: [2]})
    problem = PlacementProblem.build(cluster, Workload.from_matrix("w", traffic))
    r = tsched.solve(problem, method="cpsat", time_limit=20, options={"hint": np.arange(9)})
    assert r.stats["cpsat_status"] == "OPTIMAL"
    assert r.status == "optimal" and r.objective - r.bound <= 1e-6 * max(1.0, r.objective)
    assert r.objective < 1.0


def test_auto_hands_a_small_cluster_instance_on_to_the_node_model() -> None:
    """Twelve workers of random traffic on eight 2-GPU nodes: branch and bound alone does not
    prove the optimum in auto's default budget (its flat search branches again for each
    node's interchangeable GPUs); after its share of the time, the worker → node CP-SAT model
    does."""
    traffic = np.array(
        [[0, 0, 4, 0, 1, 7, 0, 0, 0, 0, 4, 0], [0, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0],
         [8, 0, 0, 0, 0, 0, 2, 0, 9, 0, 0, 9], [0, 0, 0, 0, 0, 0, 7, 0, 1, 7, 0, 7],
         [0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0], [2, 3, 8, 5, 1, 0, 2, 0, 2, 0, 5, 0],
         [0, 6, 1, 0, 2, 4, 0, 2, 3, 0, 0, 0], [0, 4, 0, 0, 0, 8, 8, 0, 5, 9, 0, 0],
         [0, 2, 0, 4, 0, 0, 0, 0, 0, 8, 0, 0], [4, 3, 0, 0, 0, 2, 0, 5, 6, 0, 0, 3],
         [0, 0, 7, 0, 0, 0, 0, 2, 0, 9, 0, 1], [4, 0, 9, 0, 0, 3, 0, 1, 6, 2, 0, 0]],
        dtype=float,
    )  # fmt: skip
    problem = PlacementProblem.build(fabric(8, 1, gpus=2), Workload.from_matrix("w", traffic))
    r = tsched.solve(problem, method="auto", seed=0)
    assert [step["method"] for step in r.stats["auto_steps"]] == ["greedy", "bnb", "cpsat"]
    assert r.status == "optimal" and r.stats["auto_choice"] == "cpsat"


@pytest.mark.parametrize("method", ["cpsat", "milp"])
def test_independent_proofs_use_no_bound_of_tsched(unproved_by_bounds, monkeypatch, method) -> None:
    """With ``independent`` the exact models never ask for tsched's bounds (no early stop, no
    cut), and still prove the optimum the bounded run proves."""
    from tsched.solvers import bounds

    bounded = tsched.solve(unproved_by_bounds, method=method, time_limit=60)
    asked: list[str] = []

    def spy(*args: object, **kwargs: object) -> tuple[None, None]:
        asked.append(inspect.stack()[1].filename.rsplit("/", 1)[-1])
        return None, None

    monkeypatch.setattr(bounds, "best_bound", spy)
    alone = tsched.solve(
        unproved_by_bounds, method=method, time_limit=60, options={"independent": True}
    )
    assert set(asked) <= {"registry.py"}  # at most the registry's check of the result
    assert alone.status == bounded.status == "optimal"
    assert alone.objective == pytest.approx(bounded.objective, rel=1e-9)
    with pytest.raises(InputError, match="independent="):
        tsched.solve(unproved_by_bounds, method=method, options={"independent": "maybe"})


def test_an_nvl72_rack_is_one_unit_of_the_node_model() -> None:
    """Trays and the rack's NVLink switch cost the same, so the model's unit is the rack: the
    four racks of 72 GPUs are four units, and CP-SAT's plan is priced as the objective."""
    from tests.conftest import nvl72_tp4_pp4_dp8

    problem = nvl72_tp4_pp4_dp8()
    view, why = hierarchical_view(problem)
    assert why == "ok" and view is not None
    assert view.merged == 1 and len(view.capacity) == 4 and view.capacity.tolist() == [72] * 4
    assert np.array_equal(view.unit, problem.cluster.node_group[problem.location_node(), 0])
    out = tsched.solve(problem, method="cpsat", seed=0, time_limit=10)
    assert len(set(out.assignment.tolist())) == problem.n_workers
    from tsched.solvers.node_model import units_of

    assert view.cost(units_of(view, out.assignment)) == pytest.approx(out.objective, rel=1e-9)
    assert out.bound is not None and out.bound <= out.objective * (1 + 1e-9)


def test_identical_pipelines_share_one_proof_in_auto() -> None:
    """Four independent TP8 × PP2 pipelines on a fragmented fabric: greedy's plan of the whole
    is not proved, so auto plans the pipelines one after another; the first is proved alone
    once and its bound reused for the three copies, and the plan is proved optimal."""
    from tsched.workload import Layout, ModelSpec

    model = ModelSpec(params_b=8, hidden=4096, layers=32, seq_len=8192, micro_batches=8)
    one = Workload.from_layout("one", Layout(tp=8, pp=2), model)
    edges = [(int(a) + 16 * c, int(b) + 16 * c, float(w))
             for c in range(4) for a, b, w in zip(one.src, one.dst, one.gb)]  # fmt: skip
    rng = np.random.default_rng(0)
    busy = {}
    for k in range(16):
        taken = int(rng.choice([0, 0, 2, 4, 8]))
        if taken:
            busy[f"n{k}"] = sorted(rng.choice(8, taken, replace=False).tolist())
    cluster = fabric(16, 4).with_busy(busy)
    problem = PlacementProblem.build(cluster, Workload.from_edges("pipes", 64, edges))
    out = tsched.solve(problem, method="auto", seed=0, time_limit=10)
    assert out.stats["auto_choice"] == "components"
    stages = [s["stage"] for s in out.stats["auto_steps"]]
    assert sum("identical to component 1: its bound alone reused" in s for s in stages) == 3
    assert out.status == "optimal"
    assert len(set(out.assignment.tolist())) == problem.n_workers


@pytest.mark.parametrize("limit", [0.5, 6.0])
def test_auto_at_scale_runs_the_decomposition_only_when_a_pass_fits(limit: float) -> None:
    """Above 1,024 workers auto estimates one decomposition pass from greedy's construction
    time per candidate set: with little time left it skips the stage and says so, with enough
    it runs it; either way the reason is in the steps."""
    from tsched.workload import Layout, ModelSpec

    model = ModelSpec(params_b=70, hidden=8192, layers=80, seq_len=8192, micro_batches=16)
    workload = Workload.from_layout("big", Layout(tp=8, pp=8, dp=17), model)
    cluster = fabric(256, 16).with_busy({f"n{k}": [0, 1, 2, 3] for k in range(0, 256, 3)})
    problem = PlacementProblem.build(cluster, workload)
    out = tsched.solve(problem, method="auto", seed=0, time_limit=limit)
    rows = [s for s in out.stats["auto_steps"] if s["stage"].startswith("decomposition")]
    assert len(rows) == 1
    row = rows[0]
    if "skipped" in row["stage"]:
        assert row["expected_pass_s"] > row["left_s"]
    else:
        assert "one pass expected in" in row["stage"] and row["objective"] is not None
    if limit >= 6.0:
        assert "skipped" not in row["stage"]


def test_canonical_relabelling_orders_interchangeable_units_and_domains() -> None:
    """Units with the same capacity in the same domains, and whole domains of the same shape,
    are interchangeable: the relabelled plan costs the same, and in every class the siblings'
    lowest workers come in slot order (unused siblings last), which the model's symmetry
    constraints require of every plan."""
    from tsched.solvers.cpsat import _canonical_nodes

    cluster = fabric(8, 2, gpus=4).with_busy({"n1": [0, 1], "n3": [2, 3]})
    rng = np.random.default_rng(3)
    f = rng.integers(0, 5, (12, 12)) * (rng.random((12, 12)) < 0.4)
    np.fill_diagonal(f, 0)
    problem = PlacementProblem.build(cluster, Workload.from_matrix("w", f.astype(float)))
    view, _ = hierarchical_view(problem)
    assert view is not None
    n_units = len(view.nodes)
    for _ in range(200):
        node_of = rng.integers(0, n_units, problem.n_workers)
        canon, classes = _canonical_nodes(view, node_of)
        assert view.cost(canon) == pytest.approx(view.cost(node_of), rel=1e-12)
        loads = [np.bincount(a, minlength=n_units) for a in (canon, node_of)]
        pairs = [sorted(zip(view.capacity.tolist(), load.tolist())) for load in loads]
        assert pairs[0] == pairs[1]  # each unit's load moved to a unit of its capacity
        assert any(len(slot) > 1 for members in classes for slot in members)  # domains too
        for members in classes:
            firsts = [
                min((w for w in range(len(canon)) if canon[w] in slot), default=np.inf)
                for slot in members
            ]
            assert firsts == sorted(firsts)
        again, _ = _canonical_nodes(view, canon)
        assert np.array_equal(again, canon)  # a canonical plan is its own relabelling


def test_symmetry_breaking_keeps_the_optimum() -> None:
    """CP-SAT proves the same optimum with the units' and domains' symmetry broken as without,
    on clusters where leaves of the same shape are interchangeable."""
    rng = np.random.default_rng(7)
    for trial in range(3):
        f = rng.integers(0, 6, (10, 10)) * (rng.random((10, 10)) < 0.35)
        np.fill_diagonal(f, 0)
        cluster = fabric(6, 2, gpus=4).with_busy({"n1": [0, 1], "n3": [0, 1], "n5": [0, 1]})
        problem = PlacementProblem.build(
            cluster, Workload.from_matrix(f"w{trial}", f.astype(float))
        )
        out = {}
        for sym in (True, False):
            out[sym] = tsched.solve(
                problem, method="cpsat", seed=0, time_limit=60,
                options={"symmetry_breaking": sym, "independent": True},
            )  # fmt: skip
            assert out[sym].status == "optimal"
        assert out[True].objective == pytest.approx(out[False].objective, rel=1e-9)
