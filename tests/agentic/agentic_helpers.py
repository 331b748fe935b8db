"""Schedulers, replicas and programs shared by the tests of tsched.agentic."""

from __future__ import annotations

from tsched.agentic.sim import _Call


# ---------------------------------------------------------------- engine model
def call(pid: int, prompt: int, out: int, sys_tokens: int = 0) -> _Call:
    return _Call(pid, 0, prompt, out, sys_tokens, 16)
