"""The agent-program scheduling policies, one module each, behind one interface
(:class:`~tsched.agentic.policies.base.Policy`): request level (``pass-through``,
``round-robin``, ``sticky``) and program level (``thunderagent``, ``tsched``). A new policy is a
module with a subclass and a line here."""

from __future__ import annotations

from tsched.agentic.policies.base import Policy, ProgramLevel
from tsched.agentic.policies.pass_through import PassThrough
from tsched.agentic.policies.round_robin import RoundRobin
from tsched.agentic.policies.sticky import Sticky
from tsched.agentic.policies.thunderagent import ThunderAgent
from tsched.agentic.policies.tsched import Tsched

__all__ = ["POLICY_CLASSES", "Policy", "ProgramLevel"]

#: Each policy's class, by name.
POLICY_CLASSES: dict[str, type[Policy]] = {
    cls.name: cls for cls in (PassThrough, RoundRobin, Sticky, ThunderAgent, Tsched)
}
