"""Sup_data_splitting: the class composition of each client of one partition (aggregate/clients.csv), MNIST alone."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from fedbalance.jobs.aggregate import class_counts
from fedbalance.presentation.figures import FIGURES, Drawn
from fedbalance.presentation.figures.common import POINT_COLUMNS, Figure, no_data, panel_title, plt
from fedbalance.presentation.names import gamma_setting
from fedbalance.common.records import DEFAULT_ESTIMATOR


def make_Sup_data_splitting(final: pd.DataFrame | None = None, rounds: pd.DataFrame | None = None,
                            clients: pd.DataFrame | None = None, *, estimator: str = DEFAULT_ESTIMATOR,
                            gamma: int = 10) -> Drawn:
    """Stacked bars: class composition of each client (``losses``, Γ = ``gamma``, lowest seed); its points are the
    counts (series: class, x: client)."""
    dataset = FIGURES["Sup_data_splitting"].dataset
    setting = gamma_setting(gamma)
    counts = None if clients is None else class_counts(clients, "losses", dataset, setting)
    fig: Figure
    fig, ax = plt.subplots(figsize=(8, 3.8))
    rows = []
    if counts is None:
        no_data(ax, f"losses/{dataset}/{setting}")
    else:
        m = counts.to_numpy(dtype=float)
        bottom = np.zeros(m.shape[0])
        x = np.arange(1, m.shape[0] + 1)
        for q in range(m.shape[1]):
            ax.bar(x, m[:, q], bottom=bottom, label=str(q), color=plt.cm.tab20(q % 20))
            bottom += m[:, q]
            rows += [{"panel": dataset, "series": str(q), "x": int(c), "x_label": f"client {c}", "n": 1,
                      "mean": float(v), "low": math.nan, "high": math.nan, "clipped": "", "paper": math.nan,
                      "paper_x": math.nan} for c, v in zip(x, m[:, q])]
        ax.legend(title="class", fontsize=7, ncol=2, bbox_to_anchor=(1.01, 1), loc="upper left")
        ax.set_xticks(x)
    ax.set(title=f"Data composition of the clients, {panel_title(dataset)}, Γ = {gamma}:1", xlabel="client",
           ylabel="samples")
    fig.tight_layout()
    return Drawn(fig, pd.DataFrame(rows, columns=POINT_COLUMNS))
