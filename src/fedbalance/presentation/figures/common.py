"""Helpers shared by the figure modules: selection, the plotted numbers over seeds, panels, the "no data" mark.

Every figure that draws a mean over seeds draws it from a *points* frame (``POINT_COLUMNS``: one row per panel, series
and x, with the number of seeds, the mean, its 95 % interval over the seeds (``seedstats.mean_interval``) kept inside
the metric's range (``BOUNDS``; ``clipped`` says which end was cut) and the published value where the paper has one).
``draw_points`` draws it: error bars (or a band, for curves over rounds) whose clipped ends carry a triangle, and the
paper's values as hollow stars; the points frame is also what a figure's CSV holds (``write_figure``).

A figure whose data are absent still exists and says "no data for <experiment>/<dataset> in this
configuration", so a figure called outside the workflow always gives a file.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from fedbalance.presentation.names import DATASET_NAME, DATASETS, GAMMAS, gamma_setting  # noqa: E402
from fedbalance.evidence.seedstats import mean_interval  # noqa: E402

__all__ = ["Figure", "plt", "select", "no_data", "grid", "datasets", "gamma_ticks", "BOUNDS", "POINT_COLUMNS",
           "spread", "points_over_seeds", "draw_points", "table_seeds", "GAMMA_X", "GAMMA_LABEL", "panel_title",
           "final_seed_values", "paper_value", "gamma_points", "loss_table", "round_points", "concat_points", "panels"]

BOUNDS: dict[str, tuple[float, float]] = {
    "percent": (0.0, 100.0),      # Ac.M, Ac. (%)
    "fraction": (0.0, 1.0),       # cosine similarity of non-negative vectors, AUC
    "positive": (0.0, math.inf),  # a training loss, a coefficient of variation
}
"""The range of each kind of metric a figure draws; an interval is kept inside it (``spread``)."""

POINT_COLUMNS = ["panel", "series", "x", "x_label", "n", "mean", "low", "high", "clipped", "paper", "paper_x"]
"""The plotted numbers of a figure: one row per (panel, series, x): seeds, mean, 95 % interval (NaN with one seed),
which end of the interval was cut at the metric's range ("", "low", "high", "both"), the published value (NaN
where the paper has none) and where the paper puts it on the x axis (NaN: at ``x``; the mismatch figure's paper
points sit at the paper's CS levels, ours at the realised ones)."""

GAMMA_X = {gamma_setting(g): i for i, (_, g) in enumerate(GAMMAS)}
"""Setting of a Γ level -> its x position in a figure against Γ (balanced first)."""
GAMMA_LABEL = {gamma_setting(g): lab for lab, g in GAMMAS}


def select(df: pd.DataFrame, **eq: object) -> pd.DataFrame:
    """The rows of ``df`` whose columns equal the given values."""
    mask = np.ones(len(df), dtype=bool)
    for k, v in eq.items():
        mask &= (df[k] == v).to_numpy()
    return df[mask]


def spread(values: Iterable[float], bounds: tuple[float, float]) -> dict[str, object]:
    """``n``, ``mean`` and the 95 % Student-t interval (``low``, ``high``) of the mean of ``values`` (one per seed),
    the interval cut at ``bounds`` (``clipped``: "low", "high", "both" or ""); one value gives no interval (NaN)."""
    v = np.asarray([x for x in values if x is not None and math.isfinite(x)], float)
    if not len(v):
        return {"n": 0, "mean": math.nan, "low": math.nan, "high": math.nan, "clipped": ""}
    mean = float(v.mean())
    if len(v) < 2:
        return {"n": 1, "mean": mean, "low": math.nan, "high": math.nan, "clipped": ""}
    low, high = mean_interval(mean, float(v.std(ddof=1)), len(v))
    cut = [name for name, hit in (("low", low < bounds[0]), ("high", high > bounds[1])) if hit]
    return {"n": len(v), "mean": mean, "low": max(low, bounds[0]), "high": min(high, bounds[1]),
            "clipped": "both" if len(cut) == 2 else "".join(cut)}


def points_over_seeds(per_seed: pd.DataFrame, by: Sequence[str], bounds: tuple[float, float]) -> pd.DataFrame:
    """``spread`` of ``per_seed.value`` for each group of ``by`` (columns of ``per_seed``, which has ``value``)."""
    rows = [{**dict(zip(by, key if isinstance(key, tuple) else (key,))), **spread(g["value"], bounds)}
            for key, g in per_seed.groupby(list(by), sort=False)]
    return pd.DataFrame(rows, columns=[*by, "n", "mean", "low", "high", "clipped"])


def round_points(rounds: pd.DataFrame, column: str, series: str, panel: str, bounds: tuple[float, float],
                 **eq: object) -> pd.DataFrame:
    """Per round: the mean over seeds of ``column`` for the jobs matching ``eq`` and its 95 % interval (``POINT_COLUMNS``)."""
    sel = select(rounds, **eq) if rounds is not None and len(rounds) else pd.DataFrame()
    if column not in sel.columns or sel[column].isna().all():
        return pd.DataFrame(columns=POINT_COLUMNS)
    per_seed = sel.dropna(subset=[column]).rename(columns={column: "value"})[["round", "seed", "value"]]
    pts = points_over_seeds(per_seed, ["round"], bounds).rename(columns={"round": "x"})
    return pts.assign(panel=panel, series=series, x_label="", paper=float("nan"), paper_x=float("nan"))[POINT_COLUMNS]


def table_seeds(per_seed: pd.DataFrame, label: str, dataset: str, metric: str) -> pd.DataFrame:
    """``per_seed`` (``setting``, ``loss``, ``seed``, ``value``) of one dataset kept to the seeds table ``label``
    reads its cells on (``fedbalance.presentation.tables.shared_seeds``: a cell's seeds that another cell of its
    column or sweep holds), with the settings as the table's columns and the losses as its rows."""
    from fedbalance.presentation.tables import TABLES, shared_seeds

    frame = per_seed.assign(metric=metric, dataset=dataset, column=per_seed["setting"], row=per_seed["loss"])
    kept = shared_seeds(TABLES[label], frame)
    return kept[list(per_seed.columns)] if len(kept) else per_seed.iloc[:0]


def concat_points(parts: Iterable[pd.DataFrame]) -> pd.DataFrame:
    """The non-empty points frames of ``parts`` as one (``POINT_COLUMNS``; empty when none has a row)."""
    parts = [p for p in parts if len(p)]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=POINT_COLUMNS)


def panels(points: pd.DataFrame, title: str, what: str, *, xlabel: str, ylabel: str, gamma_axis: bool = False,
           **draw: object) -> Figure:
    """A figure of one panel per dataset of ``points`` (titled with it, drawn by ``draw_points`` with ``draw``; x
    labelled with the Γ levels when ``gamma_axis``), or one panel saying "no data for ``what``"."""
    ds = list(dict.fromkeys(points.panel))
    fig, axes = grid(max(len(ds), 1), title)
    if not ds:
        no_data(axes[0], what)
    for ax, d in zip(axes, ds):
        draw_points(ax, points[points.panel == d], **draw)
        if gamma_axis:
            gamma_ticks(ax)
        ax.set(title=panel_title(d), xlabel=xlabel, ylabel=ylabel)
    fig.tight_layout()
    return fig


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


def datasets(df: pd.DataFrame, experiment: str | Iterable[str]) -> list[str]:
    """The datasets of ``experiment`` (or of any of several) present in ``df``: the paper's order, then any other
    sorted."""
    names = [experiment] if isinstance(experiment, str) else list(experiment)
    present = set(df.loc[df.experiment.isin(names), "dataset"]) if len(df) else set()
    return [d for d in DATASETS if d in present] + sorted(present - set(DATASETS))


def panel_title(dataset: str) -> str:
    """A panel's title: the dataset it is drawn from."""
    return DATASET_NAME.get(dataset, dataset)


def gamma_ticks(ax: plt.Axes) -> None:
    """Label the x axis with the printed Γ levels (positions 0, 1, ...)."""
    ax.set_xticks(range(len(GAMMAS)), [lab for lab, _ in GAMMAS])


def _seeds_text(n: pd.Series) -> str:
    lo, hi = int(n.min()), int(n.max())
    return f"{lo} seed{'' if hi == 1 else 's'}" if lo == hi else f"{lo}–{hi} seeds"


PAPER_MARKER = {"marker": "*", "markersize": 11, "linestyle": "none", "markerfacecolor": "none", "markeredgewidth": 1.2}
"""How the paper's published value is drawn beside ours: a hollow star in the series' colour."""


def draw_points(ax: plt.Axes, points: pd.DataFrame, *, band: bool = False, dashed: Iterable[str] = (),
                styles: Mapping[str, Mapping[str, object]] | None = None, paper_label: str = "paper (published)",
                legend: bool = True, fontsize: float = 7, dodge: float = 0.0, below: bool = False) -> None:
    """Draw one panel's ``points`` (``POINT_COLUMNS``): each series' means joined by a line, its 95 % intervals as
    error bars (``band``: a shaded band, for curves over rounds), an end cut at the metric's range marked by a triangle
    pointing out of it, the paper's values as hollow stars; the legend names each series with its seeds and says what
    the stars, the bars and the triangles are (``below``: under the panel, in two columns); rounds (``band``) are ticked
    at whole numbers. ``dodge`` shifts the series apart along x (a figure against Γ), so their bars do not hide each
    other."""
    dashed, styles = set(dashed), dict(styles or {})
    clipped = papers = intervals = False
    groups = list(points.groupby("series", sort=False))
    for i, (series, p) in enumerate(groups):
        shift = dodge * (i - (len(groups) - 1) / 2)
        p = p.sort_values("x").assign(x=lambda f: f.x.astype(float) + shift,
                                      paper_x=lambda f: f.paper_x.astype(float) + shift)
        style = {"linestyle": "--" if series in dashed else "-", **styles.get(str(series), {})}
        label = f"{series} ({_seeds_text(p.n)})"
        (line,) = ax.plot(p.x, p["mean"], marker="." if band else "o", markersize=4 if band else 5, label=label, **style)
        color = line.get_color()
        has = p["low"].notna()
        if has.any():
            intervals = True
            if band:
                ax.fill_between(p.x[has], p["low"][has], p["high"][has], color=color, alpha=0.2, linewidth=0)
            else:
                down = (p["mean"][has] - p["low"][has]).clip(lower=0.0)  # a mean at the range's end: rounding
                up = (p["high"][has] - p["mean"][has]).clip(lower=0.0)
                ax.errorbar(p.x[has], p["mean"][has], yerr=[down, up], fmt="none", ecolor=color, capsize=3,
                            linewidth=1)
        for end, marker in (("low", "v"), ("high", "^")):
            cut = p[p.clipped.isin([end, "both"])]
            if len(cut):
                clipped = True
                ax.plot(cut.x, cut[end], marker=marker, linestyle="none", color=color, markersize=6)
        pub = p[p.paper.notna()]
        if len(pub):
            papers = True
            ax.plot(pub.paper_x.fillna(pub.x), pub.paper, color=color, **PAPER_MARKER)
    if band:  # curves over rounds: a round is a whole number
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if not legend:
        return
    handles, labels = ax.get_legend_handles_labels()
    if papers:
        handles.append(Line2D([], [], color="black", **PAPER_MARKER))
        labels.append(paper_label)
    if intervals:
        handles.append(Line2D([], [], color="gray", linewidth=6 if band else 1, alpha=0.3 if band else 1))
        labels.append("95 % interval of the mean over seeds")
    if clipped:
        handles.append(Line2D([], [], color="gray", marker="^", linestyle="none"))
        labels.append("interval cut at the metric's range")
    if below:
        ax.legend(handles, labels, fontsize=fontsize, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2,
                  frameon=False)
    else:
        ax.legend(handles, labels, fontsize=fontsize)


LOSS_TABLE = {"femnist": "FL_FEMNIST"}
"""The paper's table of the loss comparison on each dataset (the others: Res_3_datasets)."""


def loss_table(dataset: str) -> str:
    """The paper's table that holds the loss comparison on ``dataset``."""
    return LOSS_TABLE.get(dataset, "Res_3_datasets")


def final_seed_values(final: pd.DataFrame | None, metric: str, **eq: object) -> pd.DataFrame:
    """One row per job of ``final`` matching ``eq``: ``setting``, ``loss``, ``seed`` and ``value``, the table metric
    ``metric`` in the paper's units (``fedbalance.presentation.tables.FINAL_SOURCE``: Ac.M in %)."""
    from fedbalance.presentation.tables import FINAL_SOURCE

    column, scale = FINAL_SOURCE[metric]
    if final is None or final.empty:
        return pd.DataFrame(columns=["setting", "loss", "seed", "value"])
    sel = select(final, **eq).dropna(subset=[column])
    return pd.DataFrame({"setting": sel.setting.astype(str), "loss": sel.loss.astype(str), "seed": sel.seed.astype(int),
                         "value": sel[column].astype(float) * scale}).reset_index(drop=True)


def paper_value(table: str, metric: str, dataset: str, column: str, row: str) -> float:
    """The published value of one cell (``fedbalance.presentation.tables.published``), NaN where the paper has none."""
    pub = _published()
    hit = pub[(pub.table == table) & (pub.metric == metric) & (pub.dataset == dataset) & (pub.column == column)
              & (pub.row == row)]
    return float(hit.value.iloc[0]) if len(hit) else math.nan


@functools.lru_cache(maxsize=1)
def _published() -> pd.DataFrame:
    """The published numbers, read once."""
    from fedbalance.presentation.tables import published

    return published()


def gamma_points(final: pd.DataFrame | None, experiment: str, dataset: str, losses: Sequence[str],
                 names: Mapping[str, str], *, table: str, paper_rows: Iterable[str] = ()) -> pd.DataFrame:
    """Ac.M (%) against Γ of each of ``losses`` on ``dataset`` (``POINT_COLUMNS``; x: the Γ level's position): the mean
    over the seeds table ``table`` reads each cell on (``table_seeds``), its 95 % interval inside [0, 100], and, for
    the losses of ``paper_rows``, the published value of the loss comparison (``loss_table``)."""
    per_seed = final_seed_values(final, "acm", experiment=experiment, dataset=dataset)
    per_seed = per_seed[per_seed.setting.isin(list(GAMMA_X)) & per_seed.loss.isin(list(losses))]
    if per_seed.empty:
        return pd.DataFrame(columns=POINT_COLUMNS)
    kept = table_seeds(per_seed, table, dataset, "acm")
    pts = points_over_seeds(kept, ["setting", "loss"], BOUNDS["percent"])
    paper_rows = set(paper_rows)
    pts["paper"] = [paper_value(loss_table(dataset), "acm", dataset, GAMMA_LABEL[s], loss) if loss in paper_rows
                    else math.nan for s, loss in zip(pts.setting, pts.loss)]
    order = {loss: i for i, loss in enumerate(losses)}
    pts = pts.assign(panel=dataset, x=pts.setting.map(GAMMA_X), x_label=pts.setting.map(GAMMA_LABEL),
                     series=pts.loss.map(lambda loss: names.get(loss, loss)), paper_x=math.nan,
                     _order=pts.loss.map(order))
    return pts.sort_values(["_order", "x"])[POINT_COLUMNS].reset_index(drop=True)
