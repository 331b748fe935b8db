"""``thunderagent``: the algorithm of ThunderAgent (Kang et al., arXiv 2602.13692) as its paper
configures it (see :mod:`tsched.agentic.core`): contexts against each replica's KV capacity,
acting contexts decaying ``2^-t`` when room is counted, queued programs resumed on the periodic
pass, smallest first within a group, a program that does not fit overtaken."""

from __future__ import annotations

from tsched.agentic.policies.base import ProgramLevel


class ThunderAgent(ProgramLevel):
    name = "thunderagent"
    decayed_room = True

    def acting_weight(self, seconds: float, decayed: bool) -> float:
        if decayed:
            half = self.s.config.decay_half_life or 1.0
            return 2.0 ** (-max(seconds, 0.0) / half)
        return self.s.config.acting_weight
