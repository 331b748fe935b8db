"""The Ray executor: pure translation, and runs on a real local multi-node Ray cluster."""

from __future__ import annotations

import sys
import threading

import pytest

from tsched.backends.ray import gpu_resource, ray_bundles
from tsched.errors import ExecutorError
from tsched.plan import Plan, PlanEntry


def make_plan(*entries: tuple[str, int]) -> Plan:
    return Plan(
        cluster="ray",
        workload="w",
        status="feasible",
        objective=None,
        bound=None,
        gap=None,
        method="manual",
        wall_time=0.0,
        seed=None,
        assignment=tuple(PlanEntry(w, node, gpu) for w, (node, gpu) in enumerate(entries)),
        cost_by_link={},
    )


def test_translation_pins_nodes_and_gpus() -> None:
    plan = make_plan(("gpu-a", 3), ("gpu-a", 1), ("gpu-c", 5))
    bundles, selectors, specs = ray_bundles(plan, master_port=12345)
    assert bundles[0] == {gpu_resource("gpu-a", 3): 1.0, "CPU": 0.01}
    assert gpu_resource("gpu-a", 3) == "tsched_gpu_gpu_a_3"
    assert selectors == [{"tsched.io/node": "gpu-a"}] * 2 + [{"tsched.io/node": "gpu-c"}]
    assert [s.env["CUDA_VISIBLE_DEVICES"] for s in specs] == ["3", "1", "5"]
    assert [s.env["LOCAL_RANK"] for s in specs] == ["0", "1", "0"]
    assert [s.env["LOCAL_WORLD_SIZE"] for s in specs] == ["2", "2", "1"]
    assert {s.env["WORLD_SIZE"] for s in specs} == {"3"} and specs[0].env["MASTER_PORT"] == "12345"
    assert all("num_gpus" not in b and "GPU" not in b for b in bundles)


def _pg_states() -> list[str]:
    from ray.util.placement_group import placement_group_table

    return [v["state"] for v in placement_group_table().values()]


def _nothing_reserved() -> bool:
    return all(state == "REMOVED" for state in _pg_states())


@pytest.mark.ray
def test_workers_run_on_the_planned_nodes_and_gpus(ray_cluster) -> None:
    from tsched.backends.ray import run

    plan = make_plan(("gpu-a", 1), ("gpu-a", 3), ("gpu-c", 0), ("gpu-c", 5), ("gpu-b", 2))
    results = run(plan, entrypoint="tsched.backends.ray:report", reservation_timeout=60)
    assert [r.rank for r in results] == [0, 1, 2, 3, 4]
    assert [(r.node, r.cuda_visible_devices) for r in results] == [
        ("gpu-a", "1"),
        ("gpu-a", "3"),
        ("gpu-c", "0"),
        ("gpu-c", "5"),
        ("gpu-b", "2"),
    ]
    assert [r.value["LOCAL_RANK"] for r in results] == ["0", "1", "0", "1", "0"]
    assert {r.value["WORLD_SIZE"] for r in results} == {"5"}
    assert len({r.value["MASTER_ADDR"] for r in results}) == 1
    assert _nothing_reserved()


@pytest.mark.ray
def test_two_plans_sharing_a_node_never_share_a_gpu(ray_cluster) -> None:
    from tsched.backends.ray import run

    started = threading.Event()
    first: list = []
    sleeper = [sys.executable, "-c", "import time; time.sleep(4)"]

    def hold() -> None:
        first.extend(
            run(
                make_plan(("gpu-b", 0), ("gpu-b", 1)),
                command=sleeper,
                on_started=lambda n: started.set(),
            )
        )

    thread = threading.Thread(target=hold)
    thread.start()
    try:
        assert started.wait(60)
        with pytest.raises(ExecutorError, match="GPU 1 of 'gpu-b' is busy"):
            run(make_plan(("gpu-b", 1)), entrypoint="tsched.backends.ray:report")
        other = run(make_plan(("gpu-b", 2), ("gpu-b", 3)), entrypoint="tsched.backends.ray:report")
        assert [r.cuda_visible_devices for r in other] == ["2", "3"]
    finally:
        thread.join(60)
    assert [r.cuda_visible_devices for r in first] == ["0", "1"]
    assert _nothing_reserved()


@pytest.mark.ray
def test_missing_node_or_gpu_is_refused_before_reserving(ray_cluster) -> None:
    from tsched.backends.ray import run

    before = len(_pg_states())
    with pytest.raises(ExecutorError, match="node 'nowhere' is not in the Ray cluster"):
        run(make_plan(("gpu-a", 0), ("nowhere", 0)), entrypoint="tsched.backends.ray:report")
    with pytest.raises(ExecutorError, match="does not advertise tsched_gpu_gpu_a_7"):
        run(make_plan(("gpu-a", 7)), entrypoint="tsched.backends.ray:report")
    assert len(_pg_states()) == before  # no placement group was even created


@pytest.mark.ray
def test_a_failing_worker_names_its_rank_and_releases_everything(ray_cluster) -> None:
    from ray._private.state import available_resources_per_node

    from tsched.backends.ray import run

    script = (
        "import os, sys, time; r = os.environ['RANK']; sys.exit(3) if r == '1' else time.sleep(30)"
    )
    plan = make_plan(("gpu-a", 0), ("gpu-a", 2), ("gpu-c", 7))
    with pytest.raises(ExecutorError, match="worker rank 1 failed"):
        run(plan, command=[sys.executable, "-c", script], execution_timeout=60)
    assert _nothing_reserved()
    free = {k for node in available_resources_per_node().values() for k in node}
    assert {gpu_resource("gpu-a", 0), gpu_resource("gpu-a", 2), gpu_resource("gpu-c", 7)} <= free


@pytest.mark.ray
def test_impossible_reservation_times_out_and_leaves_nothing(ray_cluster) -> None:
    from tsched.backends.ray import run

    # the no-cpu node advertises its GPUs, but a bundle also needs a sliver of CPU
    with pytest.raises(ExecutorError, match="reservation timed out after 2 s"):
        run(make_plan(("no-cpu", 0)), entrypoint="tsched.backends.ray:report",
            reservation_timeout=2)  # fmt: skip
    assert _nothing_reserved()


@pytest.mark.ray
def test_execution_timeout_cancels_the_workers(ray_cluster) -> None:
    from ray._private.state import available_resources_per_node

    from tsched.backends.ray import run

    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    with pytest.raises(ExecutorError, match="execution timed out after 2 s"):
        run(make_plan(("gpu-c", 1), ("gpu-c", 2)), command=sleeper, execution_timeout=2)
    assert _nothing_reserved()
    free = {k for node in available_resources_per_node().values() for k in node}
    assert gpu_resource("gpu-c", 1) in free


@pytest.mark.ray
def test_cli_runs_a_plan_and_reports_per_worker(ray_cluster, tmp_path, capsys) -> None:
    import json

    from tsched.cli import main
    from tsched.plan import write_plan

    path = tmp_path / "plan.json"
    write_plan(make_plan(("gpu-c", 6), ("gpu-a", 2)), path)
    code = main(["run", "ray", str(path), "--json", "--", sys.executable, "-c", "print('hi')"])
    out, err = capsys.readouterr()
    assert code == 0, err
    doc = json.loads(out)
    assert [(w["rank"], w["node"], w["cuda_visible_devices"], w["value"]) for w in doc["workers"]] \
        == [(0, "gpu-c", "6", 0), (1, "gpu-a", "2", 0)]  # fmt: skip
    write_plan(make_plan(("gpu-c", 9)), path)
    code = main(["run", "ray", str(path), "--entrypoint", "tsched.backends.ray:report"])
    _, err = capsys.readouterr()
    assert code == 3 and err.count("\n") == 1 and "does not advertise" in err


@pytest.mark.ray
def test_replay_writes_jct_records_per_policy(ray_cluster, tmp_path) -> None:
    import numpy as np

    import tsched
    from tsched.compare.ray_replay import ReplayJob, replay
    from tsched.compare.records import read_records, write_records
    from tsched.discovery.ray import inventory

    cluster = inventory(timeout=20).cluster  # the model of the live cluster, discovered
    pair = np.kron(np.eye(2), np.ones((2, 2)) - np.eye(2)) * 40 + 1  # two chatty pairs
    np.fill_diagonal(pair, 0)
    work = tsched.Workload.from_matrix("pairs", pair)
    jobs = [ReplayJob("j1", 0.0, work, compute_s=0.2), ReplayJob("j2", 0.1, work, compute_s=0.2)]
    records = replay(jobs, ["greedy", "spread"], cluster)
    assert [(r.policy, r.job) for r in records] == [
        ("greedy", "j1"), ("greedy", "j2"), ("spread", "j1"), ("spread", "j2")
    ]  # fmt: skip
    for r in records:
        assert r.source == "executed" and r.gpus == 4
        assert r.submit <= r.start < r.end and r.jct == pytest.approx(r.end - r.submit)
        assert r.jct >= 0.2
    greedy = [r for r in records if r.policy == "greedy"]
    spread = [r for r in records if r.policy == "spread"]
    assert all(g.nodes == 1 for g in greedy) and all(s.nodes == 3 for s in spread)
    assert all(g.objective < s.objective for g, s in zip(greedy, spread))
    path = tmp_path / "records.csv"
    write_records(records, path)
    assert [(r.policy, r.job, r.gpus) for r in read_records(path)] == [
        (r.policy, r.job, r.gpus) for r in records
    ]
    assert _nothing_reserved()


def test_an_address_nobody_listens_on_fails_fast(tmp_path, capsys) -> None:
    pytest.importorskip("ray")
    import ray

    from tsched.cli import main
    from tsched.plan import write_plan

    if ray.is_initialized():
        pytest.skip("a Ray session is already open in this process")
    path = tmp_path / "plan.json"
    write_plan(make_plan(("gpu-a", 0)), path)
    code = main(["run", "ray", str(path), "--entrypoint", "tsched.backends.ray:report",
                 "--address", "127.0.0.1:1"])  # fmt: skip
    _, err = capsys.readouterr()
    assert code == 3 and "cannot connect to Ray at 127.0.0.1:1" in err
