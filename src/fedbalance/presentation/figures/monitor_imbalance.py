"""Monitor_under_imbalance: each estimator's CS against Γ, Ratio-Loss jobs of the loss experiment."""

from __future__ import annotations

import pandas as pd

from fedbalance.presentation.figures.common import Figure, datasets, errorbar_over_gammas, gamma_ticks, grid, no_data
from fedbalance.presentation.figures.common import select
from fedbalance.presentation.names import ESTIMATORS, UNIFORM
from fedbalance.presentation.tables import plugin_estimators
from fedbalance.records import DEFAULT_ESTIMATOR, cs_column


def make_Monitor_under_imbalance(final: pd.DataFrame | None = None, rounds: pd.DataFrame | None = None,
                                 clients: pd.DataFrame | None = None, *, dataset: str | None = None,
                                 estimator: str = DEFAULT_ESTIMATOR) -> Figure:
    """CS of each estimator (plug-ins' too) and of the uniform guess against Γ (mean ± std over rounds and seeds),
    Ratio-Loss jobs."""
    sel = select(rounds, experiment="losses", loss="ratio")
    ds = datasets(sel, "losses")
    fig, axes = grid(max(len(ds), 1), "Monitor under imbalance (Ratio-Loss jobs)")
    if not ds:
        no_data(axes[0], "losses/<any dataset> (ratio)")
    for ax, d in zip(axes, ds):
        sub = sel[sel.dataset == d]
        for est in [*ESTIMATORS, *plugin_estimators(sub)]:
            errorbar_over_gammas(ax, sub, cs_column(est), dashed=est == UNIFORM, label=est)
        gamma_ticks(ax)
        ax.set(title=d, xlabel="Γ", ylabel="CS")
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
