"""Re-planning a lost Dynamo replica (pure: no Ray): where it goes, what it costs, and when it
cannot go anywhere. The live replacement under a removed node is in test_dynamo.py."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import tsched
from tsched.backends.dynamo import service_workload, spec_from_dict
from tsched.backends.dynamo.healing import plan_replacement, service_objective
from tsched.backends.dynamo.process import replicas_of
from tsched.errors import ExecutorError, InputError
from tsched.formats.cluster_yaml import cluster_from_dict


def _spec(serving: dict, **over) -> tsched.backends.dynamo.DynamoSpec:
    doc = {"tsched": "dynamo/v1", "name": "svc", "engine": "mocker", "model": {"name": "tiny"},
           "serving": serving, **over}  # fmt: skip
    return spec_from_dict(doc)


def _fabric(nodes: int = 6, gpus: int = 4) -> tsched.Cluster:
    """Two leaves of ``nodes / 2`` nodes under one spine."""
    return cluster_from_dict({
        "tsched": "cluster/v1", "name": "fabric",
        "links": {"nvlink": {"bandwidth": 450, "latency": 2},
                  "leaf": {"bandwidth": 50, "latency": 5},
                  "spine": {"bandwidth": 12.5, "latency": 10}},
        "levels": ["leaf", "spine"],
        "node_types": {"box": {"gpus": gpus, "gpu": {"model": "H100"}, "intra": "nvlink"}},
        "nodes": [{"name": f"n{i}", "type": "box", "at": {"leaf": f"l{i * 2 // nodes}",
                                                           "spine": "s0"}}
                  for i in range(nodes)],
    })  # fmt: skip


def _without(cluster: tsched.Cluster, dead: set[str], busy: dict[str, tuple[int, ...]]):
    """The cluster as Ray would show it: ``dead`` nodes gone, ``busy`` GPUs held."""
    nodes = tuple(replace(n, busy=tuple(sorted(set(n.busy) | set(busy.get(n.name, ())))))
                  for n in cluster.nodes if n.name not in dead)  # fmt: skip
    return replace(cluster, nodes=nodes)


def _held(plan, skip: str, spec) -> dict[str, tuple[int, ...]]:
    out: dict[str, tuple[int, ...]] = {}
    for r in replicas_of(plan, spec):
        if r.name != skip:
            out[r.node] = tuple(sorted(out.get(r.node, ()) + r.gpus))
    return out


def test_a_lost_replica_goes_to_a_whole_free_node_and_the_others_stay() -> None:
    spec = _spec({"decode": {"replicas": 3, "tp": 4}})
    cluster = _fabric()
    problem = tsched.PlacementProblem.build(cluster, service_workload(spec))
    plan = tsched.solve(problem, method="greedy", seed=0).plan()
    before = {r.name: r for r in replicas_of(plan, spec)}
    lost = before["decode1"]
    now = _without(cluster, {lost.node}, _held(plan, "decode1", spec))
    moved = plan_replacement(plan, spec, "decode1", now, method="greedy")
    assert moved.replica.node != lost.node and len(moved.replica.gpus) == 4
    assert moved.replica.node not in {r.node for r in before.values()}
    after = {r.name: r for r in replicas_of(moved.plan, spec)}
    assert after["decode0"] == before["decode0"] and after["decode2"] == before["decode2"]
    assert after["decode1"] == moved.replica
    # the recorded objective is the service's, recomputed; a TP4 group on one NVLink node
    # costs what it cost before the loss
    assert moved.plan.objective == pytest.approx(service_objective(moved.plan, spec, now))
    assert moved.plan.objective == pytest.approx(plan.objective)
    assert moved.plan.status == "feasible" and moved.plan.gap is None
    assert "decode1 moved from" in moved.plan.message


def test_a_prefill_replica_goes_where_its_kv_traffic_is_cheapest() -> None:
    """Disaggregated: the prefill replica's KV transfer to the decode replica that stays is
    priced per candidate GPU, so the replacement lands on the decode's leaf; checked against
    every node it could go to."""
    spec = _spec({"prefill": {"replicas": 1, "tp": 2}, "decode": {"replicas": 1, "tp": 2}})
    cluster = _fabric(nodes=6, gpus=2)
    plan = tsched.solve(tsched.PlacementProblem.build(cluster, service_workload(spec)),
                        method="greedy", seed=0).plan()  # fmt: skip
    where = {r.name: r for r in replicas_of(plan, spec)}
    decode_leaf = next(n.at["leaf"] for n in cluster.nodes if n.name == where["decode0"].node)
    now = _without(cluster, {where["prefill0"].node}, _held(plan, "prefill0", spec))
    moved = plan_replacement(plan, spec, "prefill0", now, method="auto", time_limit=5)
    leaf = next(n.at["leaf"] for n in now.nodes if n.name == moved.replica.node)
    assert leaf == decode_leaf
    slot = {w: k for k, w in enumerate(where["prefill0"].workers)}
    costs = {}
    for node in now.nodes:  # brute force: every whole free node
        if node.busy:
            continue
        entries = tuple(replace(e, node=node.name, gpu=slot[e.worker]) if e.worker in slot
                        else e for e in plan.assignment)  # fmt: skip
        costs[node.name] = service_objective(replace(plan, assignment=entries), spec, now)
    assert moved.plan.objective == pytest.approx(min(costs.values()))
    assert max(costs.values()) > min(costs.values())  # the choice mattered


def test_no_node_with_room_for_a_whole_replica_is_said() -> None:
    spec = _spec({"decode": {"replicas": 2, "tp": 4}})
    cluster = _fabric(nodes=3)
    plan = tsched.solve(tsched.PlacementProblem.build(cluster, service_workload(spec)),
                        method="greedy", seed=0).plan()  # fmt: skip
    where = {r.name: r for r in replicas_of(plan, spec)}
    spare = next(n.name for n in cluster.nodes if n.name not in {r.node for r in where.values()})
    busy = {**_held(plan, "decode0", spec), spare: (0, 1)}  # the spare node half taken
    now = _without(cluster, {where["decode0"].node}, busy)
    assert int(now.free_mask().sum()) == 2
    said = r"no alive node has 4 free GPUs for replica 'decode0' \(the most on one node is 2\)"
    with pytest.raises(ExecutorError, match=said):
        plan_replacement(plan, spec, "decode0", now, method="greedy")
    with pytest.raises(InputError, match="has no replica 'decode7'"):
        plan_replacement(plan, spec, "decode7", now)


def test_replace_lost_is_a_boolean_and_defaults_on() -> None:
    assert _spec({"decode": {"replicas": 1}}).replace_lost is True
    off = _spec({"decode": {"replicas": 1}}, restart={"replace_lost": False})
    assert off.replace_lost is False
    with pytest.raises(InputError, match=r"restart\.replace_lost: expected true or false"):
        _spec({"decode": {"replicas": 1}}, restart={"replace_lost": "yes"})


def test_a_split_answer_is_planned_again_on_one_node() -> None:
    """Whatever the method returns, the replacement keeps a TP group on one node."""
    spec = _spec({"decode": {"replicas": 1, "tp": 2}})
    cluster = _fabric(nodes=4, gpus=4)
    plan = tsched.solve(tsched.PlacementProblem.build(cluster, service_workload(spec)),
                        method="greedy", seed=0).plan()  # fmt: skip
    lost = replicas_of(plan, spec)[0]
    now = _without(cluster, {lost.node}, {})
    for method in ("greedy", "random", "auto"):
        moved = plan_replacement(plan, spec, "decode0", now, method=method, time_limit=2, seed=1)
        nodes = {e.node for e in moved.plan.assignment}
        assert len(nodes) == 1 and lost.node not in nodes
        assert np.all(np.asarray(moved.replica.gpus) < 4)
