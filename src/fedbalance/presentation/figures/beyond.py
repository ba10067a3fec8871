"""Beyond_paper: Ac.M against Γ of the newer losses beside CE and Ratio (experiment family ``beyond``)."""

from __future__ import annotations

import pandas as pd

from fedbalance.presentation.figures.common import Figure, datasets, errorbar_over_gammas, gamma_ticks, grid, no_data
from fedbalance.presentation.figures.common import select
from fedbalance.presentation.names import BEYOND_LOSSES, BEYOND_NAME
from fedbalance.records import DEFAULT_ESTIMATOR


def make_Beyond_paper(final: pd.DataFrame | None = None, rounds: pd.DataFrame | None = None,
                      clients: pd.DataFrame | None = None, *, dataset: str | None = None,
                      estimator: str = DEFAULT_ESTIMATOR) -> Figure:
    """Ac.M (%) against Γ per loss, mean ± std over seeds, one panel per dataset (``beyond``)."""
    sel = select(final, experiment="beyond")
    ds = datasets(sel, "beyond")
    fig, axes = grid(max(len(ds), 1), "Beyond the paper: minority-class accuracy against Γ")
    if not ds:
        no_data(axes[0], "beyond/<any dataset>")
    for ax, d in zip(axes, ds):
        sub = sel[sel.dataset == d]
        losses = [loss for loss in BEYOND_LOSSES if loss in set(sub.loss)] + sorted(set(sub.loss) - set(BEYOND_LOSSES))
        for loss in losses:
            errorbar_over_gammas(ax, sub[sub.loss == loss], "acc_minority", scale=100.0,
                                 dashed=loss in ("ce", "ratio"), label=BEYOND_NAME.get(loss, loss))
        gamma_ticks(ax)
        ax.set(title=d, xlabel="Γ", ylabel="Ac.M (%)")
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
