"""A matched trace replayed on a local Ray cluster."""

from __future__ import annotations

import numpy as np
import pytest

from tsched.compare.jobmodel import (
    AppModel,
    CollectiveModel,
)
from tsched.compare.records import (
    read_records,
)
from tsched.compare.report import write_report
from tsched.compare.runner import parse_policies
from tsched.compare.simulator import SimConfig
from tsched.compare.traces import TraceJob
from tsched.errors import InputError


@pytest.mark.ray
def test_live_replay_runs_jobs_on_ray_with_the_simulators_schema(ray_cluster, tmp_path) -> None:
    from tsched.compare.ray_replay import replay_trace
    from tsched.discovery.ray import inventory

    cluster = inventory(timeout=20).cluster
    jobs = [
        TraceJob("one", 0.0, 1, 400.0, "cifar10", "t1"),
        TraceJob("four", 100.0, 4, 2000.0, "bert", "t2"),
    ]
    coll = CollectiveModel()
    apps = {"cifar10": AppModel("cifar10", 0.1, 0.0, 0.0), "bert": AppModel("bert", 0.1, 0.0, 5.0)}
    results = replay_trace(
        jobs, cluster, parse_policies("greedy,spread"), time_scale=0.001, collective=coll, apps=apps
    )
    assert [r.config.label for r in results] == ["greedy", "spread"]
    greedy, spread = ({r.job: r for r in res.records} for res in results)
    for recs in (greedy, spread):
        assert recs["one"].source == "executed" and recs["four"].tenant == "t2"
        assert recs["one"].jct >= 0.4 and recs["four"].ideal == pytest.approx(2.0)
        assert recs["four"].end - recs["four"].start >= 2.0
    assert greedy["four"].nodes == 1 and spread["four"].nodes > 1
    # the job model stretches the spread bert job; its workers slept that long
    from tsched.compare.sim_state import Placer

    placer = Placer(cluster, SimConfig(), coll, apps)
    nodes = sorted({cluster.node_index(n.name) for n in cluster.nodes if n.name != "head"})
    gpus = np.array(
        [cluster.node_offset[k] for k in nodes[:3]] + [cluster.node_offset[nodes[0]] + 1]
    )
    ratio = placer.iteration(apps["bert"], gpus)[0] / placer.packed_iteration(apps["bert"], 4)
    assert ratio > 1.5
    assert spread["four"].end - spread["four"].start >= 2.0 * ratio * 0.99
    paths = write_report(tmp_path, results, usable_gpus=cluster.n_gpus, title="live")
    assert read_records(paths[0])[0].source == "executed"
    with pytest.raises(InputError, match="live mode runs plain policies"):
        replay_trace(jobs, cluster, parse_policies("greedy+frag"))
