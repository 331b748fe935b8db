"""``tsched solve --explain`` and ``--validate-against``: the five checkpoints made visible."""

from __future__ import annotations

import datetime as dt
import json

import pytest

import tsched
from tests.conftest import MODELS
from tsched.cli import main
from tsched.explain import explain, explain_lines
from tsched.problem import PlacementProblem
from tsched.solvers.registry import solve


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def explained(capsys, *args: str) -> dict:
    code, out, err = run(capsys, "solve", "--explain", "--json", "--quiet", *args)
    assert code == 0, err
    return json.loads(out)


def test_default_problem_prints_the_five_checkpoints(capsys) -> None:
    code, out, _ = run(capsys, "solve", "--explain", "--quiet")
    assert code == 0
    heads = [line for line in out.splitlines() if line[:2] in ("1.", "2.", "3.", "4.", "5.")]
    assert heads == ["1. spec as understood", "2. objective", "3. interaction test",
                     "4. solver class by scale", "5. live validation"]  # fmt: skip
    assert "link nvlink: 450 GB/s" in out and "advertised" in out
    assert "one connected traffic graph over all 16 workers" in out
    doc = explained(capsys)["explain"]
    assert doc["spec"]["usable_gpus"] == 30 and doc["spec"]["cluster"]["busy"] == 2
    assert doc["objective"]["unit"] == "seconds per iteration"
    assert doc["objective"]["bound_source"] == "spectral"
    assert doc["interaction"]["components"] == [16]
    assert doc["solver"]["ran"] == "greedy" and doc["solver"]["steps"][0]["method"] == "greedy"
    assert doc["validation"]["ran"] is False


def test_a_problem_without_interaction_is_a_proved_linear_assignment(capsys) -> None:
    doc = explained(capsys, "--workload", str(MODELS / "workloads" / "cache-affinity.yaml"))
    ex = doc["explain"]
    assert doc["status"] == "optimal" and doc["method"] == "lap" and doc["gap"] == 0
    assert ex["interaction"]["interacting"] is False
    assert "linear_sum_assignment" in ex["interaction"]["verdict"]
    assert ex["objective"]["bound_source"] == "linear-assignment"
    assert ex["spec"]["gpu_costs"]["workers_with_costs"] == 10
    assert doc["cost_by_link"] == {"gpu_costs": pytest.approx(0.16)}


def test_a_two_component_workload_is_planned_component_by_component(capsys) -> None:
    doc = explained(capsys, "--workload", str(MODELS / "workloads" / "two-jobs.yaml"),
                    "--time-limit", "8")  # fmt: skip
    ex = doc["explain"]
    assert ex["interaction"]["components"] == [8, 12]
    assert doc["method"] == "components"
    stages = [s["stage"] for s in ex["solver"]["steps"]]
    # job B alone would take job A's node; its bound comes from that run, its plan from a run on
    # the GPUs left; both bounds together prove the plan optimal
    assert stages == ["construction of the whole and the spectral bound",
                      "component 1 of 2 (8 workers)",
                      "component 2 of 2 (12 workers) alone on all GPUs, for its bound",
                      "component 2 of 2 (12 workers) on the GPUs left"]  # fmt: skip
    assert all(s["inner"] for s in ex["solver"]["steps"][1:])  # what auto ran inside each
    assert doc["status"] == "optimal" and doc["bound"] == pytest.approx(doc["objective"])
    code, out, _ = run(capsys, "solve", "--explain", "--quiet", "--time-limit", "2",
                       "--workload", str(MODELS / "workloads" / "two-jobs.yaml"))  # fmt: skip
    assert code == 0 and "2 independent traffic components" in out


def test_warnings_name_default_mixed_and_stale_figures() -> None:
    from tsched.cluster import LinkClass, NodeType

    base = tsched.presets.cluster("dgx-h100-4node")
    links = dict(base.links)
    links["leaf"] = LinkClass("leaf", 50, 5, "measured", "2026-01-01T00:00:00Z")
    links["spine"] = LinkClass("spine", 12.5, 8, "default")
    types = {**base.node_types, "a100": NodeType("a100", 8, "A100", 80, intra="nvlink")}
    nodes = (*base.nodes[:3], type(base.nodes[3])("node004", "a100", base.nodes[3].at))
    cl = type(base)(base.name, links, base.levels, types, nodes)
    p = PlacementProblem.build(cl, tsched.presets.workload("llama3-8b-tp8-dp2"))
    doc = explain(p, solve(p, method="greedy"), method="greedy",
                  now=dt.datetime(2026, 6, 1, tzinfo=dt.timezone.utc))  # fmt: skip
    text = "\n".join(doc["spec"]["warnings"])
    assert "link leaf: measured 151 days ago" in text
    assert "link spine: 12.5 GB/s is a generic default" in text
    assert "usable GPUs mix models A100, H100" in text
    assert doc["solver"]["reason"].startswith("method 'greedy' asked for by name (heuristic")
    assert "   warning: link spine" in "\n".join(explain_lines(doc))


def _cluster_file(tmp_path, busy: str) -> str:
    text = tsched.presets.CLUSTERS["dgx-h100-4node"].replace(
        "{name: node003, type: dgx-h100, at: {leaf: l1, spine: s0}}",
        f"{{name: node003, type: dgx-h100, at: {{leaf: l1, spine: s0}}{busy}}}",
    )
    path = tmp_path / "now.yaml"
    path.write_text(text)
    return str(path)


def test_validate_against_a_cluster_file_writes_only_a_plan_that_holds(capsys, tmp_path) -> None:
    plan = tmp_path / "plan.json"
    same = _cluster_file(tmp_path, "")
    code, out, _ = run(capsys, "solve", "--quiet", "--validate-against", same, "-o", str(plan))
    assert code == 0 and plan.exists() and "live check against" in out and "valid" in out
    plan.unlink()
    taken = _cluster_file(tmp_path, ", busy: [0, 1, 2, 3, 4, 5, 6, 7]")
    code, out, err = run(capsys, "solve", "--quiet", "--explain", "--validate-against", taken,
                         "-o", str(plan), "--picture", str(tmp_path / "p.svg"))  # fmt: skip
    assert code == 1 and not plan.exists() and not (tmp_path / "p.svg").exists()
    assert err.count("\n") == 1 and err.startswith("tsched: plan not written: it does not hold")
    assert "node003 GPU 0: GPU is busy" in err and "(and 7 more)" in err
    assert "5. live validation" in out and "8 problem(s); the plan is not written" in out


@pytest.mark.ray
def test_validate_against_a_live_ray_cluster(capsys, tmp_path, ray_cluster) -> None:
    model = tmp_path / "ray.yaml"
    text = """tsched: cluster/v1
name: ray-model
links: {nv: {bandwidth: 450}, leaf: {bandwidth: 50}}
levels: [leaf]
node_types: {four: {gpus: 4, intra: nv}}
nodes:
  - {name: gpu-a, type: four, at: {leaf: l0}}
  - {name: gpu-b, type: four, at: {leaf: l0}}
  - {name: gpu-z, type: four, at: {leaf: l0}}
"""
    model.write_text(text)
    ring = tmp_path / "ring.yaml"
    ring.write_text(
        "tsched: workload/v1\nname: ring\nworkers: 4\ntraffic:\n"
        + "".join(f"  - {{src: {i}, dst: {(i + 1) % 4}, gb: 1}}\n" for i in range(4))
    )
    plan = tmp_path / "plan.json"
    code, out, err = run(capsys, "solve", "--json", "--quiet", "--cluster", str(model),
                         "--workload", str(ring), "--validate-against", ray_cluster.address,
                         "-o", str(plan))  # fmt: skip
    doc = json.loads(out)
    assert code == 0 and doc["validation"]["valid"] is True and plan.exists(), err
    # the same ring pinned to the node Ray does not have: the plan does not hold
    text = text.replace("gpu-a, type: four", "gpu-a, type: four, busy: [0, 1, 2, 3]")
    model.write_text(text.replace("gpu-b, type: four", "gpu-b, type: four, busy: [0, 1, 2, 3]"))
    plan.unlink()
    code, out, err = run(capsys, "solve", "--json", "--quiet", "--cluster", str(model),
                         "--workload", str(ring), "--validate-against", ray_cluster.address,
                         "-o", str(plan))  # fmt: skip
    doc = json.loads(out)
    assert code == 1 and not plan.exists() and doc["validation"]["valid"] is False
    assert "node 'gpu-z' is not in the Ray cluster" in doc["validation"]["problems"][0]
    import ray

    assert ray.is_initialized()  # the session's connection is left alone


def test_an_infeasible_problem_is_explained_without_a_solver_run() -> None:
    cluster = tsched.presets.cluster("dgx-h100-4node")
    p = PlacementProblem.build(cluster, tsched.presets.workload("llama3-70b-tp8-pp4-dp2"))
    doc = explain(p, solve(p))
    assert doc["solver"]["status"] == "infeasible" and doc["solver"]["steps"] == []
    assert doc["solver"]["reason"].startswith("no solver ran: workload")
    assert any("needs 64 GPUs" in w for w in doc["spec"]["warnings"])
    assert doc["objective"]["bound_how"] == "no bound known"
