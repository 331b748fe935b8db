"""Program-aware scheduling of agent workflows on inference replicas: the pure core.

No I/O and no wall clock: the clock is injected, and every event is a method call —
:meth:`ProgramScheduler.request` (a program asks for an LLM call),
:meth:`~ProgramScheduler.response` (the call finished; its usage counts the program's context),
:meth:`~ProgramScheduler.abort` (the call failed or the client went away),
:meth:`~ProgramScheduler.release` (the program ended) and :meth:`~ProgramScheduler.tick` (the
periodic pause/resume pass). The proxy drives it from one
asyncio loop and the simulator from its event queue, so both run exactly this code.

A *program* is **reasoning** while it has an LLM call in flight or waiting, **acting** between
calls (its tool runs). It is **active** (bound to a replica), **paused** (in the one global queue,
bound nowhere; its KV cache is left to the engine's LRU) or **done**. Methods that can wake
programs waiting in the queue return :data:`Wakeups`: ``(program_id, replica)`` pairs whose
pending call may now be sent.

Policies (:data:`POLICIES`), each a class in :mod:`tsched.agentic.policies` that decides
through one small interface (:class:`~tsched.agentic.policies.base.Policy`) what the mechanics
here do:

``pass-through``
    Request level: each call goes to the replica with the fewest calls in flight.
``round-robin``
    Request level: replicas in turn.
``sticky``
    Session affinity: a program's first call goes to the replica with the fewest programs, and
    every later call follows it. Nothing waits.
``thunderagent``
    The algorithm of ThunderAgent (Kang et al., arXiv 2602.13692), as its paper configures it:
    contexts are counted against each replica's KV capacity (plus 100 tokens a program); a new
    program is admitted to the replica with the least active tokens that has room, else it queues,
    and never overtakes the queue; calls of admitted programs are not checked. Every tick first
    resumes — queued programs with a waiting call, then new ones, then acting ones, each group
    smallest first, kept while they fit the sum of free capacity (acting contexts weighted
    ``2^-t``, t seconds acting), then placed largest first on the replica with the most room —
    then pauses, on each replica over capacity, acting programs smallest first and, when none is
    left, marks reasoning ones smallest first (paused when their call returns). A program queued
    for 1,800 s is resumed on its former replica regardless.
``tsched``
    ThunderAgent's structure with its known weak spots fixed: each program is counted at the
    size of its next call; queued programs are resumed as soon as capacity frees (on every
    response and release), in queue order, never overtaken; a resumed program goes back to its
    former replica while its prefix is likely still cached there (the tokens other programs
    pushed through that replica since it left are below its free space); while programs wait,
    an acting program whose expected remaining tool time (from the times observed) exceeds what
    its recompute would stall is paused; a program idle longer than ``idle_ttl`` is released; a
    failed or abandoned call returns the program to acting, so nothing stays reasoning forever;
    and a cost model from the engine profile chooses between the bounded regime (contexts within
    capacity) and the open one (every program admitted) — see
    :meth:`tsched.agentic.policies.tsched.Tsched._choose_regime`. In the open regime a call gate
    holds calls that no replica's KV has room for, and sends them smallest first with
    overtaking bounded by one call time — see
    :meth:`tsched.agentic.policies.tsched.Tsched.drain_gate`. Counting the shared system prompt
    once against programs is an option (``count_shared_once``), off by default.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from tsched.agentic.engine import EngineProfile
from tsched.agentic.policies import POLICY_CLASSES
from tsched.agentic.policies.tsched import BOUNDED_GAIN
from tsched.agentic.programs import Program, ReplicaState, SchedulerConfig, Wakeups
from tsched.backends.dynamo.spec import ROUTER_POLICIES
from tsched.errors import InputError

__all__ = [
    "BOUNDED_GAIN",
    "POLICIES",
    "PROGRAM_LEVEL",
    "Program",
    "ProgramScheduler",
    "ReplicaState",
    "SchedulerConfig",
    "Wakeups",
    "jain_index",
]

#: The scheduling policies, by name (defined beside the Dynamo spec that names one of them).
POLICIES = ROUTER_POLICIES
#: The policies that bind programs to replicas, pause and resume them.
PROGRAM_LEVEL = tuple(name for name in POLICIES if POLICY_CLASSES[name].program_level)


class ProgramScheduler:
    """Decides which replica each agent call goes to, and which programs wait.

    Parameters
    ----------
    capacities
        KV capacity of each replica, in tokens.
    policy
        One of :data:`POLICIES`.
    clock
        Returns the current time in seconds (``time.monotonic`` live, the event time simulated).
    config
        :class:`SchedulerConfig`.
    profile
        The engines' :class:`~tsched.agentic.engine.EngineProfile` (``tsched``'s cost model; the
        bounded regime only when unknown).

    Examples
    --------
    >>> now = [0.0]
    >>> s = ProgramScheduler([1000], "thunderagent", clock=lambda: now[0])
    >>> s.request("a", 600), s.request("b", 600)  # b does not fit next to a: it waits
    ([('a', 0)], [])
    >>> s.response("a", 600, 10)  # a acts now; b still waits for a tick
    []
    >>> s.release("a")
    []
    >>> s.tick()
    [('b', 0)]
    """

    def __init__(
        self,
        capacities: Sequence[int],
        policy: str = "tsched",
        *,
        clock: Callable[[], float],
        config: SchedulerConfig | None = None,
        profile: EngineProfile | None = None,
    ) -> None:
        if policy not in POLICIES:
            raise InputError(f"unknown agentic policy {policy!r} (valid: {', '.join(POLICIES)})")
        if not capacities:
            raise InputError("the scheduler needs at least one replica")
        for i, cap in enumerate(capacities):
            if int(cap) <= 0:
                raise InputError(f"replica {i}: capacity must be > 0 tokens, got {cap!r}")
        self.policy = policy
        self.clock = clock
        self.config = config or SchedulerConfig()
        self.replicas = [ReplicaState(int(c)) for c in capacities]
        self.programs: dict[str, Program] = {}
        self.queue: dict[str, Program] = {}  # insertion order = queue order
        self._seq = 0
        self.tool_samples: list[float] = []
        self.stats = {"pauses": 0, "resumes": 0, "marks": 0, "forced_resumes": 0,
                      "ttl_releases": 0, "warm_resumes": 0, "migrations": 0,
                      "held_calls": 0}  # fmt: skip
        self.profile = profile
        self.overcommit = 1.0  # tsched: inf in the open regime
        self.regime = "bounded"  # pauses nobody while every context fits
        self.growth = 0.0  # EMA of new prompt tokens per call (tsched's cost model)
        self.output = 0.0  # EMA of answer tokens per call
        self.gate: dict[str, Program] = {}  # calls held until their replica's KV has room
        self.prefix_seen = 0  # the system prompt every program shares (first calls' hits)
        self.call_time = 0.0  # EMA of seconds from sending a call to its answer
        self.step_time = 0.0  # EMA of a call's latency, from asking to its answer
        self.longest_pause = 0.0  # seconds, the longest any call waited to be sent (ever)
        self.rules = POLICY_CLASSES[policy](self)  # what the policy decides

    # ------------------------------------------------------------------ events
    def request(self, program_id: str, est_tokens: int) -> Wakeups:
        """A call of ``program_id`` with a prompt of about ``est_tokens`` tokens arrives.

        Returns the calls that may be sent now, ``(program_id, replica)`` pairs: this call if the
        pair names ``program_id``, otherwise it waits until a later event's wakeups name it; and
        any other waiting calls this event freed.
        """
        now = self.clock()
        prog = self.programs.get(program_id)
        if prog is None:
            prog = Program(program_id, state="new", last_seen=now, joined=now)
            self.programs[program_id] = prog
        if prog.phase == "acting" and prog.steps > 0 and prog.inflight == 0:
            self._observe_tool(now - prog.acting_since)
            prog.acted += now - prog.acting_since
        prog.last_seen = now
        prog.asked_at = now
        prog.phase = "reasoning"
        prog.tokens = max(prog.tokens, int(est_tokens))
        if not self.rules.program_level:
            return self._route_request_level(prog)
        if prog.state == "new":
            replica = self._admit_new(prog)
            if replica is None:
                prog.pending += 1
                self._enqueue(prog, now)
                return self.rules.on_wait()
            self.bind(prog, replica)
        if prog.state == "paused":
            prog.pending += 1
            return self.rules.on_wait()
        assert prog.replica is not None
        if not self.replicas[prog.replica].up:  # its replica failed: queue and go elsewhere
            self.unbind(prog)
            prog.origin = None
            prog.pending += 1
            self._enqueue(prog, now)
            return self.resume_now()
        prog.pending += 1
        if self.regime == "open":  # bounded-load affinity: stay unless 2 calls above the least
            least = min((i for i, r in enumerate(self.replicas) if r.up),
                        key=lambda i: self.replicas[i].inflight)  # fmt: skip
            if self.replicas[prog.replica].inflight > self.replicas[least].inflight + 1:
                self.unbind(prog)
                self.bind(prog, least)
            if self.config.call_gate:
                prog.gated_at = now
                self.gate[prog.id] = prog
                woken = self.rules.drain_gate()
                if prog.id in self.gate:
                    self.stats["held_calls"] += 1
                return woken
        return self.dispatch(prog)

    def response(
        self, program_id: str, prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0
    ) -> Wakeups:
        """A call of ``program_id`` finished with this usage; the program acts now."""
        now = self.clock()
        prog = self.programs.get(program_id)
        if prog is None or prog.state == "done":
            return []
        if prog.replica is not None:
            self.replicas[prog.replica].pushed_tokens += max(prompt_tokens - cached_tokens, 0)
        if prog.inflight > 0:  # its call was sent: the seconds since count as its service
            prog.service += now - prog.sent_at
            step = now - prog.asked_at  # the call's latency, its wait included
            self.step_time = step if self.step_time == 0 else 0.95 * self.step_time + 0.05 * step
        self._call_ended(prog, now)
        if prog.steps > 0:
            growth = max(int(prompt_tokens) - prog.known, 0)
            self.growth = growth if self.growth == 0 else 0.9 * self.growth + 0.1 * growth
        out = int(completion_tokens)
        self.output = out if self.output == 0 else 0.9 * self.output + 0.1 * out
        prog.tokens = prog.known = int(prompt_tokens) + int(completion_tokens)
        prog.steps += 1
        self.rules.on_response(prog, now, int(cached_tokens))
        if prog.marked and prog.inflight == 0:
            self.pause(prog, now)
        elif self.rules.gives_way(prog, now):
            self.stats["rotations"] = self.stats.get("rotations", 0) + 1
            self.pause(prog, now)
        return self._after_free()

    def abort(self, program_id: str, *, sent: bool = True) -> Wakeups:
        """A call of ``program_id`` failed or its client went away (``sent``: after it was sent
        to a replica; else while it waited): the program acts again, so it decays, times out and
        can be paused instead of staying reasoning forever."""
        now = self.clock()
        prog = self.programs.get(program_id)
        if prog is None or prog.state == "done":
            return []
        if not sent:
            prog.pending = max(prog.pending - 1, 0)
            if not prog.pending:
                self.gate.pop(program_id, None)
            if prog.inflight or prog.pending:
                return []
            if prog.steps == 0:  # a new program that never ran holds nothing: forget it
                return self.release(program_id)
            prog.phase = "acting"
            prog.acting_since = now
            return []
        self._call_ended(prog, now)
        if prog.marked and prog.inflight == 0:
            self.pause(prog, now)
        return self._after_free()

    def release(self, program_id: str) -> Wakeups:
        """``program_id`` ended: forget it and free what it held. Unknown ids are ignored."""
        prog = self.programs.pop(program_id, None)
        if prog is None:
            return []
        if prog.replica is not None:
            self.replicas[prog.replica].inflight -= prog.inflight
        self.unbind(prog)
        self.queue.pop(program_id, None)
        self.gate.pop(program_id, None)
        prog.state = "done"
        return self._after_free()

    def set_replica_up(self, replica: int, up: bool) -> Wakeups:
        """Mark a replica failed (its programs are queued, their caches lost) or back."""
        rep = self.replicas[replica]
        rep.up = up
        if up:
            return self._after_free()
        now = self.clock()
        for pid in list(rep.programs):
            prog = self.programs[pid]
            prog.inflight = 0
            prog.sent_tokens = 0.0
            self.gate.pop(pid, None)
            self.unbind(prog)
            prog.origin = None
            prog.marked = False
            if self.rules.program_level:
                self._enqueue(prog, now)
            else:
                prog.state = "active"
        rep.inflight = 0
        return self._after_free()

    def tick(self) -> Wakeups:
        """The periodic pass (program-level policies): expire idle programs, resume from the
        queue, then pause; what it does is the policy's."""
        return self.rules.tick(self.clock())

    # ------------------------------------------------------------------ reading
    def used_tokens(self, replica: int, *, decayed: bool = False) -> float:
        """Tokens counted on ``replica``: contexts (acting ones weighted), buffers, shared once,
        and what the policy counts ahead of each program (:meth:`Policy.ahead`)."""
        now = self.clock()
        rep = self.replicas[replica]
        total = 0.0
        rules = self.rules
        shared = rules.shared()
        for pid in rep.programs:
            prog = self.programs[pid]
            tokens = max(prog.tokens - shared, 0) + rules.ahead(prog)
            if prog.phase == "acting" and prog.inflight == 0:
                tokens *= rules.acting_weight(now - prog.acting_since, decayed)
            total += tokens + self.config.buffer_tokens
        if rep.programs:
            total += shared
        return total

    def capacity(self, replica: int) -> float:
        return self.replicas[replica].capacity * self.overcommit

    @property
    def shared_prefix(self) -> int:
        """Tokens of the system prompt every program shares, counted once per replica against
        the programs there (``count_shared_once``; 0 otherwise)."""
        return self.prefix_seen if self.config.count_shared_once else 0

    def inflight_tokens(self, replica: int) -> float:
        """Prompt + answer tokens of the calls in flight on ``replica`` (the call gate's count)."""
        return sum(self.programs[pid].sent_tokens for pid in self.replicas[replica].programs)

    def remaining(self, replica: int, *, decayed: bool = False) -> float:
        return self.capacity(replica) - self.used_tokens(replica, decayed=decayed)

    def snapshot(self) -> dict[str, object]:
        """Everything ``/programs`` and ``/health`` show: programs, queue, replicas, counters."""
        return {
            "policy": self.policy,
            "overcommit": self.overcommit,
            "shared_prefix_tokens": self.shared_prefix,
            "queue": list(self.queue),
            "gate": list(self.gate),
            "programs": [
                {
                    "program_id": p.id,
                    "state": p.state,
                    "phase": p.phase,
                    "replica": p.replica,
                    "tokens": p.tokens,
                    "steps": p.steps,
                    "pending": p.pending,
                    "marked": p.marked,
                    "service_s": round(p.service, 3),
                    "longest_pause_s": round(p.longest_pause, 3),
                }  # fmt: skip
                for p in self.programs.values()
            ],
            "replicas": [
                {
                    "replica": i,
                    "up": r.up,
                    "capacity_tokens": r.capacity,
                    "programs": len(r.programs),
                    "inflight": r.inflight,
                    "used_tokens": round(self.used_tokens(i), 1),
                }  # fmt: skip
                for i, r in enumerate(self.replicas)
            ],
            "stats": dict(self.stats),
            "longest_pause_s": round(self.longest_pause, 3),
        }

    # ------------------------------------------------------------------ internals
    def _route_request_level(self, prog: Program) -> Wakeups:
        ups = [i for i, r in enumerate(self.replicas) if r.up]
        prog.pending += 1
        if not ups:
            return []
        replica = self.rules.route(prog, ups)
        if prog.replica != replica:
            self.unbind(prog)
            self.bind(prog, replica)
        return self.dispatch(prog)

    def dispatch(self, prog: Program) -> Wakeups:
        """Send ``prog``'s waiting calls to its replica."""
        assert prog.replica is not None and prog.pending > 0
        prog.inflight += prog.pending
        self.replicas[prog.replica].inflight += prog.pending
        prog.sent_at = self.clock()
        prog.longest_pause = max(prog.longest_pause, prog.sent_at - prog.asked_at)
        self.longest_pause = max(self.longest_pause, prog.longest_pause)
        prog.sent_tokens += (prog.tokens + self.output) * prog.pending
        prog.pending = 0
        return [(prog.id, prog.replica)]

    def _call_ended(self, prog: Program, now: float) -> None:
        if prog.inflight > 0:
            prog.sent_tokens -= prog.sent_tokens / prog.inflight
            prog.inflight -= 1
            if prog.replica is not None:
                self.replicas[prog.replica].inflight -= 1
        if prog.inflight == 0:
            prog.phase = "acting"
            prog.acting_since = now
        prog.last_seen = now

    def bind(self, prog: Program, replica: int) -> None:
        prog.replica = replica
        prog.resumed_steps = prog.steps
        prog.state = "active"
        self.replicas[replica].programs[prog.id] = None
        self.rules.on_bind(prog, replica)

    def unbind(self, prog: Program) -> None:
        if prog.replica is not None:
            rep = self.replicas[prog.replica]
            rep.programs.pop(prog.id, None)
            prog.origin = prog.replica
            prog.away_mark = rep.pushed_tokens
        prog.replica = None

    def _enqueue(self, prog: Program, now: float) -> None:
        prog.state = "paused"
        prog.queued_at = now
        self._seq += 1
        prog.queue_seq = self._seq
        self.queue[prog.id] = prog

    def pause(self, prog: Program, now: float) -> None:
        self.stats["pauses"] += 1
        prog.marked = False
        self.unbind(prog)
        self._enqueue(prog, now)

    def _observe_tool(self, seconds: float) -> None:
        self.tool_samples.append(max(seconds, 0.0))
        if len(self.tool_samples) > 512:
            del self.tool_samples[:256]

    def _admit_new(self, prog: Program) -> int | None:
        if self.queue:  # new programs never overtake queued ones
            return None
        need = prog.tokens + self.config.buffer_tokens
        best = None
        for i, rep in enumerate(self.replicas):
            if not rep.up:
                continue
            if self.remaining(i, decayed=self.rules.decayed_room) >= need:
                key = (self.used_tokens(i), i)
                if best is None or key < best[0]:
                    best = (key, i)
        return None if best is None else best[1]

    def _after_free(self) -> Wakeups:
        return self.rules.after_free()

    def resume_now(self) -> Wakeups:
        return self.resume(self.clock()) if self.queue else []

    def forced_resumes(self, now: float) -> Wakeups:
        woken: Wakeups = []
        for prog in list(self.queue.values()):
            if now - prog.queued_at < self.config.resume_timeout:
                continue
            ups = [i for i, r in enumerate(self.replicas) if r.up]
            if not ups:
                break
            if prog.origin is not None and self.replicas[prog.origin].up:
                target = prog.origin
            else:
                target = min(ups, key=lambda i: (len(self.replicas[i].programs), i))
            self.stats["forced_resumes"] += 1
            woken += self._resume_one(prog, target)
        return woken

    def resume(self, now: float) -> Wakeups:
        """Resume from the global queue: choose who fits in the total room, then place them."""
        if not self.queue:
            return []
        ups = [i for i, r in enumerate(self.replicas) if r.up]
        rules = self.rules
        room = {i: self.remaining(i, decayed=rules.decayed_room) for i in ups}
        room = {i: r for i, r in room.items() if r > self.config.buffer_tokens}
        if not room:
            return []
        buffer = self.config.buffer_tokens
        total = sum(room.values())
        kept = []
        for prog in rules.resume_order(self.queue.values()):
            need = rules.need(prog) + buffer
            if need <= total:
                kept.append(prog)
                total -= need
            elif not rules.overtakes:
                break  # no overtaking: a program that does not fit blocks those behind it
        woken: Wakeups = []
        kept.sort(key=lambda p: -rules.need(p))
        for prog in kept:
            need = rules.need(prog) + buffer
            target = rules.resume_target(prog, room, need)
            if target is None:
                target = max(room, key=lambda i: (room[i], -i))
                if room[target] < need:
                    if not rules.overtakes:
                        break
                    continue
            room[target] -= need
            woken += self._resume_one(prog, target)
        return woken

    def _resume_one(self, prog: Program, replica: int) -> Wakeups:
        self.queue.pop(prog.id, None)
        self.stats["resumes"] += 1
        self.bind(prog, replica)
        return self.dispatch(prog) if prog.pending else []

    def pause_over_capacity(self, now: float) -> None:
        for i, rep in enumerate(self.replicas):
            if not rep.up:
                continue
            over = -self.remaining(i)
            if over <= 0:
                continue
            progs = [self.programs[pid] for pid in rep.programs]
            acting = self.rules.pause_order(
                p for p in progs if p.phase == "acting" and p.inflight == 0 and not p.marked
            )
            for prog in acting:
                if over <= 0:
                    break
                over -= self.rules.need(prog) * self.rules.acting_weight(
                    now - prog.acting_since, False
                )
                over -= self.config.buffer_tokens
                self.pause(prog, now)
            if over <= 0:
                continue
            reasoning = self.rules.pause_order(p for p in progs if p.inflight > 0 and not p.marked)
            for prog in reasoning:
                if over <= 0:
                    break
                prog.marked = True
                self.stats["marks"] += 1
                over -= self.rules.need(prog) + self.config.buffer_tokens

    def check_capacity(self) -> list[str]:
        """Replicas whose counted tokens exceed capacity once marked programs leave (should be
        empty after every tick of a program-level policy); for tests."""
        problems = []
        for i, rep in enumerate(self.replicas):
            marked = sum(
                self.rules.need(self.programs[p]) + self.config.buffer_tokens
                for p in rep.programs
                if self.programs[p].marked
            )
            used = self.used_tokens(i) - marked
            if rep.up and used > self.capacity(i) + 1e-6:
                problems.append(f"replica {i}: {used:.0f} > {self.capacity(i):.0f}")
        return problems


def jain_index(values: Sequence[float]) -> float:
    """Jain's fairness index (Σx)² / (n·Σx²): 1 when all equal, 1/n when one takes all."""
    xs = [float(v) for v in values]
    if not xs:
        return math.nan
    sq = sum(x * x for x in xs)
    return 1.0 if sq == 0 else sum(xs) ** 2 / (len(xs) * sq)
