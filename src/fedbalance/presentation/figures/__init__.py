"""The paper's figures (and ours), one module per family, as PDF and PNG; ``FIGURES`` is their registry.

Each figure is drawn by ``make_<name>(final, rounds, clients, *, estimator)`` of its module from the tidy frames it
lists in ``inputs`` (``fedbalance.jobs.aggregate``: final.csv, rounds.csv, clients.csv), and only from the datasets it names:
a figure of one dataset (``dataset``: the CIFAR10 curves, the FEMNIST client numbers) from that dataset's jobs alone,
any other one panel per dataset, titled with it. ``make_<name>`` gives the figure and its plotted numbers
(``Drawn``: ``common.POINT_COLUMNS``, the mean over seeds, its 95 % interval and the paper's value), which
``write_figure`` writes beside the PDF and PNG as CSV. The registry imports no module (nor matplotlib, nor pandas)
until a figure is drawn, so the workflow plans from it with the standard library alone.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, NamedTuple

from fedbalance.presentation.names import FOUR_LOSSES, GAMMAS, Read, gamma_setting
from fedbalance.common.records import DEFAULT_ESTIMATOR

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

HERE = Path(__file__).parent
COMMON_FILE = HERE / "common.py"
FORMATS = ("pdf", "png")
POINTS = "csv"
"""The plotted numbers of a figure are written as ``<name>.csv`` beside its images."""


class Drawn(NamedTuple):
    """A drawn figure and the numbers it plots (``common.POINT_COLUMNS``)."""

    figure: Figure
    points: pd.DataFrame


@dataclass(frozen=True)
class FigureSpec:
    """One figure: the module that draws it, its experiment family, the tidy frames it reads, the one dataset it is
    drawn from (None: one panel per dataset the study has) and the jobs it draws (``reads``, on that dataset; checked
    against the config by ``fedbalance.presentation.contract``, and what makes it run in a study:
    ``fedbalance.presentation.study.figures_run``)."""

    name: str
    module: str
    family: str
    inputs: tuple[str, ...]
    dataset: str | None = None
    reads: tuple[Read, ...] = ()

    @property
    def module_file(self) -> Path:
        """The source file of the figure's module (a workflow input of its job)."""
        return HERE / f"{self.module}.py"


_IMBALANCED = tuple(gamma_setting(g) for _, g in GAMMAS[1:])
_SPECS = (
    FigureSpec("fig_monitoring", "monitoring", "monitor", ("rounds",), reads=(Read("monitor"),)),
    FigureSpec("Res_mismatch", "mismatch", "mismatch", ("final",),
               reads=tuple(Read(exp, d, loss=loss) for exp, d in (("mismatch", None), ("mismatch_fer2013", "fer2013"))
                           for loss in FOUR_LOSSES)),
    FigureSpec("Sup_empirical_sim", "monitoring", "monitor", ("rounds",), reads=(Read("monitor"),)),
    FigureSpec("Sup_empirical_mul", "monitoring", "monitor", ("rounds",), reads=(Read("monitor"),)),
    FigureSpec("Sup_client_num_CIFAR10", "client_num", "clients", ("rounds",), "cifar10",
               reads=(Read("clients_cifar10", "cifar10"),)),
    FigureSpec("Sup_client_num_FEMNIST", "client_num", "clients", ("rounds",), "femnist",
               reads=(Read("clients_femnist", "femnist"),)),
    FigureSpec("Sup_curve_cifar_ratio", "curves", "losses", ("rounds",), "cifar10",
               reads=tuple(Read("losses", "cifar10", s, "ratio") for s in _IMBALANCED)),
    FigureSpec("Sup_curve_femnist_ratio", "curves", "losses", ("rounds",), "femnist",
               reads=tuple(Read("losses", "femnist", s, "ratio") for s in _IMBALANCED)),
    FigureSpec("Sup_curve_cifar_four_losses", "curves", "losses", ("rounds",), "cifar10",
               reads=tuple(Read("losses", "cifar10", gamma_setting(100), loss) for loss in FOUR_LOSSES)),
    FigureSpec("Sup_curve_femnist_four_losses", "curves", "losses", ("rounds",), "femnist",
               reads=tuple(Read("losses", "femnist", gamma_setting(100), loss) for loss in FOUR_LOSSES)),
    FigureSpec("Sup_data_splitting", "data_splitting", "losses", ("clients",), "mnist",
               reads=(Read("losses", "mnist", gamma_setting(10)),)),
    FigureSpec("Monitor_under_imbalance", "monitor_imbalance", "losses", ("rounds",),
               reads=tuple(Read("losses", setting=s, loss="ratio") for s in _IMBALANCED)),
    FigureSpec("Beyond_paper", "beyond", "beyond", ("final",), reads=(Read("beyond"),)),
    FigureSpec("Losses_acm_gamma", "losses", "losses", ("final",),
               reads=tuple(Read("losses", loss=loss) for loss in FOUR_LOSSES)),
    FigureSpec("Headline_monitor", "monitoring", "monitor", ("rounds",), "mnist", reads=(Read("monitor", "mnist"),)),
)
FIGURES: dict[str, FigureSpec] = {s.name: s for s in _SPECS}
HEADLINE = ("Losses_acm_gamma", "Headline_monitor")
"""The figures of the README's first screen (small, one panel: MNIST), drawn from the reference set (docs/figures/):
the loss comparison's own figure (one panel in a study of one dataset), and the monitor's default estimator against the
uniform guess."""


def module_file(name: str) -> Path:
    """The source file of the module that draws figure ``name``."""
    return FIGURES[name].module_file


def maker(name: str) -> Callable[..., Any]:
    """The ``make_<name>`` function of figure ``name`` (imports its module)."""
    module = importlib.import_module(f"{__name__}.{FIGURES[name].module}")
    return getattr(module, f"make_{name}")


def write_figure(name: str, out_dir: str | Path, *, final: pd.DataFrame | None = None,
                 rounds: pd.DataFrame | None = None, clients: pd.DataFrame | None = None,
                 estimator: str = DEFAULT_ESTIMATOR, formats: tuple[str, ...] = FORMATS) -> list[Path]:
    """Draw figure ``name`` and write it as ``<name>.<format>`` for each of ``formats`` into ``out_dir``, and its plotted
    numbers as ``<name>.csv``; a PNG records the CSV's SHA-256 in its metadata (``csv-sha256``)."""
    import hashlib

    from fedbalance.presentation.figures.common import plt

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    fig, points = maker(name)(final, rounds, clients, estimator=estimator)
    csv = points_csv(points)
    digest = hashlib.sha256(csv.encode()).hexdigest()
    paths = []
    for ext in formats:
        p = out / f"{name}.{ext}"
        meta = {"csv-sha256": digest, "Software": "fedbalance"} if ext == "png" else None
        fig.savefig(p, dpi=120 if name not in HEADLINE else 100, metadata=meta, bbox_inches="tight")
        paths.append(p)
    plt.close(fig)
    p = out / f"{name}.{POINTS}"
    p.write_text(csv)
    return [*paths, p]


def points_csv(points: pd.DataFrame) -> str:
    """A figure's plotted numbers as CSV text, rounded to 6 significant digits (what ``write_figure`` writes)."""
    return points.to_csv(index=False, float_format="%.6g", lineterminator="\n")


def write_figures(out_dir: str | Path, *, final: pd.DataFrame | None = None, rounds: pd.DataFrame | None = None,
                  clients: pd.DataFrame | None = None, estimator: str = DEFAULT_ESTIMATOR) -> list[Path]:
    """Write every figure (``write_figure``)."""
    return [p for name in FIGURES for p in write_figure(name, out_dir, final=final, rounds=rounds, clients=clients,
                                                        estimator=estimator)]
