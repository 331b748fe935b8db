"""The cluster simulator: queue disciplines, backfill, fair share and preemption, placement through
the job model, snapshots.
"""

from __future__ import annotations

import numpy as np
import pytest

import tsched
from tests.compare.rule_helpers import (
    COMM,
    FLAT,
    MODELS,
    busy_for_good,
    fabric,
    mixed,
    replay,
    rule_job,
    sim,
)
from tests.compare.sim_helpers import job, one_node, run
from tsched.cluster import Cluster, LinkClass, Node, NodeType
from tsched.compare.jobmodel import (
    AppModel,
    CollectiveModel,
    iteration_seconds,
)
from tsched.compare.report import summarize
from tsched.compare.runner import parse_policies
from tsched.compare.simulator import SimConfig, representative_jobs, simulate
from tsched.compare.traces import TraceJob
from tsched.errors import InputError


# ---------------------------------------------------------------------------- queue policies
def test_fifo_head_of_line_blocking() -> None:
    jobs = [job("a", 0, 3, 100), job("b", 1, 4, 10), job("c", 2, 1, 5)]
    recs, _ = run(jobs, "fifo")
    assert (recs["a"].start, recs["a"].end) == (0, 100)
    assert (recs["b"].start, recs["b"].end) == (100, 110)
    assert (recs["c"].start, recs["c"].end) == (110, 115)  # blocked behind b
    assert recs["c"].jct == 113 and recs["c"].queue_delay == 108


def test_sjf_runs_the_short_job_first() -> None:
    jobs = [job("a", 0, 3, 100), job("b", 1, 4, 10), job("c", 2, 1, 5)]
    recs, _ = run(jobs, "sjf")
    assert (recs["c"].start, recs["c"].end) == (2, 7)
    assert recs["b"].start == 100


def test_reordering_a_serial_queue_moves_the_count_mean_not_the_work_weighted_wait() -> None:
    """Kleinrock's conservation on one server: gang jobs that each take the whole node run
    one at a time, so FIFO and SJF differ in the count mean wait only."""
    from tsched.compare.study import work_weighted_wait

    rng = np.random.default_rng(3)
    durations = rng.integers(5, 200, size=12)
    jobs = [job(f"j{k}", 0.5 * k, 4, float(d)) for k, d in enumerate(durations)]
    out = {}
    for queue in ("fifo", "sjf"):
        recs, _ = run(jobs, queue)
        rs = [recs[j.name] for j in jobs]
        waits = [r.queue_delay for r in rs]
        out[queue] = (np.mean(waits), work_weighted_wait([r.gpus for r in rs], durations, waits))
    assert out["sjf"][0] < 0.8 * out["fifo"][0]  # shortest first: a much lower count mean
    # the same work-weighted wait (seconds; the waits themselves are hundreds of seconds)
    assert out["sjf"][1] == pytest.approx(out["fifo"][1], abs=1.0)


def test_backfill_fills_the_hole_without_delaying_the_head() -> None:
    jobs = [job("a", 0, 3, 100), job("b", 1, 4, 10), job("c", 2, 1, 50), job("d", 3, 1, 500)]
    recs, _ = run(jobs, "backfill")
    assert (recs["c"].start, recs["c"].end) == (2, 52)  # ends before b's reservation
    assert recs["b"].start == 100  # the head is not delayed
    assert recs["d"].start == 110  # would delay b: waits


def test_fair_share_long_run_shares_match_budgets() -> None:
    jobs = [job(f"a{k}", 0, 1, 100, "A") for k in range(400)]
    jobs += [job(f"b{k}", 0, 1, 100, "B") for k in range(400)]
    recs, res = run(jobs, "fair", budgets={"A": 3, "B": 1}, window=2000.0, preemption=False)
    # while both tenants still have work, A should hold 3/4 of the GPUs
    t_end = min(max(r.end for r in recs.values() if r.tenant == t) for t in "AB")
    used = {"A": 0.0, "B": 0.0}
    for r in recs.values():
        used[r.tenant] += max(0.0, min(r.end, t_end) - r.start)
    share = used["A"] / (used["A"] + used["B"])
    assert share == pytest.approx(0.75, abs=0.03)
    assert summarize(res, 4, {"A": 3, "B": 1})["fair_share"]["A"]["budget_share"] == 0.75


def test_fair_share_by_project_within_a_tenant() -> None:
    jobs = [job(f"p{k}", 0, 1, 100, "A", "p") for k in range(200)]
    jobs += [job(f"q{k}", 0, 1, 100, "A", "q") for k in range(200)]
    recs, _ = run(jobs, "fair", budgets={"A/p": 1, "A/q": 3}, preemption=False)
    first = sorted(recs.values(), key=lambda r: r.start)[:200]
    q_share = sum(r.job.startswith("q") for r in first) / 200
    assert q_share == pytest.approx(0.75, abs=0.05)


def test_fair_share_preempts_after_the_protected_runtime() -> None:
    jobs = [job(f"a{k}", 0, 1, 5000, "A") for k in range(4)] + [job("b", 1000, 2, 100, "B")]
    recs, _ = run(jobs, "fair", min_runtime=600.0)
    assert recs["b"].start == 1000 and recs["b"].end == 1100
    victims = [r for r in recs.values() if r.preemptions]
    assert len(victims) == 2
    for v in victims:  # 1000 s done, 4000 s left, restarted when b ended
        assert v.end == pytest.approx(1100 + 4000)
    protected, _ = run(jobs, "fair", min_runtime=2000.0)
    assert protected["b"].start == 5000 and not any(r.preemptions for r in protected.values())


def test_fair_share_without_a_protected_time_does_not_swap_jobs_back_and_forth() -> None:
    """With min_runtime 0 the job a preemption just started is no victim in the same pass:
    c preempts a once and runs to its end instead of swapping with it."""
    jobs = [job("a", 0, 2, 5000, "A"), job("b", 1000, 2, 100, "B"), job("c", 1200, 2, 100, "B")]
    recs, _ = run(jobs, "fair", one_node(2), min_runtime=0.0)
    assert (recs["c"].start, recs["c"].end, recs["c"].preemptions) == (1200, 1300, 0)
    assert recs["a"].preemptions == 2 and recs["a"].end == pytest.approx(5200)


def test_a_restart_cost_delays_each_restart_and_counts_as_no_progress() -> None:
    jobs = [job(f"a{k}", 0, 1, 5000, "A") for k in range(4)] + [job("b", 1000, 2, 100, "B")]
    recs, _ = run(jobs, "fair", min_runtime=600.0, restart_cost=300.0)
    victims = [r for r in recs.values() if r.preemptions]
    assert len(victims) == 2 and recs["b"].end == 1100  # b never restarts: no cost
    for v in victims:  # 4000 s of work left, restarted at 1100 after 300 s of reloading
        assert v.end == pytest.approx(1100 + 300 + 4000)
    # one node of 2: a restarts at 1100 and is protected until it has computed 600 s after
    # its 300 s restart, so c waits; preempted again at 5000 (a's first run's end), a has
    # done 3,600 s of its 4,000, and restarts at 5100 for 300 + 400 s
    again = [job("a", 0, 2, 5000, "A"), job("b", 1000, 2, 100, "B"), job("c", 1200, 2, 100, "B")]
    recs, _ = run(again, "fair", one_node(2), min_runtime=600.0, restart_cost=300.0)
    assert (recs["c"].start, recs["a"].preemptions) == (5000, 2)
    assert recs["a"].end == pytest.approx(5100 + 300 + 400)
    with pytest.raises(InputError, match="restart_cost"):
        SimConfig(restart_cost=-1.0)


def test_fair_share_under_compact_admission_preempts_only_what_frees_a_node() -> None:
    """Two nodes of 4, tenant A on 3 GPUs of each. B's 4-GPU job needs a whole node: the
    fairness order's first two victims sit on different nodes, so the preemption takes the
    three jobs of one node instead, B starts on arrival, and a preempted job restarts at once
    on the GPU left free on the other node."""
    jobs = [job(f"a{k}", 0, 1, 5000, "A") for k in range(6)] + [job("b", 1000, 4, 100, "B")]
    two = one_node(4, 2)
    recs, _ = run(jobs, "fair", two, policy="spread", admission="compact", min_runtime=600.0,
                  window=500.0)  # fmt: skip
    assert (recs["b"].start, recs["b"].nodes) == (1000, 1)
    hit = sorted(name for name, r in recs.items() if r.preemptions)
    assert len(hit) == 3
    restarted = [name for name in hit if recs[name].end == pytest.approx(1000 + 4000)]
    assert len(restarted) == 1  # on the free GPU of the other node, in the same pass
    assert all(recs[n].end == pytest.approx(1100 + 4000) for n in hit if n not in restarted)
    # under count admission the fairness order's two victims are enough, wherever they sit
    recs_any, _ = run(jobs, "fair", two, policy="spread", min_runtime=600.0, window=500.0)
    assert recs_any["b"].start == 1000 and sum(r.preemptions for r in recs_any.values()) == 2


def test_fair_share_preempts_nobody_where_no_compact_room_can_be_freed() -> None:
    """Each node holds one job A may lose and two protected ones: freeing both victims gives
    B's 4-GPU job the GPUs by count but no node, so under compact admission nobody is
    preempted and B waits for a node."""
    jobs = [job("a0", 0, 1, 5000, "A"), job("a1", 0, 1, 5000, "A")]
    jobs += [job(f"p{k}", 900, 1, 3000, "A") for k in range(4)] + [job("b", 1000, 4, 100, "B")]
    recs, _ = run(jobs, "fair", one_node(4, 2), policy="spread", admission="compact",
                  min_runtime=600.0, window=500.0)  # fmt: skip
    assert not any(r.preemptions for r in recs.values())
    assert recs["b"].start > 1000 and recs["b"].nodes == 1


def test_fair_share_clears_whole_nodes_for_a_multi_node_job_under_compact_admission() -> None:
    """Three nodes of 4: eight of A's jobs fill nodes 0 and 1, two later ones and two protected
    ones node 2. The fairness order (latest started first) would free node 2's two and six
    others, whole nodes for none of B's 8 GPUs; the preemption clears nodes 0 and 1 instead
    and leaves node 2 alone."""
    jobs = [job(f"a{k}", 0, 1, 5000, "A") for k in range(8)]
    jobs += [job("v0", 200, 1, 5000, "A"), job("v1", 200, 1, 5000, "A")]
    jobs += [job("p0", 900, 1, 5000, "A"), job("p1", 900, 1, 5000, "A")]
    jobs.append(job("b", 1000, 8, 100, "B"))
    recs, _ = run(jobs, "fair", one_node(4, 3), policy="first-fit", admission="compact",
                  min_runtime=600.0, window=500.0)  # fmt: skip
    assert (recs["b"].start, recs["b"].nodes) == (1000, 2)
    assert sorted(n for n, r in recs.items() if r.preemptions) == [f"a{k}" for k in range(8)]


# ---------------------------------------------------------------------------- placement effect
def test_placement_changes_runtime_through_the_job_model() -> None:
    app = AppModel("x", 0.1, 0.0, 1.0)
    jobs = [TraceJob("big", 0, 4, 100.0, "x")]
    c = one_node(gpus=4, nodes=4)
    coll = CollectiveModel()
    packed = simulate(jobs, c, SimConfig(policy="pack"), collective=coll, apps={"x": app})
    spread = simulate(jobs, c, SimConfig(policy="spread"), collective=coll, apps={"x": app})
    assert packed.records[0].jct == pytest.approx(100.0)
    assert packed.records[0].nodes == 1 and spread.records[0].nodes == 4
    ratio = iteration_seconds(app, c, np.array([0, 4, 8, 12]), model=coll) / iteration_seconds(
        app, c, np.array([0, 1, 2, 3]), model=coll
    )
    assert spread.records[0].jct == pytest.approx(100.0 * ratio)
    assert spread.records[0].comm_share > packed.records[0].comm_share


def test_fragmentation_aware_keeps_whole_nodes_free() -> None:
    c = one_node(gpus=4, nodes=2)
    jobs = [job("a", 0, 2, 1000), job("b", 1, 2, 1000), job("c", 2, 4, 10)]
    plain, _ = run(jobs, "fifo", cluster=c, policy="spread")
    frag, _ = run(jobs, "fifo", cluster=c, policy="greedy", fragmentation_aware=True)
    assert plain["c"].nodes == 2  # a and b took a GPU of each node: c straddles both
    assert frag["a"].nodes == frag["b"].nodes == 1
    assert frag["c"].nodes == 1 and frag["c"].start == 2  # a and b share a node


def test_iteration_cache_tells_apart_placements_priced_on_different_links() -> None:
    from tsched.compare.sim_state import Placer

    # the leaf is slower than the spine here, so the largest link index is not the slowest link
    c = Cluster(
        name="odd",
        links={"nv": LinkClass("nv", 450), "leaf": LinkClass("leaf", 5),
               "spine": LinkClass("spine", 50)},
        levels=("leaf", "spine"),
        node_types={"n": NodeType("n", 1, "X", 1, intra="nv")},
        nodes=tuple(Node(f"n{i}", "n", {"leaf": f"l{i // 2}", "spine": "s"}) for i in range(6)),
    )  # fmt: skip
    app = AppModel("x", 0.1, 0.0, 1.0)
    placer = Placer(c, SimConfig(), CollectiveModel(), {"x": app})
    one_per_leaf = np.array([0, 2, 4])  # only spine hops
    two_in_a_leaf = np.array([0, 1, 2])  # a leaf hop: slower
    for gpus in (one_per_leaf, two_in_a_leaf):
        expected = iteration_seconds(app, c, gpus, model=CollectiveModel())
        assert placer.iteration(app, gpus)[0] == pytest.approx(expected)
    assert placer.iteration(app, two_in_a_leaf)[0] > placer.iteration(app, one_per_leaf)[0]


def test_snapshots_keep_each_watched_jobs_first_placement() -> None:
    jobs = [job("big", 0, 6, 10), job("a", 0, 2, 30), job("b", 1, 4, 5), job("c", 2, 1, 5)]
    assert representative_jobs(jobs) == ("big", "b", "a")
    recs, res = run(jobs, "fifo", cluster=one_node(4, nodes=3), snapshot_jobs=("big", "b"))
    assert set(res.snapshots) == {"big", "b"}
    big, b = res.snapshots["big"], res.snapshots["b"]
    assert len(big.gpus) == 6 and big.time == 0.0 and len(big.busy) == 0
    # b arrives while big and a hold 8 of 12 GPUs: its snapshot shows them busy, not its own
    assert b.time == 1.0 and len(b.gpus) == 4 and len(b.busy) == 8
    assert set(big.gpus) <= set(b.busy) and not set(b.gpus) & set(b.busy)
    assert recs["b"].nodes == len({g // 4 for g in b.gpus})


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


# ---------------------------------------------------------------------------- the simulator
def test_admission_regimes_start_scattered_or_wait() -> None:
    c = fabric(nodes_per_leaf=1, leaves=2)  # two nodes of 4
    jobs = [rule_job("a", 0, 3, 100), rule_job("b", 0, 3, 50), rule_job("c", 1, 2, 10)]
    # best fit: a → n0, b → n1; one GPU is left on each node
    recs, _ = sim(jobs, c, "best-fit", queue="fifo", admission="any")
    assert recs["c"].start == 1 and recs["c"].nodes == 2  # scattered at once
    recs, _ = sim(jobs, c, "best-fit", queue="fifo", admission="compact")
    assert recs["c"].start == 50 and recs["c"].nodes == 1  # waits for b's node


def test_topology_reservation_keeps_the_head_jobs_node() -> None:
    c = fabric(nodes_per_leaf=1, leaves=2)  # two nodes of 4
    jobs = [
        rule_job("a", 0, 2, 100),
        rule_job("b", 0, 3, 50),
        rule_job("h", 1, 4, 10),
        rule_job("s", 2, 1, 1000),
    ]
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
    jobs = [rule_job("a", 0, 4, 100), rule_job("b", 0, 4, 5000), rule_job("c", 0, 4, 1),
            rule_job("d", 0, 4, 100), rule_job("h", 1.5, 8, 50),
            rule_job("l", 2, 4, 1000)]  # fmt: skip
    for policy in ("fgd", "best-fit+topo"):
        recs, _ = sim(jobs, c, policy, admission="compact")
        assert recs["l"].start == 2 and recs["l"].nodes == 1, policy
        assert recs["h"].start == 100 and recs["h"].nodes == 2, policy


@pytest.mark.parametrize("reservation", ["+count", "+topo"])
def test_relaxed_backfill_lets_the_head_slip_by_its_slack_and_no_more(reservation) -> None:
    c = fabric(nodes_per_leaf=1, leaves=1)  # one node of 4 GPUs
    # a holds 3 GPUs until 100; h (4 GPUs, 100 s) is the head from 1, its shadow time 100.
    # s (1 GPU, 120 s) would end at 122, after the shadow: EASY keeps it back.
    jobs = [rule_job("a", 0, 3, 100), rule_job("h", 1, 4, 100), rule_job("s", 2, 1, 120)]
    easy, _ = sim(jobs, c, "best-fit" + reservation)
    assert easy["h"].start == 100 and easy["s"].start == 200
    tight, _ = sim(jobs, c, f"best-fit{reservation}+slack0.1")  # may end by 110: no
    assert tight["h"].start == 100 and tight["s"].start == 200
    loose, _ = sim(jobs, c, f"best-fit{reservation}+slack0.25")  # may end by 125: yes
    assert loose["s"].start == 2 and loose["h"].start == 122
    # the bound is fixed when h first heads the queue (100 + 25), not moved with its shadow
    # time: at 100 (a ends, shadow now 122) t (ends 120) may start, u (ends 130) may not
    more = [*jobs, rule_job("t", 3, 1, 20), rule_job("u", 3, 1, 30)]
    recs, _ = sim(more, c, f"best-fit{reservation}+slack0.25")
    assert recs["t"].start == 100 and recs["h"].start == 122 and recs["u"].start == 222


def test_rule_placements_carry_the_rings_communication_time_in_snapshots() -> None:
    c = fabric(nodes_per_leaf=1, leaves=2)
    jobs = [TraceJob("a", 0.0, 6, 100.0, "bert")]  # two nodes: the ring crosses the network
    cfg = SimConfig(policy="best-fit", snapshot_jobs=("a",))
    res = simulate(jobs, c, cfg)  # the shipped job model: bert-like gradients
    snap = res.snapshots["a"]
    assert len(np.unique(c.gpu_node[snap.gpus])) == 2 and snap.objective > 0


def test_a_job_no_rule_can_ever_place_stops_the_replay_with_a_named_error() -> None:
    from tsched import presets

    c = presets.cluster("dgx-h100-4node")  # node 1 has two busy GPUs: three idle nodes
    jobs = [TraceJob("big", 0.0, 25, 60.0, "bert")]  # whole-nodes needs four idle nodes
    with pytest.raises(InputError, match=r"job 'big' asks for 25 GPUs.*3 nodes without busy"):
        simulate(jobs, c, SimConfig(policy="whole-nodes"))
    compact = simulate(jobs, c, SimConfig(policy="best-fit", admission="compact"))
    assert compact.records[0].nodes == 4  # three whole nodes and one GPU of the fourth


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
