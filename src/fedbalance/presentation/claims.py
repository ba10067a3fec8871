"""The paper's headline claims, each with a verdict from the regenerated numbers, and the claims.md writer.

A claim is the paper's sentence (``PAPER``: its line of the paper's text and its quantifier) read over comparisons:
a loss against the best other one, a setting against the next, a value against a threshold. Each comparison is made
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

Every claim about the Ratio Loss is judged for each reading the study ran in the families it reads (``READINGS``):
claim N on ``ratio`` (the paper's equation), claim Nr on ``ratio_rel`` (the released code's). ``PREVIOUS`` is the rule
used before (a majority of comparisons clear at 95 % each, or every one; refutations after Holm; the variance on its
own scale; the paper reading only): kept to set the two side by side once (``rule_changes``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

from fedbalance.presentation.names import PLAIN_METRIC, READING_NAME, READINGS, Read, gamma_setting
from fedbalance.presentation.tables import (
    TABLES, TableSpec, bold_mask, cell_seed_values, cell_values, environment, fmt, fmt_diff,
)
from fedbalance.common.records import DEFAULT_ESTIMATOR, cs_column, setting_value
from fedbalance.evidence.seedstats import CONFIDENCE, MIN_SEEDS, paired_interval, seed_mark, seed_span

READS: tuple[Read, ...] = (
    Read("monitor", by="claims"), Read("losses", loss="ratio", by="claims"),
    Read("clients_cifar10", by="claims"), Read("clients_femnist", by="claims"),
    Read("batch_size", by="claims"), Read("local_epochs", by="claims"),
    Read("mismatch", by="claims"), Read("mismatch_fer2013", by="claims"),
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
    n = diff.shape[-1]
    for_ = (diff > 0) & (p * (n - k + 1) < alpha)
    against = (diff < 0) & (p * k < alpha)
    return for_.sum(-1) >= k, against.sum(-1) >= n - k + 1


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
PREVIOUS_MOST = frozenset({*range(1, 16), 31})
"""The claims the rule used before read as "a majority of comparisons" (the others: every one)."""


@dataclass(frozen=True)
class Comparison:
    """One comparison of ``a`` against ``b`` (minus a margin): its outcome at 95 %, the mean difference ``diff`` on
    the seeds compared (``seeds``: paired, the common seeds; ``n`` of them), its 95 % interval (``low``, ``high``;
    NaN when not computed), the two-sided p-value of the paired t-test (NaN when not computed) and its ``scale``
    ("log": ``diff`` is the mean log ratio a / b)."""

    outcome: str
    diff: float
    n: int
    low: float = math.nan
    high: float = math.nan
    p: float = math.nan
    seeds: tuple[int, ...] = ()
    scale: str = ""


Values = pd.Series
"""A value per seed (index: seed), or a constant threshold as a float."""


@dataclass(frozen=True)
class Rule:
    """How a claim's verdict is read from its comparisons: ``quantified`` (this project's rule: the paper's
    quantifier, k of n, ``decide``; every reading of the Ratio Loss; a variance on the log scale) or the rule used
    before (``PREVIOUS``)."""

    name: str
    quantified: bool
    log_variance: bool
    readings: tuple[str, ...] = field(default=READINGS)


QUANTIFIED = Rule("quantified", quantified=True, log_variance=True)
PREVIOUS = Rule("previous", quantified=False, log_variance=False, readings=("ratio",))


def paired_comparison(a: Values, b: Values | float, margin: float = 0.0, *, log: bool = False) -> Comparison:
    """``a - b - margin`` per seed on the seeds both hold (``b`` a constant: every seed of ``a``); ``log``: ``log a -
    log b`` (positive values: a variance). YES when the 95 % Student-t interval of its mean lies above 0, NO below, TIE
    when it holds 0, FEW on fewer than ``MIN_SEEDS`` seeds."""
    a = a.dropna()
    if isinstance(b, pd.Series):
        common = a.index.intersection(b.dropna().index)
        x, y = a.loc[common].to_numpy(float), b.loc[common].to_numpy(float)
    else:
        common, x, y = a.index, a.to_numpy(float), np.full(len(a), float(b))
    log = log and bool(len(x)) and bool((x > 0).all() and (y > 0).all())
    d = np.log(x) - np.log(y) if log else x - y - margin
    n, seeds, scale = len(d), tuple(int(s) for s in common), "log" if log else ""
    mean = float(d.mean()) if n else math.nan
    if n < MIN_SEEDS:
        return Comparison(FEW, mean, n, seeds=seeds, scale=scale)
    ci = paired_interval(d, CONFIDENCE)
    outcome = YES if ci.low > 0 else NO if ci.high < 0 else TIE
    return Comparison(outcome, ci.diff, n, ci.low, ci.high, ci.p, seeds, scale)


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


def quantified_verdict(comparisons: Sequence[Comparison], quantifier: str) -> tuple[str, str]:
    """(verdict, how it was reached) of a claim of ``quantifier`` over ``comparisons`` (``decide``)."""
    if not comparisons:
        return NO_DATA, ""
    n = len(comparisons)
    k = needed(quantifier, n)
    diff = np.array([c.diff for c in comparisons])
    p = np.array([c.p for c in comparisons])
    holds, fails = (bool(x) for x in decide(diff, p, k))
    f_for, f_against = n - k + 1, k
    n_for = int(((diff > 0) & (np.nan_to_num(p, nan=1.0) * f_for < ALPHA)).sum())
    n_against = int(((diff < 0) & (np.nan_to_num(p, nan=1.0) * f_against < ALPHA)).sum())

    def at(f: int) -> str:
        return "p < .05" if f == 1 else f"p × {f} < .05"

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


def _detail(d: Detail, adjust: int = 1) -> str:
    """'mnist B.: Ratio - ghmc +3.10 [+0.52, +5.68] (3 seeds, p .021, adjusted .042)' and the seeds' mark
    (``seedstats.seed_mark``); the adjusted p where the claim's rule multiplies it (``adjust`` > 1)."""
    c, m = d.comparison, d.metric
    label = d.label.replace(" - ", " / ", 1) if c.scale == "log" else d.label
    mark = seed_mark(d.label, c.seeds, c.seeds) if c.seeds else ""
    seeds = f"{c.n} seed{'' if c.n == 1 else 's'}"
    if c.n == 0:  # the two cells hold jobs, on no seed in common: nothing to compare
        return f"{label}: no seed in common"
    if c.outcome == FEW or math.isnan(c.low):
        return f"{label} {_shown(c.diff, m, c.scale)} ({seeds}){mark}"
    if c.low == c.high:
        return f"{label} {_shown(c.diff, m, c.scale)} on every seed ({seeds}){mark}"
    adjusted = f", adjusted {_p(min(1.0, c.p * adjust))}" if adjust > 1 else ""
    return (f"{label} {_shown(c.diff, m, c.scale)} [{_shown(c.low, m, c.scale)}, {_shown(c.high, m, c.scale)}] "
            f"({seeds}, p {_p(c.p)}{adjusted}){mark}")


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

    @property
    def sentence(self) -> Sentence:
        return PAPER[int(self.number.rstrip("r"))]


class _Claims:
    """The claims in the making: each added with its comparisons and evidence, numbered, judged under ``rule``."""

    def __init__(self, rule: Rule) -> None:
        self.rule, self.out, self.number = rule, [], 0

    def add(self, text: str, comparisons: Sequence[Comparison] = (), head: str = "", details: Sequence[Detail] = (),
            *, closest: int | None = None, reading: str = "", empty: str = "", verdict: str | None = None) -> None:
        """Claim number n (the next), or, for ``reading`` ``ratio_rel``, claim nr (the reading of the last one).
        ``text`` may hold '{cells}' (the quantifier's words); ``empty``: the evidence without a comparison (in place
        of ``head``);
        ``verdict``: one given (no data), not read from the comparisons."""
        if reading != "ratio_rel":
            self.number += 1
        number = f"{self.number}{'r' if reading == 'ratio_rel' else ''}"
        q = PAPER[self.number].quantifier
        if reading and reading not in self.rule.readings:
            self.out.append(Claim(text.format(cells=CELLS[q]), NOT_JUDGED, "", number, reading))
            return
        if self.rule.quantified:
            got, how = quantified_verdict(comparisons, q)
        else:
            got, how = previous_verdict(comparisons, self.number in PREVIOUS_MOST)
        if verdict is not None:
            got, how = verdict, ""
        evidence = _evidence(head, comparisons, details, closest, q if self.rule.quantified else None)
        if not comparisons and empty:
            evidence = empty
        self.out.append(Claim(text.format(cells=CELLS[q]), got, "; ".join(x for x in (evidence, how) if x), number,
                              reading, how, _tally(comparisons) if comparisons else ""))


def _evidence(head: str, comparisons: Sequence[Comparison], details: Sequence[Detail], closest: int | None,
              quantifier: str | None) -> str:
    """The head, the comparisons as printed (each p adjusted as the claim's quantifier adjusts it), then the tally. Of
    more than ``DETAILED`` comparisons, only the one against the closest rival (index ``closest``, if given) and the
    clear ones (at most ``DETAILED``)."""
    n = len(comparisons)

    def shown(d: Detail) -> str:
        return _detail(d, factor(quantifier, n, d.comparison.diff) if quantifier else 1)

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


def _best_count(spec: TableSpec, values: pd.DataFrame, seeds: pd.DataFrame, metric: str, row: str,
                name: str) -> tuple[int, list[Comparison], list[Detail]]:
    """(cells where ``row`` is ahead of the best other row on the seeds both hold, per (dataset, column) with ``row``
    and another row the comparison of ``row`` against the best other row by the table's mean, and each as printed)."""
    v = values[values.metric == metric]
    out, details = [], []
    for (d, column), col in v.groupby(["dataset", "column"], sort=False):
        have = col.dropna(subset=["mean"])
        if row in set(have["row"]) and len(have) > 1:
            others = have[have["row"] != row]
            rival = others.loc[others["mean"].idxmax(), "row"]
            out.append(paired_comparison(_series(seeds, metric=metric, dataset=d, column=column, row=row),
                                         _series(seeds, metric=metric, dataset=d, column=column, row=rival)))
            details.append(Detail(f"{d} {column}: {name} - {rival}", out[-1], metric))
    return sum(c.diff > 0 for c in out), out, details


def _chain(series: list[Values], increasing: bool = True) -> list[Comparison]:
    """Comparisons of each adjacent pair of ``series`` against the claimed order."""
    return [paired_comparison(b, a) if increasing else paired_comparison(a, b) for a, b in zip(series, series[1:])]


TABLE_CLAIMS = ("Res_3_datasets", "FL_FEMNIST", "Res_without_mismatch", "Sup_fe_dynamic", "Sup_data_MNIST",
                "Sup_data_CIFAR10", "Sup_data_Fer2013")
"""The tables of claims 1–14 (Ac.M, then AUC, each): the Ratio Loss has the best value in their cells."""


def claims(final: pd.DataFrame, rounds: pd.DataFrame, estimator: str = DEFAULT_ESTIMATOR,
           values: dict[str, pd.DataFrame] | None = None, rule: Rule = QUANTIFIED) -> list[Claim]:
    """Each headline claim of the paper with a verdict from the regenerated numbers under ``rule`` (module docstring),
    a claim about the Ratio Loss once for each reading the study ran in the families it reads (claim N: ``ratio``;
    Nr: ``ratio_rel``).

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

    out = _Claims(rule)
    for label in TABLE_CLAIMS:
        for metric in ("acm", "auc"):
            for reading in readings(label):
                v, s = read(label, reading)
                wins, comps, details = _best_count(TABLES[label], v, s, metric, "ratio", "Ratio")
                out.add(f"Ratio Loss has the best {PLAIN_METRIC[metric]} in {{cells}} of {label}", comps,
                        f"Ratio ahead of the best other loss in {wins}/{len(comps)} cells", details, reading=reading,
                        empty="no cell holds the Ratio Loss and another loss")
    for reading in readings("Sup_majority", "Sup_majority_femnist"):
        parts = [read(x, reading) for x in ("Sup_majority", "Sup_majority_femnist")]
        maj = pd.concat([v for v, _ in parts]).dropna(subset=["mean"])
        maj_seeds = pd.concat([s for _, s in parts])
        comps, details = [], []
        for (d, column), cell in maj.groupby(["dataset", "column"], sort=False):
            if {"ratio", "ce"} <= set(cell.row):
                r, c = (_series(maj_seeds, dataset=d, column=column, row=x) for x in ("ratio", "ce"))
                comps.append(paired_comparison(r, c, -1.0))
                details.append(Detail(f"{d} {column}: Ratio - CE + 1", comps[-1], "acc_majority"))
        out.add("Ratio Loss keeps the majority classes in {cells} (Ac. within 1 point of CE or better)", comps,
                f"Ratio within 1 point of CE or above in {sum(c.diff > 0 for c in comps)}/{len(comps)} cells", details,
                reading=reading, empty="no Sup_majority cells with both losses")
    _monitor_claims(out, rounds, estimator)
    _mismatch_claims(out, final)
    _sweep_claims(out, values, seeds, read, readings)
    return out.out


UNIFORM_ABOVE_TEXT = ("Monitor protocol (random selection): the uniform guess N/Q alone, with no monitor, also has mean CS "
                      "above 0.98 on every dataset, so the paper's bar does not tell the monitor from a guess")


def _monitor_claims(out: _Claims, rounds: pd.DataFrame, estimator: str) -> None:
    col, uni_col = cs_column(estimator), cs_column("uniform")
    sel = rounds[rounds.experiment == "monitor"]
    est = _seed_means(sel, ["dataset", "setting"], col) if col in sel.columns else {}
    uni = _seed_means(sel, ["dataset", "setting"], uni_col) if uni_col in sel.columns else {}
    above_text = f"Monitor: mean CS above 0.98 on every dataset (estimator {estimator})"
    beats_text = f"Monitor: estimator {estimator} beats the uniform guess on every dataset"
    if not est:
        for text in (above_text, beats_text, UNIFORM_ABOVE_TEXT):
            out.add(text, verdict=NO_DATA, empty="no monitor rounds with a CS")
    else:
        ev, above, beats = [], [], []
        for key, e in est.items():
            u = uni.get(key, pd.Series(dtype=float))
            ev.append(_means(key[0], [(estimator, e), ("uniform", u)], "cs", " vs ") if len(u)
                      else f"{key[0]}: {estimator} {fmt(_mean(e), 'cs')}")
            above.append(paired_comparison(e, 0.98))
            if len(u):
                beats.append(paired_comparison(e, u))
        out.add(above_text, above, "; ".join(ev))
        out.add(beats_text, beats, "; ".join(ev))
        guess = [paired_comparison(u, 0.98) for u in uni.values()]
        out.add(UNIFORM_ABOVE_TEXT, guess, "; ".join(f"{k[0]}: uniform {fmt(_mean(u), 'cs')}" for k, u in uni.items()))
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
    acm = _seed_means(sel, ["dataset", "loss", "setting"], "acc_minority", 100.0)
    levels: dict[tuple[str, str], list[tuple[int, Values]]] = {}
    for (d, loss, s), v in acm.items():
        levels.setdefault((d, loss), []).append((int(setting_value(s, "c")), v))
    comps, ev = [], []
    for (d, loss), lv in sorted(levels.items()):
        lv.sort(key=lambda x: -x[0])
        if len(lv) > 1:
            chain = _chain([v for _, v in lv], increasing=False)
            comps += chain
            ev.append(f"{d}/{loss}: {'yes' if all(c.diff >= 0 for c in chain) else 'no'}")
    n_mono = sum(1 for e in ev if e.endswith("yes"))
    out.add("Larger mismatch hurts all losses: Ac.M falls as classes per client fall (Gamma = 10)", comps,
            "; ".join([f"{n_mono}/{len(ev)} (dataset, loss) monotone (each step on the seeds both levels hold)"] + ev))
    by_level: dict[tuple[str, int], dict[str, Values]] = {}
    for (d, loss, s), v in acm.items():
        by_level.setdefault((d, int(setting_value(s, "c"))), {})[loss] = v
    for reading in ["ratio"] + [r for r in READINGS[1:] if any(r in x for x in by_level.values())]:
        comps, details = [], []
        for (d, c), losses in sorted(by_level.items(), key=lambda kv: (kv[0][0], -kv[0][1])):
            others = {k: v for k, v in losses.items() if k not in READINGS}
            if reading in losses and others:
                mine = losses[reading]
                common = {k: v.loc[v.index.intersection(mine.index)] for k, v in others.items()}
                rival = max(common, key=lambda k: _mean(common[k]) if len(common[k]) else -math.inf)
                comps.append(paired_comparison(mine, others[rival]))
                details.append(Detail(f"{c} classes per client: Ratio - {rival}", comps[-1], "acm"))
        out.add("Ratio Loss has the best Ac.M at every mismatch level (Res_mismatch, Gamma = 10)", comps,
                f"Ratio ahead of the best other loss in {sum(x.diff > 0 for x in comps)}/{len(comps)} levels "
                "(dataset, classes per client)", details, reading=reading)


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
    out.add("Early acknowledgment helps: Ac.M S. > M. > E.", comps, "; ".join(ev), details, empty="no early jobs")
    for label, best, metric in SWEEPS:
        spec = TABLES[label]
        for reading in (readings(label) if any(c.loss == "ratio" for c in spec.cells) else [""]):
            table, per_seed = read(label, reading or "ratio")
            t = table[table.metric == metric].dropna(subset=["mean"])
            bold = bold_mask(spec, table)
            winners = list(table.loc[bold[bold].index].query("metric == @metric")["column"])
            comps, details, closest = [], [], None
            log = metric == "cs_var" and out.rule.log_variance
            if best in set(t.column):
                mine = _series(per_seed, metric=metric, column=best)
                others = t[t.column != best]
                if not others.empty:
                    rival = others.loc[others["mean"].idxmin() if metric == "cs_var" else others["mean"].idxmax(), "column"]
                    closest = list(others.column).index(rival)
                for column in others.column:
                    other = _series(per_seed, metric=metric, column=column)
                    comp = paired_comparison(other, mine, log=log) if metric == "cs_var" else paired_comparison(mine, other)
                    comps.append(comp)
                    pair = f"{column} - {best}" if metric == "cs_var" else f"{best} - {column}"
                    details.append(Detail(pair, comp, metric))
            where = f" (estimator {spec.estimator})" if spec.estimator else ""
            out.add(f"{label}: {best} gives the best {PLAIN_METRIC[metric]}{where}", comps,
                    f"best: {', '.join(winners) or '--'}; {_coverage(table, metric, t)} values run", details,
                    closest=closest, reading=reading,
                    verdict=NO_DATA if t.empty or best not in set(t.column) else None)
    v = values["Sup_MFE"]
    acm = v[(v.metric == "acm")].dropna(subset=["mean"])
    comps = []
    for (d, c), sub in acm.groupby(["dataset", "column"]):
        if {"mse", "mfe"} <= set(sub.row):
            mse, mfe = (_series(seeds["Sup_MFE"], metric="acm", dataset=d, column=c, row=x) for x in ("mse", "mfe"))
            comps.append(paired_comparison(mse, mfe))
    out.add("MFE with local knowledge is no better than MSE in {cells} (Sup_MFE Ac.M)", comps,
            f"MFE <= MSE in {sum(x.diff >= 0 for x in comps)}/{len(comps)} cells (on the seeds both hold); "
            f"{_coverage(v, 'acm', acm, both=('mse', 'mfe'))} cells run")


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
    "for *all*, each at 95 % with no correction, and a refutation by one comparison at p × n; docs/design.md)."
)
"""The verdict rule, in the words of the claims header (``decide``)."""


def rule_changes(final: pd.DataFrame, rounds: pd.DataFrame, estimator: str = DEFAULT_ESTIMATOR) -> list[dict[str, str]]:
    """Every claim's verdict under the rule used before (``PREVIOUS``) and this project's (``QUANTIFIED``), with why
    a changed verdict changed (how each rule read the comparisons, and the evidence now)."""
    old = {c.number: c for c in claims(final, rounds, estimator, rule=PREVIOUS)}
    rows = []
    for b in claims(final, rounds, estimator, rule=QUANTIFIED):
        a = old[b.number]
        why = "" if a.verdict == b.verdict else (
            f"the previous rule did not judge the {READING_NAME.get(b.reading, b.reading)} — now: {b.tally}; {b.how}"
            if a.verdict == NOT_JUDGED else f"before: {a.how} — now: {b.evidence}")
        rows.append({"number": b.number, "text": b.text, "reading": b.reading, "before": a.verdict, "after": b.verdict,
                     "why": why})
    return rows


def write_claims(final: pd.DataFrame, rounds: pd.DataFrame, path: str | Path, *, estimator: str = DEFAULT_ESTIMATOR,
                 values: dict[str, pd.DataFrame] | None = None, templates: str | Path | None = None) -> Path:
    """Write ``claims.md`` (every claim, its verdict and evidence, then the paper's sentence each tests) at ``path``."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    made = claims(final, rounds, estimator, values)
    p.write_text(environment(templates).get_template("claims.md.j2").render(
        claims=made, estimator=estimator, rule=RULE_TEXT, reading_name=READING_NAME, sentences=_sentences(made),
        sweep_estimators=sorted({TABLES[label].estimator for label, _, _ in SWEEPS if TABLES[label].estimator})))
    return p


def _sentences(made: Sequence[Claim]) -> list[tuple[str, Sentence]]:
    """The paper's sentence of each claim, claims in a row that test one sentence together ("1–4")."""
    numbers = sorted({int(c.number.rstrip("r")) for c in made})
    runs: list[list[int]] = []
    for n in numbers:
        if runs and PAPER[runs[-1][-1]] is PAPER[n] and runs[-1][-1] == n - 1:
            runs[-1].append(n)
        else:
            runs.append([n])
    return [(f"{r[0]}–{r[-1]}" if len(r) > 2 else ", ".join(map(str, r)), PAPER[r[0]]) for r in runs]


def write_rule_changes(final: pd.DataFrame, rounds: pd.DataFrame, path: str | Path, *,
                       estimator: str = DEFAULT_ESTIMATOR) -> Path:
    """Write the before/after table of every claim's verdict (``rule_changes``) as Markdown at ``path``."""
    rows = rule_changes(final, rounds, estimator)
    lines = ["| # | Claim | reading | before (previous rule) | after (the paper's quantifier, k of n) | why it changed |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {r['number']} | {r['text']} | {READING_NAME.get(r['reading'], '–')} | {r['before']} | **{r['after']}** "
              f"| {r['why'] or '–'} |" for r in rows]
    changed = sum(r["before"] != r["after"] for r in rows)
    new = sum(r["before"] == NOT_JUDGED for r in rows)
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(f"{changed} of {len(rows)} verdicts change ({new} of them claims on the released reading, which the "
                 "previous rule did not judge).\n\n" + "\n".join(lines) + "\n")
    return p
