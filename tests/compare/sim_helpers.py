"""Small clusters, jobs and replays shared by the tests of tsched.compare."""

from __future__ import annotations

from pathlib import Path

from tsched.cluster import Cluster, LinkClass, Node, NodeType
from tsched.compare.jobmodel import (
    AppModel,
    CollectiveModel,
)
from tsched.compare.simulator import SimConfig, simulate
from tsched.compare.traces import TraceJob

TRACES = Path(__file__).parents[1] / "data" / "traces"


G4DN = Path(__file__).parents[2] / "models" / "clusters" / "g4dn-12xlarge-16node.yaml"


#: A class with no communication: runtimes equal durations, so JCTs are hand-checkable.
FLAT = {"x": AppModel("x", 1.0, 0.0, 0.0)}


def one_node(gpus: int = 4, nodes: int = 1) -> Cluster:
    return Cluster(
        name="tiny",
        links={"pcie": LinkClass("pcie", 10, 5), "net": LinkClass("net", 1, 50)},
        levels=("net",),
        node_types={"n": NodeType("n", gpus, "T4", 16, intra="pcie", nics=1, nic_gbps=50)},
        nodes=tuple(Node(f"n{i}", "n", {"net": "s"}) for i in range(nodes)),
    )


def run(jobs, queue, cluster=None, **kw):
    cfg = SimConfig(policy=kw.pop("policy", "pack"), queue=queue, **kw)
    res = simulate(jobs, cluster or one_node(), cfg, collective=CollectiveModel(), apps=FLAT)
    return {r.job: r for r in res.records}, res


def job(name, submit, gpus, duration, tenant="default", project=""):
    return TraceJob(name, float(submit), gpus, float(duration), "x", tenant, project)
