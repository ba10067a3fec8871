"""Transcribe every numeric table of the paper's LaTeX into ``src/fedbalance/published/paper_numbers.csv``.

Long format: table, metric, dataset, column, row, value. Values are stored as printed
(Ac.M and Ac. in %, AUC and CS as fractions, variances in units of 1e-5); '-' cells are left out
and the typo "92,91" (Res_without_mismatch) is read as 92.91. ``column`` is the printed column
header ("B.", "10:1", "0.6960", "1.25", a dataset name in Importance_early), prefixed by the
printed group ("0.6960/10:1") where the paper groups columns by CS level; ``row`` is the loss key
(ce, focal, ghmc, ratio, mse, mfe), the stage (S, M, E) or the swept parameter (T_Ra, alpha, beta,
bs, ep).

Usage: python scripts/transcribe_paper.py [paper.tex.txt] [out.csv]
"""

from __future__ import annotations

import csv
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAPER = Path("/work/shared/paper/ratio-loss-aaai21.tex.txt")
OUT = ROOT / "src/fedbalance/published/paper_numbers.csv"
LABELS = [
    "FL_FEMNIST", "Res_3_datasets", "Res_without_mismatch", "Sup_MFE", "Sup_hyper_T_ra", "Sup_hyper_a",
    "Sup_hyper_b", "Importance_early", "Sup_bs_ep", "Sup_majority", "Sup_majority_femnist",
    "Sup_fe_dynamic", "Sup_data_MNIST", "Sup_data_CIFAR10", "Sup_data_Fer2013",
]
DATASETS = {"MNIST": "mnist", "CIFAR10": "cifar10", "Fer2013": "fer2013", "FEMNIST": "femnist"}
LOSSES = {"CE": "ce", "FL": "focal", "GHMC": "ghmc", "RL": "ratio", "MSE": "mse", "MFE": "mfe"}
SWEEP_ROW = {"Sup_hyper_T_ra": "T_Ra", "Sup_hyper_a": "alpha", "Sup_hyper_b": "beta"}


def _strip(cell: str) -> str:
    """Drop \\textbf, \\multicolumn/\\multirow wrappers and math spacing; keep the text."""
    cell = re.sub(r"\\multicolumn\{\d+\}\{[^}]*\}", "", cell)
    cell = re.sub(r"\\multirow\{\d+\}\{\*\}", "", cell)
    cell = cell.replace("\\textbf", "").replace("\\!", "").replace("$", "")
    cell = re.sub(r"\\begin\{tabular\}\[c\]\{@\{\}c@\{\}\}|\\end\{tabular\}", "", cell)
    cell = cell.replace("{", "").replace("}", "").replace("\\\\", " ").replace("\\%", "%")
    return " ".join(cell.split())


def _span(cell: str) -> int:
    m = re.search(r"\\multicolumn\{(\d+)\}", cell)
    return int(m.group(1)) if m else 1


def table_rows(tex: str, label: str) -> list[list[str]]:
    """Rows of the tabular of the table labelled ``label``; multicolumn cells repeated over their span."""
    end = tex.index(f"\\label{{{label}}}")
    start = tex.rindex("\\begin{table", 0, end)
    body = tex[start:end]
    body = body[body.index("\\begin{tabular}{") :]
    body = body[body.index("}", len("\\begin{tabular}{")) + 1 : body.rindex("\\end{tabular}")]
    body = body.replace("\\begin{tabular}[c]{@{}c@{}}", "<").replace("\\end{tabular}", ">")
    rows = []
    for line in re.split(r"\\\\(?![^<]*>)", body):
        line = line.replace("\\hline", "").strip()
        if not line:
            continue
        cells = []
        for c in line.split("&"):
            cells += [_strip(c.replace("<", "").replace(">", ""))] * _span(c)
        rows.append(cells)
    return rows


def value(text: str) -> float | None:
    """A printed number as float; None for '-'."""
    text = text.strip().replace(",", ".")
    if text in ("-", ""):
        return None
    return float(text)


def _metric(text: str) -> str | None:
    if text.startswith(("Ac.M", "AC.M")):
        return "acm"
    if text.startswith("AUC"):
        return "auc"
    if text.startswith("Ac."):
        return "acc_majority"
    if text.startswith("Mean"):
        return "cs_mean"
    if text.startswith("Var"):
        return "cs_var"
    return None


def _loss(text: str) -> str:
    m = re.match(r"L_([A-Z]+)", text.replace(" ", ""))
    if not m:
        raise ValueError(f"not a loss label: {text!r}")
    return LOSSES[m.group(1)]


def loss_table(label: str, rows: list[list[str]]) -> list[dict]:
    """Tables with a group header (datasets or CS levels), a column header and loss rows per metric."""
    groups, cols = rows[0][2:], rows[1][2:]
    corner = rows[0][0]
    out, metric = [], None
    for r in rows[2:]:
        metric = _metric(r[0]) or metric
        loss = _loss(r[1])
        for g, c, v in zip(groups, cols, r[2:]):
            x = value(v)
            if x is None:
                continue
            if corner in DATASETS:
                dataset, column = DATASETS[corner], f"{g.replace('CS=', '')}/{c}"
            else:
                dataset, column = DATASETS[g], c
            out.append(dict(table=label, metric=metric, dataset=dataset, column=column, row=loss, value=x))
    return out


def sweep_table(label: str, rows: list[list[str]]) -> list[dict]:
    """One header row of parameter values, one row per metric (T_Ra, alpha, beta sweeps on MNIST)."""
    cols = rows[0][1:]
    out = []
    for r in rows[1:]:
        metric = _metric(r[0])
        for c, v in zip(cols, r[1:]):
            out.append(dict(table=label, metric=metric, dataset="mnist", column=c, row=SWEEP_ROW[label], value=value(v)))
    return out


def early_table(label: str, rows: list[list[str]]) -> list[dict]:
    """Metric and stage rows, one column per dataset."""
    cols = rows[0][2:]
    out, metric = [], None
    for r in rows[1:]:
        metric = _metric(r[0]) or metric
        stage = r[1].rstrip(".")
        for c, v in zip(cols, r[2:]):
            out.append(dict(table=label, metric=metric, dataset=DATASETS[c], column=c, row=stage, value=value(v)))
    return out


def bs_ep_table(label: str, rows: list[list[str]]) -> list[dict]:
    """Two blocks (batch size, local epochs), each a header row of values and Mean / Var. rows."""
    groups = rows[0][1:]
    out, cols, block = [], [], ""
    for r in rows[1:]:
        metric = _metric(r[0])
        if metric is None:
            block, cols = ("bs" if r[0].startswith("Batch") else "ep"), r[1:]
            continue
        for g, c, v in zip(groups, cols, r[1:]):
            out.append(dict(table=label, metric=metric, dataset=DATASETS[g], column=c, row=block, value=value(v)))
    return out


def transcribe(tex: str) -> list[dict]:
    """Every published number of the paper's tables."""
    out = []
    for label in LABELS:
        rows = table_rows(tex, label)
        if label in SWEEP_ROW:
            out += sweep_table(label, rows)
        elif label == "Importance_early":
            out += early_table(label, rows)
        elif label == "Sup_bs_ep":
            out += bs_ep_table(label, rows)
        else:
            out += loss_table(label, rows)
    return out


def main(argv: list[str]) -> None:
    paper = Path(argv[1]) if len(argv) > 1 else PAPER
    out = Path(argv[2]) if len(argv) > 2 else OUT
    records = transcribe(paper.read_text())
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["table", "metric", "dataset", "column", "row", "value"])
        w.writeheader()
        for r in records:
            w.writerow({**r, "value": f"{r['value']:g}"})
    print(f"{len(records)} numbers -> {out}")


if __name__ == "__main__":
    main(sys.argv)
