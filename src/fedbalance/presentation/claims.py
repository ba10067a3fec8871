"""The paper's headline claims, each with a verdict from the regenerated numbers, and the claims.md writer.

A claim is the paper's sentence (``PAPER``: its line of the paper's text and its quantifier) read over comparisons:
a loss against every other one of a cell (``against_every``, the intersection–union test), a setting against the
next, a value against a threshold, a trend over levels, an equivalence within a margin. Each comparison is made
on the seeds both sides hold, paired by seed (a seed fixes the partition, the client selection, the initial model and
the auxiliary data of every loss and setting: ``fl.derive_seed``), by the Student-t test of the mean per-seed
difference (``scipy.stats.ttest_1samp``; a variance's on the log scale); fewer than ``MIN_SEEDS`` common seeds leave
it undecided. It is *clear* for or against at 95 % when its 95 % interval excludes zero (the tally: every comparison
counted for, against or not clear at that one level).

The quantifier says how many of the n comparisons must go the claim's way (``needed``): "all" every one, "almost
all" every one but at most one (and never fewer than a majority), "most" a strict majority. A claim of k of n holds
when at least k are clear for it at p × (n − k + 1) < 0.05, and is refuted when at least n − k + 1 are clear against
it at p × k < 0.05 (``decide``): Benjamini and Heller's partial-conjunction test with Bonferroni's combination, so
that under any configuration of the cells, and any dependence between them, a claim that is false "holds" with
probability at most 2.5 % and a claim that is true is refuted with probability at most 2.5 % (docs/design.md,
"Claims: k of n"). For "all" (k = n) the first is the intersection-union test (each at 95 %, no correction), the
second Bonferroni's (= Holm's first step) over the n comparisons.

A claim read at L looks (a reference set's record of the reads after which seeds were added to it,
``evidence.looks``) is judged at alpha / L. Each verdict carries a sensitivity line (the same rule without the
collapsed runs, ``collapsed_jobs``), and an undecided one its bottleneck and the seeds 80 % power would need
(``seedstats.seeds_for_power``). The newer baselines of the ``beyond`` family get claims B1, B2, … by the same rule.

Every claim about the Ratio Loss is judged for each reading the study ran in the families it reads (``READINGS``):
claim N on ``ratio`` (the paper's equation), claim Nr on ``ratio_rel`` (the released code's). ``PREVIOUS`` is the rule
used before 2026-12-01 (a majority of comparisons clear at 95 % each, or every one; refutations after Holm; the
variance on its own scale; the paper reading only), ``DECEMBER`` the rule of 2026-12-01 to 2026-12-07 (the best rival
by mean, no looks): kept to set them side by side (``rule_changes``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

from fedbalance.presentation.names import PLAIN_METRIC, READING_NAME, READINGS, Read, gamma_setting
from fedbalance.presentation.tables import (
    TABLES, TableSpec, bold_mask, cell_seed_values, cell_values, environment, fmt, fmt_diff,
)
from fedbalance.common.records import DEFAULT_ESTIMATOR, cs_column, setting_value
from fedbalance.evidence.looks import looks_of
from fedbalance.evidence.seedstats import (
    CONFIDENCE, MAX_SEEDS, MIN_SEEDS, equivalence, paired_differences, paired_interval, seed_mark, seed_span,
    seeds_for_power, slope,
)

READS: tuple[Read, ...] = (
    Read("monitor", by="claims"), Read("losses", loss="ratio", by="claims"),
    Read("clients_cifar10", by="claims"), Read("clients_femnist", by="claims"),
    Read("batch_size", by="claims"), Read("local_epochs", by="claims"),
    Read("mismatch", by="claims"), Read("mismatch_fer2013", by="claims"),
    Read("readings", by="claims"),
)
"""The jobs the claims read beyond the tables' cells (``fedbalance.presentation.contract``)."""

HOLDS, FAILS, NO_DATA = "holds", "does not hold", "not enough data"
FEW_SEEDS, INDISTINCT = "too few seeds", "not distinguishable"
VERDICTS = (HOLDS, FAILS, INDISTINCT, FEW_SEEDS, NO_DATA)
NOT_JUDGED = "not judged"
"""A claim's verdict under a rule that did not judge it (``PREVIOUS`` judged the paper reading only)."""
# Outcome of one comparison a verdict rests on, at 95 %: clear for the claim (YES), clear against it (NO), not clear
# (TIE), or too few seeds to judge (FEW).
YES, NO, TIE, FEW = "yes", "no", "tie", "few"
ALPHA = 1 - CONFIDENCE
DETAILED = 5
"""A claim resting on at most this many comparisons lists each with its interval in the evidence (5: a dataset's
column of Res_3_datasets, Γ = 1 to 100); of more, the closest rival's and at most this many clear ones."""

COLLAPSE = 0.2
"""A collapsed round: test accuracy below this (a model that predicts one class of ten scores about 0.1); a job with
one after its first round is a collapsed run (``collapsed_jobs``; the prose's collapses, ``prose.collapses``)."""
MFE_MARGIN = 2.5
"""Claim 31's margin of "similar performance", in points of Ac.M: MFE and MSE are similar in a cell when the mean
per-seed difference lies within ±2.5 points (docs/design.md, "Claims: equivalence", states it and why)."""
BEYOND = ("la", "la_local", "fedlc", "fedrs")
"""The newer baselines the beyond-the-paper claims judge (the ``beyond`` family's losses that are not the paper's)."""

ALL, ALMOST_ALL, MOST = "all", "almost all", "most"
QUANTIFIERS = (ALL, ALMOST_ALL, MOST)
CELLS = {ALL: "every cell", ALMOST_ALL: "almost all cells", MOST: "most cells"}
"""How a claim's text says its quantifier of cells."""


def needed(quantifier: str, n: int) -> int:
    """How many of ``n`` comparisons a claim of ``quantifier`` needs for it: "all" n; "almost all" all but at most
    one, and never fewer than a strict majority (n − 1 of n from n = 3 on; 1 of 1, 2 of 2); "most" a strict majority
    (n // 2 + 1)."""
    if quantifier == ALL:
        return n
    if quantifier == ALMOST_ALL:
        return max(n - 1, n // 2 + 1)
    if quantifier == MOST:
        return n // 2 + 1
    raise ValueError(f"unknown quantifier {quantifier!r}: one of {', '.join(QUANTIFIERS)}")


def decide(diff: np.ndarray, p: np.ndarray, k: int, alpha: float = ALPHA) -> tuple[np.ndarray, np.ndarray]:
    """(holds, fails) of claims of k of n comparisons, vectorised: ``diff`` and ``p`` (the two-sided p-value of each
    comparison; NaN: not judged) of shape (..., n). Holds when at least k comparisons are for the claim (diff > 0)
    at p × (n − k + 1) < alpha; fails when at least n − k + 1 are against it (diff < 0) at p × k < alpha
    (Benjamini–Heller partial conjunction, Bonferroni: docs/design.md)."""
    diff, p = np.asarray(diff, float), np.nan_to_num(np.asarray(p, float), nan=1.0)
    return decide_tests(np.where(diff > 0, p, 1.0), np.where(diff < 0, p, 1.0), k, alpha)


def decide_tests(p_for: np.ndarray, p_against: np.ndarray, k: int, alpha: float = ALPHA) -> tuple[np.ndarray, np.ndarray]:
    """``decide`` on each comparison's p for the claim and p against it (shape (..., n); NaN: 1): holds when at least
    k have p_for × (n − k + 1) < alpha, fails when at least n − k + 1 have p_against × k < alpha. A comparison of one
    rival has p_for = p where its difference is positive (else 1) and p_against the reverse; a cell against every
    rival (``against_every``) has its own."""
    p_for = np.nan_to_num(np.asarray(p_for, float), nan=1.0)
    p_against = np.nan_to_num(np.asarray(p_against, float), nan=1.0)
    n = p_for.shape[-1]
    return (p_for * (n - k + 1) < alpha).sum(-1) >= k, (p_against * k < alpha).sum(-1) >= n - k + 1


def factor(quantifier: str, n: int, diff: float) -> int:
    """What a comparison's p is multiplied by in ``decide``: n − k + 1 for one that points for the claim, k against."""
    k = needed(quantifier, n)
    return n - k + 1 if diff >= 0 else k


@dataclass(frozen=True)
class Sentence:
    """The paper's sentence a claim tests: its line in the paper's text (/work/shared/paper: ratio-loss-aaai21.tex.txt,
    LaTeX as plain text) and the quantifier it states (a sentence without one states it of every cell: "all")."""

    line: int
    text: str
    quantifier: str


_LOSSES = Sentence(331, "We can see that our method can effectively mitigate the impact of class imbalance and "
                   "outperform the previous methods in almost all cases.", ALMOST_ALL)
_CENTRAL = Sentence(334, "Table Res_without_mismatch demonstrates that in these cases, our method still outperforms "
                    "the other three in most scenarios.", MOST)
_DYNAMIC = Sentence(327, "We also conduct experiments when the Γ is dynamically changing during FL training, and our "
                    "L_RL also performs the best.", ALL)
_MISMATCH = Sentence(702, "Across all of these experiments, our approach with the Ratio Loss function L_RL performs "
                     "the best, with respect to the improvement on AUC score and accuracy on minority classes (Ac.M).",
                     ALL)
_MONITOR = Sentence(234, "From the figure, we can observe that our estimation of the data composition is very close "
                    "to the ground truth.", ALL)
_CLIENTS = Sentence(234, "We also carry out experiments with different numbers of clients, and we find that the "
                    "similarity score gets even closer to 1 with the increase of client number.", ALL)
_LOCAL = Sentence(234, "We also find that the local batch size and epochs have little impact on the performance of "
                  "the monitoring scheme.", ALL)
_T_RA = Sentence(526, "We can see that T_Ra = 1.25 provides the largest mean and the smallest variance.", ALL)
_AB = Sentence(212, "In our experiments, when α=1.0 and β=0.1, the mitigation results are the best", ALL)
PAPER: dict[int, Sentence] = {
    **dict.fromkeys((1, 2, 3, 4), _LOSSES), 5: _CENTRAL, 6: _CENTRAL, 7: _DYNAMIC, 8: _DYNAMIC,
    **dict.fromkeys(range(9, 15), _MISMATCH),
    15: Sentence(601, "We can observe that our Ratio Loss will not sacrifice the performance of majority classes to "
                 "mitigate the negative impact of class imbalance", ALL),
    16: Sentence(234, "Among four datasets, the average similarity score is above 0.98 and higher than 0.99 for most of "
                 "the time.", ALL),
    17: _MONITOR,
    18: Sentence(234, "(not a claim of the paper: the project's check of line 234's bar of 0.98 against the uniform "
                 "guess, which knows nothing of the clients)", ALL),
    19: _MONITOR, 20: _CLIENTS, 21: _CLIENTS, 22: _LOCAL, 23: _LOCAL,
    24: Sentence(349, "From the figure, we can observe that 1) larger mismatch worsens the performance for all "
                 "methods", ALL),
    25: Sentence(349, "and 2) our method outperforms the other methods under all levels of mismatch.", ALL),
    26: Sentence(536, "We can see that earlier acknowledgment can greatly help improve the performance.", ALL),
    27: _T_RA, 28: _T_RA, 29: _AB, 30: _AB,
    31: Sentence(347, "From the results, we can clearly see that using L_MFE locally has similar performance as the "
                 "baseline.", ALL),
}
"""Claim number -> the paper's sentence it tests (claims 1–31, in the order ``claims`` makes them)."""
BEYOND_SENTENCE = Sentence(331, "(not a claim of the paper: its sentence \"outperform the previous methods in almost "
                           "all cases\" read for the newer baselines it predates, at every Γ the beyond family runs; "
                           "and each newer baseline against CE, the project's check that it mitigates imbalance at "
                           "all)", ALL)
"""The sentence the beyond-the-paper claims (B1, B2, …) answer to."""
READINGS_SENTENCE = Sentence(208, "(not a claim of the paper: its Ratio Loss L_RL as other researchers' code runs it, "
                             "read against the authors' released code, whose numbers the paper published, and "
                             "against CE, the loss it weights: docs/deviations.md, \"The Ratio Loss as other code "
                             "reads it\")", ALL)
"""The sentence the readings claims (R1, R2, …) answer to."""
READINGS_FAMILY = "readings"
"""The family that trains other code's readings of the Ratio Loss, at the ``losses`` family's partitions and seeds."""
READINGS_BASE = "losses"
"""The family whose ``ratio_rel`` and ``ce`` jobs the readings are paired with (one seed: one partition, one set of
clients, one initial model, one auxiliary set for every loss)."""
PI_ONE = "ce"
"""The loss that a reading whose π is 1 for every class amounts to (FedLoGe's and the Flower app's: their Ratio Loss is
built with its weights left at the default, ``fedbalance.monitor.readings``)."""
READING_MARGIN = MFE_MARGIN
"""The readings claims' margin of "performs like the released code", in points of Ac.M: claim 31's margin of
"similar performance", fixed before any readings job ran (docs/design.md, "Claims: the readings")."""
PREVIOUS_MOST = frozenset({*range(1, 16), 31})
"""The claims the rule used before read as "a majority of comparisons" (the others: every one)."""


@dataclass(frozen=True)
class Comparison:
    """One comparison of ``a`` against ``b`` (minus a margin): its outcome at 95 %, the mean difference ``diff`` on
    the seeds compared (``seeds``: paired, the common seeds; ``n`` of them), its 95 % interval (``low``, ``high``;
    NaN when not computed), the two-sided p-value of the paired t-test (NaN when not computed) and its ``scale``
    ("log": ``diff`` is the mean log ratio a / b). ``p_for`` and ``p_against`` (NaN: read from ``p`` and the sign of
    ``diff``) are what the claim's rule reads; a cell against every rival (``against_every``) or an equivalence sets
    them, ``rivals`` the number of rivals its p_against was multiplied by, ``sd`` the per-seed differences' standard
    deviation (for ``seeds_for_power``), ``rival`` the name of the bottleneck rival."""

    outcome: str
    diff: float
    n: int
    low: float = math.nan
    high: float = math.nan
    p: float = math.nan
    seeds: tuple[int, ...] = ()
    scale: str = ""
    p_for_: float = math.nan
    p_against_: float = math.nan
    rivals: int = 1
    sd: float = math.nan
    rival: str = ""
    margin: float = 0.0
    """An equivalence's margin (``equivalent``); 0 for a comparison of one side against another."""

    @property
    def p_for(self) -> float:
        """The p the claim's rule reads for it (1 where the difference points against it, or without a test)."""
        if not math.isnan(self.p_for_):
            return self.p_for_
        return self.p if self.diff > 0 and not math.isnan(self.p) else 1.0

    @property
    def p_against(self) -> float:
        """The p the claim's rule reads against it (1 where the difference points for it, or without a test)."""
        if not math.isnan(self.p_against_):
            return self.p_against_
        return self.p if self.diff < 0 and not math.isnan(self.p) else 1.0


def against_every(parts: Sequence[Comparison], names: Sequence[str] = ()) -> Comparison:
    """A cell where one side must beat every rival (``parts``: it against each, ``names`` theirs): the
    intersection–union test. It is for the claim when every part is: p_for = the largest part's p_for (each must pass
    at the claim's level, so no choice of rival by looking at the data); against it when any part is clear against at
    p × R (R rivals, Bonferroni: any of R true nulls may err), p_against = R × the smallest part's p_against. Its
    difference, interval and seeds are those of the bottleneck: the part with the least evidence for the claim (the
    largest p_for, then the smallest difference). Too few seeds in any part: FEW."""
    if not parts:
        raise ValueError("a cell against every rival needs a rival")
    names = list(names) or [""] * len(parts)
    order = sorted(range(len(parts)), key=lambda i: (-parts[i].p_for, parts[i].diff))
    b = parts[order[0]]
    r = len(parts)
    p_for = max(c.p_for for c in parts)
    p_against = min(1.0, r * min(c.p_against for c in parts))
    if any(c.outcome == FEW for c in parts):
        outcome = FEW
    else:
        outcome = YES if all(c.outcome == YES for c in parts) else NO if p_against < ALPHA else TIE
    return replace(b, outcome=outcome, p_for_=p_for, p_against_=p_against, rivals=r, rival=names[order[0]])


Values = pd.Series
"""A value per seed (index: seed), or a constant threshold as a float."""


@dataclass(frozen=True)
class Rule:
    """How a claim's verdict is read from its comparisons: ``quantified`` (this project's rule: the paper's
    quantifier, k of n, ``decide``; every reading of the Ratio Loss; a variance on the log scale) or the rule used
    before (``PREVIOUS``); ``selection_free`` (the rule since 2026-12-07): "best" against every rival, the looks paid
    for, claim 24 as a trend, 31 as equivalence, 16 on the paper's estimator, the newer baselines judged
    (``DECEMBER``: the quantified rule before it)."""

    name: str
    quantified: bool
    log_variance: bool
    readings: tuple[str, ...] = field(default=READINGS)
    selection_free: bool = True


QUANTIFIED = Rule("quantified", quantified=True, log_variance=True)
DECEMBER = Rule("quantified, 2026-12-01", quantified=True, log_variance=True, selection_free=False)
PREVIOUS = Rule("previous", quantified=False, log_variance=False, readings=("ratio",), selection_free=False)


def paired_comparison(a: Values, b: Values | float, margin: float = 0.0, *, log: bool = False) -> Comparison:
    """``a - b - margin`` per seed on the seeds both hold (``b`` a constant: every seed of ``a``); ``log``: ``log a -
    log b`` (positive values: a variance). YES when the 95 % Student-t interval of its mean lies above 0, NO below, TIE
    when it holds 0, FEW on fewer than ``MIN_SEEDS`` seeds."""
    other = b.to_dict() if isinstance(b, pd.Series) else float(b)
    seeds, d = paired_differences(a.to_dict(), other, margin)
    if log and len(seeds):
        x = a.loc[list(seeds)].to_numpy(float)
        y = b.loc[list(seeds)].to_numpy(float) if isinstance(b, pd.Series) else np.full(len(x), float(b))
        log = bool((x > 0).all() and (y > 0).all())
        if log:
            d = np.log(x) - np.log(y)
    n, scale = len(d), "log" if log and len(seeds) else ""
    mean = float(d.mean()) if n else math.nan
    sd = float(d.std(ddof=1)) if n > 1 else math.nan
    if n < MIN_SEEDS:
        return Comparison(FEW, mean, n, seeds=seeds, scale=scale, sd=sd)
    ci = paired_interval(d, CONFIDENCE)
    outcome = YES if ci.low > 0 else NO if ci.high < 0 else TIE
    return Comparison(outcome, ci.diff, n, ci.low, ci.high, ci.p, seeds, scale, sd=sd)


def equivalent(a: Values, b: Values, margin: float) -> Comparison:
    """Whether ``a`` and ``b`` lie within ``margin`` of each other, paired by seed (two one-sided tests,
    ``seedstats.equivalence``): YES when the 95 % interval of the mean difference lies inside (−margin, margin)
    (p_for = 2 × the larger one-sided p), NO when the mean lies clearly outside (p_against = 4 × the smaller one-sided
    p of the two sides, each side at alpha / 4), TIE otherwise; FEW on fewer than ``MIN_SEEDS`` common seeds."""
    seeds, d = paired_differences(a.to_dict(), b.to_dict())
    n = len(d)
    sd = float(d.std(ddof=1)) if n > 1 else math.nan
    if n < MIN_SEEDS:
        return Comparison(FEW, float(d.mean()) if n else math.nan, n, seeds=seeds, sd=sd, margin=margin)
    e = equivalence(d, margin)
    p_for, p_against = min(1.0, 2 * e.p_within), min(1.0, 4 * e.p_outside)
    outcome = YES if p_for < ALPHA else NO if p_against < ALPHA else TIE
    return Comparison(outcome, e.interval.diff, n, e.interval.low, e.interval.high, e.interval.p, seeds,
                      p_for_=p_for, p_against_=p_against, sd=sd, margin=margin)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (NaN stays NaN, e.g. a comparison on too few seeds)."""
    idx = [i for i, p in enumerate(pvalues) if not math.isnan(p)]
    order = sorted(idx, key=lambda i: pvalues[i])
    out = [math.nan] * len(pvalues)
    running, m = 0.0, len(order)
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        out[i] = running
    return out


def _undecided(comparisons: Sequence[Comparison]) -> str:
    return FEW_SEEDS if any(c.outcome == FEW for c in comparisons) else INDISTINCT


def _count(comparisons: Sequence[Comparison], outcome: str) -> int:
    return sum(c.outcome == outcome for c in comparisons)


def quantified_verdict(comparisons: Sequence[Comparison], quantifier: str, looks: int = 1) -> tuple[str, str]:
    """(verdict, how it was reached) of a claim of ``quantifier`` over ``comparisons`` (``decide_tests``), read at
    ``looks`` looks: each at alpha / looks (Bonferroni over the looks: docs/design.md, "Claims: looks")."""
    if not comparisons:
        return NO_DATA, ""
    n = len(comparisons)
    k = needed(quantifier, n)
    alpha = ALPHA / looks
    p_for = np.array([c.p_for for c in comparisons])
    p_against = np.array([c.p_against for c in comparisons])
    holds, fails = (bool(x) for x in decide_tests(p_for, p_against, k, alpha))
    f_for, f_against = n - k + 1, k
    n_for = int((p_for * f_for < alpha).sum())
    n_against = int((p_against * f_against < alpha).sum())
    level = ".05" if looks == 1 else f".05 / {looks} looks"

    def at(f: int) -> str:
        return f"p < {level}" if f == 1 else f"p × {f} < {level}"

    how = (f"{quantifier} = {k} of {n}: holds with {k} clear for at {at(f_for)} (has {n_for}), is refuted by "
           f"{n - k + 1} clear against at {at(f_against)} (has {n_against})")
    return (HOLDS if holds else FAILS if fails else _undecided(comparisons)), how


def previous_verdict(comparisons: Sequence[Comparison], most: bool) -> tuple[str, str]:
    """(verdict, how) under the rule used before: a majority (``most``) or every comparison clear for at 95 % each;
    refuted when those clear against after Holm's correction over the claim's comparisons leave no majority possible
    (``most``) or by one."""
    if not comparisons:
        return NO_DATA, ""
    adjusted = holm([c.p for c in comparisons])
    n, yes = len(comparisons), _count(comparisons, YES)
    no = sum(c.outcome == NO and adjusted[i] < ALPHA for i, c in enumerate(comparisons))
    if most:
        verdict = HOLDS if 2 * yes > n else FAILS if 2 * no >= n else _undecided(comparisons)
        return verdict, (f"a majority of {n} clear for at 95 % each, unadjusted (has {yes}), or half clear against "
                         f"after Holm (has {no})")
    verdict = FAILS if no else HOLDS if yes == n else _undecided(comparisons)
    return verdict, f"all {n} clear for at 95 % each (has {yes}), or one clear against after Holm (has {no})"


def _tally(comparisons: Sequence[Comparison]) -> str:
    """'at 95 % each: k clear for, j clear against, t not clear, f on < 3 common seeds' (zero counts left out)."""
    parts = [(_count(comparisons, YES), "clear for"), (_count(comparisons, NO), "clear against"),
             (_count(comparisons, TIE), "not clear"), (_count(comparisons, FEW), f"on < {MIN_SEEDS} common seeds")]
    return "at 95 % each: " + (", ".join(f"{k} {what}" for k, what in parts if k) or "no comparison")


def _p(p: float) -> str:
    return "<.001" if p < 0.001 else f"{p:.3f}".lstrip("0") if p < 1 else "1"


def _shown(value: float, metric: str, scale: str) -> str:
    """A difference as printed: signed in the metric's precision, or a ratio ('×0.52') on the log scale."""
    return f"×{math.exp(value):.3g}" if scale == "log" else fmt_diff(value, metric)


@dataclass(frozen=True)
class Detail:
    """One comparison as the evidence prints it (``_detail``): ``label`` ("mnist B.: Ratio - ghmc"), the comparison
    and the metric of its difference."""

    label: str
    comparison: Comparison
    metric: str


def _detail(d: Detail, quantifier: str | None = None, n: int = 1, looks: int = 1) -> str:
    """'mnist B.: Ratio - ghmc +3.10 [+0.52, +5.68] (3 seeds, p .021, adjusted .042)' and the seeds' mark
    (``seedstats.seed_mark``); the adjusted p where the claim's rule multiplies it (its quantifier's factor of n
    comparisons, the looks, a cell's rivals: the p compared with .05). An equivalence prints the p its rule reads on
    the side it leans to ('p within ±2.5 .020': p_within; 'p outside ±2.5 .041': p_outside), not the t-test's p
    against 0, which tests another question. A cell against every rival names the
    bottleneck rival ('Ratio - ghmc (weakest of 4)')."""
    c, m = d.comparison, d.metric
    pair = d.label + (f" - {c.rival}" if c.rival else "")
    label = pair + (f" (weakest of {c.rivals})" if c.rivals > 1 else "")
    label = label.replace(" - ", " / ", 1) if c.scale == "log" else label
    side_for = c.p_for <= c.p_against
    k = needed(quantifier, n) if quantifier else 1
    p_side = c.p_for if side_for else c.p_against
    adjust = ((n - k + 1) if side_for else k) * looks if quantifier else 1
    own = not math.isnan(c.p_for_) and abs(p_side - c.p) > 1e-12
    mark = seed_mark(pair, c.seeds, c.seeds) if c.seeds else ""
    seeds = f"{c.n} seed{'' if c.n == 1 else 's'}"
    if c.n == 0:  # the two cells hold jobs, on no seed in common: nothing to compare
        return f"{label}: no seed in common"
    if c.outcome == FEW or math.isnan(c.low):
        return f"{label} {_shown(c.diff, m, c.scale)} ({seeds}){mark}"
    if c.low == c.high:
        return f"{label} {_shown(c.diff, m, c.scale)} on every seed ({seeds}){mark}"
    # an equivalence prints the p its rule reads, p_within or p_outside, not the t-test against 0
    test = f"p {'within' if side_for else 'outside'} ±{c.margin:g} {_p(p_side)}" if c.margin else f"p {_p(c.p)}"
    adjusted = f", adjusted {_p(min(1.0, p_side * adjust))}" if adjust > 1 or (own and not c.margin) else ""
    return (f"{label} {_shown(c.diff, m, c.scale)} [{_shown(c.low, m, c.scale)}, {_shown(c.high, m, c.scale)}] "
            f"({seeds}, {test}{adjusted}){mark}")


@dataclass(frozen=True)
class Claim:
    """A headline claim of the paper and its verdict on our numbers: its number ("1"; "1r" the same claim on the
    released reading), the reading of the Ratio Loss it judges ("" for a claim not about it), the verdict, the
    evidence, how the rule reached the verdict (``how``) and the tally of its comparisons."""

    text: str
    verdict: str
    evidence: str
    number: str = ""
    reading: str = ""
    how: str = ""
    tally: str = ""
    looks: int = 1
    comparisons: tuple[Comparison, ...] = field(default=(), compare=False, repr=False)
    cells: tuple[tuple[str, ...], ...] = field(default=(), compare=False, repr=False)
    """The (experiment, dataset, setting, loss) of every job the claim reads (``reference plan``)."""
    collapse: str = ""
    """The sensitivity line: whether the verdict rests on a collapsed run, and the rule's verdict without them."""
    bottleneck: str = ""
    """An undecided claim's bottleneck comparison: what its data exclude."""
    seeds_needed: str = ""
    """An undecided claim: the seeds 80 % power would need at the bottleneck's effect and spread, or why none."""
    needed_n: int | None = None

    @property
    def sentence(self) -> Sentence:
        return sentence_of(self.number)

    @property
    def beyond(self) -> bool:
        """A claim on the newer baselines (numbered B1, B2, …), beyond the paper's."""
        return self.number.startswith("B")

    @property
    def of_reading(self) -> bool:
        """A claim on the Ratio Loss as other code reads it (numbered R1, R2, …), beyond the paper's."""
        return self.number.startswith("R")

    @property
    def paper(self) -> bool:
        """A claim of the paper (numbered 1, 1r, 16p, …)."""
        return self.number[:1].isdigit()


def sentence_of(number: str) -> Sentence:
    """The sentence claim ``number`` tests ('1r' and '16p' test 1's and 16's; 'B3' a beyond-the-paper sentence)."""
    if number.startswith("B"):
        return BEYOND_SENTENCE
    if number.startswith("R"):
        return READINGS_SENTENCE
    return PAPER[int(re.match(r"\d+", number).group(0))]


class _Claims:
    """The claims in the making: each added with its comparisons and evidence, numbered, judged under ``rule``, each
    at its looks (``looks``: claim base number -> earlier reads, ``evidence.looks``)."""

    def __init__(self, rule: Rule, looks: Mapping[str, int] | None = None) -> None:
        self.rule, self.out, self.number = rule, [], 0
        self.looks = dict(looks or {}) if rule.selection_free else {}

    def add(self, text: str, comparisons: Sequence[Comparison] = (), head: str = "", details: Sequence[Detail] = (),
            *, closest: int | None = None, reading: str = "", empty: str = "", verdict: str | None = None,
            cells: Sequence[tuple[str, ...]] = (), number: str | None = None) -> None:
        """Claim number n (the next), or, for ``reading`` ``ratio_rel``, claim nr (the reading of the last one), or
        ``number`` as given (a second row of the last claim, '16p'; a beyond-the-paper claim, 'B1').
        ``text`` may hold '{cells}' (the quantifier's words); ``empty``: the evidence without a comparison (in place
        of ``head``); ``verdict``: one given (no data), not read from the comparisons; ``cells``: the jobs read."""
        if number is None:
            if reading != "ratio_rel":
                self.number += 1
            number = f"{self.number}{'r' if reading == 'ratio_rel' else ''}"
        q = sentence_of(number).quantifier
        looks = looks_of(number, self.looks)
        if reading and reading not in self.rule.readings:
            self.out.append(Claim(text.format(cells=CELLS[q]), NOT_JUDGED, "", number, reading))
            return
        if self.rule.quantified:
            got, how = quantified_verdict(comparisons, q, looks)
        else:
            got, how = previous_verdict(comparisons, int(re.match(r"\d+", number).group(0)) in PREVIOUS_MOST)
        if verdict is not None:
            got, how = verdict, ""
        evidence = _evidence(head, comparisons, details, closest, q if self.rule.quantified else None, looks)
        if not comparisons and empty:
            evidence = empty
        bottleneck, seeds, n_needed = "", "", None
        if self.rule.selection_free and got in (INDISTINCT, FEW_SEEDS) and comparisons:
            bottleneck, seeds, n_needed = _undecided_reading(comparisons, details, q, looks)
        self.out.append(Claim(text.format(cells=CELLS[q]), got, "; ".join(x for x in (evidence, how) if x), number,
                              reading, how, _tally(comparisons) if comparisons else "", looks, tuple(comparisons),
                              tuple(dict.fromkeys(cells)), bottleneck=bottleneck, seeds_needed=seeds,
                              needed_n=n_needed))


def _bottleneck_index(comparisons: Sequence[Comparison], k: int) -> int:
    """The comparison a claim of k of n needs and has least evidence for: the k-th strongest for it (by p_for, then
    difference)."""
    order = sorted(range(len(comparisons)), key=lambda i: (comparisons[i].p_for, -comparisons[i].diff))
    return order[min(k, len(order)) - 1]


def _power(c: Comparison, p_factor: float, against: bool) -> int | None:
    """The seeds 80 % power needs for comparison ``c`` to be clear for the claim (``against``: against it) at
    ``p_factor`` (``seedstats.seeds_for_power`` at its observed mean and spread; an equivalence's effect is the
    distance of the mean to the nearer margin, or past it)."""
    if c.n < 2 or math.isnan(c.sd):
        return None
    if c.margin:
        effect = abs(c.diff) - c.margin if against else c.margin - abs(c.diff)
        return seeds_for_power(effect, c.sd, 2 * p_factor if against else p_factor)
    return seeds_for_power(-c.diff if against else c.diff, c.sd, p_factor * (c.rivals if against else 1))


def _undecided_reading(comparisons: Sequence[Comparison], details: Sequence[Detail], quantifier: str,
                       looks: int) -> tuple[str, str, int | None]:
    """(what the data exclude, seeds for 80 % power, that number or None) of an undecided claim: its bottleneck
    comparison (``_bottleneck_index``), the upper end of its 95 % interval ("the data exclude an advantage of more
    than X"); and the fewest seeds at which 80 % power would decide it, at the observed means and spreads: for it,
    the bottleneck clear at the claim's level (the quantifier's factor n − k + 1 × the looks); against it, the
    (n − k + 1)-th most adverse comparison clear against at k × the looks (× a cell's rivals)
    (``seedstats.seeds_for_power``); "no effect to find" when neither direction would be decided within
    ``MAX_SEEDS`` seeds (the effects too close to zero for their spread)."""
    n = len(comparisons)
    k = needed(quantifier, n)
    i = _bottleneck_index(comparisons, k)
    c = comparisons[i]
    d = details[i] if len(details) == n else None
    metric = d.metric if d is not None else ""
    name = (d.label + (f" - {c.rival}" if c.rival else "")) if d is not None else f"comparison {i + 1} of {n}"
    if c.n < 2 or math.isnan(c.sd):
        return f"bottleneck {name}: fewer than 2 common seeds", "", None

    def shown(x: float) -> str:
        return f"×{math.exp(x):.3g}" if c.scale == "log" else fmt_diff(x, metric) if metric else f"{x:+.4g}"

    if c.margin:
        where = "" if math.isnan(c.low) else f": the data place the difference in [{shown(c.low)}, {shown(c.high)}]"
        exclude = f"bottleneck {name}{where} (margin ±{c.margin:g})"
    else:
        exclude = (f"bottleneck {name}: on fewer than {MIN_SEEDS} common seeds" if math.isnan(c.high) else
                   f"bottleneck {name}: the data exclude an advantage of more than {shown(c.high)}" if c.high >= 0
                   else f"bottleneck {name}: the data exclude any advantage (the 95 % interval ends at "
                        f"{shown(c.high)})")
    to_hold = _power(c, (n - k + 1) * looks, against=False)
    adverse = sorted(comparisons, key=lambda x: (x.p_against, x.diff))[n - k]
    to_refute = _power(adverse, k * looks, against=True)
    options = [(m, why) for m, why in ((to_hold, "to hold"), (to_refute, "to refute")) if m is not None]
    if not options:
        return exclude, f"no effect to find (none within {MAX_SEEDS} seeds)", None
    m, why = min(options)
    return exclude, f"{m} ({why})", m


def _evidence(head: str, comparisons: Sequence[Comparison], details: Sequence[Detail], closest: int | None,
              quantifier: str | None, looks: int = 1) -> str:
    """The head, the comparisons as printed (each p adjusted as the claim's quantifier and looks adjust it), then the
    tally. Of more than ``DETAILED`` comparisons, only the one against the closest rival (index ``closest``, if given)
    and the clear ones (at most ``DETAILED``)."""
    n = len(comparisons)

    def shown(d: Detail) -> str:
        return _detail(d, quantifier, n, looks)

    parts = [head] if head else []
    if comparisons and details and len(comparisons) <= DETAILED:
        parts.append("; ".join(shown(d) for d in details))
    elif comparisons and details:
        if closest is not None:
            parts.append(f"closest: {shown(details[closest])}")
        clear = [shown(d) for i, d in enumerate(details) if d.comparison.outcome in (YES, NO) and i != closest]
        if clear:
            more = f"; {len(clear) - DETAILED} more" if len(clear) > DETAILED else ""
            parts.append("clear: " + "; ".join(clear[:DETAILED]) + more)
    if comparisons:
        parts.append(_tally(comparisons))
    return "; ".join(parts)


# ---------------------------------------------------------------- values per seed


def _series(frame: pd.DataFrame, **where: str) -> Values:
    """The per-seed values of the cell selected by ``where`` (columns of ``cell_seed_values``), indexed by seed."""
    sel = frame
    for k, v in where.items():
        sel = sel[sel[k] == v]
    return sel.set_index("seed")["value"].sort_index()


def _seed_means(frame: pd.DataFrame, by: list[str], column: str, scale: float = 1.0) -> dict[tuple, Values]:
    """Per group of ``by``: the per-seed mean of ``column`` (over rounds, for a rounds frame), indexed by seed."""
    per_seed = frame.dropna(subset=[column]).groupby(by + ["seed"])[column].mean() * scale
    return {k if isinstance(k, tuple) else (k,): g.droplevel(by) for k, g in per_seed.groupby(level=by)}


def _on_common(series: Sequence[Values]) -> list[Values]:
    """``series`` each kept to the seeds all of them hold: the means a claim's evidence sets side by side."""
    common = set.intersection(*(set(s.dropna().index) for s in series)) if series else set()
    return [s.loc[sorted(common)] for s in series]


def _mean(v: Values) -> float:
    return float(v.mean()) if len(v) else math.nan


def _means(label: str, named: Sequence[tuple[str, Values]], metric: str, sep: str = ", ") -> str:
    """'label: a .9674 vs b .9886' on the seeds all of ``named`` hold, with their mark."""
    kept = _on_common([v for _, v in named])
    seeds = [int(s) for s in kept[0].index] if kept else []
    return (f"{label}: " + sep.join(f"{name} {fmt(_mean(v), metric)}" for (name, _), v in zip(named, kept))
            + (f" (seeds {seed_span(seeds)})" if seeds else "") + seed_mark(label, seeds, seeds))


def reading_spec(spec: TableSpec, reading: str) -> TableSpec:
    """``spec`` with its Ratio Loss cells (loss ``ratio``) read from ``reading``'s jobs (the row keeps its name)."""
    if reading == "ratio":
        return spec
    return replace(spec, cells=tuple(replace(c, loss=reading) if c.loss == "ratio" else c for c in spec.cells))


def _ran(final: pd.DataFrame, spec: TableSpec, reading: str) -> bool:
    """Whether ``final`` holds a job of ``reading`` in the cells of ``spec`` that read the Ratio Loss."""
    keys = {(c.experiment, c.dataset, c.setting) for c in spec.cells if c.loss == "ratio"}
    jobs = final[final.loss == reading]
    return any(k in keys for k in zip(jobs.experiment, jobs.dataset, jobs.setting))


def _jobs(frame: pd.DataFrame, **where: str) -> list[tuple[str, ...]]:
    """The (experiment, dataset, setting, loss) of the jobs of the cell selected by ``where`` (``_series``)."""
    sel = frame
    for k, v in where.items():
        sel = sel[sel[k] == v]
    cols = ["experiment", "dataset", "setting", "loss"]
    return [tuple(r) for r in sel[cols].drop_duplicates().itertuples(index=False)] if set(cols) <= set(sel) else []


def _best_count(spec: TableSpec, values: pd.DataFrame, seeds: pd.DataFrame, metric: str, row: str, name: str,
                every: bool = True) -> tuple[int, list[Comparison], list[Detail], list[tuple[str, ...]]]:
    """Per (dataset, column) with ``row`` and another row: ``row`` against every other row (``every``:
    ``against_every``, the intersection–union test), or, under the rule before 2026-12-07, against the best other row
    by the table's mean; each as printed; how many cells ``row`` is ahead of every rival (of the best) by mean on the
    seeds both hold; and the jobs read."""
    v = values[values.metric == metric]
    out, details, cells = [], [], []
    for (d, column), col in v.groupby(["dataset", "column"], sort=False):
        have = col.dropna(subset=["mean"])
        if row in set(have["row"]) and len(have) > 1:
            others = have[have["row"] != row]
            mine = _series(seeds, metric=metric, dataset=d, column=column, row=row)
            cells += _jobs(seeds, metric=metric, dataset=d, column=column)
            if every:
                rivals = list(dict.fromkeys(others["row"]))
                parts = [paired_comparison(mine, _series(seeds, metric=metric, dataset=d, column=column, row=r))
                         for r in rivals]
                out.append(against_every(parts, rivals))
                details.append(Detail(f"{d} {column}: {name}", out[-1], metric))
            else:
                rival = others.loc[others["mean"].idxmax(), "row"]
                out.append(paired_comparison(mine, _series(seeds, metric=metric, dataset=d, column=column, row=rival)))
                details.append(Detail(f"{d} {column}: {name} - {rival}", out[-1], metric))
    return sum(c.diff > 0 for c in out), out, details, cells


def _chain(series: list[Values], increasing: bool = True) -> list[Comparison]:
    """Comparisons of each adjacent pair of ``series`` against the claimed order."""
    return [paired_comparison(b, a) if increasing else paired_comparison(a, b) for a, b in zip(series, series[1:])]


TABLE_CLAIMS = ("Res_3_datasets", "FL_FEMNIST", "Res_without_mismatch", "Sup_fe_dynamic", "Sup_data_MNIST",
                "Sup_data_CIFAR10", "Sup_data_Fer2013")
"""The tables of claims 1–14 (Ac.M, then AUC, each): the Ratio Loss has the best value in their cells."""


def claims(final: pd.DataFrame, rounds: pd.DataFrame, estimator: str = DEFAULT_ESTIMATOR,
           values: dict[str, pd.DataFrame] | None = None, rule: Rule = QUANTIFIED,
           looks: Mapping[str, int] | None = None, *, sensitivity: bool = True) -> list[Claim]:
    """Each headline claim of the paper with a verdict from the regenerated numbers under ``rule`` (module docstring),
    a claim about the Ratio Loss once for each reading the study ran in the families it reads (claim N: ``ratio``;
    Nr: ``ratio_rel``), each at its looks (``looks``: claim base number -> its reads before this one, a set's
    ``evidence.looks``), with the collapse sensitivity line (``sensitivity``: ``_with_collapses``).

    The evidence says how many comparisons were clear for and against, and, for a claim of a few comparisons, each
    one's mean difference with its 95 % interval, p-value and the number of common seeds.
    """
    if values is None:
        values = {k: cell_values(s, final, rounds, estimator) for k, s in TABLES.items()}
    seeds = {k: cell_seed_values(s, final, rounds, estimator) for k, s in TABLES.items()}
    variant: dict[tuple[str, str], tuple[pd.DataFrame, pd.DataFrame]] = {}

    def read(label: str, reading: str) -> tuple[pd.DataFrame, pd.DataFrame]:
        """The cells of table ``label`` (values, per-seed values) with its Ratio Loss cells read from ``reading``."""
        if reading == "ratio":
            return values[label], seeds[label]
        if (label, reading) not in variant:
            spec = reading_spec(TABLES[label], reading)
            variant[label, reading] = (cell_values(spec, final, rounds, estimator),
                                       cell_seed_values(spec, final, rounds, estimator))
        return variant[label, reading]

    def readings(*labels: str) -> list[str]:
        return ["ratio"] + [r for r in READINGS[1:] if any(_ran(final, TABLES[x], r) for x in labels)]

    out = _Claims(rule, looks)
    every = rule.selection_free
    rivals = "every other loss" if every else "the best other loss"
    for label in TABLE_CLAIMS:
        for metric in ("acm", "auc"):
            for reading in readings(label):
                v, s = read(label, reading)
                wins, comps, details, cells = _best_count(TABLES[label], v, s, metric, "ratio", "Ratio", every)
                out.add(f"Ratio Loss has the best {PLAIN_METRIC[metric]} in {{cells}} of {label}", comps,
                        f"Ratio ahead of {rivals} in {wins}/{len(comps)} cells", details, reading=reading,
                        empty="no cell holds the Ratio Loss and another loss", cells=cells)
    for reading in readings("Sup_majority", "Sup_majority_femnist"):
        parts = [read(x, reading) for x in ("Sup_majority", "Sup_majority_femnist")]
        maj = pd.concat([v for v, _ in parts]).dropna(subset=["mean"])
        maj_seeds = pd.concat([s for _, s in parts])
        comps, details, cells = [], [], []
        for (d, column), cell in maj.groupby(["dataset", "column"], sort=False):
            if {"ratio", "ce"} <= set(cell.row):
                r, c = (_series(maj_seeds, dataset=d, column=column, row=x) for x in ("ratio", "ce"))
                comps.append(paired_comparison(r, c, -1.0))
                details.append(Detail(f"{d} {column}: Ratio - CE + 1", comps[-1], "acc_majority"))
                cells += [j for x in ("ratio", "ce") for j in _jobs(maj_seeds, dataset=d, column=column, row=x)]
        out.add("Ratio Loss keeps the majority classes in {cells} (Ac. within 1 point of CE or better)", comps,
                f"Ratio within 1 point of CE or above in {sum(c.diff > 0 for c in comps)}/{len(comps)} cells", details,
                reading=reading, empty="no Sup_majority cells with both losses", cells=cells)
    _monitor_claims(out, rounds, estimator)
    _mismatch_claims(out, final)
    _sweep_claims(out, values, seeds, read, readings)
    if rule.selection_free:
        _beyond_claims(out, seeds["Beyond_paper"])
        _reading_claims(out, final)
    made = out.out
    if sensitivity and rule.selection_free:
        made = _with_collapses(made, final, rounds, estimator, rule, looks)
    return made


UNIFORM_ABOVE_TEXT = ("Monitor protocol (random selection): the uniform guess N/Q alone, with no monitor, also has mean CS "
                      "above 0.98 on every dataset, so the paper's bar does not tell the monitor from a guess")


PAPER_ESTIMATOR = "paper"
"""The paper's own monitor (its Eq. 3–4): claim 16 reads it, as the paper's sentence speaks of its monitor."""


def _monitor_claims(out: _Claims, rounds: pd.DataFrame, estimator: str) -> None:
    col, uni_col = cs_column(estimator), cs_column("uniform")
    sel = rounds[rounds.experiment == "monitor"]
    cells = [(r.experiment, r.dataset, r.setting, r.loss) for r in
             sel[["experiment", "dataset", "setting", "loss"]].drop_duplicates().itertuples(index=False)]
    uni = _seed_means(sel, ["dataset", "setting"], uni_col) if uni_col in sel.columns else {}

    def means(name: str) -> dict[tuple, Values]:
        return _seed_means(sel, ["dataset", "setting"], cs_column(name)) if cs_column(name) in sel.columns else {}

    def evidence(name: str, est: dict[tuple, Values]) -> str:
        return "; ".join(_means(key[0], [(name, e), ("uniform", uni[key])], "cs", " vs ") if key in uni
                         else f"{key[0]}: {name} {fmt(_mean(e), 'cs')}" for key, e in est.items())

    # claim 16 on the paper's monitor (its sentence's), the configured estimator a second row ("16p"); before
    # 2026-12-07 on the configured estimator alone
    rows = [(PAPER_ESTIMATOR, None), (estimator, f"{out.number + 1}p")] if out.rule.selection_free and \
        estimator != PAPER_ESTIMATOR else [(estimator, None)]
    for name, number in rows:
        est = means(name)
        text = f"Monitor: mean CS above 0.98 on every dataset (estimator {name})"
        if number is not None:
            number = f"{out.number}p"
        if est:
            out.add(text, [paired_comparison(e, 0.98) for e in est.values()], evidence(name, est), cells=cells,
                    number=number)
        else:
            out.add(text, verdict=NO_DATA, empty="no monitor rounds with a CS", number=number)
    est = means(estimator)
    beats_text = f"Monitor: estimator {estimator} beats the uniform guess on every dataset"
    if not est:
        for text in (beats_text, UNIFORM_ABOVE_TEXT):
            out.add(text, verdict=NO_DATA, empty="no monitor rounds with a CS")
    else:
        beats = [paired_comparison(e, uni[key]) for key, e in est.items() if key in uni]
        out.add(beats_text, beats, evidence(estimator, est), cells=cells)
        guess = [paired_comparison(u, 0.98) for u in uni.values()]
        out.add(UNIFORM_ABOVE_TEXT, guess, "; ".join(f"{k[0]}: uniform {fmt(_mean(u), 'cs')}" for k, u in uni.items()),
                cells=cells)
    imb = rounds[(rounds.experiment == "losses") & (rounds.loss == "ratio") & (rounds.setting != gamma_setting(1))]
    text = f"Monitor under imbalance (Gamma >= 10): {estimator} beats the uniform guess"
    if col in imb.columns and not imb.dropna(subset=[col, uni_col]).empty:
        both = imb.dropna(subset=[col, uni_col])
        e, u = (_seed_means(both, ["dataset", "setting"], c) for c in (col, uni_col))
        comps = [paired_comparison(e[k], u[k]) for k in e if k in u]
        out.add(text, comps, f"{estimator} above the guess in {sum(c.diff > 0 for c in comps)}/{len(comps)} "
                             "(dataset, Gamma) settings, on the rounds of the same jobs")
    else:
        out.add(text, verdict=NO_DATA, empty="no Ratio-Loss rounds of the losses experiment with a CS")
    for exp in ("clients_cifar10", "clients_femnist"):
        sub_rounds = rounds[rounds.experiment == exp]
        cs = _seed_means(sub_rounds, ["dataset", "setting"], col) if col in sub_rounds.columns else {}
        comps, ev = [], []
        for d in sorted({k[0] for k in cs}):
            ks = sorted((int(setting_value(s, "k")), cs[(dd, s)]) for dd, s in cs if dd == d)
            comps += _chain([v for _, v in ks], increasing=True)
            ev.append(_means(d, [(f"k={k}", v) for k, v in ks], "cs"))
        out.add(f"More selected clients bring the CS closer to 1 ({exp}, estimator {estimator})", comps, "; ".join(ev),
                empty="no rounds")
    for exp in ("batch_size", "local_epochs"):
        sub_rounds = rounds[rounds.experiment == exp]
        cs = _seed_means(sub_rounds, ["dataset", "setting"], col) if col in sub_rounds.columns else {}
        comps, ev = [], []
        for d in sorted({k[0] for k in cs}):
            per_setting = pd.DataFrame({s: v for (dd, s), v in cs.items() if dd == d})
            if per_setting.shape[1] > 1:
                per_setting = per_setting[per_setting.notna().all(axis=1)]  # the seeds that hold every setting
                span = per_setting.max(axis=1) - per_setting.min(axis=1)  # per seed, over the settings
                comps.append(paired_comparison(-span, -0.01))
                seeds = [int(s) for s in per_setting.index]
                ev.append(f"{d}: range {float(per_setting.mean().max() - per_setting.mean().min()):.4f} (seeds "
                          f"{seed_span(seeds)}){seed_mark(f'{exp} {d}', seeds, seeds)}")
        out.add(f"{exp.replace('_', ' ').capitalize()} has little impact on the monitor (CS range < 0.01, "
                f"estimator {estimator})", comps, "; ".join(ev), empty="no rounds")


def _mismatch_claims(out: _Claims, final: pd.DataFrame) -> None:
    sel = final[final.experiment.isin(["mismatch", "mismatch_fer2013"]) & final.setting.map(lambda s: setting_value(s, "g") == 10)]
    cells_of = {(r.dataset, r.loss, r.setting): (r.experiment, r.dataset, r.setting, r.loss)
                for r in sel[["experiment", "dataset", "setting", "loss"]].drop_duplicates().itertuples(index=False)}
    acm = _seed_means(sel, ["dataset", "loss", "setting"], "acc_minority", 100.0)
    levels: dict[tuple[str, str], list[tuple[int, Values]]] = {}
    for (d, loss, s), v in acm.items():
        levels.setdefault((d, loss), []).append((int(setting_value(s, "c")), v))
    comps, ev, details = [], [], []
    text = "Larger mismatch hurts all losses: Ac.M falls as classes per client fall (Gamma = 10)"
    if out.rule.selection_free:  # per loss, the slope of Ac.M against classes per client, seed by seed
        for (d, loss), lv in sorted(levels.items()):
            if len(lv) >= 2:
                frame = pd.DataFrame({c: v for c, v in lv}).dropna()  # the seeds that hold every level
                slopes = pd.Series({seed: slope(list(frame.columns), list(row)) for seed, row in frame.iterrows()},
                                   dtype=float)
                comps.append(paired_comparison(slopes, 0.0))
                details.append(Detail(f"{d}/{loss}: slope per class per client - 0", comps[-1], "acm"))
        head = (f"{sum(c.diff > 0 for c in comps)}/{len(comps)} (dataset, loss) with Ac.M rising with classes per "
                "client (the least-squares slope over the levels, per seed, on the seeds that hold every level)")
        out.add(text, comps, head, details, cells=list(cells_of.values()))
    else:
        for (d, loss), lv in sorted(levels.items()):
            lv.sort(key=lambda x: -x[0])
            if len(lv) > 1:
                chain = _chain([v for _, v in lv], increasing=False)
                comps += chain
                ev.append(f"{d}/{loss}: {'yes' if all(c.diff >= 0 for c in chain) else 'no'}")
        n_mono = sum(1 for e in ev if e.endswith("yes"))
        out.add(text, comps, "; ".join([f"{n_mono}/{len(ev)} (dataset, loss) monotone (each step on the seeds both "
                                        "levels hold)"] + ev), cells=list(cells_of.values()))
    by_level: dict[tuple[str, int], dict[str, Values]] = {}
    for (d, loss, s), v in acm.items():
        by_level.setdefault((d, int(setting_value(s, "c"))), {})[loss] = v
    for reading in ["ratio"] + [r for r in READINGS[1:] if any(r in x for x in by_level.values())]:
        comps, details, cells = [], [], []
        for (d, c), losses in sorted(by_level.items(), key=lambda kv: (kv[0][0], -kv[0][1])):
            others = {k: v for k, v in losses.items() if k not in READINGS}
            if reading in losses and others:
                mine = losses[reading]
                setting = next(s for (dd, loss, s) in acm if dd == d and int(setting_value(s, "c")) == c)
                cells += [cells_of[(d, x, setting)] for x in [reading, *others] if (d, x, setting) in cells_of]
                if out.rule.selection_free:
                    comps.append(against_every([paired_comparison(mine, v) for v in others.values()], list(others)))
                    details.append(Detail(f"{c} classes per client: Ratio", comps[-1], "acm"))
                else:
                    common = {k: v.loc[v.index.intersection(mine.index)] for k, v in others.items()}
                    rival = max(common, key=lambda k: _mean(common[k]) if len(common[k]) else -math.inf)
                    comps.append(paired_comparison(mine, others[rival]))
                    details.append(Detail(f"{c} classes per client: Ratio - {rival}", comps[-1], "acm"))
        rivals = "every other loss" if out.rule.selection_free else "the best other loss"
        out.add("Ratio Loss has the best Ac.M at every mismatch level (Res_mismatch, Gamma = 10)", comps,
                f"Ratio ahead of {rivals} in {sum(x.diff > 0 for x in comps)}/{len(comps)} levels "
                "(dataset, classes per client)", details, reading=reading, cells=cells)


def _coverage(table: pd.DataFrame, metric: str, have: pd.DataFrame, both: tuple[str, ...] = ()) -> str:
    """'k of N': of the table's (dataset, column) cells of ``metric``, how many ``have`` has data for (every row of
    ``both`` when given): how much of a sweep or grid a claim was judged on."""
    cells = table[table.metric == metric].groupby(["dataset", "column"]).ngroups
    rows = have.groupby(["dataset", "column"])["row"].agg(set)
    run = int(sum(set(both) <= r for r in rows)) if both else len(rows)
    return f"{run} of {cells}"


SWEEPS = (("Sup_hyper_T_ra", "1.25", "cs_mean"), ("Sup_hyper_T_ra", "1.25", "cs_var"),
          ("Sup_hyper_a", "1.00", "acm"), ("Sup_hyper_b", "0.10", "acm"))
"""The sweep claims: (table, the paper's best value, metric)."""


def _sweep_claims(out: _Claims, values: dict[str, pd.DataFrame], seeds: dict[str, pd.DataFrame],
                  read: Callable[[str, str], tuple[pd.DataFrame, pd.DataFrame]],
                  readings: Callable[..., list[str]]) -> None:
    """Claims 26–31: early acknowledgment, the sweeps' best values (each reading of the Ratio Loss the sweep ran), MFE."""
    v = values["Importance_early"]
    acm = v[v.metric == "acm"].dropna(subset=["mean"])
    comps, ev, details = [], [], []
    for d, sub in acm.groupby("dataset", sort=False):
        order = [s for s in ("S", "M", "E") if s in set(sub.row)]
        series = [_series(seeds["Importance_early"], metric="acm", dataset=d, row=s) for s in order]
        if len(series) > 1:
            chain = _chain(series, increasing=False)
            comps += chain
            details += [Detail(f"{a} - {b}", c, "acm") for a, b, c in zip(order, order[1:], chain)]
            ev.append(_means(d, list(zip(order, series)), "acm", " > "))
    out.add("Early acknowledgment helps: Ac.M S. > M. > E.", comps, "; ".join(ev), details, empty="no early jobs",
            cells=_jobs(seeds["Importance_early"], metric="acm"))
    for label, best, metric in SWEEPS:
        spec = TABLES[label]
        for reading in (readings(label) if any(c.loss == "ratio" for c in spec.cells) else [""]):
            table, per_seed = read(label, reading or "ratio")
            t = table[table.metric == metric].dropna(subset=["mean"])
            bold = bold_mask(spec, table)
            winners = list(table.loc[bold[bold].index].query("metric == @metric")["column"])
            comps, details, closest, cells = [], [], None, []
            log = metric == "cs_var" and out.rule.log_variance
            if best in set(t.column):
                mine = _series(per_seed, metric=metric, column=best)
                others = t[t.column != best]
                if not others.empty:
                    rival = others.loc[others["mean"].idxmin() if metric == "cs_var" else others["mean"].idxmax(), "column"]
                    closest = list(others.column).index(rival)
                cells += _jobs(per_seed, metric=metric)
                for column in others.column:
                    other = _series(per_seed, metric=metric, column=column)
                    comp = paired_comparison(other, mine, log=log) if metric == "cs_var" else paired_comparison(mine, other)
                    comps.append(comp)
                    pair = f"{column} - {best}" if metric == "cs_var" else f"{best} - {column}"
                    details.append(Detail(pair, comp, metric))
            where = f" (estimator {spec.estimator})" if spec.estimator else ""
            out.add(f"{label}: {best} gives the best {PLAIN_METRIC[metric]}{where}", comps,
                    f"best: {', '.join(winners) or '--'}; {_coverage(table, metric, t)} values run", details,
                    closest=closest, reading=reading, cells=cells,
                    verdict=NO_DATA if t.empty or best not in set(t.column) else None)
    v = values["Sup_MFE"]
    acm = v[(v.metric == "acm")].dropna(subset=["mean"])
    comps, details, cells = [], [], []
    for (d, c), sub in acm.groupby(["dataset", "column"]):
        if {"mse", "mfe"} <= set(sub.row):
            mse, mfe = (_series(seeds["Sup_MFE"], metric="acm", dataset=d, column=c, row=x) for x in ("mse", "mfe"))
            cells += _jobs(seeds["Sup_MFE"], metric="acm", dataset=d, column=c)
            if out.rule.selection_free:
                comps.append(equivalent(mfe, mse, MFE_MARGIN))
                details.append(Detail(f"{d} {c}: MFE - MSE", comps[-1], "acm"))
            else:
                comps.append(paired_comparison(mse, mfe))
    coverage = f"{_coverage(v, 'acm', acm, both=('mse', 'mfe'))} cells run"
    if out.rule.selection_free:
        out.add(f"MFE with local knowledge performs like MSE (within ±{MFE_MARGIN:g} points) in {{cells}} "
                "(Sup_MFE Ac.M)", comps,
                f"MFE within ±{MFE_MARGIN:g} of MSE in {sum(abs(x.diff) < MFE_MARGIN for x in comps)}/{len(comps)} "
                f"cells by mean (on the seeds both hold); {coverage}", details, cells=cells)
    else:
        out.add("MFE with local knowledge is no better than MSE in {cells} (Sup_MFE Ac.M)", comps,
                f"MFE <= MSE in {sum(x.diff >= 0 for x in comps)}/{len(comps)} cells (on the seeds both hold); "
                f"{coverage}", cells=cells)


def _beyond_claims(out: _Claims, seeds: pd.DataFrame) -> None:
    """Claims B1, B2, … on the newer baselines (``BEYOND``) the study ran in ``Beyond_paper``: for each, in Ac.M and
    AUC, that it beats CE at every (dataset, Γ) of the family, and that the Ratio Loss beats it there; the same rule
    as the paper's claims (every cell, paired by seed)."""
    n = 0
    for loss in BEYOND:
        if loss not in set(seeds.get("row", pd.Series(dtype=str))):
            continue
        for metric in ("acm", "auc"):
            for mine, other, text in ((loss, "ce", f"{loss} has a better {PLAIN_METRIC[metric]} than CE"),
                                      ("ratio", loss, f"Ratio Loss has a better {PLAIN_METRIC[metric]} than {loss}")):
                comps, details, cells = [], [], []
                sub = seeds[seeds.metric == metric]
                for (d, column), cell in sub.groupby(["dataset", "column"], sort=False):
                    if {mine, other} <= set(cell.row):
                        a, b = (_series(sub, dataset=d, column=column, row=x) for x in (mine, other))
                        comps.append(paired_comparison(a, b))
                        details.append(Detail(f"{d} {column}: {mine} - {other}", comps[-1], metric))
                        cells += [j for x in (mine, other) for j in _jobs(sub, dataset=d, column=column, row=x)]
                n += 1
                out.add(f"{text} in {{cells}} of Beyond_paper", comps,
                        f"ahead in {sum(c.diff > 0 for c in comps)}/{len(comps)} cells", details, cells=cells,
                        number=f"B{n}", empty=f"no Beyond_paper cell holds {mine} and {other}")


def _reading_claims(out: _Claims, final: pd.DataFrame) -> None:
    """Claims R1, R2, … on the Ratio Loss as other code reads it, final Ac.M paired by seed, at every cell each reads.
    R1: CE, the reading of the implementations whose π is 1 (``PI_ONE``), performs like the released reading
    (``ratio_rel``) within ±``READING_MARGIN`` points (``equivalent``) at every (dataset, Γ) of the ``losses`` family
    that holds both. Then for each loss of the ``readings`` family (sorted by name): it has a better Ac.M than CE,
    and it performs like the released reading, at every (dataset, Γ) it ran, against the ``losses`` family's jobs
    there. A claim without a cell that holds both sides is left out; the others keep their numbers."""
    acm = _seed_means(final, ["experiment", "dataset", "setting", "loss"], "acc_minority", 100.0)

    def order(cells: set[tuple[str, str]]) -> list[tuple[str, str]]:
        return sorted(cells, key=lambda k: (k[0], setting_value(k[1], "g") or 0, k[1]))

    def label(d: str, s: str) -> str:
        g = setting_value(s, "g")
        return f"{d} Γ={g:g}" if g is not None else f"{d} {s}"

    base = order({(d, s) for e, d, s, _ in acm if e == READINGS_BASE})
    own = sorted({loss for e, _, _, loss in acm if e == READINGS_FAMILY})
    n = 0

    def add(text: str, mine: str, exp: str, other: str, cells: Sequence[tuple[str, str]], like: bool) -> None:
        nonlocal n
        comps, details, jobs = [], [], []
        for d, s in cells:
            a, b = acm.get((exp, d, s, mine)), acm.get((READINGS_BASE, d, s, other))
            if a is None or b is None:
                continue
            comps.append(equivalent(a, b, READING_MARGIN) if like else paired_comparison(a, b))
            details.append(Detail(f"{label(d, s)}: {mine} - {other}", comps[-1], "acm"))
            jobs += [(exp, d, s, mine), (READINGS_BASE, d, s, other)]
        n += 1
        if not comps:  # nothing to judge: no row, as no Nr row without a ratio_rel job (the numbers stay)
            return
        head = (f"within ±{READING_MARGIN:g} points of {other} in {sum(abs(c.diff) < READING_MARGIN for c in comps)}"
                if like else f"ahead of {other} in {sum(c.diff > 0 for c in comps)}")
        out.add(text, comps, f"{head}/{len(comps)} cells by mean (on the seeds both hold)", details, cells=jobs,
                number=f"R{n}")

    add(f"CE, the Ratio Loss as FedLoGe and the Flower app run it (π = 1), performs like the released reading "
        f"(within ±{READING_MARGIN:g} points of Ac.M) in {{cells}} of the {READINGS_BASE} family", PI_ONE,
        READINGS_BASE, "ratio_rel", base, True)
    for loss in own:
        cells = order({(d, s) for e, d, s, x in acm if e == READINGS_FAMILY and x == loss})
        add(f"{loss} has a better Ac.M than CE in {{cells}} of the {READINGS_FAMILY} family", loss, READINGS_FAMILY,
            PI_ONE, cells, False)
        add(f"{loss} performs like the released reading (within ±{READING_MARGIN:g} points of Ac.M) in {{cells}} of the "
            f"{READINGS_FAMILY} family", loss, READINGS_FAMILY, "ratio_rel", cells, True)


def collapsed_jobs(final: pd.DataFrame, rounds: pd.DataFrame) -> set[tuple[str, str, str, str, int]]:
    """The (experiment, dataset, setting, loss, seed) of every collapsed run: a round after the first (t >= 1) whose
    test accuracy falls below ``COLLAPSE`` after an earlier round reached it (the prose's collapses: a fall to chance,
    not a slow start), or a final accuracy below it."""
    key = ["experiment", "dataset", "setting", "loss", "seed"]
    out: set[tuple[str, str, str, str, int]] = set()
    if {"round", "acc"} <= set(rounds.columns) and len(rounds):
        r = rounds.dropna(subset=["acc"]).sort_values([*key, "round"])
        reached = (r["acc"] >= COLLAPSE).astype(int).groupby([r[k] for k in key]).cumsum()
        before = reached.groupby([r[k] for k in key]).shift(1, fill_value=0) > 0
        low = r[(r["round"] >= 1) & (r["acc"] < COLLAPSE) & before]
        out |= {(*k[:4], int(k[4])) for k in low[key].drop_duplicates().itertuples(index=False)}
    if "acc" in final.columns:
        low = final[final["acc"] < COLLAPSE]
        out |= {(*k[:4], int(k[4])) for k in low[key].drop_duplicates().itertuples(index=False)}
    return out


def _with_collapses(made: list[Claim], final: pd.DataFrame, rounds: pd.DataFrame, estimator: str, rule: Rule,
                    looks: Mapping[str, int] | None) -> list[Claim]:
    """``made`` with each claim's sensitivity line: the collapsed runs (``collapsed_jobs``) among the jobs its
    comparisons read, and the verdict the same rule gives with the collapsed runs left out (every claim judged again
    on the set without them)."""
    col = collapsed_jobs(final, rounds)
    if not col:
        return [replace(c, collapse="no collapsed run in the set") for c in made]
    key = ["experiment", "dataset", "setting", "loss", "seed"]
    drop = pd.MultiIndex.from_tuples(sorted(col), names=key)

    def keep(frame: pd.DataFrame) -> pd.DataFrame:
        idx = pd.MultiIndex.from_frame(frame[key].astype({"seed": int}))
        return frame[~idx.isin(drop)]

    clean = {c.number: c for c in claims(keep(final), keep(rounds), estimator, rule=rule, looks=looks,
                                         sensitivity=False)}
    out = []
    for c in made:
        seeds = {s for comp in c.comparisons for s in comp.seeds}
        mine = sorted(j for j in col if j[:4] in set(c.cells) and j[4] in seeds)
        other = clean.get(c.number)
        moved = other is not None and [x.seeds for x in other.comparisons] != [x.seeds for x in c.comparisons]
        if not mine and not moved:
            out.append(replace(c, collapse="rests on no collapsed run"))
            continue
        named = ", ".join(f"{j[0]}/{j[2]}/{j[3]}/seed{j[4]}" for j in mine[:3]) + (
            f" and {len(mine) - 3} more" if len(mine) > 3 else "")
        without = other.verdict if other is not None else NO_DATA
        what = f"{len(mine)} collapsed run{'s' if len(mine) != 1 else ''} ({named})" if mine else "collapsed runs"
        out.append(replace(c, collapse=f"reads {what}; without them the rule gives: {without}"))
    return out


RULE_TEXT = (
    "Each comparison is made on the seeds both sides hold, paired by seed (one seed gives every loss and setting the "
    "same partition, client selection, initial model and auxiliary data), by the Student-t test of the mean per-seed "
    "difference (a CS variance's on the log scale: the mean log ratio, printed as a ratio ×r); it needs "
    f"{MIN_SEEDS} common seeds. It is *clear* for or against the claim when its 95 % interval excludes zero; the "
    "tally of a claim counts every comparison for, against or not clear at that one level. A claim states its "
    "quantifier of the n comparisons it rests on, in the paper's words: *all* needs every one of them, *almost all* "
    "every one but at most one (n − 1 of n from n = 3 on, and never fewer than a strict majority), *most* a strict "
    "majority (n // 2 + 1). A claim of k of n **holds** when at least k comparisons are clear for it at "
    "p × (n − k + 1) < .05, and **does not hold** when at least n − k + 1 are clear against it at p × k < .05 (p the "
    "comparison's two-sided p; printed with its adjusted value where the factor exceeds 1). Whatever the other "
    "comparisons do, and however they depend on each other, a false claim holds, and a true one is refuted, each with "
    "probability at most 2.5 % (the partial-conjunction test of Benjamini and Heller with Bonferroni's combination; "
    "for *all*, each at 95 % with no correction, and a refutation by one comparison at p × n; docs/design.md). "
    "A claim that the Ratio Loss is best in a cell compares it with every other loss of the cell (the "
    "intersection–union test): the cell is for the claim when every comparison is clear for it at the claim's level "
    "(its p, printed, is the largest), against it when any is clear against at p × R (R rivals); the rival is never "
    "chosen by looking at the means. A claim read at L looks (the set's record of the claims read before seeds or "
    "cells were added to them, the render the last) is judged at .05 / L (Bonferroni over the looks)."
)
"""The verdict rule, in the words of the claims header (``decide``)."""


def rule_changes(final: pd.DataFrame, rounds: pd.DataFrame, estimator: str = DEFAULT_ESTIMATOR,
                 looks: Mapping[str, int] | None = None, *, before: Rule = DECEMBER) -> list[dict[str, str]]:
    """Every claim's verdict under the rule used before (``before``: the quantified rule of 2026-12-01, or
    ``PREVIOUS``) and this project's (``QUANTIFIED``, at ``looks``), with why a changed verdict changed (how each rule
    read the comparisons, and the evidence now)."""
    old = {c.number: c for c in claims(final, rounds, estimator, rule=before, sensitivity=False)}
    rows = []
    for b in claims(final, rounds, estimator, rule=QUANTIFIED, looks=looks, sensitivity=False):
        a = old.get(b.number)
        was = a.verdict if a is not None else NOT_JUDGED
        why = "" if was == b.verdict else (
            f"not judged before — now: {b.tally}; {b.how}" if was == NOT_JUDGED else
            f"before: {a.text}: {a.how} — now: {b.evidence}")
        rows.append({"number": b.number, "text": b.text, "reading": b.reading, "before": was, "after": b.verdict,
                     "why": why})
    return rows


def write_claims(final: pd.DataFrame, rounds: pd.DataFrame, path: str | Path, *, estimator: str = DEFAULT_ESTIMATOR,
                 values: dict[str, pd.DataFrame] | None = None, templates: str | Path | None = None,
                 looks: Mapping[str, int] | None = None) -> Path:
    """Write ``claims.md`` (every claim, its verdict and evidence, then the paper's sentence each tests) at ``path``;
    ``looks``: the set's earlier reads of each claim (``evidence.looks.read_looks``)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    made = claims(final, rounds, estimator, values, looks=looks)
    p.write_text(environment(templates).get_template("claims.md.j2").render(
        claims=[c for c in made if c.paper], beyond=[c for c in made if c.beyond],
        of_readings=[c for c in made if c.of_reading], estimator=estimator, rule=RULE_TEXT, reading_name=READING_NAME,
        sentences=_sentences([c for c in made if c.paper]), beyond_sentence=BEYOND_SENTENCE,
        readings_sentence=READINGS_SENTENCE, reading_margin=READING_MARGIN, looked=any(c.looks > 1 for c in made),
        margin=MFE_MARGIN, collapse=100 * COLLAPSE,
        sweep_estimators=sorted({TABLES[label].estimator for label, _, _ in SWEEPS if TABLES[label].estimator})))
    return p


def _sentences(made: Sequence[Claim]) -> list[tuple[str, Sentence]]:
    """The paper's sentence of each claim, claims in a row that test one sentence together ("1–4")."""
    numbers = sorted({int(re.match(r"\d+", c.number).group(0)) for c in made})
    runs: list[list[int]] = []
    for n in numbers:
        if runs and PAPER[runs[-1][-1]] is PAPER[n] and runs[-1][-1] == n - 1:
            runs[-1].append(n)
        else:
            runs.append([n])
    return [(f"{r[0]}–{r[-1]}" if len(r) > 2 else ", ".join(map(str, r)), PAPER[r[0]]) for r in runs]


def write_rule_changes(final: pd.DataFrame, rounds: pd.DataFrame, path: str | Path, *,
                       estimator: str = DEFAULT_ESTIMATOR, looks: Mapping[str, int] | None = None) -> Path:
    """Write the before/after table of every claim's verdict (``rule_changes``: the rule of 2026-12-01 and the rule
    now) as Markdown at ``path``."""
    rows = rule_changes(final, rounds, estimator, looks)
    lines = ["| # | Claim | reading | before (rule of 2026-12-01) | after (every rival, looks paid for) | why it "
             "changed |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['number']} | {r['text']} | {READING_NAME.get(r['reading'], '–')} | {r['before']} | **{r['after']}** "
              f"| {r['why'] or '–'} |" for r in rows]
    changed = sum(r["before"] != r["after"] for r in rows)
    new = sum(r["before"] == NOT_JUDGED for r in rows)
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(f"{changed} of {len(rows)} verdicts change ({new} of them claims the rule before did not judge: "
                 "claim 16 on the configured estimator as a second row, the newer baselines, the Ratio Loss as other "
                 "code reads it).\n\n"
                 + "\n".join(lines) + "\n")
    return p


@dataclass(frozen=True)
class PlanRow:
    """One undecided claim's plan (``decision_plan``): the seeds 80 % power needs, the jobs to train (twins as the
    job trained in their place) and their estimated device-hours (``evidence.plan``)."""

    number: str
    text: str
    verdict: str
    seeds: str
    jobs: tuple[str, ...]
    hours: float


def decision_plan(made: Sequence[Claim],
                  jobs_for: Callable[[Sequence[tuple[str, ...]], int], tuple[list[str], float]]) -> list[PlanRow]:
    """Per undecided claim of ``made`` (not distinguishable, too few seeds): the seeds 80 % power needs at its
    bottleneck (``Claim.needed_n``) and ``jobs_for(its cells, that many seeds)``: the jobs to train and their hours
    (``evidence.plan.jobs_to_decide``). A claim whose bottleneck has no effect to find gets no jobs."""
    rows = []
    for c in made:
        if c.verdict not in (INDISTINCT, FEW_SEEDS):
            continue
        jobs, hours = jobs_for(c.cells, c.needed_n) if c.needed_n else ([], 0.0)
        rows.append(PlanRow(c.number, c.text, c.verdict, c.seeds_needed or "–", tuple(jobs), hours))
    return rows


def plan_markdown(rows: Sequence[PlanRow], device_type: str = "cpu") -> str:
    """``decision_plan``'s rows as Markdown: per claim its seeds for 80 % power, the jobs and their hours."""
    lines = [f"| # | Claim | verdict | seeds for 80 % power | jobs to run | est. {device_type} hours |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        jobs = ", ".join(r.jobs[:4]) + (f" and {len(r.jobs) - 4} more" if len(r.jobs) > 4 else "")
        lines.append(f"| {r.number} | {r.text} | {r.verdict} | {r.seeds} | {len(r.jobs)}{': ' + jobs if jobs else ''} "
                     f"| {r.hours:.2f} |")
    total = sum(r.hours for r in rows)
    return "\n".join(lines) + f"\n\nAll of them: {total:.2f} {device_type} hours (jobs of several claims counted once " \
                              "per claim).\n"
