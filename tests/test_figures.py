"""Figures on synthetic results: files exist and are valid, plotted data equal hand-computed means."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import write_job

from fedbalance.aggregate import collect, collect_tidy
from fedbalance.records import Job
from fedbalance.presentation.figures import FIGURES, maker, module_file, write_figure, write_figures
from fedbalance.presentation.figures.beyond import make_Beyond_paper
from fedbalance.presentation.figures.data_splitting import make_Sup_data_splitting
from fedbalance.presentation.figures.mismatch import make_Res_mismatch
from fedbalance.presentation.figures.monitoring import make_fig_monitoring

CS0 = {"paper": [0.90, 0.92], "released": [0.95, 0.97], "nnls": [0.80, 0.99], "uniform": [0.85, 0.86]}
CS1 = {"paper": [0.70, 0.72], "released": [0.85, 0.89], "nnls": [0.60, 0.91], "uniform": [0.75, 0.80]}


@pytest.fixture()
def results(tmp_path: Path) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    root = tmp_path / "res"
    write_job(root, Job("monitor", "mnist", "default", "ce", 0), cs=CS0, emp=([0.9, 0.95], [0.1, 0.05]))
    write_job(root, Job("monitor", "mnist", "default", "ce", 1), cs=CS1, emp=([0.8, 0.85], [0.2, 0.15]))
    for c, cs, acm in ((5, 0.7, 0.4), (2, 0.4, 0.1)):
        for seed, off in ((0, 0.0), (1, 0.1)):
            write_job(root, Job("mismatch", "mnist", f"c{c}_g10", "ratio", seed), acm=acm + off, mean_cs=cs + off / 10)
    write_job(root, Job("losses", "mnist", "g10", "ce", 0), class_counts=[[250, 25, 0], [0, 25, 250], [250, 0, 0]])
    final, rounds, clients = collect_tidy(root)
    return clients, final, rounds


def test_monitoring_lines_are_per_round_means(results: tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]) -> None:
    _, final, rounds = results
    fig = make_fig_monitoring(final, rounds)
    lines = {ln.get_label(): ln for ln in fig.axes[0].get_lines()}
    assert set(lines) == {"paper", "released", "nnls", "uniform"}
    for est in lines:
        expected = [(CS0[est][i] + CS1[est][i]) / 2 for i in range(2)]
        np.testing.assert_allclose(lines[est].get_ydata(), expected)
    assert lines["uniform"].get_linestyle() == "--"


def test_mismatch_points_are_realised_cs_and_acm(results: tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]) -> None:
    _, final, rounds = results
    fig = make_Res_mismatch(final, rounds, dataset="mnist")
    (line,) = fig.axes[0].get_lines()
    np.testing.assert_allclose(line.get_xdata(), [0.405, 0.705])
    np.testing.assert_allclose(line.get_ydata(), [15.0, 45.0])
    empty = make_Res_mismatch(final, rounds, dataset="cifar10")
    assert "no data for mismatch/cifar10" in " ".join(t.get_text() for t in empty.axes[0].texts)


def test_data_splitting_stacks_class_counts(results: tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]) -> None:
    """The bars are the partition's class counts as written in metrics.json, read from clients.csv's frame."""
    clients, final, rounds = results
    fig = make_Sup_data_splitting(final, rounds, clients)
    heights = [[p.get_height() for p in c] for c in fig.axes[0].containers]
    assert heights == [[250, 0, 250], [25, 25, 0], [0, 250, 0]]
    empty = make_Sup_data_splitting(final, rounds, clients[clients.setting != "g10"])
    assert "no data for losses/mnist/g10" in " ".join(t.get_text() for t in empty.axes[0].texts)


def test_write_figures_makes_valid_pdf_and_png(results: tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame],
                                               tmp_path: Path) -> None:
    clients, final, rounds = results
    paths = write_figures(tmp_path / "fig", final=final, rounds=rounds, clients=clients,
                          dataset_map={"Res_mismatch": "mnist"})
    assert len(paths) == 2 * len(FIGURES)
    for name in FIGURES:
        assert (tmp_path / "fig" / f"{name}.pdf").read_bytes().startswith(b"%PDF")
        assert (tmp_path / "fig" / f"{name}.png").read_bytes().startswith(b"\x89PNG")


def test_each_figure_reads_only_its_declared_frames(results: tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame],
                                                    tmp_path: Path) -> None:
    """A figure job gets only the tidy frames its registry entry lists (the others are None)."""
    clients, final, rounds = results
    frames = {"final": final, "rounds": rounds, "clients": clients}
    for name, spec in FIGURES.items():
        given = {k: frames[k] for k in spec.inputs}
        paths = write_figure(name, tmp_path / "one", dataset="mnist", **given)
        assert [p.name for p in paths] == [f"{name}.pdf", f"{name}.png"]


def test_registry_names_each_figure_module() -> None:
    families = {"monitor", "mismatch", "clients", "losses", "beyond"}
    for name, spec in FIGURES.items():
        assert module_file(name).is_file() and module_file(name).parent.name == "figures"
        assert maker(name).__module__.endswith("." + spec.module) and spec.family in families
        assert set(spec.inputs) <= {"final", "rounds", "clients"}
    assert FIGURES["Sup_data_splitting"].inputs == ("clients",)


def test_beyond_paper_points_are_acm_per_gamma(tmp_path: Path) -> None:
    root = tmp_path / "res"
    for g, seed, a in ((1, 0, 0.8), (1, 1, 0.9), (50, 0, 0.3)):
        write_job(root, Job("beyond", "mnist", f"g{g}", "la", seed), acm=a)
    write_job(root, Job("beyond", "mnist", "g50", "ce", 0), acm=0.1)
    final, rounds = collect(root)
    fig = make_Beyond_paper(final, rounds)
    lines = {c.get_label(): c.lines[0] for c in fig.axes[0].containers}
    assert set(lines) == {"CE", "LA, monitor prior"}
    np.testing.assert_allclose(np.asarray(lines["LA, monitor prior"].get_xdata(), float), [0, 3])  # B. and 50:1
    np.testing.assert_allclose(np.asarray(lines["LA, monitor prior"].get_ydata(), float), [85.0, 30.0])
    np.testing.assert_allclose(np.asarray(lines["CE"].get_ydata(), float), [10.0])
    assert "Beyond_paper" in FIGURES
    empty = make_Beyond_paper(final[final.experiment != "beyond"], rounds)
    assert "no data for beyond" in " ".join(t.get_text() for t in empty.axes[0].texts)
