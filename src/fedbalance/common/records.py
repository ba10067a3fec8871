"""Names the engine writes and the report reads: estimators, per-round columns, setting names (torch-free).

Defined once here; ``config``, ``fl``, ``jobs``, ``aggregate`` and ``presentation`` import them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
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
"""Names of the built-in composition estimators (``fedbalance.monitor.estimators.REGISTRY`` holds their functions), as
rounds.csv's ``est_<name>``/``cs_<name>`` columns spell them; a config lists a subset, the first is its default."""

POOLED = "pooled"
"""The estimator that pools ``released``'s per-round estimates through the clients (``monitor.pooled_counts``)."""

SHRUNK = "shrunk"
"""``pooled`` shrunk towards the uniform guess by the noise its rounds show (``estimators.shrunk_counts``)."""


RLU = "rlu"
"""Label recovery from the output bias's change (RLU's linear system, ``monitor.estimate_label_recovery``); registered
in ``fedbalance.monitor.estimators`` but not yet among ``ESTIMATORS`` (a config cannot list it; replays can, docs/monitor.md)."""

RLU_POOLED = "rlu_pooled"
"""``rlu``'s per-round estimates pooled through the clients as ``pooled`` pools ``released``'s (replays only, as ``rlu``)."""


SHARPENED = "sharpened"
"""``shrunk``'s estimate sharpened, p_c ∝ p̂_c^2 (``estimators.sharpened_counts``): the monitor's minority classes at their
size (docs/monitor.md, "sharpened"); computed from any recorded ``released`` column, not recorded by a run."""


DRIFT = "drift"
"""The output bias's change solved with a simulated client run with the round's own loss (``drift.estimate_drift``);
replays only, as ``rlu`` (docs/monitor.md, "`drift`")."""

DRIFT_POOLED = "drift_pooled"
"""``drift``'s per-round estimates pooled through the clients as ``pooled`` pools ``released``'s (replays only)."""


REPLAY_ESTIMATORS: tuple[str, ...] = (RLU, RLU_POOLED, SHARPENED, DRIFT, DRIFT_POOLED)
"""Registered estimators outside ``ESTIMATORS``: replays and the ``Observer`` run them, a config cannot list them yet,
so no job's rounds.csv columns change (docs/monitor.md, "rlu")."""


def est_column(name: str) -> str:
    """rounds.csv's column of estimator ``name``'s estimate (class counts, a JSON list)."""
    return f"est_{name}"


def cs_column(name: str) -> str:
    """rounds.csv's column of estimator ``name``'s CS against the round's true composition."""
    return f"cs_{name}"

def low_column(name: str) -> str:
    """rounds.csv's column of the lower ends of estimator ``name``'s 95 % interval of each class's count (a JSON list;
    ``fedbalance.monitor.intervals``, docs/monitor.md "How sure the monitor is")."""
    return f"lo_{name}"


def high_column(name: str) -> str:
    """rounds.csv's column of the upper ends of estimator ``name``'s 95 % interval of each class's count (a list)."""
    return f"hi_{name}"


def tv_column(name: str) -> str:
    """Per-round measure column: TV(p_hat, p) of estimator ``name`` (computed at read time, ``composition_measures``)."""
    return f"tv_{name}"


def shares_column(name: str) -> str:
    """Per-round measure column: each class's estimated share / true share of estimator ``name`` (a list)."""
    return f"shares_{name}"


def worst_share_column(name: str) -> str:
    """Per-round measure column: the worst class's factor max(r, 1/r) of estimator ``name``'s share ratios r."""
    return f"worst_share_{name}"


def imbalance_column(name: str) -> str:
    """Per-round measure column: estimator ``name``'s max/min class ratio (the acknowledgment's statistic)."""
    return f"imbalance_{name}"


TRUE_IMBALANCE = "true_imbalance"
"""Per-round measure column: the true composition's max/min class ratio."""


def shares(counts: Sequence[float]) -> list[float]:
    """Class counts as shares of their total, p_c = n_c / sum n (NaN everywhere when the total is not positive)."""
    total = float(sum(counts))
    return [float(c) / total if total > 0 else math.nan for c in counts]


def total_variation(estimate: Sequence[float], truth: Sequence[float]) -> float:
    """TV(p_hat, p) = 1/2 sum_c |p_hat_c - p_c| of the two compositions' shares; 1 - TV is the label-recovery
    literature's instance accuracy sum_c min(n_hat_c, n_c) / N (Chen & Vikalo, ICML 2024) when the totals agree."""
    return 0.5 * sum(abs(a - b) for a, b in zip(shares(estimate), shares(truth), strict=True))


def share_ratios(estimate: Sequence[float], truth: Sequence[float]) -> list[float]:
    """p_hat_c / p_c for every class (NaN for a class of true share 0)."""
    return [a / b if b > 0 else math.nan for a, b in zip(shares(estimate), shares(truth), strict=True)]


def worst_share_factor(estimate: Sequence[float], truth: Sequence[float]) -> float:
    """max_c max(r_c, 1 / r_c) over the classes present, r = ``share_ratios``: every class's share is within x f of the
    truth iff f <= this; inf when a present class is estimated at 0."""
    ratios = [r for r in share_ratios(estimate, truth) if not math.isnan(r)]
    return max((math.inf if r <= 0 else max(r, 1.0 / r) for r in ratios), default=math.nan)


def imbalance_ratio(counts: Sequence[float]) -> float:
    """max/min of class counts (inf when the smallest is <= 0): the acknowledgment's statistic."""
    lo = float(min(counts))
    return float(max(counts)) / lo if lo > 0 else math.inf


def composition_measures(name: str, estimate: Sequence[float], truth: Sequence[float]) -> dict[str, Any]:
    """The measures beside CS of one round's estimate, keyed by their columns: TV, share ratios, worst factor, max/min."""
    return {tv_column(name): total_variation(estimate, truth), shares_column(name): share_ratios(estimate, truth),
            worst_share_column(name): worst_share_factor(estimate, truth), imbalance_column(name): imbalance_ratio(estimate)}


DEFAULT_ESTIMATOR = POOLED
"""The estimator the report reads when none is named (the shipped configs list it first, docs/monitor.md)."""

UNIFORM = "uniform"
"""The no-information baseline N/Q reported beside every estimator."""

METRIC_SCALES = {"acc_minority": 100.0, "acc_majority": 100.0, "acc": 100.0, "auc_hard": 1.0, "auc_micro": 1.0}
"""The final.csv metrics ``compare`` sets beside the paper's, each with the scale it prints at: Ac.M and the accuracies
in %, the AUCs as fractions."""

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
    *(low_column(e) for e in ESTIMATORS),
    *(high_column(e) for e in ESTIMATORS),
)
"""Columns of a job's rounds.csv, in order (``fedbalance.engine.fl.run_fedavg`` documents each); the interval columns
``lo_``/``hi_`` last (a rounds.csv written before them lacks them; ``replay.recorded`` fills them)."""


EMPIRICAL_COLUMNS: tuple[str, ...] = ("emp_cos", "emp_cv")
"""rounds.csv's columns of the empirical statistics of Y (``empirical: true``)."""
MONITOR_COLUMNS: tuple[str, ...] = ("weights", "acknowledged", f"cs_{UNIFORM}")
"""rounds.csv's monitor columns besides each estimator's ``est_``/``cs_`` pair."""


def is_monitor_column(column: str) -> bool:
    """A rounds.csv column the monitor fills: ``MONITOR_COLUMNS`` and every estimator's ``est_``/``cs_`` pair and
    interval ends ``lo_``/``hi_``."""
    return column in MONITOR_COLUMNS or column.startswith((est_column(""), cs_column(""), low_column(""), high_column("")))


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
