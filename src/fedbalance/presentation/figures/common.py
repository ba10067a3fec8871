"""Helpers shared by the figure modules: selection, per-round means, panels, the "no data" mark, Γ error bars.

A figure whose data are absent still exists and says "no data for <experiment>/<dataset> in this
configuration", so the workflow's outputs always exist.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from fedbalance.presentation.names import DATASETS, GAMMAS, gamma_setting  # noqa: E402

__all__ = ["Figure", "plt", "select", "per_round_mean", "no_data", "grid", "datasets", "errorbar_over_gammas",
           "gamma_ticks"]


def select(df: pd.DataFrame, **eq: object) -> pd.DataFrame:
    """The rows of ``df`` whose columns equal the given values."""
    mask = np.ones(len(df), dtype=bool)
    for k, v in eq.items():
        mask &= (df[k] == v).to_numpy()
    return df[mask]


def per_round_mean(rounds: pd.DataFrame, column: str, **eq: object) -> pd.Series:
    """Mean over seeds of ``column`` per round for the jobs matching ``eq`` (NaN rows dropped)."""
    sel = select(rounds, **eq)
    if column not in sel.columns:
        return pd.Series(dtype=float)
    return sel.dropna(subset=[column]).groupby("round")[column].mean()


def no_data(ax: plt.Axes, what: str) -> None:
    """Mark a panel whose data the configuration does not produce."""
    ax.text(0.5, 0.5, f"no data for {what} in this configuration", ha="center", va="center", transform=ax.transAxes,
            wrap=True)
    ax.set_xticks([])
    ax.set_yticks([])


def grid(n: int, title: str) -> tuple[Figure, list[plt.Axes]]:
    """A figure of ``n`` panels, two per row."""
    cols = min(n, 2)
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.4 * rows), squeeze=False)
    fig.suptitle(title)
    return fig, list(axes.ravel())


def datasets(df: pd.DataFrame, experiment: str) -> list[str]:
    """The datasets of ``experiment`` present in ``df``: the paper's order, then any other sorted."""
    present = set(df.loc[df.experiment == experiment, "dataset"])
    return [d for d in DATASETS if d in present] + sorted(present - set(DATASETS))


def errorbar_over_gammas(ax: plt.Axes, rows: pd.DataFrame, column: str, *, label: str, dashed: bool = False,
                         scale: float = 1.0) -> None:
    """Mean ± std of ``rows[column]`` (times ``scale``) at each Γ setting; Γ without a value is skipped."""
    pts = [(i, scale * rows.loc[rows.setting == gamma_setting(g), column].dropna()) for i, (_, g) in enumerate(GAMMAS)]
    pts = [(i, v) for i, v in pts if len(v)]
    if pts:
        ax.errorbar([i for i, _ in pts], [v.mean() for _, v in pts],
                    yerr=[v.std() if len(v) > 1 else 0.0 for _, v in pts], marker="o", capsize=3,
                    linestyle="--" if dashed else "-", label=label)


def gamma_ticks(ax: plt.Axes) -> None:
    """Label the x axis with the printed Γ levels (positions 0, 1, ...)."""
    ax.set_xticks(range(len(GAMMAS)), [lab for lab, _ in GAMMAS])
