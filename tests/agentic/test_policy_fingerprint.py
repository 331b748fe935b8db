"""The policies as classes change no simulated run: every case of
:mod:`tests.agentic.policy_fingerprint` gives the steps and counters it gave before."""

from __future__ import annotations

import json

from tests.agentic.policy_fingerprint import STORED, fingerprint


def test_every_simulated_run_is_the_one_recorded_before_the_policies_became_classes() -> None:
    stored = json.loads(STORED.read_text())
    now = fingerprint()
    assert set(now) == set(stored)
    changed = sorted(k for k in stored if now[k] != stored[k])
    assert not changed, f"runs changed: {changed}"
