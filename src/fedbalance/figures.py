"""The paper's figures (and Monitor_under_imbalance) from the tidy frames, as PDF and PNG.

Every ``make_<name>`` returns a matplotlib Figure; a figure whose data are absent still exists and
says "no data for <experiment>/<dataset> in this configuration", so the workflow's outputs always
exist. Curves are means over seeds per round; CS curves use the ``cs_<estimator>`` columns of
``rounds.csv`` with the uniform guess drawn beside them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from fedbalance.records import ESTIMATORS  # noqa: E402

DATASETS = ("mnist", "cifar10", "fer2013", "femnist")
LOSSES = ("ce", "focal", "ghmc", "ratio")
LOSS_NAME = {"ce": "CE", "focal": "Focal", "ghmc": "GHMC", "ratio": "Ratio (ours)"}
GAMMAS = ((1, "B."), (10, "10:1"), (20, "20:1"), (50, "50:1"), (100, "100:1"))
DEFAULT_DATASET = {
    "Res_mismatch": "cifar10", "Sup_client_num_CIFAR10": "cifar10", "Sup_client_num_FEMNIST": "femnist",
    "Sup_curve_cifar_ratio": "cifar10", "Sup_curve_femnist_ratio": "femnist",
    "Sup_curve_cifar_four_losses": "cifar10", "Sup_curve_femnist_four_losses": "femnist",
    "Sup_data_splitting": "mnist",
}


def _select(df: pd.DataFrame, **eq: object) -> pd.DataFrame:
    mask = np.ones(len(df), dtype=bool)
    for k, v in eq.items():
        mask &= (df[k] == v).to_numpy()
    return df[mask]


def per_round_mean(rounds: pd.DataFrame, column: str, **eq: object) -> pd.Series:
    """Mean over seeds of ``column`` per round for the jobs matching ``eq`` (NaN rows dropped)."""
    sel = _select(rounds, **eq)
    if column not in sel.columns:
        return pd.Series(dtype=float)
    return sel.dropna(subset=[column]).groupby("round")[column].mean()


def _no_data(ax: plt.Axes, what: str) -> None:
    ax.text(0.5, 0.5, f"no data for {what} in this configuration", ha="center", va="center", transform=ax.transAxes,
            wrap=True)
    ax.set_xticks([])
    ax.set_yticks([])


def _grid(n: int, title: str) -> tuple[Figure, list[plt.Axes]]:
    cols = min(n, 2)
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.4 * rows), squeeze=False)
    fig.suptitle(title)
    return fig, list(axes.ravel())


def _datasets(df: pd.DataFrame, experiment: str) -> list[str]:
    present = set(df.loc[df.experiment == experiment, "dataset"])
    return [d for d in DATASETS if d in present] + sorted(present - set(DATASETS))


def make_fig_monitoring(final: pd.DataFrame, rounds: pd.DataFrame, results_dir: Path | None = None, *,
                        dataset: str | None = None, estimator: str = "released") -> Figure:
    """CS of every estimator and of the uniform guess per round, one panel per dataset (``monitor``)."""
    ds = _datasets(rounds, "monitor")
    fig, axes = _grid(max(len(ds), 1), "Composition estimate vs ground truth (monitor)")
    if not ds:
        _no_data(axes[0], "monitor/<any dataset>")
    for ax, d in zip(axes, ds):
        for est in ESTIMATORS + ("uniform",):
            s = per_round_mean(rounds, f"cs_{est}", experiment="monitor", dataset=d)
            if not s.empty:
                ax.plot(s.index, s.values, "--" if est == "uniform" else "-", marker=".", label=est)
        ax.set(title=d, xlabel="round", ylabel="CS")
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def _empirical(rounds: pd.DataFrame, column: str, title: str, ylabel: str) -> Figure:
    fig, ax = plt.subplots(figsize=(6, 3.6))
    ds = [d for d in _datasets(rounds, "monitor") if not per_round_mean(rounds, column, experiment="monitor",
                                                                        dataset=d).empty]
    if not ds:
        _no_data(ax, "monitor/<any dataset> (" + column + ")")
    for d in ds:
        s = per_round_mean(rounds, column, experiment="monitor", dataset=d)
        ax.plot(s.index, s.values, marker=".", label=d)
    if ds:
        ax.legend()
    ax.set(title=title, xlabel="round", ylabel=ylabel)
    fig.tight_layout()
    return fig


def make_Sup_empirical_sim(final: pd.DataFrame, rounds: pd.DataFrame, results_dir: Path | None = None, *,
                           dataset: str | None = None, estimator: str = "released") -> Figure:
    """Mean cosine similarity of same-class last-layer inputs Y per round (``monitor``)."""
    return _empirical(rounds, "emp_cos", "Cosine similarity of Y within a class", "cosine similarity")


def make_Sup_empirical_mul(final: pd.DataFrame, rounds: pd.DataFrame, results_dir: Path | None = None, *,
                           dataset: str | None = None, estimator: str = "released") -> Figure:
    """Coefficient of variation of the products of same-class Y per round (``monitor``)."""
    return _empirical(rounds, "emp_cv", "Coefficient of variation of Y products within a class",
                      "coefficient of variation")


def make_Res_mismatch(final: pd.DataFrame, rounds: pd.DataFrame, results_dir: Path | None = None, *,
                      dataset: str | None = None, estimator: str = "released", gamma: int = 10) -> Figure:
    """Ac.M against the realised mean CS of the clients for the four losses (``mismatch``, Γ = ``gamma``)."""
    dataset = dataset or DEFAULT_DATASET["Res_mismatch"]
    exp = "mismatch_fer2013" if dataset == "fer2013" else "mismatch"
    sel = _select(final, experiment=exp, dataset=dataset)
    sel = sel[sel.setting.astype(str).str.endswith(f"_g{gamma}")]
    fig, ax = plt.subplots(figsize=(6, 3.8))
    if sel.empty:
        _no_data(ax, f"{exp}/{dataset}")
    for loss in LOSSES:
        g = sel[sel.loss == loss].groupby("setting")[["mean_cs", "acc_minority"]].mean().sort_values("mean_cs")
        if not g.empty:
            ax.plot(g["mean_cs"], 100 * g["acc_minority"], marker="o", label=LOSS_NAME[loss])
    if not sel.empty:
        ax.legend()
    ax.set(title=f"Mismatch, {dataset}, Γ = {gamma}:1", xlabel="mean CS (local vs global)", ylabel="Ac.M (%)")
    fig.tight_layout()
    return fig


def _client_num(rounds: pd.DataFrame, experiment: str, dataset: str, estimator: str) -> Figure:
    sel = _select(rounds, experiment=experiment, dataset=dataset)
    fig, ax = plt.subplots(figsize=(6, 3.6))
    settings = sorted(set(sel.setting), key=lambda s: int(str(s).lstrip("k")) if str(s).lstrip("k").isdigit() else 0)
    if sel.empty:
        _no_data(ax, f"{experiment}/{dataset}")
    for s in settings:
        cs = per_round_mean(sel, f"cs_{estimator}", setting=s)
        if not cs.empty:
            ax.plot(cs.index, cs.values, marker=".", label=f"{str(s).lstrip('k')} clients")
    if settings:
        ax.legend()
    ax.set(title=f"CS per round, {dataset} ({estimator})", xlabel="round", ylabel="CS")
    fig.tight_layout()
    return fig


def make_Sup_client_num_CIFAR10(final: pd.DataFrame, rounds: pd.DataFrame, results_dir: Path | None = None, *,
                                dataset: str | None = None, estimator: str = "released") -> Figure:
    """CS per round for each number of selected clients (``clients_cifar10``)."""
    return _client_num(rounds, "clients_cifar10", dataset or "cifar10", estimator)


def make_Sup_client_num_FEMNIST(final: pd.DataFrame, rounds: pd.DataFrame, results_dir: Path | None = None, *,
                                dataset: str | None = None, estimator: str = "released") -> Figure:
    """CS per round for each number of selected clients (``clients_femnist``)."""
    return _client_num(rounds, "clients_femnist", dataset or "femnist", estimator)


def _curves(rounds: pd.DataFrame, dataset: str, lines: list[tuple[str, str, str]], title: str) -> Figure:
    fig, ax = plt.subplots(figsize=(6, 3.6))
    drawn = 0
    for setting, loss, label in lines:
        s = per_round_mean(rounds, "train_loss", experiment="losses", dataset=dataset, setting=setting, loss=loss)
        if not s.empty:
            ax.plot(s.index, s.values, marker=".", label=label)
            drawn += 1
    if drawn:
        ax.legend()
    else:
        _no_data(ax, f"losses/{dataset}")
    ax.set(title=title, xlabel="round", ylabel="training loss")
    fig.tight_layout()
    return fig


def _ratio_curves(rounds: pd.DataFrame, dataset: str) -> Figure:
    lines = [(f"g{g}", "ratio", f"Γ = {lab}") for g, lab in GAMMAS[1:]]
    return _curves(rounds, dataset, lines, f"Ratio Loss, {dataset}")


def _four_curves(rounds: pd.DataFrame, dataset: str) -> Figure:
    lines = [("g100", loss, LOSS_NAME[loss]) for loss in LOSSES]
    return _curves(rounds, dataset, lines, f"Four losses, Γ = 100:1, {dataset}")


def make_Sup_curve_cifar_ratio(final: pd.DataFrame, rounds: pd.DataFrame, results_dir: Path | None = None, *,
                               dataset: str | None = None, estimator: str = "released") -> Figure:
    """Ratio Loss training loss per round for Γ = 10, 20, 50, 100 (``losses``, CIFAR10)."""
    return _ratio_curves(rounds, dataset or "cifar10")


def make_Sup_curve_femnist_ratio(final: pd.DataFrame, rounds: pd.DataFrame, results_dir: Path | None = None, *,
                                 dataset: str | None = None, estimator: str = "released") -> Figure:
    """Ratio Loss training loss per round for Γ = 10, 20, 50, 100 (``losses``, FEMNIST)."""
    return _ratio_curves(rounds, dataset or "femnist")


def make_Sup_curve_cifar_four_losses(final: pd.DataFrame, rounds: pd.DataFrame, results_dir: Path | None = None, *,
                                     dataset: str | None = None, estimator: str = "released") -> Figure:
    """Training loss per round of the four losses at Γ = 100 (``losses``, CIFAR10)."""
    return _four_curves(rounds, dataset or "cifar10")


def make_Sup_curve_femnist_four_losses(final: pd.DataFrame, rounds: pd.DataFrame, results_dir: Path | None = None,
                                       *, dataset: str | None = None, estimator: str = "released") -> Figure:
    """Training loss per round of the four losses at Γ = 100 (``losses``, FEMNIST)."""
    return _four_curves(rounds, dataset or "femnist")


def class_counts(results_dir: Path | None, dataset: str, setting: str = "g10") -> np.ndarray | None:
    """Per-client class counts of ``losses/<dataset>/<setting>`` (first loss, lowest seed) or None."""
    if results_dir is None:
        return None
    base = Path(results_dir) / "losses" / dataset / setting
    files = sorted(base.glob("*/seed*/metrics.json"), key=lambda p: (p.parts[-3] != "ce", p.parts[-3],
                                                                      int(p.parts[-2][4:])))
    if not files:
        return None
    return np.asarray(json.loads(files[0].read_text())["partition"]["class_counts"], dtype=float)


def make_Sup_data_splitting(final: pd.DataFrame, rounds: pd.DataFrame, results_dir: Path | None = None, *,
                            dataset: str | None = None, estimator: str = "released") -> Figure:
    """Stacked bars: class composition of each client (``losses``, Γ = 10, MNIST)."""
    dataset = dataset or DEFAULT_DATASET["Sup_data_splitting"]
    counts = class_counts(results_dir, dataset)
    fig, ax = plt.subplots(figsize=(8, 3.8))
    if counts is None:
        _no_data(ax, f"losses/{dataset}/g10")
    else:
        bottom = np.zeros(counts.shape[0])
        x = np.arange(1, counts.shape[0] + 1)
        for q in range(counts.shape[1]):
            ax.bar(x, counts[:, q], bottom=bottom, label=str(q), color=plt.cm.tab20(q % 20))
            bottom += counts[:, q]
        ax.legend(title="class", fontsize=7, ncol=2, bbox_to_anchor=(1.01, 1), loc="upper left")
        ax.set_xticks(x)
    ax.set(title=f"Data composition of the clients, {dataset}, Γ = 10:1", xlabel="client", ylabel="samples")
    fig.tight_layout()
    return fig


def _errorbar_over_gammas(ax, rows: pd.DataFrame, column: str, *, label: str, dashed: bool = False,
                          scale: float = 1.0) -> None:
    """Mean ± std of ``rows[column]`` (times ``scale``) at each Γ setting ``g<Γ>``; Γ without a value is skipped."""
    pts = [(i, scale * rows.loc[rows.setting == f"g{g}", column].dropna()) for i, (g, _) in enumerate(GAMMAS)]
    pts = [(i, v) for i, v in pts if len(v)]
    if pts:
        ax.errorbar([i for i, _ in pts], [v.mean() for _, v in pts],
                    yerr=[v.std() if len(v) > 1 else 0.0 for _, v in pts], marker="o", capsize=3,
                    linestyle="--" if dashed else "-", label=label)


def make_Monitor_under_imbalance(final: pd.DataFrame, rounds: pd.DataFrame, results_dir: Path | None = None, *,
                                 dataset: str | None = None, estimator: str = "released") -> Figure:
    """CS of each estimator and of the uniform guess against Γ (mean ± std over rounds and seeds), Ratio-Loss jobs."""
    sel = _select(rounds, experiment="losses", loss="ratio")
    ds = _datasets(sel, "losses")
    fig, axes = _grid(max(len(ds), 1), "Monitor under imbalance (Ratio-Loss jobs)")
    if not ds:
        _no_data(axes[0], "losses/<any dataset> (ratio)")
    for ax, d in zip(axes, ds):
        sub = sel[sel.dataset == d]
        for est in ESTIMATORS + ("uniform",):
            _errorbar_over_gammas(ax, sub, f"cs_{est}", dashed=est == "uniform", label=est)
        ax.set_xticks(range(len(GAMMAS)), [lab for _, lab in GAMMAS])
        ax.set(title=d, xlabel="Γ", ylabel="CS")
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


BEYOND_LOSSES = ("ce", "ratio", "la", "la_local", "fedlc", "fedrs")
BEYOND_NAME = {"ce": "CE", "ratio": "Ratio (paper)", "la": "LA, monitor prior", "la_local": "LA, local prior",
               "fedlc": "FedLC", "fedrs": "FedRS"}


def make_Beyond_paper(final: pd.DataFrame, rounds: pd.DataFrame, results_dir: Path | None = None, *,
                      dataset: str | None = None, estimator: str = "released") -> Figure:
    """Ac.M (%) against Γ per loss, mean ± std over seeds, one panel per dataset (``beyond``)."""
    sel = _select(final, experiment="beyond")
    ds = _datasets(sel, "beyond")
    fig, axes = _grid(max(len(ds), 1), "Beyond the paper: minority-class accuracy against Γ")
    if not ds:
        _no_data(axes[0], "beyond/<any dataset>")
    for ax, d in zip(axes, ds):
        sub = sel[sel.dataset == d]
        losses = [loss for loss in BEYOND_LOSSES if loss in set(sub.loss)] + sorted(set(sub.loss) - set(BEYOND_LOSSES))
        for loss in losses:
            _errorbar_over_gammas(ax, sub[sub.loss == loss], "acc_minority", scale=100.0,
                                  dashed=loss in ("ce", "ratio"), label=BEYOND_NAME.get(loss, loss))
        ax.set_xticks(range(len(GAMMAS)), [lab for _, lab in GAMMAS])
        ax.set(title=d, xlabel="Γ", ylabel="Ac.M (%)")
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


MAKERS: dict[str, Callable[..., Figure]] = {
    "fig_monitoring": make_fig_monitoring,
    "Res_mismatch": make_Res_mismatch,
    "Sup_empirical_sim": make_Sup_empirical_sim,
    "Sup_empirical_mul": make_Sup_empirical_mul,
    "Sup_client_num_CIFAR10": make_Sup_client_num_CIFAR10,
    "Sup_client_num_FEMNIST": make_Sup_client_num_FEMNIST,
    "Sup_curve_cifar_ratio": make_Sup_curve_cifar_ratio,
    "Sup_curve_femnist_ratio": make_Sup_curve_femnist_ratio,
    "Sup_curve_cifar_four_losses": make_Sup_curve_cifar_four_losses,
    "Sup_curve_femnist_four_losses": make_Sup_curve_femnist_four_losses,
    "Sup_data_splitting": make_Sup_data_splitting,
    "Monitor_under_imbalance": make_Monitor_under_imbalance,
    "Beyond_paper": make_Beyond_paper,
}
FIGURES: list[str] = list(MAKERS)


def write_figures(final: pd.DataFrame, rounds: pd.DataFrame, results_dir: str | Path | None, out_dir: str | Path, *,
                  dataset_map: dict[str, str] | None = None, estimator: str = "released") -> list[Path]:
    """Write every figure as ``<name>.pdf`` and ``<name>.png``; ``dataset_map`` overrides a figure's dataset."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    dataset_map = {**DEFAULT_DATASET, **(dataset_map or {})}
    paths = []
    for name, make in MAKERS.items():
        fig = make(final, rounds, Path(results_dir) if results_dir else None, dataset=dataset_map.get(name),
                   estimator=estimator)
        for ext in ("pdf", "png"):
            p = out / f"{name}.{ext}"
            fig.savefig(p, dpi=120)
            paths.append(p)
        plt.close(fig)
    return paths
