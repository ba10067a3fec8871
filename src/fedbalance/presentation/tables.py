"""The paper's tables regenerated from the tidy frames, beside the published numbers.

One :class:`TableSpec` per paper table (``TABLES``, defined in :mod:`fedbalance.presentation.table_specs`)
says which jobs fill each cell. A cell is the
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
from dataclasses import replace
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Iterable

import jinja2
import pandas as pd

from fedbalance.presentation.names import DATASET_NAME, DATASETS, LOSS_LABEL, PLAIN_METRIC, loss_name, tex_escape
from fedbalance.presentation.table_specs import (  # noqa: F401  (re-exported: the tables' readers import them from here)
    CAPTION_BEYOND, CAPTION_LOSSES, CS_LEVELS, PUBLISHED, TABLE_SUFFIXES, TABLES, TEMPLATES, Cell, Group, TableSpec,
    table_files, table_labels,
)
from fedbalance.common.records import DEFAULT_ESTIMATOR, ESTIMATORS, UNIFORM, cs_column

KEY = ["experiment", "dataset", "setting", "loss"]
CELL_KEY = ["metric", "dataset", "column", "row"]
MISSING = "--"
METRIC_LABEL = {
    "acm": r"Ac.M \%", "auc": "AUC", "acc_majority": r"Ac. \%", "cs_mean": "Mean", "cs_var": r"Var. ($\times10^{-5}$)",
}
FINAL_SOURCE = {"acm": ("acc_minority", 100.0), "auc": ("auc_hard", 1.0), "acc_majority": ("acc_majority", 100.0)}


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
    """The composition estimators ``rounds`` records beyond the built-in ones and the uniform guess (plug-ins: a
    ``cs_<name>`` column)."""
    if rounds is None or rounds.empty:
        return []
    known = {cs_column(e) for e in (*ESTIMATORS, UNIFORM)}
    prefix = cs_column("")
    return [c[len(prefix):] for c in rounds.columns if c.startswith(prefix) and c not in known]


def _tt(name: str) -> str:
    return r"\texttt{" + name.replace("_", r"\_") + "}"


def loss_label(loss: str) -> str:
    """A loss's row label: its display name (``names.LOSS_NAME``), a plug-in's config name in typewriter type."""
    return LOSS_LABEL.get(loss, _tt(loss))


def plugin_datasets(frame: pd.DataFrame, experiments: Iterable[str] | None = None) -> list[str]:
    """The datasets of ``frame`` (final or rounds; of ``experiments``) that are not the paper's (``names.DATASETS``): a
    plug-in source's, or a dataset of the study named otherwise, in order of appearance."""
    if frame.empty or "dataset" not in frame.columns:
        return []
    sel = frame if experiments is None else frame[frame.experiment.isin(list(experiments))]
    return [d for d in dict.fromkeys(sel.dataset.astype(str)) if d not in DATASETS]


def dataset_label(dataset: str) -> str:
    """A dataset's name in a table: the paper's, or its own in typewriter type."""
    return DATASET_NAME.get(dataset, _tt(dataset))


def _with_datasets(spec: TableSpec, final: pd.DataFrame) -> TableSpec:
    """``spec`` with the first dataset's cells and group again for every dataset of ``final`` in the table's
    experiments that is not the paper's (``plugin_datasets``), under its own name (a column such as Importance_early's,
    named after its dataset, takes the new one's name)."""
    have = {c.dataset for c in spec.cells}
    extra = [d for d in plugin_datasets(final, {c.experiment for c in spec.cells}) if d not in have]
    if not extra:
        return spec
    first = spec.cells[0].dataset
    named = DATASET_NAME.get(first)

    def column(c: str, d: str) -> str:
        return d if c == named else c

    cells = spec.cells + tuple(replace(c, dataset=d, column=column(c.column, d))
                               for d in extra for c in spec.cells if c.dataset == first)
    groups = spec.groups
    template = next((g for g in spec.groups if g.dataset == first), None)
    if template is not None:
        groups += tuple(replace(template, title=rf"\textbf{{{_tt(d)}}}", dataset=d,
                                columns=tuple((column(k, d), _tt(d) if k == named else lab) for k, lab in template.columns))
                        for d in extra)
    return replace(spec, cells=cells, groups=groups)


def with_plugins(spec: TableSpec, final: pd.DataFrame, rounds: pd.DataFrame | None = None) -> TableSpec:
    """``spec`` with a group for every dataset of the study that is not the paper's, in a table that lists datasets
    (``open_datasets``: ``_with_datasets``), a row for every plug-in loss ``final`` holds in the table's experiments
    (a table of losses, ``open_rows``: its cells are the first row's, read from the plug-in's jobs), and, for the
    estimator table, a column for every plug-in estimator ``rounds`` records. The claims compare the Ratio Loss with
    every row."""
    if spec.open_datasets:
        spec = _with_datasets(spec, final)
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


SEED_KEY = KEY + ["seed"]


def _cell_column(spec: TableSpec, row: str, estimator: str) -> str | None:
    """The rounds.csv column a cell of ``spec`` in ``row`` reads (None: the table reads final.csv)."""
    if spec.source == "final":
        return None
    return cs_column(row) if spec.source == "imbalance" else cs_column(spec.estimator or estimator)


def _per_seed(final: pd.DataFrame, rounds: pd.DataFrame, metric: str, column: str | None) -> pd.DataFrame:
    """One row per job (``SEED_KEY``) with ``value``: the final round's ``metric`` (in the paper's units), or the seed's
    statistic of ``column`` over its rounds (``cs_var``: the variance over rounds, in 1e-5; else the mean)."""
    if column is None:
        col, scale = FINAL_SOURCE[metric]
        out = final.dropna(subset=[col])[SEED_KEY + [col]].rename(columns={col: "value"})
        out["value"] = out["value"] * scale
        return out
    if column not in rounds.columns:
        return pd.DataFrame(columns=SEED_KEY + ["value"])
    g = rounds.dropna(subset=[column]).groupby(SEED_KEY)[column]
    return (g.var() * 1e5 if metric == "cs_var" else g.mean()).rename("value").reset_index()


def _groups(spec: TableSpec) -> list[str]:
    """The cell keys of one comparison group of ``spec``: the cells its bold rule compares (a column of losses, a
    sweep's row), or, for a table without a bold rule, the cells of one column."""
    return ["metric", "row"] if spec.bold == "row" else ["metric", "dataset", "column"]


def shared_seeds(spec: TableSpec, per_seed: pd.DataFrame) -> pd.DataFrame:
    """``per_seed`` (``cell_seed_values``' rows) with each cell kept to the seeds another cell of its comparison group
    holds (``_groups``): like is compared with like, so a twin cell of another family (e.g. a sweep's default point,
    the losses' five seeds) is read on the seeds the rest of its sweep or column has. A cell alone in its group keeps
    every seed."""
    if per_seed.empty:
        return per_seed
    group, cell = _groups(spec), ["dataset", "column", "row"]
    held = per_seed[list(dict.fromkeys(group + cell)) + ["seed"]].drop_duplicates()
    cells = held.drop_duplicates(list(dict.fromkeys(group + cell))).groupby(group, sort=False).size().rename("_cells")
    holders = held.groupby(group + ["seed"], sort=False).size().rename("_holders")
    counted = per_seed.join(cells, on=group).join(holders, on=group + ["seed"])
    # a seed is kept where another cell of the group holds it too, or where the cell is alone in its group
    keep = (counted["_cells"] == 1) | (counted["_holders"] >= 2)
    return per_seed[keep.to_numpy()]


def cell_seed_values(spec: TableSpec, final: pd.DataFrame, rounds: pd.DataFrame, estimator: str = DEFAULT_ESTIMATOR,
                     *, shared: bool = True) -> pd.DataFrame:
    """One row per (cell, seed) of ``spec``: the cell's keys, ``seed`` and ``value`` (the final round's metric, or the
    seed's statistic over its rounds); ``shared``: each cell kept to the seeds its comparison group shares
    (``shared_seeds``); with the plug-ins' rows (``with_plugins``)."""
    spec = with_plugins(spec, final, rounds)
    cells = spec.cell_frame()
    if cells.empty:
        return pd.DataFrame(columns=[*cells.columns, "seed", "value"])
    # one merge of every cell with the per-seed values of its (metric, column), the cells then in the order of their
    # (metric, row) groups as they first appear (a stable sort), each group's cells in the spec's order
    column_of = {row: _cell_column(spec, row, estimator) or "" for row in cells["row"].unique()}
    keyed = cells.assign(_group=cells.groupby(["metric", "row"], sort=False).ngroup(),
                         _column=cells["row"].map(column_of))
    pairs = keyed[["metric", "_column"]].drop_duplicates().itertuples(index=False)
    values = pd.concat([_per_seed(final, rounds, metric, column or None).assign(metric=metric, _column=column)
                        for metric, column in pairs], ignore_index=True)
    out = keyed.merge(values, on=[*KEY, "metric", "_column"], how="inner")
    out = out.sort_values("_group", kind="stable").drop(columns=["_group", "_column"]).reset_index(drop=True)
    out = out.astype({"seed": int}) if len(out) else out
    return shared_seeds(spec, out) if shared else out


def _round_stats(rounds: pd.DataFrame, column: str, metric: str) -> pd.DataFrame:
    """Pooled over rounds and seeds; std over seeds of the per-seed statistic (``cs``: over rounds and seeds)."""
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


def cell_values(spec: TableSpec, final: pd.DataFrame, rounds: pd.DataFrame, estimator: str = DEFAULT_ESTIMATOR, *,
                shared: bool = True) -> pd.DataFrame:
    """One row per cell of ``spec``: the cell's keys and jobs, ``mean``, ``std`` and ``n`` (seeds), over the seeds its
    comparison group shares (``shared_seeds``; ``shared=False``: every seed). A final-round cell is the mean and std over
    seeds; a monitor cell pools its rounds and seeds (the CS variance: the variance over every round of its seeds),
    its std is over seeds of the per-seed statistic. With the plug-ins' rows (``with_plugins``)."""
    spec = with_plugins(spec, final, rounds)
    cells = spec.cell_frame()
    seeds = cell_seed_values(spec, final, rounds, estimator, shared=shared)
    if spec.source == "final" and not cells.empty:  # one groupby and one merge, the cells in cell_seed_values' order
        g = seeds.groupby(["metric", "row", *KEY])["value"]
        stats = pd.DataFrame({"mean": g.mean(), "std": g.std(), "n": g.count()}).reset_index()
        order = cells.groupby(["metric", "row"], sort=False).ngroup()
        out = (cells.assign(_group=order).merge(stats, on=["metric", "row", *KEY], how="left")
               .sort_values("_group", kind="stable").drop(columns="_group").reset_index(drop=True))
    else:
        parts = []
        for (metric, row), sub in cells.groupby(["metric", "row"], sort=False):
            mine = seeds[(seeds.metric == metric) & (seeds.row == row)]
            kept = rounds.merge(mine[SEED_KEY].drop_duplicates(), on=SEED_KEY, how="inner")
            stats = _round_stats(kept, _cell_column(spec, row, estimator), metric)
            parts.append(sub.merge(stats, on=KEY, how="left"))
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
                first = rf"\textbf{{{dataset_label(d)}}}" if i == 0 else ""
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


SAME_PROTOCOL = "same"
"""The ``protocol`` of a cell set beside a published value made at the same protocol as ours."""
CROSS_PROTOCOL_MARK = r"$^\dagger$"
"""How the LaTeX comparison marks a difference across protocols (no verdict)."""


def vs_paper(values: pd.DataFrame, pub: pd.DataFrame | None = None,
             differ: Mapping[tuple[str, str, str, str], Mapping[str, tuple[str, str]]] | None = None) -> pd.DataFrame:
    """Ours beside the published value of every cell: ours_mean, ours_std, n_seeds, paper, diff = ours - paper, and
    ``protocol``: ``SAME_PROTOCOL``, or the keys that act on the result in which ours and the paper's protocol differ
    ("partition.gamma: 10 vs 50; rounds: 16 vs 30": ``differ``, ``fedbalance.presentation.protocols.differences``);
    empty where the cell has no published value or no number of ours, or ``differ`` does not know it."""
    from fedbalance.presentation.protocols import differences_text

    pub = published() if pub is None else pub
    out = values.merge(pub.rename(columns={"value": "paper"}), on=["table"] + CELL_KEY, how="left")
    out = out.rename(columns={"mean": "ours_mean", "std": "ours_std", "n": "n_seeds"})
    out["diff"] = out["ours_mean"] - out["paper"]
    differ = differ or {}
    shown = out["paper"].notna() & out["ours_mean"].notna()
    out["protocol"] = [("" if cell not in differ else differences_text(differ[cell]) or SAME_PROTOCOL) if ok else ""
                       for cell, ok in zip(zip(out.experiment, out.dataset, out.setting, out.loss), shown)]
    return out[["table"] + CELL_KEY + ["ours_mean", "ours_std", "n_seeds", "paper", "diff", "protocol"]]


def cell_differences(spec: TableSpec, values: pd.DataFrame, study: Mapping[str, Any] | None
                     ) -> dict[tuple[str, str, str, str], dict[str, tuple[str, str]]]:
    """For the cells of ``values`` (``cell_values`` of ``spec``) with a number of ours and a published value: the keys
    in which the ``study`` config's protocol and the paper's differ (``protocols.differences``); {} without a study."""
    if study is None:
        return {}
    from fedbalance.presentation.protocols import differences

    pub = published()
    pub = pub[pub.table == spec.label]
    have = values[values["mean"].notna()].merge(pub[CELL_KEY], on=CELL_KEY)
    return differences(study, zip(have.experiment, have.dataset, have.setting, have.loss))


def _vs_paper_rows(cmp: pd.DataFrame) -> list[list[str]]:
    rows = []
    for _, r in cmp.iterrows():
        m = r["metric"]
        ours = MISSING if math.isnan(r["ours_mean"]) else f"{fmt(r['ours_mean'], m)} $\\pm$ {fmt(r['ours_std'], m)}"
        across = r["protocol"] not in ("", SAME_PROTOCOL)
        rows.append([METRIC_LABEL.get(m, "CS"), dataset_label(str(r["dataset"])), str(r["column"]),
                     loss_label(str(r["row"])), ours, str(r["n_seeds"]),
                     fmt(r["paper"], m), fmt_diff(r["diff"], m) + (CROSS_PROTOCOL_MARK if across else "")])
    return rows


def table_caption(spec: TableSpec, study: Mapping[str, Any] | None = None) -> str:
    """``spec.caption`` with the values it names (``caption_keys``) filled: the study's (the values its jobs of the
    table's cells run with), and the paper's in brackets where they differ; without a study, the paper's."""
    if not spec.caption_keys:
        return spec.caption
    from fedbalance.presentation.protocols import cell_protocols, paper_config

    cells = [(c.experiment, c.dataset, c.setting, c.loss) for c in spec.cells]
    paper = cell_protocols(paper_config(), cells)
    ours = cell_protocols(study, cells) if study is not None else paper
    text = spec.caption
    for placeholder, key in spec.caption_keys:
        mine, theirs = (_caption_value(key, {v for p in side.values() for v in p.get(key, ())}) for side in (ours, paper))
        text = text.replace(placeholder, mine if mine == theirs else f"{mine} in this study (the paper: {theirs})")
    return text


def _caption_value(key: str, values: set[str]) -> str:
    """A configured value as a caption prints it: Γ as "50:1", α and β with two decimals; several joined by "/"."""
    import json

    def one(v: str) -> str:
        x = json.loads(v)
        return f"{x:g}:1" if key == "partition.gamma" else f"{float(x):.2f}" if isinstance(x, (int, float)) else str(x)

    return "/".join(one(v) for v in sorted(values, key=lambda v: json.loads(v))) or MISSING


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
                values: pd.DataFrame | None = None, study: Mapping[str, Any] | None = None) -> list[Path]:
    """Write one table into ``out_dir``: mean, std and the comparison with the paper (CSV and LaTeX). ``study``: the
    config of the study the numbers come from, so the caption names its values (``table_caption``) and the comparison
    the keys in which its protocol and the paper's differ (``cell_differences``). A table whose every cell rests on
    one seed has no standard deviation to print: its ``_std.tex`` says so in a line instead of a table of dashes."""
    spec = with_plugins(TABLES[label], final, rounds)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    env = environment(templates)
    values = cell_values(spec, final, rounds, estimator) if values is None else values
    paths: list[Path] = []
    colspec, lines = layout(spec, values, final, "pm" if spec.layout == "imbalance" else "mean")
    p = out / f"{label}.tex"
    p.write_text(env.get_template("table.tex.j2").render(colspec=colspec, lines=lines,
                                                         caption=table_caption(spec, study), label=label))
    paths.append(p)
    p = out / f"{label}_std.tex"
    seeds = values.loc[values["n"] > 0, "n"]
    if len(seeds) and int(seeds.max()) <= 1:
        p.write_text(env.get_template("std_one_seed.tex.j2").render(label=label))
    else:
        colspec, lines = layout(spec, values, final, "std")
        p.write_text(env.get_template("table.tex.j2").render(
            colspec=colspec, lines=lines, caption=f"Standard deviation over seeds of Table~\\ref{{{label}}}.",
            label=f"{label}_std"))
    paths.append(p)
    differ = cell_differences(spec, values, study)
    cmp = vs_paper(values, differ=differ)
    p = out / f"{label}_vs_paper.csv"
    cmp.to_csv(p, index=False)
    paths.append(p)
    ours = cmp.ours_mean.notna()
    rows = _vs_paper_rows(cmp[ours & cmp.paper.notna()])
    from fedbalance.presentation.protocols import differences_header

    p = out / f"{label}_vs_paper.tex"
    p.write_text(env.get_template("vs_paper.tex.j2").render(
        title=label.replace("_", r"\_"), rows=rows, left_out=int((~ours).sum()),
        unpublished=int((ours & cmp.paper.isna()).sum()), protocols=tex_escape(differences_header(differ)),
        mark=CROSS_PROTOCOL_MARK))
    paths.append(p)
    return paths


def write_paper_tables(path: str | Path, tables_dir: str | Path, *, estimator: str = DEFAULT_ESTIMATOR,
                       labels: Iterable[str] | None = None, not_run: Iterable[str] = (),
                       study: dict[str, str] | None = None, templates: str | Path | None = None) -> Path:
    """Write the standalone ``paper_tables.tex`` at ``path``: the ``study`` it is about (``config``, ``datasets``,
    ``origin``: ``fedbalance.presentation.study.identity``) and a contents list, then each table of ``labels`` (default:
    all) from ``tables_dir``, its text copied in (a ``% tables/<file>.tex`` line before each), so the document
    compiles alone, wherever it is copied (the report bundles it without ``tables/``); the tables ``not_run`` are
    listed."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    summary, out = p.parent.resolve(), Path(tables_dir).resolve()
    prefix = "" if summary == out else Path(os.path.relpath(out, summary)).as_posix() + "/"
    items = [{"title": tex_escape(t), "parts": [(f"{prefix}{name}.tex", (out / f"{name}.tex").read_text().rstrip())
                                                for name in (t, f"{t}_std", f"{t}_vs_paper")]}
             for t in (TABLES if labels is None else labels)]
    study = {k: tex_escape(v) for k, v in (study or {"config": "not named", "datasets": "not named",
                                                       "origin": "not named"}).items()}
    p.write_text(environment(templates).get_template("paper_tables.tex.j2").render(
        tables=items, estimator=estimator, not_run=[tex_escape(t) for t in not_run], study=study))
    return p


# ---------------------------------------------------------------- HTML (the report shows it inline)


def table_frame(spec: TableSpec, values: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """(the table as printed cells, the columns left out): rows (metric, row), columns (dataset, column), each cell
    "mean ± std" as printed (bold the best as in the LaTeX table, ``<b>``); a column or row without any value is left
    out and named in the list ("CIFAR10 B.", ...)."""
    bold = bold_mask(spec, values)
    rows = []
    for i, r in values.iterrows():
        m = r["metric"]
        text = MISSING if math.isnan(r["mean"]) else fmt(r["mean"], m) + (
            "" if math.isnan(r["std"]) else f" ± {fmt(r['std'], m)}")
        rows.append({"metric": PLAIN_METRIC.get(m, m), "row": loss_name(str(r["row"])),
                     "dataset": DATASET_NAME.get(r["dataset"], r["dataset"]), "column": str(r["column"]),
                     "text": f"<b>{text}</b>" if bold[i] else text, "has": not math.isnan(r["mean"])})
    long = pd.DataFrame(rows)
    has_col = long.groupby(["dataset", "column"], sort=False)["has"].any()
    has_row = long.groupby(["metric", "row"], sort=False)["has"].any()
    kept = long[long.set_index(["dataset", "column"]).index.isin(has_col[has_col].index)
                & long.set_index(["metric", "row"]).index.isin(has_row[has_row].index)]
    frame = kept.pivot(index=["metric", "row"], columns=["dataset", "column"], values="text")
    frame = frame.reindex(index=[k for k in has_row.index if has_row[k]], columns=[k for k in has_col.index if has_col[k]])
    frame.index.names, frame.columns.names = [None, None], [None, None]
    dropped = []
    for d in dict.fromkeys(d for d, _ in has_col.index):
        cols = [c for dd, c in has_col.index if dd == d]
        gone = [c for c in cols if not has_col[(d, c)]]
        if gone:
            dropped.append(d if len(gone) == len(cols) else f"{d} {', '.join(gone)}")
    return frame, dropped


def table_html(label: str, values: pd.DataFrame, *, description: str = "",
               differ: Mapping[tuple[str, str, str, str], Mapping[str, tuple[str, str]]] | None = None) -> str:
    """Table ``label`` as an HTML page: ``description`` (HTML), the cells over seeds as the LaTeX table prints them
    (the columns without data named below it, not shown), and every cell with data beside the published number, with
    the protocol both were made at: where ours and the paper's differ (``differ``: ``cell_differences``) the page names
    the keys and each such cell says so in its ``protocol`` column (the difference is no verdict)."""
    from fedbalance.presentation.html import frame_html, page
    from fedbalance.presentation.protocols import differences_header

    spec = TABLES[label]
    extra = [r for r in dict.fromkeys(values["row"]) if r not in {x for x, _ in spec.rows}] if spec.open_rows else []
    if extra:  # the plug-in losses' rows (``with_plugins``) that ``values`` holds
        spec = replace(spec, rows=spec.rows + tuple((r, loss_label(r)) for r in extra))
    frame, dropped = table_frame(spec, values)
    seeds = sorted({int(n) for n in values["n"] if n > 0})
    body = [f"<p>{description}</p>" if description else "",
            f"<h2>Mean ± standard deviation over seeds ({', '.join(map(str, seeds)) or 'no'} seed"
            f"{'' if seeds == [1] else 's'} a cell; bold: the best, as in the paper)</h2>",
            frame_html(frame, escape=False)]
    if seeds == [1]:
        body.append("<p class=\"note\">Every cell rests on one seed: no standard deviation (a spread needs two).</p>")
    if dropped:
        body.append(f"<p class=\"note\">Not run in this study: {html_escape('; '.join(dropped))}.</p>")
    cmp = vs_paper(values, differ=differ)
    cmp = cmp[cmp.ours_mean.notna()]
    if len(cmp):
        shown = pd.DataFrame({
            "metric": [PLAIN_METRIC.get(m, m) for m in cmp.metric],
            "dataset": [DATASET_NAME.get(d, d) for d in cmp.dataset], "column": cmp.column.astype(str),
            "row": [loss_name(str(r)) for r in cmp.row],
            "ours": [fmt(a, m) + ("" if math.isnan(s) else f" ± {fmt(s, m)}")
                     for a, s, m in zip(cmp.ours_mean, cmp.ours_std, cmp.metric)],
            "seeds": cmp.n_seeds.astype(int), "paper": [fmt(v, m) for v, m in zip(cmp.paper, cmp.metric)],
            "ours − paper": [fmt_diff(v, m) for v, m in zip(cmp["diff"], cmp.metric)],
            "protocol": ["" if pr == "" else pr if pr == SAME_PROTOCOL else "differs (above): no verdict"
                         for pr in cmp.protocol]})
        header = differences_header(differ or {})
        body += ["<h2>Beside the published numbers</h2>",
                 f"<p class=\"note\">{html_escape(header)}</p>" if header else "", frame_html(shown, index=False)]
    return page(label, "\n".join(b for b in body if b))


def html_escape(text: str) -> str:
    import html

    return html.escape(text)


def write_table_html(label: str, final: pd.DataFrame, rounds: pd.DataFrame, path: str | Path, *,
                     estimator: str = DEFAULT_ESTIMATOR, description: str = "",
                     study: Mapping[str, Any] | None = None) -> Path:
    """Write table ``label`` as an HTML page (``table_html``) at ``path``; ``study``: the config its numbers come
    from (the protocol beside the paper's: ``cell_differences``)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    values = cell_values(TABLES[label], final, rounds, estimator)
    p.write_text(table_html(label, values, description=description,
                            differ=cell_differences(TABLES[label], values, study)))
    return p
