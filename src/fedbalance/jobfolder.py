"""A job folder's format, written and read in one place (torch-free).

A job's folder, ``<results>/<experiment>/<dataset>/<setting>/<loss>/seed<k>/`` (``Job.path``), holds
when the job has finished:

* ``rounds.csv``: one row per round with the columns ``records.ROUND_COLUMNS`` (then the ``est_``/``cs_``
  columns of any registered estimator outside ``records.ESTIMATORS``); list-valued cells are JSON
  lists, cells not recorded that round are empty.
* ``metrics.json``: {"job": {experiment, dataset, setting, loss, seed}, "config": the job spec,
  "final": the final model's metrics + {"train_loss"}, "partition": stats of the main partition
  (class_counts, global_counts, gamma, cs, mean_cs, num_samples), "monitor": {"mean_cs": {estimator:
  mean CS over rounds, ..., "uniform": ...}} or null, "acknowledged_round", "device", "path" (the
  training path ``auto`` resolved to; ``config.path`` keeps what was configured), "versions", "threads",
  "deterministic", "precision", "chunking", "wall_time_s", "rounds"}; a twin's adds "reused_from".
  Non-finite floats are written as null. It is written last: a folder with it is a finished job.

While a job runs the folder also holds ``checkpoint.pt``, ``.lock`` and, with ``save_trajectory``,
``trajectory.pt`` (``fedbalance.jobs``). The engine (``jobs``), twins (``reuse``), the tidy frames
(``aggregate``), the history estimators (``replay.recorded``), reference sets and the tests' synthetic
jobs all write and read folders through this module.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fedbalance.atomic import atomic_write, write_json
from fedbalance.records import ESTIMATORS, ROUND_COLUMNS, UNIFORM, cs_column, est_column

METRICS = "metrics.json"
ROUNDS = "rounds.csv"
FILES = (ROUNDS, METRICS)
"""A finished job's files, in the order they are written."""
CHECKPOINT = "checkpoint.pt"
TRAJECTORY = "trajectory.pt"
LOCK = ".lock"


class JobFolderError(ValueError):
    """A job folder's file is missing or unreadable; the message names the file."""


def clean(value: Any) -> Any:
    """JSON-safe copy: arrays, tensors and numpy scalars to Python, tuples to lists, non-finite floats to None."""
    if isinstance(value, Mapping):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        return clean(value.tolist())
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, (list, tuple)):
        return json.dumps(clean(list(value)))
    if isinstance(value, float) and not math.isfinite(value):
        return ""
    return value


def recorded_estimators(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Estimators recorded in ``rows``: the built-in ones in ``ESTIMATORS`` order, then others by name."""
    prefix = cs_column("")
    seen = {k[len(prefix):] for r in rows for k in r if k.startswith(prefix) and r[k] is not None} - {UNIFORM}
    return [e for e in ESTIMATORS if e in seen] + sorted(seen - set(ESTIMATORS))


def rounds_text(rows: Sequence[Mapping[str, Any]]) -> str:
    """rounds.csv's text: ``ROUND_COLUMNS`` (then the columns of any estimator outside ``ESTIMATORS``),
    JSON lists in list cells, empty where not recorded."""
    extra = [c for e in recorded_estimators(rows) if e not in ESTIMATORS for c in (est_column(e), cs_column(e))]
    columns = [*ROUND_COLUMNS, *extra]
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(columns)
    for row in rows:
        w.writerow([_cell(row.get(c)) for c in columns])
    return buf.getvalue()


def monitor_summary(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """metrics.json's ``monitor``: the mean CS over rounds of each recorded estimator and the uniform guess."""
    def mean(col: str) -> float | None:
        vals = [r[col] for r in rows if r.get(col) is not None and math.isfinite(r[col])]
        return float(np.mean(vals)) if vals else None

    if not any(r.get(cs_column(UNIFORM)) is not None for r in rows):
        return None
    out = {m: mean(cs_column(m)) for m in recorded_estimators(rows)}
    out[UNIFORM] = mean(cs_column(UNIFORM))
    return {"mean_cs": out}


def write(folder: str | Path, metrics: Mapping[str, Any], rounds: str | bytes) -> None:
    """Write rounds.csv (text or bytes as given), then metrics.json (``metrics`` as is), each atomically."""
    folder = Path(folder)
    mode = "wb" if isinstance(rounds, bytes) else "w"
    atomic_write(folder / ROUNDS, lambda fh: fh.write(rounds), mode=mode)
    write_json(metrics, folder / METRICS)


def finished(folder: str | Path) -> bool:
    """The folder holds both files of a finished job."""
    return all((Path(folder) / f).is_file() for f in FILES)


def job_folders(results_dir: str | Path) -> list[Path]:
    """Every job folder under ``results_dir`` (those holding a metrics.json), sorted."""
    return sorted(p.parent for p in Path(results_dir).glob(f"*/*/*/*/seed*/{METRICS}"))


def _file(folder: str | Path, name: str) -> Path:
    """``folder/name``; a path already naming that file is taken as it is."""
    path = Path(folder)
    return path if path.name == name else path / name


def read_metrics(folder: str | Path) -> dict[str, Any]:
    """Parse a folder's metrics.json (or that file); JobFolderError naming it if it is missing or corrupt."""
    path = _file(folder, METRICS)
    if not path.is_file():
        raise JobFolderError(f"{path}: missing (the job has not finished?)")
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise JobFolderError(f"{path}: not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise JobFolderError(f"{path}: the top level must be an object")
    return data


def read_rounds(folder: str | Path) -> pd.DataFrame:
    """Parse a folder's rounds.csv (or that file) as a frame; JobFolderError naming it if it is missing, corrupt
    or lacks ``round``."""
    path = _file(folder, ROUNDS)
    if not path.is_file():
        raise JobFolderError(f"{path}: missing (the job has not finished?)")
    try:
        df = pd.read_csv(path)
    except (OSError, UnicodeDecodeError, ValueError, pd.errors.ParserError) as exc:
        raise JobFolderError(f"{path}: not a readable CSV: {exc}") from exc
    if "round" not in df.columns:
        raise JobFolderError(f"{path}: no 'round' column (columns: {list(df.columns)})")
    return df


def round_records(folder: str | Path) -> list[dict[str, Any]]:
    """A folder's rounds.csv as it was written: one dict per round, ``round`` an int, JSON list cells as lists,
    numbers as floats, empty cells as None."""
    path = _file(folder, ROUNDS)
    try:
        with open(path, newline="") as fh:
            raw = list(csv.DictReader(fh))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise JobFolderError(f"{path}: not a readable CSV: {exc}") from exc
    out = []
    for rec in raw:
        if "round" not in rec:
            raise JobFolderError(f"{path}: no 'round' column")
        out.append({k: _parse(k, v, path) for k, v in rec.items()})
    return out


def _parse(column: str, cell: str | None, path: Path) -> Any:
    if cell is None or cell == "":
        return None
    try:
        if column == "round":
            return int(cell)
        if cell.startswith("["):
            return json.loads(cell)
        if cell in ("True", "False"):
            return cell == "True"
        return float(cell)
    except ValueError as exc:
        raise JobFolderError(f"{path}: column {column!r}: bad cell {cell!r}") from exc
