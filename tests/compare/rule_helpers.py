"""Clusters, traces and placement states shared by the tests of the cluster-level rules."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from tsched.cluster import Cluster, LinkClass, Node, NodeType
from tsched.compare.jobmodel import AppModel, CollectiveModel
from tsched.compare.placement import (
    View,
)
from tsched.compare.runner import parse_policies
from tsched.compare.simulator import SimConfig, simulate
from tsched.compare.traces import TraceJob

MODELS = Path(__file__).resolve().parents[2] / "models"


FLAT = {"x": AppModel("x", 1.0, 0.0, 0.0)}  # no communication: run time = duration


def fabric(nodes_per_leaf: int = 2, leaves: int = 2, gpus: int = 4) -> Cluster:
    """``leaves`` leaves of ``nodes_per_leaf`` nodes of ``gpus`` GPUs; node k is ``n{k}``."""
    return Cluster(
        name="fabric",
        links={
            "nvl": LinkClass("nvl", 100, 1),
            "leaf": LinkClass("leaf", 10, 5),
            "spine": LinkClass("spine", 5, 10),
        },  # fmt: skip
        levels=("leaf", "spine"),
        node_types={"n": NodeType("n", gpus, "H100", 80, intra="nvl", nics=gpus, nic_gbps=400)},
        nodes=tuple(
            Node(f"n{k}", "n", {"leaf": f"l{k // nodes_per_leaf}", "spine": "s"})
            for k in range(nodes_per_leaf * leaves)
        ),
    )


def view(cluster: Cluster, busy: list[int], admission: str = "any", **kw) -> View:
    free = np.ones(cluster.n_gpus, dtype=bool)
    free[busy] = False
    per_node = np.bincount(cluster.gpu_node[free], minlength=cluster.n_nodes)
    return View(cluster, free, per_node, admission, np.random.default_rng(0), **kw)


def rule_job(name: str, submit: float, gpus: int, duration: float) -> TraceJob:
    return TraceJob(name, float(submit), gpus, float(duration), "x")


def sim(jobs, cluster, policy, queue="backfill", **kw):
    cfg = parse_policies(policy, SimConfig(queue=queue, **kw))[0]
    res = simulate(jobs, cluster, cfg, collective=CollectiveModel(), apps=FLAT)
    return {r.job: r for r in res.records}, res


COMM = {"c": AppModel("c", 1.0, 0.0, 5.0)}  # all-reduce heavy: about twice as slow split


def busy_for_good(c: Cluster, busy: dict[int, tuple[int, ...]]) -> Cluster:
    """``c`` with the given local GPUs of node k (``busy[k]``) busy for the whole replay."""
    nodes = tuple(replace(node, busy=busy.get(k, ())) for k, node in enumerate(c.nodes))
    return Cluster(c.name, c.links, c.levels, c.node_types, nodes)


def replay(jobs, cluster, policy, apps=COMM) -> dict:
    """Records by job name of a ``backfill`` replay under ``policy`` with ``apps``."""
    cfg = parse_policies(policy, SimConfig(queue="backfill"))[0]
    res = simulate(jobs, cluster, cfg, collective=CollectiveModel(), apps=apps)
    return {r.job: r for r in res.records}


# ---------------------------------------------------------------------------- the rules
# Nodes n0..n3 (GPUs 0-3, 4-7, 8-11, 12-15); leaves l0 = {n0, n1}, l1 = {n2, n3}.
# Busy: n0 has 3 busy (1 free), n1 has 1 busy (3 free), n2 and n3 are whole.
BUSY = [0, 1, 2, 4]


def mixed() -> Cluster:
    """One 8-GPU node (n0, GPUs 0-7) and three 4-GPU nodes (n1: 8-11, n2: 12-15, n3: 16-19)."""
    return Cluster(
        name="mixed",
        links={"nvl": LinkClass("nvl", 100, 1), "leaf": LinkClass("leaf", 10, 5)},
        levels=("leaf",),
        node_types={"big": NodeType("big", 8, "H100", 80, intra="nvl", nics=8, nic_gbps=400),
                    "small": NodeType("small", 4, "T4", 16, intra="nvl", nics=1, nic_gbps=50)},
        nodes=(Node("n0", "big", {"leaf": "l0"}),
               *(Node(f"n{k}", "small", {"leaf": "l0"}) for k in (1, 2, 3))),
    )  # fmt: skip
