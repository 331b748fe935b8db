"""Cluster-level placement rules: which free GPUs a job gets, and when it must wait."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import tsched
from tests.compare.rule_helpers import (
    BUSY,
    MODELS,
    busy_for_good,
    fabric,
    mixed,
    replay,
    rule_job,
    sim,
    view,
)
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
from tsched.compare.traces import TraceJob


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
    recs, _ = sim([rule_job("a", 0, 12, 10.0)], c, "whole-nodes", admission="compact")
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
