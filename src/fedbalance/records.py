"""Names the engine writes and the report reads: estimators and the per-round columns (torch-free).

Defined once here; ``fl``, ``jobs``, ``aggregate``, ``tables`` and ``figures`` import them.
"""

from __future__ import annotations

JOB_KEYS: tuple[str, ...] = ("experiment", "dataset", "setting", "loss", "seed")
"""What names one training job (``fedbalance.config.Job``'s fields; metrics.json's "job")."""

ESTIMATORS: tuple[str, ...] = ("paper", "released", "nnls", "simulated", "pooled")
"""Composition estimators recorded per round (``fedbalance.monitor``); a config lists a subset, the first is its default."""

POOLED = "pooled"
"""The estimator that pools ``released``'s per-round estimates through the clients (``monitor.pooled_counts``)."""

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
