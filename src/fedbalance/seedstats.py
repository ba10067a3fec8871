"""Intervals over seeds: the statistics every comparison of the project reads (claims, fidelity, ``compare``).

One seed fixes a job's partition, client selection, initial model and auxiliary data, so two jobs of one seed differ
only in what the comparison is about: two sides that share seeds are compared seed by seed (``paired_interval``);
sides without enough common seeds by Welch's unequal-variance t interval (``welch_interval``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from scipy import stats

CONFIDENCE = 0.95
"""The confidence of every interval over seeds the project states."""
MIN_SEEDS = 3
"""The fewest common seeds a paired comparison is judged on (two seeds give a t interval over 12 std wide)."""


@dataclass(frozen=True)
class Interval:
    """A difference of means, its ``CONFIDENCE`` interval and the two-sided p-value of the t-test of zero."""

    diff: float
    low: float
    high: float
    p: float

    @property
    def holds_zero(self) -> bool:
        return self.low <= 0.0 <= self.high


def _point(diff: float) -> Interval:
    """The interval of a difference measured without spread: the point itself (p = 1 at zero, else 0)."""
    return Interval(diff, diff, diff, 1.0 if abs(diff) <= 1e-12 else 0.0)


def paired_interval(d: Sequence[float], confidence: float = CONFIDENCE) -> Interval:
    """The Student-t interval of the mean of per-seed differences ``d`` (``scipy.stats.ttest_1samp``); differences
    without spread give the point itself (p = 1 at zero, else 0). Needs two differences."""
    d = np.asarray(d, float)
    if len(d) < 2:
        raise ValueError(f"a paired interval needs 2 differences or more, got {len(d)}")
    mean = float(d.mean())
    if np.allclose(d, d[0], rtol=0.0, atol=1e-12):
        return _point(mean)
    test = stats.ttest_1samp(d, 0.0)
    ci = test.confidence_interval(confidence)
    return Interval(mean, float(ci.low), float(ci.high), float(test.pvalue))


def welch_interval(a: Sequence[float], b: Sequence[float], confidence: float = CONFIDENCE) -> Interval:
    """Welch's t interval of mean(a) - mean(b) (``scipy.stats.ttest_ind``, unequal variances); two sides without
    spread give the point itself. Needs two values a side."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    if len(a) < 2 or len(b) < 2:
        raise ValueError(f"a Welch interval needs 2 values a side or more, got {len(a)} and {len(b)}")
    diff = float(a.mean() - b.mean())
    if a.std() <= 1e-12 and b.std() <= 1e-12:
        return _point(diff)
    test = stats.ttest_ind(a, b, equal_var=False)
    ci = test.confidence_interval(confidence)
    return Interval(diff, float(ci.low), float(ci.high), float(test.pvalue))


def mean_interval(mean: float, std: float, n: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The Student-t ``confidence`` interval of a mean over ``n`` seeds with standard deviation ``std`` (ddof 1)."""
    half = float(stats.t.ppf(0.5 + confidence / 2, n - 1)) * std / math.sqrt(n)
    return mean - half, mean + half
