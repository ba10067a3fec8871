"""Regenerated loss-comparison cells beside the published ones: final round, mean of the last rounds, best.

The paper's tables report one number per cell; the released code evaluates the global model once,
after the last round (``main_nn.py``: ``test_img`` after the training loop), so the comparable
number is the final round's. Because single runs move by several points between late rounds,
``fidelity_frame`` also gives the mean of the last ``last`` rounds and the best round.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from pathlib import Path

import pandas as pd

from fedbalance.common.records import plus_minus
from fedbalance.evidence.seedstats import Ranged, ranged_interval, seed_mark, seed_span
from fedbalance.presentation.names import (
    DATASET_NAME, DATASETS, GAMMAS, METRIC_RANGE, PLAIN_METRIC, READING_NAME, Read, gamma_setting,
)
from fedbalance.presentation.tables import TABLES, fmt, published

TABLE_OF = {"mnist": "Res_3_datasets", "cifar10": "Res_3_datasets", "fer2013": "Res_3_datasets", "femnist": "FL_FEMNIST"}
COLUMNS = [
    "dataset", "setting", "loss", "seeds", "seed_ids", "held", "acm_final", "acm_std", "acm_last", "acm_best",
    "best_round", "paper_acm", "acm_verdict", "acm_interval", "auc_final", "auc_std", "auc_last", "paper_auc",
    "auc_micro_final", "wall_time_min", "minutes",
]
READS: tuple[Read, ...] = (Read("losses", by="Fidelity"),)
"""The jobs the fidelity table reads (``fedbalance.presentation.contract``)."""
WIDTH = {"acm": 5.0, "acc_majority": 5.0, "auc": 0.02, "cs": 0.02, "cs_mean": 0.01}
"""The widest 95 % interval of our mean (in the metric's printed units: points of Ac.M and Ac., AUC and CS as
fractions) that can call a published value "inside": a wider one cannot tell it from values far away."""
RELATIVE_WIDTH = {"cs_var": 0.5}
"""Metrics whose interval may be at most this share of our mean wide (the CS variance spans orders of magnitude)."""
LOG_SCALE = frozenset({"cs_var"})
"""Metrics whose interval is computed on the log scale (a variance: positive, multiplicative)."""
UNDETERMINED = "undetermined"
NO_SPREAD = "no spread"
"""The verdict of a cell whose seeds all hold the published value itself: no interval, and nothing to tell apart."""
ABOVE_EVERY, BELOW_EVERY = "above every seed", "below every seed"
"""The verdicts of a cell whose seeds all hold one value and the published value lies above (below) it: every seed on
one side of the published value, a call without an interval."""


def widest(metric: str, mean: float) -> float:
    """The widest interval of ``metric`` that can call a published value inside (``WIDTH``, ``RELATIVE_WIDTH``)."""
    return RELATIVE_WIDTH[metric] * abs(mean) if metric in RELATIVE_WIDTH else WIDTH[metric]


def our_interval(mean: float, std: float, seeds: int, metric: str) -> Ranged:
    """Our 95 % interval of a mean over ``seeds`` seeds, inside the metric's range (``names.METRIC_RANGE``; clipped
    and marked), the CS variance's on the log scale (``seedstats.ranged_interval``)."""
    lower, upper = METRIC_RANGE.get(metric, (-math.inf, math.inf))
    return ranged_interval(mean, std, seeds, lower, upper, log=metric in LOG_SCALE)


def paper_verdict(mean: float, std: float, seeds: int, paper: float, metric: str = "acm") -> str:
    """Where the published value lies against our seeds' 95 % interval of the mean (``our_interval``): "above" or
    "below" it; "inside" it when the interval is also narrower than ``widest`` (else "undetermined": the interval is
    too wide to tell); "one seed" without a spread. Seeds that all hold one value have no interval: the published
    value is ``ABOVE_EVERY`` or ``BELOW_EVERY`` seed when it differs from that value in the metric's printed
    precision, else ``NO_SPREAD``."""
    if math.isnan(paper):
        return "not published"
    if seeds < 2 or math.isnan(std):
        return "one seed"
    ci = our_interval(mean, std, seeds, metric)
    if not ci.spread:
        if fmt(paper, metric) == fmt(mean, metric):
            return NO_SPREAD
        return ABOVE_EVERY if paper > mean else BELOW_EVERY
    if paper > ci.high:
        return "above"
    if paper < ci.low:
        return "below"
    return "inside" if ci.high - ci.low <= widest(metric, mean) else UNDETERMINED


VERDICT_RULE = (
    "a published value is *inside* when it lies in the 95 % interval of our mean over seeds (Student t) and that "
    "interval is narrower than 5 points (Ac.M, Ac.), 0.02 (AUC, CS), 0.01 (mean CS) or half our mean (CS variance); "
    "*undetermined* when it lies in a wider one (the interval printed); *above* or *below* when it lies outside it; "
    "'one seed' has no interval, nor has a cell whose seeds all hold the same value: the published value is then "
    "*above every seed* or *below every seed* (every seed on one side of it), or 'no spread' when it is that value "
    "(the value on every seed is printed). An interval is reported inside the metric's range (0–100 % for an accuracy, 0–1 for AUC and "
    "CS: an end cut there is marked 'clipped'); the CS variance's is computed on the log scale "
    "(mean · exp(± t · std / (mean √n)), never below zero)."
)
"""The fidelity and reproduction verdicts' rule, in the words the tables print under them (``paper_verdict``)."""


WHERE = {
    "inside": "inside the 95 % interval",
    UNDETERMINED: "inside a 95 % interval too wide to tell (undetermined)",
    "above": "above the 95 % interval",
    "below": "below the 95 % interval",
    "one seed": "beside a single seed (no interval)",
    NO_SPREAD: "the value of every seed (no interval)",
    ABOVE_EVERY: "above every seed (all at one value, no interval)",
    BELOW_EVERY: "below every seed (all at one value, no interval)",
    "not published": "not published",
}
"""A verdict (``paper_verdict``) as a sentence says where the published value lies: "the published cell is {WHERE} of
our mean"."""


def verdict_text(verdict: str, interval: str) -> str:
    """A verdict as the tables print it: an undetermined one with the interval that could not tell, a cell without
    spread with its value on every seed."""
    return f"{verdict}: ours spans {interval}" if verdict == UNDETERMINED else (
        f"{verdict}: {interval}" if verdict in (NO_SPREAD, ABOVE_EVERY, BELOW_EVERY) else verdict)


def _range_text(metric: str) -> str:
    lower, upper = METRIC_RANGE[metric]
    return f"{lower:g}–{upper:g}"


def interval_text(mean: float, std: float, seeds: int, metric: str) -> str:
    """Our 95 % interval as printed ("[80.10, 93.40]", "[0.00, 59.55] (clipped to 0–100)"), "0.00 on every seed"
    without spread, or "–" without one."""
    if seeds < 2 or math.isnan(std):
        return "–"
    ci = our_interval(mean, std, seeds, metric)
    if not ci.spread:
        return f"{fmt(mean, metric)} on every seed"
    return f"[{fmt(ci.low, metric)}, {fmt(ci.high, metric)}]" + (f" (clipped to {_range_text(metric)})" if ci.clipped else "")


def common_seeds(frame: pd.DataFrame, by: list[str], within: list[str]) -> tuple[pd.DataFrame, dict[tuple, list[int]]]:
    """``frame`` (one row per job) kept, in each group of ``by``, to the seeds every group of ``within`` inside it
    holds: the cells set side by side there are read on the same seeds. Also, per cell (``by`` + ``within``), the
    seeds it holds that are not read."""
    keep, dropped = [], {}
    for _, group in frame.groupby(by, sort=False):
        cells = {k if isinstance(k, tuple) else (k,): set(g.seed) for k, g in group.groupby(by + within, sort=False)}
        common = set.intersection(*cells.values())
        keep.append(group[group.seed.isin(common)])
        dropped.update({k: sorted(v - common) for k, v in cells.items() if v - common})
    return (pd.concat(keep) if keep else frame.iloc[:0]), dropped


def reading_name(loss: str) -> str:
    """A loss as the pages name it: a reading of the Ratio Loss with its reading ("ratio (paper reading)")."""
    return f"{loss} ({READING_NAME[loss]})" if loss in READING_NAME else loss


def fidelity_frame(
    final: pd.DataFrame,
    rounds: pd.DataFrame,
    *,
    experiment: str = "losses",
    last: int = 5,
    base: Mapping[str, str] | None = None,
    pub: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """One row per (dataset, setting, loss) of ``experiment``: Ac.M (%) and AUC (hard) beside the paper's.

    ``final``/``rounds`` are ``fedbalance.jobs.aggregate`` frames; values are means over seeds, on the seeds every loss of
    the (dataset, setting) holds (``common_seeds``: ``seed_ids``; ``held``, the seeds the cell holds). ``base``
    maps a loss variant (e.g. ``ratio_rel``) to the loss whose published number it is compared
    with. ``best_round`` is the round (0-based) of the best mean Ac.M. Rows run in the paper's order:
    dataset, then Γ (balanced first), then loss.
    """
    base = dict(base or {})
    pub = published() if pub is None else pub
    column = {gamma_setting(g): label for label, g in GAMMAS}
    every = final[final.experiment == experiment]
    held = every.groupby(["dataset", "setting", "loss"]).seed.nunique().to_dict()
    f, _ = common_seeds(every, ["dataset", "setting"], ["loss"])
    r = rounds[rounds.experiment == experiment]
    out = []
    for (d, s, loss), grp in f.groupby(["dataset", "setting", "loss"], sort=True):
        rr = r[(r.dataset == d) & (r.setting == s) & (r.loss == loss) & r.seed.isin(set(grp.seed))]
        per_round = rr.groupby("round")[["acc_minority", "auc_hard"]].mean().sort_index()
        tail = per_round.tail(last)
        key = (TABLE_OF.get(d), d, column.get(s), base.get(loss, loss))
        paper = {m: pub[(pub.table == key[0]) & (pub.metric == m) & (pub.dataset == d) & (pub.column == key[2])
                        & (pub.row == key[3])].value for m in ("acm", "auc")}
        acm_std = 100 * grp.acc_minority.std(ddof=1) if len(grp) > 1 else float("nan")
        paper_acm = float(paper["acm"].iloc[0]) if len(paper["acm"]) else float("nan")
        out.append({
            "dataset": d, "setting": s, "loss": loss, "seeds": len(grp),
            "seed_ids": ",".join(str(int(x)) for x in sorted(grp.seed)), "held": int(held[(d, s, loss)]),
            "acm_final": 100 * grp.acc_minority.mean(), "acm_std": acm_std, "acm_last": 100 * tail.acc_minority.mean(),
            "acm_best": 100 * per_round.acc_minority.max(), "best_round": int(per_round.acc_minority.idxmax()),
            "paper_acm": paper_acm,
            "acm_verdict": paper_verdict(100 * grp.acc_minority.mean(), acm_std, len(grp), paper_acm, "acm"),
            "acm_interval": interval_text(100 * grp.acc_minority.mean(), acm_std, len(grp), "acm"),
            "auc_final": grp.auc_hard.mean(), "auc_std": grp.auc_hard.std(ddof=1) if len(grp) > 1 else float("nan"),
            "auc_last": tail.auc_hard.mean(),
            "paper_auc": float(paper["auc"].iloc[0]) if len(paper["auc"]) else float("nan"),
            "auc_micro_final": grp.auc_micro.mean(), "wall_time_min": grp.wall_time_s.mean() / 60,
            "minutes": minutes_by_device(grp),
        })
    order = {"dataset": list(DATASETS), "setting": [gamma_setting(g) for _, g in GAMMAS]}
    out.sort(key=lambda row: (*(_rank(order[k], row[k]) for k in ("dataset", "setting")), row["loss"]))
    return pd.DataFrame(out, columns=COLUMNS)


def minutes_by_device(jobs: pd.DataFrame) -> str:
    """Mean minutes a job, per device when the jobs ran on several ("cpu 17.0, cuda 3.9"; "cuda (NVIDIA H200)" is "cuda")."""
    if "device" not in jobs or jobs.device.fillna("").nunique() < 2:
        return f"{jobs.wall_time_s.mean() / 60:.1f}"
    kind = jobs.device.fillna("").astype(str).str.split(" (", n=1, regex=False).str[0].replace("", "unknown")
    return ", ".join(f"{d} {w.mean() / 60:.1f}" for d, w in jobs.wall_time_s.groupby(kind, sort=True))


def _rank(known: list[str], value: str) -> tuple[int, str]:
    """Sort key: the paper's order for known names (datasets; Γ, balanced first), the rest after them by name."""
    return (known.index(value), "") if value in known else (len(known), value)


def _seeds_cell(row: object, common: str) -> str:
    """A row's seeds as the table prints them: how many and which ("3 (0–2)"), its mark (``seedstats.seed_mark``:
    the row's seeds beside those its Γ shares) and, where the cell holds more, how many are not read."""
    ids = [int(x) for x in str(row.seed_ids).split(",") if x]
    extra = row.held - row.seeds
    note = f"; {extra} more held, not read: not every loss of this Γ holds {'it' if extra == 1 else 'them'}" if extra else ""
    return (f"{row.seeds} ({seed_span(ids)}{note})"
            + seed_mark(f"Fidelity {row.dataset} {row.setting}", ids, [int(x) for x in common.split(",") if x]))


def fidelity_markdown(frame: pd.DataFrame) -> str:
    """The frame as a Markdown table (Ac.M in %, two decimals, mean ± std over seeds; AUC four), each reading of the
    Ratio Loss named, each row's seeds listed."""
    head = ("| dataset | Γ | loss | seeds | Ac.M final | paper Ac.M | paper vs our 95 % interval | Ac.M last 5 | "
            "Ac.M best (round) | AUC (hard) final | paper AUC | AUC last 5 | score AUC | min/job |")
    lines = [head, "|" + "---|" * 14]
    common = {k: ",".join(str(x) for x in sorted(set.intersection(*(set(int(y) for y in ids.split(",") if y)
                                                                    for ids in g.seed_ids))))
              for k, g in frame.groupby(["dataset", "setting"])} if len(frame) else {}
    for row in frame.itertuples(index=False):
        lines.append(
            f"| {row.dataset} | {row.setting} | {reading_name(row.loss)} | {_seeds_cell(row, common[(row.dataset, row.setting)])} | "
            f"{plus_minus(row.acm_final, row.acm_std, 2)} | "
            f"{row.paper_acm:.2f} | {verdict_text(row.acm_verdict, row.acm_interval)} | {row.acm_last:.2f} | {row.acm_best:.2f} ({row.best_round}) | "
            f"{plus_minus(row.auc_final, row.auc_std, 4)} | {row.paper_auc:.4f} | {row.auc_last:.4f} | "
            f"{row.auc_micro_final:.4f} | {row.minutes} |"
        )
    return "\n".join(lines) + (
        "\n\nEvery row of a Γ is read on the seeds every loss of that Γ holds (seeds: how many and which; a cell's "
        "other seeds are named, not read), so the rows of a Γ are set side by side on like seeds. "
        f"`ratio` is the {READING_NAME['ratio']} of the Ratio Loss (the paper's equation), `ratio_rel` the "
        f"{READING_NAME['ratio_rel']} (the authors' code); both are set beside the published Ratio cell. "
        f"Ac.M and AUC: mean ± std over seeds of the final round. 'paper vs our 95 % interval': {VERDICT_RULE} "
        "AUC (hard) is the micro AUC of one-hot predictions, score AUC that of the softmax scores: which of the two the "
        "paper prints is not established (docs/fidelity.md). min/job: mean minutes a job, per device where the seeds ran on "
        "several.\n"
    )


NOT_RUN = "not run"
REPRODUCTION_SAYS = {
    "inside": "the published value inside our 95 % interval, which is narrow (reproduced)",
    UNDETERMINED: "the published value inside our 95 % interval, but it is too wide to tell (undetermined)",
    "above": "ours lower than the paper's (the published value above our 95 % interval)",
    "below": "ours higher than the paper's (the published value below our 95 % interval)",
    ABOVE_EVERY: "ours lower than the paper's on every seed, all at one value (no interval)",
    BELOW_EVERY: "ours higher than the paper's on every seed, all at one value (no interval)",
    "one seed": "one seed, no interval",
    NO_SPREAD: "ours the published value on every seed, no interval",
    NOT_RUN: "not run",
}
"""Where a published cell lies against our seeds (``paper_verdict``), or that no job of it was run, in the order the
reproduction summary says them, and how it says each."""
LISTED = 3
"""How many cells a reproduction line names per outcome (the largest gaps first)."""


def reproduction_frame(vs: pd.DataFrame, dataset: str = "mnist") -> pd.DataFrame:
    """Every published cell of ``dataset`` in ``vs`` (the ``<label>_vs_paper.csv`` rows of one or more tables): where
    the published value lies against our 95 % interval (``paper_verdict``, or ``NOT_RUN``) and the gap in the metric's
    printed units (``gap``: |paper - ours|)."""
    pub = vs[(vs.dataset == dataset) & vs.paper.notna()].copy()
    n = pub.n_seeds.fillna(0).astype(int)
    pub["verdict"] = [NOT_RUN if k == 0 else paper_verdict(m, s, k, p, metric)
                      for m, s, k, p, metric in zip(pub.ours_mean, pub.ours_std, n, pub.paper, pub.metric)]
    pub["n_seeds"] = n
    pub["gap"] = (pub.paper - pub.ours_mean).abs()
    return pub.reset_index(drop=True)


def _cell(row: pd.Series, several_metrics: bool) -> str:
    what = f"{reading_name(str(row['row']))} {row['column']}" + (
        f" {PLAIN_METRIC.get(row['metric'], row['metric'])}" if several_metrics else "")
    m = row["metric"]
    if row["verdict"] in (NO_SPREAD, ABOVE_EVERY, BELOW_EVERY):
        ours = f"{fmt(row['ours_mean'], m)} on every seed"
    else:
        ours = fmt(row["ours_mean"], m) + (f" ± {fmt(row['ours_std'], m)}" if row["n_seeds"] > 1 else "")
    return f"{what} (ours {ours} vs {fmt(row['paper'], m)})"


def _reads_ratio(table: str) -> bool:
    """Whether a table's cells read the Ratio Loss (its ``ratio`` jobs: the paper reading)."""
    return table in TABLES and any(c.loss == "ratio" for c in TABLES[table].cells)


def reproduction_markdown(frame: pd.DataFrame, unpublished: Mapping[str, int] | None = None) -> str:
    """One bullet per table of ``reproduction_frame``: how many published cells reproduce, where ours is lower or
    higher (the largest gaps named), where one seed cannot tell, and what is not run; ``unpublished``: table ->
    cells we ran that the paper does not publish."""
    unpublished = dict(unpublished or {})
    lines, idle = [], []
    for table, cells in frame.groupby("table", sort=False):
        counts = cells.verdict.value_counts()
        if counts.get(NOT_RUN, 0) == len(cells):
            idle.append(f"{table} ({len(cells)})")
            continue
        several = cells.metric.nunique() > 1
        run = cells[cells.verdict != NOT_RUN]
        seeds = sorted(set(run.n_seeds))
        parts = [f"{len(run)} of its {len(cells)} published cells run "
                 f"({seeds[0] if len(seeds) == 1 else f'{seeds[0]}–{seeds[-1]}'} seed{'' if seeds == [1] else 's'})"
                 + (f"; its Ratio Loss cells are the {READING_NAME['ratio']} (`ratio`"
                    + (f"; the {READING_NAME['ratio_rel']} beside it is in the Fidelity table"
                       if table in TABLE_OF.values() else "") + ")" if _reads_ratio(str(table)) else "")]
        for verdict, say in REPRODUCTION_SAYS.items():
            k = int(counts.get(verdict, 0))
            if not k:
                continue
            text = f"{say}: {k}"
            if verdict in ("above", "below", ABOVE_EVERY, BELOW_EVERY):
                mine = cells[cells.verdict == verdict]
                order = {m: i for i, m in enumerate(dict.fromkeys(cells.metric))}  # the table's first metric first
                top = mine.assign(_m=mine.metric.map(order)).sort_values(["_m", "gap"], ascending=[True, False]).head(LISTED)
                text += (" — largest: " if k > LISTED else " — ") + "; ".join(_cell(r, several) for _, r in top.iterrows())
            parts.append(text)
        if unpublished.get(table, 0):
            parts.append(f"{unpublished[table]} cells run that the paper does not publish")
        lines.append(f"- **{table}**: " + "; ".join(parts) + ".")
    published_tables = set(frame.table)
    for table, k in unpublished.items():
        if table not in published_tables:
            lines.append(f"- **{table}**: {k} cell{'' if k == 1 else 's'} run; the paper publishes none of this dataset.")
    if idle:
        lines.append("- **Not run at all** (published cells): " + ", ".join(idle) + ".")
    return "\n".join(lines) if lines else "- No published cell of this dataset in these tables."


def read_vs_paper(paths: Iterable[str | Path]) -> pd.DataFrame:
    """The ``<label>_vs_paper.csv`` files of ``fedbalance.presentation.tables.write_table``, as one frame (labels as text)."""
    return pd.concat([pd.read_csv(p, dtype={"column": str, "row": str}) for p in paths], ignore_index=True)


def reproduction_summary(vs: pd.DataFrame, datasets: Iterable[str]) -> str:
    """Markdown: per dataset, one bullet per table of where the paper reproduces (``reproduction_markdown``)."""
    out = []
    for d in datasets:
        ran = vs[(vs.dataset == d) & vs.paper.isna() & (vs.n_seeds.fillna(0) > 0)]
        out.append(f"**{DATASET_NAME.get(d, d)}**\n\n"
                   + reproduction_markdown(reproduction_frame(vs, d), ran.groupby("table", sort=False).size().to_dict()))
    return "\n\n".join(out) + (
        f"\n\n{VERDICT_RULE[0].upper()}{VERDICT_RULE[1:]} A cell is one (row, column, metric) of the table as printed; "
        "the largest gaps are the largest in the metric's printed units (points of Ac.M, fractions of AUC; the table's "
        "first metric first), ours given as mean ± std over seeds.\n")
