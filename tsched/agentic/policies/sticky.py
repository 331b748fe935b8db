"""``sticky``: session affinity. A program's first call goes to the replica with the fewest
programs and every later call follows it; nothing waits."""

from __future__ import annotations

from tsched.agentic.policies.base import Policy
from tsched.agentic.programs import Program


class Sticky(Policy):
    name = "sticky"

    def route(self, prog: Program, ups: list[int]) -> int:
        if prog.replica is not None and prog.replica in ups:
            return prog.replica
        return min(ups, key=lambda i: (len(self.s.replicas[i].programs), i))
