"""What a study's report shows (fedbalance.presentation.study, the tables' and summaries' HTML pages): which tables
and figures a study fills, its protocol in words, a table as HTML, a Markdown summary as HTML."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import write_job
from fedbalance.jobs.aggregate import collect
from fedbalance.jobs.config import jobs, load_config
from fedbalance.presentation.html import markdown_page
from fedbalance.presentation.study import (
    describe, figure_reads, figures_run, filling, identity, landing_page, setting_words, study_page, table_reads,
    tables_run,
)
from fedbalance.presentation.tables import TABLES, cell_values, table_frame, table_html
from fedbalance.presentation.names import ESTIMATORS
from fedbalance.common.records import Job

REPO = Path(__file__).resolve().parents[1]
QUICK = REPO / "config" / "quick.yaml"


@pytest.fixture(scope="module")
def quick():
    cfg = load_config(QUICK)
    return cfg, jobs(cfg)


def test_what_the_quick_study_fills(quick) -> None:
    """config/quick.yaml runs MNIST alone at Γ in {B., 10} and no FEMNIST family (read from the config by hand): the
    FEMNIST, CIFAR10 and Fer2013 tables, the batch-size/epochs table and the Γ = 100 curves are not run."""
    _, study = quick
    run, not_run = tables_run(study)
    assert not_run == ["FL_FEMNIST", "Sup_bs_ep", "Sup_majority_femnist", "Sup_fe_dynamic", "Sup_data_CIFAR10",
                       "Sup_data_Fer2013"]
    assert len(run) == 11 and "Res_3_datasets" in run
    run, not_run = figures_run(study)
    # a figure of one dataset the quick study lacks (CIFAR10, FEMNIST) is not run: it is not drawn from MNIST instead
    assert not_run == ["Sup_client_num_CIFAR10", "Sup_client_num_FEMNIST", "Sup_curve_cifar_ratio",
                       "Sup_curve_femnist_ratio", "Sup_curve_cifar_four_losses", "Sup_curve_femnist_four_losses"]
    assert {"Res_mismatch", "Sup_data_splitting", "Losses_acm_gamma", "Headline_monitor"} <= set(run)


def test_a_figure_of_one_dataset_reads_that_dataset_alone() -> None:
    reads = figure_reads("Sup_curve_cifar_four_losses")
    assert {(r.dataset, r.setting) for r in reads} == {("cifar10", "g100")} and len(reads) == 4
    study = [Job("losses", "mnist", "g100", "ce", 0), Job("losses", "cifar10", "g100", "ce", 0)]
    assert filling(reads, study) == study[1:]
    assert "Sup_curve_cifar_four_losses" in figures_run(study[:1])[1]


@pytest.mark.parametrize("label", list(TABLES))
def test_every_table_is_filled_from_the_datasets_it_names(label: str) -> None:
    """Each cell of a table reads the dataset it names: the same jobs on every other dataset (and on one the paper
    has not) beside them change no cell, and alone the paper's other datasets leave the table not run; a dataset the
    paper has not runs exactly the tables that list datasets (``open_datasets``)."""
    spec = TABLES[label]
    named = sorted({c.dataset for c in spec.cells})
    value = {d: 0.1 * (i + 1) for i, d in enumerate(["mnist", "cifar10", "fer2013", "femnist", "other"])}
    cells = {(c.experiment, c.setting, c.loss) for c in spec.cells}
    final, rounds = [], []
    for d in value:
        for e, s, loss in cells:
            for seed in (0, 1):
                key = {"experiment": e, "dataset": d, "setting": s, "loss": loss, "seed": seed}
                v = value[d] + 0.01 * seed
                final.append({**key, "acc_minority": v, "acc_majority": v, "auc_hard": v, "mean_cs": v, "plugin": None})
                rounds += [{**key, "round": r, **{f"cs_{est}": v for est in ESTIMATORS}} for r in range(2)]
    values = cell_values(spec, pd.DataFrame(final), pd.DataFrame(rounds))
    scale = {"acm": 100.0, "acc_majority": 100.0}
    means = values[values.metric != "cs_var"]
    expected = [scale.get(m, 1.0) * (value[d] + 0.005) for m, d in zip(means.metric, means.dataset)]
    np.testing.assert_allclose(means["mean"], expected, rtol=1e-9)
    elsewhere = [Job(e, d, s, loss, 0) for e, s, loss in cells for d in value if d not in named and d != "other"]
    assert label in tables_run(elsewhere)[1]
    # a dataset the paper has not (a plug-in's) fills the tables that list datasets, under its own name, and no other
    plugin = [Job(e, "other", s, loss, 0) for e, s, loss in cells]
    assert (label in tables_run(plugin)[0]) == spec.open_datasets
    assert label in tables_run(elsewhere + [Job(spec.cells[0].experiment, spec.cells[0].dataset, spec.cells[0].setting,
                                                spec.cells[0].loss, 0)])[0]


def test_the_protocol_in_words(quick) -> None:
    """Res_3_datasets of the quick study: 4 losses x {B., 10} x 2 seeds, 16 rounds over the same 10 clients."""
    cfg, study = quick
    words = describe(cfg, filling(table_reads("Res_3_datasets"), study))
    assert words == {"datasets": "MNIST (mnist5k)", "settings": "balanced; Γ = 10", "losses": "ce, focal, ghmc, ratio",
                     "rounds": "16 rounds", "clients": "10 of 10", "seeds": "2 (0, 1)", "jobs": "16"}
    central = describe(cfg, filling(table_reads("Res_without_mismatch"), study))
    assert central["rounds"] == "8 epochs (centralised)" and central["clients"] == "–"
    assert setting_words("c5_g10") == "5 classes a client, Γ = 10" and setting_words("S") == "S"
    assert setting_words("t1.25") == "T_Ra = 1.25" and setting_words("g1") == "balanced"


def test_the_landing_page_names_the_study(quick) -> None:
    cfg, study = quick
    who = identity(cfg, study, configfiles=["config/quick.yaml"], trained=38, copied=8, derived=1)
    assert who["origin"] == ("trained by this workflow: 47 jobs, 38 trained, 8 copied from a job that trains alike "
                             "and 1 derived from a trained job's trajectory")
    ref = identity(cfg, study[:10], configfiles=["config/mnist.yaml"], trained=0, copied=3, derived=0,
                   reference_dir="reference/mnist")
    assert ref["origin"].startswith("rendered from the reference set reference/mnist, nothing trained: 10 jobs, 7 held")
    page = landing_page(cfg, study, who)
    assert "**Study**: ``config/quick.yaml``; MNIST (mnist5k); trained by this workflow: 47 jobs" in page
    # the quick study runs 2 seeds at most in a family: no verdict, and the page says so
    assert "this study runs 2 at most in a family" in page
    detail = study_page(cfg, study, who, tables_not_run=["FL_FEMNIST"], figures_not_run=["Sup_client_num_FEMNIST"])
    assert "tables FL_FEMNIST; figures Sup_client_num_FEMNIST." in detail
    rows = re.findall(r"<tr>(.*?)</tr>", detail, re.S)
    cells = [[c.strip() for c in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", r)] for r in rows]
    assert next(c for c in cells if c[0] == "losses") == [
        "losses", "balanced; Γ = 10", "ce, focal, ghmc, ratio", "16 rounds", "10 of 10", "2 (0, 1)", "16"]
    families = {j.experiment for j in study}
    assert [c[0] for c in cells] == ["family", *[f for f in cfg["experiments"] if f in families]]


def test_a_table_as_html_shows_the_cells_with_numbers(tmp_path: Path) -> None:
    root = tmp_path / "res"
    for seed, (ce, ratio) in enumerate([(0.30, 0.80), (0.34, 0.84)]):
        write_job(root, Job("losses", "mnist", "g10", "ce", seed), acm=ce, auc=0.8)
        write_job(root, Job("losses", "mnist", "g10", "ratio", seed), acm=ratio, auc=0.9)
    final, rounds = collect(root)
    values = cell_values(TABLES["Res_3_datasets"], final, rounds)
    frame, dropped = table_frame(TABLES["Res_3_datasets"], values)
    # ce: 30, 34 -> 32.00 ± 2.83; ratio: 80, 84 -> 82.00 ± 2.83, the best (bold)
    assert list(frame.columns) == [("MNIST", "10:1")]
    assert frame.loc[("Ac.M", "CE"), ("MNIST", "10:1")] == "32.00 ± 2.83"
    assert frame.loc[("Ac.M", "Ratio"), ("MNIST", "10:1")] == "<b>82.00 ± 2.83</b>"
    assert frame.loc[("AUC", "Ratio"), ("MNIST", "10:1")] == "<b>.9000 ± .0000</b>"
    assert ("Ac.M", "Focal") not in frame.index  # no job: left out, not a row of dashes
    assert dropped == ["MNIST B., 20:1, 50:1, 100:1", "CIFAR10", "Fer2013"]
    page = table_html("Res_3_datasets", values, description="the jobs shown")
    assert page.startswith("<!DOCTYPE html>") and "<p>the jobs shown</p>" in page
    assert "Not run in this study: MNIST B., 20:1, 50:1, 100:1; CIFAR10; Fer2013." in page
    assert "–" not in page.split("Beside the published numbers")[0].split("<table")[1]
    # beside the paper: the published Ac.M of the Ratio Loss, MNIST, 10:1, and ours minus it
    published = pd.read_csv(REPO / "src/fedbalance/published/paper_numbers.csv", dtype=str)
    paper = published[(published.table == "Res_3_datasets") & (published.metric == "acm") & (published.dataset == "mnist")
                      & (published.column == "10:1") & (published.row == "ratio")].value.iloc[0]
    row = re.search(r"<td>Ac.M</td>\s*<td>MNIST</td>\s*<td>10:1</td>\s*<td>Ratio</td>(.*?)</tr>", page, re.S)
    cells = re.findall(r"<td>(.*?)</td>", row.group(1))
    # the protocol cell is empty: no study was named to set beside the paper's (tables.vs_paper)
    assert cells == ["82.00 ± 2.83", "2", f"{float(paper):.2f}", f"{82 - float(paper):+.2f}", ""]


def test_a_markdown_summary_as_html() -> None:
    md = "# Claims\n\nSome *text*.\n\n| # | Claim | Verdict |\n|---|---|---|\n| 1 | a < b | **holds** |\n"
    page = markdown_page(md, "claims")
    assert "<title>claims</title>" in page and "<h1>Claims</h1>" in page
    assert "<th>Claim</th>" in page and "<td>a &lt; b</td>" in page and "<strong>holds</strong>" in page
