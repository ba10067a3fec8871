"""The paper's tables regenerated from the tidy frames, beside the published numbers.

One :class:`TableSpec` per paper table (``TABLES``) says which jobs fill each cell. A cell is the
mean over seeds (monitor tables: mean and variance of the per-round CS over rounds and seeds).
Values are kept in the paper's units: Ac.M and Ac. in %, AUC and CS as fractions, CS variance
in 1e-5. Bold rule: the best loss (stage) per column as in the paper (``bold="column"``, max; ties
all bold, compared as printed); sweeps bold the best value of each row (max mean, min variance);
Sup_bs_ep bolds nothing, as the paper. Cells without data print as ``--`` (an en dash).

Outputs of :func:`write_table`: ``<label>.tex``, ``<label>_std.tex``, ``<label>_vs_paper.csv`` and
``<label>_vs_paper.tex`` of one table; :func:`write_paper_tables` writes the standalone
``paper_tables.tex`` that ``\\input``'s them (the claims are :mod:`fedbalance.presentation.claims`).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterable

import jinja2
import pandas as pd

from fedbalance.presentation.names import (
    BEYOND_LOSSES, DATASET_NAME, ESTIMATORS, FOUR_LOSSES, GAMMAS, LOSS_LABEL, gamma_setting,
)
from fedbalance.records import DEFAULT_ESTIMATOR, cs_column, setting_name

PUBLISHED = Path(__file__).parent.parent / "published" / "paper_numbers.csv"
TEMPLATES = Path(__file__).with_name("templates")  # package data: also found after a non-editable install
KEY = ["experiment", "dataset", "setting", "loss"]
CELL_KEY = ["metric", "dataset", "column", "row"]
MISSING = "--"
TABLE_SUFFIXES = (".tex", "_std.tex", "_vs_paper.csv", "_vs_paper.tex")
METRIC_LABEL = {
    "acm": r"Ac.M \%", "auc": "AUC", "acc_majority": r"Ac. \%", "cs_mean": "Mean", "cs_var": r"Var. ($\times10^{-5}$)",
}
FINAL_SOURCE = {"acm": ("acc_minority", 100.0), "auc": ("auc_hard", 1.0), "acc_majority": ("acc_majority", 100.0)}
CS_LEVELS = {  # classes per client -> the paper's CS level
    10: ((5, "0.6960"), (4, "0.6158"), (3, "0.5111"), (2, "0.3984")),
    7: ((6, "0.9343"), (5, "0.8489"), (4, "0.7411"), (3, "0.6732")),
}
CAPTION_LOSSES = (
    r"Comparison between our method ($L_{R\!L}$) and previous methods based on CrossEntropy Loss ($L_{C\!E}$), "
    r"Focal Loss ($L_{F\!L}$) and GHMC Loss ($L_{G\!H\!M\!C}$)"
)


@dataclass(frozen=True)
class Cell:
    """One table cell: its key in the published CSV and the jobs that fill it."""

    metric: str
    dataset: str
    column: str
    row: str
    experiment: str
    setting: str
    loss: str


@dataclass(frozen=True)
class Group:
    """A run of columns under one header (a dataset or a CS level)."""

    title: str
    dataset: str
    columns: tuple[tuple[str, str], ...]
    realised: tuple[str, tuple[str, ...]] | None = None


@dataclass(frozen=True)
class TableSpec:
    """How to build one table: its cells, its layout and its bold rule.

    ``family`` is the experiment family the table comes from (its report category); ``realised`` says
    where a grid table prints the partitions' realised CS of its groups: after each group's title
    ("title"), in a row under the column labels ("row"), or nowhere (None).
    """

    label: str
    caption: str
    layout: str
    cells: tuple[Cell, ...]
    metrics: tuple[str, ...]
    rows: tuple[tuple[str, str], ...]
    groups: tuple[Group, ...] = ()
    corner: tuple[str, str] = (r"\textbf{Data}", r"$\Gamma$")
    source: str = "final"
    estimator: str | None = None
    bold: str | None = "column"
    block_columns: dict[str, tuple[str, ...]] = field(default_factory=dict)
    family: str = "other"
    realised: str | None = None
    open_rows: bool = False

    def cell_frame(self) -> pd.DataFrame:
        """The cells as a frame (one row per cell)."""
        return pd.DataFrame([c.__dict__ for c in self.cells], columns=list(Cell.__dataclass_fields__))

    @property
    def inputs(self) -> tuple[str, ...]:
        """The tidy frames the table reads: ``final`` always (cells or realised CS), ``rounds`` for round statistics."""
        return ("final",) if self.source == "final" else ("final", "rounds")


def _loss_table(label: str, caption: str, experiment: str, datasets: Iterable[str], metrics: tuple[str, ...],
                corner2: str = r"$\Gamma$") -> TableSpec:
    """Datasets side by side, Γ columns, one row per loss in each metric block."""
    groups, cells = [], []
    for d in datasets:
        cols = tuple((lab, gamma_setting(g)) for lab, g in GAMMAS)
        groups.append(Group(rf"\textbf{{{DATASET_NAME[d]}}}", d, tuple((c, c) for c, _ in cols)))
        cells += [Cell(m, d, c, loss, experiment, s, loss) for m in metrics for c, s in cols for loss in FOUR_LOSSES]
    rows = tuple((loss, LOSS_LABEL[loss]) for loss in FOUR_LOSSES)
    return TableSpec(label, caption, "grid", tuple(cells), metrics, rows, tuple(groups),
                     corner=(r"\textbf{Data}", corner2), family=experiment, open_rows=True)


def _mismatch_table(label: str, dataset: str) -> TableSpec:
    """One dataset, three CS levels side by side (as printed in the paper), Γ columns, loss rows."""
    q = 7 if dataset == "fer2013" else 10
    experiment = "mismatch_fer2013" if dataset == "fer2013" else "mismatch"
    skip = 3 if dataset == "fer2013" else 2  # the CS levels the paper prints
    levels = [lv for i, lv in enumerate(CS_LEVELS[q]) if i != skip]
    groups, cells = [], []
    for c, cs in levels:
        cols = tuple((f"{cs}/{lab}", lab, setting_name(("c", c), ("g", g))) for lab, g in GAMMAS)
        groups.append(Group(rf"$C\!S$={cs}", dataset, tuple((k, lab) for k, lab, _ in cols),
                            (experiment, tuple(s for _, _, s in cols))))
        cells += [Cell(m, dataset, k, loss, experiment, s, loss)
                  for m in ("acm", "auc") for k, _, s in cols for loss in FOUR_LOSSES]
    rows = tuple((loss, LOSS_LABEL[loss]) for loss in FOUR_LOSSES)
    caption = (CAPTION_LOSSES + rf" in federated learning over {DATASET_NAME[dataset]}, under three levels of mismatch "
               r"between local and global imbalance (paper's $C\!S$; ours, realised, in brackets) and different levels "
               "of global imbalance.")
    return TableSpec(label, caption, "grid", tuple(cells), ("acm", "auc"), rows, tuple(groups),
                     corner=(rf"\textbf{{{DATASET_NAME[dataset]}}}", r"$\Gamma$"), family="mismatch",
                     realised="title", open_rows=True)


def _mfe_table() -> TableSpec:
    groups, cells = [], []
    for d in ("mnist", "cifar10", "fer2013"):
        q = 7 if d == "fer2013" else 10
        exp = "mfe_fer2013" if d == "fer2013" else "mfe"
        groups.append(Group(rf"\textbf{{{DATASET_NAME[d]}}}", d, tuple((cs, cs) for _, cs in CS_LEVELS[q]),
                            (exp, tuple(setting_name(("c", c)) for c, _ in CS_LEVELS[q]))))
        cells += [Cell(m, d, cs, loss, exp, setting_name(("c", c)), loss)
                  for m in ("acm", "auc") for c, cs in CS_LEVELS[q] for loss in ("mse", "mfe")]
    caption = (r"Comparison between the Mean-Square-Error Loss ($L_{M\!S\!E}$) and the MFE Loss with local knowledge "
               r"($L_{M\!F\!E}$) under different levels of mismatch (paper's $C\!S$; ours, realised, in the row "
               r"below), $\Gamma=10:1$.")
    return TableSpec("Sup_MFE", caption, "grid", tuple(cells), ("acm", "auc"),
                     (("mse", LOSS_LABEL["mse"]), ("mfe", LOSS_LABEL["mfe"])), tuple(groups),
                     corner=(r"\textbf{Data}", r"$C\!S$"), family="mfe", realised="row")


def _sweep_table(label: str, caption: str, experiment: str, prefix: str, row: str, symbol: str,
                 values: tuple[float, ...], metrics: tuple[str, ...], loss: str, source: str = "final",
                 estimator: str | None = None) -> TableSpec:
    cols = tuple((f"{v:.2f}", setting_name((prefix, v))) for v in values)
    cells = tuple(Cell(m, "mnist", c, row, experiment, s, loss) for m in metrics for c, s in cols)
    return TableSpec(label, caption, "sweep", cells, metrics, ((row, symbol),),
                     (Group("", "mnist", tuple((c, c) for c, _ in cols)),), corner=(symbol, ""), source=source,
                     estimator=estimator, bold="row", family=experiment)


def _early_table() -> TableSpec:
    stages = (("E", "E."), ("M", "M."), ("S", "S."))
    datasets = ("mnist", "cifar10", "fer2013", "femnist")
    cells = tuple(Cell(m, d, DATASET_NAME[d], st, "early", st, "ce")
                  for m in ("acm", "auc") for d in datasets for st, _ in stages)
    groups = tuple(Group(rf"\textbf{{{DATASET_NAME[d]}}}", d, ((DATASET_NAME[d], DATASET_NAME[d]),)) for d in datasets)
    return TableSpec("Importance_early", "Comparison when global imbalance ($\\Gamma=100:1$) is acknowledged at "
                     "different stages of FL training (start S., middle M., end E.).", "single", cells,
                     ("acm", "auc"), stages, groups, corner=(r"\textbf{Metric}", r"\textbf{Stage}"), family="early")


def _bs_ep_table() -> TableSpec:
    blocks = {"bs": ("batch_size", (32, 64, 96, 128, 256)), "ep": ("local_epochs", (4, 8, 10, 20, 30))}
    cells = tuple(Cell(m, d, str(v), row, exp, setting_name((row, v)), "ce")
                  for row, (exp, vals) in blocks.items() for d in ("cifar10", "femnist")
                  for m in ("cs_mean", "cs_var") for v in vals)
    groups = tuple(Group(rf"\textbf{{{DATASET_NAME[d]}}}", d, tuple((str(i), str(i)) for i in range(5)))
                   for d in ("cifar10", "femnist"))
    return TableSpec("Sup_bs_ep", "The mean and variance of the similarity scores between the monitor's estimate of "
                     "the data composition and the ground truth over CIFAR10 and FEMNIST under different local batch "
                     "sizes and epochs.", "blocks", cells, ("cs_mean", "cs_var"),
                     (("bs", r"\textbf{Batch Size}"), ("ep", r"\textbf{Local Epochs}")), groups,
                     source="monitor", bold=None,
                     block_columns={r: tuple(str(v) for v in vals) for r, (_, vals) in blocks.items()},
                     family=" + ".join(exp for exp, _ in blocks.values()))


def _imbalance_table() -> TableSpec:
    datasets = ("mnist", "cifar10", "fer2013", "femnist")
    cells = tuple(Cell("cs", d, lab, est, "losses", gamma_setting(g), "ratio")
                  for d in datasets for lab, g in GAMMAS for est in ESTIMATORS)
    rows = tuple((lab, lab) for lab, _ in GAMMAS)
    groups = (Group(r"\textbf{Estimator}", "", tuple((e, rf"\texttt{{{e}}}") for e in ESTIMATORS)),)
    return TableSpec("Monitor_under_imbalance", "Beyond the paper: CS between each estimator's composition estimate "
                     "(and the uniform guess $N/Q$) and the true composition of the round, mean $\\pm$ std over "
                     "rounds and seeds, Ratio-Loss jobs of the fixed-client loss comparison.", "imbalance", cells,
                     ("cs",), rows, groups, corner=(r"\textbf{Data}", r"$\Gamma$"), source="imbalance",
                     family="losses")


# ---------------------------------------------------------------- beyond the paper: newer losses

CAPTION_BEYOND = (
    r"Beyond the paper: newer class-imbalance losses under the paper's protocol (the fixed clients, "
    r"partitions and seeds of the loss comparison), over MNIST and CIFAR10 and different levels of global "
    r"imbalance: logit adjustment ($\tau=1$, i.e.\ Balanced Softmax) with the monitor's estimate of the "
    r"round's composition as the prior ($L_{L\!A}$ monitor $\pi$) or each client's own label counts "
    r"(local $\pi$), FedLC ($\tau=1$) and FedRS ($\alpha=0.5$), beside $L_{C\!E}$ and $L_{R\!L}$, and $L_{R\!L}$ "
    r"with $Ra_p$ the median of the kept units' ratios instead of their mean (a reading that does not spike)."
)


def _beyond_table() -> TableSpec:
    """Beyond_paper: Res_3_datasets' layout (datasets side by side, Γ columns, Ac.M and AUC blocks) for
    ``BEYOND_LOSSES`` of the experiment family ``beyond``."""
    groups, cells = [], []
    for d in ("mnist", "cifar10"):
        cols = tuple((lab, gamma_setting(g)) for lab, g in GAMMAS)
        groups.append(Group(rf"\textbf{{{DATASET_NAME[d]}}}", d, tuple((c, c) for c, _ in cols)))
        cells += [Cell(m, d, c, loss, "beyond", s, loss) for m in ("acm", "auc") for c, s in cols for loss in BEYOND_LOSSES]
    rows = tuple((loss, LOSS_LABEL[loss]) for loss in BEYOND_LOSSES)
    return TableSpec("Beyond_paper", CAPTION_BEYOND, "grid", tuple(cells), ("acm", "auc"), rows, tuple(groups),
                     family="beyond", open_rows=True)


def _specs() -> dict[str, TableSpec]:
    three = ("mnist", "cifar10", "fer2013")
    specs = [
        _loss_table("FL_FEMNIST", CAPTION_LOSSES + " in federated learning, over FEMNIST and different levels of "
                    "global imbalance.", "losses", ("femnist",), ("acm", "auc")),
        _loss_table("Res_3_datasets", CAPTION_LOSSES + " in federated learning, over three data sets and different "
                    "levels of global imbalance.", "losses", three, ("acm", "auc")),
        _loss_table("Res_without_mismatch", CAPTION_LOSSES + ", when the models are not trained with federated "
                    "learning.", "centralised", three, ("acm", "auc"), corner2=r"$\gamma$"),
        _mfe_table(),
        _sweep_table("Sup_hyper_T_ra", "The mean and variance of the similarity scores between the estimate of the "
                     "data composition (paper estimator) and the ground truth over MNIST under different $T_{Ra}$.",
                     "t_ra", "t", "T_Ra", "$T_{Ra}$",
                     (1.0, 1.05, 1.1, 1.15, 1.2, 1.25, 1.3, 1.4, 1.5, 2.0, 5.0), ("cs_mean", "cs_var"), "ce",
                     source="monitor", estimator="paper"),
        _sweep_table("Sup_hyper_a", r"Performance comparison under different $\alpha$ values ($\beta=0.10$, global "
                     r"imbalance $\Gamma=50:1$).", "alpha", "a", "alpha", r"$\alpha$",
                     (0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0, 3.0, 5.0), ("acm", "auc"), "ratio"),
        _sweep_table("Sup_hyper_b", r"Performance comparison under different $\beta$ values ($\alpha=1.00$, global "
                     r"imbalance $\Gamma=50:1$).", "beta", "b", "beta", r"$\beta$",
                     (0.02, 0.04, 0.06, 0.08, 0.1, 0.12, 0.15, 0.2, 0.3), ("acm", "auc"), "ratio"),
        _early_table(),
        _bs_ep_table(),
        _loss_table("Sup_majority", "Comparison of the classification accuracy on the majority classes between "
                    r"$L_{R\!L}$, $L_{C\!E}$, $L_{F\!L}$ and $L_{G\!H\!M\!C}$ in federated learning, over three "
                    "datasets and different levels of global imbalance.", "losses", three, ("acc_majority",)),
        _loss_table("Sup_majority_femnist", "Comparison of the classification accuracy on the majority classes "
                    r"between $L_{R\!L}$, $L_{C\!E}$, $L_{F\!L}$ and $L_{G\!H\!M\!C}$ in federated learning, over "
                    "FEMNIST and different levels of global imbalance.", "losses", ("femnist",), ("acc_majority",)),
        _loss_table("Sup_fe_dynamic", CAPTION_LOSSES + " over FEMNIST when the global imbalance ratio changes with "
                    "the selection of clients at each round.", "dynamic", ("femnist",), ("acm", "auc")),
        _mismatch_table("Sup_data_MNIST", "mnist"),
        _mismatch_table("Sup_data_CIFAR10", "cifar10"),
        _mismatch_table("Sup_data_Fer2013", "fer2013"),
        _imbalance_table(),
        _beyond_table(),
    ]
    return {s.label: s for s in specs}


TABLES: dict[str, TableSpec] = _specs()


def table_labels() -> list[str]:
    """Labels of every table (paper order, then ours)."""
    return list(TABLES)


def table_files(label: str) -> list[str]:
    """The file names :func:`write_table` writes for ``label``."""
    return [f"{label}{suffix}" for suffix in TABLE_SUFFIXES]


def published() -> pd.DataFrame:
    """The published numbers (long format, as printed)."""
    return pd.read_csv(PUBLISHED, dtype={"column": str, "row": str})


# ---------------------------------------------------------------- plug-ins (docs/extending.md)


def plugin_losses(frame: pd.DataFrame, experiments: Iterable[str] | None = None) -> list[str]:
    """The losses of ``frame`` (final or rounds) that are plug-ins (its ``plugin`` column set), in order of appearance."""
    if "plugin" not in frame.columns or frame.empty:
        return []
    sel = frame[frame["plugin"].fillna("").astype(str) != ""]
    if experiments is not None:
        sel = sel[sel.experiment.isin(list(experiments))]
    return list(dict.fromkeys(sel.loss.astype(str)))


def plugin_estimators(rounds: pd.DataFrame | None) -> list[str]:
    """The composition estimators ``rounds`` records beyond the built-in ones (plug-ins: a ``cs_<name>`` column)."""
    if rounds is None or rounds.empty:
        return []
    known = {cs_column(e) for e in ESTIMATORS}
    prefix = cs_column("")
    return [c[len(prefix):] for c in rounds.columns if c.startswith(prefix) and c not in known]


def _tt(name: str) -> str:
    return r"\texttt{" + name.replace("_", r"\_") + "}"


def loss_label(loss: str) -> str:
    """A loss's row label: the paper's symbol, or its name in typewriter type."""
    return LOSS_LABEL.get(loss, _tt(loss))


def with_plugins(spec: TableSpec, final: pd.DataFrame, rounds: pd.DataFrame | None = None) -> TableSpec:
    """``spec`` with a row for every plug-in loss ``final`` holds in the table's experiments (a table of losses,
    ``open_rows``: its cells are the first row's, read from the plug-in's jobs), and, for the estimator table, a column
    for every plug-in estimator ``rounds`` records. The claims compare the Ratio Loss with every row."""
    if spec.open_rows:
        first = spec.rows[0][0]
        extra = [loss for loss in plugin_losses(final, {c.experiment for c in spec.cells})
                 if loss not in {r for r, _ in spec.rows}]
        if not extra:
            return spec
        cells = spec.cells + tuple(Cell(c.metric, c.dataset, c.column, loss, c.experiment, c.setting, loss)
                                   for loss in extra for c in spec.cells if c.row == first)
        return replace(spec, cells=cells, rows=spec.rows + tuple((loss, loss_label(loss)) for loss in extra))
    if spec.source == "imbalance":
        extra = [e for e in plugin_estimators(rounds) if e not in {c.row for c in spec.cells}]
        if not extra:
            return spec
        first = spec.cells[0].row
        cells = spec.cells + tuple(replace(c, row=e) for e in extra for c in spec.cells if c.row == first)
        group = spec.groups[0]
        columns = group.columns + tuple((e, _tt(e)) for e in extra)
        return replace(spec, cells=cells, groups=(replace(group, columns=columns),))
    return spec


# ---------------------------------------------------------------- values


def _final_stats(final: pd.DataFrame, metric: str) -> pd.DataFrame:
    col, scale = FINAL_SOURCE[metric]
    g = final.dropna(subset=[col]).groupby(KEY)[col]
    out = pd.DataFrame({"mean": g.mean() * scale, "std": g.std() * scale, "n": g.count()})
    return out.reset_index()


def _round_stats(rounds: pd.DataFrame, column: str, metric: str) -> pd.DataFrame:
    """Pooled over rounds and seeds; std over seeds of the per-seed statistic."""
    if column not in rounds.columns:
        return pd.DataFrame(columns=KEY + ["mean", "std", "n"])
    r = rounds.dropna(subset=[column])
    pooled = r.groupby(KEY)[column]
    per_seed = r.groupby(KEY + ["seed"])[column]
    if metric == "cs_var":
        mean, seed_stat = pooled.var() * 1e5, per_seed.var() * 1e5
    elif metric == "cs_mean":
        mean, seed_stat = pooled.mean(), per_seed.mean()
    else:
        mean, seed_stat = pooled.mean(), None
    std = pooled.std() if seed_stat is None else seed_stat.groupby(level=KEY).std()
    n = per_seed.mean().groupby(level=KEY).count()
    return pd.DataFrame({"mean": mean, "std": std, "n": n}).reset_index()


def cell_values(spec: TableSpec, final: pd.DataFrame, rounds: pd.DataFrame, estimator: str = DEFAULT_ESTIMATOR) -> pd.DataFrame:
    """One row per cell of ``spec`` (``with_plugins``: and of the plug-ins' rows): the cell's keys and jobs, ``mean``,
    ``std`` and ``n`` (seeds)."""
    spec = with_plugins(spec, final, rounds)
    cells = spec.cell_frame()
    parts, cache = [], {}
    for (metric, row), sub in cells.groupby(["metric", "row"], sort=False):
        column = cs_column(row) if spec.source == "imbalance" else cs_column(spec.estimator or estimator)
        key = (metric, None if spec.source == "final" else column)
        if key not in cache:
            cache[key] = _final_stats(final, metric) if spec.source == "final" else _round_stats(rounds, column, metric)
        parts.append(sub.merge(cache[key], on=KEY, how="left"))
    out = pd.concat(parts, ignore_index=True) if parts else cells
    out["n"] = out["n"].fillna(0).astype(int)
    out.insert(0, "table", spec.label)
    return out


def fmt(value: float, metric: str) -> str:
    """A value in the metric's printed precision: '4.93' and '0.00' (%, two decimals; the paper pads to
    '04.93', which reads badly for a zero), '.9907' (AUC, CS), '4.340' (variance in 1e-5)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return MISSING
    if metric in ("acm", "acc_majority"):
        return f"{value:.2f}"
    if metric in ("auc", "cs_mean", "cs"):
        s = f"{value:.4f}"
        return s[1:] if s.startswith("0.") else s.replace("-0.", "-.")
    if metric == "cs_var":
        return f"{value:.0f}" if abs(value) >= 1000 else f"{value:#.4g}"
    raise ValueError(f"unknown metric {metric!r}")


def fmt_diff(value: float, metric: str) -> str:
    """A signed difference in the metric's printed precision ('+3.50', '-.0027', '+3.655')."""
    if value is None or math.isnan(value):
        return MISSING
    s = f"{abs(value):.2f}" if metric in ("acm", "acc_majority") else fmt(abs(value), metric)
    return ("-" if value < 0 else "+") + s


def bold_mask(spec: TableSpec, values: pd.DataFrame) -> pd.Series:
    """True for the cells printed in bold: the best (as printed) per column or per row; ties all bold."""
    shown = values.apply(lambda r: fmt(r["mean"], r["metric"]), axis=1)
    num = pd.to_numeric(shown.where(shown != MISSING), errors="coerce")
    mask = pd.Series(False, index=values.index)
    if spec.bold is None:
        return mask
    by = ["metric", "dataset", "column"] if spec.bold == "column" else ["metric", "row"]
    for (metric, *_), idx in values.groupby(by, sort=False).groups.items():
        vals = num.loc[idx].dropna()
        if vals.empty:
            continue
        best = vals.min() if metric == "cs_var" else vals.max()
        mask.loc[vals.index[vals == best]] = True
    return mask


# ---------------------------------------------------------------- layout


def _text(spec: TableSpec, values: pd.DataFrame, what: str) -> dict[tuple, str]:
    """Cell key -> printed text (``what``: 'mean', 'std' or 'pm')."""
    bold = bold_mask(spec, values) if what == "mean" else pd.Series(False, index=values.index)
    out = {}
    for i, r in values.iterrows():
        if what == "pm":
            t = MISSING if math.isnan(r["mean"]) else f"{fmt(r['mean'], r['metric'])}$\\pm${fmt(r['std'], r['metric'])}"
        else:
            t = fmt(r[what], r["metric"])
        out[(r["metric"], r["dataset"], r["column"], r["row"])] = rf"\textbf{{{t}}}" if bold[i] else t
    return out


def _mc(n: int, align: str, text: str) -> str:
    return rf"\multicolumn{{{n}}}{{{align}}}{{{text}}}"


def _realised_cs(final: pd.DataFrame, experiment: str, dataset: str, settings: Iterable[str]) -> str:
    """Mean over jobs of the partition's realised mean CS, as printed ('--' without jobs)."""
    sel = final[(final.experiment == experiment) & (final.dataset == dataset) & final.setting.isin(list(settings))]
    return MISSING if sel.empty else fmt(float(sel["mean_cs"].mean()), "cs")


def layout(spec: TableSpec, values: pd.DataFrame, final: pd.DataFrame, what: str = "mean") -> tuple[str, list]:
    """(tabular column spec, lines) of one table; a line is a list of cells or the string 'hline'."""
    text = _text(spec, values, what)
    metric_of = {m: METRIC_LABEL.get(m, m) for m in spec.metrics}
    lines: list = []
    if spec.layout == "sweep":
        cols = [c for c, _ in spec.groups[0].columns]
        row = spec.rows[0][0]
        lines.append([spec.corner[0]] + cols)
        for m in spec.metrics:
            lines += ["hline", [rf"\textbf{{{metric_of[m]}}}"] + [text[(m, "mnist", c, row)] for c in cols]]
        return "c|" + "c" * len(cols), lines
    if spec.layout == "blocks":
        n = len(spec.groups[0].columns)
        lines.append([r"\textbf{Data}"] + [_mc(n, "c|" if i == 0 else "c", g.title) for i, g in enumerate(spec.groups)])
        for row, label in spec.rows:
            cols = spec.block_columns[row]
            lines += ["hline", [label] + list(cols) * len(spec.groups), "hline"]
            for m in spec.metrics:
                lines.append([rf"\textbf{{{metric_of[m]}}}"]
                             + [text[(m, g.dataset, c, row)] for g in spec.groups for c in cols])
        return "c|" + "|".join("c" * n for _ in spec.groups), lines
    if spec.layout == "imbalance":
        ests = [e for e, _ in spec.groups[0].columns]
        lines.append([spec.corner[0], spec.corner[1]] + [lab for _, lab in spec.groups[0].columns])
        for d in dict.fromkeys(values["dataset"]):
            lines.append("hline")
            for i, (g, _) in enumerate(spec.rows):
                first = rf"\textbf{{{DATASET_NAME[d]}}}" if i == 0 else ""
                lines.append([first, g] + [text[("cs", d, g, e)] for e in ests])
        return "c|c|" + "c" * len(ests), lines
    colspec = "c|c|" + "|".join("c" * len(g.columns) for g in spec.groups)
    if spec.layout == "single":
        lines.append(list(spec.corner) + [g.title for g in spec.groups])
    else:
        titles = []
        for i, g in enumerate(spec.groups):
            title = g.title
            if g.realised and spec.realised == "title":
                title += f" (ours {_realised_cs(final, g.realised[0], g.dataset, g.realised[1])})"
            titles.append(_mc(len(g.columns), "c|" if i < len(spec.groups) - 1 else "c", title))
        lines += [[_mc(2, "c|", spec.corner[0])] + titles, "hline",
                  [_mc(2, "c|", spec.corner[1])] + [lab for g in spec.groups for _, lab in g.columns]]
        if spec.realised == "row":
            lines.append([_mc(2, "c|", r"ours $C\!S$")] + [_realised_cs(final, g.realised[0], g.dataset, [s])
                                                            for g in spec.groups for s in g.realised[1]])
    for m in spec.metrics:
        lines.append("hline")
        for i, (row, label) in enumerate(spec.rows):
            first = rf"\textbf{{{metric_of[m]}}}" if i == 0 else ""
            lines.append([first, label] + [text.get((m, g.dataset, c, row), MISSING)
                                           for g in spec.groups for c, _ in g.columns])
    return colspec, lines


# ---------------------------------------------------------------- comparison with the paper


def vs_paper(values: pd.DataFrame, pub: pd.DataFrame | None = None) -> pd.DataFrame:
    """Ours beside the published value of every cell: ours_mean, ours_std, n_seeds, paper, diff = ours - paper."""
    pub = published() if pub is None else pub
    out = values.merge(pub.rename(columns={"value": "paper"}), on=["table"] + CELL_KEY, how="left")
    out = out.rename(columns={"mean": "ours_mean", "std": "ours_std", "n": "n_seeds"})
    out["diff"] = out["ours_mean"] - out["paper"]
    return out[["table"] + CELL_KEY + ["ours_mean", "ours_std", "n_seeds", "paper", "diff"]]


def _vs_paper_rows(cmp: pd.DataFrame) -> list[list[str]]:
    rows = []
    for _, r in cmp.iterrows():
        m = r["metric"]
        ours = MISSING if math.isnan(r["ours_mean"]) else f"{fmt(r['ours_mean'], m)} $\\pm$ {fmt(r['ours_std'], m)}"
        rows.append([METRIC_LABEL.get(m, "CS"), DATASET_NAME.get(r["dataset"], r["dataset"]), str(r["column"]),
                     loss_label(str(r["row"])), ours, str(r["n_seeds"]),
                     fmt(r["paper"], m), fmt_diff(r["diff"], m)])
    return rows


# ---------------------------------------------------------------- writing


def environment(templates: str | Path | None = None) -> jinja2.Environment:
    """The jinja2 environment of the LaTeX and Markdown templates (LaTeX-friendly delimiters)."""
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(Path(templates) if templates else TEMPLATES)), block_start_string="((*",
        block_end_string="*))", variable_start_string="(((", variable_end_string=")))", comment_start_string="((=",
        comment_end_string="=))", trim_blocks=True, keep_trailing_newline=True, undefined=jinja2.StrictUndefined,
    )


def write_table(label: str, final: pd.DataFrame, rounds: pd.DataFrame, out_dir: str | Path, *,
                estimator: str = DEFAULT_ESTIMATOR, templates: str | Path | None = None,
                values: pd.DataFrame | None = None) -> list[Path]:
    """Write one table into ``out_dir``: mean, std and the comparison with the paper (CSV and LaTeX)."""
    spec = with_plugins(TABLES[label], final, rounds)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    env = environment(templates)
    values = cell_values(spec, final, rounds, estimator) if values is None else values
    paths: list[Path] = []
    for what, name, cap in (("mean", label, spec.caption),
                            ("std", f"{label}_std", f"Standard deviation over seeds of Table~\\ref{{{label}}}.")):
        kind = "pm" if spec.layout == "imbalance" and what == "mean" else what
        colspec, lines = layout(spec, values, final, kind)
        p = out / f"{name}.tex"
        p.write_text(env.get_template("table.tex.j2").render(colspec=colspec, lines=lines, caption=cap, label=name))
        paths.append(p)
    cmp = vs_paper(values)
    p = out / f"{label}_vs_paper.csv"
    cmp.to_csv(p, index=False)
    paths.append(p)
    rows = _vs_paper_rows(cmp)
    chunks = [rows[i:i + 35] for i in range(0, len(rows), 35)]
    p = out / f"{label}_vs_paper.tex"
    p.write_text(env.get_template("vs_paper.tex.j2").render(title=label.replace("_", r"\_"), chunks=chunks))
    paths.append(p)
    return paths


def write_paper_tables(path: str | Path, tables_dir: str | Path, *, estimator: str = DEFAULT_ESTIMATOR,
                       labels: Iterable[str] | None = None, templates: str | Path | None = None) -> Path:
    """Write the standalone ``paper_tables.tex`` at ``path``; it \\input's each table of ``tables_dir`` by
    relative path."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    summary, out = p.parent.resolve(), Path(tables_dir).resolve()
    prefix = "" if summary == out else Path(os.path.relpath(out, summary)).as_posix() + "/"
    items = [{"table": prefix + t, "std": f"{prefix}{t}_std", "vs": f"{prefix}{t}_vs_paper"}
             for t in (TABLES if labels is None else labels)]
    p.write_text(environment(templates).get_template("paper_tables.tex.j2").render(tables=items, estimator=estimator))
    return p
