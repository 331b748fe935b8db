"""The agentic scheduler core with a fake clock, the engine model against hand-computed cases
and the mocker's measured behaviour, the formats, and ``tsched agents simulate``."""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest

from tsched.agentic.core import POLICIES, ProgramScheduler, SchedulerConfig, jain_index
from tsched.agentic.engine import PRESETS as ENGINES
from tsched.agentic.engine import EngineProfile, Poly, mocker_args, parse_engine_profile
from tsched.agentic.sim import Engine, _Call, simulate
from tsched.agentic.workload import PRESETS as WORKLOADS
from tsched.agentic.workload import parse_agentic_workload, program_specs
from tsched.cli import main
from tsched.errors import InputError


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def sched(policy: str, caps=(1000,), **kw) -> tuple[ProgramScheduler, Clock]:
    clock = Clock()
    cfg = SchedulerConfig(buffer_tokens=0, **kw)
    return ProgramScheduler(list(caps), policy, clock=clock, config=cfg), clock


def run_call(s: ProgramScheduler, pid: str, prompt: int, out: int = 0) -> None:
    assert s.request(pid, prompt) == [(pid, s.programs[pid].replica)]
    s.response(pid, prompt, out)


# ---------------------------------------------------------------- core: request-level policies
def test_round_robin_and_pass_through_and_sticky_route_as_named():
    s, _ = sched("round-robin", caps=(100, 100, 100))
    replicas = [s.request(f"p{k}", 10)[0][1] for k in range(6)]
    assert replicas == [1, 2, 0, 1, 2, 0]
    s, _ = sched("pass-through", caps=(100, 100))
    assert s.request("a", 10) == [("a", 0)]
    assert s.request("b", 10) == [("b", 1)]  # replica 0 has a call in flight
    s.response("a", 10, 1)
    assert s.request("c", 10) == [("c", 0)]
    s, _ = sched("sticky", caps=(100, 100))
    first = s.request("a", 10)[0][1]
    s.response("a", 10, 1)
    assert all(s.request("a", 10)[0][1] == first and not s.response("a", 10, 1) for _ in range(3))
    assert s.request("b", 10)[0][1] != first  # the replica with fewer programs


def test_unknown_policy_and_bad_capacity_are_input_errors():
    clock = Clock()
    with pytest.raises(InputError, match=r"unknown agentic policy 'fifo' \(valid: pass-through"):
        ProgramScheduler([10], "fifo", clock=clock)
    with pytest.raises(InputError, match=r"replica 1: capacity must be > 0 tokens, got 0"):
        ProgramScheduler([10, 0], "tsched", clock=clock)


# ---------------------------------------------------------------- core: ThunderAgent
def test_thunderagent_pauses_acting_programs_smallest_first_then_marks_reasoning():
    s, clock = sched("thunderagent")
    for pid, size in (("a", 300), ("b", 200), ("c", 400)):
        run_call(s, pid, size)
    assert s.request("c", 700) == [("c", 0)]  # c grows while it reasons: 300+200+700 > 1000
    s.tick()
    assert s.programs["b"].state == "paused" and s.programs["a"].state == "active"
    assert list(s.queue) == ["b"]
    assert s.check_capacity() == []
    # both remaining programs reason, 500 + 700 > 1000: the smaller one (a) is marked
    assert s.request("a", 500) == [("a", 0)]
    s.tick()
    assert s.programs["a"].marked and not s.programs["c"].marked
    assert s.programs["a"].state == "active"
    s.response("a", 500, 10)  # the marked program is paused when its call returns
    assert s.programs["a"].state == "paused" and "a" in s.queue
    assert s.stats["marks"] == 1 and s.stats["pauses"] == 2


def test_new_programs_never_overtake_the_queue():
    s, clock = sched("thunderagent", caps=(1000,))
    run_call(s, "a", 900)
    assert s.request("b", 500) == []  # no room: b queues
    s.release("a")
    assert s.request("c", 10) == []  # room now, but b is queued first
    assert list(s.queue) == ["b", "c"]
    woken = s.tick()
    assert woken == [("c", 0), ("b", 0)] or woken == [("b", 0), ("c", 0)]
    assert set(s.queue) == set()


def test_thunderagent_resume_order_groups_then_smallest_and_worst_fit_placement():
    s, clock = sched("thunderagent", caps=(1000, 600))
    assert s.request("big0", 900) == [("big0", 0)]  # long calls: both replicas nearly full
    assert s.request("big1", 550) == [("big1", 1)]
    run_call(s, "w", 90)  # fits replica 0's 100 tokens
    run_call(s, "a", 40)  # fits replica 1's 50
    assert s.request("n", 80) == []  # a new program: no room, queued (group 1)
    s._pause(s.programs["w"], 0.0)
    s._pause(s.programs["a"], 0.0)  # acting in the queue (group 2)
    assert s.request("w", 95) == []  # paused with a waiting call (group 0)
    assert list(s.queue) == ["n", "w", "a"]
    # room: 100 + 50 = 150. Kept in group order while they fit the total: w (95), not n (80 >
    # 55 left), a (40). Placed largest first on the most room: w on replica 0, a on replica 1.
    assert s.tick() == [("w", 0)]  # only w has a call to send
    assert s.programs["a"].replica == 1 and s.programs["a"].state == "active"
    assert list(s.queue) == ["n"]
    assert s.check_capacity() == []


def test_thunderagent_decay_admits_while_an_old_tool_call_runs():
    s, clock = sched("thunderagent", caps=(1000,), decay_half_life=1.0)
    run_call(s, "a", 800)  # a acts from t=0
    assert s.request("b", 500) == []
    assert s.tick() == []  # at t=0 a counts fully: 800 + 500 > 1000
    clock.t = 3.0  # a counts 800 / 8 = 100
    assert s.tick() == [("b", 0)]


def test_forced_resume_after_the_timeout():
    s, clock = sched("thunderagent", caps=(1000,), resume_timeout=100.0)
    assert s.request("a", 900) == [("a", 0)]  # a long call: a counts fully all along
    s.request("b", 500)
    clock.t = 50
    assert s.tick() == []
    clock.t = 101
    assert s.tick() == [("b", 0)]
    assert s.stats["forced_resumes"] == 1


# ---------------------------------------------------------------- core: tsched's fixes
def test_tsched_resumes_as_soon_as_capacity_frees_and_thunderagent_waits_for_a_tick():
    for policy, expect in (("tsched", [("b", 0)]), ("thunderagent", [])):
        s, clock = sched(policy)
        run_call(s, "a", 900)
        assert s.request("b", 500) == []
        assert s.release("a") == expect


def test_tsched_idle_ttl_releases_a_silent_program():
    s, clock = sched("tsched", idle_ttl=60.0)
    run_call(s, "a", 900)
    assert s.request("b", 500) == []
    clock.t = 59
    s.tick()
    assert "a" in s.programs
    clock.t = 61
    assert s.tick() == [("b", 0)]
    assert "a" not in s.programs and s.stats["ttl_releases"] == 1


def test_abort_returns_a_program_to_acting_so_it_cannot_stay_reasoning():
    s, clock = sched("tsched", idle_ttl=10.0)
    assert s.request("a", 100) == [("a", 0)]
    clock.t = 5
    s.abort("a")  # the client went away mid-call
    prog = s.programs["a"]
    assert prog.phase == "acting" and prog.inflight == 0 and s.replicas[0].inflight == 0
    clock.t = 20
    s.tick()
    assert "a" not in s.programs  # and the TTL reclaims it
    # a call that was still waiting in the queue is withdrawn without touching the replica: a
    # new program is forgotten, a paused one acts again (and stays queued)
    s, clock = sched("thunderagent")
    run_call(s, "x", 900)
    s.request("y", 500)
    assert s.abort("y", sent=False) == [] and "y" not in s.programs and not s.queue
    run_call(s, "z", 50)
    s._pause(s.programs["z"], 0.0)
    assert s.request("z", 600) == []
    s.abort("z", sent=False)
    assert s.programs["z"].pending == 0 and s.programs["z"].phase == "acting"
    assert "z" in s.queue and s.replicas[0].inflight == 0


def test_failed_replica_programs_resume_elsewhere():
    s, clock = sched("tsched", caps=(1000, 1000))
    assert s.request("a", 100) == [("a", 0)]
    s.response("a", 100, 5)
    woken = s.set_replica_up(0, False)
    assert woken == [] and s.programs["a"].state in ("paused", "active")
    assert s.request("a", 200) == [("a", 1)]
    assert s.programs["a"].origin is None or s.programs["a"].origin == 0


def test_tsched_resumes_a_program_on_its_warm_former_replica():
    s, clock = sched("tsched", caps=(1000, 1000))
    run_call(s, "a", 400)
    home = s.programs["a"].replica
    run_call(s, "b", 900)  # lands on the other replica (least used)
    assert s.programs["b"].replica != home
    s._pause(s.programs["a"], 0.0)
    assert s.request("a", 450) == [("a", home)]  # not the emptier one: its cache is there
    assert s.stats["warm_resumes"] == 1


@pytest.mark.parametrize("policy", ["thunderagent", "tsched"])
def test_capacity_holds_after_every_tick_under_random_events(policy):
    rng = random.Random(7)
    s, clock = sched(policy, caps=(3000, 2000, 4000))
    sizes = {f"p{k}": rng.randint(100, 900) for k in range(40)}
    inflight: set[str] = set()
    waiting: set[str] = set()
    for step in range(3000):
        clock.t += rng.random()
        pid = rng.choice(list(sizes))
        woken = []
        if pid in inflight:
            woken = s.response(pid, sizes[pid], 20)
            inflight.discard(pid)
            sizes[pid] += rng.randint(0, 200)
        elif pid not in waiting and rng.random() < 0.8:
            woken = s.request(pid, sizes[pid])
            waiting.add(pid)
        elif pid not in waiting and rng.random() < 0.3:
            woken = s.release(pid)
            sizes[pid] = rng.randint(100, 900)
        if step % 10 == 0:
            woken += s.tick()
            assert s.check_capacity() == [], step
        for p, _ in woken:
            waiting.discard(p)
            inflight.add(p)
        for p in list(waiting):  # a call answered for an admitted program leaves `waiting`
            prog = s.programs.get(p)
            if prog is not None and prog.inflight and p not in inflight:
                waiting.discard(p)
                inflight.add(p)
    assert s.stats["pauses"] > 0 and s.stats["resumes"] > 0


def open_sched(caps=(10_000,)) -> tuple[ProgramScheduler, Clock]:
    """tsched in its open regime (set directly: the regime choice has its own test below)."""
    s, clock = sched("tsched", caps=caps)
    s.regime, s.overcommit = "open", math.inf
    return s, clock


def test_call_gate_holds_calls_beyond_kv_smallest_first_and_aged_calls_first():
    s, clock = open_sched()
    assert s.request("a", 4000) == [("a", 0)]
    assert s.request("b", 4000) == [("b", 0)]
    assert s.request("c", 3000) == []  # 8,000 in flight: 3,000 more do not fit 10,000
    assert s.request("d", 1500) == [("d", 0)]  # the smaller call fits beside them: overtakes
    assert list(s.gate) == ["c"] and s.stats["held_calls"] == 1
    clock.t = 2.0
    assert s.response("a", 4000, 0) == [("c", 0)]  # room again: the held call goes
    assert s.inflight_tokens(0) == 4000 + 1500 + 3000 and not s.gate
    # the mean call time is now 2 s; a call held longer than that goes before smaller ones
    s.response("b", 4000, 0)
    s.response("d", 1500, 0)  # c (3,000) alone in flight
    assert s.request("e", 7500) == []  # 7,500 > the 7,000 left
    clock.t = 5.0  # e has waited 3 s, more than a call takes
    assert s.request("f", 1000) == [("f", 0)]  # fits beside c
    assert s.request("g", 6500) == []
    # 9,000 free: room for e or g, not both. e goes, not the smaller g: it waited longer than
    # a call takes
    assert s.response("c", 3000, 0) == [("e", 0)]
    assert list(s.gate) == ["g"]


def test_call_gate_counts_the_shared_prompt_once_and_moves_calls_to_a_replica_with_room():
    s, clock = open_sched(caps=(5000,))
    assert s.request("p", 3000) == [("p", 0)]
    s.response("p", 3000, 0, cached_tokens=1000)  # a first call hits only the system prompt
    assert s._prefix_seen == 1000
    assert s.request("p", 3000) == [("p", 0)]
    # 3,000 more beside p take 2,000 tokens of KV: the system prompt is there once
    assert s.request("q", 3000) == [("q", 0)]
    assert s.request("r", 2000) == []  # 1,000 more tokens of KV, none left
    s, clock = open_sched(caps=(5000, 5000))
    assert s.request("p", 1000) == [("p", 0)]
    assert s.request("r", 500) == [("r", 1)]  # new programs: the least used replica
    s.response("r", 500, 0)
    assert s.request("q", 4000) == [("q", 1)]
    # r's replica holds q's 4,000: its 2,000-token call goes where there is room
    assert s.request("r", 2000) == [("r", 0)] and s.programs["r"].replica == 0


@pytest.mark.parametrize("seed", [1, 2])
def test_call_gate_accounting_and_no_call_lost_under_random_events(seed):
    """Random requests, answers, aborts (sent and waiting), releases and a replica failure:
    after every event a program counts tokens in flight exactly while it has calls in flight,
    the gate holds only waiting calls of active programs, and at the end every call is
    answered and nothing is counted in flight."""
    rng = random.Random(seed)
    s, clock = open_sched(caps=(6000, 4000, 5000))
    sizes = {f"p{k}": rng.randint(200, 2500) for k in range(30)}
    sent: dict[str, int] = {}
    waiting: set[str] = set()

    def take(woken):
        for pid, _ in woken:
            assert pid in waiting, pid
            waiting.discard(pid)
            sent[pid] = s.programs[pid].replica

    def check():
        for i, rep in enumerate(s.replicas):
            assert rep.inflight == sum(p.inflight for p in s.programs.values() if p.replica == i)
        for pid, prog in s.programs.items():
            assert (prog.sent_tokens > 1e-6) == (prog.inflight > 0), pid
        for pid, prog in s.gate.items():
            assert prog.pending and prog.state == "active" and pid in waiting

    for step in range(2500):
        clock.t += rng.random() * 0.5
        pid = rng.choice(list(sizes))
        roll = rng.random()
        if pid in sent:
            if roll < 0.1:
                take(s.abort(pid))
            elif roll < 0.15:  # released mid-call (its answer, if any, is ignored)
                take(s.release(pid))
            else:
                take(s.response(pid, sizes[pid], 30, rng.randint(0, sizes[pid])))
                sizes[pid] += rng.randint(0, 400)
            del sent[pid]
        elif pid in waiting:
            if roll < 0.2:
                waiting.discard(pid)
                take(s.abort(pid, sent=False))
        elif roll < 0.85:
            waiting.add(pid)
            take(s.request(pid, sizes[pid]))
        else:
            take(s.release(pid))
            sizes[pid] = rng.randint(200, 2500)
        if step == 1200:
            for pid in [p for p, r in sent.items() if r == 1]:
                del sent[pid]  # their calls failed with the replica
                waiting.add(pid)  # ... and the clients ask again
            take(s.set_replica_up(1, False))
            for pid in sorted(waiting):
                if pid in s.programs and not s.programs[pid].pending:
                    take(s.request(pid, sizes[pid]))
        if step == 1800:
            take(s.set_replica_up(1, True))
        if step % 25 == 0:
            take(s.tick())
        check()
    assert s.stats["held_calls"] > 50
    while sent or waiting:  # answer everything: every held call is sent in the end
        assert sent, sorted(waiting)
        pid = sorted(sent)[0]
        del sent[pid]
        take(s.response(pid, sizes[pid], 30))
        check()
    assert not s.gate and all(s.inflight_tokens(i) == pytest.approx(0) for i in range(3))


@pytest.mark.parametrize(("engine", "regime"), [("prefill-heavy", "bounded"), ("mocker", "open")])
def test_tsched_pauses_only_where_recompute_is_predicted_to_cost_more(engine, regime):
    """Sixteen programs growing from 2,000 to 6,800 tokens on two replicas of 30,000: about
    twice the KV. Where a
    recompute costs seconds (prefill-heavy) tsched goes bounded and pauses programs; where
    decode dominates (the mocker's timing) the predicted gain of pausing is below the bar, so it
    stays open and pauses nobody."""
    now = [0.0]
    s = ProgramScheduler([30_000, 30_000], "tsched", clock=lambda: now[0],
                         profile=ENGINES[engine])  # fmt: skip
    assert s.regime == "bounded" and s.stats["pauses"] == 0
    context = {f"p{i}": 2000 for i in range(16)}
    running: set[str] = set()
    waiting: set[str] = set()
    for _turn in range(6):
        for pid in context:
            if pid not in running and pid not in waiting:
                waiting.add(pid)
                woken = s.request(pid, context[pid])
                running |= {p for p, _ in woken}
                waiting -= running
        now[0] += 0.5
        for pid in sorted(running):
            woken = s.response(pid, context[pid], 32, context[pid] - 800)
            context[pid] += 800
            running.discard(pid)
            running |= {p for p, _ in woken}
            waiting -= running
        now[0] += 1.5
        woken = s.tick()
        running |= {p for p, _ in woken}
        waiting -= running
    assert s.regime == regime
    assert (s.stats["pauses"] > 0) == (regime == "bounded")
    assert s.check_capacity() == []


def test_jain_index():
    assert jain_index([2, 2, 2]) == 1.0
    assert jain_index([1, 0, 0, 0]) == pytest.approx(0.25)


# ---------------------------------------------------------------- engine model
def call(pid: int, prompt: int, out: int, sys_tokens: int = 0) -> _Call:
    return _Call(pid, 0, prompt, out, sys_tokens, 16)


def drain(engine: Engine, *calls: _Call) -> float:
    """Submit the calls together and run passes until all finish; the seconds it took."""
    for c in calls:
        engine.submit(c)
    seconds = 0.0
    while True:
        plan = engine.plan_pass()
        if plan is None:
            return seconds
        seconds += plan[0]
        engine.finish_pass(plan[1])


def test_engine_reproduces_the_mockers_measured_prefix_cache_and_eviction():
    mocker = ENGINES["mocker"]
    small = Engine(mocker, 200 * 16)  # 200 blocks: the measurement
    cold = drain(small, a := call(0, 1900, 1))
    assert a.cached == 0 and cold == pytest.approx(mocker.prefill_seconds(1900))
    assert round(cold * 1000 / 0.1, 1) == 468.7  # 492.6 ms measured live at --speedup-ratio 0.1
    warm = drain(small, a2 := call(0, 1900, 1))
    assert a2.cached == 1888 and warm == pytest.approx(mocker.prefill_seconds(12))
    drain(small, call(1, 1900, 1))
    drain(small, call(2, 1900, 1))
    drain(small, a3 := call(0, 1900, 1))
    assert a3.cached == 0  # evicted by B and C: full recompute
    big = Engine(mocker, 2000 * 16)
    for k in (0, 0, 1, 2):
        drain(big, call(k, 1900, 1))
    drain(big, a4 := call(0, 1900, 1))
    assert a4.cached == 1888


def test_engine_pass_timing_prefill_then_decode_steps():
    prof = EngineProfile("t", 16, 8, 64, Poly(0, 1.0, 10.0), Poly(0, 0, 5.0))
    eng = Engine(prof, 1600)
    # 100-token prompt in chunks of 64: pass 1 64 tokens (74 ms), pass 2 36 tokens (46 ms) and
    # the first output token; two decode passes of 5 ms for the rest
    assert drain(eng, call(0, 100, 3)) == pytest.approx((74 + 46 + 5 + 5) / 1000)
    # the shared system prompt is cached for another program
    drain(eng, c := call(1, 100, 1, sys_tokens=48))
    assert c.cached == 0
    drain(eng, d := call(2, 100, 1, sys_tokens=48))
    assert d.cached == 48


def test_engine_preempts_the_latest_admitted_call_when_blocks_run_out():
    prof = EngineProfile("t", 16, 8, 4096, Poly(0, 0.0, 1.0), Poly(0, 0, 1.0))
    eng = Engine(prof, 10 * 16)  # 10 blocks
    first, second = call(0, 64, 40), call(1, 64, 40)  # 4 blocks each, growing to 7
    drain(eng, first, second)
    assert eng.preemptions >= 1
    assert first.generated == 40 and second.generated == 40
    assert eng.used - eng.inactive == 0


def test_capacity_too_small_for_one_prompt_is_a_clear_error():
    eng = Engine(ENGINES["mocker"], 64)
    with pytest.raises(InputError, match="a prompt of 500 tokens does not fit a replica of 64"):
        drain(eng, call(0, 500, 1))


# ---------------------------------------------------------------- simulator
def test_simulation_is_deterministic_and_counts_every_step():
    w = WORKLOADS["swe"].with_load(concurrency=4, programs=6)
    runs = [
        simulate(w, ENGINES["mocker"], replicas=2, capacity_tokens=60_000, policy="tsched")
        for _ in range(2)
    ]
    assert runs[0].metrics == runs[1].metrics
    turns = sum(spec.turns for spec in program_specs(w, 0))
    assert len(runs[0].records) == turns


def test_simulation_is_the_same_in_every_process_whatever_the_hash_seed():
    """Tie-breaks follow binding order, not the order of a set of strings (which follows
    PYTHONHASHSEED): 64 prefill-heavy programs gave different steps/min per process before."""
    import os
    import subprocess
    import sys

    code = (
        "import json\n"
        "from tsched.agentic.sim import simulate\n"
        "from tsched.agentic.engine import PRESETS as E\n"
        "from tsched.agentic.workload import PRESETS as W\n"
        "w = W['swe'].with_load(concurrency=64, programs=256)\n"
        "r = simulate(w, E['prefill-heavy'], replicas=2, capacity_tokens=59000, policy='tsched',"
        " seed=1, horizon=600, keep_records=False)\n"
        "print(json.dumps(r.metrics))\n"
    )
    outs = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": str(h)},
        ).stdout  # fmt: skip
        for h in (1, 2, 3)
    }
    assert len(outs) == 1, outs


def test_with_room_for_everything_program_level_policies_never_pause():
    w = WORKLOADS["swe"].with_load(concurrency=8, programs=16)
    hits = {}
    for policy in POLICIES:
        r = simulate(w, ENGINES["mocker"], replicas=2, capacity_tokens=2_000_000, policy=policy)
        assert r.counters["pauses"] == 0 and r.counters["preemptions"] == 0
        hits[policy] = r.metrics["cache_hit_rate"]
    # affinity keeps each program's prefix: the sticky and program-level policies hit alike,
    # round-robin alternates replicas and hits less
    assert hits["sticky"] == pytest.approx(hits["tsched"], abs=0.01)
    assert hits["round-robin"] < hits["sticky"] - 0.05


def test_prefill_heavy_thrash_is_avoided_by_program_level_scheduling():
    w = WORKLOADS["swe"].with_load(concurrency=24, programs=48)
    out = {
        p: simulate(w, ENGINES["prefill-heavy"], replicas=2, capacity_tokens=59_000, policy=p)
        for p in ("round-robin", "tsched")
    }
    assert out["tsched"].metrics["cache_hit_rate"] > out["round-robin"].metrics["cache_hit_rate"]
    assert (
        out["tsched"].metrics["steps_per_min"] > 1.3 * out["round-robin"].metrics["steps_per_min"]
    )


# ---------------------------------------------------------------- formats
def test_workload_presets_and_sampling():
    assert set(WORKLOADS) == {"swe", "openhands", "heavy-tail"}
    w = WORKLOADS["heavy-tail"].with_load(programs=2000)
    tools = np.concatenate([s.tool_seconds for s in program_specs(w, 1)])
    assert np.median(tools) == pytest.approx(w.tool_seconds.median(), rel=0.1)
    assert program_specs(w, 1)[5] == program_specs(w.with_load(programs=10), 1)[5]


def base_workload(**over):
    data = {
        "tsched": "agentic-workload/v1", "name": "t", "programs": 4, "concurrency": 2,
        "turns": 3, "system_tokens": 10, "initial_tokens": 5, "growth_tokens": 5,
        "output_tokens": 2, "tool_seconds": {"dist": "lognormal", "median": 1, "sigma": 0.5},
    }  # fmt: skip
    data.update(over)
    return {k: v for k, v in data.items() if v is not None}


@pytest.mark.parametrize(
    ("over", "message"),
    [
        ({"tool_seconds": {"dist": "gamma", "k": 1}}, r"w.yaml: tool_seconds.dist: unknown value"),
        ({"tool_seconds": {"dist": "uniform", "low": 3, "high": 1}},
         r"tool_seconds.high: must be >= low \(3\), got 1"),
        ({"arrival_rate": 2.0}, "give exactly one of 'concurrency'"),
        ({"concurrency": None}, "give exactly one of 'concurrency'"),
        ({"growth_tokens": 1.5}, r"growth_tokens: expected a whole number of tokens, got 1.5"),
        ({"tsched": "agentic-workload/v2"}, r"tsched: expected 'agentic-workload/v1'"),
        ({"programs": 0}, r"programs: must be >= 1, got 0"),
        ({"turnz": 3}, r"turnz: unknown key 'turnz'"),
    ],
)  # fmt: skip
def test_workload_errors_name_the_field(over, message):
    with pytest.raises(InputError, match=message):
        parse_agentic_workload(base_workload(**over), "w.yaml")


def test_engine_profiles_and_mocker_flags():
    prof = parse_engine_profile(ENGINES["prefill-heavy"].to_data(), "x.yaml")
    assert prof == ENGINES["prefill-heavy"]
    with pytest.raises(InputError, match="not a multiple of the mocker's polynomial"):
        mocker_args(prof, 10_000)
    data = ENGINES["mocker"].to_data()
    data["prefill_ms"] = {k: v * 10 for k, v in data["prefill_ms"].items()}
    data["decode_step_ms"] = {k: v * 10 for k, v in data["decode_step_ms"].items()}
    slow = parse_engine_profile(data, "slow.yaml")
    assert mocker_args(slow, 32_000)[-1] == "0.1"
    bad = ENGINES["mocker"].to_data()
    bad["decode_step_ms"] = {"quadratic": 0, "linear": -10, "constant": 5}
    with pytest.raises(InputError, match=r"decode_step_ms: gives a time <= 0 at p = 0.5"):
        parse_engine_profile(bad, "bad.yaml")


# ---------------------------------------------------------------- CLI
def test_cli_simulate_writes_summary_records_and_plots(tmp_path, capsys):
    out = tmp_path / "sim"
    code = main([
        "agents", "simulate", "--workload", "swe", "--engine", "prefill-heavy", "--replicas", "2",
        "--capacity-tokens", "40000", "--policies", "round-robin,tsched", "--seeds", "2",
        "--concurrency", "4,8", "--programs", "8", "--out", str(out), "--json",
    ])  # fmt: skip
    captured = capsys.readouterr()
    assert code == 0
    summary = json.loads(captured.out)
    assert set(summary) == {"round-robin", "tsched"}
    for entry in summary.values():
        assert {"steps_per_min", "programs_per_hour", "output_tokens_per_s", "cache_hit_rate",
                "recomputed_tokens", "p50_step_s", "p99_step_s", "kv_imbalance",
                "fairness"} <= set(entry)  # fmt: skip
        assert entry["seeds"] == 2 and set(entry["by_concurrency"]) == {"4", "8"}
    assert json.loads((out / "summary.json").read_text()) == summary
    header = (out / "records.csv").read_text().splitlines()[0]
    assert header.startswith("concurrency,policy,seed,program,turn,replica")
    for name in ("throughput.png", "cache_hit_rate.png", "kv_imbalance.png", "step_latency.png"):
        assert (out / name).stat().st_size > 1000


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--policies", "fifo"], "--policies: unknown agentic policy 'fifo'"),
        (["--workload", "nope"], "nope: not an agentic workload preset"),
        (["--capacity-tokens", "8"], "--capacity-tokens: expected at least one KV block"),
        (["--concurrency", "4,x"], "--concurrency: expected whole numbers"),
    ],
)
def test_cli_simulate_bad_input_is_one_line_exit_2(tmp_path, capsys, argv, message):
    base = {"--workload": "swe", "--replicas": "1", "--capacity-tokens": "40000",
            "--policies": "tsched", "--out": str(tmp_path / "o")}  # fmt: skip
    for flag, value in zip(argv[::2], argv[1::2], strict=True):
        base[flag] = value
    args = ["agents", "simulate", *[x for kv in base.items() for x in kv]]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert not (tmp_path / "o").exists()


def test_cli_serve_starts_answers_health_and_stops_on_sigterm(tmp_path):
    import signal
    import subprocess
    import sys
    import urllib.error
    import urllib.request

    from tsched.backends.dynamo import free_port

    port = free_port()
    token = tmp_path / "token"
    token.write_text("t0ken\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "tsched", "agents", "serve", "--backend", "http://127.0.0.1:9",
         "--capacity-tokens", "1000", "--port", str(port), "--token-file", str(token)],
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        line = proc.stderr.readline()
        assert f"tsched proxy on http://127.0.0.1:{port}" in line
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as resp:
            health = json.loads(resp.read())
        assert health["status"] == "ok" and health["policy"] == "tsched"
        req = urllib.request.Request(f"http://127.0.0.1:{port}/programs")
        with pytest.raises(urllib.error.HTTPError, match="401"):
            urllib.request.urlopen(req, timeout=5)
        req.add_header("Authorization", "Bearer t0ken")
        with urllib.request.urlopen(req, timeout=5) as resp:
            assert json.loads(resp.read())["programs"] == []
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--policy", "lifo"], "--policy: unknown agentic policy 'lifo'"),
        (["--backend", "localhost:80"], "--backend 'localhost:80': expected http://HOST:PORT"),
        (["--capacity-tokens", "10,20"], "--capacity-tokens: 2 values for 1 backends"),
        (["--token-file", "/nonexistent/t"], "--token-file /nonexistent/t: cannot read"),
        (["--backend", "http://127.0.0.1:9#inst=3"], "after '#' expected instance=<Dynamo"),
        (["--dynamo-frontend", "http://127.0.0.1:9"], "give the replicas as --backend URL"),
    ],
)
def test_cli_serve_bad_input_is_one_line_exit_2(capsys, argv, message):
    base = {"--backend": "http://127.0.0.1:9", "--capacity-tokens": "1000"}
    for flag, value in zip(argv[::2], argv[1::2], strict=True):
        base[flag] = value
    assert main(["agents", "serve", *[x for kv in base.items() for x in kv]]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_cli_serve_on_a_taken_port_says_so_in_one_line(capsys):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        argv = ["agents", "serve", "--backend", "http://127.0.0.1:9", "--capacity-tokens",
                "1000", "--port", str(port)]  # fmt: skip
        assert main(argv) == 3
    err = capsys.readouterr().err
    assert f"cannot listen on 127.0.0.1:{port}" in err and "in use" in err
    assert err.count("\n") == 1


def test_backend_pins_parse_and_a_frontend_without_workers_is_named(capsys):
    from tsched.agentic.proxy import split_backend

    assert split_backend("http://h:1/") == ("http://h:1", None)
    assert split_backend("http://h:1#instance=42") == ("http://h:1", 42)
    with pytest.raises(InputError, match="does not fit 64 bits"):
        split_backend(f"http://h:1#instance={1 << 64}")
    argv = ["agents", "serve", "--dynamo-frontend", "http://127.0.0.1:9", "--replicas", "2",
            "--discovery-timeout", "0.3", "--capacity-tokens", "1000"]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--dynamo-frontend http://127.0.0.1:9: wanted 2 serving workers after 0.3 s" in err
    assert err.count("\n") == 1


def test_a_pinned_replica_comes_back_under_a_restarted_workers_new_instance_id():
    from tsched.agentic.proxy import ProxySettings, ProxyState

    state = ProxyState(ProxySettings(("http://f:1#instance=11", "http://f:1#instance=22"),
                                 (1000, 1000)))  # fmt: skip

    def health(*instances):
        return json.dumps({"instances": [
            {"component": c, "endpoint": "generate", "namespace": "ns", "instance_id": i}
            for c, i in instances]}).encode()  # fmt: skip

    # still listed: back as it was; gone with no other free worker: stays down
    assert state._repin(0, health(("backend", 11), ("backend", 22)))
    assert not state._repin(0, health(("backend", 22), ("thunderagent_router", 99)))
    assert state.targets[0] == ("http://f:1", 11)
    # a new worker (the restarted engine) is taken; a router's endpoint never is
    assert state._repin(0, health(("backend", 22), ("thunderagent_router", 99), ("backend", 33)))
    assert state.targets == [("http://f:1", 33), ("http://f:1", 22)]


@pytest.mark.ray
def test_simulation_sweep_runs_alike_on_ray(ray_cluster):
    from tsched.agentic.study import Cell, run_cells

    w = WORKLOADS["swe"].with_load(concurrency=6, programs=8)
    cells = [
        Cell(w, ENGINES["prefill-heavy"], 2, 30_000, policy, seed, keep_records=False)
        for policy in ("round-robin", "tsched")
        for seed in range(2)
    ]
    serial = run_cells(cells)
    remote = run_cells(cells, use_ray=True)
    assert [r.metrics for r in serial] == [r.metrics for r in remote]


def test_calls_waiting_while_no_backend_is_up_fail_with_503_and_hold_nothing():
    """Both backends refuse connections: the first calls find them down (502), later calls
    wait for a replica, and once none has been up for ``connect_timeout`` they get 503
    ``no_backend`` naming the backends, leaving no call pending in the scheduler."""
    import asyncio
    import socket

    aiohttp = pytest.importorskip("aiohttp")
    from tsched.agentic.proxy import ProxySettings, start, state_of

    ports = []
    for _ in range(2):  # two ports nothing listens on
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            ports.append(sock.getsockname()[1])
    urls = tuple(f"http://127.0.0.1:{p}" for p in ports)
    settings = ProxySettings(urls, (8000, 8000), port=0, connect_timeout=0.5, probe_seconds=0.2)

    async def run() -> None:
        runner, url = await start(settings)
        state = state_of(runner.app)
        try:
            async with aiohttp.ClientSession() as s:

                async def call(pid: str) -> tuple[int, dict]:
                    body = {"model": "m", "prompt": "hello " * 50, "max_tokens": 2,
                            "program_id": pid}  # fmt: skip
                    async with s.post(f"{url}/v1/completions", json=body) as r:
                        return r.status, await r.json()

                first = [await call("a"), await call("b")]
                assert [st for st, _ in first] == [502, 502]
                assert not any(r.up for r in state.sched.replicas)
                started = asyncio.get_running_loop().time()
                late = await asyncio.wait_for(asyncio.gather(call("a"), call("c")), 10.0)
                waited = asyncio.get_running_loop().time() - started
                for status, err in late:
                    assert status == 503 and err["error"]["type"] == "no_backend"
                    assert "no backend is up" in err["error"]["message"]
                    assert urls[0] in err["error"]["message"]
                assert waited < 5.0
                assert state.counts["no_backend"] == 2 and not state.waiting
                assert all(p.pending == 0 for p in state.sched.programs.values())
        finally:
            await runner.cleanup()

    asyncio.run(run())
