"""fig_monitoring, Headline_monitor and the Sup_empirical figures: the monitor experiment per round."""

from __future__ import annotations

import pandas as pd
from matplotlib.ticker import MaxNLocator

from fedbalance.monitor import intervals
from fedbalance.presentation.figures import FIGURES, Drawn
from fedbalance.presentation.figures.common import (
    BOUNDS, POINT_COLUMNS, concat_points, datasets, draw_points, grid, no_data, panel_title, panels, plt, round_points,
    select,
)
from fedbalance.presentation.figures.monitor_imbalance import SHARES, banded, draw_share_panel, share_band_points
from fedbalance.presentation.names import ESTIMATORS, UNIFORM, estimator_name
from fedbalance.common.records import DEFAULT_ESTIMATOR, cs_column


def monitor_points(rounds: pd.DataFrame | None, estimators: list[str], only: str | None = None) -> pd.DataFrame:
    """CS per round of each of ``estimators`` (``UNIFORM``: the uniform guess), one panel per dataset of the monitor
    experiment (``only``: that dataset alone)."""
    if rounds is None or rounds.empty:
        return pd.DataFrame(columns=POINT_COLUMNS)
    ds = [d for d in datasets(rounds, "monitor") if only in (None, d)]
    return concat_points(round_points(rounds, cs_column(est), estimator_name(est), d, BOUNDS["fraction"], experiment="monitor",
                                      dataset=d) for d in ds for est in estimators)


def make_fig_monitoring(final: pd.DataFrame | None = None, rounds: pd.DataFrame | None = None,
                        clients: pd.DataFrame | None = None, *, estimator: str = DEFAULT_ESTIMATOR) -> Drawn:
    """CS of every estimator and of the uniform guess per round, mean over seeds with its 95 % band, one panel per
    dataset (``monitor``); beside it, where the rounds record the composition, ``estimator``'s shares with their 95 %
    intervals against the true shares per round (``monitor_imbalance.share_band_points``, random selection)."""
    points = monitor_points(rounds, list(ESTIMATORS))
    title = "Composition estimate vs ground truth (monitor)"
    ds = list(dict.fromkeys(points.panel))
    bands = {d: share_band_points(select(rounds, experiment="monitor", dataset=d), estimator, intervals.RANDOM,
                                  d + SHARES, lambda r: float(r["round"]), lambda r: str(r["round"])) for d in ds}
    bands = {d: b for d, b in bands.items() if len(b)}
    if not bands:
        fig = panels(points, title, "monitor/<any dataset>", xlabel="round", ylabel="CS", band=True,
                     dashed={estimator_name(UNIFORM)})
        return Drawn(fig, points)
    fig, axes = grid(2 * len(ds), title)
    for i, d in enumerate(ds):
        ax = axes[2 * i]
        draw_points(ax, points[points.panel == d], band=True, dashed={estimator_name(UNIFORM)})
        ax.set(title=panel_title(d), xlabel="round", ylabel="CS")
        draw_share_panel(axes[2 * i + 1], bands, d, estimator, "round",
                         lambda a: a.xaxis.set_major_locator(MaxNLocator(integer=True)))
    return banded(fig, len(ds), points, bands)


def make_Headline_monitor(final: pd.DataFrame | None = None, rounds: pd.DataFrame | None = None,
                          clients: pd.DataFrame | None = None, *, estimator: str = DEFAULT_ESTIMATOR) -> Drawn:
    """The README's monitor figure: CS per round of the default estimator against the uniform guess N/Q, on
    ``FIGURES["Headline_monitor"].dataset`` (mean over seeds, 95 % band)."""
    dataset = FIGURES["Headline_monitor"].dataset
    points = monitor_points(rounds, [estimator, UNIFORM], only=dataset)
    uniform = estimator_name(UNIFORM)
    points["series"] = points.series.map(lambda s: s if s == uniform else f"monitor, {s}")
    fig, ax = plt.subplots(figsize=(5.0, 4.2))
    if points.empty:
        no_data(ax, f"monitor/{dataset}")
    else:
        draw_points(ax, points, band=True, dashed={uniform}, fontsize=8.5, below=True)
    ax.set(title=f"Monitor, {panel_title(dataset)}: CS to the round's composition", xlabel="round",
           ylabel="cosine similarity")
    fig.tight_layout()
    return Drawn(fig, points)


def _empirical(rounds: pd.DataFrame | None, column: str, title: str, ylabel: str, bounds: tuple[float, float]) -> Drawn:
    fig, ax = plt.subplots(figsize=(6, 3.6))
    ds = datasets(rounds, "monitor") if rounds is not None and len(rounds) else []
    points = concat_points(round_points(rounds, column, panel_title(d), "", bounds, experiment="monitor", dataset=d)
                           for d in ds)
    if points.empty:
        no_data(ax, "monitor/<any dataset> (" + column + ")")
    else:
        draw_points(ax, points, band=True)
    ax.set(title=title, xlabel="round", ylabel=ylabel)
    fig.tight_layout()
    return Drawn(fig, points)


def make_Sup_empirical_sim(final: pd.DataFrame | None = None, rounds: pd.DataFrame | None = None,
                           clients: pd.DataFrame | None = None, *, estimator: str = DEFAULT_ESTIMATOR) -> Drawn:
    """Mean cosine similarity of same-class last-layer inputs Y per round, a line per dataset (``monitor``)."""
    return _empirical(rounds, "emp_cos", "Cosine similarity of Y within a class", "cosine similarity",
                      BOUNDS["fraction"])


def make_Sup_empirical_mul(final: pd.DataFrame | None = None, rounds: pd.DataFrame | None = None,
                           clients: pd.DataFrame | None = None, *, estimator: str = DEFAULT_ESTIMATOR) -> Drawn:
    """Coefficient of variation of the products of same-class Y per round, a line per dataset (``monitor``)."""
    return _empirical(rounds, "emp_cv", "Coefficient of variation of Y products within a class",
                      "coefficient of variation", BOUNDS["positive"])
