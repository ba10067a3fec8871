"""Where the monitor's intervals are fitted and where their coverage is measured: the split of a reference set.

Fixed before the first measurement (issue 79) and not tuned afterwards:

* **Families**: every (experiment, dataset, setting, loss) of the set whose jobs record the round's true composition
  and at least one estimator's estimate (``monitor.record``).
* **Primary split**: the intervals are fitted on seeds ``FIT_SEEDS`` (0–2) of every family and their coverage is
  measured on seeds ``TEST_SEEDS`` (3–4), which exist only in the families run with five seeds.
* **Families without seeds 3–4** (run with seeds 0–2 only): fitted on with their three seeds in the primary split, so
  the primary split measures nothing on them. Their coverage is measured by the **secondary split**: fitted on the
  primary fit part less seed ``SECONDARY_TEST_SEED`` (2) of these families, measured on that seed.
* The nominal level is ``1 - ALPHA`` (95 %); a group whose empirical coverage is below ``FLAG`` (90 %) is reported as
  such.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

    from fedbalance.common.records import Job

FIT_SEEDS: tuple[int, ...] = (0, 1, 2)
"""Seeds the intervals are fitted on (every family)."""

TEST_SEEDS: tuple[int, ...] = (3, 4)
"""Seeds the primary split measures coverage on (families run with five seeds)."""

SECONDARY_TEST_SEED: int = 2
"""The seed the secondary split measures coverage on, in families that have no ``TEST_SEEDS``."""

ALPHA: float = 0.05
"""1 - the intervals' nominal coverage."""

FLAG: float = 0.90
"""Empirical coverage below this is reported as a failure."""

UNIFORM_NAME = "uniform"
"""The uniform guess's name in the records (``records.UNIFORM``)."""

PRIMARY = "primary"
SECONDARY = "secondary"
SPLITS: tuple[str, ...] = (PRIMARY, SECONDARY)


def split_part(split: str, seed: int, seeds_of_family: frozenset[int] | set[int]) -> str | None:
    """"fit", "test" or None (unused) for one job of ``split``, by its seed and the seeds its family holds."""
    short = not set(TEST_SEEDS) <= set(seeds_of_family)
    if split == PRIMARY:
        return "fit" if seed in FIT_SEEDS else "test" if seed in TEST_SEEDS else None
    if split == SECONDARY:
        if short and seed == SECONDARY_TEST_SEED:
            return "test"
        return "fit" if seed in FIT_SEEDS else None
    raise ValueError(f"split {split!r} is not one of {SPLITS}")


RECORD_COLUMNS: tuple[str, ...] = (
    "experiment", "dataset", "setting", "loss", "seed", "protocol", "gamma", "round", "estimator", "cls", "total",
    "est_share", "true_share",
)
"""One row of ``interval_records``: one class of one estimator's estimate in one round of one job."""


HISTORY_ROUNDS = 50
"""Jobs of more rounds are read without the history estimators (``job_records``)."""


def family_of(job: Job) -> str:
    """A family's name: ``<experiment>/<dataset>/<setting>/<loss>``."""
    return f"{job.experiment}/{job.dataset}/{job.setting}/{job.loss}"


def job_records(folder: Path, history: bool = True) -> pd.DataFrame:
    """``RECORD_COLUMNS`` of one finished job folder with ``monitor.record``: every recorded estimator, the history
    estimators computed from them (``replay.recorded``) and the uniform guess, every round and class; empty when the
    job records no composition or no estimate. A job of more than ``HISTORY_ROUNDS`` rounds (the ``centralised``
    family's 300) gets its recorded estimators only: the history estimators' cost grows with the square of the
    rounds. ``history=False``: the recorded estimators only, for every job."""
    import pandas as pd

    from fedbalance.common.records import UNIFORM, Job, est_column, shares
    from fedbalance.jobs.jobfolder import read_metrics, round_records
    from fedbalance.jobs.replay import recorded
    from fedbalance.monitor.intervals import protocol

    metrics = read_metrics(folder)
    cfg = metrics["config"]
    job = Job(*(metrics["job"][k] for k in ("experiment", "dataset", "setting", "loss", "seed")))
    prefix = est_column("")
    records = round_records(folder)
    if not any(r.get("true_composition") is not None and any(k.startswith(prefix) and v is not None
                                                             for k, v in r.items()) for r in records):
        return pd.DataFrame(columns=list(RECORD_COLUMNS))
    truths = {r["round"]: r.get("true_composition") for r in records}
    rows = recorded(folder) if history and len(records) <= HISTORY_ROUNDS else records
    out = []
    proto = protocol(cfg.get("mode", "fl"), cfg.get("selection", "fixed"))
    gamma = float((cfg.get("partition") or {}).get("gamma", float("nan")))
    for row in rows:
        truth = truths.get(row["round"])
        names = [c[len(prefix):] for c, v in row.items() if c.startswith(prefix) and v is not None]
        if truth is None or not names:
            continue
        true_share = shares(truth)
        q = len(truth)
        for name, counts in [(UNIFORM, [1.0] * q), *((n, row[est_column(n)]) for n in names)]:
            for c, (p_hat, p) in enumerate(zip(shares(counts), true_share, strict=True)):
                out.append((job.experiment, job.dataset, job.setting, job.loss, job.seed, proto, gamma, row["round"],
                            name, c, float(sum(truth)), p_hat, p))
    return pd.DataFrame(out, columns=list(RECORD_COLUMNS))


def reference_records(reference: Path | str, say: Callable[[str], None] | None = None,
                      history: bool = True) -> pd.DataFrame:
    """``job_records`` of every job of a reference set (or results folder) that records the composition, read through
    ``jobfolder`` (each folder checked) and concatenated."""
    import pandas as pd

    from fedbalance.jobs.jobfolder import job_folders

    parts = []
    for folder in job_folders(reference):
        part = job_records(folder, history)
        if say is not None:
            say(f"{folder}: {len(part)} records")
        if len(part):
            parts.append(part)
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=list(RECORD_COLUMNS))


JOB_COLUMNS: tuple[str, ...] = ("experiment", "dataset", "setting", "loss", "seed")


def dedupe_jobs(records: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, str]]:
    """``records`` less every job's estimator whose records equal those of an earlier job of the same seed for that
    estimator (jobs derived from another job's trajectory repeat its estimates: the ``t_ra`` family's jobs repeat
    ``monitor``'s for every estimator but ``paper``, which reads T_Ra; the uniform guess repeats across the losses of
    one partition), and {dropped "job: estimator": the job it repeats}."""
    import hashlib

    import pandas as pd

    seen: dict[str, str] = {}
    dropped: dict[str, str] = {}
    keep = []
    for key, part in records.groupby([*JOB_COLUMNS, "estimator"], sort=True):
        name = "/".join(map(str, key[:4])) + f"/seed{key[4]}"
        body = part[["round", "cls", "est_share", "true_share"]].sort_values(["round", "cls"])
        digest = hashlib.sha256((f"{key[4]}|{key[5]}|" + body.round(12).to_csv(index=False)).encode()).hexdigest()
        if digest in seen:
            dropped[f"{name}: {key[5]}"] = seen[digest]
        else:
            seen[digest] = name
            keep.append(part)
    return (pd.concat(keep, ignore_index=True) if keep else records.iloc[:0]), dropped


def with_parts(records: pd.DataFrame, split: str) -> pd.DataFrame:
    """``records`` with a column ``part``: "fit", "test" or None for each job in ``split`` (``split_part``)."""
    family = records.experiment + "/" + records.dataset + "/" + records.setting + "/" + records.loss
    seeds = records.groupby(family).seed.agg(lambda s: frozenset(int(v) for v in s))
    part = [split_part(split, int(s), seeds[f]) for f, s in zip(family, records.seed)]
    return records.assign(family=family, part=part)


def evaluate(records: pd.DataFrame, split: str, q: int) -> tuple[pd.DataFrame, Any]:
    """(the test part of ``split`` with each class's interval ``low``/``high`` and whether it ``covered`` the true
    share, the calibration fitted on the fit part); the minority decisions beside: ``true_minority`` (true share below
    ``MINORITY_FRACTION`` / Q), ``named`` (the interval's upper end below it) and ``point_named`` (p̂ below it)."""
    import numpy as np

    from fedbalance.monitor.intervals import MINORITY_FRACTION, fit

    parts = with_parts(records, split)
    train = parts[parts.part == "fit"]
    cal = fit(train.estimator, train.protocol, train["round"].to_numpy(), train.est_share.to_numpy(),
              train.true_share.to_numpy(), q, ALPHA, source={"split": split, "fit_jobs": int(
                  train.groupby(list(JOB_COLUMNS)).ngroups)})
    test = parts[parts.part == "test"].copy()
    lo, hi = bounds_of(cal, test, q)
    from fedbalance.monitor.intervals import share_bounds

    low, high = share_bounds(test.est_share.to_numpy(), lo, hi, cal.floor)
    test["low"], test["high"] = low, high
    p = test.true_share.to_numpy()
    test["covered"] = (p >= low) & (p <= high)
    test["width"] = high - low
    cut = MINORITY_FRACTION / q
    test["true_minority"] = p < cut
    test["named"] = high < cut
    test["point_named"] = test.est_share.to_numpy() < cut
    test["fitted_group"] = np.isfinite(lo) & np.isfinite(hi)
    return test, cal


def bounds_of(cal: Any, frame: pd.DataFrame, q: int) -> tuple[Any, Any]:
    """The calibration's (lo, hi) score bounds of every row of ``frame`` (−inf, inf where its group was not fitted)."""
    import math

    import numpy as np

    from fedbalance.monitor.intervals import round_bin, share_bin

    rb = round_bin(frame["round"].to_numpy()).astype(str)
    sb = share_bin(frame.est_share.to_numpy(), q).astype(str)
    keys = frame.estimator.to_numpy().astype(str) + "|" + frame.protocol.to_numpy().astype(str) + "|" + rb + "|" + sb
    lo = np.array([cal.groups.get(k, (-math.inf, math.inf, 0))[0] for k in keys], float)
    hi = np.array([cal.groups.get(k, (-math.inf, math.inf, 0))[1] for k in keys], float)
    return lo, hi


def coverage_table(test: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """Per group of ``by``: ``n`` class-rounds, ``covered``, ``coverage`` with its Clopper–Pearson 95 % interval
    (``ci_low``, ``ci_high``; the class-rounds taken as independent), the ``median_width`` (share) and
    ``below_flag`` (coverage under ``FLAG``)."""
    import pandas as pd

    from fedbalance.monitor.intervals import binomial_interval

    rows = []
    for key, part in test.groupby(by, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        n, k = len(part), int(part.covered.sum())
        lo, hi = binomial_interval(k, n)
        rows.append({**dict(zip(by, key)), "n": n, "covered": k, "coverage": k / n, "ci_low": lo, "ci_high": hi,
                     "median_width": float(part.width.median()), "below_flag": k / n < FLAG})
    return pd.DataFrame(rows)


def detection_table(test: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """Per group of ``by``: the true minority class-rounds and, for the intervals (``named``), the point estimate
    (``point_named``) and the uniform guess (names none), true positives, false positives, precision and recall
    (NaN where undefined)."""
    import math

    import pandas as pd

    rows = []
    for key, part in test.groupby(by, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        truth = part.true_minority.to_numpy()
        row = {**dict(zip(by, key)), "class_rounds": len(part), "minority": int(truth.sum())}
        for name, said in (("interval", part.named.to_numpy()), ("point", part.point_named.to_numpy()),
                           ("uniform", truth & False)):
            tp, fp = int((said & truth).sum()), int((said & ~truth).sum())
            row[f"{name}_named"] = tp + fp
            row[f"{name}_tp"] = tp
            row[f"{name}_precision"] = tp / (tp + fp) if tp + fp else math.nan
            row[f"{name}_recall"] = tp / int(truth.sum()) if truth.sum() else math.nan
        rows.append(row)
    return pd.DataFrame(rows)


def shipped_coverage(root: Path | str) -> pd.DataFrame:
    """``coverage_table`` per estimator of the shipped calibration's intervals (``intervals.shipped``) on every round
    of the jobs under ``root`` that record the composition (their recorded estimators; no history estimator is
    computed); empty when none does or no calibration is shipped."""
    import pandas as pd

    from fedbalance.monitor.intervals import share_bounds, shipped

    cal = shipped()
    records = reference_records(root, history=False)
    records = records[records.estimator != UNIFORM_NAME] if len(records) else records
    if cal is None or records.empty:
        return pd.DataFrame()
    q = int(records.cls.max()) + 1
    lo, hi = bounds_of(cal, records, q)
    low, high = share_bounds(records.est_share.to_numpy(), lo, hi, cal.floor)
    p = records.true_share.to_numpy()
    frame = records.assign(covered=(p >= low) & (p <= high), width=high - low,
                           jobs=records.experiment + "/" + records.setting + "/" + records.loss + "/"
                           + records.seed.astype(str))
    table = coverage_table(frame, ["estimator"])
    return table.assign(jobs=[frame[frame.estimator == e].jobs.nunique() for e in table.estimator])
