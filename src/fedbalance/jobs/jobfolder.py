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
* ``provenance.json`` (``fedbalance.jobs.provenance``), beside them when the workflow made the job: how it was made.

Every read, and ``collect``, checks the folder as a whole (``check``, the one check of a job's files): metrics.json
holds ``job``, ``config``, ``final`` (every ``FINAL_KEYS``) and ``rounds``; ``job`` names the folder it lies in (when
the folder is named ``seed<k>``: a job copied under another seed or setting is refused, not counted twice); every
number of both files is finite and possible (``check_numbers``, ``ROUND_CELLS``); rounds.csv is read whole (a torn
last line is refused), has a ``round`` column of increasing integers and exactly ``rounds`` rows (a truncated file is
refused, not read as a shorter run); what both files record agrees (``check_recorded_twice``).

A job stopped by a plug-in that broke its contract (a non-finite loss or estimate, ``fedbalance.common.plugins.PluginFailure``)
holds ``failed.json`` (``FAILED``: the reason, naming the plug-in and round) and no metrics.json: it never counts as
finished, so no table shows it; the next run of the job removes it.

While a job runs the folder also holds ``checkpoint.pt``, ``.lock`` and, with ``save_trajectory``,
``trajectory.pt`` (``fedbalance.jobs.run``); a job that others branch from keeps ``branch-rNNN.pt`` (``BRANCH``) after it ends. The engine (``jobs``), twins (``reuse``), the tidy frames
(``aggregate``), the history estimators (``replay.recorded``), reference sets and the tests' synthetic
jobs all write and read folders through this module.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import re
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedbalance.atomic import atomic_write, write_json
from fedbalance.common.jobspec import JOB_DEFAULTS
from fedbalance.jobs.provenance import PENDING, PROVENANCE  # noqa: F401  (re-exported: a job folder's record)
from fedbalance.jobs.seal import refuse_inside
from fedbalance.common.records import (
    ESTIMATORS, JOB_KEYS, ROUND_COLUMNS, UNIFORM, Job, cs_column, est_column, high_column, low_column,
)

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
CHECKED_KEPT = 65536
"""How many folders that passed ``check`` it remembers (a path and two digests each; the least recently read
forgotten first)."""
_CHECKED: OrderedDict[tuple[str, bytes, bytes], None] = OrderedDict()
_CHECKED_LOCK = threading.Lock()
BRANCH = re.compile(r"branch-r(\d{3,})\.pt")
"""A job's round state kept after a round for jobs that branch from it (``fedbalance.jobs.run``: ``keep_rounds``)."""


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


class _NotFinite(ValueError):
    """A number in a job's file that is not finite (``NaN``, ``Infinity`` or one too large for a float)."""


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NotFinite(text)
    return value


def _no_constant(text: str) -> float:
    raise _NotFinite(text)


def strict_json(text: str) -> Any:
    """``json.loads`` refusing what is not finite (``NaN``, ``Infinity``, ``1e999``): a job writes such a value as
    null (``clean``), so one in its files was written by hand; ``_NotFinite`` naming it."""
    return json.loads(text, parse_constant=_no_constant, parse_float=_finite_float)


NOT_FINITE = "a number that is not finite (a job writes such a value as null, or an empty cell): edited or corrupt"


def _read_file(path: Path, unreadable: str) -> bytes | None:
    """``path``'s bytes, or None when it is not a file; JobFolderError naming it (``unreadable``: what it is then
    called) when it cannot be read."""
    if not path.is_file():
        return None
    try:
        return path.read_bytes()
    except OSError as exc:
        raise JobFolderError(f"{path}: {unreadable}: {exc}") from exc


def _load_metrics(path: Path, raw: bytes | None) -> dict[str, Any]:
    """metrics.json's object from its bytes ``raw`` (None: the file is missing)."""
    if raw is None:
        raise JobFolderError(f"{path}: missing (the job has not finished?)")
    try:
        data = strict_json(raw.decode("utf-8"))
    except _NotFinite as exc:
        raise JobFolderError(f"{path}: holds {exc}, {NOT_FINITE}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise JobFolderError(f"{path}: not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise JobFolderError(f"{path}: the top level must be an object")
    return data


def folder_job(folder: str | Path) -> str | None:
    """The job path a folder's location names (its last parts up to five), or None for a folder not named seed<k>."""
    parts = Path(folder).absolute().parts[1:]
    return "/".join(parts[-5:]) if parts and SEED_FOLDER.fullmatch(parts[-1]) else None


FINAL_KEYS = ("train_loss", "acc", "acc_minority", "acc_majority", "auc_micro", "auc_macro", "auc_hard", "per_class_acc")
"""The keys every finished job's ``final`` holds: the final model's test metrics (``metrics.evaluate``) and its
training loss. A job without one would silently leave its cells (``check_numbers``)."""
ROUNDING = 1e-9
"""How far past its bounds a computed value may lie by floating-point rounding (a CS of 1.0000000000000002)."""
UNIT = (0.0, 1.0)
"""Accuracies and AUCs: fractions."""
COSINE = (-1.0, 1.0)
"""Cosine similarities (CS): of two count vectors, in [0, 1]; an estimator may return negative counts."""
COUNT = (0.0, math.inf)
"""Counts, seconds and other quantities that cannot be negative."""
RATIO = (1.0, math.inf)
"""An imbalance ratio Γ (the largest class over the smallest)."""
ANY = (-math.inf, math.inf)
"""Any finite number (a loss, an estimate, a weight)."""


def _bounds_text(bounds: tuple[float, float]) -> str:
    low, high = bounds
    return f">= {low:g}" if high == math.inf else f"in [{low:g}, {high:g}]"


def _number(value: Any, where: str, path: Path, bounds: tuple[float, float], *, null: bool = True,
            integer: bool = False) -> None:
    """JobFolderError naming ``where`` unless ``value`` is a finite number within ``bounds`` (None: when ``null``)."""
    if value is None:
        if null:
            return
        raise JobFolderError(f"{path}: {where} is null; a finished job records a number there: edited or corrupt")
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds):
        raise JobFolderError(f"{path}: {where} is {value!r}, not {'an integer' if integer else 'a number'}: "
                             "edited or corrupt")
    if not math.isfinite(value):
        raise JobFolderError(f"{path}: {where} is {value}, {NOT_FINITE}")
    low, high = bounds
    if not low - ROUNDING <= value <= high + ROUNDING:
        raise JobFolderError(f"{path}: {where} is {value}, but it must be {_bounds_text(bounds)}: an impossible value, "
                             "edited or corrupt")


def _numbers(values: Any, where: str, path: Path, bounds: tuple[float, float], *, null: bool = True,
             integer: bool = False, depth: int = 1) -> None:
    """``_number`` on each element of the list ``values`` (lists of lists with ``depth`` 2)."""
    if not isinstance(values, list):
        raise JobFolderError(f"{path}: {where} is {values!r}, not a list: edited or corrupt")
    for i, v in enumerate(values):
        if depth > 1:
            _numbers(v, f"{where}[{i}]", path, bounds, null=null, integer=integer, depth=depth - 1)
        else:
            _number(v, f"{where}[{i}]", path, bounds, null=null, integer=integer)


def check_numbers(data: Mapping[str, Any], path: Path) -> None:
    """JobFolderError naming the key unless metrics.json's numbers are possible: ``final`` holds every ``FINAL_KEYS``
    (accuracies and AUCs in [0, 1]; ``acc`` and ``auc_hard`` always recorded), the partition's counts are
    non-negative integers and its CS in [-1, 1], Γ at least 1, each ``monitor.mean_cs`` in [-1, 1], the acknowledged
    round and the wall time non-negative."""
    final = data["final"]
    missing = [k for k in FINAL_KEYS if k not in final]
    if missing:
        raise JobFolderError(f"{path}: final has no {', '.join(missing)} (a finished job's final holds "
                             f"{', '.join(FINAL_KEYS)}): not written by a finished job, or edited")
    _number(final["train_loss"], "final.train_loss", path, ANY)
    for key in ("acc", "auc_hard"):
        _number(final[key], f"final.{key}", path, UNIT, null=False)
    for key in ("acc_minority", "acc_majority", "auc_micro", "auc_macro"):
        _number(final[key], f"final.{key}", path, UNIT)
    _numbers(final["per_class_acc"], "final.per_class_acc", path, UNIT)
    if not final["per_class_acc"]:
        raise JobFolderError(f"{path}: final.per_class_acc is empty; a finished job records each class's accuracy")
    part = data.get("partition")
    if part is not None:
        if not isinstance(part, dict):
            raise JobFolderError(f"{path}: partition is {part!r}, not an object: edited or corrupt")
        for key, depth in (("class_counts", 2), ("global_counts", 1)):
            if key in part:
                _numbers(part[key], f"partition.{key}", path, COUNT, null=False, integer=True, depth=depth)
        if "num_samples" in part:
            many = isinstance(part["num_samples"], list)
            (_numbers if many else _number)(part["num_samples"], "partition.num_samples", path, COUNT, null=False,
                                            integer=True)
        if "cs" in part:
            _numbers(part["cs"], "partition.cs", path, COSINE)
        _number(part.get("mean_cs"), "partition.mean_cs", path, COSINE)
        _number(part.get("gamma"), "partition.gamma", path, RATIO)
    mean_cs = (data.get("monitor") or {}).get("mean_cs") or {}
    if not isinstance(mean_cs, dict):
        raise JobFolderError(f"{path}: monitor.mean_cs is {mean_cs!r}, not an object: edited or corrupt")
    for name, value in mean_cs.items():
        _number(value, f"monitor.mean_cs.{name}", path, COSINE)
    _number(data.get("acknowledged_round"), "acknowledged_round", path, COUNT, integer=True)
    _number(data.get("wall_time_s"), "wall_time_s", path, COUNT)


def check_metrics(data: Mapping[str, Any], path: Path) -> None:
    """JobFolderError naming ``path`` unless metrics.json holds ``REQUIRED``, its ``job`` is the folder's and its
    numbers are possible (``check_numbers``)."""
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
    check_numbers(data, path)


FINAL_FROM_LAST_ROUND = ("train_loss", "acc", "acc_minority", "acc_majority", "auc_micro", "auc_hard")
"""metrics.json's ``final`` values that rounds.csv's last row records too (the final model is the last round's)."""
ROUND_CELLS: dict[str, tuple[str, tuple[float, float]]] = {
    "train_loss": ("number", ANY), "seconds": ("number", COUNT), "true_composition": ("list", COUNT),
    "weights": ("list", ANY), "acknowledged": ("bool", ANY), "emp_cos": ("number", COSINE), "emp_cv": ("number", COUNT),
    **{k: ("number", UNIT) for k in FINAL_FROM_LAST_ROUND if k != "train_loss"},
}
"""What a rounds.csv cell of each column holds when it is not empty (besides ``round`` and the estimators' ``est_``
lists and ``cs_`` CSs): a number, a JSON list of numbers (null where not finite) or True/False, within bounds."""


def _cell_kind(column: str) -> tuple[str, tuple[float, float]] | None:
    if column in ROUND_CELLS:
        return ROUND_CELLS[column]
    if column.startswith((est_column(""), low_column(""), high_column(""))):
        return "list", ANY
    if column.startswith(cs_column("")):
        return "number", COSINE
    return None


def _check_cell(cell: str, column: str, where: str, path: Path) -> None:
    """JobFolderError naming the line and column unless a non-empty cell holds what its column does (``ROUND_CELLS``)."""
    kind = _cell_kind(column)
    if kind is None:
        return
    what, bounds = kind
    at = f"{where}, column {column!r}"
    if what == "bool":
        if cell not in ("True", "False"):
            raise JobFolderError(f"{path}: {at}: {cell!r} is not True or False: edited or corrupt")
        return
    try:
        value = strict_json(cell) if what == "list" else _finite_float(cell)
    except _NotFinite:
        raise JobFolderError(f"{path}: {at}: {cell!r} is {NOT_FINITE}") from None
    except ValueError:
        raise JobFolderError(f"{path}: {at}: {cell!r} is not {'a JSON list' if what == 'list' else 'a number'}: "
                             "edited or corrupt") from None
    if what == "list":
        _numbers(value, at, path, bounds)
    else:
        _number(value, at, path, bounds)


def _round_rows(path: Path, raw: bytes) -> list[dict[str, str]]:
    """rounds.csv's rows as text from its bytes ``raw``, read whole (the csv module, strict): every line ends with a
    line end and has the header's number of cells (a torn or cut last line is refused), the ``round`` cells increasing
    integers, the columns ``FINAL_FROM_LAST_ROUND`` present and each cell what its column holds (``ROUND_CELLS``)."""
    try:
        text = raw.decode("utf-8")
        if text and not text.endswith("\n"):
            raise JobFolderError(f"{path}: its last line has no line end: the file is torn or cut (a job writes whole "
                                 "lines)")
        lines = list(csv.reader(io.StringIO(text, newline=""), strict=True))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise JobFolderError(f"{path}: not a readable CSV: {exc}") from exc
    if not lines:
        raise JobFolderError(f"{path}: empty (no header): the file is truncated")
    columns = lines[0]
    if "round" not in columns:
        raise JobFolderError(f"{path}: no 'round' column (columns: {list(columns)})")
    absent = [c for c in FINAL_FROM_LAST_ROUND if c not in columns]
    if absent or len(set(columns)) != len(columns):
        what = f"no {', '.join(absent)} column" if absent else "a column named twice"
        raise JobFolderError(f"{path}: {what} (columns: {list(columns)}): not written by a job, or edited")
    rows = []
    for number, cells in enumerate(lines[1:], start=2):
        if len(cells) != len(columns):
            raise JobFolderError(f"{path}, line {number}: {len(cells)} cells, the header {len(columns)}: the line is "
                                 "torn, cut or edited")
        rows.append(dict(zip(columns, cells)))
    rounds = [r["round"] for r in rows]
    numbers = []
    for cell in rounds:
        try:
            numbers.append(int(cell))
        except ValueError:
            raise JobFolderError(f"{path}: column 'round': bad cell {cell!r}") from None
    if any(b <= a for a, b in zip(numbers, numbers[1:])) or (numbers and numbers[0] < 0):
        raise JobFolderError(f"{path}: the rounds are not increasing ({numbers[:8]}...): rows repeated or out of order")
    for number, row in enumerate(rows, start=2):
        for column, cell in row.items():
            if cell != "":
                _check_cell(cell, column, f"line {number}", path)
    return rows


def _same(recorded: Any, cell: str | None) -> bool:
    """A value of metrics.json (None: not finite) and rounds.csv's cell of it (empty: not recorded) agree."""
    if recorded is None or cell in (None, ""):
        return recorded is None and cell in (None, "")
    try:
        return math.isclose(float(recorded), float(cell), rel_tol=1e-12, abs_tol=1e-15)
    except (TypeError, ValueError):
        return False


def _shown(cell: str) -> str:
    return cell if cell != "" else "nothing (an empty cell)"


def _class_means(data: Mapping[str, Any], path: Path) -> None:
    """JobFolderError unless ``final``'s Ac.M and majority accuracy are the means of ``final.per_class_acc`` over the
    job's minority classes (``minority_classes`` of its config) and over the others (``metrics.evaluate``)."""
    final = data["final"]
    per_class = final["per_class_acc"]
    minority = data["config"].get("minority_classes", JOB_DEFAULTS["minority_classes"])
    if not isinstance(minority, list) or any(isinstance(q, bool) or not isinstance(q, int) or not 0 <= q < len(per_class)
                                             for q in minority):
        raise JobFolderError(f"{path}: config.minority_classes {minority!r} are not classes of final.per_class_acc "
                             f"({len(per_class)} classes): edited or corrupt")
    groups = (("acc_minority", sorted(set(minority))),
              ("acc_majority", [q for q in range(len(per_class)) if q not in set(minority)]))
    for key, classes in groups:
        values = [per_class[q] for q in classes if per_class[q] is not None]
        mean = math.fsum(values) / len(values) if values else None
        recorded = final[key]
        if (recorded is None) != (mean is None) or (mean is not None and not math.isclose(recorded, mean, rel_tol=1e-9,
                                                                                           abs_tol=1e-12)):
            raise JobFolderError(f"{path}: final.{key} is {recorded} but final.per_class_acc averages {mean} over "
                                 f"classes {classes}: one of the two was edited")


def check_recorded_twice(data: Mapping[str, Any], rows: Sequence[Mapping[str, str]], path: Path) -> None:
    """JobFolderError naming the key unless what metrics.json and rounds.csv both record agrees: ``final`` and the last
    round's row (``FINAL_FROM_LAST_ROUND``: every one, an empty cell only where ``final`` records null), Ac.M and the
    majority accuracy and ``final.per_class_acc``, and each estimator's ``monitor.mean_cs`` and the mean of its column."""
    final = data["final"]
    last = rows[-1] if rows else None
    for key in FINAL_FROM_LAST_ROUND if last is not None else ():
        if key in final and key in last and not _same(final[key], last[key]):
            raise JobFolderError(f"{path}: final.{key} is {final[key]} but the last row of {ROUNDS} records "
                                 f"{_shown(last[key])}: one of the two files was edited or belongs to another job")
    if "per_class_acc" in final:
        _class_means(data, path)
    mean_cs = (data.get("monitor") or {}).get("mean_cs") or {}
    for name, recorded in mean_cs.items():
        column = cs_column(name)
        if not rows or column not in rows[0]:
            continue
        values = [float(r[column]) for r in rows if r.get(column) not in (None, "")]
        mean = math.fsum(values) / len(values) if values else None
        if (recorded is None) != (mean is None) or (mean is not None and not math.isclose(recorded, mean, rel_tol=1e-9)):
            raise JobFolderError(f"{path}: monitor.mean_cs.{name} is {recorded} but {ROUNDS}'s {column} averages {mean}: "
                                 "one of the two files was edited or belongs to another job")


def check(folder: str | Path) -> dict[str, Any]:
    """A finished job folder's metrics.json, after checking the folder as a whole (module docstring): JobFolderError
    naming the file otherwise. The one check of a job's files: every read (``read_metrics``, ``read_rounds``,
    ``round_records``) and ``collect`` call it. A folder that passed is remembered by its path and the digests of the
    two files' bytes (``CHECKED_KEPT`` folders): the same bytes there again are not checked twice (a render's docs read
    each job several times), other bytes are checked anew; each call parses metrics.json into its own dict."""
    metrics_path = _file(folder, METRICS)
    rounds_path = metrics_path.parent / ROUNDS
    metrics_raw = _read_file(metrics_path, "not valid JSON")
    data = _load_metrics(metrics_path, metrics_raw)
    rounds_raw = _read_file(rounds_path, "not a readable CSV")
    key = None if rounds_raw is None else (str(metrics_path.absolute()), hashlib.blake2b(metrics_raw).digest(),
                                           hashlib.blake2b(rounds_raw).digest())
    with _CHECKED_LOCK:
        if key in _CHECKED:
            _CHECKED.move_to_end(key)
            return data
    check_metrics(data, metrics_path)
    if rounds_raw is None:
        raise JobFolderError(f"{rounds_path}: missing (the job has not finished?)")
    rows = _round_rows(rounds_path, rounds_raw)
    if len(rows) != data["rounds"]:
        raise JobFolderError(f"{rounds_path}: {len(rows)} rows, but {metrics_path.name} says the job ran {data['rounds']} "
                             "rounds: the file is truncated or not this job's")
    check_recorded_twice(data, rows, metrics_path)
    with _CHECKED_LOCK:
        _CHECKED[key] = None
        while len(_CHECKED) > CHECKED_KEPT:
            _CHECKED.popitem(last=False)
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
