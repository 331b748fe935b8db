"""The replay's parts (queues, backfill, fair share, preemption, consolidation) split out of the
simulator change no replay: every case of :mod:`tests.compare.replay_fingerprint` gives the
records and series it gave before the split."""

from __future__ import annotations

import json

from tests.compare.replay_fingerprint import STORED, fingerprint


def test_every_replay_is_the_one_recorded_before_the_simulator_was_split() -> None:
    stored = json.loads(STORED.read_text())
    now = fingerprint()
    assert set(now) == set(stored)
    changed = sorted(k for k in stored if now[k] != stored[k])
    assert not changed, f"replays changed: {changed}"
