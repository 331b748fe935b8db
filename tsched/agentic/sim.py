"""Discrete-event simulation of agent programs on inference replicas, engine modelled on the
Dynamo mocker (itself a model of vLLM's V1 scheduler), so runs can be checked against live ones.

Engine model (one per replica):

- **Paged KV.** ``capacity_tokens // block_size`` blocks. A prompt's full blocks are cached by
  content: the system prompt's blocks are shared by every program, a program's own blocks follow
  them, and a block is only reusable after every block before it (hash chaining). The partial last
  block and the answer's blocks are private (the next prompt carries new text in their place).
- **Prefix cache with LRU eviction.** A finished call's blocks become inactive but stay findable;
  allocation evicts the least recently freed inactive blocks, a call's last blocks first. A prompt
  hits the longest resident prefix (never its last token); only the rest is prefilled.
- **Passes.** Each pass has a token budget (``max_batched_tokens``): running calls first (a decode
  takes one token, a prefill the rest of its prompt up to the budget: chunked prefill), then
  waiting calls in arrival order while ``max_num_seqs`` allows and their blocks can be had. A pass
  takes ``prefill_seconds(prefilled tokens) + decode_seconds(KV utilisation)``; the pass that
  finishes a prompt also yields its first output token.
- **Preemption.** When a running call cannot get a block, the most recently admitted call is
  preempted (LIFO): its blocks are freed (its cached prefix may survive) and it restarts from the
  waiting queue's front, recomputing what was lost.

Clients follow :class:`~tsched.agentic.workload.ProgramSpec`: call, tool, call … release. Every
call goes through a :class:`~tsched.agentic.core.ProgramScheduler`, ticked every
``tick_seconds`` for the program-level policies.
"""

from __future__ import annotations

import heapq
import math
from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tsched.agentic.core import PROGRAM_LEVEL, ProgramScheduler, SchedulerConfig, jain_index
from tsched.agentic.engine import EngineProfile
from tsched.agentic.workload import AgenticWorkload, ProgramSpec, program_specs
from tsched.errors import InputError

__all__ = [
    "METRICS",
    "RECORD_FIELDS",
    "Engine",
    "SimResult",
    "metrics_of",
    "simulate",
    "step_record",
]

METRICS = (
    "steps_per_min",
    "programs_per_hour",
    "output_tokens_per_s",
    "cache_hit_rate",
    "recomputed_tokens",
    "p50_step_s",
    "p99_step_s",
    "kv_imbalance",
    "fairness",
    "slowdown_p50",
    "slowdown_p99",
    "mean_step_s",
    "longest_pause_s",
    "pause_over_step",
)
RECORD_FIELDS = (
    "policy", "seed", "program", "turn", "replica", "requested", "sent", "done", "latency_s",
    "queue_s", "prompt_tokens", "cached_tokens", "output_tokens", "recomputed_tokens",
)  # fmt: skip
_SYS = ("sys",)


class _Chain:
    __slots__ = ("resident", "refs")

    def __init__(self) -> None:
        self.resident = 0  # blocks of the chain's prefix that are resident
        self.refs = 0


class _Call:
    __slots__ = (
        "pid", "turn", "prompt", "out", "sys_blocks", "prog_end", "computed", "generated",
        "nblocks", "tail", "cached", "admitted", "prefilled", "on_done", "engine_seq",
    )  # fmt: skip

    def __init__(self, pid: int, turn: int, prompt: int, out: int, sys_tokens: int, bs: int):
        self.pid = pid
        self.turn = turn
        self.prompt = prompt
        self.out = out
        self.sys_blocks = min(sys_tokens, prompt) // bs
        self.prog_end = prompt // bs  # full prompt blocks
        self.computed = 0
        self.generated = 0
        self.nblocks = 0
        self.tail = 0
        self.cached: int | None = None
        self.admitted = False
        self.prefilled = 0
        self.on_done: Any = None
        self.engine_seq = 0


class Engine:
    """One replica's engine (see the module docstring). Time advances through :meth:`step`."""

    def __init__(self, profile: EngineProfile, capacity_tokens: int) -> None:
        self.profile = profile
        self.bs = profile.block_size
        self.total = capacity_tokens // self.bs
        if self.total < 1:
            raise InputError(
                f"capacity {capacity_tokens} tokens is less than one KV block of {self.bs}"
            )
        self.used = 0
        self.inactive = 0
        self.chains: dict[Any, _Chain] = {}
        self.lru: OrderedDict[Any, None] = OrderedDict()
        self.waiting: deque[_Call] = deque()
        self.running: list[_Call] = []
        self.busy = False
        self.preemptions = 0
        self.prefilled_tokens = 0
        self._seq = 0

    # -- blocks
    def _evict(self, blocks: int) -> int:
        freed = 0
        while freed < blocks and self.lru:
            key = next(iter(self.lru))
            chain = self.chains[key]
            take = min(chain.resident, blocks - freed)
            chain.resident -= take
            freed += take
            if chain.resident == 0:
                del self.lru[key]
                del self.chains[key]
        self.used -= freed
        self.inactive -= freed
        return freed

    def _ref(self, key: Any) -> _Chain:
        chain = self.chains.get(key)
        if chain is None:
            chain = self.chains[key] = _Chain()
        if chain.refs == 0 and key in self.lru:
            del self.lru[key]
            self.inactive -= chain.resident
        chain.refs += 1
        return chain

    def _unref(self, key: Any) -> None:
        chain = self.chains[key]
        chain.refs -= 1
        if chain.refs == 0:
            if chain.resident == 0:
                del self.chains[key]
            else:
                self.lru[key] = None
                self.inactive += chain.resident

    def _ensure(self, call: _Call, tokens: int) -> bool:
        """Give ``call`` the blocks that hold its first ``tokens`` tokens; False if impossible."""
        need = -(-tokens // self.bs)
        have = call.nblocks
        if need <= have:
            return True
        sb, pe = call.sys_blocks, call.prog_end
        sys_chain = self.chains[_SYS] if sb else None
        prog_chain = self.chains[call.pid] if pe > sb else None
        alloc_sys = alloc_prog = 0
        if sys_chain is not None and have < sb:
            alloc_sys = max(0, min(need, sb) - max(have, sys_chain.resident))
        if prog_chain is not None and need > sb and have < pe:
            alloc_prog = max(0, min(need, pe) - max(have, sb + prog_chain.resident))
        alloc_tail = max(0, need - max(have, pe))
        alloc = alloc_sys + alloc_prog + alloc_tail
        free = self.total - self.used
        if alloc > free:
            if alloc - free > self.inactive:
                return False
            self._evict(alloc - free)
        self.used += alloc
        if sys_chain is not None and have < sb:
            sys_chain.resident = max(sys_chain.resident, min(need, sb))
        if prog_chain is not None and need > sb and have < pe:
            prog_chain.resident = max(prog_chain.resident, min(need, pe) - sb)
        call.tail += alloc_tail
        call.nblocks = need
        return True

    def _admit(self, call: _Call) -> None:
        """Match the prompt against the cache and take references on its chains."""
        sb, pe = call.sys_blocks, call.prog_end
        hit = 0
        sys_res = self.chains[_SYS].resident if sb and _SYS in self.chains else 0
        hit = min(sys_res, sb)
        prog_chain = self.chains.get(call.pid)
        if hit == sb and prog_chain is not None:
            hit += min(prog_chain.resident, pe - sb)
        elif prog_chain is not None and prog_chain.refs == 0 and prog_chain.resident:
            self._drop(call.pid)  # unreachable behind a missing system block: garbage
        hit = min(hit, (call.prompt - 1) // self.bs)
        if sb:
            self._ref(_SYS)
        if pe > sb:
            self._ref(call.pid)
        call.nblocks = hit
        call.computed = hit * self.bs
        if call.cached is None:
            call.cached = call.computed
        call.admitted = True

    def _drop(self, key: Any) -> None:
        chain = self.chains.pop(key)
        if key in self.lru:
            del self.lru[key]
            self.inactive -= chain.resident
        self.used -= chain.resident

    def _release(self, call: _Call) -> None:
        """Free a call's blocks: private ones at once, cached chains to the LRU (own first)."""
        self.used -= call.tail
        call.tail = 0
        if call.prog_end > call.sys_blocks:
            self._unref(call.pid)
        if call.sys_blocks:
            self._unref(_SYS)
        call.nblocks = 0
        call.admitted = False

    def _preempt(self, call: _Call) -> None:
        self.preemptions += 1
        self.running.remove(call)
        self._release(call)
        call.computed = 0
        call.generated = 0
        self.waiting.appendleft(call)

    # -- passes
    def submit(self, call: _Call) -> None:
        self._seq += 1
        call.engine_seq = self._seq
        self.waiting.append(call)

    def utilisation(self) -> float:
        return (self.used - self.inactive) / self.total

    def plan_pass(self) -> tuple[float, list[tuple[_Call, int]]] | None:
        """Choose the next pass's work; returns (seconds, [(call, prefill tokens or 0)])."""
        budget = self.profile.max_batched_tokens
        batch: list[tuple[_Call, int]] = []
        k = 0
        while k < len(self.running) and budget > 0:
            call = self.running[k]
            if call.computed < call.prompt:
                n = min(call.prompt - call.computed, budget)
                upto = call.computed + n
            else:
                n = 0
                upto = call.prompt + call.generated + 1
            ok = self._ensure(call, upto)
            while not ok:
                victim = self.running[-1]
                self._preempt(victim)
                if victim is call:
                    break
                ok = self._ensure(call, upto)
            if not ok:
                continue  # `call` itself was preempted; self.running shrank
            batch.append((call, n))
            budget -= max(n, 1)
            k += 1
        while self.waiting and budget > 0 and len(self.running) < self.profile.max_num_seqs:
            call = self.waiting[0]
            if not call.admitted:
                self._admit(call)
            n = min(call.prompt - call.computed, budget)
            if n > 0:
                ok = self._ensure(call, call.computed + n)
            else:
                ok = self._ensure(call, call.prompt + call.generated + 1)
            if not ok:
                if not self.running:  # cannot fit even alone: this capacity is too small
                    raise InputError(
                        f"a prompt of {call.prompt} tokens does not fit a replica of "
                        f"{self.total * self.bs} KV tokens; raise --capacity-tokens"
                    )
                self._release(call)
                break
            self.waiting.popleft()
            self.running.append(call)
            batch.append((call, n))
            budget -= max(n, 1)
        if not batch:
            return None
        prefill = sum(n for _, n in batch)
        decoding = any(n == 0 for _, n in batch)
        seconds = self.profile.prefill_seconds(prefill)
        if decoding:
            seconds += self.profile.decode_seconds(self.utilisation())
        return seconds, batch

    def finish_pass(self, batch: list[tuple[_Call, int]]) -> list[_Call]:
        done = []
        for call, n in batch:
            if n > 0:
                call.computed += n
                call.prefilled += n
                self.prefilled_tokens += n
                if call.computed >= call.prompt:
                    call.generated += 1
            else:
                call.generated += 1
            if call.generated >= call.out and call.computed >= call.prompt:
                done.append(call)
        for call in done:
            self.running.remove(call)
            self._release(call)
        return done


@dataclass
class SimResult:
    """One simulated run: its metrics (:data:`METRICS`), step records and counters."""

    policy: str
    seed: int
    metrics: dict[str, float]
    records: list[dict[str, Any]] = field(default_factory=list)
    counters: dict[str, float] = field(default_factory=dict)


def step_record(
    spec: ProgramSpec,
    turn: int,
    replica: int,
    requested: float,
    sent: float,
    done: float,
    prompt: int,
    cached: int,
    output: int,
    prefilled: int,
) -> dict[str, Any]:
    """One row of ``records.csv`` (:data:`RECORD_FIELDS` but policy and seed). Recomputed
    tokens are those prefilled beyond what the call brought new: its tool observation and the
    previous answer (the first call: its whole prompt)."""
    novel = spec.new_tokens[turn] + (spec.output_tokens[turn - 1] if turn else spec.system_tokens)
    return {
        "program": spec.index, "turn": turn, "replica": replica, "requested": requested,
        "sent": sent, "done": done, "latency_s": done - requested, "queue_s": sent - requested,
        "prompt_tokens": prompt, "cached_tokens": cached, "output_tokens": output,
        "recomputed_tokens": max(prefilled - novel, 0),
    }  # fmt: skip


def simulate(
    workload: AgenticWorkload,
    profile: EngineProfile,
    *,
    replicas: int,
    capacity_tokens: int,
    policy: str,
    seed: int = 0,
    config: SchedulerConfig | None = None,
    horizon: float | None = None,
    sample_seconds: float = 1.0,
    keep_records: bool = True,
    release_programs: bool = True,
    warmup: float = 0.0,
) -> SimResult:
    """Run ``workload`` on ``replicas`` engines under ``policy``; see the module docstring.

    The measurement window is the saturated part of a closed loop (until fewer than
    ``concurrency`` programs remain) or the whole run of an open loop; ``horizon`` (seconds)
    stops the run early. Metrics are over calls that finish inside the window.
    ``warmup`` seconds at the start are left out of the metrics (steady state only).
    ``release_programs=False`` stands for clients that never release their programs (they just
    go silent after their last call).

    Examples
    --------
    >>> from tsched.agentic.workload import PRESETS as W
    >>> from tsched.agentic.engine import PRESETS as E
    >>> w = W["swe"].with_load(concurrency=4, programs=8)
    >>> r = simulate(w, E["mocker"], replicas=1, capacity_tokens=200_000, policy="round-robin")
    >>> r.metrics["cache_hit_rate"] > 0.5
    True
    """
    if replicas < 1:
        raise InputError(f"replicas must be >= 1, got {replicas}")
    specs = program_specs(workload, seed)
    config = config or SchedulerConfig()
    now = [0.0]
    sched = ProgramScheduler([capacity_tokens] * replicas, policy, clock=lambda: now[0],
                             config=config, profile=profile)  # fmt: skip
    engines = [Engine(profile, capacity_tokens) for _ in range(replicas)]
    events: list[tuple[float, int, str, Any]] = []
    seq = [0]

    def push(t: float, kind: str, payload: Any) -> None:
        seq[0] += 1
        heapq.heappush(events, (t, seq[0], kind, payload))

    # program runtime state
    turn = [0] * len(specs)
    requested = [0.0] * len(specs)
    sent = [0.0] * len(specs)
    started_at = [math.nan] * len(specs)
    ended_at = [math.nan] * len(specs)
    records: list[dict[str, Any]] = []
    live = [0]
    next_program = [0]
    window_end = [math.inf]
    closed = workload.concurrency is not None
    imbalance: list[float] = []

    def pid_of(i: int) -> str:
        return f"p{i}"

    def start_engine(r: int) -> None:
        eng = engines[r]
        if eng.busy:
            return
        plan = eng.plan_pass()
        if plan is None:
            return
        eng.busy = True
        push(now[0] + plan[0], "pass", (r, plan[1]))

    def send(wakeups: list[tuple[str, int]]) -> None:
        for pid, r in wakeups:
            i = int(pid[1:])
            spec = specs[i]
            k = turn[i]
            call = _Call(i, k, spec.prompt_tokens(k), spec.output_tokens[k], spec.system_tokens,
                         profile.block_size)  # fmt: skip
            sent[i] = now[0]
            call.on_done = r
            engines[r].submit(call)
            start_engine(r)

    def begin_program(i: int) -> None:
        live[0] += 1
        started_at[i] = now[0]
        turn[i] = 0
        request(i)

    def request(i: int) -> None:
        requested[i] = now[0]
        send(sched.request(pid_of(i), specs[i].prompt_tokens(turn[i])))

    def start_next() -> None:
        if next_program[0] < len(specs):
            i = next_program[0]
            next_program[0] += 1
            if closed:
                begin_program(i)
            else:
                push(specs[i].arrival, "arrive", i)

    if closed:
        for _ in range(min(workload.concurrency or 0, len(specs))):
            start_next()
    else:
        for _ in range(len(specs)):
            start_next()
    if policy in PROGRAM_LEVEL:
        push(config.tick_seconds, "tick", None)
    push(0.0, "sample", None)

    while events:
        t, _, kind, payload = heapq.heappop(events)
        if horizon is not None and t > horizon:
            now[0] = horizon
            break
        now[0] = t
        if kind == "pass":
            r, batch = payload
            eng = engines[r]
            eng.busy = False
            for call in eng.finish_pass(batch):
                i = call.pid
                spec = specs[i]
                k = call.turn
                records.append(
                    step_record(spec, k, r, requested[i], sent[i], t, call.prompt,
                                call.cached or 0, call.out, call.prefilled)
                )  # fmt: skip
                wake = sched.response(pid_of(i), call.prompt, call.out, call.cached or 0)
                if k + 1 < spec.turns:
                    push(t + spec.tool_seconds[k], "tool", i)
                else:
                    ended_at[i] = t
                    live[0] -= 1
                    if release_programs:
                        wake += sched.release(pid_of(i))
                    if closed and next_program[0] >= len(specs) and window_end[0] == math.inf:
                        window_end[0] = t
                    start_next()
                send(wake)
            start_engine(r)
        elif kind == "tool":
            i = payload
            turn[i] += 1
            request(i)
        elif kind == "arrive":
            begin_program(payload)
        elif kind == "tick":
            send(sched.tick())
            if live[0] > 0 or next_program[0] < len(specs):
                push(t + config.tick_seconds, "tick", None)
        elif kind == "sample":
            if replicas > 1:
                utils = [e.utilisation() for e in engines]
                imbalance.append(max(utils) - min(utils))
            if live[0] > 0 or next_program[0] < len(specs):
                push(t + sample_seconds, "sample", None)
    end = now[0]
    if window_end[0] == math.inf:
        window_end[0] = end
    metrics = metrics_of(
        records, specs, started_at, ended_at, window_end[0], imbalance, warmup=warmup,
        profile=profile,
    )
    counters = dict(sched.stats)
    counters["preemptions"] = sum(e.preemptions for e in engines)
    counters["window_s"] = window_end[0]
    counters["regime"] = sched.regime
    for rec in records:
        rec["policy"] = policy
        rec["seed"] = seed
    return SimResult(policy, seed, metrics, records if keep_records else [], counters)


def metrics_of(
    records: Sequence[dict[str, Any]],
    specs: Sequence[ProgramSpec],
    started_at: Sequence[float],
    ended_at: Sequence[float],
    window: float,
    imbalance: Sequence[float],
    *,
    warmup: float = 0.0,
    profile: EngineProfile | None = None,
) -> dict[str, float]:
    """:data:`METRICS` of the calls that finished between ``warmup`` and ``window`` seconds
    (see :func:`simulate`); ``imbalance`` is the sampled max − min KV utilisation. Fairness is
    Jain's index of steps per second alive, over programs alive in the window for at least a
    tenth of it.

    Fairness as users feel it, beside the index: each program's *slowdown*, the time from its
    start to its end over the time it takes alone on an idle replica of ``profile`` (its new
    tokens prefilled, its answers decoded one sequence at a time, its tools), p50 and p99 over
    the programs that ended in the window (NaN without a profile); the *longest pause*, the
    longest any call waited to be sent (its program paused, or its call held); and that over
    the mean step (a call's latency)."""
    start = min(max(warmup, 0.0), window)
    span = max(window - start, 1e-9)
    inside = [r for r in records if start <= r["done"] <= window]
    minutes = span / 60.0
    prompt = sum(r["prompt_tokens"] for r in inside)
    cached = sum(r["cached_tokens"] for r in inside)
    lat = np.array([r["latency_s"] for r in inside]) if inside else np.array([math.nan])
    done_programs = sum(1 for e in ended_at if start <= e <= window)
    per_program: dict[int, int] = {}
    for r in inside:
        per_program[r["program"]] = per_program.get(r["program"], 0) + 1
    rates = []
    for i, begun in enumerate(started_at):
        if math.isnan(begun) or begun >= window:
            continue
        end = ended_at[i] if not math.isnan(ended_at[i]) else window
        alive = min(end, window) - max(begun, start)
        # programs alive for at least a tenth of the window, starved ones included; a program
        # seen for a moment would make its rate, and the index, noise
        if alive >= 0.1 * span:
            rates.append(per_program.get(i, 0) / alive)
    slow = []
    if profile is not None:
        for i, spec in enumerate(specs):
            end, begun = ended_at[i], started_at[i]
            if math.isnan(end) or math.isnan(begun) or not start <= end <= window:
                continue
            alone = sum(spec.tool_seconds)
            for k in range(spec.turns):
                before = spec.output_tokens[k - 1] if k else spec.system_tokens
                novel = spec.new_tokens[k] + before
                alone += profile.prefill_seconds(novel)
                alone += spec.output_tokens[k] * profile.decode_seconds(0.0)
            slow.append((end - begun) / max(alone, 1e-9))
    waits = [r["queue_s"] for r in inside]
    mean_step = float(lat.mean())
    longest = max(waits, default=math.nan)
    return {
        "steps_per_min": len(inside) / minutes,
        "programs_per_hour": done_programs / (minutes / 60.0),
        "output_tokens_per_s": sum(r["output_tokens"] for r in inside) / span,
        "cache_hit_rate": cached / prompt if prompt else math.nan,
        "recomputed_tokens": float(sum(r["recomputed_tokens"] for r in inside)),
        "p50_step_s": float(np.percentile(lat, 50)),
        "p99_step_s": float(np.percentile(lat, 99)),
        "kv_imbalance": float(np.mean(imbalance)) if imbalance else 0.0,
        "fairness": jain_index(rates) if rates else math.nan,
        "slowdown_p50": float(np.percentile(slow, 50)) if slow else math.nan,
        "slowdown_p99": float(np.percentile(slow, 99)) if slow else math.nan,
        "mean_step_s": mean_step,
        "longest_pause_s": float(longest),
        "pause_over_step": float(longest / mean_step) if mean_step > 0 else math.nan,
    }
