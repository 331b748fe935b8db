"""A node dies mid-run: ``tsched run ray --replan`` releases everything, re-plans on the nodes
still alive and finishes the job there, the restart recorded (a real local Ray cluster, a node
removed under the running workers)."""

from __future__ import annotations

import json
import sys
import threading
import time

import pytest

import tsched
from tsched.backends.replan import shrink_workload
from tsched.cli import main
from tsched.workload import Layout, ModelSpec, Workload

MODEL = ModelSpec(params_b=1, hidden=1024, layers=4, seq_len=1024, micro_batches=2)
CHAOS = ("chaos-1", "chaos-2", "chaos-3", "chaos-4")


def test_a_layout_shrinks_its_data_parallel_degree_down_to_the_floor() -> None:
    job = Workload.from_layout("j", Layout(tp=2, pp=2, dp=4), MODEL)
    assert [w.workers for w in shrink_workload(job, 8)] == [12, 8]
    assert [w.layout.dp for w in shrink_workload(job, 1)] == [3, 2, 1]
    explicit = Workload.from_edges("e", 4, [(0, 1, 1.0)])
    assert shrink_workload(explicit, 1) == []


def _model_files(tmp_path, names=CHAOS):
    """A model of the chaos nodes (2 GPUs each, one leaf) and a TP2 x DP3 job."""
    doc = {
        "tsched": "cluster/v1", "name": "chaos",
        "links": {"nvlink": {"bandwidth": 450, "latency": 2},
                  "leaf": {"bandwidth": 50, "latency": 5}},
        "levels": ["leaf"],
        "node_types": {"pair": {"gpus": 2, "gpu": {"model": "H100"}, "intra": "nvlink"}},
        "nodes": [{"name": n, "type": "pair", "at": {"leaf": "l0"}} for n in names],
    }  # fmt: skip
    import yaml

    cluster = tmp_path / "chaos.yaml"
    cluster.write_text(yaml.safe_dump(doc, sort_keys=False))
    workload = tmp_path / "job.yaml"
    tsched.write_workload(Workload.from_layout("job", Layout(tp=2, dp=3), MODEL), workload)
    return cluster, workload


@pytest.mark.ray
def test_replan_finishes_the_job_on_the_surviving_nodes(ray_cluster, tmp_path, capsys) -> None:
    from ray._private.state import available_resources_per_node

    from tsched.backends.ray import gpu_resource

    nodes = {name: ray_cluster.add_node(num_cpus=1, num_gpus=2, labels={"tsched.io/node": name},
                                        resources={gpu_resource(name, g): 1 for g in range(2)})
             for name in CHAOS}  # fmt: skip
    ray_cluster.wait_for_nodes()
    cluster, workload = _model_files(tmp_path)
    plan_file = tmp_path / "plan.json"
    assert main(["solve", "--cluster", str(cluster), "--workload", str(workload),
                 "--method", "greedy", "--quiet", "-o", str(plan_file)]) == 0  # fmt: skip
    plan = tsched.read_plan(plan_file)
    victim = next(e.node for e in plan.assignment if e.worker == 4)
    log = tmp_path / "ranks.log"
    script = ("import os, time\n"
              f"open({str(log)!r}, 'a').write(' '.join(os.environ.get(k, '') for k in "
              "('TSCHED_RESTART', 'RANK', 'WORLD_SIZE', 'TSCHED_LAYOUT', 'TSCHED_LOST_NODES'))"
              " + chr(10))\n"
              "time.sleep(8 if os.environ['TSCHED_RESTART'] == '0' else 1)\n")  # fmt: skip
    timer = threading.Timer(4.0, lambda: ray_cluster.remove_node(nodes[victim]))
    capsys.readouterr()
    timer.start()
    started = time.monotonic()
    try:
        code = main(["run", "ray", str(plan_file), "--replan", "--max-restarts", "2",
                     "--json", "--reservation-timeout", "60",
                     "--", sys.executable, "-c", script])  # fmt: skip
    finally:
        timer.join()
        for name, node in nodes.items():
            if name != victim:
                ray_cluster.remove_node(node)
    captured = capsys.readouterr()
    out = captured.out
    assert code == 0, captured.err
    doc = json.loads(out)
    assert [r["lost_nodes"] for r in doc["restarts"]] == [[victim]]
    assert doc["restarts"][0]["workers"] == 6 and doc["restarts"][0]["status"] in (
        "optimal",
        "feasible",
    )
    assert victim not in {w["node"] for w in doc["workers"]} and len(doc["workers"]) == 6
    lines = [ln.split(" ") for ln in log.read_text().splitlines()]
    again = sorted(int(ln[1]) for ln in lines if ln[0] == "1")
    assert again == list(range(6)) and all(ln[4] == victim for ln in lines if ln[0] == "1")
    assert all(ln[3] == "tp=2,dp=3" for ln in lines)
    # every placement group removed and every surviving GPU free again
    from ray.util.placement_group import placement_group_table

    assert all(pg["state"] == "REMOVED" for pg in placement_group_table().values())
    free = {k for node in available_resources_per_node().values() for k in node}
    assert {gpu_resource("gpu-a", g) for g in range(4)} <= free
    assert time.monotonic() - started < 120


@pytest.mark.ray
def test_replan_shrinks_the_data_parallel_degree_when_the_full_size_no_longer_fits(
    ray_cluster, tmp_path, capsys
) -> None:
    """Three nodes of 2 GPUs hold the 6 workers whole; one is lost, 4 GPUs are left: with
    --min-workers 4 the job runs on as TP2 x DP2, and its workers are told so."""
    from tsched.backends.ray import gpu_resource

    names = CHAOS[:3]
    nodes = {name: ray_cluster.add_node(num_cpus=1, num_gpus=2, labels={"tsched.io/node": name},
                                        resources={gpu_resource(name, g): 1 for g in range(2)})
             for name in names}  # fmt: skip
    ray_cluster.wait_for_nodes()
    cluster, workload = _model_files(tmp_path, names)
    plan_file = tmp_path / "plan.json"
    assert main(["solve", "--cluster", str(cluster), "--workload", str(workload),
                 "--method", "greedy", "--quiet", "-o", str(plan_file)]) == 0  # fmt: skip
    plan = tsched.read_plan(plan_file)
    victim = next(e.node for e in plan.assignment if e.worker == 4)
    log = tmp_path / "ranks.log"
    script = ("import os, time\n"
              f"open({str(log)!r}, 'a').write(os.environ['TSCHED_RESTART'] + ' ' "
              "+ os.environ['WORLD_SIZE'] + ' ' + os.environ['TSCHED_LAYOUT'] + chr(10))\n"
              "time.sleep(8 if os.environ['TSCHED_RESTART'] == '0' else 1)\n")  # fmt: skip
    timer = threading.Timer(4.0, lambda: ray_cluster.remove_node(nodes[victim]))
    capsys.readouterr()
    timer.start()
    try:
        code = main(["run", "ray", str(plan_file), "--replan", "--min-workers", "4", "--json",
                     "--cluster", str(cluster), "--", sys.executable, "-c", script])  # fmt: skip
    finally:
        timer.join()
        for name, node in nodes.items():
            if name != victim:
                ray_cluster.remove_node(node)
    captured = capsys.readouterr()
    assert code == 0, captured.err
    doc = json.loads(captured.out)
    assert [(r["lost_nodes"], r["workers"]) for r in doc["restarts"]] == [([victim], 4)]
    again = [ln.split() for ln in log.read_text().splitlines() if ln.startswith("1 ")]
    assert len(again) == 4 and all(ln[1:] == ["4", "tp=2,dp=2"] for ln in again)
