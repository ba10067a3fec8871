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

from fedbalance.records import plus_minus
from fedbalance.seedstats import mean_interval
from fedbalance.presentation.names import DATASET_NAME, DATASETS, GAMMAS, PLAIN_METRIC, Read, gamma_setting
from fedbalance.presentation.tables import fmt, published

TABLE_OF = {"mnist": "Res_3_datasets", "cifar10": "Res_3_datasets", "fer2013": "Res_3_datasets", "femnist": "FL_FEMNIST"}
COLUMNS = [
    "dataset", "setting", "loss", "seeds", "acm_final", "acm_std", "acm_last", "acm_best", "best_round", "paper_acm",
    "acm_verdict", "acm_interval", "auc_final", "auc_std", "auc_last", "paper_auc", "auc_micro_final", "wall_time_min", "minutes",
]
READS: tuple[Read, ...] = (Read("losses", by="Fidelity"),)
"""The jobs the fidelity table reads (``fedbalance.presentation.contract``)."""
WIDTH = {"acm": 5.0, "acc_majority": 5.0, "auc": 0.02, "cs": 0.02, "cs_mean": 0.01}
"""The widest 95 % interval of our mean (in the metric's printed units: points of Ac.M and Ac., AUC and CS as
fractions) that can call a published value "inside": a wider one cannot tell it from values far away."""
RELATIVE_WIDTH = {"cs_var": 0.5}
"""Metrics whose interval may be at most this share of our mean wide (the CS variance spans orders of magnitude)."""
UNDETERMINED = "undetermined"


def widest(metric: str, mean: float) -> float:
    """The widest interval of ``metric`` that can call a published value inside (``WIDTH``, ``RELATIVE_WIDTH``)."""
    return RELATIVE_WIDTH[metric] * abs(mean) if metric in RELATIVE_WIDTH else WIDTH[metric]


def paper_verdict(mean: float, std: float, seeds: int, paper: float, metric: str = "acm") -> str:
    """Where the published value lies against our seeds' 95 % interval of the mean (``mean_interval``): "above" or
    "below" it; "inside" it when the interval is also narrower than ``widest`` (else "undetermined": the interval is
    too wide to tell); "one seed" without a spread."""
    if math.isnan(paper):
        return "not published"
    if seeds < 2 or math.isnan(std):
        return "one seed"
    low, high = mean_interval(mean, std, seeds)
    if paper > high:
        return "above"
    if paper < low:
        return "below"
    return "inside" if high - low <= widest(metric, mean) else UNDETERMINED


VERDICT_RULE = (
    "a published value is *inside* when it lies in the 95 % interval of our mean over seeds (Student t) and that "
    "interval is narrower than 5 points (Ac.M, Ac.), 0.02 (AUC, CS), 0.01 (mean CS) or half our mean (CS variance); "
    "*undetermined* when it lies in a wider one (the interval printed); *above* or *below* when it lies outside it; "
    "'one seed' has no interval."
)
"""The fidelity and reproduction verdicts' rule, in the words the tables print under them (``paper_verdict``)."""


WHERE = {
    "inside": "inside the 95 % interval",
    UNDETERMINED: "inside a 95 % interval too wide to tell (undetermined)",
    "above": "above the 95 % interval",
    "below": "below the 95 % interval",
    "one seed": "beside a single seed (no interval)",
    "not published": "not published",
}
"""A verdict (``paper_verdict``) as a sentence says where the published value lies: "the published cell is {WHERE} of
our mean"."""


def verdict_text(verdict: str, interval: str) -> str:
    """A verdict as the tables print it: an undetermined one with the interval that could not tell."""
    return f"{verdict}: ours spans {interval}" if verdict == UNDETERMINED else verdict


def interval_text(mean: float, std: float, seeds: int, metric: str) -> str:
    """Our 95 % interval as printed ("[80.1, 93.4]"), or "–" without one."""
    if seeds < 2 or math.isnan(std):
        return "–"
    low, high = mean_interval(mean, std, seeds)
    return f"[{fmt(low, metric)}, {fmt(high, metric)}]"


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

    ``final``/``rounds`` are ``fedbalance.aggregate`` frames; values are means over seeds. ``base``
    maps a loss variant (e.g. ``ratio_rel``) to the loss whose published number it is compared
    with. ``best_round`` is the round (0-based) of the best mean Ac.M. Rows run in the paper's order:
    dataset, then Γ (balanced first), then loss.
    """
    base = dict(base or {})
    pub = published() if pub is None else pub
    column = {gamma_setting(g): label for label, g in GAMMAS}
    f = final[final.experiment == experiment]
    r = rounds[rounds.experiment == experiment]
    out = []
    for (d, s, loss), grp in f.groupby(["dataset", "setting", "loss"], sort=True):
        rr = r[(r.dataset == d) & (r.setting == s) & (r.loss == loss)]
        per_round = rr.groupby("round")[["acc_minority", "auc_hard"]].mean().sort_index()
        tail = per_round.tail(last)
        key = (TABLE_OF.get(d), d, column.get(s), base.get(loss, loss))
        paper = {m: pub[(pub.table == key[0]) & (pub.metric == m) & (pub.dataset == d) & (pub.column == key[2])
                        & (pub.row == key[3])].value for m in ("acm", "auc")}
        acm_std = 100 * grp.acc_minority.std(ddof=1) if len(grp) > 1 else float("nan")
        paper_acm = float(paper["acm"].iloc[0]) if len(paper["acm"]) else float("nan")
        out.append({
            "dataset": d, "setting": s, "loss": loss, "seeds": len(grp),
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


def fidelity_markdown(frame: pd.DataFrame) -> str:
    """The frame as a Markdown table (Ac.M in %, two decimals, mean ± std over seeds; AUC four)."""
    head = ("| dataset | Γ | loss | seeds | Ac.M final | paper Ac.M | paper vs our 95 % interval | Ac.M last 5 | "
            "Ac.M best (round) | AUC (hard) final | paper AUC | AUC last 5 | score AUC | min/job |")
    lines = [head, "|" + "---|" * 14]
    for row in frame.itertuples(index=False):
        lines.append(
            f"| {row.dataset} | {row.setting} | {row.loss} | {row.seeds} | {plus_minus(row.acm_final, row.acm_std, 2)} | "
            f"{row.paper_acm:.2f} | {verdict_text(row.acm_verdict, row.acm_interval)} | {row.acm_last:.2f} | {row.acm_best:.2f} ({row.best_round}) | "
            f"{plus_minus(row.auc_final, row.auc_std, 4)} | {row.paper_auc:.4f} | {row.auc_last:.4f} | "
            f"{row.auc_micro_final:.4f} | {row.minutes} |"
        )
    return "\n".join(lines) + (
        f"\n\nAc.M and AUC: mean ± std over seeds of the final round. 'paper vs our 95 % interval': {VERDICT_RULE} "
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
    "one seed": "one seed, no interval",
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
    what = f"{row['row']} {row['column']}" + (f" {PLAIN_METRIC.get(row['metric'], row['metric'])}" if several_metrics else "")
    m = row["metric"]
    ours = fmt(row["ours_mean"], m) + (f" ± {fmt(row['ours_std'], m)}" if row["n_seeds"] > 1 else "")
    return f"{what} (ours {ours} vs {fmt(row['paper'], m)})"


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
                 f"({seeds[0] if len(seeds) == 1 else f'{seeds[0]}–{seeds[-1]}'} seeds)"]
        for verdict, say in REPRODUCTION_SAYS.items():
            k = int(counts.get(verdict, 0))
            if not k:
                continue
            text = f"{say}: {k}"
            if verdict in ("above", "below"):
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
            lines.append(f"- **{table}**: {k} cells run; the paper publishes none of this dataset.")
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
