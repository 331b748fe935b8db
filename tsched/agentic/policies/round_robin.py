"""``round-robin``: request level, replicas in turn."""

from __future__ import annotations

from typing import Any

from tsched.agentic.policies.base import Policy
from tsched.agentic.programs import Program


class RoundRobin(Policy):
    name = "round-robin"

    def __init__(self, scheduler: Any) -> None:
        super().__init__(scheduler)
        self._turn = 0

    def route(self, prog: Program, ups: list[int]) -> int:
        self._turn += 1
        return ups[self._turn % len(ups)]
