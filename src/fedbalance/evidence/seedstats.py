"""Intervals over seeds: the statistics every comparison of the project reads (claims, fidelity, ``compare``).

One seed fixes a job's partition, client selection, initial model and auxiliary data, so two jobs of one seed differ
only in what the comparison is about: two sides that share seeds are compared seed by seed (``paired_interval``);
sides without enough common seeds by Welch's unequal-variance t interval (``welch_interval``). A mean against a
published value: ``ranged_interval``, inside the metric's range (a variance's on the log scale). What a rendered
comparison was made on is written beside it, machine-readably (``seed_mark``, read back by ``seed_marks``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Sequence

import numpy as np

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


def _stats():
    """``scipy.stats``, imported when an interval is computed (a second of start-up every CLI call and every workflow
    parse that only names this module's constants would pay)."""
    from scipy import stats

    return stats


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
    test = _stats().ttest_1samp(d, 0.0)
    ci = test.confidence_interval(confidence)
    return Interval(mean, float(ci.low), float(ci.high), float(test.pvalue))


def paired_differences(a: Mapping[int, float], b: Mapping[int, float] | float,
                       margin: float = 0.0) -> tuple[tuple[int, ...], np.ndarray]:
    """The seeds both sides hold (``b`` a constant: every seed of ``a``), in order, and ``a - b - margin`` on each:
    the pairing every comparison of two sides reads (the claims' comparisons, ``compare``'s rows). NaN values are
    not held."""
    mine = {int(s): float(v) for s, v in a.items() if not math.isnan(float(v))}
    if isinstance(b, Mapping):
        theirs = {int(s): float(v) for s, v in b.items() if not math.isnan(float(v))}
    else:
        theirs = dict.fromkeys(mine, float(b))
    common = tuple(sorted(set(mine) & set(theirs)))
    return common, np.array([mine[s] - theirs[s] - margin for s in common], float)


def one_sided_p(d: Sequence[float], shift: float = 0.0, *, greater: bool = True) -> float:
    """The one-sided p-value of the Student-t test that the mean of ``d`` exceeds ``shift`` (``greater``) or lies below
    it; differences without spread: 0 when they all lie on the claimed side, else 1."""
    d = np.asarray(d, float) - shift
    if np.allclose(d, d[0], rtol=0.0, atol=1e-12):
        return 0.0 if (d[0] > 1e-12 if greater else d[0] < -1e-12) else 1.0
    return float(_stats().ttest_1samp(d, 0.0, alternative="greater" if greater else "less").pvalue)


@dataclass(frozen=True)
class Equivalence:
    """Two one-sided tests of |mean| < ``margin`` (TOST): ``p_within``, the larger one-sided p of mean > -margin and
    mean < margin (both must pass); ``p_outside``, the smaller one-sided p of mean > margin or mean < -margin; the
    ``CONFIDENCE`` interval of the mean."""

    interval: Interval
    p_within: float
    p_outside: float


def equivalence(d: Sequence[float], margin: float) -> Equivalence:
    """The TOST of ``d``'s mean lying within ``(-margin, margin)`` (Schuirmann 1987), and its opposite."""
    d = np.asarray(d, float)
    ci = paired_interval(d)
    p_within = max(one_sided_p(d, -margin, greater=True), one_sided_p(d, margin, greater=False))
    p_outside = min(one_sided_p(d, margin, greater=True), one_sided_p(d, -margin, greater=False))
    return Equivalence(ci, p_within, p_outside)


def slope(x: Sequence[float], y: Sequence[float]) -> float:
    """The least-squares slope of ``y`` against ``x`` (``numpy.polyfit``, degree 1)."""
    return float(np.polyfit(np.asarray(x, float), np.asarray(y, float), 1)[0])


POWER = 0.8
"""The power ``seeds_for_power`` sizes a comparison for."""
MAX_SEEDS = 200
"""The most seeds ``seeds_for_power`` looks at: beyond, the effect is too close to zero to find."""


def seeds_for_power(effect: float, sd: float, p_factor: float = 1.0, power: float = POWER,
                    alpha: float = 1 - CONFIDENCE) -> int | None:
    """The fewest seeds at which a paired t-test of per-seed differences with mean ``effect`` > 0 and standard
    deviation ``sd`` is clear for it (two-sided p × ``p_factor`` < ``alpha``, i.e. one-sided at alpha / (2 p_factor))
    with probability ``power`` (the noncentral t, ``scipy.stats.nct``); None when ``effect`` <= 0 or more than
    ``MAX_SEEDS`` would be needed."""
    if not effect > 0 or math.isnan(sd):
        return None
    if sd <= 1e-12:
        return MIN_SEEDS
    st = _stats()
    level = alpha / (2 * p_factor)
    for n in range(MIN_SEEDS, MAX_SEEDS + 1):
        crit = st.t.ppf(1 - level, n - 1)
        if st.nct.sf(crit, n - 1, effect / sd * math.sqrt(n)) >= power:
            return n
    return None


def welch_interval(a: Sequence[float], b: Sequence[float], confidence: float = CONFIDENCE) -> Interval:
    """Welch's t interval of mean(a) - mean(b) (``scipy.stats.ttest_ind``, unequal variances); two sides without
    spread give the point itself. Needs two values a side."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    if len(a) < 2 or len(b) < 2:
        raise ValueError(f"a Welch interval needs 2 values a side or more, got {len(a)} and {len(b)}")
    diff = float(a.mean() - b.mean())
    if a.std() <= 1e-12 and b.std() <= 1e-12:
        return _point(diff)
    test = _stats().ttest_ind(a, b, equal_var=False)
    ci = test.confidence_interval(confidence)
    return Interval(diff, float(ci.low), float(ci.high), float(test.pvalue))


def mean_interval(mean: float, std: float, n: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The Student-t ``confidence`` interval of a mean over ``n`` seeds with standard deviation ``std`` (ddof 1)."""
    half = float(_stats().t.ppf(0.5 + confidence / 2, n - 1)) * std / math.sqrt(n)
    return mean - half, mean + half


@dataclass(frozen=True)
class Ranged:
    """A ``CONFIDENCE`` interval of a mean reported inside its metric's range: ``clipped`` names the ends cut to the
    range ("low", "high"); ``spread`` is False when every seed holds the same value (no interval: ``low`` = ``high``)."""

    low: float
    high: float
    clipped: tuple[str, ...] = ()
    spread: bool = True


def ranged_interval(mean: float, std: float, n: int, lower: float = -math.inf, upper: float = math.inf, *,
                    log: bool = False, confidence: float = CONFIDENCE) -> Ranged:
    """The Student-t interval of a mean over ``n`` seeds (``mean_interval``) reported inside ``[lower, upper]``: an end
    past the range is clipped to it and named in ``clipped``. ``log``: a positive quantity (a variance), its interval
    on the log scale, ``mean · exp(±t · (std/mean)/sqrt(n))`` (the delta method: the relative standard error of the
    mean), never below zero and never clipped. Seeds without spread (``std`` 0) give no interval (``spread`` False)."""
    if n < 2 or math.isnan(std):
        raise ValueError(f"an interval of a mean needs 2 seeds or more with a spread, got {n} seeds, std {std}")
    if std <= 1e-12 * max(1.0, abs(mean)):
        return Ranged(mean, mean, (), spread=False)
    if log:
        if mean <= 0:
            raise ValueError(f"a log-scale interval needs a positive mean, got {mean}")
        half = float(_stats().t.ppf(0.5 + confidence / 2, n - 1)) * std / mean / math.sqrt(n)
        return Ranged(mean * math.exp(-half), mean * math.exp(half))
    low, high = mean_interval(mean, std, n, confidence)
    clipped = tuple(end for end, cut in (("low", low < lower), ("high", high > upper)) if cut)
    return Ranged(max(low, lower), min(high, upper), clipped)


# ---------------------------------------------------------------- which seeds a rendered comparison was made on

UNLIKE = "unlike seeds"
"""What a rendered comparison of sides on different seeds says of itself, right after its mark (``seed_mark``)."""
SEED_MARK = re.compile(r"<!-- seeds (?P<group>[^:>]+): (?P<sides>[0-9, /]*) -->(?=(?P<after>[^\n]*))")


def seed_span(seeds: Iterable[int]) -> str:
    """Seeds as printed: '0–2' for a run of three or more, else '0, 3' (none: '–')."""
    s = sorted({int(x) for x in seeds})
    if len(s) > 2 and s == list(range(s[0], s[-1] + 1)):
        return f"{s[0]}–{s[-1]}"
    return ", ".join(map(str, s)) or "–"


def seed_mark(group: str, *sides: Iterable[int]) -> str:
    """The mark a rendered comparison carries: the seeds each of its ``sides`` was read on, as an HTML comment (no
    reader sees it; ``seed_marks`` reads it back), ``<!-- seeds GROUP: 0,1,2 / 0,1,2 -->`` (no pipe: it sits in
    Markdown table cells). Sides on different seeds
    get a visible note right after it, naming each set once: ' (unlike seeds: 0–3 against 0–2)'."""
    sets = [tuple(sorted({int(x) for x in side})) for side in sides]
    name = group.replace(":", " ").replace(">", " ").replace("|", " ")
    mark = f"<!-- seeds {name}: {' / '.join(','.join(map(str, s)) for s in sets)} -->"
    if len(set(sets)) > 1:
        mark += f" ({UNLIKE}: {' against '.join(seed_span(s) for s in dict.fromkeys(sets))})"
    return mark


@dataclass(frozen=True)
class SeedMark:
    """One mark read back from a rendered text: its group, the seeds of each side, and whether the text right after
    it says the sides are unlike (``UNLIKE``)."""

    group: str
    sides: tuple[frozenset[int], ...]
    says_unlike: bool

    @property
    def like(self) -> bool:
        return len(set(self.sides)) <= 1


def seed_marks(text: str) -> list[SeedMark]:
    """Every ``seed_mark`` in ``text``, in order."""
    out = []
    for m in SEED_MARK.finditer(text):
        sides = tuple(frozenset(int(x) for x in side.split(",") if x.strip()) for side in m["sides"].split("/"))
        out.append(SeedMark(m["group"].strip(), sides, m["after"].lstrip().startswith(f"({UNLIKE}")))
    return out
