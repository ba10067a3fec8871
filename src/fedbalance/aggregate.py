"""Collect the engine's per-job outputs into two tidy frames (one row per job, one row per round).

Each job folder ``<results>/<experiment>/<dataset>/<setting>/<loss>/seed<k>/`` holds
``metrics.json`` and ``rounds.csv``. :func:`collect` reads them; :func:`write_tidy` saves the
frames as CSV and :func:`read_tidy` reads them back.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Iterable

import pandas as pd

from fedbalance.config import Job
from fedbalance.records import ESTIMATORS as RECORDED
from fedbalance.records import ROUND_COLUMNS as RECORD_COLUMNS
from fedbalance.records import UNIFORM

JOB_COLUMNS = ["experiment", "dataset", "setting", "loss", "seed"]
FINAL_METRICS = ["acc", "acc_minority", "acc_majority", "auc_micro", "auc_macro", "auc_hard", "train_loss"]
ESTIMATORS = [*RECORDED, UNIFORM]
FINAL_COLUMNS = (
    JOB_COLUMNS
    + FINAL_METRICS
    + ["mean_cs", "gamma_realised"]
    + [f"mon_cs_{e}" for e in ESTIMATORS]
    + ["acknowledged_round", "wall_time_s"]
)
ROUND_COLUMNS = list(RECORD_COLUMNS)
FINAL_CSV = "final.csv"
ROUNDS_CSV = "rounds.csv"


class AggregateError(ValueError):
    """A result file is missing or unreadable; the message names the file."""


def _number(x: Any) -> float:
    return float("nan") if x is None else float(x)


def read_metrics(path: Path) -> dict[str, Any]:
    """Parse one ``metrics.json``; AggregateError naming the file if it is missing or corrupt."""
    if not path.is_file():
        raise AggregateError(f"{path}: missing (the job has not finished?)")
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise AggregateError(f"{path}: not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise AggregateError(f"{path}: the top level must be an object")
    return data


def final_row(data: dict[str, Any], path: Path) -> dict[str, Any]:
    """The per-job row of one parsed ``metrics.json`` (``path`` names the file in errors)."""
    try:
        job, final, part = data["job"], data["final"], data["partition"]
        row: dict[str, Any] = {k: job[k] for k in JOB_COLUMNS}
        row["seed"] = int(row["seed"])
        row.update({k: _number(final.get(k)) for k in FINAL_METRICS})
        row["mean_cs"] = _number(part.get("mean_cs"))
        row["gamma_realised"] = _number(part.get("gamma"))
    except (KeyError, TypeError, ValueError) as exc:
        raise AggregateError(f"{path}: missing or bad key {exc}") from exc
    mon = (data.get("monitor") or {}).get("mean_cs") or {}
    row.update({f"mon_cs_{e}": _number(mon.get(e)) for e in ESTIMATORS})
    row["acknowledged_round"] = _number(data.get("acknowledged_round"))
    row["wall_time_s"] = _number(data.get("wall_time_s"))
    return row


def read_rounds(path: Path) -> pd.DataFrame:
    """Parse one ``rounds.csv``; AggregateError naming the file if it is missing, corrupt or lacks ``round``."""
    if not path.is_file():
        raise AggregateError(f"{path}: missing (the job has not finished?)")
    try:
        df = pd.read_csv(path)
    except (OSError, ValueError, pd.errors.ParserError) as exc:
        raise AggregateError(f"{path}: not a readable CSV: {exc}") from exc
    if "round" not in df.columns:
        raise AggregateError(f"{path}: no 'round' column (columns: {list(df.columns)})")
    return df


def job_dirs(results_dir: str | Path) -> list[Path]:
    """Every job folder under ``results_dir`` (those holding a ``metrics.json``), sorted."""
    return sorted(p.parent for p in Path(results_dir).glob("*/*/*/*/seed*/metrics.json"))


def collect(results_dir: str | Path, jobs: Iterable[Job] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(final, rounds) frames of the given jobs, or of every job folder found under ``results_dir``."""
    root = Path(results_dir)
    dirs = job_dirs(root) if jobs is None else [root / j.path for j in jobs]
    finals, rounds = [], []
    for d in dirs:
        row = final_row(read_metrics(d / "metrics.json"), d / "metrics.json")
        finals.append(row)
        r = read_rounds(d / "rounds.csv")
        for k in reversed(JOB_COLUMNS):
            r.insert(0, k, row[k])
        rounds.append(r)
    final = pd.DataFrame(finals, columns=FINAL_COLUMNS)
    final["seed"] = final["seed"].astype("int64")
    cols = JOB_COLUMNS + ROUND_COLUMNS
    rnd = pd.concat(rounds, ignore_index=True) if rounds else pd.DataFrame(columns=cols)
    extra = [c for c in rnd.columns if c not in cols]
    rnd = rnd.reindex(columns=cols + extra)
    return final, rnd


def write_tidy(final: pd.DataFrame, rounds: pd.DataFrame, out_dir: str | Path) -> list[Path]:
    """Write ``final.csv`` and ``rounds.csv`` into ``out_dir``; return their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / FINAL_CSV, out / ROUNDS_CSV]
    final.to_csv(paths[0], index=False)
    rounds.to_csv(paths[1], index=False)
    return paths


def read_tidy(out_dir: str | Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Read back the frames written by :func:`write_tidy` (list cells stay JSON strings)."""
    out = Path(out_dir)
    frames = []
    for name in (FINAL_CSV, ROUNDS_CSV):
        path = out / name
        if not path.is_file():
            raise AggregateError(f"{path}: missing")
        frames.append(pd.read_csv(path, dtype={"setting": str, "experiment": str, "dataset": str, "loss": str}))
    return frames[0], frames[1]


def parse_list(cell: Any) -> list[float] | None:
    """A JSON list cell of ``rounds.csv`` as a list of floats; None when empty."""
    if cell is None or (isinstance(cell, float) and math.isnan(cell)) or cell == "":
        return None
    return [float(x) for x in json.loads(cell)]
