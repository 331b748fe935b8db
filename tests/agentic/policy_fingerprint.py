"""A fingerprint of the agent-program simulator: every policy on every engine preset and tool mix
at several concurrencies and settings, each run's step records and counters rounded and hashed.
``data/policy_fingerprint.json`` holds what the simulator gave before the policies became
classes (:mod:`tsched.agentic.policies`); the test shows the change moved no run. tsched's fair
share, added after, is off here (``LEGACY``): it is the one intended change.

    python -m tests.agentic.policy_fingerprint  # rewrite the stored fingerprint
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

from tsched.agentic.core import POLICIES, SchedulerConfig
from tsched.agentic.engine import PRESETS as ENGINES
from tsched.agentic.sim import simulate
from tsched.agentic.workload import PRESETS as WORKLOADS

STORED = Path(__file__).parent / "data" / "policy_fingerprint.json"
#: tsched as it was before fair share (the setting, where the config has it)
LEGACY = {"fair": False}
SETTINGS = {
    "default": {},
    "no-gate": {"call_gate": False},
    "shared-once": {"count_shared_once": True},
    "overcommit": {"overcommit": 1.5},
}
CASES = (
    # (tool mix, engine, concurrency, settings, programs released)
    ("swe", "prefill-heavy", 8, "default", True),
    ("swe", "prefill-heavy", 35, "default", True),
    ("swe", "prefill-heavy", 64, "default", True),
    ("swe", "mocker", 35, "default", True),
    ("swe", "mocker", 48, "no-gate", True),
    ("openhands", "prefill-heavy", 24, "shared-once", True),
    ("heavy-tail", "mocker", 35, "overcommit", True),
    ("swe", "prefill-heavy", 35, "default", False),
)


def config(name: str) -> SchedulerConfig:
    known = {f.name for f in dataclasses.fields(SchedulerConfig)}
    kw = {**SETTINGS[name], **{k: v for k, v in LEGACY.items() if k in known}}
    return SchedulerConfig(**kw)


def _digest(result) -> str:
    h = hashlib.sha256()
    for r in result.records:
        row = (r["program"], r["turn"], r["replica"], round(r["sent"], 6), round(r["done"], 6),
               r["cached_tokens"], r["recomputed_tokens"])  # fmt: skip
        h.update(repr(row).encode())
    counters = {k: (round(v, 6) if isinstance(v, float) else v)
                for k, v in sorted(result.counters.items())}  # fmt: skip
    h.update(repr(counters).encode())
    return h.hexdigest()[:16]


def fingerprint() -> dict[str, str]:
    """``{"mix/engine/concurrency/settings/released/policy": digest}`` for every case."""
    out = {}
    for mix, engine, conc, settings, release in CASES:
        w = WORKLOADS[mix].with_load(concurrency=conc, programs=2 * conc)
        for policy in POLICIES:
            r = simulate(w, ENGINES[engine], replicas=2, capacity_tokens=59_000, policy=policy,
                         seed=1, config=config(settings), release_programs=release)  # fmt: skip
            out[f"{mix}/{engine}/{conc}/{settings}/{release}/{policy}"] = _digest(r)
    return out


if __name__ == "__main__":
    STORED.parent.mkdir(parents=True, exist_ok=True)
    STORED.write_text(json.dumps(fingerprint(), indent=1, sort_keys=True) + "\n")
    print(STORED)
