"""Names the engine writes and the report reads: estimators, per-round columns, setting names (torch-free).

Defined once here; ``config``, ``fl``, ``jobs``, ``aggregate`` and ``presentation`` import them.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

JOB_KEYS: tuple[str, ...] = ("experiment", "dataset", "setting", "loss", "seed")
"""What names one training job (``Job``'s fields; metrics.json's "job")."""


@dataclass(frozen=True, order=True)
class Job:
    """One training job: the unit Snakemake schedules."""

    experiment: str
    dataset: str
    setting: str
    loss: str
    seed: int

    @property
    def path(self) -> str:
        """Relative result folder ``<experiment>/<dataset>/<setting>/<loss>/seed<k>``."""
        return f"{self.experiment}/{self.dataset}/{self.setting}/{self.loss}/seed{self.seed}"

    @classmethod
    def from_path(cls, path: str) -> Job:
        """The job of a result folder ``path`` (inverse of ``Job.path``); ValueError for another path."""
        parts = path.strip("/").split("/")
        if len(parts) != 5 or not re.fullmatch(r"seed\d+", parts[4]):
            raise ValueError(f"{path!r} is not a job folder <experiment>/<dataset>/<setting>/<loss>/seed<k>")
        return cls(*parts[:4], int(parts[4][4:]))

ESTIMATORS: tuple[str, ...] = ("paper", "released", "nnls", "simulated", "pooled", "shrunk")
"""Names of the built-in composition estimators (``fedbalance.estimators.REGISTRY`` holds their functions), as
rounds.csv's ``est_<name>``/``cs_<name>`` columns spell them; a config lists a subset, the first is its default."""

POOLED = "pooled"
"""The estimator that pools ``released``'s per-round estimates through the clients (``monitor.pooled_counts``)."""

SHRUNK = "shrunk"
"""``pooled`` shrunk towards the uniform guess by the noise its rounds show (``estimators.shrunk_counts``)."""


def est_column(name: str) -> str:
    """rounds.csv's column of estimator ``name``'s estimate (class counts, a JSON list)."""
    return f"est_{name}"


def cs_column(name: str) -> str:
    """rounds.csv's column of estimator ``name``'s CS against the round's true composition."""
    return f"cs_{name}"

DEFAULT_ESTIMATOR = POOLED
"""The estimator the report reads when none is named (the shipped configs list it first, docs/monitor.md)."""

UNIFORM = "uniform"
"""The no-information baseline N/Q reported beside every estimator."""

ROUND_COLUMNS: tuple[str, ...] = (
    "round",
    "train_loss",
    "acc",
    "acc_minority",
    "acc_majority",
    "auc_micro",
    "auc_hard",
    "seconds",
    "true_composition",
    *(f"est_{e}" for e in ESTIMATORS),
    *(f"cs_{e}" for e in ESTIMATORS),
    f"cs_{UNIFORM}",
    "weights",
    "acknowledged",
    "emp_cos",
    "emp_cv",
)
"""Columns of a job's rounds.csv, in order (``fedbalance.fl.run_fedavg`` documents each)."""


EMPIRICAL_COLUMNS: tuple[str, ...] = ("emp_cos", "emp_cv")
"""rounds.csv's columns of the empirical statistics of Y (``empirical: true``)."""
MONITOR_COLUMNS: tuple[str, ...] = ("weights", "acknowledged", f"cs_{UNIFORM}")
"""rounds.csv's monitor columns besides each estimator's ``est_``/``cs_`` pair."""


def is_monitor_column(column: str) -> bool:
    """A rounds.csv column the monitor fills: ``MONITOR_COLUMNS`` and every estimator's ``est_``/``cs_`` pair."""
    return column in MONITOR_COLUMNS or column.startswith((est_column(""), cs_column("")))


SETTING_PART = re.compile(r"([A-Za-z]+)(-?(?:\d+(?:\.\d*)?|\.\d+)(?:e[+-]?\d+)?|-?inf|nan)")
"""One ``<prefix><value>`` part of a grid setting name: letters, then a number as ``format(v, "g")`` or ``str(v)`` writes it."""


def plus_minus(mean: float, std: float, digits: int) -> str:
    """A cell over seeds as every report writes it: "mean ± std" to ``digits`` decimals, the mean alone when std is NaN
    (one seed)."""
    return f"{mean:.{digits}f}" + ("" if math.isnan(std) else f" ± {std:.{digits}f}")


def format_value(value: Any) -> str:
    """A grid value as it appears in a setting name: floats with ``:g`` (10.0 -> "10", 0.25 -> "0.25"), else ``str``."""
    return f"{value:g}" if isinstance(value, float) else str(value)


def setting_name(*pairs: tuple[str, Any]) -> str:
    """The name of a grid setting from its (prefix, value) pairs, joined by "_": ``("c", 5), ("g", 10)`` -> "c5_g10"."""
    return "_".join(f"{prefix}{format_value(value)}" for prefix, value in pairs)


def _number(text: str) -> int | float:
    try:
        return int(text)
    except ValueError:
        return float(text)


def parse_setting(name: str) -> tuple[tuple[str, int | float], ...]:
    """The (prefix, value) pairs of a grid setting name (inverse of :func:`setting_name`); ValueError for a name
    outside the grammar (an explicit setting such as "default" or "S")."""
    pairs = []
    for part in str(name).split("_"):
        m = SETTING_PART.fullmatch(part)
        if m is None:
            raise ValueError(f"{name!r} is not a grid setting name (<prefix><value>, joined by '_')")
        pairs.append((m.group(1), _number(m.group(2))))
    return tuple(pairs)


def setting_value(name: str, prefix: str) -> int | float | None:
    """The value of ``prefix`` in setting ``name`` ("c5_g10", "g" -> 10); None when absent or not a grid name."""
    try:
        return dict(parse_setting(name)).get(prefix)
    except ValueError:
        return None
