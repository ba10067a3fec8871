"""Beyond_paper: Ac.M against Γ of the newer losses beside CE and Ratio (experiment family ``beyond``)."""

from __future__ import annotations

import pandas as pd

from fedbalance.presentation.figures import Drawn
from fedbalance.presentation.figures.common import concat_points, datasets, gamma_points, panels
from fedbalance.presentation.names import BEYOND_LOSSES, LOSS_NAME
from fedbalance.common.records import DEFAULT_ESTIMATOR


def make_Beyond_paper(final: pd.DataFrame | None = None, rounds: pd.DataFrame | None = None,
                      clients: pd.DataFrame | None = None, *, estimator: str = DEFAULT_ESTIMATOR) -> Drawn:
    """Ac.M (%) against Γ per loss, mean over the seeds the Beyond_paper table reads with its 95 % interval, one panel
    per dataset (``beyond``); CE and the Ratio Loss (the loss comparison's jobs) beside the paper's values."""
    ds = datasets(final, "beyond") if final is not None and len(final) else []
    parts = []
    for d in ds:
        losses = list(BEYOND_LOSSES) + sorted(set(final.loc[(final.experiment == "beyond") & (final.dataset == d), "loss"])
                                              - set(BEYOND_LOSSES))
        parts.append(gamma_points(final, "beyond", d, losses, LOSS_NAME, table="Beyond_paper",
                                  paper_rows=("ce", "ratio")))
    points = concat_points(parts)
    fig = panels(points, "Beyond the paper: minority-class accuracy against Γ", "beyond/<any dataset>", xlabel="Γ",
                 ylabel="Ac.M (%)", gamma_axis=True, dashed={LOSS_NAME["ce"], LOSS_NAME["ratio"]}, dodge=0.06)
    return Drawn(fig, points)
