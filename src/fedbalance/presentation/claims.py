"""The paper's headline claims, each with a verdict from the regenerated numbers, and the claims.md writer."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from fedbalance.presentation.names import PLAIN_METRIC, Read, gamma_setting
from fedbalance.presentation.tables import TABLES, TableSpec, bold_mask, cell_values, environment, fmt
from fedbalance.records import DEFAULT_ESTIMATOR, cs_column, setting_value

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
# Outcome of one comparison a verdict rests on: the claim's side wins by more than the seeds' spread (YES),
# the other side does (NO), the gap is within the spread (TIE), or a side has fewer than 2 seeds (FEW).
YES, NO, TIE, FEW = "yes", "no", "tie", "few"


@dataclass(frozen=True)
class Stat:
    """A value as a mean over seeds, its standard deviation over seeds and the number of seeds."""

    mean: float
    std: float = 0.0
    n: int = 0

    @staticmethod
    def const(value: float) -> Stat:
        """A fixed threshold: no spread, as many 'seeds' as needed."""
        return Stat(float(value), 0.0, 10**9)


def _compare(a: Stat, b: Stat, margin: float = 0.0) -> str:
    """Is ``a > b + margin``? YES / NO when the gap exceeds the seeds' spread (the larger std over seeds of
    the two), TIE when it does not, FEW when either side has fewer than 2 seeds (no spread to judge by)."""
    if min(a.n, b.n) < 2:
        return FEW
    spread = max(a.std if math.isfinite(a.std) else 0.0, b.std if math.isfinite(b.std) else 0.0)
    gap = a.mean - b.mean - margin
    if abs(gap) <= spread:
        return TIE
    return YES if gap > 0 else NO


def _undecided(outcomes: list[str]) -> str:
    return FEW_SEEDS if FEW in outcomes else INDISTINCT


def _all(outcomes: list[str]) -> str:
    """Verdict of a claim that needs every comparison: one clear NO refutes it; it holds only when all are clear."""
    if not outcomes:
        return NO_DATA
    if NO in outcomes:
        return FAILS
    return HOLDS if all(o == YES for o in outcomes) else _undecided(outcomes)


def _most(outcomes: list[str]) -> str:
    """Verdict of a claim about most comparisons: holds when clear YES are a majority, fails when clear NO
    leave no majority possible, else undecided."""
    if not outcomes:
        return NO_DATA
    if 2 * outcomes.count(YES) > len(outcomes):
        return HOLDS
    if 2 * outcomes.count(NO) >= len(outcomes):
        return FAILS
    return _undecided(outcomes)


def _tally(outcomes: list[str]) -> str:
    """'k clear for, j clear against, t within the seeds' spread, f on < 2 seeds' (zero counts left out)."""
    parts = [(outcomes.count(YES), "clear for"), (outcomes.count(NO), "clear against"),
             (outcomes.count(TIE), "within the seeds' spread"), (outcomes.count(FEW), "on < 2 seeds")]
    return ", ".join(f"{k} {what}" for k, what in parts if k) or "no comparison"


def _stat(row: pd.Series) -> Stat:
    return Stat(float(row["mean"]), float(row["std"]), int(row["n"]))


def _best_count(spec: TableSpec, values: pd.DataFrame, metric: str, row: str) -> tuple[int, int, list[str]]:
    """(columns where ``row`` is bold, columns where ``row`` and another row have data, per column the
    outcome of ``row`` against the best other row)."""
    v = values[values.metric == metric].copy()
    v["bold"] = bold_mask(spec, values)[v.index]
    best = total = 0
    outcomes = []
    for _, col in v.groupby(["dataset", "column"], sort=False):
        have = col.dropna(subset=["mean"])
        if row in set(have["row"]) and len(have) > 1:
            total += 1
            mine = have[have["row"] == row].iloc[0]
            best += int(mine["bold"])
            others = have[have["row"] != row]
            outcomes.append(_compare(_stat(mine), _stat(others.loc[others["mean"].idxmax()])))
    return best, total, outcomes


def _chain(stats: list[Stat], increasing: bool = True) -> list[str]:
    """Outcomes of each adjacent pair of ``stats`` against the claimed order."""
    return [_compare(b, a) if increasing else _compare(a, b) for a, b in zip(stats, stats[1:])]


def _seed_stats(frame: pd.DataFrame, by: list[str], column: str, scale: float = 1.0) -> pd.DataFrame:
    """Per group of ``by``: mean, std and n over seeds of the per-seed mean of ``column``."""
    per_seed = frame.dropna(subset=[column]).groupby(by + ["seed"])[column].mean() * scale
    g = per_seed.groupby(level=by)
    return pd.DataFrame({"mean": g.mean(), "std": g.std(), "n": g.count()}).reset_index()


def _mean_cs(rounds: pd.DataFrame, experiment: str, est: str) -> pd.DataFrame:
    col = cs_column(est)
    sel = rounds[rounds.experiment == experiment]
    if col not in sel.columns or sel[col].dropna().empty:
        return pd.DataFrame(columns=["dataset", "setting", "mean", "std", "n"])
    return _seed_stats(sel, ["dataset", "setting"], col)


def claims(final: pd.DataFrame, rounds: pd.DataFrame, estimator: str = DEFAULT_ESTIMATOR,
           values: dict[str, pd.DataFrame] | None = None) -> list[Claim]:
    """Each headline claim of the paper with a verdict from the regenerated numbers.

    A verdict is "holds" or "does not hold" only when the comparisons it rests on differ by more than the
    seeds' spread (the larger standard deviation over seeds of the two values compared); otherwise it is
    "not distinguishable" (a decisive gap within the spread) or "too few seeds" (a decisive value from
    fewer than 2 seeds). The evidence says how many comparisons were clear.
    """
    values = values or {k: cell_values(s, final, rounds, estimator) for k, s in TABLES.items()}
    out: list[Claim] = []
    for label in ("Res_3_datasets", "FL_FEMNIST", "Res_without_mismatch", "Sup_fe_dynamic",
                  "Sup_data_MNIST", "Sup_data_CIFAR10", "Sup_data_Fer2013"):
        for metric in ("acm", "auc"):
            best, total, outcomes = _best_count(TABLES[label], values[label], metric, "ratio")
            out.append(Claim(f"Ratio Loss has the best {PLAIN_METRIC[metric]} in most cells of {label}",
                             _most(outcomes), f"{best}/{total} cells" + (f"; {_tally(outcomes)}" if total else "")))
    text = "Ratio Loss does not sacrifice the majority classes (Ac. within 1 point of CE or better)"
    maj = pd.concat([values["Sup_majority"], values["Sup_majority_femnist"]]).dropna(subset=["mean"])
    outcomes, ok = [], 0
    for _, cell in maj.groupby(["dataset", "column"], sort=False):
        if {"ratio", "ce"} <= set(cell.row):
            r, c = (_stat(cell[cell.row == x].iloc[0]) for x in ("ratio", "ce"))
            ok += int(r.mean >= c.mean - 1.0)
            outcomes.append(_compare(r, c, margin=-1.0))
    out.append(Claim(text, _most(outcomes), f"{ok}/{len(outcomes)} cells; {_tally(outcomes)}" if outcomes
                     else "no Sup_majority cells with both losses"))
    out += _monitor_claims(rounds, estimator)
    out += _mismatch_claims(final)
    out += _sweep_claims(values)
    return out


UNIFORM_ABOVE_TEXT = ("Monitor protocol (random selection): the uniform guess N/Q alone, with no monitor, also has mean CS "
                      "above 0.98 on every dataset, so the paper's bar does not tell the monitor from a guess")


def _monitor_claims(rounds: pd.DataFrame, estimator: str) -> list[Claim]:
    out = []
    est = _mean_cs(rounds, "monitor", estimator)
    uni = _mean_cs(rounds, "monitor", "uniform")
    above_text = f"Monitor: mean CS above 0.98 on every dataset (estimator {estimator})"
    beats_text = f"Monitor: estimator {estimator} beats the uniform guess on every dataset"
    if est.empty:
        out += [Claim(above_text, NO_DATA, "no monitor rounds with a CS"),
                Claim(beats_text, NO_DATA, "no monitor rounds with a CS"),
                Claim(UNIFORM_ABOVE_TEXT, NO_DATA, "no monitor rounds with a CS")]
    else:
        ev, above, beats = [], [], []
        for _, r in est.iterrows():
            u = uni[(uni.dataset == r["dataset"]) & (uni.setting == r["setting"])]
            ev.append(f"{r['dataset']}: {estimator} {fmt(r['mean'], 'cs')} vs uniform "
                      f"{fmt(float(u['mean'].iloc[0]) if len(u) else float('nan'), 'cs')}")
            above.append(_compare(_stat(r), Stat.const(0.98)))
            if len(u):
                beats.append(_compare(_stat(r), _stat(u.iloc[0])))
        out.append(Claim(above_text, _all(above), "; ".join(ev + [_tally(above)])))
        out.append(Claim(beats_text, _all(beats), "; ".join(ev + [_tally(beats)])))
        guess = [_compare(_stat(u), Stat.const(0.98)) for _, u in uni.iterrows()]
        out.append(Claim(UNIFORM_ABOVE_TEXT, _all(guess),
                         "; ".join([f"{u['dataset']}: uniform {fmt(u['mean'], 'cs')}" for _, u in uni.iterrows()]
                                   + [_tally(guess)])))
    imb = rounds[(rounds.experiment == "losses") & (rounds.loss == "ratio") & (rounds.setting != gamma_setting(1))]
    col = cs_column(estimator)
    text = f"Monitor under imbalance (Gamma >= 10): {estimator} beats the uniform guess"
    if col in imb.columns and not imb.dropna(subset=[col, "cs_uniform"]).empty:
        both = imb.dropna(subset=[col, "cs_uniform"])
        e, u = (_seed_stats(both, ["dataset", "setting"], c) for c in (col, "cs_uniform"))
        m = e.merge(u, on=["dataset", "setting"], suffixes=("_e", "_u"))
        outcomes = [_compare(Stat(r.mean_e, r.std_e, r.n_e), Stat(r.mean_u, r.std_u, r.n_u)) for r in m.itertuples()]
        wins = int((m["mean_e"] > m["mean_u"]).sum())
        out.append(Claim(text, _all(outcomes), f"{wins}/{len(m)} (dataset, Gamma) settings; {_tally(outcomes)}"))
    else:
        out.append(Claim(text, NO_DATA, "no Ratio-Loss rounds of the losses experiment with a CS"))
    for exp in ("clients_cifar10", "clients_femnist"):
        cs = _mean_cs(rounds, exp, estimator)
        outcomes, ev = [], []
        for d, sub in cs.groupby("dataset"):
            sub = sub.assign(k=sub.setting.map(lambda s: setting_value(s, "k")).astype(int)).sort_values("k")
            outcomes += _chain([_stat(r) for _, r in sub.iterrows()], increasing=True)
            ev.append(f"{d}: " + ", ".join(f"k={k} {fmt(v, 'cs')}" for k, v in zip(sub.k, sub["mean"])))
        out.append(Claim(f"More selected clients bring the CS closer to 1 ({exp})", _all(outcomes),
                         "; ".join(ev + [_tally(outcomes)]) if ev else "no rounds"))
    for exp in ("batch_size", "local_epochs"):
        cs = _mean_cs(rounds, exp, estimator)
        outcomes, ev = [], []
        for d, s in cs.groupby("dataset"):
            if len(s) > 1:
                span = float(s["mean"].max() - s["mean"].min())
                lo, hi = _stat(s.loc[s["mean"].idxmin()]), _stat(s.loc[s["mean"].idxmax()])
                outcomes.append(_compare(Stat.const(0.01), Stat(span, max(lo.std, hi.std), min(lo.n, hi.n))))
                ev.append(f"{d}: range {span:.4f}")
        out.append(Claim(f"{exp.replace('_', ' ').capitalize()} has little impact on the monitor (CS range < 0.01)",
                         _all(outcomes), "; ".join(ev + [_tally(outcomes)]) if ev else "no rounds"))
    return out


def _mismatch_claims(final: pd.DataFrame) -> list[Claim]:
    out = []
    sel = final[final.experiment.isin(["mismatch", "mismatch_fer2013"]) & final.setting.map(lambda s: setting_value(s, "g") == 10)]
    acm = _seed_stats(sel, ["dataset", "loss", "setting"], "acc_minority", 100.0)
    acm["c"] = acm.setting.map(lambda s: setting_value(s, "c")).astype(int)
    outcomes, ev = [], []
    for (d, loss), sub in acm.groupby(["dataset", "loss"]):
        sub = sub.sort_values("c", ascending=False)
        if len(sub) > 1:
            mono = _chain([_stat(r) for _, r in sub.iterrows()], increasing=False)
            outcomes += mono
            ev.append(f"{d}/{loss}: {'yes' if _ordered(sub['mean'].tolist(), increasing=False) else 'no'}")
    n_mono = sum(1 for e in ev if e.endswith("yes"))
    out.append(Claim("Larger mismatch hurts all losses: Ac.M falls as classes per client fall (Gamma = 10)",
                     _all(outcomes),
                     "; ".join([f"{n_mono}/{len(ev)} (dataset, loss) monotone"] + ev + [_tally(outcomes)])))
    outcomes, wins, levels = [], 0, 0
    for _, sub in acm.groupby(["dataset", "c"]):
        if "ratio" in set(sub.loss) and len(sub) > 1:
            levels += 1
            mine, others = sub[sub.loss == "ratio"].iloc[0], sub[sub.loss != "ratio"]
            wins += int(mine["mean"] >= sub["mean"].max())
            outcomes.append(_compare(_stat(mine), _stat(others.loc[others["mean"].idxmax()])))
    out.append(Claim("Ratio Loss has the best Ac.M at every mismatch level (Res_mismatch, Gamma = 10)",
                     _all(outcomes), f"{wins}/{levels} (dataset, classes per client)"
                     + (f"; {_tally(outcomes)}" if levels else "")))
    return out


def _coverage(table: pd.DataFrame, metric: str, have: pd.DataFrame, both: tuple[str, ...] = ()) -> str:
    """'k of N': of the table's (dataset, column) cells of ``metric``, how many ``have`` has data for (every row of
    ``both`` when given): how much of a sweep or grid a claim was judged on."""
    cells = table[table.metric == metric].groupby(["dataset", "column"]).ngroups
    rows = have.groupby(["dataset", "column"])["row"].agg(set)
    run = int(sum(set(both) <= r for r in rows)) if both else len(rows)
    return f"{run} of {cells}"


def _ordered(seq: list[float], increasing: bool = True) -> bool:
    pairs = list(zip(seq, seq[1:]))
    return all(b >= a for a, b in pairs) if increasing else all(b <= a for a, b in pairs)


def _sweep_claims(values: dict[str, pd.DataFrame]) -> list[Claim]:
    out = []
    v = values["Importance_early"]
    acm = v[v.metric == "acm"].dropna(subset=["mean"])
    outcomes, ev = [], []
    for d, sub in acm.groupby("dataset", sort=False):
        order = [s for s in ("S", "M", "E") if s in set(sub.row)]
        stats = [_stat(sub[sub.row == s].iloc[0]) for s in order]
        if len(stats) > 1:
            outcomes += _chain(stats, increasing=False)
            ev.append(f"{d}: " + " > ".join(f"{s} {fmt(st.mean, 'acm')}" for s, st in zip(order, stats)))
    out.append(Claim("Early acknowledgment helps: Ac.M S. > M. > E.", _all(outcomes),
                     "; ".join(ev + [_tally(outcomes)]) if ev else "no early jobs"))
    for label, best, metric in (("Sup_hyper_T_ra", "1.25", "cs_mean"), ("Sup_hyper_T_ra", "1.25", "cs_var"),
                                ("Sup_hyper_a", "1.00", "acm"), ("Sup_hyper_b", "0.10", "acm")):
        t = values[label]
        t = t[t.metric == metric].dropna(subset=["mean"])
        bold = bold_mask(TABLES[label], values[label])
        winners = list(values[label].loc[bold[bold].index].query("metric == @metric")["column"])
        outcomes = []
        if best in set(t.column):
            mine = _stat(t[t.column == best].iloc[0])
            for _, r in t[t.column != best].iterrows():
                outcomes.append(_compare(_stat(r), mine) if metric == "cs_var" else _compare(mine, _stat(r)))
        verdict = NO_DATA if t.empty or best not in set(t.column) else _all(outcomes)
        out.append(Claim(f"{label}: {best} gives the best {PLAIN_METRIC[metric]}", verdict,
                         f"best: {', '.join(winners) or '--'}; {_coverage(values[label], metric, t)} values run"
                         + (f"; {_tally(outcomes)}" if outcomes else "")))
    v = values["Sup_MFE"]
    acm = v[(v.metric == "acm")].dropna(subset=["mean"])
    worse, outcomes = 0, []
    for (d, c), sub in acm.groupby(["dataset", "column"]):
        if {"mse", "mfe"} <= set(sub.row):
            mse, mfe = (_stat(sub[sub.row == x].iloc[0]) for x in ("mse", "mfe"))
            worse += int(mfe.mean <= mse.mean)
            outcomes.append(_compare(mse, mfe))
    out.append(Claim("MFE with local knowledge is no better than MSE (Sup_MFE Ac.M)", _most(outcomes),
                     f"MFE <= MSE in {worse}/{len(outcomes)} cells; {_coverage(v, 'acm', acm, both=('mse', 'mfe'))} "
                     "cells run" + (f"; {_tally(outcomes)}" if outcomes else "")))
    return out


def write_claims(final: pd.DataFrame, rounds: pd.DataFrame, path: str | Path, *, estimator: str = DEFAULT_ESTIMATOR,
                 values: dict[str, pd.DataFrame] | None = None, templates: str | Path | None = None) -> Path:
    """Write ``claims.md`` (every claim, its verdict and evidence) at ``path``."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(environment(templates).get_template("claims.md.j2").render(
        claims=claims(final, rounds, estimator, values), estimator=estimator))
    return p
