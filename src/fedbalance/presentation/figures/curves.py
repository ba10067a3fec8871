"""The Sup_curve figures: training loss per round of the loss experiment."""

from __future__ import annotations

import pandas as pd

from fedbalance.presentation.figures.common import Figure, no_data, per_round_mean, plt
from fedbalance.presentation.names import FOUR_LOSSES, GAMMAS, LOSS_NAME, gamma_setting
from fedbalance.presentation.tables import plugin_losses
from fedbalance.records import DEFAULT_ESTIMATOR


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
        no_data(ax, f"losses/{dataset}")
    ax.set(title=title, xlabel="round", ylabel="training loss")
    fig.tight_layout()
    return fig


def _ratio_curves(rounds: pd.DataFrame, dataset: str) -> Figure:
    lines = [(gamma_setting(g), "ratio", f"Γ = {lab}") for lab, g in GAMMAS[1:]]
    return _curves(rounds, dataset, lines, f"Ratio Loss, {dataset}")


def _four_curves(rounds: pd.DataFrame, dataset: str) -> Figure:
    """The four losses and any plug-in loss of the loss experiment at Γ = 100."""
    losses = [*FOUR_LOSSES, *plugin_losses(rounds, ["losses"])]
    lines = [(gamma_setting(100), loss, LOSS_NAME.get(loss, loss)) for loss in losses]
    return _curves(rounds, dataset, lines, f"Four losses, Γ = 100:1, {dataset}")


def make_Sup_curve_cifar_ratio(final: pd.DataFrame | None = None, rounds: pd.DataFrame | None = None,
                               clients: pd.DataFrame | None = None, *, dataset: str | None = None,
                               estimator: str = DEFAULT_ESTIMATOR) -> Figure:
    """Ratio Loss training loss per round for Γ = 10, 20, 50, 100 (``losses``, CIFAR10)."""
    return _ratio_curves(rounds, dataset or "cifar10")


def make_Sup_curve_femnist_ratio(final: pd.DataFrame | None = None, rounds: pd.DataFrame | None = None,
                                 clients: pd.DataFrame | None = None, *, dataset: str | None = None,
                                 estimator: str = DEFAULT_ESTIMATOR) -> Figure:
    """Ratio Loss training loss per round for Γ = 10, 20, 50, 100 (``losses``, FEMNIST)."""
    return _ratio_curves(rounds, dataset or "femnist")


def make_Sup_curve_cifar_four_losses(final: pd.DataFrame | None = None, rounds: pd.DataFrame | None = None,
                                     clients: pd.DataFrame | None = None, *, dataset: str | None = None,
                                     estimator: str = DEFAULT_ESTIMATOR) -> Figure:
    """Training loss per round of the four losses at Γ = 100 (``losses``, CIFAR10)."""
    return _four_curves(rounds, dataset or "cifar10")


def make_Sup_curve_femnist_four_losses(final: pd.DataFrame | None = None, rounds: pd.DataFrame | None = None,
                                       clients: pd.DataFrame | None = None, *, dataset: str | None = None,
                                       estimator: str = DEFAULT_ESTIMATOR) -> Figure:
    """Training loss per round of the four losses at Γ = 100 (``losses``, FEMNIST)."""
    return _four_curves(rounds, dataset or "femnist")
