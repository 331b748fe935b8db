"""The state the agent-program scheduler keeps: programs, replicas and the knobs of its
policies (:mod:`tsched.agentic.core` drives them; :mod:`tsched.agentic.policies` decides)."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Program", "ReplicaState", "SchedulerConfig", "Wakeups"]

#: ``(program_id, replica)`` pairs: calls that may be sent now.
Wakeups = list[tuple[str, int]]


@dataclass(slots=True)
class Program:
    """One agent program's scheduling state. Token counts are the engine's (from usage)."""

    id: str
    phase: str = "acting"
    state: str = "active"
    replica: int | None = None
    origin: int | None = None  # the replica before a pause (its cache may still be warm)
    tokens: int = 0  # context: last prompt + answer, or the estimate of the call in flight
    steps: int = 0  # LLM calls answered
    pending: int = 0  # calls waiting for the program's resume
    marked: bool = False  # to be paused when its call returns
    inflight: int = 0
    acting_since: float = 0.0
    queued_at: float = 0.0
    queue_seq: int = 0
    last_seen: float = 0.0
    known: int = 0  # context from the last usage (prompt + answer)
    away_mark: float = 0.0  # replica's pushed-token counter when the program left it
    sent_tokens: float = 0.0  # tokens its calls in flight count on their replica (call gate)
    gated_at: float = 0.0  # when its call reached the gate
    sent_at: float = 0.0  # when its last call was sent
    joined: float = 0.0  # when it first asked (its rate of progress counts from here)
    resumed_steps: int = 0  # its steps when it was last bound (its quantum counts from there)
    asked_at: float = 0.0  # when its latest call arrived
    longest_pause: float = 0.0  # seconds, the longest one of its calls waited to be sent
    service: float = 0.0  # seconds its calls took, sent to answered (its attained service)
    acted: float = 0.0  # seconds it spent acting (its tools), between its calls


@dataclass(slots=True)
class ReplicaState:
    """A replica's capacity (tokens of KV) and what the scheduler has bound to it."""

    capacity: int
    up: bool = True
    # program ids bound here, in binding order (a dict as an ordered set: iterating a set of
    # strings follows PYTHONHASHSEED, which made tie-breaks, and runs, differ between processes)
    programs: dict[str, None] = field(default_factory=dict)
    inflight: int = 0
    pushed_tokens: float = 0.0  # uncached prompt tokens sent here (drives the LRU estimate)


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    """Knobs of the program-level policies. ``None`` means the policy's own default.

    Parameters
    ----------
    tick_seconds
        How often the driver calls :meth:`ProgramScheduler.tick` (ThunderAgent: 5 s).
    buffer_tokens
        Tokens added per program on a replica (ThunderAgent: 100).
    acting_weight
        Weight of acting contexts on the pause side (ThunderAgent: 1.0).
    decay_half_life
        ThunderAgent: seconds; acting contexts count ``2^(-t / half_life)`` when resuming (1 s).
    resume_timeout
        A program queued this long is resumed on its former replica regardless (1,800 s).
    idle_ttl
        tsched: an acting program silent this long is released (seconds; default 600).
    overcommit
        tsched: a fixed capacity multiplier instead of the regime its cost model chooses.
    count_shared_once
        tsched: count the system prompt every program shares once per replica (learned from
        first calls' cached tokens). Off by default: in simulation the double count is the slack
        that holds paused programs' caches, which the engine's LRU evicts in its own order; with
        it on, more programs are admitted and the hit rate falls (0.56 vs 0.63 at 32 SWE-like
        programs on two prefill-heavy replicas of 59k tokens).
    call_gate
        tsched, open regime: hold a call while no replica has KV room for it (the calls in flight,
        the shared prompt once), send held calls smallest context first, a call held longer than
        the mean call time before them. On by default; off sends every call at once, as before.
        Measured in ``benchmarks/results/agentic.md`` (``python -m benchmarks.agentic``): at 35
        SWE-like programs on two mocker-timed replicas of 59k tokens (twice the KV) p50 step
        2.58 ± 0.12 s against round-robin's 3.05 ± 0.21, p99 5.38 against 5.83, steps/min
        1.02×; at 48 programs the bound on overtaking puts p50 above round-robin's (4.96 against
        4.31) with the lowest p99 (6.73 against 8.95). Exploratory runs of the ordering (not
        kept as a benchmark) found smallest first without that bound several times
        round-robin's p99, and first come first served through the gate no lower median.
    fair
        tsched, bounded regime: time-sliced fair share between programs. Each program's rate of
        progress is its steps (plus one) per second since it joined, its own tool time left
        out; paused programs with a call waiting resume slowest first (then those acting),
        programs of an over-full replica are paused fastest first, and a program whose call is
        answered after it has run its quantum gives way (is paused) when a paused program
        progresses at under ``1 / rotation_ratio`` of its rate. Off: tsched as before (queue
        order, smallest paused first). Programs are served in turns, so fairness shows over
        a window of several turns: at 35 SWE-like programs on two prefill-heavy replicas, Jain
        0.81 over 90 s, 0.92 over 180 s and 0.96 over 360 s (``benchmarks/results/
        agentic_window.md``, which also maps what ``rotation_overhead`` and
        ``rotation_ratio`` trade).
    rotation_overhead
        tsched fair share: the share of replica time rotation may cost; it sizes the quantum
        (:meth:`~tsched.agentic.policies.tsched.Tsched.quantum`): a rotation costs one
        recompute of a context, so a resumed program runs the steps whose engine time that
        recompute is this share of before it may be paused for fairness.
    quantum_steps
        tsched fair share: a fixed quantum in steps instead of the one sized from the profile.
    rotation_ratio
        tsched fair share: how much faster than the slowest paused program a program must be
        progressing to give way to it (2: twice as fast).
    pause_bound
        tsched fair share's starvation bound: a paused program whose call has waited this many
        mean steps (a call's latency, from asking to its answer, averaged as the calls come) is
        resumed first, and an active program gives way for it after one step, whatever its
        quantum. 9.5 keeps every measured pause within 10 mean steps (the estimate lags); None:
        no bound.
    """

    tick_seconds: float = 5.0
    buffer_tokens: int = 100
    acting_weight: float = 1.0
    decay_half_life: float | None = None
    resume_timeout: float = 1800.0
    idle_ttl: float | None = 600.0
    overcommit: float | None = None
    count_shared_once: bool = False
    call_gate: bool = True
    fair: bool = True
    rotation_overhead: float = 0.2
    quantum_steps: int | None = None
    rotation_ratio: float = 2.0
    pause_bound: float | None = 9.5
