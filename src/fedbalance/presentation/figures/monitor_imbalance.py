"""Monitor_under_imbalance: each estimator's CS against Γ, Ratio-Loss jobs of the loss experiment, and beside it the
default estimator's shares with their 95 % intervals (``fedbalance.monitor.intervals``) against the true shares."""

from __future__ import annotations

import json
import math
from collections.abc import Callable

import numpy as np
import pandas as pd

from fedbalance.monitor import intervals
from fedbalance.presentation.figures import Drawn
from fedbalance.presentation.figures.common import (
    BOUNDS, GAMMA_LABEL, GAMMA_X, POINT_COLUMNS, concat_points, datasets, draw_points, gamma_ticks, grid, panel_title,
    panels, points_over_seeds, select, table_seeds,
)
from fedbalance.presentation.names import ESTIMATORS, UNIFORM, estimator_name
from fedbalance.presentation.tables import plugin_estimators
from fedbalance.common.records import DEFAULT_ESTIMATOR, cs_column, est_column, high_column, low_column


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


SHARES = " · shares"
"""Suffix of the band panel's name in the points (``<dataset> · shares``)."""


def _cell(value: object) -> list[float] | None:
    if isinstance(value, str) and value.startswith("["):
        return [float(v) for v in json.loads(value)]
    if isinstance(value, (list, tuple, np.ndarray)):
        return [float(v) for v in value]
    return None


def share_band_points(rows: pd.DataFrame, estimator: str, proto: str, panel: str,
                      x_of: Callable[[pd.Series], float], label_of: Callable[[pd.Series], str]) -> pd.DataFrame:
    """Band points (``POINT_COLUMNS``) of ``estimator``'s shares against the truth in the rounds ``rows``: the classes
    split into the round's minority classes (true share below ``intervals.MINORITY_FRACTION`` / Q) and the others;
    per x (``x_of`` a row) and group, the mean over seeds of each seed's mean over its rounds and classes of the
    estimated share (``mean``), of its 95 % interval's ends (``low``/``high``: the recorded ``lo_``/``hi_`` columns,
    else the shipped calibration's for protocol ``proto``), and of the true share (a series of its own)."""
    est, lo_c, hi_c = est_column(estimator), low_column(estimator), high_column(estimator)
    if rows is None or not len(rows) or est not in rows.columns or "true_composition" not in rows.columns:
        return pd.DataFrame(columns=POINT_COLUMNS)
    calibration = intervals.shipped()
    found = []
    for _, r in rows.iterrows():
        truth, counts = _cell(r["true_composition"]), _cell(r[est])
        if truth is None or counts is None or not sum(counts) > 0:
            continue
        low, high = _cell(r.get(lo_c)), _cell(r.get(hi_c))
        if low is None or high is None:
            ends = None if calibration is None else intervals.count_interval(calibration, estimator, proto,
                                                                             int(r["round"]), counts)
            if ends is None:
                continue
            low, high = ends
        n, q = sum(truth), len(truth)
        for c in range(q):
            role = "minority classes" if truth[c] / n < intervals.MINORITY_FRACTION / q else "other classes"
            found.append({"x": x_of(r), "x_label": label_of(r), "seed": r["seed"], "role": role,
                          "est": counts[c] / n, "low": low[c] / n, "high": high[c] / n, "truth": truth[c] / n})
    if not found:
        return pd.DataFrame(columns=POINT_COLUMNS)
    per_seed = pd.DataFrame(found).groupby(["x", "x_label", "role", "seed"], as_index=False).mean()
    means = per_seed.groupby(["x", "x_label", "role"], as_index=False).agg(
        n=("seed", "size"), est=("est", "mean"), low=("low", "mean"), high=("high", "mean"), truth=("truth", "mean"))
    parts = []
    for role, g in means.groupby("role", sort=True):
        base = g.assign(panel=panel, clipped="", paper=math.nan, paper_x=math.nan)
        parts.append(base.assign(series=f"{role}: {estimator}, 95 % interval", mean=g.est)[POINT_COLUMNS])
        parts.append(base.assign(series=f"{role}: true share", mean=g.truth, low=math.nan, high=math.nan)[POINT_COLUMNS])
    return concat_points(parts)


def draw_share_bands(ax: object, points: pd.DataFrame, xlabel: str) -> None:
    """One band panel: each group's estimate with its interval as a shaded band, the true shares dashed, log shares."""
    truth = {s for s in points.series if s.endswith("true share")}
    draw_points(ax, points, band=True, dashed=truth, legend=False)
    ax.set_yscale("log")
    ax.legend(fontsize=6.5, title="shaded: mean 95 % interval ends", title_fontsize=6.5)
    ax.set(xlabel=xlabel, ylabel="share of the round")


def make_Monitor_under_imbalance(final: pd.DataFrame | None = None, rounds: pd.DataFrame | None = None,
                                 clients: pd.DataFrame | None = None, *, estimator: str = DEFAULT_ESTIMATOR) -> Drawn:
    """CS of each estimator and of the uniform guess against Γ (each seed's mean over rounds, then the mean over seeds
    with its 95 % interval), Ratio-Loss jobs, one panel per dataset; beside it, where the rounds record the
    composition, ``estimator``'s minority and other classes' shares with their 95 % intervals against the true
    shares (``share_band_points``)."""
    points = imbalance_points(rounds)
    title = "Monitor under imbalance (Ratio-Loss jobs)"
    sel = select(rounds, experiment="losses", loss="ratio") if rounds is not None and len(rounds) else pd.DataFrame()
    sel = sel[sel.setting.isin(list(GAMMA_X))] if len(sel) else sel
    bands = {d: share_band_points(sel[sel.dataset == d], estimator, intervals.FIXED, d + SHARES,
                                  lambda r: GAMMA_X[r["setting"]], lambda r: GAMMA_LABEL[r["setting"]])
             for d in dict.fromkeys(points.panel)} if len(sel) else {}
    bands = {d: b for d, b in bands.items() if len(b)}
    if not bands:
        fig = panels(points, title, "losses/<any dataset> (ratio)", xlabel="Γ", ylabel="CS", gamma_axis=True,
                     dashed={estimator_name(UNIFORM)}, dodge=0.06)
        return Drawn(fig, points)
    ds = list(dict.fromkeys(points.panel))
    fig, axes = grid(2 * len(ds), title)
    for i, d in enumerate(ds):
        ax = axes[2 * i]
        draw_points(ax, points[points.panel == d], dashed={estimator_name(UNIFORM)}, dodge=0.06)
        gamma_ticks(ax)
        ax.set(title=panel_title(d), xlabel="Γ", ylabel="CS")
        draw_share_panel(axes[2 * i + 1], bands, d, estimator, "Γ", gamma_ticks)
    return banded(fig, len(ds), points, bands)


def draw_share_panel(ax: object, bands: dict[str, pd.DataFrame], dataset: str, estimator: str, xlabel: str,
                     ticks: Callable[[object], None]) -> None:
    """A dataset's second panel: ``estimator``'s shares with their 95 % intervals (``draw_share_bands``), or an empty
    panel where its rounds give none."""
    if dataset not in bands:
        ax.set_axis_off()
        return
    draw_share_bands(ax, bands[dataset], xlabel)
    ticks(ax)
    ax.set_title(f"{panel_title(dataset)}: {estimator_name(estimator)}'s shares, 95 % intervals")


def banded(fig: object, n: int, points: pd.DataFrame, bands: dict[str, pd.DataFrame]) -> Drawn:
    """A figure of ``n`` datasets, each a CS panel beside a share panel, sized and with every drawn point."""
    fig.set_size_inches(10, 4.2 * n)
    fig.tight_layout()
    return Drawn(fig, concat_points([points, *bands.values()]))
