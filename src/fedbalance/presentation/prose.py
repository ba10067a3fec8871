"""The docs' sentences that state numbers of a reference set, computed from its job folders and rendered from templates.

Each block is one template of ``templates/prose/`` filled from the tidy frames of the set
(``fedbalance.jobs.aggregate.collect`` of reference/mnist) or the published numbers; ``fedbalance reference docs``
(``fedbalance.presentation.refdocs``) splices them between the docs' marks and ``docs --check`` fails when one is stale.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
import numpy as np
import pandas as pd

from fedbalance.jobs.aggregate import collect
from fedbalance.common.records import UNIFORM, cs_column, plus_minus, setting_name, setting_value
from fedbalance.presentation.claims import COLLAPSE, YES, paired_comparison
from fedbalance.presentation.fidelity import VERDICT_RULE, WHERE, common_seeds, paper_verdict
from fedbalance.presentation.names import FOUR_LOSSES, GAMMAS, LOSS_NAME, READINGS, gamma_setting
from fedbalance.evidence.seedstats import seed_mark, seed_span
from fedbalance.presentation.tables import CS_LEVELS
from fedbalance.presentation.tables import TEMPLATES as TABLE_TEMPLATES
from fedbalance.presentation.tables import published

EVIDENCE = 4.0
"""The threshold of ``shrunk`` on ||p - u||^2 / noise (``fedbalance.monitor.estimators.EVIDENCE``, quoted by docs/monitor.md)."""
MAJORITY_MARGIN = 1.0
"""The majority claim: the Ratio Loss's majority accuracy within this many points of CE's, or above."""
AUC_TOLERANCE = 0.001
"""A published AUC is fitted by the closed form when within this of it."""
OWN_Q = {"mnist": 10, "cifar10": 10, "fer2013": 7, "femnist": 26}
"""Classes of each dataset as config/config.yaml defines it (FEMNIST: letters only)."""
MINORITY = {"mnist": 3, "cifar10": 3, "fer2013": 3, "femnist": 7}
"""Minority classes of each dataset (config/config.yaml, ``minority_classes``)."""
RELEASED_Q = 26
"""The released code's ``label_binarize(..., range(26))``: Q hard-coded to 26."""


@dataclass(frozen=True)
class Cell:
    """One (setting, loss) of the set: final-round values over seeds, in % (Ac.M, majority and overall accuracy)."""

    seeds: tuple[int, ...]
    acm: tuple[float, ...]
    maj: tuple[float, ...]
    acc: tuple[float, ...]
    auc: tuple[float, ...]
    paper: float
    paper_auc: float
    gamma_realised: float
    extra: tuple[int, ...] = ()
    """The seeds the cell holds beyond those every loss of its setting holds: not read."""

    @property
    def n(self) -> int:
        return len(self.seeds)

    @property
    def mean(self) -> float:
        return float(np.mean(self.acm))

    @property
    def std(self) -> float:
        return float(np.std(self.acm, ddof=1)) if self.n > 1 else math.nan

    @property
    def pm(self) -> str:
        return plus_minus(self.mean, self.std, 2)

    @property
    def verdict(self) -> str:
        return paper_verdict(self.mean, self.std, self.n, self.paper)

    @property
    def where(self) -> str:
        """Where the published cell lies against our mean, in words (``fidelity.WHERE``)."""
        return WHERE[self.verdict]

    @property
    def auc_std(self) -> float:
        return float(np.std(self.auc, ddof=1)) if self.n > 1 else math.nan

    @property
    def auc_where(self) -> str:
        """Where the published AUC (hard) lies against our mean AUC, in words."""
        return WHERE[paper_verdict(float(np.mean(self.auc)), self.auc_std, self.n, self.paper_auc, metric="auc")]

    def without(self, seeds: set[int]) -> Cell:
        """The cell over its other seeds."""
        keep = [i for i, s in enumerate(self.seeds) if s not in seeds]
        return Cell(*(tuple(getattr(self, f)[i] for i in keep) for f in ("seeds", "acm", "maj", "acc", "auc")),
                    self.paper, self.paper_auc, self.gamma_realised, self.extra)

    def series(self, values: str = "maj") -> pd.Series:
        """One of the cell's values by seed (``maj``: the majority classes' accuracy, %)."""
        return pd.Series(getattr(self, values), index=list(self.seeds), dtype=float)

    @property
    def lo(self) -> float:
        return min(self.acm)

    @property
    def hi(self) -> float:
        return max(self.acm)

    @property
    def maj_mean(self) -> float:
        return float(np.mean(self.maj))

    @property
    def acc_mean(self) -> float:
        return float(np.mean(self.acc))

    @property
    def auc_pm(self) -> str:
        return plus_minus(float(np.mean(self.auc)), self.auc_std, 4)

    def seed_list(self, digits: int = 2) -> str:
        """The seeds' values in seed order, comma-separated."""
        return ", ".join(f"{v:.{digits}f}" for v in self.acm)


def _lists(column: pd.Series) -> list[list[float]]:
    return [json.loads(v) if isinstance(v, str) else list(v) for v in column]


def reference_frames(reference: str | Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The tidy final and rounds frames of a reference set's job folders (``aggregate.collect``)."""
    return collect(reference)


def cells(final: pd.DataFrame, experiment: str = "losses", dataset: str = "mnist") -> dict[str, dict[str, Cell]]:
    """{setting: {loss: Cell}} of ``experiment``, beside the published Res_3_datasets cell of the loss (or its base),
    each on the seeds every loss of its setting holds (``fidelity.common_seeds``; the others in ``Cell.extra``), as
    the Fidelity table reads them."""
    pub = published()
    column = {gamma_setting(g): label for label, g in GAMMAS}
    out: dict[str, dict[str, Cell]] = {}
    f, dropped = common_seeds(final[(final.experiment == experiment) & (final.dataset == dataset)], ["setting"], ["loss"])
    f = f.sort_values("seed")
    for (setting, loss), g in f.groupby(["setting", "loss"]):
        row = "ratio" if loss in READINGS else loss
        sel = pub[(pub.table == "Res_3_datasets") & (pub.dataset == dataset) & (pub.column == column.get(setting))
                  & (pub.row == row)]
        value = {m: float(sel[sel.metric == m].value.iloc[0]) if (sel.metric == m).any() else math.nan
                 for m in ("acm", "auc")}
        out.setdefault(setting, {})[loss] = Cell(
            tuple(int(s) for s in g.seed), tuple(100 * g.acc_minority), tuple(100 * g.acc_majority),
            tuple(100 * g.acc), tuple(g.auc_hard), value["acm"], value["auc"], float(g.gamma_realised.mean()),
            tuple(dropped.get((setting, loss), ())))
    return {s: out[s] for s in sorted(out, key=lambda s: float(s.lstrip("g")))}


def job_rounds(rounds: pd.DataFrame, experiment: str, setting: str, loss: str, seed: int) -> pd.DataFrame:
    """One job's rounds, in order."""
    r = rounds[(rounds.experiment == experiment) & (rounds.setting == setting) & (rounds.loss == loss)
               & (rounds.seed == seed)]
    return r.sort_values("round").reset_index(drop=True)


def class_role(counts: list[float], cls: int) -> str:
    """What class ``cls`` is among a round's class ``counts``, in words: "a majority class" (count at or above the
    median), "a minority class", or "every class as large" when all counts are equal (a balanced round: Γ = 1)."""
    if min(counts) == max(counts):
        return "every class as large"
    return "a majority class" if counts[cls] >= float(np.median(counts)) else "a minority class"


def collapses(rounds: pd.DataFrame, experiment: str = "losses", losses: tuple[str, ...] = READINGS) -> pd.DataFrame:
    """Every evaluated round t >= 1 of ``experiment``'s ``losses`` jobs whose test accuracy is below COLLAPSE: the job, the round
    (0-based), its accuracy, the largest π it trained with (computed after round t - 1), that π's class, what the class
    is in the round (``role``: ``class_role``), the final Ac.M and the last round."""
    out = []
    r = rounds[(rounds.experiment == experiment) & rounds.loss.isin(losses)]
    for (setting, loss, seed), g in r.groupby(["setting", "loss", "seed"]):
        g = g.sort_values("round").reset_index(drop=True)
        weights = _lists(g.weights)
        truth = _lists(g.true_composition)
        for i in range(1, len(g)):
            if g.acc[i] < COLLAPSE:
                pi = weights[i - 1]
                p = int(np.argmax(pi))
                out.append({"experiment": experiment, "setting": setting, "loss": loss, "seed": int(seed), "round": int(g["round"][i]),
                            "acc": 100 * g.acc[i], "pi": float(pi[p]), "cls": p,
                            "role": class_role(truth[i], p),
                            "acm_before": 100 * g.acc_minority[i - 1], "acc_next": 100 * g.acc[i + 1] if i + 1 < len(g) else math.nan,
                            "acm_final": 100 * g.acc_minority.iloc[-1], "last_round": int(g["round"].iloc[-1])})
    return pd.DataFrame(out, columns=["experiment", "setting", "loss", "seed", "round", "acc", "pi", "cls", "role", "acm_before",
                                      "acc_next", "acm_final", "last_round"])


def collapse_episodes(col: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``collapses``' records (in its order) merged into episodes, each the consecutive collapsed rounds of one job: its
    first round's record (the π that started it, the Ac.M before it), ``end`` (its last collapsed round), ``n`` (its rounds),
    ``later`` (the accuracies of its rounds after the first), ``acc_next`` (the round after ``end``; NaN when ``end``
    is the job's last round)."""
    out: list[dict[str, Any]] = []
    for k in col:
        last = out[-1] if out else None
        if last is not None and all(last[x] == k[x] for x in ("experiment", "setting", "loss", "seed")) \
                and k["round"] == last["end"] + 1:
            last.update(end=k["round"], n=last["n"] + 1, later=[*last["later"], k["acc"]], acc_next=k["acc_next"])
        else:
            out.append({**k, "end": k["round"], "n": 1, "later": []})
    return out


def shrinkage_ratios(rounds: pd.DataFrame, same_clients: frozenset[str] = frozenset({"losses", "ratio_stability"})
                     ) -> pd.DataFrame:
    """||p - u||^2 / noise of ``shrunk`` (``fedbalance.monitor.estimators.shrunk_counts``) in every round t >= 1 of every job
    that recorded ``released`` and ``pooled``, from those records: p the round's pooled estimate, u its uniform guess,
    the noise the spread of the rounds' ``released`` estimates (over rounds, per class, divided by the number of rounds
    when the same clients come back (``same_clients`` experiments), else the spread of their deviations from the guess)."""
    out = []
    keys = ["experiment", "setting", "loss", "seed"]
    for key, g in rounds.dropna(subset=["est_released", "est_pooled"]).groupby(keys):
        g = g.sort_values("round")
        rel = np.array(_lists(g.est_released), dtype=float)
        pool = np.array(_lists(g.est_pooled), dtype=float)
        same = key[0] in same_clients
        for t in range(1, len(g)):
            total = pool[t].sum()
            u = total / pool.shape[1]
            share = rel[: t + 1] / rel[: t + 1].sum(1, keepdims=True) * total
            noise = share.var(0, ddof=1).sum() / (t + 1) if same else (share - u).var(0, ddof=1).sum()
            out.append({**dict(zip(keys, key)), "round": int(g["round"].iloc[t]), "same": same,
                        "ratio": float(((pool[t] - u) ** 2).sum() / noise)})
    return pd.DataFrame(out)


def auc_fits(q: int | None = None) -> dict[str, tuple[int, int]]:
    """Per dataset: (cells whose published AUC the one-hot closed form fits within AUC_TOLERANCE, cells compared).

    The cells publish Ac.M (Res_3_datasets, FL_FEMNIST), majority accuracy (Sup_majority*) and AUC; the overall
    accuracy is their class-weighted mean (a balanced test set) and the closed form is (1 + acc - (1 - acc)/(Q - 1))/2
    with the dataset's own Q (``q`` None) or ``q``."""
    pub = published()
    loss = pub[pub.table.isin(["Res_3_datasets", "FL_FEMNIST"])]
    maj = pub[pub.table.isin(["Sup_majority", "Sup_majority_femnist"])].set_index(["dataset", "column", "row"]).value
    wide = loss.pivot_table(index=["dataset", "column", "row"], columns="metric", values="value")
    wide = wide.join(maj.rename("maj")).dropna()
    out: dict[str, tuple[int, int]] = {}
    for (dataset, _, _), x in wide.iterrows():
        classes = OWN_Q[dataset]
        acc = (MINORITY[dataset] * x.acm + (classes - MINORITY[dataset]) * x.maj) / classes / 100
        k = q or classes
        fit = abs((1 + acc - (1 - acc) / (k - 1)) / 2 - x.auc) <= AUC_TOLERANCE
        hits, n = out.get(dataset, (0, 0))
        out[dataset] = (hits + int(fit), n + 1)
    return out


def implied_below(dataset: str = "cifar10", column: str = "B.") -> tuple[int, int]:
    """(cells whose published AUC, read through the closed form with the dataset's own Q and with Q = 26, implies an
    overall accuracy below both published accuracies (Ac.M and the majority classes'), cells) in one column."""
    pub = published()
    sel = pub[(pub.dataset == dataset) & (pub.column == column)]
    hits = n = 0
    for loss in sorted(set(sel[sel.table == "Res_3_datasets"].row)):
        def value(table: str, metric: str) -> float:
            return float(sel[(sel.table == table) & (sel.row == loss) & (sel.metric == metric)].value.iloc[0])
        auc, low = value("Res_3_datasets", "auc"), min(value("Res_3_datasets", "acm"), value("Sup_majority", "acc_majority"))
        implied = [100 * (2 * auc - 1 + 1 / (q - 1)) * (q - 1) / q for q in (OWN_Q[dataset], RELEASED_Q)]
        hits += int(all(a < low for a in implied))
        n += 1
    return hits, n


def _fmt(value: float, digits: int = 2) -> str:
    return f"{value:.{digits}f}"


def mark(group: str, *sides: Any) -> str:
    """``seedstats.seed_mark`` of ``sides``: cells (their seeds), comparisons (theirs) or seed lists."""
    return seed_mark(group, *(getattr(x, "seeds", x) for x in sides))


def like_seeds(f: pd.DataFrame, cell: list[str]) -> tuple[pd.DataFrame, list[int], dict[tuple, list[int]]]:
    """A block's jobs (``f``) kept to the seeds every one of its cells (``cell`` keys) holds, those seeds, and the
    seeds a cell holds beyond them (not read): a block whose rows are set side by side reads them on like seeds."""
    kept, dropped = common_seeds(f.assign(_block=0), ["_block"], cell)
    return kept.drop(columns="_block"), sorted(int(x) for x in set(kept.seed)), {k[1:]: v for k, v in dropped.items()}


def _gap_range(cs: dict[str, dict[str, Cell]], loss: str) -> tuple[float, float, str]:
    """The smallest and largest |mean - published| of ``loss`` over the settings, and the common sign of our mean
    against the published ('above', 'below' or 'both')."""
    gaps = [c[loss].mean - c[loss].paper for c in cs.values() if loss in c and not math.isnan(c[loss].paper)]
    sign = "above" if all(g > 0 for g in gaps) else "below" if all(g < 0 for g in gaps) else "both"
    return min(abs(g) for g in gaps), max(abs(g) for g in gaps), sign


def seeds_context(final: pd.DataFrame, rounds: pd.DataFrame) -> dict[str, Any]:
    """Everything the fidelity page's "What the seeds say" block states, computed from the set's frames."""
    cs = cells(final)
    col = collapses(rounds).to_dict("records")
    ratio_jobs = int(((final.experiment == "losses") & final.loss.isin(READINGS)).sum())
    paper_jobs = int(((final.experiment == "losses") & (final.loss == "ratio")).sum())
    # the paper reading at Γ = 10: its lowest seed, the spread of its last five rounds and the π it trained with there
    g10 = cs["g10"]["ratio"]
    low_seed = g10.seeds[int(np.argmin(g10.acm))]
    jr = job_rounds(rounds, "losses", "g10", "ratio", low_seed)
    tail = jr.tail(5)
    pis = _lists(jr.weights)
    tail_pi = [max(pis[i - 1]) for i in tail.index]
    others = [v for s, v in zip(g10.seeds, g10.acm) if s != low_seed]
    # Γ = 100: CE interpolated in log Γ between Γ = 50 and the realised Γ of the 100 cells
    ce50, ce100 = cs["g50"]["ce"], cs["g100"]["ce"]
    realised = ce100.gamma_realised
    slope = (ce100.mean - ce50.mean) / (math.log(realised) - math.log(50))
    interpolated = ce50.mean + slope * (math.log(100) - math.log(50))
    r100 = cs["g100"]["ratio"]
    r100_rounds = {s: job_rounds(rounds, "losses", "g100", "ratio", s) for s in r100.seeds}
    r100_low = sorted(r100.seeds, key=lambda s: r100.acm[r100.seeds.index(s)])[:2]
    r100_detail = []
    for s in r100_low:
        g = r100_rounds[s]
        w = _lists(g.weights)
        last8 = g.tail(8)
        r100_detail.append({"seed": s, "final": 100 * g.acc_minority.iloc[-1], "lo": 100 * last8.acc_minority.min(),
                            "hi": 100 * last8.acc_minority.max(),
                            "pi": max(max(w[i - 1]) for i in last8.index)})
    ghmc_lo, ghmc_hi, ghmc_sign = _gap_range(cs, "ghmc")
    majority = {s: {"ratio": c["ratio"].maj_mean, "ce": c["ce"].maj_mean, "ratio_rel": c["ratio_rel"].maj_mean}
                for s, c in cs.items()}
    kept = [s for s in ("g10", "g50", "g100")]
    maj_ratio = [majority[s][loss] for s in kept for loss in READINGS]
    maj_ce = [majority[s]["ce"] for s in kept]
    # claims 15 and 15r: each reading within MAJORITY_MARGIN of CE's majority accuracy, paired on the common seeds
    kept_by = {reading: {s: paired_comparison(c[reading].series(), c["ce"].series(), -MAJORITY_MARGIN)
                         for s, c in cs.items() if reading in c and "ce" in c} for reading in READINGS}
    keeps = {reading: {"clear": [s for s, x in by.items() if x.outcome == YES],
                       "not": [s for s, x in by.items() if x.outcome != YES and x.diff >= 0],
                       "misses": [s for s, x in by.items() if x.outcome != YES and x.diff < 0]}
             for reading, by in kept_by.items()}
    g20_collapsed = {k["seed"] for k in col
                     if k["setting"] == "g20" and k["loss"] == "ratio" and k["seed"] in cs["g20"]["ratio"].seeds}
    ce_gap = {s: c["ce"].paper - c["ce"].mean for s, c in cs.items()}
    focal = {}
    for s, c in cs.items():
        focal.setdefault(c["focal"].verdict, []).append(int(s[1:]))
    mon = rounds[rounds.experiment == "monitor"]
    mon_cs = mon.groupby("seed")[["cs_pooled", "cs_uniform"]].mean().mean()
    return {
        "c": cs, "collapses": col, "episodes": collapse_episodes(col), "collapsed_jobs": _jobs_of(col),
        "ratio_jobs": ratio_jobs, "paper_jobs": paper_jobs,
        "g10_low": {"seed": low_seed, "final": g10.acm[g10.seeds.index(low_seed)], "lo": 100 * tail.acc_minority.min(),
                    "hi": 100 * tail.acc_minority.max(), "pi_lo": min(tail_pi), "pi_hi": max(tail_pi),
                    "others_lo": min(others), "others_hi": max(others)},
        "interpolated": interpolated, "realised": realised, "r100_low": r100_detail,
        "ghmc": {"lo": ghmc_lo, "hi": ghmc_hi, "sign": ghmc_sign},
        "majority": majority, "maj_ratio": (min(maj_ratio), max(maj_ratio)), "maj_ce": (min(maj_ce), max(maj_ce)),
        "keeps": keeps, "kept_by": kept_by, "margin": MAJORITY_MARGIN, "mark": mark, "span": seed_span,
        "monitor_cs": {"pooled": float(mon_cs.cs_pooled), "uniform": float(mon_cs.cs_uniform),
                       "seeds": int(mon.seed.nunique()), "seed_ids": sorted(int(x) for x in mon.seed.unique())},
        "gamma": {s: int(s[1:]) for s in cs}, "fmt": _fmt, "COLLAPSE": 100 * COLLAPSE, "rule": VERDICT_RULE,
        "g20_collapsed": sorted(g20_collapsed), "g20_without": cs["g20"]["ratio"].without(g20_collapsed),
        "ce_gap": ce_gap, "ce_largest": max(ce_gap, key=lambda s: abs(ce_gap[s])), "focal": focal, "where": WHERE,
    }


def shrinkage_context(rounds: pd.DataFrame) -> dict[str, Any]:
    """What docs/monitor.md states of ``shrunk``'s test on the reference jobs."""
    r = shrinkage_ratios(rounds)
    # the random-selection runs are the monitor family's: the t_ra family's jobs are derived from the same runs
    rand, same = r[~r.same & (r.experiment == "monitor")], r[r.same]
    imbalanced = same[same.setting != "g1"]
    below = imbalanced[imbalanced.ratio <= EVIDENCE]
    balanced = same[same.setting == "g1"]
    bal_below = balanced[balanced.ratio <= EVIDENCE]
    return {
        "rand": {"lo": rand.ratio.min(), "hi": rand.ratio.max(), "jobs": rand.groupby(["experiment", "seed"]).ngroups,
                 "med_lo": rand.groupby("seed").ratio.median().min(), "med_hi": rand.groupby("seed").ratio.median().max()},
        "same": {"lo": imbalanced.ratio.min(), "hi": imbalanced.ratio.max(),
                 "jobs": imbalanced.groupby(["experiment", "setting", "loss", "seed"]).ngroups,
                 "rounds": len(imbalanced), "below": len(below),
                 "below_jobs": below.groupby(["experiment", "setting", "loss", "seed"]).ngroups,
                 "below_last": int(below["round"].max()) if len(below) else None,
                 "after_lo": imbalanced[imbalanced["round"] > (below["round"].max() if len(below) else 0)].ratio.min()},
        "balanced": {"jobs": balanced.groupby(["setting", "loss", "seed"]).ngroups, "below": len(bal_below),
                     "rounds": len(balanced), "last": int(bal_below["round"].max()) if len(bal_below) else None},
        "evidence": EVIDENCE, "fmt": _fmt,
    }


LATE = 5
"""The last rounds whose Ac.M says whether a job has settled, rises or alternates (``late_state``)."""
SETTLED = 2.0
"""A job has settled when its Ac.M over the last LATE rounds stays within this many points (max - min)."""
AT_ZERO = 1.0
"""A job sits at 0 when its Ac.M stays below this many points in each of the last LATE rounds."""
RISING = 0.5
"""A job rises (falls) when the least-squares slope of its Ac.M over the last LATE rounds is at least this many points
a round (at most minus this)."""
STATES = ("at 0", "settled", "alternates", "rises", "falls", "wavers")
"""The states of ``late_state``, in the order it tests them."""


def late_state(acm: np.ndarray, late: int = LATE) -> dict[str, Any]:
    """A job's last ``late`` rounds of Ac.M (in points): their values, range (max - min), least-squares slope (points a
    round) and state, the first of STATES that holds: every value below AT_ZERO; range within SETTLED; every successive
    change changes sign and moves more than SETTLED; slope at least RISING; slope at most -RISING; none of these ("wavers")."""
    tail = np.asarray(acm, dtype=float)[-late:]
    rng = float(tail.max() - tail.min())
    slope = float(np.polyfit(np.arange(len(tail)), tail, 1)[0])
    step = np.diff(tail)
    d = np.sign(step)
    alternate = len(d) > 1 and bool(np.all(d[1:] * d[:-1] < 0)) and bool(np.all(np.abs(step) > SETTLED))
    state = ("at 0" if tail.max() < AT_ZERO else "settled" if rng <= SETTLED else "alternates" if alternate
             else "rises" if slope >= RISING else "falls" if slope <= -RISING else "wavers")
    return {"values": [float(v) for v in tail], "range": rng, "slope": slope, "state": state}


def state_groups(jobs: list[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    """``jobs`` (dicts with ``key``, 'seed' and 'state') grouped by state in STATES order, then by ``key``: [{state,
    items: [(key value, seeds)]}]."""
    out = []
    for state in STATES:
        js = [j for j in jobs if j["state"] == state]
        keys = list(dict.fromkeys(j[key] for j in js))
        if js:
            out.append({"state": state, "items": [(k, sorted(j["seed"] for j in js if j[key] == k)) for k in keys]})
    return out


def centralised_context(final: pd.DataFrame, rounds: pd.DataFrame) -> dict[str, Any]:
    """The `centralised` family's Ratio jobs (both readings) and their collapsed epochs (``collapses``; an epoch is a
    round of rounds.csv), as episodes, for docs/deviations.md."""
    col = collapses(rounds, "centralised").to_dict("records")
    trained = final[(final.experiment == "centralised") & final.loss.isin(READINGS)]
    return {"jobs": len(trained), "paper_jobs": int((trained.loss == "ratio").sum()),
            "collapses": col, "episodes": collapse_episodes(col), "fmt": _fmt,
            "COLLAPSE": 100 * COLLAPSE, "collapsed_jobs": _jobs_of(col), "unit": "epoch"}


SWEEPS = ("alpha", "beta")
"""The Ratio Loss's hyper-parameter sweeps (Sup_hyper_a, Sup_hyper_b) whose collapses docs/fidelity.md lists."""


def sweep_context(final: pd.DataFrame, rounds: pd.DataFrame) -> dict[str, Any]:
    """The jobs of the α and β sweeps the set trained and their collapsed rounds (``collapses``), with the values."""
    col = [k for experiment in SWEEPS for k in collapses(rounds, experiment, ("ratio",)).to_dict("records")]
    trained = final[final.experiment.isin(SWEEPS)]
    return {"jobs": len(trained), "settings": sorted(set(trained.setting)), "collapses": col,
            "episodes": collapse_episodes(col), "fmt": _fmt,
            "COLLAPSE": 100 * COLLAPSE, "collapsed_jobs": _jobs_of(col)}


def _jobs_of(rounds: list[dict[str, Any]]) -> int:
    """How many jobs the collapsed ``rounds`` (``collapses`` records) belong to."""
    return len({(k["experiment"], k["setting"], k["loss"], k["seed"]) for k in rounds})


SLOPE_GAMMA = 50
"""The Γ of the α and β sweeps (their default point is the `losses` family's Ratio job at this Γ)."""
EARLY_ROUND = 10
"""The round at which docs/fidelity.md compares how far the α sweep's step sizes have come."""


def sweep_slope_context(final: pd.DataFrame, rounds: pd.DataFrame) -> dict[str, Any]:
    """The late rounds of the jobs the α and β sweeps compare at Γ = SLOPE_GAMMA: CE, the Ratio Loss at its default
    (α = 1, β = 0.1, the `losses` jobs) and each trained sweep value; per job the state and slope of its last LATE
    rounds (``late_state``) and its Ac.M at EARLY_ROUND; and α = 5 against α = 1 on the seeds both hold."""
    setting = gamma_setting(SLOPE_GAMMA)
    groups = [("losses", setting, "ce", "CE"), ("losses", setting, "ratio", "Ratio, α = 1.00, β = 0.10")]
    for experiment in SWEEPS:
        for s in sorted(set(final[final.experiment == experiment].setting)):
            value = setting_value(s, experiment[0])
            groups.append((experiment, s, "ratio", f"Ratio, {'α' if experiment == 'alpha' else 'β'} = {value:.2f}"))
    rows, jobs = [], []
    for experiment, s, loss, label in groups:
        seeds = sorted(int(x) for x in final[(final.experiment == experiment) & (final.setting == s) & (final.loss == loss)].seed)
        if not seeds:
            continue
        per = []
        for seed in seeds:
            jr = job_rounds(rounds, experiment, s, loss, seed)
            a = 100 * jr.acc_minority.to_numpy()
            st = {"label": label, "seed": seed, **late_state(a),
                  "early": float(a[jr["round"].to_numpy() == EARLY_ROUND][0]), "last5": float(np.mean(a[-LATE:]))}
            per.append(st)
            jobs.append(st)
        slopes = [j["slope"] for j in per]
        window = job_rounds(rounds, experiment, s, loss, seeds[0])["round"]
        rows.append({"label": label, "path": f"{experiment}/mnist/{s}/{loss}", "seeds": seeds, "jobs": per,
                     "slope": plus_minus(float(np.mean(slopes)), float(np.std(slopes, ddof=1)) if len(slopes) > 1 else math.nan, 2),
                     "rounds": (int(window.iloc[-LATE]), int(window.iloc[-1]))})
    pair = None
    a1 = next((r for r in rows if r["path"] == f"losses/mnist/{setting}/ratio"), None)
    a5 = next((r for r in rows if r["path"].startswith("alpha/")), None)
    if a1 and a5:
        common = sorted(set(a1["seeds"]) & set(a5["seeds"]))
        def mean(r: dict[str, Any], key: str) -> float:
            return float(np.mean([j[key] for j in r["jobs"] if j["seed"] in common]))
        pair = {"seeds": common, "label": a5["label"], "early": (mean(a5, "early"), mean(a1, "early")),
                "last5": (mean(a5, "last5"), mean(a1, "last5"))}
    common = sorted(set.intersection(*(set(r["seeds"]) for r in rows))) if rows else []
    for r in rows:
        r["mark"] = seed_mark("slopes", r["seeds"], common)
    return {"rows": rows, "by_state": state_groups(jobs, "label"), "pair": pair, "late": LATE, "rising": RISING,
            "mark": mark,
            "settled": SETTLED, "early_round": EARLY_ROUND, "gamma": SLOPE_GAMMA, "seed_words": seed_words}


EARLY = ("S", "M", "E")
"""The `early` family's settings, earliest switch first (Importance_early's rows)."""


def early_context(final: pd.DataFrame, rounds: pd.DataFrame, reference: str | Path) -> dict[str, Any]:
    """The `early` family, setting by setting: the final Ac.M over seeds beside Importance_early's MNIST cell, and the
    Ac.M of the last imbalanced round and of the first balanced one (the switch read off each job's metrics.json)."""
    pub = published()
    pub = pub[(pub.table == "Importance_early") & (pub.dataset == "mnist") & (pub.metric == "acm")]
    f = final[(final.experiment == "early") & (final.dataset == "mnist")].sort_values("seed")
    f, common, dropped = like_seeds(f, ["setting"])
    out = []
    for setting in [s for s in EARLY if s in set(f.setting)]:
        g = f[f.setting == setting]
        acm = 100 * g.acc_minority.to_numpy()
        std = float(np.std(acm, ddof=1)) if len(acm) > 1 else math.nan
        paper = float(pub[pub.row == setting].value.iloc[0]) if (pub.row == setting).any() else math.nan
        jobs = [job_rounds(rounds, "early", setting, j.loss, int(j.seed)) for j in g.itertuples()]
        switch = [int(json.loads((Path(reference) / "early" / "mnist" / setting / j.loss / f"seed{int(j.seed)}"
                                  / "metrics.json").read_text())["config"]["switch_round"]) for j in g.itertuples()]
        before = [100 * j.acc_minority[j["round"] == s - 1].iloc[0] for j, s in zip(jobs, switch)]
        after = [100 * j.acc_minority[j["round"] == s].iloc[0] for j, s in zip(jobs, switch)]
        out.append({"setting": setting, "seeds": len(acm), "pm": plus_minus(float(acm.mean()), std, 2),
                    "mark": seed_mark("early", g.seed, common),
                    "mean": float(acm.mean()), "paper": paper,
                    "verdict": paper_verdict(float(acm.mean()), std, len(acm), paper),
                    "switch": sorted(set(switch)), "rounds": int(jobs[0]["round"].max()) + 1,
                    "before": (min(before), max(before)), "after": (min(after), max(after))})
    res = published()
    res = res[(res.table == "Res_3_datasets") & (res.dataset == "mnist") & (res.column == "100:1") & (res.row == "ce")
              & (res.metric == "acm")]
    return {"rows": out, "ce100": float(res.value.iloc[0]), "fmt": _fmt, "isnan": math.isnan, "common": common,
            "dropped": dropped, "span": seed_span}


T_RA_ESTIMATOR = "paper"
"""The estimator T_Ra moves (Sup_hyper_T_ra's, as in the paper)."""
T_RA_BLIND = ("pooled", "released", "nnls")
"""The recorded estimators that do not read T_Ra."""
T_RA_DEFAULT = ("monitor", "default", 1.25)
"""The `t_ra` family's default point: the `monitor` family's jobs (a twin, not held in the family)."""


def t_ra_context(final: pd.DataFrame, rounds: pd.DataFrame) -> dict[str, Any]:
    """The T_Ra sweep: per value, each seed's mean CS of the ``paper`` estimator over its rounds; the mean over the
    seeds every value holds and over each value's own seeds, where either falls from one value to the next, where a
    seed does; the best value; the sweep's CS against the published values and the uniform guess; and how far the
    estimators that do not read T_Ra differ between values."""
    sources = [("t_ra", s, float(setting_value(s, "t"))) for s in sorted(set(final[final.experiment == "t_ra"].setting))]
    if T_RA_DEFAULT[0] in set(final.experiment):
        sources.append(T_RA_DEFAULT)
    cs: dict[float, dict[int, float]] = {}
    other: dict[tuple[str, int], list[np.ndarray]] = {}
    uniform = []
    for experiment, setting, value in sorted(sources, key=lambda x: x[2]):
        r = rounds[(rounds.experiment == experiment) & (rounds.setting == setting) & (rounds.loss == "ce")]
        for seed, g in r.groupby("seed"):
            g = g.sort_values("round")
            cs.setdefault(value, {})[int(seed)] = float(g[cs_column(T_RA_ESTIMATOR)].dropna().mean())
            uniform.append(float(g[cs_column(UNIFORM)].dropna().mean()))
            for e in T_RA_BLIND:
                other.setdefault((e, int(seed)), []).append(g[cs_column(e)].to_numpy(dtype=float))
    if not cs:
        return {"values": []}
    values = sorted(cs)
    common = sorted(set.intersection(*(set(cs[v]) for v in values)))
    on_common = {v: float(np.mean([cs[v][s] for s in common])) for v in values}
    on_own = {v: float(np.mean(list(cs[v].values()))) for v in values}
    def falls(means: dict[float, float]) -> list[tuple[float, float, float, float]]:
        return [(a, b, means[a], means[b]) for a, b in zip(values, values[1:]) if means[b] <= means[a]]
    seed_falls = {s: falls({v: cs[v][s] for v in values}) for s in common}
    extra = {v: sorted(set(cs[v]) - set(common)) for v in values if set(cs[v]) - set(common)}
    best = max(values, key=lambda v: on_common[v])
    rank = sorted(values, key=lambda v: -on_common[v]).index(T_RA_DEFAULT[2]) + 1 if T_RA_DEFAULT[2] in values else None
    pub = published()
    pub = pub[(pub.table == "Sup_hyper_T_ra") & (pub.dataset == "mnist") & (pub.metric == "cs_mean")]
    spread = max(float(np.nanmax(np.abs(a - x))) for arrays in other.values() for a in arrays for x in arrays)
    return {"values": values, "cs": cs, "common": common, "on_common": on_common, "on_own": on_own,
            "common_falls": falls(on_common), "own_falls": falls(on_own), "seed_falls": seed_falls, "extra": extra,
            "best": best, "default": T_RA_DEFAULT[2], "rank": rank, "estimator": T_RA_ESTIMATOR,
            "job_max": max(x for d in cs.values() for x in d.values()), "pub_min": float(pub.value.min()),
            "uniform_min": min(uniform), "other_spread": spread, "seed_words": seed_words,
            "blind": ", ".join(f"`{e}`" for e in T_RA_BLIND[:-1]) + f" and `{T_RA_BLIND[-1]}`", "mark": mark}


MISMATCH_GAMMA = 10
"""The global imbalance of the mismatch levels docs/fidelity.md reads (Res_mismatch, claims 24 and 25)."""
ALTERNATION = 0.9
"""A level alternates when at least this share of its jobs' successive Ac.M changes flip sign."""
SWING_ROUNDS = 10
"""The last rounds over which a job's round-to-round swing of Ac.M is measured."""


def swing(acm: pd.Series, last: int = SWING_ROUNDS) -> float:
    """Mean |Ac.M_t - Ac.M_{t-1}| over a job's last ``last`` rounds, in points: how far the final round can sit from
    its neighbours."""
    return float(100 * acm.tail(last + 1).diff().abs().mean())


def flips(acm: pd.Series, last: int | None = SWING_ROUNDS) -> tuple[int, int, int, int]:
    """(k, n, k_moved, n_moved): of the n pairs of successive round-to-round changes of Ac.M in a job's last ``last``
    rounds (every round when None), k change sign (up then down, or down then up: k = n is a strict alternation, k ≈ n/2
    a random walk); n_moved of the pairs have Ac.M move both times, k_moved of those change sign."""
    a = acm.to_numpy() if last is None else acm.tail(last + 1).to_numpy()
    d = np.sign(np.diff(a))
    flip = d[1:] * d[:-1] < 0
    moved = (d[1:] != 0) & (d[:-1] != 0)
    return int(flip.sum()), len(flip), int(flip[moved].sum()), int(moved.sum())


def seed_words(seeds: list[int] | tuple[int, ...]) -> str:
    """'seed 0' or 'seeds 0, 1, 2'."""
    return ("seed " if len(seeds) == 1 else "seeds ") + ", ".join(str(s) for s in seeds)


def by_loss(jobs: list[dict[str, Any]], names: dict[str, str]) -> list[str]:
    """'CE seeds 0, 1, 2 (9, 9, 8 of 9)' per loss of ``jobs`` (dicts with 'loss', 'seed', 'k', 'n'), in the order of
    ``names``."""
    out = []
    for loss in names:
        js = sorted((j for j in jobs if j["loss"] == loss), key=lambda j: j["seed"])
        if js:
            n = sorted({j["n"] for j in js})
            out.append(f"{names[loss]} {seed_words([j['seed'] for j in js])} ({', '.join(str(j['k']) for j in js)} of "
                       f"{', '.join(str(x) for x in n)})")
    return out


def mismatch_context(final: pd.DataFrame, rounds: pd.DataFrame, gamma: int = MISMATCH_GAMMA) -> dict[str, Any]:
    """The mismatch family at Γ = ``gamma``, level by level (classes per client, most first): each loss's final Ac.M
    over seeds beside its Sup_data_MNIST cell (where the paper prints the level), the mean of the last five rounds,
    the round-to-round swing, whether Ac.M falls with the classes per client, and the collapsed Ratio rounds."""
    f = final[(final.experiment == "mismatch") & (final.dataset == "mnist")
              & final.setting.map(lambda s: setting_value(s, "g") == gamma)].sort_values("seed")
    f, common, dropped = like_seeds(f, ["setting", "loss"])
    r = rounds[(rounds.experiment == "mismatch") & rounds.setting.isin(set(f.setting))]
    pub = published()
    pub = pub[(pub.table == "Sup_data_MNIST") & (pub.metric == "acm")]
    column = dict(GAMMAS)
    label = next(lab for lab, g in column.items() if g == gamma)
    paper_cs = dict(CS_LEVELS[OWN_Q["mnist"]])
    levels = []
    for c in sorted({int(setting_value(s, "c")) for s in f.setting}, reverse=True):
        setting = setting_name(("c", c), ("g", gamma))
        sub = f[f.setting == setting]
        rows = []
        for loss in [x for x in FOUR_LOSSES if x in set(sub.loss)]:
            g = sub[sub.loss == loss]
            acm = 100 * g.acc_minority.to_numpy()
            std = float(np.std(acm, ddof=1)) if len(acm) > 1 else math.nan
            sel = pub[(pub.column == f"{paper_cs[c]}/{label}") & (pub.row == loss)]
            paper = float(sel.value.iloc[0]) if len(sel) else math.nan
            jobs = [job_rounds(r, "mismatch", setting, loss, int(s)) for s in g.seed]
            rows.append({"loss": loss, "seeds": len(acm), "mean": float(acm.mean()), "std": std,
                         "mark": seed_mark(f"mismatch {c}", g.seed, common),
                         "pm": plus_minus(float(acm.mean()), std, 2), "values": ", ".join(_fmt(float(v)) for v in acm),
                         "last5": float(np.mean([100 * j.acc_minority.tail(5).mean() for j in jobs])),
                         "swing": float(np.mean([swing(j.acc_minority) for j in jobs])),
                         "paper": paper, "verdict": paper_verdict(float(acm.mean()), std, len(acm), paper)})
        best = max(rows, key=lambda x: x["mean"])["loss"]
        best5 = max(rows, key=lambda x: x["last5"])["loss"]
        jobs = []
        for j in sub.itertuples():
            acm = job_rounds(r, "mismatch", setting, j.loss, int(j.seed)).acc_minority
            k, n, _, _ = flips(acm)
            ka, na, km, nm = flips(acm, None)
            jobs.append({"loss": j.loss, "seed": int(j.seed), "k": k, "n": n, "k_all": ka, "n_all": na, "k_moved": km,
                         "n_moved": nm, "still": int((acm.tail(SWING_ROUNDS + 1).diff().dropna() == 0).sum()),
                         "alternates": bool(n) and k >= ALTERNATION * n})
        jobs.sort(key=lambda j: (FOUR_LOSSES.index(j["loss"]), j["seed"]))
        alt = [j for j in jobs if j["alternates"]]
        spread = []
        for row in rows:
            g = sub[sub.loss == row["loss"]]
            if len(g) > 1:
                five = [100 * job_rounds(r, "mismatch", setting, row["loss"], int(s)).acc_minority.tail(5).mean() for s in g.seed]
                spread.append({"loss": row["loss"], "final": row["std"], "last5": float(np.std(five, ddof=1))})
        window = job_rounds(r, "mismatch", setting, sub.loss.iloc[0], int(sub.seed.iloc[0]))["round"]
        levels.append({"c": c, "setting": setting, "paper_cs": paper_cs[c], "cs": float(sub.mean_cs.mean()),
                       "rows": rows, "best": best, "best5": best5, "jobs": jobs,
                       "flips": [sum(j["k"] for j in jobs if j["loss"] != "ratio"), sum(j["n"] for j in jobs if j["loss"] != "ratio")],
                       "flips_ratio": [sum(j["k"] for j in jobs if j["loss"] == "ratio"), sum(j["n"] for j in jobs if j["loss"] == "ratio")],
                       "alt": alt, "alt_names": by_loss(alt, LOSS_NAME),
                       "steady": [j for j in jobs if not j["alternates"]],
                       "alt_all": [sum(j["k_all"] for j in alt), sum(j["n_all"] for j in alt)],
                       "alt_moved": [sum(j["k_moved"] for j in alt), sum(j["n_moved"] for j in alt)],
                       "window": (int(window.iloc[-SWING_ROUNDS - 1]), int(window.iloc[-1])),
                       "rounds": (int(window.iloc[0]), int(window.iloc[-1])),
                       "steadier": [x for x in spread if x["last5"] < x["final"]],
                       "not_steadier": [x for x in spread if x["last5"] >= x["final"]]})
    falls, falls5 = {}, {}
    for loss in FOUR_LOSSES:
        per = [row for lv in levels for row in lv["rows"] if row["loss"] == loss]
        if len(per) > 1:
            falls[loss] = all(b["mean"] <= a["mean"] for a, b in zip(per, per[1:]))
            falls5[loss] = all(b["last5"] <= a["last5"] for a, b in zip(per, per[1:]))
    ref = final[(final.experiment == "losses") & (final.setting == gamma_setting(gamma)) & final.loss.isin(FOUR_LOSSES)]
    ref_swing = [swing(job_rounds(rounds, "losses", gamma_setting(gamma), j.loss, int(j.seed)).acc_minority)
                 for j in ref.itertuples()]
    col = collapses(rounds, "mismatch", ("ratio",))
    col = col[col.setting.isin(set(f.setting))]
    by_job = [{"setting": setting, "seed": int(seed), "n": len(g), "first": int(g["round"].min()),
               "last": int(g["round"].max()), "acm_final": float(g.acm_final.iloc[0]),
               **g.loc[g.pi.idxmax(), ["pi", "cls", "role", "round"]].rename({"round": "pi_round"}).to_dict()}
              for (setting, seed), g in col.groupby(["setting", "seed"])]
    def named(d: dict[str, bool], value: bool) -> list[str]:
        return [LOSS_NAME[k] for k in FOUR_LOSSES if d.get(k) is value]

    return {"gamma": gamma, "label": label, "levels": levels, "names": LOSS_NAME, "judged": bool(falls),
            "common": common, "dropped": dropped, "span": seed_span,
            "ALTERNATION": ALTERNATION, "seed_words": seed_words,
            "falls": named(falls, True), "rises": named(falls, False), "falls5": named(falls5, True), "jobs": len(f), "collapses": by_job,
            "losses_swing": float(np.mean(ref_swing)) if ref_swing else math.nan, "losses_jobs": len(ref_swing),
            "swing_rounds": SWING_ROUNDS, "fmt": _fmt, "COLLAPSE": 100 * COLLAPSE, "isnan": math.isnan}


MFE_LOSSES = ("mse", "mfe")
"""Sup_MFE's rows: MSE, and MFE with local knowledge."""
MFE_NAME = {"mse": "MSE", "mfe": "MFE"}


def mfe_context(final: pd.DataFrame, rounds: pd.DataFrame) -> dict[str, Any]:
    """The `mfe` family level by level (classes per client, most first): each loss's final Ac.M over seeds beside its
    Sup_MFE cell, the state of each job's last LATE rounds (``late_state``), the first round whose Ac.M reaches AT_ZERO,
    and the std over seeds of the final Ac.M."""
    f = final[(final.experiment == "mfe") & (final.dataset == "mnist")].sort_values("seed")
    f, common, dropped = like_seeds(f, ["setting", "loss"])
    pub = published()
    pub = pub[(pub.table == "Sup_MFE") & (pub.dataset == "mnist") & (pub.metric == "acm")]
    paper_cs = dict(CS_LEVELS[OWN_Q["mnist"]])
    levels, jobs = [], []
    for c in sorted({int(setting_value(s, "c")) for s in f.setting}, reverse=True):
        setting = setting_name(("c", c))
        rows = []
        for loss in [x for x in MFE_LOSSES if x in set(f[f.setting == setting].loss)]:
            g = f[(f.setting == setting) & (f.loss == loss)]
            acm = 100 * g.acc_minority.to_numpy()
            std = float(np.std(acm, ddof=1)) if len(acm) > 1 else math.nan
            sel = pub[(pub.column == paper_cs[c]) & (pub.row == loss)]
            paper = float(sel.value.iloc[0]) if len(sel) else math.nan
            states = []
            for s in g.seed:
                jr = job_rounds(rounds, "mfe", setting, loss, int(s))
                a = 100 * jr.acc_minority.to_numpy()
                above = jr["round"][a >= AT_ZERO]
                st = {"c": c, "loss": loss, "seed": int(s), **late_state(a),
                      "first": int(above.iloc[0]) if len(above) else None}
                states.append(st)
                jobs.append(st)
            window = job_rounds(rounds, "mfe", setting, loss, int(g.seed.iloc[0]))["round"]
            rows.append({"loss": loss, "seeds": len(acm), "mean": float(acm.mean()), "std": std,
                         "mark": seed_mark(f"mfe {c}", g.seed, common),
                         "pm": plus_minus(float(acm.mean()), std, 2), "values": ", ".join(_fmt(float(v)) for v in acm),
                         "paper": paper, "gap": float(acm.mean()) - paper, "states": states})
        levels.append({"c": c, "paper_cs": paper_cs[c], "rows": rows, "rounds": (int(window.iloc[-LATE]), int(window.iloc[-1]))})
    by = {loss: state_groups([j for j in jobs if j["loss"] == loss], "c") for loss in MFE_LOSSES}
    std = {lv["c"]: {row["loss"]: row["std"] for row in lv["rows"]} for lv in levels}
    both = [c for c in std if all(x in std[c] for x in MFE_LOSSES)]
    paper_gap = [abs(lv["rows"][0]["paper"] - lv["rows"][1]["paper"]) for lv in levels if len(lv["rows"]) == 2]
    return {"levels": levels, "names": MFE_NAME, "by_state": by, "common": common, "dropped": dropped, "span": seed_span, "late": LATE, "settled": SETTLED, "at_zero": AT_ZERO,
            "rising": RISING, "wider": [c for c in both if std[c]["mse"] > std[c]["mfe"]],
            "narrower": [c for c in both if std[c]["mse"] <= std[c]["mfe"]], "std": std,
            "paper_gap": max(paper_gap) if paper_gap else math.nan, "fmt": _fmt, "isnan": math.isnan,
            "seed_words": seed_words}


def auc_context() -> dict[str, Any]:
    """The published cells the closed form fits, with the dataset's own Q and with the released code's 26."""
    hits, n = implied_below()
    return {"own": auc_fits(), "q26": auc_fits(RELEASED_Q), "tol": AUC_TOLERANCE, "q": RELEASED_Q,
            "implied": {"hits": hits, "n": n}}


def wall_minutes(minutes: np.ndarray) -> dict[str, Any]:
    """Jobs, median, quartiles (linear interpolation) and max of wall times given in minutes."""
    q1, med, q3 = (float(v) for v in np.percentile(minutes, [25, 50, 75]))
    return {"jobs": len(minutes), "median": med, "q1": q1, "q3": q3, "max": float(minutes.max())}


def job_time_context(jobs: pd.DataFrame) -> dict[str, Any]:
    """The wall times (minutes) of a set's trained jobs per family and over all, the CPU jobs apart from each other
    device's (CPU first, families in the order of their first job), with the CPU jobs' torch threads and host cores.
    ``jobs``: one row a job (``refdocs.job_times_frame``): experiment, device, wall_time_s, derived, branched, threads,
    cores, process_wall_s, process_cpu_s. A derived job (its source's wall time) is left out; a branched job counts
    whole (``run_job``: its wall time holds its source's to the round it branched at). ``core_share``: over the CPU
    jobs whose record has its process's CPU seconds, the median of CPU seconds / (wall seconds x torch threads), in
    per cent: 100 when each thread had a core all the time, less when other work shared the cores."""
    trained = jobs[~jobs.derived.astype(bool)]
    f = trained.dropna(subset=["wall_time_s"]).assign(minutes=lambda d: d.wall_time_s.astype(float) / 60)
    cpu = trained[trained.device == "cpu"]
    groups = [{"device": device, "all": wall_minutes(on.minutes.to_numpy(float)),
               "rows": [{"experiment": e, **wall_minutes(g.minutes.to_numpy(float))}
                        for e, g in on.groupby("experiment", sort=False)]}
              for device, on in f.groupby("device", sort=False)]
    groups.sort(key=lambda g: g["device"] != "cpu")
    timed = cpu.dropna(subset=["process_wall_s", "process_cpu_s"])
    timed = timed[timed.process_wall_s.astype(float) > 0]
    shares = (100 * timed.process_cpu_s.astype(float)
              / (timed.process_wall_s.astype(float) * timed.threads.fillna(1).astype(float).clip(lower=1)))
    core_share = {"jobs": len(shares), "median": float(shares.median())} if len(shares) else None
    return {"groups": groups, "core_share": core_share, "cpu": next((g["all"] for g in groups if g["device"] == "cpu"), None),
            "derived": int(jobs.derived.astype(bool).sum()), "branched": int(trained.branched.astype(bool).sum()),
            "without": len(trained) - len(f), "threads": sorted(set(cpu.threads.dropna().astype(int))),
            "cores": sorted(set(cpu.cores.dropna().astype(int)))}


TEMPLATES = {
    "seeds": ("fidelity.md", "seeds.md.j2"),
    "collapses": ("ratio-stability.md", "collapses.md.j2"),
    "shrunk-evidence": ("monitor.md", "shrunk_evidence.md.j2"),
    "auc-fits": ("fidelity.md", "auc_fits.md.j2"),
    "sweep-collapses": ("fidelity.md", "sweep_collapses.md.j2"),
    "mismatch": ("fidelity.md", "mismatch.md.j2"),
    "early": ("fidelity.md", "early.md.j2"),
    "mfe": ("fidelity.md", "mfe.md.j2"),
    "sweep-slopes": ("fidelity.md", "sweep_slopes.md.j2"),
    "t-ra": ("fidelity.md", "t_ra.md.j2"),
    "centralised-collapses": ("deviations.md", "centralised_collapses.md.j2"),
}
"""Block name -> (the page of docs/ it is spliced into, its template)."""


def blocks(reference: str | Path) -> dict[str, tuple[str, str]]:
    """Block name -> (page of docs/, generated Markdown) for every generated prose block, from the set's job folders."""
    final, rounds = reference_frames(reference)
    seeds = seeds_context(final, rounds)
    contexts = {"seeds": seeds, "collapses": seeds, "shrunk-evidence": shrinkage_context(rounds), "auc-fits": auc_context(),
                "sweep-collapses": sweep_context(final, rounds), "mismatch": mismatch_context(final, rounds),
                "early": early_context(final, rounds, reference), "mfe": mfe_context(final, rounds),
                "sweep-slopes": sweep_slope_context(final, rounds), "t-ra": t_ra_context(final, rounds),
                "centralised-collapses": centralised_context(final, rounds)}
    return {name: (page, render(template, contexts[name])) for name, (page, template) in TEMPLATES.items()}


def render(template: str, context: dict[str, Any]) -> str:
    """One template of ``templates/prose/`` filled with ``context`` (a ``*_context`` function's)."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TABLE_TEMPLATES / "prose")),
                             keep_trailing_newline=True, undefined=jinja2.StrictUndefined)
    return env.get_template(template).render(**context).strip() + "\n"
