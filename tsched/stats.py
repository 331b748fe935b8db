"""Confidence intervals for comparisons that hold: one module, used by the cluster-policy
studies (:mod:`tsched.compare.study`) and the agentic ones (:mod:`tsched.agentic.study`), and
checked against scipy's own t-test in the tests.

Every comparison of policies in tsched is a mean over replicas with a Student-t 95 % interval;
two policies that replayed the same replicas are compared by the interval of their paired
differences (:func:`paired_ci95`), which is free of the spread between replicas.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["ci95", "paired_ci95"]


def ci95(values: Sequence[float]) -> tuple[float, float, float]:
    """Mean and Student-t 95 % confidence interval of the mean of ``values``.

    One value has no interval (it is returned as its own bounds).

    >>> m, lo, hi = ci95([1.0, 2.0, 3.0])
    >>> m, round(lo, 4), round(hi, 4)
    (2.0, -0.4841, 4.4841)
    """
    from scipy import stats

    x = np.asarray(values, dtype=np.float64)
    m = float(x.mean())
    if len(x) < 2:
        return m, m, m
    half = float(stats.t.ppf(0.975, len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x)))
    return m, m - half, m + half


def paired_ci95(
    ours: Mapping[Any, float], theirs: Mapping[Any, float]
) -> tuple[float, float, float, int]:
    """Mean and Student-t 95 % interval of ``ours − theirs`` over the keys both have (the
    replicas both policies replayed), as a share of ``theirs``' mean over those keys, and the
    number of pairs.

    Every policy replays the same replicas (common random numbers), so the difference of a pair
    is free of the spread between replicas that widens each policy's own interval; the paired
    interval is the one to read when the two intervals overlap. No pair gives NaN.

    >>> m, lo, hi, n = paired_ci95({0: 9.0, 1: 10.0, 2: 11.5}, {0: 10.0, 1: 11.0, 2: 12.0})
    >>> round(m, 4), round(lo, 4), round(hi, 4), n
    (-0.0758, -0.1409, -0.0106, 3)
    """
    keys = sorted(set(ours) & set(theirs), key=str)
    if not keys:
        return math.nan, math.nan, math.nan, 0
    base = float(np.mean([theirs[k] for k in keys]))
    m, lo, hi = ci95([ours[k] - theirs[k] for k in keys])
    return m / base, lo / base, hi / base, len(keys)
