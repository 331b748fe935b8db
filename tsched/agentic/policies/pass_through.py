"""``pass-through``: request level, each call to the replica with the fewest calls in flight."""

from __future__ import annotations

from tsched.agentic.policies.base import Policy
from tsched.agentic.programs import Program


class PassThrough(Policy):
    name = "pass-through"

    def route(self, prog: Program, ups: list[int]) -> int:
        return min(ups, key=lambda i: (self.s.replicas[i].inflight, i))
