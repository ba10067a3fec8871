"""Figures on synthetic results: files exist and are valid, plotted numbers equal hand-computed means and intervals,
each figure is drawn from the datasets it names and nothing else."""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import write_job
from PIL import Image
from scipy import stats

from fedbalance.jobs.aggregate import collect, collect_tidy
from fedbalance.presentation.figures import FIGURES, maker, module_file, points_csv, write_figure
from fedbalance.presentation.figures.beyond import make_Beyond_paper
from fedbalance.presentation.figures.common import BOUNDS, plt, spread
from fedbalance.presentation.figures.data_splitting import make_Sup_data_splitting
from fedbalance.presentation.figures.losses import make_Losses_acm_gamma
from fedbalance.presentation.figures.mismatch import make_Res_mismatch
from fedbalance.presentation.figures.monitoring import make_fig_monitoring
from fedbalance.presentation.names import ESTIMATORS
from fedbalance.presentation.study import figures_run
from fedbalance.presentation.tables import published
from fedbalance.common.records import Job, cs_column

CS0 = {"paper": [0.90, 0.92], "released": [0.95, 0.97], "nnls": [0.80, 0.99], "uniform": [0.85, 0.86]}
CS1 = {"paper": [0.70, 0.72], "released": [0.85, 0.89], "nnls": [0.60, 0.91], "uniform": [0.75, 0.80]}


def t95(values: list[float]) -> tuple[float, float]:
    """The 95 % Student-t interval of the mean of ``values``, by hand."""
    v = np.asarray(values, float)
    half = stats.t.ppf(0.975, len(v) - 1) * v.std(ddof=1) / math.sqrt(len(v))
    return v.mean() - half, v.mean() + half


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


def test_monitoring_lines_are_per_round_means_with_their_interval(results) -> None:
    _, final, rounds = results
    fig, points = make_fig_monitoring(final, rounds)
    named = {ln.get_label().split(" (")[0]: ln for ln in fig.axes[0].get_lines() if not ln.get_label().startswith("_")}
    # each line is named as every table and figure names its estimator: the uniform guess as "uniform guess N/Q"
    assert set(named) == {"paper", "released", "nnls", "uniform guess N/Q"}
    lines = {("uniform" if k == "uniform guess N/Q" else k): v for k, v in named.items()}
    for est in lines:
        expected = [(CS0[est][i] + CS1[est][i]) / 2 for i in range(2)]
        np.testing.assert_allclose(lines[est].get_ydata(), expected)
        mine = points[points.series == lines[est].get_label().split(" (")[0]].sort_values("x")
        assert len(mine) == 2
        for i, (_, row) in enumerate(mine.iterrows()):
            low, high = t95([CS0[est][i], CS1[est][i]])
            assert row.n == 2 and row["low"] == pytest.approx(max(low, 0.0)) and row["high"] == pytest.approx(min(high, 1.0))
            assert row.clipped == ("both" if low < 0 and high > 1 else "low" if low < 0 else "high" if high > 1 else "")
    assert lines["uniform"].get_linestyle() == "--"
    assert "2 seeds" in lines["paper"].get_label()


def test_an_interval_outside_the_metric_range_is_clipped_and_marked() -> None:
    """Two seeds 10 and 90 (%): the t interval is 50 ± 508, cut to [0, 100] and marked at both ends; CS 0.99 and 0.999
    reaches above 1 and is cut at 1; one seed has no interval."""
    got = spread([10.0, 90.0], BOUNDS["percent"])
    low, high = t95([10.0, 90.0])
    assert low < 0 and high > 100
    assert (got["low"], got["high"], got["clipped"], got["n"]) == (0.0, 100.0, "both", 2)
    got = spread([0.99, 0.999], BOUNDS["fraction"])
    assert got["high"] == 1.0 and got["clipped"] == "high" and got["low"] == pytest.approx(t95([0.99, 0.999])[0])
    assert math.isnan(spread([0.5], BOUNDS["fraction"])["low"]) and spread([0.5], BOUNDS["fraction"])["clipped"] == ""
    # drawn: the clipped ends carry a triangle each, and the legend says what they are
    final = pd.DataFrame([{"experiment": "losses", "dataset": "mnist", "setting": "g10", "loss": "ratio", "seed": s,
                           "acc_minority": a} for s, a in ((0, 0.1), (1, 0.9))])
    fig, points = make_Losses_acm_gamma(final)
    assert points.clipped.tolist() == ["both"]
    ax = fig.axes[0]
    marks = [ln for ln in ax.get_lines() if ln.get_marker() in ("^", "v") and ln.get_label().startswith("_")]
    assert sorted(float(ln.get_ydata()[0]) for ln in marks) == [0.0, 100.0]
    assert "interval cut at the metric's range" in [t.get_text() for t in ax.get_legend().get_texts()]


def test_mismatch_points_are_realised_cs_and_acm_beside_the_paper(results) -> None:
    _, final, rounds = results
    fig, points = make_Res_mismatch(final, rounds)
    assert fig.axes[0].get_title() == "MNIST"
    ratio = points[points.series == "Ratio"].sort_values("x")
    np.testing.assert_allclose(ratio.x, [0.405, 0.705])
    np.testing.assert_allclose(ratio["mean"], [15.0, 45.0])
    low, high = t95([40.0, 50.0])  # two seeds: 45 ± 63.5, cut to the range of Ac.M
    assert low < 0 and high > 100 and (ratio["low"].iloc[1], ratio["high"].iloc[1], ratio.clipped.iloc[1]) == (0, 100, "both")
    pub = published()
    cell = pub[(pub.table == "Sup_data_MNIST") & (pub.metric == "acm") & (pub.column == "0.6960/10:1") & (pub.row == "ratio")]
    assert ratio.paper.iloc[1] == pytest.approx(float(cell.value.iloc[0])) and ratio.paper_x.iloc[1] == pytest.approx(0.696)
    empty, nothing = make_Res_mismatch(final[final.experiment != "mismatch"], rounds)
    assert nothing.empty and "no data for mismatch" in " ".join(t.get_text() for t in empty.axes[0].texts)


def test_data_splitting_stacks_class_counts(results) -> None:
    """The bars are the partition's class counts as written in metrics.json, read from clients.csv's frame."""
    clients, final, rounds = results
    fig, points = make_Sup_data_splitting(final, rounds, clients)
    heights = [[p.get_height() for p in c] for c in fig.axes[0].containers]
    assert heights == [[250, 0, 250], [25, 25, 0], [0, 250, 0]]
    assert points[points.series == "1"]["mean"].tolist() == [25, 25, 0]
    empty, _ = make_Sup_data_splitting(final, rounds, clients[clients.setting != "g10"])
    assert "no data for losses/mnist/g10" in " ".join(t.get_text() for t in empty.axes[0].texts)


def test_each_figure_writes_pdf_png_and_its_numbers_from_its_declared_frames(results, tmp_path: Path) -> None:
    """A figure job gets only the tidy frames its registry entry lists (the others are None) and writes a valid PDF,
    a PNG that records the SHA-256 of the numbers it plots, and those numbers as CSV."""
    clients, final, rounds = results
    frames = {"final": final, "rounds": rounds, "clients": clients}
    for name, spec in FIGURES.items():
        paths = write_figure(name, tmp_path / "fig", **{k: frames[k] for k in spec.inputs})
        assert [p.name for p in paths] == [f"{name}.pdf", f"{name}.png", f"{name}.csv"]
        assert paths[0].read_bytes().startswith(b"%PDF") and paths[1].read_bytes().startswith(b"\x89PNG")
        csv = paths[2].read_text()
        assert Image.open(paths[1]).text["csv-sha256"] == hashlib.sha256(csv.encode()).hexdigest()
    monitoring = pd.read_csv(tmp_path / "fig" / "fig_monitoring.csv")
    assert monitoring[(monitoring.series == "released") & (monitoring.x == 1)]["mean"].iloc[0] == pytest.approx(0.90)


def test_registry_names_each_figure_module() -> None:
    families = {"monitor", "mismatch", "clients", "losses", "beyond"}
    for name, spec in FIGURES.items():
        assert module_file(name).is_file() and module_file(name).parent.name == "figures"
        assert maker(name).__module__.endswith("." + spec.module) and spec.family in families
        assert set(spec.inputs) <= {"final", "rounds", "clients"}
        assert spec.dataset is None or all(r.dataset == spec.dataset for r in spec.reads), name
    assert FIGURES["Sup_data_splitting"].inputs == ("clients",)


def test_beyond_paper_points_are_acm_per_gamma_on_the_tables_seeds(tmp_path: Path) -> None:
    root = tmp_path / "res"
    for g, seed, a in ((1, 0, 0.8), (1, 1, 0.9), (50, 0, 0.3)):
        write_job(root, Job("beyond", "mnist", f"g{g}", "la", seed), acm=a)
    write_job(root, Job("beyond", "mnist", "g50", "ce", 0), acm=0.1)
    final, rounds = collect(root)
    fig, points = make_Beyond_paper(final, rounds)
    la = points[points.series == "LA, monitor prior"].sort_values("x")
    assert la.x.tolist() == [0, 3] and la["mean"].tolist() == pytest.approx([85.0, 30.0])  # B. and 50:1
    ce = points[points.series == "CE"]
    assert ce["mean"].tolist() == pytest.approx([10.0])
    pub = published()
    paper_ce = pub[(pub.table == "Res_3_datasets") & (pub.metric == "acm") & (pub.dataset == "mnist")
                   & (pub.column == "50:1") & (pub.row == "ce")].value.iloc[0]
    assert ce.paper.tolist() == pytest.approx([paper_ce]) and la.paper.isna().all()  # the paper has no LA
    empty, _ = make_Beyond_paper(final[final.experiment != "beyond"], rounds)
    assert "no data for beyond" in " ".join(t.get_text() for t in empty.axes[0].texts)


def test_loss_figure_reads_the_seeds_its_table_reads() -> None:
    """Res_3_datasets reads a cell on the seeds another loss of its column holds: CE's seed 4, which no other loss
    at Γ = 10 has, is left out of CE's point too."""
    rows = [{"experiment": "losses", "dataset": "mnist", "setting": "g10", "loss": loss, "seed": s, "acc_minority": v}
            for loss, vals in (("ce", (0.2, 0.3, 0.4, 0.9)), ("ratio", (0.5, 0.6, 0.7)))
            for s, v in zip((0, 1, 2, 4), vals)]
    _, points = make_Losses_acm_gamma(pd.DataFrame(rows))
    ce = points[points.series == "CE"].iloc[0]
    assert ce.n == 3 and ce["mean"] == pytest.approx(30.0) and ce["low"] == pytest.approx(t95([20, 30, 40])[0])


# ---------------------------------------------------------------- drawn from the datasets it names

DEFAULT_SETTING = {"losses": "g10", "beyond": "g10", "mismatch": "c5_g10", "mismatch_fer2013": "c5_g10",
                   "monitor": "default", "clients_cifar10": "k10", "clients_femnist": "k10"}


def frames(jobs: list[tuple[str, str, str, str]], value: dict[str, float]) -> dict[str, pd.DataFrame]:
    """Tidy frames of ``jobs`` (experiment, dataset, setting, loss) at seeds 0-2, every number of a job on dataset d
    ``value[d]`` (+ 0.01 a seed), so each dataset's numbers are told apart."""
    final, rounds, clients = [], [], []
    for e, d, s, loss in jobs:
        for seed in range(3):
            v = value[d] + 0.01 * seed
            key = {"experiment": e, "dataset": d, "setting": s, "loss": loss, "seed": seed}
            final.append({**key, "acc_minority": v, "acc_majority": v, "auc_hard": v, "auc_micro": v, "mean_cs": v,
                          "train_loss": v, "plugin": None})
            rounds += [{**key, "round": r, "train_loss": v + r, "acc": v, "acc_minority": v, "emp_cos": v, "emp_cv": v,
                        **{cs_column(est): v for est in ESTIMATORS}} for r in range(3)]
            clients += [{"experiment": e, "dataset": d, "setting": s, "seed": seed, "client": c, "class": q,
                         "count": int(100 * v) + c} for c in range(2) for q in range(3)]
    return {"final": pd.DataFrame(final), "rounds": pd.DataFrame(rounds), "clients": pd.DataFrame(clients)}


def figure_jobs(name: str, datasets: list[str], swap: bool = False) -> list[tuple[str, str, str, str]]:
    """A job for each read of figure ``name`` on each of ``datasets`` (a read's own dataset where it names one, unless
    ``swap``)."""
    out = set()
    for r in FIGURES[name].reads:
        for d in ([r.dataset] if r.dataset and not swap else datasets):
            out.add((r.experiment, d, r.setting or DEFAULT_SETTING[r.experiment], r.loss or "ce"))
    return sorted(out)


def drawn(name: str, f: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """The points figure ``name`` plots from the frames ``f`` (the figure closed)."""
    fig, points = maker(name)(*(f[k] if k in FIGURES[name].inputs else None for k in ("final", "rounds", "clients")))
    plt.close(fig)
    return points


@pytest.mark.parametrize("name", list(FIGURES))
def test_every_figure_is_drawn_from_the_datasets_it_names(name: str) -> None:
    """A figure of one dataset draws that dataset's jobs alone: another dataset's jobs beside them change nothing,
    and without them it draws nothing and is not run (no MNIST curves under a CIFAR10 name). A figure of every
    dataset draws each in its own panel, titled with it, from that dataset's jobs alone."""
    spec = FIGURES[name]
    value = {"mnist": 0.6, "cifar10": 0.3, "fer2013": 0.45, "femnist": 0.75}
    if spec.dataset:
        decoy = "cifar10" if spec.dataset != "cifar10" else "mnist"
        mine, other = figure_jobs(name, [spec.dataset]), figure_jobs(name, [decoy], swap=True)
        alone = drawn(name, frames(mine, value))
        assert len(alone) and set(alone.panel) == {spec.dataset}
        pd.testing.assert_frame_equal(drawn(name, frames(mine + other, value)), alone)
        assert drawn(name, frames(other, value)).empty
        study = [Job(e, d, s, loss, 0) for e, d, s, loss in other]
        assert name in figures_run(study)[1] and name in figures_run(study + [Job(*mine[0], 0)])[0]
    else:
        jobs = figure_jobs(name, ["mnist", "cifar10"])
        both = drawn(name, frames(jobs, value))
        panels = sorted(set(both.panel))
        assert len(panels) >= 2 or name in ("Sup_empirical_sim", "Sup_empirical_mul"), panels
        for d in {j[1] for j in jobs}:
            own = drawn(name, frames([j for j in jobs if j[1] == d], value))
            key = "series" if name.startswith("Sup_empirical") else "panel"
            mine = both[both[key] == (own[key].iloc[0])].reset_index(drop=True)
            pd.testing.assert_frame_equal(mine, own.reset_index(drop=True))
        fig, _ = maker(name)(*(frames(jobs, value)[k] if k in spec.inputs else None
                               for k in ("final", "rounds", "clients")))
        titles = {ax.get_title() for ax in fig.axes}
        plt.close(fig)
        if not name.startswith("Sup_empirical"):
            assert {"MNIST", "CIFAR10"} & titles, titles


def test_points_csv_is_what_write_figure_writes(results, tmp_path: Path) -> None:
    _, final, rounds = results
    _, points = make_fig_monitoring(final, rounds)
    write_figure("fig_monitoring", tmp_path, rounds=rounds)
    assert (tmp_path / "fig_monitoring.csv").read_text() == points_csv(points)
