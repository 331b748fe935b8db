"""The engine model: prefix cache, eviction, pass timing, preemption; engine profiles."""

from __future__ import annotations

import pytest

from tests.agentic.agentic_helpers import call
from tsched.agentic.engine import PRESETS as ENGINES
from tsched.agentic.engine import EngineProfile, Poly, mocker_args, parse_engine_profile
from tsched.agentic.sim import Engine, _Call
from tsched.errors import InputError


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
