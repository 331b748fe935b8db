"""The interface every scheduling policy implements, and the program-level default.

A policy holds no state of the scheduler's: it is given the
:class:`~tsched.agentic.core.ProgramScheduler` (``self.s``) and decides through these hooks
what the scheduler's mechanics do (where a call goes, who is paused, who resumes first, what a
program counts against a replica). The scheduler, the proxy and the simulator all drive the same
hooks, so a new policy is one module: a subclass of :class:`Policy` (request level) or of
:class:`ProgramLevel` (programs bound to replicas, paused and resumed), registered in
:data:`tsched.agentic.policies.POLICY_CLASSES`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tsched.agentic.programs import Program, Wakeups

__all__ = ["Policy", "ProgramLevel"]


class Policy:
    """A request-level policy: every call goes where :meth:`route` says; nothing waits."""

    #: the policy's name (:data:`tsched.agentic.core.POLICIES`)
    name = ""
    #: programs are bound to replicas, counted against their KV, paused and resumed
    program_level = False
    #: acting contexts decay when the room to admit or resume is counted (ThunderAgent)
    decayed_room = False
    #: a queued program that does not fit lets those behind it resume (no: they wait)
    overtakes = True

    def __init__(self, scheduler: Any) -> None:
        self.s = scheduler

    # -- request level -------------------------------------------------------------------------
    def route(self, prog: Program, ups: list[int]) -> int:
        """The replica (one of ``ups``) for ``prog``'s call."""
        raise NotImplementedError

    # -- events --------------------------------------------------------------------------------
    def on_wait(self) -> Wakeups:
        """A program's call was queued (it waits for a resume): what to wake now."""
        return []

    def on_response(self, prog: Program, now: float, cached: int) -> None:
        """``prog``'s call was answered (its steps already count it)."""

    def on_bind(self, prog: Program, replica: int) -> None:
        """``prog`` was bound to ``replica``."""

    def gives_way(self, prog: Program, now: float) -> bool:
        """``prog``'s call was just answered: is it to be paused for another program?"""
        return False

    def after_free(self) -> Wakeups:
        """Something freed room (a response, an abort, a release, a replica back)."""
        return []

    def tick(self, now: float) -> Wakeups:
        """The periodic pass."""
        return []

    def drain_gate(self) -> Wakeups:
        """Send held calls (policies that hold calls)."""
        return []

    # -- what programs count -------------------------------------------------------------------
    def shared(self) -> int:
        """Tokens counted once per replica against its programs (a shared system prompt)."""
        return 0

    def ahead(self, prog: Program) -> float:
        """Tokens counted for ``prog`` beyond its context (what its next call adds)."""
        return 0.0

    def acting_weight(self, seconds: float, decayed: bool) -> float:
        """Weight of a context acting for ``seconds`` (``decayed``: counting room)."""
        return self.s.config.acting_weight

    def need(self, prog: Program) -> float:
        """Tokens ``prog`` needs on a replica to resume."""
        return prog.tokens

    # -- who resumes, who is paused ------------------------------------------------------------
    def resume_order(self, queued: Iterable[Program]) -> list[Program]:
        """The queue in the order programs are considered for a resume: those with a call
        waiting, then new ones, then acting ones; smallest first within a group."""
        return sorted(queued, key=lambda p: (resume_group(p), p.tokens, p.queue_seq))

    def resume_target(self, prog: Program, room: dict[int, float], need: float) -> int | None:
        """A replica to resume ``prog`` on other than the one with the most room (None)."""
        return None

    def pause_order(self, progs: Iterable[Program]) -> list[Program]:
        """Programs of an over-full replica in the order they are paused."""
        return sorted(progs, key=lambda p: (p.tokens, p.id))


def resume_group(p: Program) -> int:
    """0: a program with a call waiting; 1: a new one; 2: an acting one."""
    if p.pending and p.steps > 0:
        return 0
    return 1 if p.steps == 0 else 2


class ProgramLevel(Policy):
    """Programs are bound to replicas and counted against their KV capacity; the periodic pass
    resumes queued programs that fit and pauses programs on replicas over capacity."""

    program_level = True

    def tick(self, now: float) -> Wakeups:
        s = self.s
        woken = s.forced_resumes(now)
        woken += s.resume(now)
        s.pause_over_capacity(now)
        return woken
