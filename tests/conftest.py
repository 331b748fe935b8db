"""Shared fixtures: small clusters and workloads, brute force, paths."""

from __future__ import annotations

import itertools
import socket
from pathlib import Path

import numpy as np
import pytest

from tsched.cluster import Cluster, LinkClass, Node, NodeType
from tsched.problem import PlacementProblem, objective
from tsched.workload import ModelSpec

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"
QAPLIB = DATA / "qaplib"
MODELS = ROOT / "models"


def small_cluster(busy: dict[str, tuple[int, ...]] | None = None, gpus: int = 4) -> Cluster:
    """2 leaves x 2 nodes x ``gpus`` GPUs; nvlink 400, leaf 50, spine 20 GB/s."""
    busy = busy or {}
    links = {
        "nvlink": LinkClass("nvlink", 400.0, 2),
        "leaf": LinkClass("leaf", 50.0, 5),
        "spine": LinkClass("spine", 20.0, 8),
    }
    types = {"box": NodeType("box", gpus, "H100", 80, intra="nvlink")}
    nodes = tuple(
        Node(f"n{i}", "box", {"leaf": f"l{i // 2}", "spine": "s0"}, busy.get(f"n{i}", ()))
        for i in range(4)
    )
    return Cluster("small", links, ("leaf", "spine"), types, nodes)


def fabric(nodes: int, per_leaf: int, gpus: int = 8) -> Cluster:
    """``nodes`` nodes of ``gpus`` GPUs, ``per_leaf`` per leaf; nv 450, leaf 50, spine 25 GB/s."""
    links = {
        "nv": LinkClass("nv", 450),
        "leaf": LinkClass("leaf", 50),
        "spine": LinkClass("spine", 25),
    }
    types = {"dgx": NodeType("dgx", gpus, intra="nv")}
    return Cluster(
        "fab",
        links,
        ("leaf", "spine"),
        types,
        tuple(Node(f"n{i}", "dgx", {"leaf": f"l{i // per_leaf}"}) for i in range(nodes)),
    )


def nvl72_tp4_pp4_dp8() -> PlacementProblem:
    """Four GB200 NVL72 racks (18 trays of 4 GPUs; trays and racks on links of equal cost)
    and a 128-worker TP4 × PP4 × DP8 job of a 70B model: the job must span two racks."""
    from tsched.formats.cluster_yaml import cluster_from_dict
    from tsched.workload import Layout, ModelSpec, Workload

    doc = {
        "tsched": "cluster/v1",
        "name": "nvl72-288",
        "links": {"nvlink": {"bandwidth": 900}, "nvl": {"bandwidth": 900},
                  "leaf": {"bandwidth": 50}, "spine": {"bandwidth": 50}},
        "levels": ["nvl", "leaf", "spine"],
        "node_types": {"tray": {"gpus": 4, "gpu": {"model": "B200"}, "intra": "nvlink"}},
        "generate": [{"type": "tray", "count": 72, "fanout": {"nvl": 18, "leaf": 4},
                      "at": {"spine": "s0"}}],
    }  # fmt: skip
    model = ModelSpec(params_b=70, hidden=8192, layers=80, seq_len=8192, micro_batch=1,
                      micro_batches=16)  # fmt: skip
    w = Workload.from_layout("j", Layout(tp=4, pp=4, dp=8), model)
    return PlacementProblem.build(cluster_from_dict(doc, "nvl72"), w)


def mixtral() -> ModelSpec:
    """A Mixtral-like MoE model (47B parameters, 8 experts, top-2)."""
    return ModelSpec(
        params_b=47,
        expert_params_b=45,
        hidden=4096,
        layers=32,
        seq_len=4096,
        micro_batches=8,
        experts=8,
        top_k=2,
    )


def moe_problem() -> PlacementProblem:
    """A Mixtral-like MoE job (TP2 x EP8 x DP4, 64 workers) on 8 nodes, 4 per leaf."""
    from tsched.workload import Layout, Workload

    return PlacementProblem.build(
        fabric(8, 4), Workload.from_layout("moe", Layout(tp=2, dp=4, ep=8), mixtral())
    )


def brute_force(problem: PlacementProblem) -> tuple[float, np.ndarray]:
    """Exact optimum by enumerating every injection of workers into locations (tiny only)."""
    n, m = problem.n_workers, problem.n_locations
    best, arg = np.inf, None
    for perm in itertools.permutations(range(m), n):
        a = np.array(perm)
        value = objective(problem, a)
        if value < best - 1e-12:
            best, arg = value, a
    assert arg is not None
    return best, arg


def check_lagrangian_bound(problem: PlacementProblem) -> None:
    """The Lagrangian bound, with and without worker counts, at or below the optimum found by
    enumeration (tiny problems only; infeasible or traffic-free ones are skipped)."""
    from tsched.solvers.bounds.lagrange import lagrangian_bound

    if not problem.feasible or problem.n_edges == 0:
        return
    optimum, _ = brute_force(problem)
    for counts in (True, False):
        value = lagrangian_bound(problem, counts=counts)
        assert value is None or value <= optimum + 1e-9 * max(1.0, optimum)


def listening(port: int, host: str = "127.0.0.1") -> bool:
    """Whether something accepts TCP connections at host:port now."""
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, int(port))) == 0


def with_marks(*marks):
    """A decorator that applies every one of ``marks`` (one name for a family of live tests)."""

    def apply(test):
        for mark in marks:
            test = mark(test)
        return test

    return apply


@pytest.fixture
def cluster4() -> Cluster:
    return small_cluster()


@pytest.fixture(scope="session")
def ray_cluster():
    """A real local Ray cluster: a head without GPUs, three simulated GPU nodes with topology
    labels and one custom resource per GPU (tsched's convention), and one GPU node with no CPU
    (tasks needing a CPU never run there). One per test session; everything it started is shut
    down at the end."""
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster as RayCluster

    cluster = RayCluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "labels": {"tsched.io/node": "head"}},
    )
    specs = [
        ("gpu-a", 4, {"tsched.io/leaf": "l0", "tsched.io/spine": "s0"}),
        ("gpu-b", 4, {"tsched.io/leaf": "l0", "tsched.io/spine": "s0"}),
        ("gpu-c", 8, {"tsched.io/leaf": "l1", "tsched.io/spine": "s0",
                      "tsched.io/gpu-model": "H100", "tsched.io/gpu-memory-gb": "80"}),
    ]  # fmt: skip
    from tsched.backends.ray import gpu_resource

    for name, gpus, labels in specs:
        cluster.add_node(
            num_cpus=2,
            num_gpus=gpus,
            labels={"tsched.io/node": name, **labels},
            resources={gpu_resource(name, i): 1 for i in range(gpus)},
        )
    cluster.add_node(
        num_cpus=0,
        num_gpus=2,
        labels={"tsched.io/node": "no-cpu"},
        resources={gpu_resource("no-cpu", i): 1 for i in range(2)},
    )
    ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
    try:
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()


def pytest_collection_modifyitems(config, items):
    """Run the tests that use the local Ray cluster last and together: the cluster (several
    raylets) then lives only while they run, not while CPU-heavy solver tests load the two
    cores, which can starve Ray's health checks and make it end the test process."""
    items.sort(key=_order)


def _order(item) -> int:
    """Plain tests first, then the tests that start a sandbox of their own (before the shared
    Ray cluster of the `ray` tests exists), then the `ray` tests."""
    if item.get_closest_marker("sandbox") is not None:
        return 1
    return 2 if item.get_closest_marker("ray") is not None else 0
