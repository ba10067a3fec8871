"""The paper's tables as data (one :class:`TableSpec` per table, ``TABLES``): which jobs fill each cell, the layout,
the bold rule and the experiment family. Standard library only (no pandas, numpy or torch), so that the workflow
plans its table jobs from it when it parses (``workflow/rules``; tests/test_catalog.py lints it with Snakemake
alone); :mod:`fedbalance.presentation.tables` computes and writes the tables and re-exports these names.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

from fedbalance.presentation.names import (
    BEYOND_LOSSES, DATASET_NAME, ESTIMATORS, FOUR_LOSSES, GAMMAS, LOSS_LABEL, estimator_name, gamma_setting, tex_escape,
)
from fedbalance.common.records import setting_name

if TYPE_CHECKING:
    import pandas as pd

PUBLISHED = Path(__file__).parent.parent / "published" / "paper_numbers.csv"
TEMPLATES = Path(__file__).with_name("templates")  # package data: also found after a non-editable install
TABLE_SUFFIXES = (".tex", "_std.tex", "_vs_paper.csv", "_vs_paper.tex")
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
    ("title"), in a row under the column labels ("row"), or nowhere (None). ``open_rows``: a plug-in loss of the
    table's experiments gets a row; ``open_datasets``: a dataset of the study that is not one of the paper's (a
    plug-in's) gets the first dataset's cells under its own name (``tables.with_plugins``). ``caption_keys`` are the
    values the caption names, as (placeholder in ``caption``, dotted config key): a study's table names the study's
    values there, and the paper's beside them where they differ (``fedbalance.presentation.tables.table_caption``).
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
    open_datasets: bool = False
    caption_keys: tuple[tuple[str, str], ...] = ()

    def cell_frame(self) -> pd.DataFrame:
        """The cells as a frame (one row per cell)."""
        import pandas as pd

        return pd.DataFrame([c.__dict__ for c in self.cells], columns=list(Cell.__dataclass_fields__))

    @property
    def inputs(self) -> tuple[str, ...]:
        """The tidy frames the table reads: ``final`` always (cells or realised CS), ``rounds`` for round statistics."""
        return ("final",) if self.source == "final" else ("final", "rounds")


def _loss_table(label: str, caption: str, experiment: str, datasets: Iterable[str], metrics: tuple[str, ...],
                corner2: str = r"$\Gamma$", open_datasets: bool = True) -> TableSpec:
    """Datasets side by side, Γ columns, one row per loss in each metric block (``open_datasets``: and a block for a
    dataset of the study that is not the paper's)."""
    groups, cells = [], []
    for d in datasets:
        cols = tuple((lab, gamma_setting(g)) for lab, g in GAMMAS)
        groups.append(Group(rf"\textbf{{{DATASET_NAME[d]}}}", d, tuple((c, c) for c, _ in cols)))
        cells += [Cell(m, d, c, loss, experiment, s, loss) for m in metrics for c, s in cols for loss in FOUR_LOSSES]
    rows = tuple((loss, LOSS_LABEL[loss]) for loss in FOUR_LOSSES)
    return TableSpec(label, caption, "grid", tuple(cells), metrics, rows, tuple(groups),
                     corner=(r"\textbf{Data}", corner2), family=experiment, open_rows=True, open_datasets=open_datasets)


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
               r"below), $\Gamma$ = <<gamma>>.")
    return TableSpec("Sup_MFE", caption, "grid", tuple(cells), ("acm", "auc"),
                     (("mse", LOSS_LABEL["mse"]), ("mfe", LOSS_LABEL["mfe"])), tuple(groups),
                     corner=(r"\textbf{Data}", r"$C\!S$"), family="mfe", realised="row", open_datasets=True,
                     caption_keys=(("<<gamma>>", "partition.gamma"),))


def _sweep_table(label: str, caption: str, experiment: str, prefix: str, row: str, symbol: str,
                 values: tuple[float, ...], metrics: tuple[str, ...], loss: str, source: str = "final",
                 estimator: str | None = None, caption_keys: tuple[tuple[str, str], ...] = ()) -> TableSpec:
    cols = tuple((f"{v:.2f}", setting_name((prefix, v))) for v in values)
    cells = tuple(Cell(m, "mnist", c, row, experiment, s, loss) for m in metrics for c, s in cols)
    return TableSpec(label, caption, "sweep", cells, metrics, ((row, symbol),),
                     (Group("", "mnist", tuple((c, c) for c, _ in cols)),), corner=(symbol, ""), source=source,
                     estimator=estimator, bold="row", family=experiment, caption_keys=caption_keys)


def _early_table() -> TableSpec:
    stages = (("E", "E."), ("M", "M."), ("S", "S."))
    datasets = ("mnist", "cifar10", "fer2013", "femnist")
    cells = tuple(Cell(m, d, DATASET_NAME[d], st, "early", st, "ce")
                  for m in ("acm", "auc") for d in datasets for st, _ in stages)
    groups = tuple(Group(rf"\textbf{{{DATASET_NAME[d]}}}", d, ((DATASET_NAME[d], DATASET_NAME[d]),)) for d in datasets)
    return TableSpec("Importance_early", "Comparison when global imbalance ($\\Gamma$ = <<gamma>>) is acknowledged at "
                     "different stages of FL training (start S., middle M., end E.).", "single", cells,
                     ("acm", "auc"), stages, groups, corner=(r"\textbf{Metric}", r"\textbf{Stage}"), family="early",
                     open_datasets=True, caption_keys=(("<<gamma>>", "partition.gamma"),))


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
                     family=" + ".join(exp for exp, _ in blocks.values()), open_datasets=True)


def _imbalance_table() -> TableSpec:
    datasets = ("mnist", "cifar10", "fer2013", "femnist")
    cells = tuple(Cell("cs", d, lab, est, "losses", gamma_setting(g), "ratio")
                  for d in datasets for lab, g in GAMMAS for est in ESTIMATORS)
    rows = tuple((lab, lab) for lab, _ in GAMMAS)
    groups = (Group(r"\textbf{Estimator}", "", tuple((e, tex_escape(estimator_name(e))) for e in ESTIMATORS)),)
    return TableSpec("Monitor_under_imbalance", "Beyond the paper: CS between each estimator's composition estimate "
                     "(and the uniform guess $N/Q$) and the true composition of the round, mean $\\pm$ std over "
                     "rounds and seeds, Ratio-Loss jobs of the fixed-client loss comparison.", "imbalance", cells,
                     ("cs",), rows, groups, corner=(r"\textbf{Data}", r"$\Gamma$"), source="imbalance",
                     family="losses", open_datasets=True)


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
                     family="beyond", open_rows=True, open_datasets=True)


def _specs() -> dict[str, TableSpec]:
    three = ("mnist", "cifar10", "fer2013")
    specs = [
        _loss_table("FL_FEMNIST", CAPTION_LOSSES + " in federated learning, over FEMNIST and different levels of "
                    "global imbalance.", "losses", ("femnist",), ("acm", "auc"), open_datasets=False),
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
        _sweep_table("Sup_hyper_a", r"Performance comparison under different $\alpha$ values ($\beta$ = <<beta>>, global "
                     r"imbalance $\Gamma$ = <<gamma>>).", "alpha", "a", "alpha", r"$\alpha$",
                     (0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0, 3.0, 5.0), ("acm", "auc"), "ratio",
                     caption_keys=(("<<beta>>", "monitor.beta"), ("<<gamma>>", "partition.gamma"))),
        _sweep_table("Sup_hyper_b", r"Performance comparison under different $\beta$ values ($\alpha$ = <<alpha>>, global "
                     r"imbalance $\Gamma$ = <<gamma>>).", "beta", "b", "beta", r"$\beta$",
                     (0.02, 0.04, 0.06, 0.08, 0.1, 0.12, 0.15, 0.2, 0.3), ("acm", "auc"), "ratio",
                     caption_keys=(("<<alpha>>", "monitor.alpha"), ("<<gamma>>", "partition.gamma"))),
        _early_table(),
        _bs_ep_table(),
        _loss_table("Sup_majority", "Comparison of the classification accuracy on the majority classes between "
                    r"$L_{R\!L}$, $L_{C\!E}$, $L_{F\!L}$ and $L_{G\!H\!M\!C}$ in federated learning, over three "
                    "datasets and different levels of global imbalance.", "losses", three, ("acc_majority",)),
        _loss_table("Sup_majority_femnist", "Comparison of the classification accuracy on the majority classes "
                    r"between $L_{R\!L}$, $L_{C\!E}$, $L_{F\!L}$ and $L_{G\!H\!M\!C}$ in federated learning, over "
                    "FEMNIST and different levels of global imbalance.", "losses", ("femnist",), ("acc_majority",),
                    open_datasets=False),
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
