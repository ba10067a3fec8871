"""Tables: published numbers, cell means, bold rule, missing cells, formats, comparison, claims, LaTeX."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import needs_ci_tool, write_job

from fedbalance.aggregate import collect
from fedbalance.records import Job
from fedbalance.presentation.claims import VERDICTS, claims
from fedbalance.presentation.report import write_report as write_tables
from fedbalance.presentation.tables import (
    TABLES, bold_mask, cell_values, fmt, fmt_diff, layout, published, table_labels, vs_paper, write_paper_tables,
    write_table,
)

PAPER_LABELS = [
    "FL_FEMNIST", "Res_3_datasets", "Res_without_mismatch", "Sup_MFE", "Sup_hyper_T_ra", "Sup_hyper_a",
    "Sup_hyper_b", "Importance_early", "Sup_bs_ep", "Sup_majority", "Sup_majority_femnist", "Sup_fe_dynamic",
    "Sup_data_MNIST", "Sup_data_CIFAR10", "Sup_data_Fer2013",
]


@pytest.mark.parametrize("table,metric,dataset,column,row,value", [
    ("Res_3_datasets", "acm", "mnist", "100:1", "ratio", 56.50),
    ("Res_3_datasets", "acm", "cifar10", "50:1", "ce", 4.93),
    ("FL_FEMNIST", "auc", "femnist", "B.", "ce", 0.9652),
    ("Sup_hyper_T_ra", "cs_mean", "mnist", "1.25", "T_Ra", 0.9899),
    ("Sup_hyper_T_ra", "cs_var", "mnist", "5.00", "T_Ra", 28.86),
    ("Importance_early", "auc", "femnist", "FEMNIST", "S", 0.9850),
    ("Res_without_mismatch", "acm", "mnist", "10:1", "ghmc", 92.91),
    ("Sup_bs_ep", "cs_var", "cifar10", "32", "bs", 14.34),
    ("Sup_majority_femnist", "acc_majority", "femnist", "100:1", "ratio", 92.93),
    ("Sup_data_Fer2013", "acm", "fer2013", "0.7411/100:1", "ratio", 5.21),
    ("Sup_MFE", "auc", "fer2013", "0.6732", "mfe", 0.7382),
    ("Sup_hyper_b", "acm", "mnist", "0.10", "beta", 82.52),
])
def test_published_cells_read_by_eye(table: str, metric: str, dataset: str, column: str, row: str,
                                     value: float) -> None:
    pub = published()
    sel = pub[(pub.table == table) & (pub.metric == metric) & (pub.dataset == dataset) & (pub.column == column)
              & (pub.row == row)]
    assert sel["value"].tolist() == [pytest.approx(value)]


def test_published_covers_every_table_and_skips_dashes() -> None:
    pub = published()
    assert sorted(set(pub.table)) == sorted(PAPER_LABELS)
    mn = pub[(pub.table == "Sup_data_MNIST") & (pub.row == "ghmc") & pub.column.str.startswith("0.3984")]
    assert sorted(mn.column) == ["0.3984/B.", "0.3984/B."]
    assert len(pub[pub.table == "Res_3_datasets"]) == 2 * 3 * 5 * 4


def test_every_published_cell_has_a_spec_cell() -> None:
    pub = published()
    assert table_labels()[: len(PAPER_LABELS)] == PAPER_LABELS and "Monitor_under_imbalance" in table_labels()
    for label in PAPER_LABELS:
        keys = set(map(tuple, TABLES[label].cell_frame()[["metric", "dataset", "column", "row"]].values))
        want = set(map(tuple, pub.loc[pub.table == label, ["metric", "dataset", "column", "row"]].values))
        assert want <= keys, label


def test_formats() -> None:
    assert fmt(4.93, "acm") == "4.93"
    assert fmt(0.0, "acm") == "0.00" and fmt(0.004, "acc_majority") == "0.00"
    assert fmt(100.0, "acm") == "100.00"
    assert fmt(98.2249, "acm") == "98.22"
    assert fmt(0.99071, "auc") == ".9907"
    assert fmt(0.98994, "cs_mean") == ".9899"
    assert fmt(4.34, "cs_var") == "4.340"
    assert fmt(28.857, "cs_var") == "28.86"
    assert fmt(float("nan"), "auc") == "--"
    assert fmt_diff(3.5, "acm") == "+3.50" and fmt_diff(-0.0027, "cs_mean") == "-.0027"
    assert fmt_diff(0.66, "cs_var") == "+0.6600"


@pytest.fixture()
def frames(tmp_path: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    root = tmp_path / "res"
    acm = {("ce", 0): 0.40, ("ce", 1): 0.50, ("focal", 0): 0.30, ("ratio", 0): 0.60, ("ratio", 1): 0.62,
           ("ghmc", 0): 0.615}
    for (loss, seed), a in acm.items():
        write_job(root, Job("losses", "mnist", "g100", loss, seed), acm=a, auc=0.9 if loss in ("ce", "ratio") else 0.8,
                  acc_majority=0.97, cs={"released": [0.9, 0.8], "uniform": [0.95, 0.9], "paper": [0.5, 0.7],
                                         "nnls": [0.99, 0.97]})
    for t, cs in (("t1", [0.90, 0.94, 0.98]), ("t1.25", [0.96, 0.97, 0.98])):
        for seed in (0, 1):
            write_job(root, Job("t_ra", "mnist", t, "ce", seed), train_loss=[1, 1, 1],
                      cs={"paper": [c - 0.01 * seed for c in cs]})
    for stage, a in (("S", 0.9), ("M", 0.5), ("E", 0.7)):
        write_job(root, Job("early", "mnist", stage, "ce", 0), acm=a)
    for c, a in ((5, 0.5), (4, 0.6), (2, 0.2)):
        for loss, off in (("ce", 0.0), ("ratio", 0.05)):
            write_job(root, Job("mismatch", "mnist", f"c{c}_g10", loss, 0), acm=a + off, mean_cs=c / 10)
    write_job(root, Job("monitor", "mnist", "default", "ce", 0), cs={"released": [0.99, 0.995], "uniform": [0.98, 0.99]})
    return collect(root)


def test_cell_mean_std_and_bold(frames: tuple[pd.DataFrame, pd.DataFrame]) -> None:
    final, rounds = frames
    spec = TABLES["Res_3_datasets"]
    v = cell_values(spec, final, rounds).set_index(["metric", "dataset", "column", "row"])
    ce = v.loc[("acm", "mnist", "100:1", "ce")]
    assert ce["mean"] == pytest.approx(45.0) and ce["std"] == pytest.approx(np.std([40, 50], ddof=1))
    assert ce["n"] == 2
    assert v.loc[("acm", "mnist", "100:1", "ratio"), "mean"] == pytest.approx(61.0)
    assert np.isnan(v.loc[("acm", "mnist", "10:1", "ratio"), "mean"])
    values = cell_values(spec, final, rounds)
    bold = values[bold_mask(spec, values)]
    acm_bold = bold[(bold.metric == "acm") & (bold.column == "100:1")]
    assert acm_bold["row"].tolist() == ["ghmc"]
    auc_bold = bold[(bold.metric == "auc") & (bold.column == "100:1")]
    assert sorted(auc_bold["row"]) == ["ce", "ratio"]


def test_monitor_table_pools_rounds_and_seeds(frames: tuple[pd.DataFrame, pd.DataFrame]) -> None:
    final, rounds = frames
    v = cell_values(TABLES["Sup_hyper_T_ra"], final, rounds, estimator="nnls").set_index(["metric", "column"])
    pooled = [0.90, 0.94, 0.98, 0.89, 0.93, 0.97]
    assert v.loc[("cs_mean", "1.00"), "mean"] == pytest.approx(np.mean(pooled))
    assert v.loc[("cs_var", "1.00"), "mean"] == pytest.approx(np.var(pooled, ddof=1) * 1e5)
    assert v.loc[("cs_mean", "1.00"), "std"] == pytest.approx(np.std([0.94, 0.93], ddof=1))
    imb = cell_values(TABLES["Monitor_under_imbalance"], final, rounds).set_index(["dataset", "column", "row"])
    cell = imb.loc[("mnist", "100:1", "uniform")]
    assert cell["mean"] == pytest.approx(np.mean([0.95, 0.9] * 5))
    assert cell["n"] == 2


def test_vs_paper_diff(frames: tuple[pd.DataFrame, pd.DataFrame]) -> None:
    final, rounds = frames
    cmp = vs_paper(cell_values(TABLES["Res_3_datasets"], final, rounds)).set_index(["metric", "dataset", "column",
                                                                                     "row"])
    r = cmp.loc[("acm", "mnist", "100:1", "ratio")]
    assert r["paper"] == pytest.approx(56.50) and r["diff"] == pytest.approx(61.0 - 56.50)
    assert r["n_seeds"] == 2
    missing = cmp.loc[("acm", "cifar10", "B.", "ce")]
    assert np.isnan(missing["ours_mean"]) and missing["paper"] == pytest.approx(57.57)


def test_claims_verdicts(frames: tuple[pd.DataFrame, pd.DataFrame]) -> None:
    final, rounds = frames
    by_text = {c.text: c for c in claims(final, rounds, "released")}
    assert {c.verdict for c in by_text.values()} <= set(VERDICTS)
    early = by_text["Early acknowledgment helps: Ac.M S. > M. > E."]
    # one seed per stage: no spread to judge the order by, whatever the means say
    assert early.verdict == "too few seeds" and "M 50.00" in early.evidence and "2 on < 2 seeds" in early.evidence
    res3 = by_text["Ratio Loss has the best Ac.M in most cells of Res_3_datasets"]
    # ratio (60, 62) is beaten by GHM-C's single seed (61.5): that comparison has no spread
    assert (res3.verdict, res3.evidence) == ("too few seeds", "0/1 cells; 1 on < 2 seeds")
    # AUC: ratio and CE both 0.9 on two seeds each -> a zero gap, within the (zero) spread
    auc = by_text["Ratio Loss has the best AUC in most cells of Res_3_datasets"]
    assert (auc.verdict, auc.evidence) == ("not distinguishable", "1/1 cells; 1 within the seeds' spread")
    assert by_text["Ratio Loss has the best Ac.M in most cells of FL_FEMNIST"].verdict == "not enough data"
    mism = by_text["Larger mismatch hurts all losses: Ac.M falls as classes per client fall (Gamma = 10)"]
    assert mism.verdict == "too few seeds" and "0/2 (dataset, loss) monotone" in mism.evidence
    assert by_text["Ratio Loss has the best Ac.M at every mismatch level (Res_mismatch, Gamma = 10)"].verdict == \
        "too few seeds"
    assert by_text["Monitor: mean CS above 0.98 on every dataset (estimator released)"].verdict == "too few seeds"
    from fedbalance.presentation.claims import UNIFORM_ABOVE_TEXT

    # the monitor job's uniform guess: rounds 0.98 and 0.99 -> mean 0.985, one seed
    guess = by_text[UNIFORM_ABOVE_TEXT]
    assert guess.verdict == "too few seeds" and guess.evidence == "mnist: uniform .9850; 1 on < 2 seeds"
    # two seeds with identical CS per round: zero spread, so the 0.1 gap to the uniform guess is clear
    imb = by_text["Monitor under imbalance (Gamma >= 10): released beats the uniform guess"]
    assert imb.verdict == "does not hold" and "1 clear against" in imb.evidence
    assert by_text["Sup_hyper_T_ra: 1.25 gives the best mean CS"].verdict == "holds"
    maj = by_text["Ratio Loss does not sacrifice the majority classes (Ac. within 1 point of CE or better)"]
    assert maj.verdict == "holds"


def _two_loss_frames(root: Path, ce: list[float], ratio: list[float]) -> tuple[pd.DataFrame, pd.DataFrame]:
    for loss, accs in (("ce", ce), ("ratio", ratio)):
        for seed, a in enumerate(accs):
            write_job(root, Job("losses", "mnist", "g10", loss, seed), acm=a, auc=0.9)
    return collect(root)


@pytest.mark.parametrize("ce, ratio, verdict", [
    ([0.50, 0.52, 0.54], [0.70, 0.72, 0.74], "holds"),                # gap 20 points, spread 2
    ([0.50, 0.52, 0.54], [0.30, 0.32, 0.34], "does not hold"),        # gap -20 points
    ([0.50, 0.60, 0.70], [0.55, 0.65, 0.75], "not distinguishable"),  # gap 5 points, spread 10
    ([0.50], [0.90], "too few seeds"),                                # one seed each: no spread
])
def test_claims_need_a_gap_beyond_the_seeds_spread(tmp_path: Path, ce: list[float], ratio: list[float],
                                                   verdict: str) -> None:
    final, rounds = _two_loss_frames(tmp_path / "res", ce, ratio)
    claim = next(c for c in claims(final, rounds) if c.text == "Ratio Loss has the best Ac.M in most cells of "
                 "Res_3_datasets")
    gap = 100 * (np.mean(ratio) - np.mean(ce))
    spread = 100 * max(np.std(ce, ddof=1), np.std(ratio, ddof=1)) if len(ce) > 1 else float("nan")
    assert claim.verdict == verdict, (claim, gap, spread)
    if verdict in ("holds", "does not hold"):
        assert abs(gap) > spread
    elif verdict == "not distinguishable":
        assert abs(gap) <= spread


def test_claims_markdown_explains_the_verdicts(frames: tuple[pd.DataFrame, pd.DataFrame], tmp_path: Path) -> None:
    final, rounds = frames
    write_tables(final, rounds, tmp_path)
    md = (tmp_path / "claims.md").read_text()
    for v in VERDICTS:
        assert f"**{v}**" in md
    assert "| **too few seeds** |" in md and "| **not distinguishable** |" in md


def test_write_tables_outputs(frames: tuple[pd.DataFrame, pd.DataFrame], tmp_path: Path) -> None:
    final, rounds = frames
    out = tmp_path / "tables"
    paths = write_tables(final, rounds, out)
    assert all(p.is_file() for p in paths)
    doc = (out / "paper_tables.tex").read_text()
    for label in table_labels():
        for name in (label, f"{label}_std", f"{label}_vs_paper"):
            assert f"\\input{{{name}}}" in doc
        assert (out / f"{label}_vs_paper.csv").is_file()
    res = (out / "Res_3_datasets.tex").read_text()
    assert r"\label{Res_3_datasets}" in res
    assert r"\textbf{61.50}" in res and r"\textbf{61.00}" not in res
    line = next(ln for ln in res.splitlines() if ln.startswith(r"\textbf{Ac.M"))
    assert line.count("--") == 14 and "40.00" not in line and "45.00" in line
    fer = (out / "Sup_data_Fer2013.tex").read_text()
    assert fer.count("--") >= 2 * 4 * 15 and "0.9343" in fer and "0.6732" not in fer
    std = (out / "Res_3_datasets_std.tex").read_text()
    assert fmt(float(np.std([40, 50], ddof=1)), "acm") in std
    cmp = pd.read_csv(out / "Res_3_datasets_vs_paper.csv")
    assert list(cmp.columns) == ["table", "metric", "dataset", "column", "row", "ours_mean", "ours_std", "n_seeds",
                                 "paper", "diff"]
    assert "| **holds** |" in (out / "claims.md").read_text()
    for p in out.glob("*.tex"):
        text = p.read_text()
        assert text.count("{") == text.count("}"), p.name
        assert not re.search(r"\\(usepackage|multirow)", text) or p.name == "paper_tables.tex", p.name


def test_summary_dir_inputs_tables_by_relative_path(frames: tuple[pd.DataFrame, pd.DataFrame], tmp_path: Path) -> None:
    final, rounds = frames
    write_tables(final, rounds, tmp_path / "tables", summary_dir=tmp_path)
    doc = (tmp_path / "paper_tables.tex").read_text()
    assert "\\input{tables/Res_3_datasets}" in doc and "\\input{tables/FL_FEMNIST_vs_paper}" in doc
    assert (tmp_path / "claims.md").is_file() and not (tmp_path / "tables" / "claims.md").exists()


def test_paper_tables_compile(frames: tuple[pd.DataFrame, pd.DataFrame], tmp_path: Path) -> None:
    """paper_tables.tex compiles (twice: the contents list) with the distribution's pdflatex, which .ci/run installs;
    the study's identity heads it and the contents list names each table's section."""
    needs_ci_tool(None if shutil.which("pdflatex") else "pdflatex is not installed (apt-get install texlive-latex-base)")
    final, rounds = frames
    write_tables(final, rounds, tmp_path / "tables", summary_dir=tmp_path)
    study = {"config": "config/my_study.yaml", "datasets": "MNIST (mnist5k)", "origin": "trained by this workflow: 3 jobs"}
    write_paper_tables(tmp_path / "paper_tables.tex", tmp_path / "tables", labels=["Res_3_datasets", "Sup_hyper_a"],
                       not_run=["FL_FEMNIST"], study=study)
    for _ in range(2):
        run = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "paper_tables.tex"],
                             cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stdout[-2000:]
    assert (tmp_path / "paper_tables.pdf").read_bytes()[:5] == b"%PDF-"
    toc = (tmp_path / "paper_tables.toc").read_text()
    assert "{1}Res\\_3\\_datasets}{2}" in toc and "{2}Sup\\_hyper\\_a}{3}" in toc and "FL\\_FEMNIST" not in toc


def test_paper_tables_open_with_the_study_and_list_what_was_not_run(
        frames: tuple[pd.DataFrame, pd.DataFrame], tmp_path: Path) -> None:
    final, rounds = frames
    write_tables(final, rounds, tmp_path / "tables", summary_dir=tmp_path)
    study = {"config": "config/my_study.yaml", "datasets": "MNIST (mnist5k)", "origin": "rendered from reference/mnist"}
    doc = write_paper_tables(tmp_path / "paper_tables.tex", tmp_path / "tables", labels=["Sup_hyper_a"],
                             not_run=["FL_FEMNIST", "Sup_bs_ep"], study=study).read_text()
    head = doc[:doc.index("\\tableofcontents")]
    assert "\\item[Study] config/my\\_study.yaml" in head and "\\item[Numbers] rendered from reference/mnist" in head
    assert "\\textbf{Not run in this study}" in head and "FL\\_FEMNIST, Sup\\_bs\\_ep" in head
    assert re.findall(r"\\input\{tables/(\w+)\}", doc) == ["Sup_hyper_a", "Sup_hyper_a_std", "Sup_hyper_a_vs_paper"]
    assert "\\section{Sup\\_hyper\\_a}" in doc


def test_vs_paper_tex_lists_the_cells_with_numbers(tmp_path: Path) -> None:
    """The LaTeX comparison lists the cells the study has numbers for (the CSV keeps every cell) and says how many it
    leaves out; each chunk sits in a box with its heading, so a heading never ends a page."""
    root = tmp_path / "res"
    for seed in (0, 1):
        write_job(root, Job("losses", "mnist", "g10", "ratio", seed), acm=0.8 + 0.02 * seed)
    final, rounds = collect(root)
    write_table("Res_3_datasets", final, rounds, tmp_path / "tables")
    tex = (tmp_path / "tables" / "Res_3_datasets_vs_paper.tex").read_text()
    cells = len(TABLES["Res_3_datasets"].cells)
    rows = [line for line in tex.splitlines() if line.endswith("\\\\") and not line.startswith("Metric")]
    assert len(rows) == 2 and all("Ratio" in r or "R\\!L" in r for r in rows), rows  # Ac.M and AUC of the one cell
    assert f"{cells - 2} cells without numbers in this study left out" in tex
    assert tex.index("\\begin{minipage}") < tex.index("\\textbf{Res") < tex.index("\\begin{tabular}")
    assert len(pd.read_csv(tmp_path / "tables" / "Res_3_datasets_vs_paper.csv")) == cells


def test_beyond_paper_table(tmp_path: Path) -> None:
    root = tmp_path / "res"
    acm = {("la", 0): 0.30, ("la", 1): 0.36, ("fedrs", 0): 0.20, ("ce", 0): 0.10, ("ratio", 0): 0.25}
    for (loss, seed), a in acm.items():
        write_job(root, Job("beyond", "cifar10", "g50", loss, seed), acm=a, auc=0.7 if loss == "fedrs" else 0.6)
    write_job(root, Job("losses", "cifar10", "g50", "ce", 0), acm=0.99)  # another family: not in this table
    final, rounds = collect(root)
    spec = TABLES["Beyond_paper"]
    assert "Beyond_paper" in table_labels()
    assert [r for r, _ in spec.rows] == ["ce", "ratio", "ratio_median", "la", "la_local", "fedlc", "fedrs"]
    values = cell_values(spec, final, rounds)
    assert len(values) == 2 * 2 * 5 * 7  # metrics x datasets x Γ x losses
    v = values.set_index(["metric", "dataset", "column", "row"])
    assert v.loc[("acm", "cifar10", "50:1", "la"), "mean"] == pytest.approx(33.0)
    assert v.loc[("acm", "cifar10", "50:1", "la"), "n"] == 2
    assert v.loc[("acm", "cifar10", "50:1", "ce"), "mean"] == pytest.approx(10.0)
    assert np.isnan(v.loc[("acm", "cifar10", "50:1", "la_local"), "mean"])
    bold = values[bold_mask(spec, values)]
    assert bold.loc[bold.metric == "acm", "row"].tolist() == ["la"]
    assert bold.loc[bold.metric == "auc", "row"].tolist() == ["fedrs"]
    _, lines = layout(spec, values, final)
    la_row = next(line for line in lines if line != "hline" and line[1] == spec.rows[3][1])  # the Ac.M block's
    assert sum(cell.startswith(r"\textbf{33") for cell in la_row) == 1


def test_sweep_and_grid_claims_say_how_much_was_run(tmp_path: Path) -> None:
    """Sup_hyper_a with 2 of its 10 α values, Sup_MFE with 1 of its 12 cells (one with MSE alone): the verdict comes
    from what was run, and the evidence says how much of the sweep or grid that is."""
    root = tmp_path / "res"
    for setting, accs in (("a1", [0.80, 0.81]), ("a2", [0.60, 0.61])):
        for seed, a in enumerate(accs):
            write_job(root, Job("alpha", "mnist", setting, "ratio", seed), acm=a)
    for loss, accs in (("mse", [0.70, 0.71]), ("mfe", [0.50, 0.51])):
        for seed, a in enumerate(accs):
            write_job(root, Job("mfe", "mnist", "c5", loss, seed), acm=a)
    write_job(root, Job("mfe", "mnist", "c4", "mse", 0), acm=0.6)
    final, rounds = collect(root)
    by_text = {c.text: c for c in claims(final, rounds)}
    alpha = by_text["Sup_hyper_a: 1.00 gives the best Ac.M"]
    # 80.5 ± 0.71 against 60.5 ± 0.71: one clear comparison for
    assert (alpha.verdict, alpha.evidence) == ("holds", "best: 1.00; 2 of 10 values run; 1 clear for")
    mfe = by_text["MFE with local knowledge is no better than MSE (Sup_MFE Ac.M)"]
    assert (mfe.verdict, mfe.evidence) == ("holds", "MFE <= MSE in 1/1 cells; 1 of 12 cells run; 1 clear for")
    assert by_text["Sup_hyper_b: 0.10 gives the best Ac.M"].evidence == "best: --; 0 of 9 values run"


def test_the_specs_are_defined_once_and_re_exported() -> None:
    """The tables' specs live in presentation.table_specs (standard library only, what the workflow parses with);
    presentation.tables re-exports the same objects."""
    from fedbalance.presentation import table_specs

    assert table_specs.TABLES is TABLES and table_specs.TABLE_SUFFIXES[0] == ".tex"
    assert list(TABLES) == table_labels() and len(TABLES) == 17
