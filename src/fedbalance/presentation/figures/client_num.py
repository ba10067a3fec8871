"""Sup_client_num_CIFAR10 and Sup_client_num_FEMNIST: the monitor's CS per round for each number of selected clients."""

from __future__ import annotations

import pandas as pd

from fedbalance.presentation.figures.common import Figure, no_data, per_round_mean, plt, select
from fedbalance.records import DEFAULT_ESTIMATOR, cs_column, setting_value


def _clients(setting: str) -> int | float | None:
    return setting_value(setting, "k")


def _client_num(rounds: pd.DataFrame, experiment: str, dataset: str, estimator: str) -> Figure:
    sel = select(rounds, experiment=experiment, dataset=dataset)
    fig, ax = plt.subplots(figsize=(6, 3.6))
    settings = sorted(set(sel.setting), key=lambda s: _clients(str(s)) or 0)
    if sel.empty:
        no_data(ax, f"{experiment}/{dataset}")
    for s in settings:
        cs = per_round_mean(sel, cs_column(estimator), setting=s)
        if not cs.empty:
            k = _clients(str(s))
            ax.plot(cs.index, cs.values, marker=".", label=f"{s if k is None else k} clients")
    if settings:
        ax.legend()
    ax.set(title=f"CS per round, {dataset} ({estimator})", xlabel="round", ylabel="CS")
    fig.tight_layout()
    return fig


def make_Sup_client_num_CIFAR10(final: pd.DataFrame | None = None, rounds: pd.DataFrame | None = None,
                                clients: pd.DataFrame | None = None, *, dataset: str | None = None,
                                estimator: str = DEFAULT_ESTIMATOR) -> Figure:
    """CS per round for each number of selected clients (``clients_cifar10``)."""
    return _client_num(rounds, "clients_cifar10", dataset or "cifar10", estimator)


def make_Sup_client_num_FEMNIST(final: pd.DataFrame | None = None, rounds: pd.DataFrame | None = None,
                                clients: pd.DataFrame | None = None, *, dataset: str | None = None,
                                estimator: str = DEFAULT_ESTIMATOR) -> Figure:
    """CS per round for each number of selected clients (``clients_femnist``)."""
    return _client_num(rounds, "clients_femnist", dataset or "femnist", estimator)
