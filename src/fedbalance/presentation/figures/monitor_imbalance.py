"""Monitor_under_imbalance: each estimator's CS against Γ, Ratio-Loss jobs of the loss experiment."""

from __future__ import annotations

import math

import pandas as pd

from fedbalance.presentation.figures import Drawn
from fedbalance.presentation.figures.common import (
    BOUNDS, GAMMA_LABEL, GAMMA_X, POINT_COLUMNS, concat_points, datasets, panels, points_over_seeds, select,
    table_seeds,
)
from fedbalance.presentation.names import ESTIMATORS, UNIFORM, estimator_name
from fedbalance.presentation.tables import plugin_estimators
from fedbalance.common.records import DEFAULT_ESTIMATOR, cs_column


def _order(column: pd.Series) -> pd.Series:
    """Sort key: estimators in the registry's order (plug-ins after), Γ positions as they are."""
    known = {e: i for i, e in enumerate(ESTIMATORS)}
    return column.map(lambda v: known.get(v, len(known))) if column.name == "loss" else column


def imbalance_points(rounds: pd.DataFrame | None) -> pd.DataFrame:
    """Per dataset, estimator (plug-ins' too, and the uniform guess) and Γ: each seed's CS averaged over its rounds,
    then the mean over the seeds the Monitor_under_imbalance table reads and its 95 % interval."""
    sel = select(rounds, experiment="losses", loss="ratio") if rounds is not None and len(rounds) else pd.DataFrame()
    sel = sel[sel.setting.isin(list(GAMMA_X))] if len(sel) else sel
    parts = []
    for d in (datasets(sel, "losses") if len(sel) else []):
        sub = sel[sel.dataset == d]
        per_seed = []  # each estimator as a row of the table: one seed's CS averaged over its rounds
        for est in [*ESTIMATORS, *plugin_estimators(sub)]:
            column = cs_column(est)
            if column in sub.columns and sub[column].notna().any():
                per_seed.append(sub.dropna(subset=[column]).groupby(["setting", "seed"], as_index=False)[column].mean()
                                .rename(columns={column: "value"}).assign(loss=est))
        if not per_seed:
            continue
        kept = table_seeds(pd.concat(per_seed, ignore_index=True)[["setting", "loss", "seed", "value"]],
                           "Monitor_under_imbalance", d, "cs")
        pts = points_over_seeds(kept, ["loss", "setting"], BOUNDS["fraction"])
        parts.append(pts.assign(panel=d, series=pts.loss.map(estimator_name), x=pts.setting.map(GAMMA_X), x_label=pts.setting.map(GAMMA_LABEL),
                                paper=math.nan, paper_x=math.nan).sort_values(["loss", "x"], key=_order)[POINT_COLUMNS])
    return concat_points(parts)


def make_Monitor_under_imbalance(final: pd.DataFrame | None = None, rounds: pd.DataFrame | None = None,
                                 clients: pd.DataFrame | None = None, *, estimator: str = DEFAULT_ESTIMATOR) -> Drawn:
    """CS of each estimator and of the uniform guess against Γ (each seed's mean over rounds, then the mean over seeds
    with its 95 % interval), Ratio-Loss jobs, one panel per dataset."""
    points = imbalance_points(rounds)
    fig = panels(points, "Monitor under imbalance (Ratio-Loss jobs)", "losses/<any dataset> (ratio)", xlabel="Γ",
                 ylabel="CS", gamma_axis=True, dashed={estimator_name(UNIFORM)}, dodge=0.06)
    return Drawn(fig, points)
