"""Res_mismatch: Ac.M against the clients' realised mismatch."""

from __future__ import annotations

import pandas as pd

from fedbalance.presentation.figures.common import Figure, no_data, plt, select
from fedbalance.presentation.names import FOUR_LOSSES, LOSS_NAME
from fedbalance.presentation.tables import plugin_losses
from fedbalance.records import DEFAULT_ESTIMATOR, setting_value


def make_Res_mismatch(final: pd.DataFrame | None = None, rounds: pd.DataFrame | None = None,
                      clients: pd.DataFrame | None = None, *, dataset: str | None = None,
                      estimator: str = DEFAULT_ESTIMATOR, gamma: int = 10) -> Figure:
    """Ac.M against the realised mean CS of the clients for the four losses and any plug-in loss (``mismatch``,
    Γ = ``gamma``)."""
    dataset = dataset or "cifar10"
    exp = "mismatch_fer2013" if dataset == "fer2013" else "mismatch"
    sel = select(final, experiment=exp, dataset=dataset)
    sel = sel[sel.setting.astype(str).map(lambda s: setting_value(s, "c") is not None
                                          and setting_value(s, "g") == gamma).astype(bool)]
    fig, ax = plt.subplots(figsize=(6, 3.8))
    if sel.empty:
        no_data(ax, f"{exp}/{dataset}")
    for loss in [*FOUR_LOSSES, *plugin_losses(sel)]:
        g = sel[sel.loss == loss].groupby("setting")[["mean_cs", "acc_minority"]].mean().sort_values("mean_cs")
        if not g.empty:
            ax.plot(g["mean_cs"], 100 * g["acc_minority"], marker="o", label=LOSS_NAME.get(loss, loss))
    if not sel.empty:
        ax.legend()
    ax.set(title=f"Mismatch, {dataset}, Γ = {gamma}:1", xlabel="mean CS (local vs global)", ylabel="Ac.M (%)")
    fig.tight_layout()
    return fig
