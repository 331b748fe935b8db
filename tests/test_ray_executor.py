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
