"""Beyond_paper: Ac.M against Γ of the newer losses beside CE and Ratio (experiment family ``beyond``)."""

from __future__ import annotations

import pandas as pd

from fedbalance.presentation.figures import Drawn
from fedbalance.presentation.figures.common import (
    POINT_COLUMNS, datasets, draw_points, gamma_points, gamma_ticks, grid, no_data, panel_title,
)
from fedbalance.presentation.names import BEYOND_LOSSES, BEYOND_NAME
from fedbalance.records import DEFAULT_ESTIMATOR


def make_Beyond_paper(final: pd.DataFrame | None = None, rounds: pd.DataFrame | None = None,
                      clients: pd.DataFrame | None = None, *, estimator: str = DEFAULT_ESTIMATOR) -> Drawn:
    """Ac.M (%) against Γ per loss, mean over the seeds the Beyond_paper table reads with its 95 % interval, one panel
    per dataset (``beyond``); CE and the Ratio Loss (the loss comparison's jobs) beside the paper's values."""
    ds = datasets(final, "beyond") if final is not None and len(final) else []
    parts = []
    for d in ds:
        losses = list(BEYOND_LOSSES) + sorted(set(final.loc[(final.experiment == "beyond") & (final.dataset == d), "loss"])
                                              - set(BEYOND_LOSSES))
        parts.append(gamma_points(final, "beyond", d, losses, BEYOND_NAME, table="Beyond_paper",
                                  paper_rows=("ce", "ratio")))
    parts = [p for p in parts if len(p)]
    points = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=POINT_COLUMNS)
    fig, axes = grid(max(len(ds), 1), "Beyond the paper: minority-class accuracy against Γ")
    if not ds:
        no_data(axes[0], "beyond/<any dataset>")
    for ax, d in zip(axes, ds):
        draw_points(ax, points[points.panel == d], dashed={BEYOND_NAME["ce"], BEYOND_NAME["ratio"]},
                    dodge=0.06)
        gamma_ticks(ax)
        ax.set(title=panel_title(d), xlabel="Γ", ylabel="Ac.M (%)")
    fig.tight_layout()
    return Drawn(fig, points)
