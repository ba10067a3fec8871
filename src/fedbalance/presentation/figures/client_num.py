"""Sup_client_num_CIFAR10 and Sup_client_num_FEMNIST: the monitor's CS per round for each number of selected clients,
on the one dataset each is named for."""

from __future__ import annotations

import pandas as pd

from fedbalance.presentation.figures import FIGURES, Drawn
from fedbalance.presentation.figures.common import (
    BOUNDS, concat_points, draw_points, no_data, panel_title, plt, round_points, select,
)
from fedbalance.common.records import DEFAULT_ESTIMATOR, cs_column, setting_value


def _client_num(rounds: pd.DataFrame | None, name: str, estimator: str) -> Drawn:
    spec = FIGURES[name]
    experiment, dataset = spec.reads[0].experiment, spec.dataset
    sel = select(rounds, experiment=experiment, dataset=dataset) if rounds is not None and len(rounds) else pd.DataFrame()
    settings = sorted(set(sel.setting), key=lambda s: setting_value(str(s), "k") or 0) if len(sel) else []
    parts = []
    for s in settings:
        k = setting_value(str(s), "k")
        parts.append(round_points(sel, cs_column(estimator), f"{s if k is None else k} clients", dataset,
                                  BOUNDS["fraction"], setting=s))
    points = concat_points(parts)
    fig, ax = plt.subplots(figsize=(6, 3.6))
    if points.empty:
        no_data(ax, f"{experiment}/{dataset}")
    else:
        draw_points(ax, points, band=True)
    ax.set(title=f"CS per round, {panel_title(dataset)} ({estimator})", xlabel="round", ylabel="CS")
    fig.tight_layout()
    return Drawn(fig, points)


def make_Sup_client_num_CIFAR10(final: pd.DataFrame | None = None, rounds: pd.DataFrame | None = None,
                                clients: pd.DataFrame | None = None, *, estimator: str = DEFAULT_ESTIMATOR) -> Drawn:
    """CS per round for each number of selected clients (``clients_cifar10``, CIFAR10 alone)."""
    return _client_num(rounds, "Sup_client_num_CIFAR10", estimator)


def make_Sup_client_num_FEMNIST(final: pd.DataFrame | None = None, rounds: pd.DataFrame | None = None,
                                clients: pd.DataFrame | None = None, *, estimator: str = DEFAULT_ESTIMATOR) -> Drawn:
    """CS per round for each number of selected clients (``clients_femnist``, FEMNIST alone)."""
    return _client_num(rounds, "Sup_client_num_FEMNIST", estimator)
