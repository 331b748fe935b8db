"""The window study's reading of its runs: paired ratios per window, the point nearest to both
goals, and the verdict when none reaches them (synthetic rows; the simulations are the
benchmark's)."""

from __future__ import annotations

import pytest

from benchmarks.agentic_window import LIVE_WINDOW, LONG_WINDOW, frontier_points, nearest, verdicts


def rows_of(study, window, arm, steps, jain, c=35):
    return [{"study": study, "concurrency": c, "window": str(window), "arm": arm, "seed": s,
             "steps_per_min": v, "fairness": jain} for s, v in enumerate(steps)]  # fmt: skip


def synthetic() -> list[dict]:
    rows = []
    for window in (LIVE_WINDOW, LONG_WINDOW):
        rows += rows_of("window", window, "round-robin", [100, 120, 110], 0.95)
        rows += rows_of("window", window, "tsched", [160, 190, 175], 0.85)
        rows += rows_of("frontier", window, "fast", [185, 222, 203], 0.70)  # ~1.85x
        rows += rows_of("frontier", window, "fair", [150, 180, 165], 0.93)  # 1.5x
    return rows


def test_frontier_points_are_paired_ratios_against_round_robin_over_the_same_window():
    pts = frontier_points(synthetic())
    assert set(pts) == {str(LIVE_WINDOW), str(LONG_WINDOW)}
    by = {name: (x, j) for name, x, j in pts[str(LIVE_WINDOW)]}
    assert by["fair"] == (pytest.approx(1.5), pytest.approx(0.93))
    assert by["fast"][0] == pytest.approx(1.85, abs=0.01)


def test_nearest_is_the_smallest_largest_relative_shortfall():
    pts = [("fast", 1.85, 0.70), ("fair", 1.5, 0.93), ("middle", 1.7, 0.85)]
    name, x, j, gap = nearest(pts, 1.8, 0.9)
    assert name == "middle" and gap == pytest.approx(1 - 1.7 / 1.8)
    assert nearest(pts + [("both", 1.9, 0.95)], 1.8, 0.9)[3] == 0.0


def test_the_verdict_says_no_setting_reaches_both_goals_and_by_how_much():
    text = "\n".join(verdicts(synthetic(), [35], None))
    assert "no setting reaches it" in text and "short of a goal" in text
    rows = synthetic() + rows_of("frontier", LONG_WINDOW, "both", [200, 240, 220], 0.95)
    assert "**reached** by both" in "\n".join(verdicts(rows, [35], None))
