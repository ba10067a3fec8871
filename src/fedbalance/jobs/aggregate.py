"""Collect the engine's per-job outputs into tidy frames: one row per job, one per round, one per client class.

Each job folder ``<results>/<experiment>/<dataset>/<setting>/<loss>/seed<k>/`` holds
``metrics.json`` and ``rounds.csv``. :func:`collect_tidy` reads them into ``final``, ``rounds`` and
``clients`` (the partition's class counts, once per (experiment, dataset, setting, seed): the
partition does not depend on the loss); :func:`write_tidy` saves the frames as CSV and
:func:`read_tidy` / :func:`read_clients` read them back.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Iterable, NamedTuple

import pandas as pd

from fedbalance.common.records import Job
from fedbalance.jobs.jobfolder import METRICS, JobFolderError, job_folders, read_metrics, read_rounds
from fedbalance.common.records import ESTIMATORS as RECORDED
from fedbalance.common.records import ROUND_COLUMNS as RECORD_COLUMNS
from fedbalance.common.records import UNIFORM

JOB_COLUMNS = ["experiment", "dataset", "setting", "loss", "seed"]
FINAL_METRICS = ["acc", "acc_minority", "acc_majority", "auc_micro", "auc_macro", "auc_hard", "train_loss"]
ESTIMATORS = [*RECORDED, UNIFORM]
FINAL_COLUMNS = (
    JOB_COLUMNS
    + FINAL_METRICS
    + ["mean_cs", "gamma_realised"]
    + [f"mon_cs_{e}" for e in ESTIMATORS]
    + ["acknowledged_round", "wall_time_s", "device", "plugin"]
)
ROUND_COLUMNS = list(RECORD_COLUMNS)
PARTITION_KEYS = ["experiment", "dataset", "setting", "seed"]
CLIENT_COLUMNS = PARTITION_KEYS + ["client", "class", "count"]
FINAL_CSV = "final.csv"
ROUNDS_CSV = "rounds.csv"
CLIENTS_CSV = "clients.csv"
TIDY_CSVS = (FINAL_CSV, ROUNDS_CSV, CLIENTS_CSV)
_TEXT = {"setting": str, "experiment": str, "dataset": str, "loss": str, "device": str, "plugin": str}


class Tidy(NamedTuple):
    """The three tidy frames of a study."""

    final: pd.DataFrame
    rounds: pd.DataFrame
    clients: pd.DataFrame


AggregateError = JobFolderError
"""A result file is missing or unreadable; the message names the file (``fedbalance.jobs.jobfolder``'s error)."""


def _number(x: Any) -> float:
    return float("nan") if x is None else float(x)


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
    row["device"] = str(data.get("device") or "")
    row["plugin"] = plugin_label(data)
    return row


def plugin_label(data: dict[str, Any]) -> str:
    """The plug-in loss a job trained with, as "package version" (or its dotted path), "" for a built-in loss: the
    tables and figures give such a loss rows of its own (``presentation.tables.with_plugins``)."""
    loss = ((data.get("config") or {}).get("plugins") or {}).get("loss")
    if not loss:
        return ""
    return f"{loss.get('package')} {loss.get('version')}" if loss.get("package") else str(loss.get("target"))


def client_rows(data: dict[str, Any], path: Path) -> list[dict[str, Any]]:
    """One row per (client, class) with a positive count of the partition in one parsed ``metrics.json``."""
    try:
        job = data["job"]
        counts = data["partition"]["class_counts"]
        key = {k: job[k] for k in PARTITION_KEYS}
        key["seed"] = int(key["seed"])
        return [{**key, "client": c, "class": q, "count": int(n)}
                for c, row in enumerate(counts) for q, n in enumerate(row) if n > 0]
    except (KeyError, TypeError, ValueError) as exc:
        raise AggregateError(f"{path}: missing or bad key {exc}") from exc


def collect_tidy(results_dir: str | Path, jobs: Iterable[Job] | None = None) -> Tidy:
    """(final, rounds, clients) frames of the given jobs, or of every job folder found under ``results_dir``."""
    root = Path(results_dir)
    dirs = job_folders(root) if jobs is None else [root / j.path for j in jobs]
    finals, rounds, clients, seen = [], [], [], set()
    folders: dict[tuple[Any, ...], Path] = {}
    for d in dirs:
        data = read_metrics(d)
        row = final_row(data, d / METRICS)
        key = tuple(row[k] for k in JOB_COLUMNS)
        if key in folders:
            raise AggregateError(f"{d / METRICS}: the job {Job(*key).path} again (also in {folders[key]}); "
                                 "each job is counted once")
        folders[key] = d
        finals.append(row)
        partition = tuple(row[k] for k in PARTITION_KEYS)
        if partition not in seen:
            seen.add(partition)
            clients += client_rows(data, d / METRICS)
        r = read_rounds(d)
        for k in reversed(JOB_COLUMNS):
            r.insert(0, k, row[k])
        if row["plugin"]:
            r["plugin"] = row["plugin"]
        rounds.append(r)
    final = pd.DataFrame(finals, columns=FINAL_COLUMNS)
    final["seed"] = final["seed"].astype("int64")
    cols = JOB_COLUMNS + ROUND_COLUMNS
    rnd = pd.concat(rounds, ignore_index=True) if rounds else pd.DataFrame(columns=cols)
    extra = [c for c in rnd.columns if c not in cols]
    rnd = rnd.reindex(columns=cols + extra)
    cli = pd.DataFrame(clients, columns=CLIENT_COLUMNS).astype({c: "int64" for c in ("seed", "client", "class", "count")})
    return Tidy(final, rnd, cli)


def collect(results_dir: str | Path, jobs: Iterable[Job] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(final, rounds) frames of the given jobs, or of every job folder found under ``results_dir``."""
    tidy = collect_tidy(results_dir, jobs)
    return tidy.final, tidy.rounds


def write_tidy(final: pd.DataFrame, rounds: pd.DataFrame, out_dir: str | Path,
               clients: pd.DataFrame | None = None) -> list[Path]:
    """Write ``final.csv``, ``rounds.csv`` and (when given) ``clients.csv`` into ``out_dir``; return their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    frames = [final, rounds] + ([] if clients is None else [clients])
    paths = [out / name for name in TIDY_CSVS[:len(frames)]]
    for frame, path in zip(frames, paths):
        frame.to_csv(path, index=False)
    return paths


def read_frame(path: str | Path) -> pd.DataFrame:
    """Read one tidy CSV (text keys kept as strings); AggregateError when it is missing."""
    path = Path(path)
    if not path.is_file():
        raise AggregateError(f"{path}: missing")
    return pd.read_csv(path, dtype=_TEXT)


def read_tidy(out_dir: str | Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Read back ``final.csv`` and ``rounds.csv`` written by :func:`write_tidy` (list cells stay JSON strings)."""
    out = Path(out_dir)
    return read_frame(out / FINAL_CSV), read_frame(out / ROUNDS_CSV)


def read_clients(path: str | Path) -> pd.DataFrame:
    """Read back ``clients.csv`` (a file, or the folder holding it) written by :func:`write_tidy`."""
    p = Path(path)
    return read_frame(p / CLIENTS_CSV if p.is_dir() else p)


def class_counts(clients: pd.DataFrame, experiment: str, dataset: str, setting: str,
                 seed: int | None = None) -> pd.DataFrame | None:
    """Client x class counts (clients 0.., classes 0..) of one partition of ``clients`` (lowest seed by default);
    None when absent."""
    sel = clients[(clients.experiment == experiment) & (clients.dataset == dataset) & (clients.setting == setting)]
    if sel.empty:
        return None
    sel = sel[sel.seed == (sel.seed.min() if seed is None else seed)]
    if sel.empty:
        return None
    m = sel.pivot_table(index="client", columns="class", values="count", aggfunc="sum", fill_value=0)
    return m.reindex(index=range(int(sel.client.max()) + 1), columns=range(int(sel["class"].max()) + 1), fill_value=0)


def parse_list(cell: Any) -> list[float] | None:
    """A JSON list cell of ``rounds.csv`` as a list of floats; None when empty."""
    if cell is None or (isinstance(cell, float) and math.isnan(cell)) or cell == "":
        return None
    return [float(x) for x in json.loads(cell)]
