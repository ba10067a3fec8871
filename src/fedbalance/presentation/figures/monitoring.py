"""fig_monitoring and the Sup_empirical figures: the monitor experiment per round."""

from __future__ import annotations

import pandas as pd

from fedbalance.presentation.figures.common import Figure, datasets, grid, no_data, per_round_mean, plt
from fedbalance.presentation.names import ESTIMATORS
from fedbalance.records import DEFAULT_ESTIMATOR, cs_column


def make_fig_monitoring(final: pd.DataFrame | None = None, rounds: pd.DataFrame | None = None,
                        clients: pd.DataFrame | None = None, *, dataset: str | None = None,
                        estimator: str = DEFAULT_ESTIMATOR) -> Figure:
    """CS of every estimator and of the uniform guess per round, one panel per dataset (``monitor``)."""
    ds = datasets(rounds, "monitor")
    fig, axes = grid(max(len(ds), 1), "Composition estimate vs ground truth (monitor)")
    if not ds:
        no_data(axes[0], "monitor/<any dataset>")
    for ax, d in zip(axes, ds):
        for est in ESTIMATORS:
            s = per_round_mean(rounds, cs_column(est), experiment="monitor", dataset=d)
            if not s.empty:
                ax.plot(s.index, s.values, "--" if est == "uniform" else "-", marker=".", label=est)
        ax.set(title=d, xlabel="round", ylabel="CS")
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def _empirical(rounds: pd.DataFrame, column: str, title: str, ylabel: str) -> Figure:
    fig, ax = plt.subplots(figsize=(6, 3.6))
    ds = [d for d in datasets(rounds, "monitor")
          if not per_round_mean(rounds, column, experiment="monitor", dataset=d).empty]
    if not ds:
        no_data(ax, "monitor/<any dataset> (" + column + ")")
    for d in ds:
        s = per_round_mean(rounds, column, experiment="monitor", dataset=d)
        ax.plot(s.index, s.values, marker=".", label=d)
    if ds:
        ax.legend()
    ax.set(title=title, xlabel="round", ylabel=ylabel)
    fig.tight_layout()
    return fig


def make_Sup_empirical_sim(final: pd.DataFrame | None = None, rounds: pd.DataFrame | None = None,
                           clients: pd.DataFrame | None = None, *, dataset: str | None = None,
                           estimator: str = DEFAULT_ESTIMATOR) -> Figure:
    """Mean cosine similarity of same-class last-layer inputs Y per round (``monitor``)."""
    return _empirical(rounds, "emp_cos", "Cosine similarity of Y within a class", "cosine similarity")


def make_Sup_empirical_mul(final: pd.DataFrame | None = None, rounds: pd.DataFrame | None = None,
                           clients: pd.DataFrame | None = None, *, dataset: str | None = None,
                           estimator: str = DEFAULT_ESTIMATOR) -> Figure:
    """Coefficient of variation of the products of same-class Y per round (``monitor``)."""
    return _empirical(rounds, "emp_cv", "Coefficient of variation of Y products within a class",
                      "coefficient of variation")
