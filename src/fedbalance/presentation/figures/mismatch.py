"""Res_mismatch: Ac.M against the clients' realised mismatch, one panel per dataset."""

from __future__ import annotations

import math

import pandas as pd

from fedbalance.presentation.figures import Drawn
from fedbalance.presentation.figures.common import (
    BOUNDS, POINT_COLUMNS, concat_points, datasets, final_seed_values, panels, paper_value, points_over_seeds, select,
    table_seeds,
)
from fedbalance.presentation.names import DATASET_NAME, FOUR_LOSSES, LOSS_NAME
from fedbalance.presentation.table_specs import CS_LEVELS
from fedbalance.presentation.tables import TABLES, plugin_losses
from fedbalance.common.records import DEFAULT_ESTIMATOR, setting_value

EXPERIMENTS = ("mismatch", "mismatch_fer2013")


def _experiment(dataset: str) -> str:
    return "mismatch_fer2013" if dataset == "fer2013" else "mismatch"


def mismatch_points(final: pd.DataFrame | None, dataset: str, gamma: int) -> pd.DataFrame:
    """Per loss and classes-per-client level at Γ = ``gamma``: Ac.M over the seeds the dataset's Sup_data table reads,
    at x = the realised mean CS of the clients (mean over the same seeds), and the paper's value (that table's cell)
    at x = the paper's CS level."""
    exp = _experiment(dataset)
    per_seed = final_seed_values(final, "acm", experiment=exp, dataset=dataset)
    levels = per_seed.setting.map(lambda s: setting_value(s, "c") if setting_value(s, "g") == gamma else None)
    per_seed = per_seed[levels.notna()]
    if per_seed.empty:
        return pd.DataFrame(columns=POINT_COLUMNS)
    label = f"Sup_data_{DATASET_NAME.get(dataset, dataset)}"
    kept = table_seeds(per_seed, label, dataset, "acm") if label in TABLES else per_seed
    pts = points_over_seeds(kept, ["setting", "loss"], BOUNDS["percent"])
    sel = select(final, experiment=exp, dataset=dataset)
    cs = kept.merge(sel[["setting", "loss", "seed", "mean_cs"]].astype({"seed": int}), on=["setting", "loss", "seed"])
    pts = pts.merge(cs.groupby(["setting", "loss"], as_index=False)["mean_cs"].mean(), on=["setting", "loss"])
    paper_cs = dict(CS_LEVELS.get(7 if dataset == "fer2013" else 10, ()))
    pts["paper"] = [paper_value(label, "acm", dataset, f"{paper_cs[setting_value(s, 'c')]}/{gamma}:1", loss)
                    if setting_value(s, "c") in paper_cs and loss in FOUR_LOSSES else math.nan
                    for s, loss in zip(pts.setting, pts.loss)]
    pts["paper_x"] = [float(paper_cs[setting_value(s, "c")]) if p == p else math.nan for s, p in zip(pts.setting, pts.paper)]
    order = {loss: i for i, loss in enumerate([*FOUR_LOSSES, *sorted(set(pts.loss) - set(FOUR_LOSSES))])}
    pts = pts.assign(panel=dataset, x=pts.mean_cs, x_label=[f"{setting_value(s, 'c')} classes" for s in pts.setting],
                     series=pts.loss.map(lambda loss: LOSS_NAME.get(loss, loss)), _order=pts.loss.map(order))
    return pts.sort_values(["_order", "x"])[POINT_COLUMNS].reset_index(drop=True)


def make_Res_mismatch(final: pd.DataFrame | None = None, rounds: pd.DataFrame | None = None,
                      clients: pd.DataFrame | None = None, *, estimator: str = DEFAULT_ESTIMATOR,
                      gamma: int = 10) -> Drawn:
    """Ac.M against the realised mean CS of the clients for the four losses and any plug-in loss at Γ = ``gamma``,
    mean over seeds with its 95 % interval and the paper's value, one panel per dataset (``mismatch``,
    ``mismatch_fer2013``; the paper's figure is the CIFAR10 panel)."""
    frame = final if final is not None else pd.DataFrame(columns=["experiment", "dataset"])
    keep = [*FOUR_LOSSES, *plugin_losses(frame, EXPERIMENTS)]
    parts = [mismatch_points(frame[frame.loss.isin(keep)] if len(frame) else frame, d, gamma)
             for d in datasets(frame, EXPERIMENTS)]
    points = concat_points(parts)
    fig = panels(points, f"Mismatch between local and global imbalance, Γ = {gamma}:1", "mismatch/<any dataset>",
                 xlabel="mean CS of the clients (local vs global)", ylabel="Ac.M (%)",
                 paper_label="paper (at its CS level)", dodge=0.006)
    return Drawn(fig, points)
