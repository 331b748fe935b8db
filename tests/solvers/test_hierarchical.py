"""Hierarchical decomposition: partitioning kernels, the nested domain tree, sparse local
search, and the method on fragmented, mixed and PCIe clusters."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import tsched
from tests.conftest import brute_force, fabric, moe_problem, nvl72_tp4_pp4_dp8, small_cluster
from tsched.cluster import Cluster, LinkClass, Node, NodeType
from tsched.problem import PlacementProblem, objective
from tsched.solvers import _sparse_kernel as K
from tsched.solvers.hierarchical import (
    block_units,
    have_metis,
    nested_keys,
    partition,
    sparse_refine,
    symmetric_graph,
)
from tsched.workload import Layout, ModelSpec, Workload

PARTITIONERS = ["grow", "metis"] if have_metis() else ["grow"]


def random_graph(seed: int, n: int, density: float = 0.3) -> sp.csr_array:
    rng = np.random.default_rng(seed)
    w = rng.random((n, n)) * (rng.random((n, n)) < density)
    w = np.triu(w, 1)
    g = sp.csr_array(w + w.T)
    g.sort_indices()
    return g


def csr(g: sp.csr_array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return g.indptr.astype(np.int64), g.indices.astype(np.int64), g.data.astype(float)


def cut_of(g: sp.csr_array, part: np.ndarray) -> float:
    coo = sp.triu(g, 1).tocoo()
    return float(coo.data[part[coo.row] != part[coo.col]].sum())


def py(fn):
    """The plain-Python version of a kernel (numba's ``py_func``), or the function itself."""
    return getattr(fn, "py_func", fn)


# ---------------------------------------------------------------------- partitioning kernels
@pytest.mark.parametrize("seed", range(4))
def test_grow_and_refine_keep_sizes_and_cut_only_falls(seed: int) -> None:
    g = random_graph(seed, 24)
    sizes = np.array([8, 7, 5, 4])
    part = K.grow_parts(*csr(g), sizes)
    assert np.array_equal(np.bincount(part, minlength=4), sizes)
    before = cut_of(g, part)
    assert K.cut(*csr(g), part) == pytest.approx(before)
    K.refine_parts(*csr(g), part, 4, 50)
    assert np.array_equal(np.bincount(part, minlength=4), sizes)
    assert cut_of(g, part) <= before + 1e-12


@pytest.mark.parametrize("seed", range(3))
def test_compiled_kernels_match_plain_python(seed: int) -> None:
    g = random_graph(seed, 20)
    sizes = np.array([6, 6, 8])
    a = K.grow_parts(*csr(g), sizes)
    b = py(K.grow_parts)(*csr(g), sizes)
    assert np.array_equal(a, b)
    swaps_a = K.refine_parts(*csr(g), a, 3, 50)
    swaps_b = py(K.refine_parts)(*csr(g), b, 3, 50)
    assert swaps_a == swaps_b and np.array_equal(a, b)
    skewed = np.zeros(20, dtype=np.int64)  # everything in part 0: rebalance must spread it
    r1 = K.rebalance(*csr(g), skewed.copy(), sizes)
    r2 = py(K.rebalance)(*csr(g), skewed.copy(), sizes)
    assert np.array_equal(r1, r2) and np.array_equal(np.bincount(r1, minlength=3), sizes)


@pytest.mark.parametrize("partitioner", PARTITIONERS)
def test_partition_separates_disjoint_cliques(partitioner: str) -> None:
    block = np.ones((4, 4)) - np.eye(4)
    g = sp.csr_array(sp.block_diag([block * 3, block * 2, block]).toarray())
    part, value, used = partition(g, np.array([4, 4, 4]), partitioner)
    assert value == 0.0 and used == partitioner
    for k in range(3):
        assert len(set(part[4 * k : 4 * k + 4])) == 1


def test_partition_rejects_wrong_sizes() -> None:
    with pytest.raises(ValueError, match="sum to 5"):
        partition(random_graph(0, 6), np.array([2, 3]))


# ---------------------------------------------------------------------- the tree of domains
def test_nested_keys_nest_levels_that_do_not() -> None:
    # leaf l0 spans both spines: (spine, leaf) pairs must become distinct domains
    links = {"nv": LinkClass("nv", 450), "leaf": LinkClass("leaf", 50)}
    links["spine"] = LinkClass("spine", 25)
    types = {"box": NodeType("box", 2, intra="nv")}
    nodes = (
        Node("a", "box", {"leaf": "l0", "spine": "s0"}),
        Node("b", "box", {"leaf": "l0", "spine": "s1"}),
        Node("c", "box", {"leaf": "l1", "spine": "s1"}),
    )
    cl = Cluster("odd", links, ("leaf", "spine"), types, nodes)
    p = PlacementProblem.build(cl, Workload.from_matrix("w", np.ones((2, 2)) - np.eye(2)))
    keys = nested_keys(p)
    assert keys.shape == (6, 4)  # root, spine, leaf (keyed by spine), node
    assert len(np.unique(keys[:, 2])) == 3  # (s0,l0), (s1,l0), (s1,l1)
    for depth in range(1, keys.shape[1]):  # every domain has exactly one parent
        for d in np.unique(keys[:, depth]):
            assert len(np.unique(keys[keys[:, depth] == d, depth - 1])) == 1


# ---------------------------------------------------------------------- sparse local search
@pytest.mark.parametrize("seed", range(3))
def test_sparse_refine_improves_and_stays_valid(seed: int) -> None:
    problem = moe_problem()
    start = np.random.default_rng(seed).permutation(problem.n_locations)[: problem.n_workers]
    refined, moves = sparse_refine(problem, start, seed=seed)
    assert len(np.unique(refined)) == problem.n_workers
    assert moves > 0
    assert objective(problem, refined) < objective(problem, start)


def test_sparse_refine_change_matches_objective_and_plain_python() -> None:
    problem = PlacementProblem.build(
        small_cluster(busy={"n1": (0,)}), Workload.from_matrix("w", _traffic(0, 9))
    )
    start = np.arange(problem.n_workers)
    outs = []
    for kernel in (K.local_search, py(K.local_search)):
        from tsched.solvers import hierarchical as H

        original = K.local_search
        try:
            K.local_search = kernel
            refined, moves = H.sparse_refine(problem, start.copy())
        finally:
            K.local_search = original
        outs.append((refined, moves))
    assert np.array_equal(outs[0][0], outs[1][0]) and outs[0][1] == outs[1][1]
    assert objective(problem, outs[0][0]) <= objective(problem, start)


def _traffic(seed: int, n: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    f = rng.random((n, n)) * (rng.random((n, n)) < 0.5)
    np.fill_diagonal(f, 0)
    return f


# ---------------------------------------------------------------------- the method
@pytest.mark.parametrize("seed", range(3))
def test_equals_brute_force_on_small_hierarchies(seed: int) -> None:
    cl = small_cluster(busy={"n0": (0, 1), "n3": (1,)}, gpus=2)
    problem = PlacementProblem.build(cl, Workload.from_matrix("w", _traffic(seed, 4)))
    optimum, _ = brute_force(problem)
    result = tsched.solve(problem, method="hierarchical", seed=0)
    assert result.objective == pytest.approx(optimum)


def test_beats_greedy_on_moe_all_to_all() -> None:
    problem = moe_problem()
    hier = tsched.solve(problem, method="hierarchical", seed=0)
    greedy = tsched.solve(problem, method="greedy", seed=0)
    assert hier.objective <= greedy.objective * 1.001
    auto = tsched.solve(problem, method="auto", seed=0, time_limit=2)
    assert auto.objective <= min(hier.objective, greedy.objective) + 1e-9


def test_respects_busy_gpus_and_keeps_tp_groups_on_one_node() -> None:
    busy = {f"n{i}": (0, 1, 2, 3) for i in range(0, 8, 2)}  # every other node half busy
    cl = fabric(8, 4).with_busy(busy)
    model = ModelSpec(params_b=8, hidden=4096, layers=32, seq_len=8192, micro_batches=8)
    wl = Workload.from_layout("j", Layout(tp=4, pp=2, dp=4), model)
    problem = PlacementProblem.build(cl, wl)
    result = tsched.solve(problem, method="hierarchical", seed=0)
    gpus = problem.locations[result.assignment]
    assert not cl.busy_mask[gpus].any()
    node = cl.gpu_node[gpus]
    assert all(len(set(node[g * 4 : g * 4 + 4])) == 1 for g in range(8))


def test_mixed_node_types_and_pcie_matrix() -> None:
    pcie = tsched.load_cluster("pcie-8gpu")
    nt = next(iter(pcie.node_types.values()))
    dgx = NodeType("dgx", 8, "H100", 80, intra=next(iter(pcie.links)))
    links = dict(pcie.links)
    links["leaf"] = LinkClass("leaf", 25)
    cl = Cluster(
        "mixed",
        links,
        ("leaf",),
        {nt.name: nt, "dgx": dgx},
        (
            Node("p0", nt.name, {"leaf": "l0"}, busy=(3,)),
            Node("p1", nt.name, {"leaf": "l0"}),
            Node("d0", "dgx", {"leaf": "l0"}, busy=(0, 5)),
        ),
    )
    model = ModelSpec(params_b=8, hidden=4096, layers=32, seq_len=8192, micro_batches=8)
    wl = Workload.from_layout("j", Layout(tp=2, pp=2, dp=4), model)
    problem = PlacementProblem.build(cl, wl)
    result = tsched.solve(problem, method="hierarchical", seed=0)
    assert result.status in ("feasible", "optimal")
    assert not cl.busy_mask[problem.locations[result.assignment]].any()
    # no single exchange or move within the used nodes improves the plan any more
    again, moves = sparse_refine(problem, result.assignment)
    assert moves == 0 and objective(problem, again) == pytest.approx(result.objective)


def test_symmetric_graph_has_both_directions() -> None:
    f = np.zeros((3, 3))
    f[0, 1], f[1, 0], f[2, 0] = 2.0, 1.0, 4.0
    g = symmetric_graph(PlacementProblem.from_qap(f, np.ones((3, 3)) - np.eye(3)))
    assert g.toarray().tolist() == [[0, 3, 4], [3, 0, 0], [4, 0, 0]]


def test_bad_partitioner_option() -> None:
    with pytest.raises(tsched.InputError, match="partitioner='kl'"):
        tsched.solve(moe_problem(), method="hierarchical", options={"partitioner": "kl"})


def test_even_split_over_the_same_racks_keeps_pipeline_stages_whole() -> None:
    """Four 72-GPU NVLink racks (trays and racks on links of equal cost) and a TP4 × PP4 × DP8
    job of 128 workers: filling the first rack (72 + 56) splits pipelines; 64 + 64, the even
    split over the same two racks, cuts only between stages. The decomposition tries both and
    keeps the smaller cut, reaching the optimum the bounds prove (39.592)."""
    from tsched.solvers.hierarchical import _even_sizes

    assert _even_sizes(np.array([72, 72]), 128).tolist() == [64, 64]
    assert _even_sizes(np.array([10, 3, 10]), 20).tolist() == [9, 3, 8]
    problem = nvl72_tp4_pp4_dp8()
    cluster = problem.cluster
    result = tsched.solve(problem, method="hierarchical", seed=0)
    racks = cluster.node_group[cluster.gpu_node[problem.locations[result.assignment]], 0]
    assert sorted(np.bincount(racks)[np.bincount(racks) > 0].tolist()) == [64, 64]
    assert result.objective == pytest.approx(39.59171511182221, rel=1e-9)
    assert result.status == "optimal"


def _nvl72_racks(free: list[int], per_leaf: int = 4) -> Cluster:
    """GB200 NVL72 racks (18 trays of 4 GPUs) with the given free GPUs per rack, leaves and
    spines of one bandwidth: which leaf a rack sits in costs nothing."""
    from tsched.formats.cluster_yaml import cluster_from_dict

    doc = {
        "tsched": "cluster/v1",
        "name": f"nvl72-{72 * len(free)}",
        "links": {"nvlink": {"bandwidth": 900}, "nvl": {"bandwidth": 900},
                  "leaf": {"bandwidth": 50}, "spine": {"bandwidth": 50}},
        "levels": ["nvl", "leaf", "spine"],
        "node_types": {"tray": {"gpus": 4, "gpu": {"model": "B200"}, "intra": "nvlink"}},
        "generate": [{"type": "tray", "count": 18 * len(free),
                      "fanout": {"nvl": 18, "leaf": per_leaf}, "at": {"spine": "s0"}}],
    }  # fmt: skip
    cluster = cluster_from_dict(doc, "racks")
    busy = {}
    for rack, room in enumerate(free):
        for tray in range(18):
            keep = min(4, max(0, room - 4 * tray))
            if keep < 4:
                busy[cluster.nodes[18 * rack + tray].name] = list(range(keep, 4))
    return cluster.with_busy(busy)


def test_wide_decomposition_chooses_racks_by_capacity_across_leaves() -> None:
    """TP4 × PP4 × DP6 on 16 fragmented NVL72 racks: one leaf holds the job, so greedy and the
    plain decomposition fill its racks (28, 44, 20, 4 workers) and cut pipelines; the wide one
    leaves the leaves (they cost nothing) and puts one pipeline stage of every replica (24
    workers) on each of four racks wherever they are, which the bound nearly meets."""
    free = [13, 21, 24, 12, 10, 14, 26, 16, 32, 23, 2, 27, 28, 44, 22, 4]
    model = ModelSpec(params_b=70, hidden=8192, layers=80, seq_len=8192, micro_batch=1,
                      micro_batches=16)  # fmt: skip
    workload = Workload.from_layout("j", Layout(tp=4, pp=4, dp=6), model)
    problem = PlacementProblem.build(_nvl72_racks(free), workload)
    greedy = tsched.solve(problem, method="greedy", seed=0)
    plan = tsched.solve(problem, method="hierarchical", seed=0)
    assert plan.stats["variant"] == "wide"
    assert plan.objective < 0.9 * greedy.objective
    cluster = problem.cluster
    racks = cluster.node_group[cluster.gpu_node[problem.locations[plan.assignment]], 0]
    assert sorted(np.unique(racks, return_counts=True)[1].tolist()) == [24, 24, 24, 24]
    auto = tsched.solve(problem, method="auto", seed=0, time_limit=10)
    assert auto.objective <= plan.objective + 1e-9
    assert auto.bound is not None and auto.gap is not None and auto.gap < 0.002


def test_block_units_are_the_small_divisors_of_the_job_and_its_atom() -> None:
    assert block_units(248, 1) == [2, 4, 8]
    assert block_units(96, 1) == [2, 3, 4, 6, 8, 12, 16]
    assert block_units(7, 1) == []
    assert block_units(64, 32) == [2, 4, 8, 16, 32]
