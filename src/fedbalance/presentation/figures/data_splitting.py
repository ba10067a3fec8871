"""Sup_data_splitting: the class composition of each client of one partition (aggregate/clients.csv)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from fedbalance.aggregate import class_counts
from fedbalance.presentation.figures.common import Figure, no_data, plt
from fedbalance.presentation.names import gamma_setting
from fedbalance.records import DEFAULT_ESTIMATOR


def make_Sup_data_splitting(final: pd.DataFrame | None = None, rounds: pd.DataFrame | None = None,
                            clients: pd.DataFrame | None = None, *, dataset: str | None = None,
                            estimator: str = DEFAULT_ESTIMATOR, gamma: int = 10) -> Figure:
    """Stacked bars: class composition of each client (``losses``, Γ = ``gamma``, lowest seed)."""
    dataset = dataset or "mnist"
    setting = gamma_setting(gamma)
    counts = None if clients is None else class_counts(clients, "losses", dataset, setting)
    fig, ax = plt.subplots(figsize=(8, 3.8))
    if counts is None:
        no_data(ax, f"losses/{dataset}/{setting}")
    else:
        m = counts.to_numpy(dtype=float)
        bottom = np.zeros(m.shape[0])
        x = np.arange(1, m.shape[0] + 1)
        for q in range(m.shape[1]):
            ax.bar(x, m[:, q], bottom=bottom, label=str(q), color=plt.cm.tab20(q % 20))
            bottom += m[:, q]
        ax.legend(title="class", fontsize=7, ncol=2, bbox_to_anchor=(1.01, 1), loc="upper left")
        ax.set_xticks(x)
    ax.set(title=f"Data composition of the clients, {dataset}, Γ = {gamma}:1", xlabel="client", ylabel="samples")
    fig.tight_layout()
    return fig
