"""The Sup_curve figures: training loss per round of the loss experiment, on the one dataset each is named for."""

from __future__ import annotations

import pandas as pd

from fedbalance.presentation.figures import FIGURES, Drawn
from fedbalance.presentation.figures.common import (
    BOUNDS, concat_points, draw_points, no_data, panel_title, plt, round_points,
)
from fedbalance.presentation.names import FOUR_LOSSES, GAMMAS, LOSS_NAME, gamma_setting
from fedbalance.presentation.tables import plugin_losses
from fedbalance.common.records import DEFAULT_ESTIMATOR


def _curves(rounds: pd.DataFrame | None, dataset: str, lines: list[tuple[str, str, str]], title: str) -> Drawn:
    fig, ax = plt.subplots(figsize=(6, 3.6))
    parts = [round_points(rounds, "train_loss", label, dataset, BOUNDS["positive"], experiment="losses",
                          dataset=dataset, setting=setting, loss=loss) for setting, loss, label in lines]
    points = concat_points(parts)
    if points.empty:
        no_data(ax, f"losses/{dataset}")
    else:
        draw_points(ax, points, band=True)
    ax.set(title=title, xlabel="round", ylabel="training loss")
    fig.tight_layout()
    return Drawn(fig, points)


def _ratio_curves(rounds: pd.DataFrame | None, name: str) -> Drawn:
    dataset = FIGURES[name].dataset
    lines = [(gamma_setting(g), "ratio", f"Γ = {lab}") for lab, g in GAMMAS[1:]]
    return _curves(rounds, dataset, lines, f"Ratio Loss, {panel_title(dataset)}")


def _four_curves(rounds: pd.DataFrame | None, name: str) -> Drawn:
    """The four losses and any plug-in loss of the loss experiment at Γ = 100."""
    dataset = FIGURES[name].dataset
    losses = [*FOUR_LOSSES, *(plugin_losses(rounds, ["losses"]) if rounds is not None else [])]
    lines = [(gamma_setting(100), loss, LOSS_NAME.get(loss, loss)) for loss in losses]
    return _curves(rounds, dataset, lines, f"Four losses, Γ = 100:1, {panel_title(dataset)}")


def make_Sup_curve_cifar_ratio(final: pd.DataFrame | None = None, rounds: pd.DataFrame | None = None,
                               clients: pd.DataFrame | None = None, *, estimator: str = DEFAULT_ESTIMATOR) -> Drawn:
    """Ratio Loss training loss per round for Γ = 10, 20, 50, 100 (``losses``, CIFAR10 alone)."""
    return _ratio_curves(rounds, "Sup_curve_cifar_ratio")


def make_Sup_curve_femnist_ratio(final: pd.DataFrame | None = None, rounds: pd.DataFrame | None = None,
                                 clients: pd.DataFrame | None = None, *, estimator: str = DEFAULT_ESTIMATOR) -> Drawn:
    """Ratio Loss training loss per round for Γ = 10, 20, 50, 100 (``losses``, FEMNIST alone)."""
    return _ratio_curves(rounds, "Sup_curve_femnist_ratio")


def make_Sup_curve_cifar_four_losses(final: pd.DataFrame | None = None, rounds: pd.DataFrame | None = None,
                                     clients: pd.DataFrame | None = None, *,
                                     estimator: str = DEFAULT_ESTIMATOR) -> Drawn:
    """Training loss per round of the four losses at Γ = 100 (``losses``, CIFAR10 alone)."""
    return _four_curves(rounds, "Sup_curve_cifar_four_losses")


def make_Sup_curve_femnist_four_losses(final: pd.DataFrame | None = None, rounds: pd.DataFrame | None = None,
                                       clients: pd.DataFrame | None = None, *,
                                       estimator: str = DEFAULT_ESTIMATOR) -> Drawn:
    """Training loss per round of the four losses at Γ = 100 (``losses``, FEMNIST alone)."""
    return _four_curves(rounds, "Sup_curve_femnist_four_losses")
