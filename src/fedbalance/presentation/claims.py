"""The paper's headline claims, each with a verdict from the regenerated numbers, and the claims.md writer.

A verdict rests on comparisons (a loss against the best other one, a setting against the next, a value against a
threshold). Under the rule of this project (``PAIRED``) each comparison is made on the seeds both sides hold, paired
by seed (a seed fixes the partition, the client selection, the initial model and the auxiliary data of every loss
and setting: ``fl.derive_seed``), and is *clear* when the Student-t 95 % interval of the mean per-seed difference
excludes zero (``scipy.stats.ttest_1samp``); fewer than ``MIN_SEEDS`` common seeds leave it undecided. A claim holds
when every comparison it needs is clear for it (each at 95 %; all must pass, so no correction is needed), and is
refuted only by a comparison against it that stays clear after Holm's correction over the claim's comparisons
(family-wise 5 %). ``SPREAD`` is the rule this project used before (a gap larger than the larger standard deviation
over all seeds of the two sides): kept to set the two side by side once (``rule_changes``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from fedbalance.presentation.names import PLAIN_METRIC, Read, gamma_setting
from fedbalance.presentation.tables import (
    TABLES, TableSpec, bold_mask, cell_seed_values, cell_values, environment, fmt, fmt_diff,
)
from fedbalance.records import DEFAULT_ESTIMATOR, cs_column, setting_value
from fedbalance.seedstats import CONFIDENCE, MIN_SEEDS, paired_interval

READS: tuple[Read, ...] = (
    Read("monitor", by="claims"), Read("losses", loss="ratio", by="claims"),
    Read("clients_cifar10", by="claims"), Read("clients_femnist", by="claims"),
    Read("batch_size", by="claims"), Read("local_epochs", by="claims"),
    Read("mismatch", by="claims"), Read("mismatch_fer2013", by="claims"),
)
"""The jobs the claims read beyond the tables' cells (``fedbalance.presentation.contract``)."""


@dataclass(frozen=True)
class Claim:
    """A headline claim of the paper and its verdict on our numbers."""

    text: str
    verdict: str
    evidence: str


HOLDS, FAILS, NO_DATA = "holds", "does not hold", "not enough data"
FEW_SEEDS, INDISTINCT = "too few seeds", "not distinguishable"
VERDICTS = (HOLDS, FAILS, INDISTINCT, FEW_SEEDS, NO_DATA)
# Outcome of one comparison a verdict rests on: clear for the claim (YES), clear against it (NO), not clear (TIE),
# or too few seeds to judge (FEW).
YES, NO, TIE, FEW = "yes", "no", "tie", "few"
DETAILED = 5
"""A claim resting on at most this many comparisons lists each with its interval in the evidence (5: a dataset's
column of Res_3_datasets, Γ = 1 to 100); of more, the closest rival's and at most this many clear ones."""


@dataclass(frozen=True)
class Comparison:
    """One comparison of ``a`` against ``b`` (minus a margin): its outcome, the mean difference ``diff`` on the seeds
    compared (``n``; paired: the common seeds), its 95 % interval (``low``, ``high``; NaN when not computed) and the
    two-sided p-value of the paired t-test (NaN when not computed)."""

    outcome: str
    diff: float
    n: int
    low: float = math.nan
    high: float = math.nan
    p: float = math.nan


Values = pd.Series
"""A value per seed (index: seed), or a constant threshold as a float."""


@dataclass(frozen=True)
class Rule:
    """How a comparison is decided and a verdict read: ``paired`` (this project's rule: paired by seed on the common
    seeds, 95 % t interval, Holm on refutations) or the rule used before (``spread``)."""

    name: str
    compare: Callable[[Values, Values | float, float], Comparison]
    holm: bool
    shared_seeds: bool


def paired_comparison(a: Values, b: Values | float, margin: float = 0.0) -> Comparison:
    """``a - b - margin`` per seed on the seeds both hold (``b`` a constant: every seed of ``a``): YES when the 95 %
    Student-t interval of its mean lies above 0, NO below, TIE when it holds 0, FEW on fewer than ``MIN_SEEDS`` seeds."""
    a = a.dropna()
    if isinstance(b, pd.Series):
        common = a.index.intersection(b.dropna().index)
        d = (a.loc[common] - b.loc[common] - margin).to_numpy(float)
    else:
        d = a.to_numpy(float) - float(b) - margin
    n = len(d)
    mean = float(d.mean()) if n else math.nan
    if n < MIN_SEEDS:
        return Comparison(FEW, mean, n)
    ci = paired_interval(d, CONFIDENCE)
    outcome = YES if ci.low > 0 else NO if ci.high < 0 else TIE
    return Comparison(outcome, ci.diff, n, ci.low, ci.high, ci.p)


def spread_comparison(a: Values, b: Values | float, margin: float = 0.0) -> Comparison:
    """The rule used before: the means over every seed each side holds; YES / NO when the gap exceeds the larger
    standard deviation over seeds of the two, TIE when not, FEW when a side has fewer than 2 seeds."""
    a = a.dropna()
    const = not isinstance(b, pd.Series)
    b_mean = float(b) if const else float(b.dropna().mean())
    b_std = 0.0 if const else float(b.dropna().std())
    n = len(a) if const else min(len(a), len(b.dropna()))
    gap = float(a.mean()) - b_mean - margin if len(a) else math.nan
    if n < 2:
        return Comparison(FEW, gap, n)
    spread = max(*(s if math.isfinite(s) else 0.0 for s in (float(a.std()), b_std)))
    return Comparison(TIE if abs(gap) <= spread else (YES if gap > 0 else NO), gap, n)


PAIRED = Rule("paired", paired_comparison, holm=True, shared_seeds=True)
SPREAD = Rule("spread", spread_comparison, holm=False, shared_seeds=False)


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


def against(comparisons: Sequence[Comparison], rule: Rule) -> list[bool]:
    """Which comparisons count as clear against the claim: NO, and (``rule.holm``) still clear after Holm's correction
    over all of them."""
    if not rule.holm:
        return [c.outcome == NO for c in comparisons]
    adjusted = holm([c.p for c in comparisons])
    return [c.outcome == NO and adjusted[i] < 1 - CONFIDENCE for i, c in enumerate(comparisons)]


def _undecided(comparisons: Sequence[Comparison]) -> str:
    return FEW_SEEDS if any(c.outcome == FEW for c in comparisons) else INDISTINCT


def _all(comparisons: Sequence[Comparison], rule: Rule) -> str:
    """Verdict of a claim that needs every comparison: refuted by one clear against it; holds when all are clear for."""
    if not comparisons:
        return NO_DATA
    if any(against(comparisons, rule)):
        return FAILS
    return HOLDS if all(c.outcome == YES for c in comparisons) else _undecided(comparisons)


def _most(comparisons: Sequence[Comparison], rule: Rule) -> str:
    """Verdict of a claim about most comparisons: holds when the clear ones for it are a majority, fails when those
    clear against it leave no majority possible, else undecided."""
    if not comparisons:
        return NO_DATA
    if 2 * sum(c.outcome == YES for c in comparisons) > len(comparisons):
        return HOLDS
    if 2 * sum(against(comparisons, rule)) >= len(comparisons):
        return FAILS
    return _undecided(comparisons)


def _tally(comparisons: Sequence[Comparison], rule: Rule) -> str:
    """'k clear for, j clear against, t not clear, f on < 3 common seeds' (zero counts left out)."""
    no = against(comparisons, rule)
    few = MIN_SEEDS if rule.shared_seeds else 2
    parts = [(sum(c.outcome == YES for c in comparisons), "clear for"), (sum(no), "clear against"),
             (sum(c.outcome in (TIE, NO) and not x for c, x in zip(comparisons, no)), "not clear"),
             (sum(c.outcome == FEW for c in comparisons), f"on < {few} {'common ' if rule.shared_seeds else ''}seeds")]
    return ", ".join(f"{k} {what}" for k, what in parts if k) or "no comparison"


def _detail(label: str, c: Comparison, metric: str, rule: Rule) -> str:
    """One comparison as the evidence prints it: 'Ratio - GHM-C +3.10 [+0.52, +5.68] (3 seeds)'."""
    if not rule.shared_seeds or c.outcome == FEW or math.isnan(c.low):
        return f"{label} {fmt_diff(c.diff, metric)} ({c.n} seed{'' if c.n == 1 else 's'})"
    return f"{label} {fmt_diff(c.diff, metric)} [{fmt_diff(c.low, metric)}, {fmt_diff(c.high, metric)}] ({c.n} seeds)"


def _evidence(head: str, comparisons: Sequence[Comparison], rule: Rule, details: Sequence[str] = (),
              closest: int | None = None) -> str:
    """The head, the comparisons as printed, then the tally. Of more than ``DETAILED`` comparisons, only the one
    against the closest rival (index ``closest``, if given) and the clear ones (at most ``DETAILED``)."""
    parts = [head] if head else []
    if comparisons and details and len(comparisons) <= DETAILED:
        parts.append("; ".join(details))
    elif comparisons and details:
        if closest is not None:
            parts.append(f"closest: {details[closest]}")
        no = against(comparisons, rule)
        clear = [d for i, (c, x, d) in enumerate(zip(comparisons, no, details))
                 if (c.outcome == YES or x) and i != closest]
        if clear:
            more = f"; {len(clear) - DETAILED} more" if len(clear) > DETAILED else ""
            parts.append("clear: " + "; ".join(clear[:DETAILED]) + more)
    if comparisons:
        parts.append(_tally(comparisons, rule))
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


def _mean(v: Values) -> float:
    return float(v.mean()) if len(v) else math.nan


def _best_count(spec: TableSpec, values: pd.DataFrame, seeds: pd.DataFrame, metric: str, row: str,
                rule: Rule) -> tuple[int, int, list[Comparison], list[str]]:
    """(columns where ``row`` is bold, columns where ``row`` and another row have data, per column the comparison of
    ``row`` against the best other row by mean, and each comparison as the evidence prints it)."""
    v = values[values.metric == metric].copy()
    v["bold"] = bold_mask(spec, values)[v.index]
    best = total = 0
    out, details = [], []
    for (d, column), col in v.groupby(["dataset", "column"], sort=False):
        have = col.dropna(subset=["mean"])
        if row in set(have["row"]) and len(have) > 1:
            total += 1
            best += int(have[have["row"] == row].iloc[0]["bold"])
            others = have[have["row"] != row]
            rival = others.loc[others["mean"].idxmax(), "row"]
            out.append(rule.compare(_series(seeds, metric=metric, dataset=d, column=column, row=row),
                                    _series(seeds, metric=metric, dataset=d, column=column, row=rival), 0.0))
            details.append(_detail(f"{d} {column}: {row.capitalize()} - {rival}", out[-1], metric, rule))
    return best, total, out, details


def _chain(series: list[Values], rule: Rule, increasing: bool = True) -> list[Comparison]:
    """Comparisons of each adjacent pair of ``series`` against the claimed order."""
    return [rule.compare(b, a, 0.0) if increasing else rule.compare(a, b, 0.0) for a, b in zip(series, series[1:])]


def claims(final: pd.DataFrame, rounds: pd.DataFrame, estimator: str = DEFAULT_ESTIMATOR,
           values: dict[str, pd.DataFrame] | None = None, rule: Rule = PAIRED) -> list[Claim]:
    """Each headline claim of the paper with a verdict from the regenerated numbers under ``rule`` (module docstring).

    The evidence says how many comparisons were clear for and against, and, for a claim of a few comparisons, each
    one's mean difference with its 95 % interval and the number of common seeds.
    """
    if values is None or not rule.shared_seeds:
        values = {k: cell_values(s, final, rounds, estimator, shared=rule.shared_seeds) for k, s in TABLES.items()}
    seeds = {k: cell_seed_values(s, final, rounds, estimator, shared=rule.shared_seeds) for k, s in TABLES.items()}
    out: list[Claim] = []
    for label in ("Res_3_datasets", "FL_FEMNIST", "Res_without_mismatch", "Sup_fe_dynamic",
                  "Sup_data_MNIST", "Sup_data_CIFAR10", "Sup_data_Fer2013"):
        for metric in ("acm", "auc"):
            best, total, comps, details = _best_count(TABLES[label], values[label], seeds[label], metric, "ratio", rule)
            out.append(Claim(f"Ratio Loss has the best {PLAIN_METRIC[metric]} in most cells of {label}",
                             _most(comps, rule), _evidence(f"Ratio best (bold) in {best}/{total} cells", comps, rule, details)
                             if total else "no cell holds the Ratio Loss and another loss"))
    text = "Ratio Loss does not sacrifice the majority classes (Ac. within 1 point of CE or better)"
    maj = pd.concat([values["Sup_majority"], values["Sup_majority_femnist"]]).dropna(subset=["mean"])
    maj_seeds = pd.concat([seeds["Sup_majority"], seeds["Sup_majority_femnist"]])
    comps, ok, details = [], 0, []
    for (d, column), cell in maj.groupby(["dataset", "column"], sort=False):
        if {"ratio", "ce"} <= set(cell.row):
            r, c = (_series(maj_seeds, dataset=d, column=column, row=x) for x in ("ratio", "ce"))
            ok += int(_mean(r) >= _mean(c) - 1.0)
            comps.append(rule.compare(r, c, -1.0))
            details.append(_detail(f"{d} {column}: Ratio - CE + 1", comps[-1], "acc_majority", rule))
    out.append(Claim(text, _most(comps, rule),
                     _evidence(f"Ratio within 1 point of CE or above in {ok}/{len(comps)} cells", comps, rule, details)
                     if comps else "no Sup_majority cells with both losses"))
    out += _monitor_claims(rounds, estimator, rule)
    out += _mismatch_claims(final, rule)
    out += _sweep_claims(values, seeds, rule)
    return out


UNIFORM_ABOVE_TEXT = ("Monitor protocol (random selection): the uniform guess N/Q alone, with no monitor, also has mean CS "
                      "above 0.98 on every dataset, so the paper's bar does not tell the monitor from a guess")


def _monitor_claims(rounds: pd.DataFrame, estimator: str, rule: Rule) -> list[Claim]:
    out = []
    col, uni_col = cs_column(estimator), cs_column("uniform")
    sel = rounds[rounds.experiment == "monitor"]
    est = _seed_means(sel, ["dataset", "setting"], col) if col in sel.columns else {}
    uni = _seed_means(sel, ["dataset", "setting"], uni_col) if uni_col in sel.columns else {}
    above_text = f"Monitor: mean CS above 0.98 on every dataset (estimator {estimator})"
    beats_text = f"Monitor: estimator {estimator} beats the uniform guess on every dataset"
    if not est:
        out += [Claim(above_text, NO_DATA, "no monitor rounds with a CS"),
                Claim(beats_text, NO_DATA, "no monitor rounds with a CS"),
                Claim(UNIFORM_ABOVE_TEXT, NO_DATA, "no monitor rounds with a CS")]
    else:
        ev, above, beats = [], [], []
        for key, e in est.items():
            u = uni.get(key, pd.Series(dtype=float))
            ev.append(f"{key[0]}: {estimator} {fmt(_mean(e), 'cs')} vs uniform {fmt(_mean(u), 'cs')}")
            above.append(rule.compare(e, 0.98, 0.0))
            if len(u):
                beats.append(rule.compare(e, u, 0.0))
        out.append(Claim(above_text, _all(above, rule), "; ".join(ev + [_tally(above, rule)])))
        out.append(Claim(beats_text, _all(beats, rule), "; ".join(ev + [_tally(beats, rule)])))
        guess = [rule.compare(u, 0.98, 0.0) for u in uni.values()]
        out.append(Claim(UNIFORM_ABOVE_TEXT, _all(guess, rule),
                         "; ".join([f"{k[0]}: uniform {fmt(_mean(u), 'cs')}" for k, u in uni.items()]
                                   + [_tally(guess, rule)])))
    imb = rounds[(rounds.experiment == "losses") & (rounds.loss == "ratio") & (rounds.setting != gamma_setting(1))]
    text = f"Monitor under imbalance (Gamma >= 10): {estimator} beats the uniform guess"
    if col in imb.columns and not imb.dropna(subset=[col, uni_col]).empty:
        both = imb.dropna(subset=[col, uni_col])
        e, u = (_seed_means(both, ["dataset", "setting"], c) for c in (col, uni_col))
        comps = [rule.compare(e[k], u[k], 0.0) for k in e if k in u]
        wins = sum(_mean(e[k]) > _mean(u[k]) for k in e if k in u)
        out.append(Claim(text, _all(comps, rule), f"{estimator} above the guess in {wins}/{len(comps)} (dataset, Gamma) settings; {_tally(comps, rule)}"))
    else:
        out.append(Claim(text, NO_DATA, "no Ratio-Loss rounds of the losses experiment with a CS"))
    for exp in ("clients_cifar10", "clients_femnist"):
        sub_rounds = rounds[rounds.experiment == exp]
        cs = _seed_means(sub_rounds, ["dataset", "setting"], col) if col in sub_rounds.columns else {}
        comps, ev = [], []
        for d in sorted({k[0] for k in cs}):
            ks = sorted((int(setting_value(s, "k")), cs[(dd, s)]) for dd, s in cs if dd == d)
            comps += _chain([v for _, v in ks], rule, increasing=True)
            ev.append(f"{d}: " + ", ".join(f"k={k} {fmt(_mean(v), 'cs')}" for k, v in ks))
        out.append(Claim(f"More selected clients bring the CS closer to 1 ({exp}, estimator {estimator})",
                         _all(comps, rule), "; ".join(ev + [_tally(comps, rule)]) if ev else "no rounds"))
    for exp in ("batch_size", "local_epochs"):
        sub_rounds = rounds[rounds.experiment == exp]
        cs = _seed_means(sub_rounds, ["dataset", "setting"], col) if col in sub_rounds.columns else {}
        comps, ev = [], []
        for d in sorted({k[0] for k in cs}):
            per_setting = pd.DataFrame({s: v for (dd, s), v in cs.items() if dd == d})
            if per_setting.shape[1] > 1:
                span = per_setting.max(axis=1) - per_setting.min(axis=1)  # per seed, over the settings it holds all of
                if rule.shared_seeds:
                    span = span[per_setting.notna().all(axis=1)]
                comps.append(rule.compare(-span, -0.01, 0.0))
                ev.append(f"{d}: range {float(per_setting.mean().max() - per_setting.mean().min()):.4f}")
        out.append(Claim(f"{exp.replace('_', ' ').capitalize()} has little impact on the monitor (CS range < 0.01, "
                         f"estimator {estimator})", _all(comps, rule),
                         "; ".join(ev + [_tally(comps, rule)]) if ev else "no rounds"))
    return out


def _mismatch_claims(final: pd.DataFrame, rule: Rule) -> list[Claim]:
    out = []
    sel = final[final.experiment.isin(["mismatch", "mismatch_fer2013"]) & final.setting.map(lambda s: setting_value(s, "g") == 10)]
    acm = _seed_means(sel, ["dataset", "loss", "setting"], "acc_minority", 100.0)
    levels: dict[tuple[str, str], list[tuple[int, Values]]] = {}
    for (d, loss, s), v in acm.items():
        levels.setdefault((d, loss), []).append((int(setting_value(s, "c")), v))
    comps, ev = [], []
    for (d, loss), lv in sorted(levels.items()):
        lv.sort(key=lambda x: -x[0])
        if len(lv) > 1:
            comps += _chain([v for _, v in lv], rule, increasing=False)
            means = [_mean(v) for _, v in lv]
            ev.append(f"{d}/{loss}: {'yes' if all(b <= a for a, b in zip(means, means[1:])) else 'no'}")
    n_mono = sum(1 for e in ev if e.endswith("yes"))
    out.append(Claim("Larger mismatch hurts all losses: Ac.M falls as classes per client fall (Gamma = 10)",
                     _all(comps, rule), "; ".join([f"{n_mono}/{len(ev)} (dataset, loss) monotone"] + ev
                                                   + [_tally(comps, rule)])))
    comps, details, wins = [], [], 0
    by_level: dict[tuple[str, int], dict[str, Values]] = {}
    for (d, loss, s), v in acm.items():
        by_level.setdefault((d, int(setting_value(s, "c"))), {})[loss] = v
    for (d, c), losses in sorted(by_level.items(), key=lambda kv: (kv[0][0], -kv[0][1])):
        if "ratio" in losses and len(losses) > 1:
            mine = losses["ratio"]
            others = {k: v for k, v in losses.items() if k != "ratio"}
            common = {k: v.loc[v.index.intersection(mine.index)] for k, v in others.items()} if rule.shared_seeds \
                else others
            rival = max(common, key=lambda k: _mean(common[k]) if len(common[k]) else -math.inf)
            wins += int(_mean(mine) >= max(_mean(v) for v in others.values()))
            comp = rule.compare(mine, others[rival], 0.0)
            comps.append(comp)
            details.append(_detail(f"{c} classes per client: Ratio - {rival}", comp, "acm", rule))
    out.append(Claim("Ratio Loss has the best Ac.M at every mismatch level (Res_mismatch, Gamma = 10)",
                     _all(comps, rule), _evidence(f"Ratio best in {wins}/{len(comps)} levels (dataset, classes per client)", comps, rule,
                                                  details)))
    return out


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


def _sweep_claims(values: dict[str, pd.DataFrame], seeds: dict[str, pd.DataFrame], rule: Rule) -> list[Claim]:
    out = []
    v = values["Importance_early"]
    acm = v[v.metric == "acm"].dropna(subset=["mean"])
    comps, ev, details = [], [], []
    for d, sub in acm.groupby("dataset", sort=False):
        order = [s for s in ("S", "M", "E") if s in set(sub.row)]
        series = [_series(seeds["Importance_early"], metric="acm", dataset=d, row=s) for s in order]
        if len(series) > 1:
            chain = _chain(series, rule, increasing=False)
            comps += chain
            details += [_detail(f"{a} - {b}", c, "acm", rule) for a, b, c in zip(order, order[1:], chain)]
            ev.append(f"{d}: " + " > ".join(f"{s} {fmt(float(sub[sub.row == s]['mean'].iloc[0]), 'acm')}" for s in order))
    out.append(Claim("Early acknowledgment helps: Ac.M S. > M. > E.", _all(comps, rule),
                     _evidence("; ".join(ev), comps, rule, details) if ev else "no early jobs"))
    for label, best, metric in SWEEPS:
        spec = TABLES[label]
        t = values[label]
        t = t[t.metric == metric].dropna(subset=["mean"])
        bold = bold_mask(spec, values[label])
        winners = list(values[label].loc[bold[bold].index].query("metric == @metric")["column"])
        comps, details, closest = [], [], None
        if best in set(t.column):
            mine = _series(seeds[label], metric=metric, column=best)
            others = t[t.column != best]
            if not others.empty:
                rival = others.loc[others["mean"].idxmin() if metric == "cs_var" else others["mean"].idxmax(), "column"]
                closest = list(others.column).index(rival)
            for column in others.column:
                other = _series(seeds[label], metric=metric, column=column)
                comp = rule.compare(other, mine, 0.0) if metric == "cs_var" else rule.compare(mine, other, 0.0)
                comps.append(comp)
                pair = f"{column} - {best}" if metric == "cs_var" else f"{best} - {column}"
                details.append(_detail(pair, comp, metric, rule))
        verdict = NO_DATA if t.empty or best not in set(t.column) else _all(comps, rule)
        where = f" (estimator {spec.estimator})" if spec.estimator else ""
        out.append(Claim(f"{label}: {best} gives the best {PLAIN_METRIC[metric]}{where}", verdict,
                         _evidence(f"best: {', '.join(winners) or '--'}; {_coverage(values[label], metric, t)} values run",
                                   comps, rule, details, closest)))
    v = values["Sup_MFE"]
    acm = v[(v.metric == "acm")].dropna(subset=["mean"])
    worse, comps = 0, []
    for (d, c), sub in acm.groupby(["dataset", "column"]):
        if {"mse", "mfe"} <= set(sub.row):
            mse, mfe = (_series(seeds["Sup_MFE"], metric="acm", dataset=d, column=c, row=x) for x in ("mse", "mfe"))
            worse += int(_mean(mfe) <= _mean(mse))
            comps.append(rule.compare(mse, mfe, 0.0))
    out.append(Claim("MFE with local knowledge is no better than MSE (Sup_MFE Ac.M)", _most(comps, rule),
                     f"MFE <= MSE in {worse}/{len(comps)} cells; {_coverage(v, 'acm', acm, both=('mse', 'mfe'))} "
                     "cells run" + (f"; {_tally(comps, rule)}" if comps else "")))
    return out


RULE_TEXT = (
    "Each comparison is made on the seeds both sides hold, paired by seed (one seed gives every loss and setting the "
    "same partition, client selection, initial model and auxiliary data), and is *clear* when the 95 % interval of "
    f"the mean per-seed difference (Student t) excludes zero; it needs {MIN_SEEDS} common seeds. A claim holds when "
    "every comparison it needs is clear for it (each at 95 %: all must pass, so no correction is needed); it is "
    "refuted only by a comparison against it that stays clear after Holm's correction over the claim's comparisons "
    "(family-wise 5 %)."
)
"""What "clear" means, in the words of the claims header."""


def rule_changes(final: pd.DataFrame, rounds: pd.DataFrame, estimator: str = DEFAULT_ESTIMATOR) -> list[dict[str, str]]:
    """Every claim's verdict under the rule used before (``SPREAD``: all seeds, the larger std) and this project's
    (``PAIRED``), with why a changed verdict changed (the tallies of both)."""
    old, new = claims(final, rounds, estimator, rule=SPREAD), claims(final, rounds, estimator, rule=PAIRED)
    rows = []
    for i, (a, b) in enumerate(zip(old, new, strict=True), start=1):
        rows.append({"number": str(i), "text": b.text, "before": a.verdict, "after": b.verdict,
                     "why": "" if a.verdict == b.verdict else f"before: {a.evidence} — now: {b.evidence}"})
    return rows


def write_claims(final: pd.DataFrame, rounds: pd.DataFrame, path: str | Path, *, estimator: str = DEFAULT_ESTIMATOR,
                 values: dict[str, pd.DataFrame] | None = None, templates: str | Path | None = None) -> Path:
    """Write ``claims.md`` (every claim, its verdict and evidence) at ``path``."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(environment(templates).get_template("claims.md.j2").render(
        claims=claims(final, rounds, estimator, values), estimator=estimator, rule=RULE_TEXT,
        sweep_estimators=sorted({TABLES[label].estimator for label, _, _ in SWEEPS if TABLES[label].estimator})))
    return p


def write_rule_changes(final: pd.DataFrame, rounds: pd.DataFrame, path: str | Path, *,
                       estimator: str = DEFAULT_ESTIMATOR) -> Path:
    """Write the before/after table of every claim's verdict (``rule_changes``) as Markdown at ``path``."""
    rows = rule_changes(final, rounds, estimator)
    lines = ["| # | Claim | before (spread) | after (paired 95 %) | why it changed |", "|---|---|---|---|---|"]
    lines += [f"| {r['number']} | {r['text']} | {r['before']} | **{r['after']}** | {r['why'] or '–'} |" for r in rows]
    changed = sum(r["before"] != r["after"] for r in rows)
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(f"{changed} of {len(rows)} verdicts change.\n\n" + "\n".join(lines) + "\n")
    return p
