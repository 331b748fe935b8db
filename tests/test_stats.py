"""Confidence intervals, checked against scipy's t-tests."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from tsched.stats import ci95, paired_ci95


# ---------------------------------------------------------------------------- the study
def test_ci95_matches_scipy() -> None:
    rng = np.random.default_rng(0)
    for n in (2, 5, 12):
        x = rng.lognormal(size=n)
        m, lo, hi = ci95(x)
        ref = stats.ttest_1samp(x, 0.0).confidence_interval(0.95)
        assert (lo, hi) == pytest.approx((ref.low, ref.high))
        assert m == pytest.approx(x.mean())
    assert ci95([4.0]) == (4.0, 4.0, 4.0)


def test_paired_ci95_matches_scipy_on_the_replicas_both_ran() -> None:
    """The paired interval is scipy's paired t interval (ttest_rel) over the common replicas, as
    a share of the other policy's mean there; a replica only one policy ran is left out."""
    rng = np.random.default_rng(1)
    spread = rng.lognormal(size=6) * 10  # replica-to-replica spread, common to both
    ours = dict(enumerate(spread * 0.95 + rng.normal(0, 0.05, 6)))
    theirs = dict(enumerate(spread))
    theirs[9] = 1e6  # not replayed by ours: no pair
    m, lo, hi, n = paired_ci95(ours, theirs)
    x, y = np.array([ours[k] for k in range(6)]), spread
    ref = stats.ttest_rel(x, y).confidence_interval(0.95)
    assert n == 6
    assert (lo, hi) == pytest.approx((ref.low / y.mean(), ref.high / y.mean()))
    assert m == pytest.approx((x - y).mean() / y.mean())
    assert hi < 0  # 5 % lower on every replica: the pairs say so ...
    own, other = ci95(x), ci95(y)
    assert own[2] > other[1]  # ... where the two intervals, each wide with the spread, overlap
    assert math.isnan(paired_ci95({0: 1.0}, {1: 1.0})[0])
