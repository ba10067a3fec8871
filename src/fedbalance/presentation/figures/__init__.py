"""The paper's figures (and ours), one module per family, as PDF and PNG; ``FIGURES`` is their registry.

Each figure is drawn by ``make_<name>(final, rounds, clients, *, dataset, estimator)`` of its module
from the tidy frames it lists in ``inputs`` (``fedbalance.aggregate``: final.csv, rounds.csv,
clients.csv); curves are means over seeds per round, CS curves use the ``cs_<estimator>`` columns
of rounds.csv with the uniform guess drawn beside them. The registry imports no module (nor
matplotlib, nor pandas) until a figure is drawn, so the workflow plans from it with the standard library alone.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from fedbalance.presentation.names import FOUR_LOSSES, GAMMAS, Read, gamma_setting
from fedbalance.records import DEFAULT_ESTIMATOR

if TYPE_CHECKING:
    import pandas as pd

HERE = Path(__file__).parent
COMMON_FILE = HERE / "common.py"
FORMATS = ("pdf", "png")


@dataclass(frozen=True)
class FigureSpec:
    """One figure: the module that draws it, its experiment family, the tidy frames it reads, its dataset
    and the jobs it draws (``reads``, checked against the config by ``fedbalance.presentation.contract``)."""

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
    FigureSpec("Res_mismatch", "mismatch", "mismatch", ("final",), "cifar10",
               reads=tuple(Read("mismatch", "cifar10", loss=loss) for loss in FOUR_LOSSES)),
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
)
FIGURES: dict[str, FigureSpec] = {s.name: s for s in _SPECS}
DEFAULT_DATASET: dict[str, str] = {s.name: s.dataset for s in _SPECS if s.dataset}


def module_file(name: str) -> Path:
    """The source file of the module that draws figure ``name``."""
    return FIGURES[name].module_file


def maker(name: str) -> Callable[..., Any]:
    """The ``make_<name>`` function of figure ``name`` (imports its module)."""
    module = importlib.import_module(f"{__name__}.{FIGURES[name].module}")
    return getattr(module, f"make_{name}")


def write_figure(name: str, out_dir: str | Path, *, final: pd.DataFrame | None = None,
                 rounds: pd.DataFrame | None = None, clients: pd.DataFrame | None = None,
                 dataset: str | None = None, estimator: str = DEFAULT_ESTIMATOR) -> list[Path]:
    """Draw figure ``name`` and write it as ``<name>.pdf`` and ``<name>.png`` into ``out_dir``."""
    from fedbalance.presentation.figures.common import plt

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    fig = maker(name)(final, rounds, clients, dataset=dataset or DEFAULT_DATASET.get(name), estimator=estimator)
    paths = []
    for ext in FORMATS:
        p = out / f"{name}.{ext}"
        fig.savefig(p, dpi=120)
        paths.append(p)
    plt.close(fig)
    return paths


def write_figures(out_dir: str | Path, *, final: pd.DataFrame | None = None, rounds: pd.DataFrame | None = None,
                  clients: pd.DataFrame | None = None, dataset_map: dict[str, str] | None = None,
                  estimator: str = DEFAULT_ESTIMATOR) -> list[Path]:
    """Write every figure; ``dataset_map`` overrides a figure's dataset."""
    dataset_map = {**DEFAULT_DATASET, **(dataset_map or {})}
    return [p for name in FIGURES for p in write_figure(name, out_dir, final=final, rounds=rounds, clients=clients,
                                                        dataset=dataset_map.get(name), estimator=estimator)]
