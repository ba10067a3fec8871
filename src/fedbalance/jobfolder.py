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
  "deterministic", "precision", "chunking", "wall_time_s", "rounds"} and, for a job that ran a plug-in, "plugins" (each
  one's target, package, version and origin, as ``config.plugins`` is keyed); a twin's adds "reused_from", a derived job's
  "derived_from", a branched job's "branched_from" (the folder and round of the kept state it started from); a
  source is named by its job path, relative to the results folder (``folder_job``), never by a machine's path.
  Non-finite floats are written as null. It is written last: a folder with it is a finished job.

Every read checks the folder as a whole (``check``): metrics.json holds ``job``, ``config``, ``final`` and
``rounds``; ``job`` names the folder it lies in (when the folder is named ``seed<k>``: a job copied under
another seed or setting is refused, not counted twice); rounds.csv has a ``round`` column of increasing
integers and exactly ``rounds`` rows (a truncated file is refused, not read as a shorter run).

A job stopped by a plug-in that broke its contract (a non-finite loss or estimate, ``fedbalance.plugins.PluginFailure``)
holds ``failed.json`` (``FAILED``: the reason, naming the plug-in and round) and no metrics.json: it never counts as
finished, so no table shows it; the next run of the job removes it.

While a job runs the folder also holds ``checkpoint.pt``, ``.lock`` and, with ``save_trajectory``,
``trajectory.pt`` (``fedbalance.jobs``); a job that others branch from keeps ``branch-rNNN.pt`` (``BRANCH``) after it ends. The engine (``jobs``), twins (``reuse``), the tidy frames
(``aggregate``), the history estimators (``replay.recorded``), reference sets and the tests' synthetic
jobs all write and read folders through this module.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedbalance.atomic import atomic_write, write_json
from fedbalance.seal import refuse_inside
from fedbalance.records import ESTIMATORS, JOB_KEYS, ROUND_COLUMNS, UNIFORM, Job, cs_column, est_column

if TYPE_CHECKING:  # numpy and pandas are imported where used: the workflow plans with this module alone
    import pandas as pd

METRICS = "metrics.json"
ROUNDS = "rounds.csv"
FILES = (ROUNDS, METRICS)
"""A finished job's files, in the order they are written."""
CHECKPOINT = "checkpoint.pt"
TRAJECTORY = "trajectory.pt"
LOCK = ".lock"
FAILED = "failed.json"
"""A job stopped by a plug-in's broken contract: {"job", "reason", "time"} (``write_failed``); never beside metrics.json."""
BRANCH = re.compile(r"branch-r(\d{3,})\.pt")
"""A job's round state kept after a round for jobs that branch from it (``fedbalance.jobs``: ``keep_rounds``)."""


def branch_file(out: str | Path, after_round: int) -> Path:
    """The file of ``out``'s round state after its first ``after_round`` rounds (``BRANCH``)."""
    return Path(out) / f"branch-r{after_round:03d}.pt"


def kept_branch(source: str | Path | None, after_round: int | None) -> Path | None:
    """``source`` when it kept its round state after ``after_round`` rounds (``branch_file``), else None: a job
    branches from it or, when it kept none (trained before), trains from round 0."""
    if source is None or after_round is None:
        return None
    return Path(source) if branch_file(source, after_round).is_file() else None


def branch_files(out: str | Path) -> dict[int, Path]:
    """``out``'s kept round states by the number of rounds done (``BRANCH``)."""
    found = ((BRANCH.fullmatch(p.name), p) for p in Path(out).glob("branch-r*.pt"))
    return {int(m.group(1)): p for m, p in found if m}
PROVENANCE = "provenance.json"
"""A reference job's record of how it was made (``scripts/reference_jobs.py``): beside the two files, written last."""
PENDING = "provenance.pending.json"
"""What the runner knew when it started a job (commit, command, host); ``PROVENANCE`` replaces it when the job ends."""
REQUIRED = {"job": dict, "config": dict, "final": dict, "rounds": int}
"""The keys every finished job's metrics.json holds, with their types (``check``)."""
SEED_FOLDER = re.compile(r"seed\d+")
"""The name of a job folder (``Job.path``'s last part)."""


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
    import numpy as np

    def mean(col: str) -> float | None:
        vals = [r[col] for r in rows if r.get(col) is not None and math.isfinite(r[col])]
        return float(np.mean(vals)) if vals else None

    if not any(r.get(cs_column(UNIFORM)) is not None for r in rows):
        return None
    out = {m: mean(cs_column(m)) for m in recorded_estimators(rows)}
    out[UNIFORM] = mean(cs_column(UNIFORM))
    return {"mean_cs": out}


def write(folder: str | Path, metrics: Mapping[str, Any], rounds: str | bytes) -> None:
    """Write rounds.csv (text or bytes as given), then metrics.json (``metrics`` as is), each atomically; a folder in a
    reference set is refused first (``seal.refuse_inside``: only ``collect`` writes there)."""
    folder = Path(folder)
    refuse_inside(folder, "job folder")
    mode = "wb" if isinstance(rounds, bytes) else "w"
    atomic_write(folder / ROUNDS, lambda fh: fh.write(rounds), mode=mode)
    write_json(metrics, folder / METRICS)


def write_failed(folder: str | Path, job: str, reason: str) -> Path:
    """Mark ``folder``'s job failed (``FAILED``): the job path, the reason (one line) and the UTC time, atomically."""
    from datetime import datetime, timezone

    path = Path(folder) / FAILED
    write_json({"job": job, "reason": reason, "time": datetime.now(timezone.utc).isoformat(timespec="seconds")}, path)
    return path


def finished(folder: str | Path) -> bool:
    """The folder holds both files of a finished job."""
    return all((Path(folder) / f).is_file() for f in FILES)


def job_folders(results_dir: str | Path) -> list[Path]:
    """Every job folder under ``results_dir`` (``<e>/<d>/<s>/<l>/seed<k>`` holding a metrics.json), sorted.

    Only folders named ``seed<k>`` count (a copy such as ``seed1.bak`` is not a job)."""
    found = Path(results_dir).glob(f"*/*/*/*/seed*/{METRICS}")
    return sorted(p.parent for p in found if SEED_FOLDER.fullmatch(p.parent.name))


def _file(folder: str | Path, name: str) -> Path:
    """``folder/name``; a path already naming that file is taken as it is."""
    path = Path(folder)
    return path if path.name == name else path / name


def _load_metrics(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise JobFolderError(f"{path}: missing (the job has not finished?)")
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise JobFolderError(f"{path}: not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise JobFolderError(f"{path}: the top level must be an object")
    return data


def folder_job(folder: str | Path) -> str | None:
    """The job path a folder's location names (its last parts up to five), or None for a folder not named seed<k>."""
    parts = Path(folder).absolute().parts[1:]
    return "/".join(parts[-5:]) if parts and SEED_FOLDER.fullmatch(parts[-1]) else None


def check_metrics(data: Mapping[str, Any], path: Path) -> None:
    """JobFolderError naming ``path`` unless metrics.json holds ``REQUIRED`` and its ``job`` is the folder's."""
    for key, kind in REQUIRED.items():
        value = data.get(key)
        if not isinstance(value, kind) or isinstance(value, bool) or (kind is int and value < 0):
            raise JobFolderError(f"{path}: missing or bad key {key!r} (a finished job's metrics.json holds "
                                 f"{', '.join(REQUIRED)}): not written by a finished job, or edited")
    job = data["job"]
    try:
        name = Job(*(job[k] for k in JOB_KEYS[:4]), int(job["seed"])).path
    except (KeyError, TypeError, ValueError) as exc:
        raise JobFolderError(f"{path}: missing or bad key {exc} in 'job'") from exc
    where = folder_job(path.parent)
    if where is not None and not name.endswith("/" + where) and name != where:
        raise JobFolderError(f"{path}: its job is {name} but it lies in {where}: a job folder copied or moved "
                             "(each job lies in <experiment>/<dataset>/<setting>/<loss>/seed<k>, as its 'job' says)")


def _round_rows(path: Path) -> list[dict[str, str]]:
    """rounds.csv's rows as text, the ``round`` cells checked: present, integers, increasing."""
    try:
        with open(path, newline="") as fh:
            reader = csv.DictReader(fh)
            rows = list(reader)
            columns = reader.fieldnames or []
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise JobFolderError(f"{path}: not a readable CSV: {exc}") from exc
    if "round" not in columns:
        raise JobFolderError(f"{path}: no 'round' column (columns: {list(columns)})")
    rounds = [r.get("round") for r in rows]
    try:
        numbers = [int(r) for r in rounds]  # type: ignore[arg-type]
    except (TypeError, ValueError):
        bad = next(r for r in rounds if r is None or not r.strip().lstrip("-").isdigit())
        raise JobFolderError(f"{path}: column 'round': bad cell {bad!r}") from None
    if any(b <= a for a, b in zip(numbers, numbers[1:])):
        raise JobFolderError(f"{path}: the rounds are not increasing ({numbers[:8]}...): rows repeated or out of order")
    return rows


FINAL_FROM_LAST_ROUND = ("train_loss", "acc", "acc_minority", "acc_majority", "auc_micro", "auc_hard")
"""metrics.json's ``final`` values that rounds.csv's last row records too (the final model is the last round's)."""


def _same(recorded: Any, cell: str | None) -> bool:
    """A value of metrics.json (None: not finite) and rounds.csv's cell of it (empty: not recorded) agree."""
    if recorded is None or cell in (None, ""):
        return recorded is None and cell in (None, "")
    try:
        return math.isclose(float(recorded), float(cell), rel_tol=1e-12, abs_tol=1e-15)
    except (TypeError, ValueError):
        return False


def check_recorded_twice(data: Mapping[str, Any], rows: Sequence[Mapping[str, str]], path: Path) -> None:
    """JobFolderError naming the key unless what metrics.json and rounds.csv both record agrees: ``final`` and the last
    round's row (``FINAL_FROM_LAST_ROUND``), and each estimator's ``monitor.mean_cs`` and the mean of its column."""
    final = data["final"]
    last = rows[-1] if rows else {}
    for key in FINAL_FROM_LAST_ROUND:
        if key in final and key in last and last[key] != "" and not _same(final[key], last[key]):
            raise JobFolderError(f"{path}: final.{key} is {final[key]} but the last row of {ROUNDS} records {last[key]}: "
                                 "one of the two files was edited or belongs to another job")
    mean_cs = (data.get("monitor") or {}).get("mean_cs") or {}
    for name, recorded in mean_cs.items():
        column = cs_column(name)
        if not rows or column not in rows[0]:
            continue
        values = [float(r[column]) for r in rows if r.get(column) not in (None, "")]
        values = [v for v in values if math.isfinite(v)]
        mean = math.fsum(values) / len(values) if values else None
        if (recorded is None) != (mean is None) or (mean is not None and not math.isclose(recorded, mean, rel_tol=1e-9)):
            raise JobFolderError(f"{path}: monitor.mean_cs.{name} is {recorded} but {ROUNDS}'s {column} averages {mean}: "
                                 "one of the two files was edited or belongs to another job")


def check(folder: str | Path) -> dict[str, Any]:
    """A finished job folder's metrics.json, after checking the folder as a whole (module docstring): JobFolderError
    naming the file otherwise."""
    metrics_path = _file(folder, METRICS)
    data = _load_metrics(metrics_path)
    check_metrics(data, metrics_path)
    rounds_path = metrics_path.parent / ROUNDS
    if not rounds_path.is_file():
        raise JobFolderError(f"{rounds_path}: missing (the job has not finished?)")
    rows = _round_rows(rounds_path)
    if len(rows) != data["rounds"]:
        raise JobFolderError(f"{rounds_path}: {len(rows)} rows, but {metrics_path.name} says the job ran {data['rounds']} "
                             "rounds: the file is truncated or not this job's")
    check_recorded_twice(data, rows, metrics_path)
    return data


def read_metrics(folder: str | Path) -> dict[str, Any]:
    """Parse a folder's metrics.json (or that file), the folder checked as a whole (``check``); JobFolderError
    naming the file if it is missing, corrupt or does not agree with its folder and rounds.csv."""
    return check(folder)


def read_rounds(folder: str | Path) -> pd.DataFrame:
    """Parse a folder's rounds.csv (or that file) as a frame, the folder checked first (``check``); JobFolderError
    naming the file otherwise."""
    import pandas as pd

    path = _file(folder, ROUNDS)
    check(path.parent)
    try:
        df = pd.read_csv(path)
    except (OSError, UnicodeDecodeError, ValueError, pd.errors.ParserError) as exc:
        raise JobFolderError(f"{path}: not a readable CSV: {exc}") from exc
    return df


def round_records(folder: str | Path) -> list[dict[str, Any]]:
    """A folder's rounds.csv as it was written: one dict per round, ``round`` an int, JSON list cells as lists,
    numbers as floats, empty cells as None; the folder checked first (``check``)."""
    path = _file(folder, ROUNDS)
    check(path.parent)
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
