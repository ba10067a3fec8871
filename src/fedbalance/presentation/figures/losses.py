"""Losses_acm_gamma: Ac.M against Γ of the loss comparison, ours beside the paper's."""

from __future__ import annotations

import pandas as pd

from fedbalance.presentation.figures import Drawn
from fedbalance.presentation.figures.common import (
    POINT_COLUMNS, concat_points, datasets, draw_points, gamma_points, gamma_ticks, loss_table, panel_title, panels,
    plt,
)
from fedbalance.presentation.names import FOUR_LOSSES, LOSS_NAME
from fedbalance.presentation.tables import plugin_losses
from fedbalance.common.records import DEFAULT_ESTIMATOR


def acm_gamma_points(final: pd.DataFrame | None, only: str | None = None) -> pd.DataFrame:
    """Ac.M against Γ of the four losses and any plug-in loss, one panel per dataset of ``losses`` (``only``: that
    dataset alone), each cell on the seeds its table reads (Res_3_datasets, FL_FEMNIST), with the paper's values."""
    if final is None or final.empty:
        return pd.DataFrame(columns=POINT_COLUMNS)
    losses = [*FOUR_LOSSES, *plugin_losses(final, ["losses"])]
    return concat_points(gamma_points(final, "losses", d, losses, LOSS_NAME, table=loss_table(d), paper_rows=FOUR_LOSSES)
                         for d in datasets(final, "losses") if only in (None, d))


def make_Losses_acm_gamma(final: pd.DataFrame | None = None, rounds: pd.DataFrame | None = None,
                          clients: pd.DataFrame | None = None, *, estimator: str = DEFAULT_ESTIMATOR) -> Drawn:
    """Ac.M (%) against Γ per loss (``losses``), mean over seeds with its 95 % interval and the published value, one
    panel per dataset; a study of one dataset (the reference set: the README's first figure) gets one panel sized to
    be read small, its legend below it."""
    points = acm_gamma_points(final)
    ds = list(dict.fromkeys(points.panel))
    if len(ds) != 1:
        fig = panels(points, "Loss comparison: minority-class accuracy against Γ", "losses/<any dataset>", xlabel="Γ",
                     ylabel="Ac.M (%)", gamma_axis=True, dodge=0.08)
        return Drawn(fig, points)
    fig, ax = plt.subplots(figsize=(5.0, 4.2))
    draw_points(ax, points, paper_label="paper (published)", fontsize=8.5, dodge=0.1, below=True)
    gamma_ticks(ax)
    ax.set(title=f"{panel_title(ds[0])}: minority-class accuracy against Γ", xlabel="global imbalance Γ",
           ylabel="Ac.M (%)")
    fig.tight_layout()
    return Drawn(fig, points)
