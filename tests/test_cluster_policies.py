"""Cluster placement rules, admission regimes, reservations, the ceiling and the study statistics,
checked on hand-built clusters and traces."""

from __future__ import annotations

import csv
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

import tsched
from tsched.cluster import Cluster, LinkClass, Node, NodeType
from tsched.compare.jobmodel import AppModel, CollectiveModel
from tsched.compare.placement import (
    View,
    _best_fit,
    _domains,
    _first_fit,
    _restricted,
    admits_compact,
    compact_room,
    fragmentation,
    is_compact,
    place,
)
from tsched.compare.runner import parse_policies
from tsched.compare.simulator import SimConfig, simulate
from tsched.compare.study import (
    at_load,
    bucket_of,
    offered_load,
    replica,
    window_load,
)
from tsched.compare.traces import TraceJob
from tsched.errors import InputError
from tsched.stats import ci95, paired_ci95

MODELS = Path(__file__).resolve().parents[1] / "models"
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


def job(name: str, submit: float, gpus: int, duration: float) -> TraceJob:
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


def test_first_fit_takes_the_first_free_gpus_in_node_order() -> None:
    c = fabric()
    assert place("first-fit", view(c, BUSY), 2).tolist() == [3, 5]  # spans n0 and n1
    assert place("pack", view(c, BUSY), 2).tolist() == [3, 5]  # the old name
    assert place("first-fit", view(c, BUSY, "compact"), 2).tolist() == [5, 6]  # n1: first room


def test_best_fit_takes_the_fullest_node_that_fits() -> None:
    c = fabric()
    assert place("best-fit", view(c, BUSY), 1).tolist() == [3]  # n0 has 1 free
    assert place("best-fit", view(c, BUSY), 3).tolist() == [5, 6, 7]  # n1 has exactly 3
    # no node holds 5 compactly without whole nodes: one whole node plus the best fit for 1
    got = place("best-fit", view(c, BUSY, "compact"), 5)
    assert sorted(set(c.gpu_node[got].tolist())) == [0, 2]


def test_kai_tas_and_slurm_tree_take_the_tightest_domain() -> None:
    c = fabric()
    # 6 GPUs: no node holds them; leaf l0 has 4 free, l1 has 8: l1 is the only leaf that fits
    for rule in ("kai-tas", "slurm-tree"):
        got = place(rule, view(c, BUSY), 6)
        assert set(c.gpu_node[got].tolist()) <= {2, 3}
    # 4 GPUs, no node with 4 free: l0 has 4 free (1 + 3), l1 has 5 (2 + 3): l0 is the tightest
    busy = [*BUSY, 8, 9, 12]
    assert sorted(place("kai-tas", view(c, busy), 4).tolist()) == [3, 5, 6, 7]
    assert place("slurm-tree", view(c, busy, "compact"), 4) is None  # no node holds it
    # a node that holds the job is the tightest domain of all
    busy = [*BUSY, 8, 9]
    assert set(c.gpu_node[place("slurm-tree", view(c, busy, "compact"), 4)].tolist()) == {3}
    assert set(c.gpu_node[place("kai-tas", view(c, busy), 4)].tolist()) == {3}


def _every_domain(v: View, n: int, inside) -> np.ndarray | None:
    """KAI-TAS / Slurm tree under compact admission the long way: at each level every domain
    whose whole nodes and partial GPUs (up to a node's worth) could hold the job, least first,
    until ``inside`` places it there; then the whole cluster."""
    f, size = v.per_node, v.size
    gmax = int(size.max())
    if n > int(f.sum()):
        return None
    got = None
    if n <= gmax and (f >= n).any():
        fits = np.flatnonzero(f >= n)
        got = inside(_restricted(v, np.arange(len(f)) == fits[np.lexsort((fits, f[fits]))[0]]), n)
    else:
        for dom in _domains(v):
            room = np.bincount(dom, weights=np.where(v.whole, size, 0))
            room = room + np.bincount(dom, weights=np.where(v.whole, 0, f)).clip(max=gmax)
            fits = np.flatnonzero(room >= n)
            for d in fits[np.lexsort((fits, room[fits]))]:
                got = inside(_restricted(v, dom == d), n)
                if got is not None:
                    break
            if got is not None:
                break
        else:
            got = inside(v, n)
    return got if got is not None and admits_compact(v.cluster, got) else None


def test_compact_room_and_the_tightest_domain_agree_with_trying_every_domain() -> None:
    """The simulator refuses a job where :func:`compact_room` says no compact placement is
    free, and KAI-TAS and Slurm tree skip the domains that cannot hold it: on random states of
    a three-leaf cluster and a mixed one, neither changes a placement."""
    rng = np.random.default_rng(3)
    for c in (fabric(nodes_per_leaf=3, leaves=3, gpus=4), mixed()):
        for _ in range(150):
            busy = np.flatnonzero(rng.random(c.n_gpus) < rng.random()).tolist()
            v = view(c, busy, "compact")
            for n in range(1, c.n_gpus + 1):
                some = [place(r, v, n) is not None for r in ("first-fit", "best-fit", "spread")]
                assert compact_room(v.per_node, v.size, n) == any(some) == all(some), (busy, n)
                for rule, inside in (("kai-tas", _first_fit), ("slurm-tree", _best_fit)):
                    got, want = place(rule, v, n), _every_domain(v, n, inside)
                    assert (got is None) == (want is None), (rule, busy, n)
                    if got is not None:
                        assert sorted(got.tolist()) == sorted(want.tolist()), (rule, busy, n)


def test_whole_nodes_rule_waits_for_idle_nodes_even_under_any_admission() -> None:
    c = fabric()
    got = place("whole-nodes", view(c, BUSY), 8)
    assert sorted(set(c.gpu_node[got].tolist())) == [2, 3]  # the high end
    assert place("whole-nodes", view(c, [*BUSY, 15]), 8) is None  # 11 free, one whole node
    assert place("first-fit", view(c, [*BUSY, 15]), 8) is not None  # count admission starts it


def test_spread_takes_the_emptiest_nodes_round_robin() -> None:
    c = fabric()
    got = place("spread", view(c, BUSY), 2)
    assert sorted(c.gpu_node[got].tolist()) == [2, 3]


def test_compact_admission_refuses_a_scattered_placement() -> None:
    c = fabric(nodes_per_leaf=1, leaves=2)  # two nodes of 4
    busy = [0, 1, 4, 5]  # 2 free on each node
    for rule in ("first-fit", "best-fit", "kai-tas", "slurm-tree", "spread", "random", "fgd"):
        assert place(rule, view(c, busy, "compact"), 3) is None, rule
        got = place(rule, view(c, busy, "any"), 3)
        assert got is not None and not is_compact(c, got), rule


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


def test_compact_admission_takes_whole_nodes_of_any_size() -> None:
    c = mixed()
    n0, n1, n2, n3 = (list(range(s, s + g)) for s, g in ((0, 8), (8, 4), (12, 4), (16, 4)))
    assert admits_compact(c, np.array(n1 + n2 + n3))  # 12 GPUs on three whole 4-GPU nodes
    assert admits_compact(c, np.array(n0 + n1[:2]))  # whole nodes and one remainder
    assert not admits_compact(c, np.array(n0[:6] + n1 + n2[:2]))  # two nodes not whole
    assert not admits_compact(c, np.array(n1 + n2))  # 8 GPUs fit the 8-GPU node: one node
    # two 6-GPU halves on 8-GPU nodes use the fewest nodes, but neither node whole
    two = fabric(nodes_per_leaf=2, leaves=1, gpus=8)
    halves = np.array([*range(6), *range(8, 14)])
    assert is_compact(two, halves) and not admits_compact(two, halves)
    # with a GPU of n0 busy, 10 GPUs take whole small nodes and a remainder under every rule
    # that may (before, only the fewest nodes counted, and none of these placements did)
    for rule in ("first-fit", "best-fit", "kai-tas", "slurm-tree", "spread", "random", "fgd"):
        got = place(rule, view(c, [0], "compact"), 10)
        assert got is not None and admits_compact(c, got), rule
    # whole-nodes takes whole idle nodes from the high end: n3, n2 and n1 for 12 GPUs (a replay
    # stalled on it before: the idle cluster could not give them "that way")
    recs, _ = sim([job("a", 0, 12, 10.0)], c, "whole-nodes", admission="compact")
    assert recs["a"].start == 0.0 and recs["a"].nodes == 3


def test_fragmentation_is_what_the_shapes_cannot_use() -> None:
    f = fragmentation(np.array([4, 3, 2, 1, 0]), 4, {1: 0.5, 2: 0.25, 4: 0.25})
    # shape 1: nothing lost; shape 2: free mod 2; shape 4: all of a partial node
    assert f.tolist() == [0.0, 0.25 * 1 + 0.25 * 3, 0.25 * 2, 0.25 * 1 + 0.25 * 1, 0.0]


def test_fgd_keeps_whole_nodes_and_fills_holes_that_stay_anyway() -> None:
    c = fabric()
    shapes = {1: 0.2, 4: 0.8}
    # n0 has 1 free and stays busy 1000 s; n1 has 3 free and frees in 10 s: a 1-GPU job of
    # 100 s fills n0's lasting hole rather than keep n1 from becoming whole
    hold = np.array([1000.0, 10.0, 0.0, 0.0])
    got = place("fgd", view(c, BUSY, "compact", shapes=shapes, hold=hold, duration=100.0), 1)
    assert c.gpu_node[got].tolist() == [0]
    # with n0's hole gone, a 1-GPU job goes to n1 (no whole node broken)
    got = place("fgd", view(c, [*BUSY, 3], "compact", shapes=shapes, hold=hold, duration=100.0), 1)
    assert c.gpu_node[got].tolist() == [1]
    # an 8-GPU job takes the two whole nodes of one leaf
    got = place("fgd", view(c, BUSY, "compact", shapes=shapes), 8)
    assert sorted(set(c.gpu_node[got].tolist())) == [2, 3]


def test_fgd_waits_for_a_compact_placement_when_the_wait_costs_less_than_the_split() -> None:
    c = fabric()
    # BUSY leaves 1 + 3 free on n0, n1; n2 and n3 busy too: 4 GPUs free, none compact
    busy = [*BUSY, *range(8, 16)]

    def rule(duration: float, wait: float, waited: float = 0.0) -> np.ndarray | None:
        v = view(c, busy, slowdown=lambda g: 1.0 if is_compact(c, g) else 1.5,
                 duration=duration, wait=lambda n: wait, waited=waited)  # fmt: skip
        return place("fgd", v, 4)

    # the split costs the job 100 s x 0.5 = 50 s: a compact node in 10 s is worth the wait
    assert rule(100.0, wait=10.0) is None
    # a compact node only in 60 s: the split now is sooner
    got = rule(100.0, wait=60.0)
    assert got is not None and not is_compact(c, got)
    # the job has already waited 45 s of its 50: it waits no longer
    assert rule(100.0, wait=10.0, waited=45.0) is not None
    # a split that fills lasting holes can outscore a compact placement on fragments alone:
    # n0 and n1 have 3 free, n2 has 2, n3 none, all busy for long; only 2-GPU jobs expected.
    # One GPU from each of n0 and n1 leaves them even (100 s x 2 fragments fewer) for 50 s of
    # the job's own; a node of its own changes no fragment. When the split would cost the job
    # time and a compact placement is free now, the job gets the compact one.
    v = view(c, [0, 4, 8, 9, 12, 13, 14, 15], shapes={2: 1.0},
             hold=np.array([1000.0, 1000.0, 1000.0, 0.0]),
             slowdown=lambda g: 1.0 if is_compact(c, g) else 1.5, duration=100.0)  # fmt: skip
    got = place("fgd", v, 2)  # without a wait estimate: the split
    assert sorted(c.gpu_node[got].tolist()) == [0, 1]
    got = place("fgd", replace(v, wait=lambda n: 0.0), 2)
    assert got is not None and is_compact(c, got)
    # under compact admission there is no split to weigh: it simply waits
    v = view(c, busy, "compact", duration=100.0, wait=lambda n: 1e9)
    assert place("fgd", v, 4) is None


def test_fgd_defers_a_long_communicating_job_to_a_node_that_frees_soon() -> None:
    # n0 and n1 have 2 GPUs busy for good; n2 is whole. "a" takes n2 for 100 s, so at t=1 a
    # 4-GPU job can start split over n0 and n1 (about 2x slower: its all-reduce crosses the
    # leaf) or wait 99 s for n2.
    c = busy_for_good(fabric(nodes_per_leaf=3, leaves=1), {0: (0, 1), 1: (0, 1)})

    def run(policy: str, duration: float) -> dict:
        jobs = [TraceJob("a", 0.0, 4, 100.0, "c"), TraceJob("b", 1.0, 4, duration, "c")]
        return replay(jobs, c, policy)

    long = run("fgd", 1000.0)
    assert long["a"].nodes == 1
    assert long["b"].start == pytest.approx(100.0) and long["b"].nodes == 1
    # best fit never waits: it starts the job split at once and the job runs slower
    bf = run("best-fit", 1000.0)
    assert bf["b"].start == pytest.approx(1.0) and bf["b"].nodes == 2
    assert long["b"].end < bf["b"].end
    # a short job loses less than 99 s by the split: fgd starts it at once
    short = run("fgd", 50.0)
    assert short["b"].start == pytest.approx(1.0) and short["b"].nodes == 2


def test_fgd_scatters_what_runs_faster_scattered_and_keeps_whole_nodes_for_the_rest() -> None:
    # One NIC per node: the shipped job model runs cifar10 faster spread over 8 nodes than on 2
    # whole nodes, and yolov3 slower on any split. Under count admission a fragment costs only
    # what the shapes expected on it lose there, so fgd spreads the cifar10 jobs (whose shape
    # loses nothing) and still gives yolov3 a whole node.
    c = tsched.load_cluster(MODELS / "clusters" / "g4dn-12xlarge-16node.yaml")
    jobs = [TraceJob(f"c{k}", 600.0 * k, 8, 500.0, "cifar10") for k in range(6)]
    jobs.append(TraceJob("y", 4000.0, 4, 3000.0, "yolov3"))

    def run(policy="fgd", **kw):
        cfg = parse_policies(policy, SimConfig(queue="backfill", **kw))[0]
        return {r.job: r for r in simulate(jobs, c, cfg).records}

    # what the job model says: one GPU a node is 10-50 % faster than two whole nodes
    spread, packed = run("spread")["c0"], run("best-fit")["c0"]
    assert (spread.nodes, packed.nodes) == (8, 2) and 0.1 < 1 - spread.jct / packed.jct < 0.5
    recs = run()
    assert all(recs[f"c{k}"].nodes == 8 for k in range(6))
    assert recs["c0"].jct == pytest.approx(spread.jct)
    assert recs["y"].nodes == 1 and recs["y"].jct == pytest.approx(3000.0)
    # a speed-up within the model margin is not acted on: the jobs stay on whole nodes
    recs = run(model_margin=0.5)
    assert all(recs[f"c{k}"].nodes == 2 for k in range(6))


def test_fgd_weighs_fragments_over_the_node_jobs_actual_ends() -> None:
    # Only 2-GPU jobs expected: a node's fragment is its odd free GPU. n0 has 1 free; of its
    # busy GPUs one frees at 10 s and two at 1000 s. n2 has 3 free and 1 busy for 1000 s.
    # A 1-GPU job of 100 s on n0 evens it for 10 s, then leaves it odd (1 free where 2 would
    # be) for 90 s: +80 fragment-seconds. On n2 it evens the node for all 100 s: -100. Counted
    # as if every busy GPU came back at the node's last end, n0 would look as good as n2 and
    # win the tie as the fuller node.
    c = fabric()
    busy = [0, 1, 2, 8, 12, 13, 14, 15]
    hold = np.array([1000.0, 0.0, 1000.0, 1000.0])
    inf = np.inf
    after = np.array([[10.0, 1000.0], [inf, inf], [1000.0, inf], [1000.0, inf]])
    gpus = np.array([[1, 2], [0, 0], [1, 0], [4, 0]])
    v = view(c, busy, "compact", shapes={2: 1.0}, hold=hold, duration=100.0)
    assert c.gpu_node[place("fgd", v, 1)].tolist() == [0]  # by the last end alone
    v = replace(v, releases=(after, gpus))
    assert c.gpu_node[place("fgd", v, 1)].tolist() == [2]


def test_fgd_takes_the_fewest_nodes_when_none_is_whole() -> None:
    # Two nodes of 8 GPUs, 2 busy on each for good: 6 + 6 free. A 12-GPU job needs two nodes
    # whatever happens, and 6 + 6 is two nodes: fgd starts it at once, as the packing rules do,
    # instead of waiting for a whole node that never comes.
    c = busy_for_good(fabric(nodes_per_leaf=2, leaves=1, gpus=8), {0: (0, 1), 1: (0, 1)})
    got = place("fgd", view(c, [0, 1, 8, 9]), 12)
    assert got is not None and sorted(got.tolist()) == [2, 3, 4, 5, 6, 7, 10, 11, 12, 13, 14, 15]
    recs = replay([TraceJob("b", 0.0, 12, 100.0, "c")], c, "fgd")
    assert recs["b"].start == 0.0 and recs["b"].nodes == 2
    # three nodes with 7, 6 and 3 free: the two with most room take 12 as 7 + 5
    c3 = fabric(nodes_per_leaf=3, leaves=1, gpus=8)
    got = place("fgd", view(c3, [0, 8, 9, *range(16, 21)]), 12)
    assert got is not None and np.bincount(c3.gpu_node[got], minlength=3).tolist() == [7, 5, 0]


def test_a_job_held_for_locality_keeps_the_node_it_waits_on() -> None:
    # n0 and n2 have 3 GPUs busy for good, 1 free each; n1 is whole. "b" takes 2 GPUs of n1
    # for 50 s, leaving 4 GPUs free, none 4 on one node. "h" (4 GPUs, 1000 s, all-reduce
    # heavy) would run about twice as long split: fgd holds it for n1, whole at 50. "l" (2
    # GPUs, 1000 s) comes next and fits n1's 2 free GPUs; it would still run at 50, so the
    # backfill keeps it off n1 (it starts split on n0 and n2), and h starts on n1 at 50.
    c = busy_for_good(fabric(nodes_per_leaf=3, leaves=1), {0: (0, 1, 2), 2: (0, 1, 2)})
    jobs = [TraceJob("b", 0.0, 2, 50.0, "c"), TraceJob("h", 1.0, 4, 1000.0, "c"),
            TraceJob("l", 2.0, 2, 1000.0, "c")]  # fmt: skip
    recs = replay(jobs, c, "fgd")
    assert recs["b"].nodes == 1
    assert recs["h"].start == pytest.approx(50.0) and recs["h"].nodes == 1
    # l takes the free GPU of n0 and of n2 at once, not n1's
    assert recs["l"].start == pytest.approx(2.0) and recs["l"].nodes == 2


def test_a_backfilled_job_does_not_count_on_gpus_reserved_for_the_head() -> None:
    # n0 and n3 have 3 GPUs busy for good. q takes n1 for 30 s, b 2 GPUs of n2 for 10 s. h
    # (4 GPUs, all-reduce heavy) waits for n2 (whole at 10) and, with a topology reservation,
    # reserves it. l (2 GPUs, 1000 s) may not use n2's 2 free GPUs; what it has is one GPU on
    # n0 and one on n3, a split about twice as slow. Its compact placement comes at 30 (n1),
    # not now on n2, so it waits for n1 rather than split.
    c = busy_for_good(fabric(nodes_per_leaf=4, leaves=1), {0: (0, 1, 2), 3: (0, 1, 2)})
    jobs = [TraceJob("q", 0.0, 4, 30.0, "c"), TraceJob("b", 0.0, 2, 10.0, "c"),
            TraceJob("h", 1.0, 4, 1000.0, "c"), TraceJob("l", 2.0, 2, 1000.0, "c")]  # fmt: skip
    recs = replay(jobs, c, "fgd+topo")
    assert recs["h"].start == pytest.approx(10.0) and recs["h"].nodes == 1
    assert recs["l"].start == pytest.approx(30.0) and recs["l"].nodes == 1


def test_fgd_expects_the_shapes_that_arrive_not_only_those_that_finished() -> None:
    # g4dn nodes, one NIC each: cifar10 runs faster spread, yolov3 slower on any split. A long
    # yolov3 job arrives first and runs for the whole replay; then 8-GPU cifar10 jobs, then a
    # second yolov3 job. No 4-GPU job has finished when the cifar10 jobs start, yet 4-GPU
    # work is most of what has arrived: fgd keeps whole nodes (the cifar10 jobs take two
    # whole nodes each) and the second yolov3 job starts on one at once.
    c = tsched.load_cluster(MODELS / "clusters" / "g4dn-12xlarge-16node.yaml")
    jobs = [TraceJob("y1", 0.0, 4, 30000.0, "yolov3")]
    jobs += [TraceJob(f"c{k}", 100.0 * (k + 1), 8, 5000.0, "cifar10") for k in range(4)]
    jobs.append(TraceJob("y2", 2000.0, 4, 3000.0, "yolov3"))
    cfg = parse_policies("fgd", SimConfig(queue="backfill"))[0]
    recs = {r.job: r for r in simulate(jobs, c, cfg).records}
    assert all(recs[f"c{k}"].nodes == 2 for k in range(4))
    assert recs["y2"].start == pytest.approx(2000.0) and recs["y2"].nodes == 1


def test_fgd_never_holds_a_job_back_without_an_event_to_wake_it() -> None:
    # random traces on mixed 8- and 4-GPU nodes, some GPUs busy for good: every job ends under
    # count admission (a job held back for locality always waits on some running job's end)
    apps = {"c": AppModel("c", 1.0, 0.0, 5.0), "x": AppModel("x", 1.0, 0.0, 0.0),
            "m": AppModel("m", 0.2, 0.0, 0.3)}  # fmt: skip
    types = {"a": NodeType("a", 8, "H100", 80, intra="nvl", nics=1, nic_gbps=100),
             "b": NodeType("b", 4, "T4", 16, intra="nvl", nics=1, nic_gbps=50)}  # fmt: skip
    links = {"nvl": LinkClass("nvl", 300, 1), "leaf": LinkClass("leaf", 10, 5),
             "spine": LinkClass("spine", 5, 10)}  # fmt: skip
    for seed in (40, 58, 76):  # each stalled before the rule waited only on a job's end
        rng = np.random.default_rng(seed)
        nodes = []
        for k in range(int(rng.integers(3, 9))):
            t = "a" if rng.random() < 0.5 else "b"
            g = types[t].gpus
            busy = rng.choice(g, int(rng.integers(0, g)), replace=False)
            busy = busy if rng.random() < 0.3 else []
            nodes.append(Node(f"n{k}", t, {"leaf": f"l{k // 2}", "spine": "s"},
                              busy=tuple(int(b) for b in busy)))  # fmt: skip
        c = Cluster("mixed", links, ("leaf", "spine"), types, tuple(nodes))
        usable = int((~c.busy_mask).sum())
        sizes = rng.choice([1, 2, 3, 4, 6, 8, 12, 16], 60)
        arrivals = zip(np.sort(rng.uniform(0, 3000, 60)), sizes, rng.lognormal(5, 1.5, 60),
                       rng.choice(list(apps), 60))  # fmt: skip
        jobs = [TraceJob(f"j{k}", float(t), int(min(g, usable)), float(d), str(a))
                for k, (t, g, d, a) in enumerate(arrivals)]  # fmt: skip
        for policy in ("fgd", "fgd+topo"):
            for queue in ("backfill", "fifo"):
                cfg = parse_policies(policy, SimConfig(queue=queue, seed=seed))[0]
                res = simulate(jobs, c, cfg, collective=CollectiveModel(), apps=apps)
                assert len(res.records) == len(jobs)
                assert all(r.submit <= r.start <= r.end for r in res.records)


def test_unknown_rule_and_bad_policy_suffixes_are_refused() -> None:
    c = fabric()
    with pytest.raises(InputError, match="unknown placement rule"):
        place("nope", view(c, BUSY), 1)
    with pytest.raises(InputError, match=r"\+frag applies to solvers"):
        parse_policies("best-fit+frag")
    with pytest.raises(InputError, match="unknown policy"):
        parse_policies("fgd,bogus")
    with pytest.raises(InputError, match="admission"):
        SimConfig(admission="loose")
    with pytest.raises(InputError, match="apply to solvers"):
        SimConfig(policy="fgd", fragmentation_aware=True)
    for bad in ("fgd+slack", "fgd+slack-1", "fgd+slackinf", "fgd+slackx"):
        with pytest.raises(InputError, match=r"\+slack takes a share of the head's run time"):
            parse_policies(bad)
    with pytest.raises(InputError, match="slack must be a finite share"):
        SimConfig(slack=-0.5)


def test_policy_labels_say_what_runs() -> None:
    compact = SimConfig(admission="compact")
    labels = [c.label for c in parse_policies("pack,fgd,fgd+count,best-fit+topo,greedy", compact)]
    assert labels == ["first-fit", "fgd", "fgd+count", "best-fit+topo", "greedy"]
    # under count admission fgd reserves a count, so +count names nothing new
    assert [c.label for c in parse_policies("fgd,fgd+topo")] == ["fgd", "fgd+topo"]
    with pytest.raises(InputError, match="'fgd\\+count' runs as 'fgd', already named as 'fgd'"):
        parse_policies("fgd,fgd+count")
    with pytest.raises(InputError, match="'best-fit' is named twice"):
        parse_policies("best-fit,best-fit")
    with pytest.raises(InputError, match="'first-fit' runs as 'first-fit', already named as"):
        parse_policies("pack,first-fit")
    slack = parse_policies("fgd+slack0.25,best-fit+topo+slack1,fgd+slack0", compact)
    assert [c.label for c in slack] == ["fgd+slack0.25", "best-fit+topo+slack1", "fgd"]
    assert [c.slack for c in slack] == [0.25, 1.0, 0.0]


# ---------------------------------------------------------------------------- the simulator
def test_admission_regimes_start_scattered_or_wait() -> None:
    c = fabric(nodes_per_leaf=1, leaves=2)  # two nodes of 4
    jobs = [job("a", 0, 3, 100), job("b", 0, 3, 50), job("c", 1, 2, 10)]
    # best fit: a → n0, b → n1; one GPU is left on each node
    recs, _ = sim(jobs, c, "best-fit", queue="fifo", admission="any")
    assert recs["c"].start == 1 and recs["c"].nodes == 2  # scattered at once
    recs, _ = sim(jobs, c, "best-fit", queue="fifo", admission="compact")
    assert recs["c"].start == 50 and recs["c"].nodes == 1  # waits for b's node


def test_topology_reservation_keeps_the_head_jobs_node() -> None:
    c = fabric(nodes_per_leaf=1, leaves=2)  # two nodes of 4
    jobs = [job("a", 0, 2, 100), job("b", 0, 3, 50), job("h", 1, 4, 10), job("s", 2, 1, 1000)]
    # a → n0 (2 left), b → n1 (1 left). h needs a whole node; n1 is whole at 50.
    count, _ = sim(jobs, c, "best-fit+count", admission="compact")
    topo, _ = sim(jobs, c, "best-fit+topo", admission="compact")
    # count: s fits the surplus GPU count and takes n1's last GPU, so h waits for n0 at 100
    assert count["s"].start == 2 and count["h"].start == 100
    # topology: n1 is reserved for h; s goes to n0 and h starts when b ends
    assert topo["s"].start == 2 and topo["h"].start == 50


def test_a_topology_reservation_gives_way_when_the_head_keeps_a_placement() -> None:
    # Leaves l0 = {n0, n1}, l1 = {n2, n3}. a (n0) and d (n3) end at 100, b holds n1, c frees
    # n2 at 1. h needs two whole nodes: at 100 the rule reserves n2 and n3 (a whole leaf).
    # l (4 GPUs, 1000 s) fits nowhere outside that reservation, but n0 and n3 serve h as well
    # at 100: l starts on n2 at once and h still starts at 100.
    c = fabric(nodes_per_leaf=2, leaves=2)
    jobs = [job("a", 0, 4, 100), job("b", 0, 4, 5000), job("c", 0, 4, 1), job("d", 0, 4, 100),
            job("h", 1.5, 8, 50), job("l", 2, 4, 1000)]  # fmt: skip
    for policy in ("fgd", "best-fit+topo"):
        recs, _ = sim(jobs, c, policy, admission="compact")
        assert recs["l"].start == 2 and recs["l"].nodes == 1, policy
        assert recs["h"].start == 100 and recs["h"].nodes == 2, policy


@pytest.mark.parametrize("reservation", ["+count", "+topo"])
def test_relaxed_backfill_lets_the_head_slip_by_its_slack_and_no_more(reservation) -> None:
    c = fabric(nodes_per_leaf=1, leaves=1)  # one node of 4 GPUs
    # a holds 3 GPUs until 100; h (4 GPUs, 100 s) is the head from 1, its shadow time 100.
    # s (1 GPU, 120 s) would end at 122, after the shadow: EASY keeps it back.
    jobs = [job("a", 0, 3, 100), job("h", 1, 4, 100), job("s", 2, 1, 120)]
    easy, _ = sim(jobs, c, "best-fit" + reservation)
    assert easy["h"].start == 100 and easy["s"].start == 200
    tight, _ = sim(jobs, c, f"best-fit{reservation}+slack0.1")  # may end by 110: no
    assert tight["h"].start == 100 and tight["s"].start == 200
    loose, _ = sim(jobs, c, f"best-fit{reservation}+slack0.25")  # may end by 125: yes
    assert loose["s"].start == 2 and loose["h"].start == 122
    # the bound is fixed when h first heads the queue (100 + 25), not moved with its shadow
    # time: at 100 (a ends, shadow now 122) t (ends 120) may start, u (ends 130) may not
    more = [*jobs, job("t", 3, 1, 20), job("u", 3, 1, 30)]
    recs, _ = sim(more, c, f"best-fit{reservation}+slack0.25")
    assert recs["t"].start == 100 and recs["h"].start == 122 and recs["u"].start == 222


def test_ceiling_equals_every_policy_where_placement_cannot_matter() -> None:
    rng = np.random.default_rng(3)
    c = fabric(nodes_per_leaf=1, leaves=1, gpus=8)  # one node: every placement is the same
    jobs = [job(f"j{k}", float(t), int(g), float(d)) for k, (t, g, d) in
            enumerate(zip(np.sort(rng.uniform(0, 500, 60)), rng.choice([1, 2, 4, 8], 60),
                          rng.uniform(5, 80, 60)))]  # fmt: skip
    ceiling, _ = sim(jobs, c, "best-fit", queue="fifo", stretch=False)
    for policy in ("first-fit", "best-fit", "kai-tas", "slurm-tree", "whole-nodes", "spread",
                   "random", "fgd", "greedy"):  # fmt: skip
        for admission in ("any", "compact"):
            recs, _ = sim(jobs, c, policy, queue="fifo", admission=admission)
            assert [recs[j.name].jct for j in jobs] == pytest.approx(
                [ceiling[j.name].jct for j in jobs]
            ), (policy, admission)


def test_blocked_gpu_hours_count_free_gpus_a_waiting_job_could_use_by_count() -> None:
    c = fabric(nodes_per_leaf=1, leaves=2)
    jobs = [job("a", 0, 3, 3600), job("b", 0, 3, 7200), job("c", 0, 2, 10)]
    _, res = sim(jobs, c, "first-fit", queue="fifo", admission="compact")
    # c (2 GPUs) waits an hour while 2 GPUs (1 + 1) are free
    assert res.blocked_gpu_hours == pytest.approx(2.0)
    # c runs on n0 from 3600 to 3610; n0 is then wholly free until b ends at 7200
    assert res.mean_whole_free_nodes == pytest.approx((7200 - 3610) / 7200)


# ---------------------------------------------------------------------------- the study
def test_ci95_matches_scipy() -> None:
    rng = np.random.default_rng(0)
    for n in (2, 5, 12):
        x = rng.lognormal(size=n)
        m, lo, hi = ci95(x)
        ref = stats.ttest_1samp(x, 0.0).confidence_interval(0.95)
        assert (lo, hi) == pytest.approx((ref.low, ref.high))
        assert m == pytest.approx(x.mean())
    assert ci95([4.0]) == (4.0, 4.0, 4.0)


def test_paired_ci95_matches_scipy_on_the_replicas_both_ran() -> None:
    """The paired interval is scipy's paired t interval (ttest_rel) over the common replicas, as
    a share of the other policy's mean there; a replica only one policy ran is left out."""
    rng = np.random.default_rng(1)
    spread = rng.lognormal(size=6) * 10  # replica-to-replica spread, common to both
    ours = dict(enumerate(spread * 0.95 + rng.normal(0, 0.05, 6)))
    theirs = dict(enumerate(spread))
    theirs[9] = 1e6  # not replayed by ours: no pair
    m, lo, hi, n = paired_ci95(ours, theirs)
    x, y = np.array([ours[k] for k in range(6)]), spread
    ref = stats.ttest_rel(x, y).confidence_interval(0.95)
    assert n == 6
    assert (lo, hi) == pytest.approx((ref.low / y.mean(), ref.high / y.mean()))
    assert m == pytest.approx((x - y).mean() / y.mean())
    assert hi < 0  # 5 % lower on every replica: the pairs say so ...
    own, other = ci95(x), ci95(y)
    assert own[2] > other[1]  # ... where the two intervals, each wide with the spread, overlap
    assert math.isnan(paired_ci95({0: 1.0}, {1: 1.0})[0])


def test_load_scaling_reaches_the_asked_load() -> None:
    jobs = [job(f"j{k}", k * 100.0, 2, 500.0) for k in range(11)]
    assert offered_load(jobs, 4) == pytest.approx(11 * 2 * 500 / (4 * 1000))
    scaled, factor = at_load(jobs, 4, 0.5)
    assert offered_load(scaled, 4) == pytest.approx(0.5)
    assert factor == pytest.approx(2.75 / 0.5)


def test_window_load_counts_only_the_work_before_the_window_closes() -> None:
    jobs = [job("a", 0.0, 2, 500.0), job("b", 900.0, 2, 500.0), job("late", 1200.0, 4, 50.0)]
    # a: 2 x 500 inside; b: 2 x 100 of its 500 before 1000 s; late arrives after the window
    assert window_load(jobs, 4, 1000.0) == pytest.approx((1000 + 200) / 4000)
    assert offered_load(jobs, 4, 1000.0) == pytest.approx((1000 + 1000 + 200) / 4000)


def test_window_basis_compresses_arrivals_until_the_window_holds_the_load() -> None:
    # long jobs: each runs 10 x the gap between arrivals, so much of the work ends past the window
    jobs = [job(f"j{k}", k * 100.0, 2, 1000.0) for k in range(11)]
    scaled, factor = at_load(jobs, 4, 0.9, basis="window")
    assert window_load(scaled, 4) == pytest.approx(0.9, rel=1e-8)
    offered_factor = at_load(jobs, 4, 0.9)[1]
    assert factor < offered_factor  # compressed further than the offered basis
    assert offered_load(scaled, 4) > 0.9
    # short jobs that end inside the window (closing 100 s after the last arrival): bases agree
    short = [job(f"s{k}", k * 100.0, 2, 10.0) for k in range(11)]
    assert at_load(short, 4, 0.1, 1100.0, "window")[1] == pytest.approx(
        at_load(short, 4, 0.1, 1100.0)[1]
    )
    # however hard the arrivals are compressed, 11 jobs of 2 GPUs hold at most this much of 4
    limit = sum(2 * (1000.0 - k * 100.0) for k in range(11)) / (4 * 1000.0)
    with pytest.raises(InputError, match=f"at most {limit:.3g} of the window"):
        at_load(jobs, 4, limit + 0.01, basis="window")
    with pytest.raises(InputError, match="expected one of offered, window"):
        at_load(jobs, 4, 0.5, basis="busy")


def test_day_block_replicas_keep_each_days_arrivals() -> None:
    day = 86400.0
    jobs = [job(f"d{d}-{k}", d * day + k * 600.0, 1, 60.0) for d in range(5) for k in range(d + 1)]
    a, span = replica(jobs, 1, days=3)
    assert span == 3 * day
    # each slot holds one whole source day: its job count is that day's index + 1
    for slot in range(3):
        inside = [j for j in a if slot * day <= j.submit < (slot + 1) * day]
        src = {j.name.split("-")[0] for j in inside}
        assert len(src) == 1 and len(inside) == int(src.pop()[1:]) + 1
    assert replica(jobs, 1, days=3)[0] == a  # a pure function of (trace, index)
    assert any(replica(jobs, k, days=3)[0] != a for k in range(2, 8))  # other seeds differ


def test_size_buckets_are_node_relative() -> None:
    assert bucket_of(np.array([1, 2, 7, 8, 9, 64]), 8).tolist() == [0, 1, 1, 2, 3, 3]
    assert bucket_of(np.array([1, 3, 4, 6]), 4).tolist() == [0, 1, 2, 3]


def test_compare_cli_runs_rules_under_compact_admission(tmp_path, capsys) -> None:
    import json
    from pathlib import Path

    from tsched.cli import main

    root = Path(__file__).parents[1]
    out = tmp_path / "cmp"
    code = main(["compare", "--trace", str(root / "tests/data/traces/pollux_workload-6.csv"),
                 "--policies", "fgd,best-fit,slurm-tree", "--cluster",
                 str(root / "models/clusters/g4dn-12xlarge-16node.yaml"), "--limit", "60",
                 "--queue", "backfill", "--admission", "compact", "--out", str(out), "--json",
                 "--no-plots"])  # fmt: skip
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert [r["label"] for r in summary["runs"]] == ["fgd", "best-fit", "slurm-tree"]
    # compact admission: every job of up to a node ran on one node
    from tsched.compare.records import read_records

    assert all(r.nodes == 1 for r in read_records(out / "records.csv") if r.gpus <= 4)


def test_rule_placements_carry_the_rings_communication_time_in_snapshots() -> None:
    c = fabric(nodes_per_leaf=1, leaves=2)
    jobs = [TraceJob("a", 0.0, 6, 100.0, "bert")]  # two nodes: the ring crosses the network
    cfg = SimConfig(policy="best-fit", snapshot_jobs=("a",))
    res = simulate(jobs, c, cfg)  # the shipped job model: bert-like gradients
    snap = res.snapshots["a"]
    assert len(np.unique(c.gpu_node[snap.gpus])) == 2 and snap.objective > 0


def _cells():
    from dataclasses import replace as _replace
    from pathlib import Path

    from tsched.compare.study import Cell
    from tsched.compare.traces import load_trace

    root = Path(__file__).parents[1]
    jobs = load_trace(root / "tests/data/traces/pollux_workload-6.csv", limit=40)
    path = str(root / "models/clusters/g4dn-12xlarge-16node.yaml")
    cells = [Cell("p", 1.0, r, _replace(cfg, seed=r), cfg.label)
             for cfg in parse_policies("fgd,best-fit", SimConfig(queue="backfill"))
             for r in range(2)]  # fmt: skip
    return jobs, path, cells


def _figures(rows):
    return [(r.policy, r.replica, r.jct_mean, r.jct_p99, np.nan_to_num(r.bucket_jct).tolist())
            for r in rows]  # fmt: skip


def test_study_runs_alike_serially_and_in_a_process_pool() -> None:
    from tsched.compare.study import run_cells

    jobs, path, cells = _cells()
    serial = run_cells(cells, lambda c: jobs, lambda c: path)
    pooled = run_cells(cells, lambda c: jobs, lambda c: path, workers=2)
    assert _figures(serial) == _figures(pooled)
    assert [r.policy for r in serial] == ["fgd", "fgd", "best-fit", "best-fit"]


@pytest.mark.ray
def test_study_runs_alike_on_ray(ray_cluster) -> None:
    from tsched.compare.study import run_cells

    jobs, path, cells = _cells()
    serial = run_cells(cells, lambda c: jobs, lambda c: path)
    remote = run_cells(cells, lambda c: jobs, lambda c: path, use_ray=True)
    assert _figures(serial) == _figures(remote)


def test_a_job_no_rule_can_ever_place_stops_the_replay_with_a_named_error() -> None:
    from tsched import presets

    c = presets.cluster("dgx-h100-4node")  # node 1 has two busy GPUs: three idle nodes
    jobs = [TraceJob("big", 0.0, 25, 60.0, "bert")]  # whole-nodes needs four idle nodes
    with pytest.raises(InputError, match=r"job 'big' asks for 25 GPUs.*3 nodes without busy"):
        simulate(jobs, c, SimConfig(policy="whole-nodes"))
    compact = simulate(jobs, c, SimConfig(policy="best-fit", admission="compact"))
    assert compact.records[0].nodes == 4  # three whole nodes and one GPU of the fourth


@pytest.fixture
def own_study():
    """benchmarks.cluster_policies with its module state (the studies measured) restored."""
    from benchmarks import cluster_policies as cp

    saved = dict(cp.ACTIVE), set(cp.WINDOWED), dict(cp.COLUMNS)
    yield cp
    cp.LOAD_BASIS[:] = ["offered"]
    cp.ACTIVE.clear()
    cp.ACTIVE.update(saved[0])
    cp.WINDOWED.clear()
    cp.WINDOWED.update(saved[1])
    cp.COLUMNS.clear()
    cp.COLUMNS.update(saved[2])


def test_the_policy_sweep_measures_a_users_own_trace_and_cluster(own_study, tmp_path,
                                                                 capsys) -> None:  # fmt: skip
    root = Path(__file__).parents[1]
    lines = (root / "tests/data/traces/pollux_workload-6.csv").read_text().splitlines()
    trace = tmp_path / "mine.csv"
    trace.write_text("\n".join(lines[:31]) + "\n")
    out = tmp_path / "out"
    code = own_study.main(["--trace", str(trace), "--cluster", "leaf-spine-64", "--loads", "1.2",
                           "--replicas", "2", "--admission", "compact", "--workers", "1",
                           "--out", str(out)])  # fmt: skip
    assert code == 0
    text = (out / "cluster_policies-mine.md").read_text()
    assert "## mine, `compact` admission" in text and "## pollux-6" not in text
    assert (
        "`mine`: `mine.csv` (all 30 jobs) on `leaf-spine-64` (64 GPUs, 8 nodes of up to 8)" in text
    )
    assert "--trace " + str(trace) in text and "- mine `compact` load 1.20:" in text
    with open(out / "cluster_policies-mine" / "runs.csv") as fh:
        rows = list(csv.DictReader(fh))
    # every policy of the regime and the ceiling, twice, on the one study at the one load
    assert len(rows) == 2 * (len(own_study.policies_for("compact")) + 1)
    assert {r["trace"] for r in rows} == {"mine"} and {r["load"] for r in rows} == {"1.2"}
    assert (out / "cluster_policies-mine" / "mine-load.png").stat().st_size > 0
    # the report rewritten from its runs.csv says the same
    code = own_study.main(["--trace", str(trace), "--cluster", "leaf-spine-64", "--replicas",
                           "2", "--out", str(out), "--from-csv",
                           str(out / "cluster_policies-mine" / "runs.csv")])  # fmt: skip
    assert code == 0
    again = (out / "cluster_policies-mine.md").read_text()
    assert again.split("## Goals")[1] == text.split("## Goals")[1]


def test_the_policy_sweep_scales_to_the_load_in_the_window(own_study, tmp_path) -> None:
    root = Path(__file__).parents[1]
    lines = (root / "tests/data/traces/pollux_workload-6.csv").read_text().splitlines()
    trace = tmp_path / "mine.csv"
    trace.write_text("\n".join(lines[:31]) + "\n")
    out = tmp_path / "out"
    base = ["--trace", str(trace), "--cluster", "leaf-spine-64", "--replicas", "2",
            "--admission", "compact", "--workers", "1", "--out", str(out)]  # fmt: skip
    assert own_study.main([*base, "--loads", "0.6"]) == 0
    offered = (out / "cluster_policies-mine.md").read_text()
    # 30 jobs of up to 8 hours: at offered load 0.6 the window holds far less, and it says so
    row = next(x for x in offered.splitlines() if x.startswith("| mine | "))
    o, w = (float(v) for v in row.split("|")[2].split("/"))
    assert o == pytest.approx(0.6, abs=0.005) and w < 0.3
    assert "**Note.** `mine` at offered load 0.6" not in offered  # a sweep below 1 is not warned
    assert own_study.main([*base, "--loads", "1.0", "--replicas", "2"]) == 0
    assert (
        "**Note.** `mine` at offered load 1 demands only 0."
        in (out / "cluster_policies-mine.md").read_text()
    )
    assert own_study.main([*base, "--loads", "0.6", "--load-basis", "window"]) == 0
    window = (out / "cluster_policies-mine-window.md").read_text()
    assert "--load-basis window" in window and "demanded inside the arrival window" in window
    row = next(x for x in window.splitlines() if x.startswith("| mine | "))
    o2, w2 = (float(v) for v in row.split("|")[2].split("/"))
    assert w2 == pytest.approx(0.6, abs=0.005) and o2 > 1.5

    def queueing(folder: str) -> float:  # best fit's mean queueing delay over the replicas
        with open(out / folder / "runs.csv") as fh:
            return float(np.mean([float(r["queue_mean"]) for r in csv.DictReader(fh)
                                  if r["policy"] == "best-fit"]))  # fmt: skip

    assert queueing("cluster_policies-mine-window") > queueing("cluster_policies-mine")


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--trace", "t.csv"], "--trace and --cluster go together"),
        (["--trace", "missing.csv", "--cluster", "leaf-spine-64"], "missing.csv"),
        (["--loads", "0.9,high"], "--loads: expected comma-separated numbers"),
        (["--loads", "0,1"], "--loads: expected positive"),
        (["--replicas", "1"], "--replicas: expected at least 2"),
        (["--name", "x"], "--columns and --name go with --trace"),
        (["--load-basis", "window", "--loads", "1000"], "window load 1000 is out of reach"),
    ],
)
def test_the_policy_sweep_refuses_bad_input_in_one_line(own_study, argv, says, capsys,
                                                        tmp_path) -> None:  # fmt: skip
    assert own_study.main([*argv, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1
    assert list(tmp_path.iterdir()) == []  # nothing written


@pytest.mark.parametrize("jobs", [100, 158, 160, 512])
def test_few_jobs_names_the_jcts_numpy_p99_lies_between(jobs) -> None:
    import re

    from benchmarks.cluster_policies import _few_jobs

    text = _few_jobs(jobs, 60.0)
    words = {"longest": 1, "2nd longest": 2, "3rd longest": 3}
    found = re.search(r"between a replica's (.+?) and (.+?) JCT", text)
    ranks = [words.get(g) or int(g.split("th")[0]) for g in found.groups()]
    jct = np.random.default_rng(jobs).permutation(np.arange(jobs, dtype=float) * 7 + 1)
    longest = np.sort(jct)[::-1]
    p99 = np.percentile(jct, 99)
    assert longest[ranks[0] - 1] <= p99 <= longest[ranks[1] - 1]
    assert ranks[0] == ranks[1] + 1 and "+1.0 min" in text
    assert _few_jobs(46_000, 60.0) == ""  # a p99 over many jobs needs no such note


def test_below_ceiling_says_why_only_where_the_baseline_beats_it_by_delaying_large_jobs() -> None:
    from benchmarks.cluster_policies import below_ceiling

    sizes = ["1 GPU", "2-7 GPUs", "8 GPUs", ">8 GPUs"]
    nan = float("nan")

    def stats(mean, large, mid=nan):
        return {"mean": (mean, mean, mean), "buckets": [(1.0,), (2.0,), (mid,), (large,)]}

    ours, ceiling = stats(100.0, 50.0), 110.0
    text = below_ceiling(ours, stats(80.0, 90.0), "spread", ceiling, sizes)
    assert "spread's mean is 27.3 % below the ceiling's and fgd's 9.1 % below" in text
    assert "jobs of >8 GPUs average 0.03 h against fgd's 0.01 h" in text
    above = below_ceiling(stats(120.0, 50.0), stats(80.0, 90.0), "spread", ceiling, sizes)
    assert "fgd's 9.1 % above" in above
    # a baseline not below the ceiling, one whose large jobs fare no worse, no ceiling: silent
    assert below_ceiling(ours, stats(115.0, 90.0), "spread", ceiling, sizes) == ""
    assert below_ceiling(ours, stats(108.0, 90.0), "spread", ceiling, sizes) == ""  # 1.8 %
    assert below_ceiling(ours, stats(80.0, 40.0), "spread", ceiling, sizes) == ""
    assert below_ceiling(ours, stats(80.0, 90.0), "spread", nan, sizes) == ""
    # the bucket above one GPU that rises the most is the evidence, and only beyond 2 %
    mid = below_ceiling(stats(100.0, 50.0, 36.0), stats(80.0, 60.0, 72.0), "spread", ceiling,
                        sizes)  # fmt: skip
    assert "jobs of 8 GPUs average 0.02 h against fgd's 0.01 h" in mid
    assert below_ceiling(ours, stats(80.0, 51.0), "spread", ceiling, sizes) == ""
    assert "jobs of 8 GPUs" in below_ceiling(stats(100.0, nan, 36.0), stats(80.0, nan, 72.0),
                                             "spread", ceiling, sizes)  # fmt: skip


def test_pollux_p99_is_set_by_its_long_yolov3_jobs() -> None:
    """The README's reading of Pollux's p99: the JCTs it lies between (the 3rd and 2nd longest
    of a replica's 158 jobs) are 8-hour, 4-GPU yolov3 runs, under fgd and under whole-nodes."""
    from benchmarks.cluster_policies import STUDIES, cluster_file, replica_jobs

    trace, cluster = STUDIES["pollux-6"]
    jobs = replica_jobs(trace, cluster, 1.4, 0, None)
    assert len(jobs) == 158
    for policy in ("fgd", "whole-nodes"):
        config = parse_policies([policy], SimConfig(queue="backfill"))[0]
        records = simulate(jobs, cluster_file(cluster), config).records
        tail = sorted(records, key=lambda r: -r.jct)[1:3]
        assert all(r.app == "yolov3" and r.gpus == 4 for r in tail), policy
        assert all(abs(r.ideal / 3600 - 8) < 0.5 for r in tail), policy


@pytest.mark.parametrize("admission", ["compact", "any"])
def test_replay_shortcuts_change_no_result(admission, monkeypatch) -> None:
    """The simulator's shortcuts (refusing a job no compact placement is free for before its
    rule is asked; skipping, for the head's reservation, the running jobs that end before it
    could fit) give every job the same start and GPUs as the long way, on queued random traces
    on a three-leaf cluster with GPUs busy for good and on a cluster of mixed node sizes."""
    from tsched.compare import sim_state

    rng = np.random.default_rng(11)
    clusters = [busy_for_good(fabric(nodes_per_leaf=3, leaves=3, gpus=4), {1: (0,), 5: (2, 3)}),
                mixed()]  # fmt: skip
    apps = {**FLAT, **COMM}
    policies = ["first-fit", "best-fit", "kai-tas", "slurm-tree", "whole-nodes", "random", "fgd",
                "best-fit+topo"]  # fmt: skip
    for trial in range(6):
        c = clusters[trial % 2]
        n = 60
        jobs = [TraceJob(f"j{i}", float(t), int(g), float(d), str(a))
                for i, (t, g, d, a) in enumerate(zip(
                    np.sort(rng.uniform(0, 400, n)),
                    rng.choice([1, 1, 2, 3, 4, 6, 8, 10, 12], n),
                    rng.lognormal(4.5, 1.0, n),
                    rng.choice(["x", "c"], n)))]  # fmt: skip
        for policy in policies:
            cfg = parse_policies(policy, SimConfig(queue="backfill", admission=admission,
                                                   seed=trial))[0]  # fmt: skip
            runs = []
            for shortcuts in (True, False):
                monkeypatch.setattr(sim_state, "SHORTCUTS", shortcuts)
                res = simulate(jobs, c, cfg, collective=CollectiveModel(), apps=apps)
                runs.append([(r.job, r.start, r.end, r.nodes, r.queue_delay)
                             for r in res.records])  # fmt: skip
            assert runs[0] == runs[1], (trial, policy)
            # every job ran, and many queued
            assert len(runs[0]) == n and sum(r[-1] > 0 for r in runs[0]) > n / 4, (trial, policy)
