"""A node dies mid-run: ``tsched run ray --replan`` releases everything, re-plans on the nodes
still alive and finishes the job there, the restart recorded (a real local Ray cluster, a node
removed under the running workers)."""

from __future__ import annotations

import contextlib
import io
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


#: What each worker writes to the log: restart, rank, world size, layout, lost nodes.
LOGGED = ("TSCHED_RESTART", "RANK", "WORLD_SIZE", "TSCHED_LAYOUT", "TSCHED_LOST_NODES")


@contextlib.contextmanager
def node_lost_mid_run(ray_cluster, tmp_path, names, *run_args):
    """Add the chaos nodes ``names`` to the Ray cluster, plan the TP2 x DP3 job on them, and run
    it with ``tsched run ray --replan --json`` (plus ``run_args``) while the node holding rank 4
    is removed 4 s in. Yields (exit code, the JSON document or stderr, the lost node, the
    workers' log lines); the surviving chaos nodes leave the cluster afterwards."""
    from tsched.backends.ray import gpu_resource

    nodes = {name: ray_cluster.add_node(num_cpus=1, num_gpus=2, labels={"tsched.io/node": name},
                                        resources={gpu_resource(name, g): 1 for g in range(2)})
             for name in names}  # fmt: skip
    ray_cluster.wait_for_nodes()
    cluster, workload = _model_files(tmp_path, names)
    plan_file = tmp_path / "plan.json"
    assert main(["solve", "--cluster", str(cluster), "--workload", str(workload),
                 "--method", "greedy", "--quiet", "-o", str(plan_file)]) == 0  # fmt: skip
    victim = next(e.node for e in tsched.read_plan(plan_file).assignment if e.worker == 4)
    log = tmp_path / "ranks.log"
    script = ("import os, time\n"
              f"open({str(log)!r}, 'a').write(' '.join(os.environ.get(k, '') for k in "
              f"{LOGGED!r}) + chr(10))\n"
              "time.sleep(8 if os.environ['TSCHED_RESTART'] == '0' else 1)\n")  # fmt: skip
    timer = threading.Timer(4.0, lambda: ray_cluster.remove_node(nodes[victim]))
    timer.start()
    try:
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()) as out:
            code = main(["run", "ray", str(plan_file), "--replan", "--json", *run_args,
                         "--", sys.executable, "-c", script])  # fmt: skip
        timer.join()
        doc = json.loads(out.getvalue()) if code == 0 else err.getvalue()
        lines = [ln.split(" ") for ln in log.read_text().splitlines()]
        yield code, doc, victim, lines
    finally:
        timer.join()
        for name, node in nodes.items():
            if name != victim:
                ray_cluster.remove_node(node)


@pytest.mark.ray
def test_replan_finishes_the_job_on_the_surviving_nodes(ray_cluster, tmp_path) -> None:
    from ray._private.state import available_resources_per_node
    from ray.util.placement_group import placement_group_table

    from tsched.backends.ray import gpu_resource

    started = time.monotonic()
    run_args = ("--max-restarts", "2", "--reservation-timeout", "60")
    with node_lost_mid_run(ray_cluster, tmp_path, CHAOS, *run_args) as (code, doc, victim, lines):
        assert code == 0, doc
        assert [r["lost_nodes"] for r in doc["restarts"]] == [[victim]]
        assert doc["restarts"][0]["workers"] == 6
        assert doc["restarts"][0]["status"] in ("optimal", "feasible")
        assert victim not in {w["node"] for w in doc["workers"]} and len(doc["workers"]) == 6
        again = sorted(int(ln[1]) for ln in lines if ln[0] == "1")
        assert again == list(range(6)) and all(ln[4] == victim for ln in lines if ln[0] == "1")
        assert all(ln[3] == "tp=2,dp=3" for ln in lines)
        # every placement group removed, every GPU of the surviving nodes free again
        assert all(pg["state"] == "REMOVED" for pg in placement_group_table().values())
        free = {k for node in available_resources_per_node().values() for k in node}
        survivors = [n for n in CHAOS if n != victim]
        assert {gpu_resource(n, g) for n in survivors for g in range(2)} <= free
    assert time.monotonic() - started < 120


@pytest.mark.ray
def test_replan_shrinks_the_data_parallel_degree_when_the_full_size_no_longer_fits(
    ray_cluster, tmp_path
) -> None:
    """Three nodes of 2 GPUs hold the 6 workers whole; one is lost, 4 GPUs are left: with
    --min-workers 4 the job runs on as TP2 x DP2, and its workers are told so."""
    with node_lost_mid_run(ray_cluster, tmp_path, CHAOS[:3], "--min-workers", "4") as (
        code, doc, victim, lines,
    ):  # fmt: skip
        assert code == 0, doc
        assert [(r["lost_nodes"], r["workers"]) for r in doc["restarts"]] == [([victim], 4)]
        again = [ln for ln in lines if ln[0] == "1"]
        assert len(again) == 4 and all(ln[2:4] == ["4", "tp=2,dp=2"] for ln in again)
