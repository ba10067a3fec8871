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
from typing import TYPE_CHECKING

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


def family_of(job: Job) -> str:
    """A family's name: ``<experiment>/<dataset>/<setting>/<loss>``."""
    return f"{job.experiment}/{job.dataset}/{job.setting}/{job.loss}"


def job_records(folder: Path) -> pd.DataFrame:
    """``RECORD_COLUMNS`` of one finished job folder with ``monitor.record``: every recorded estimator, the history
    estimators computed from them (``replay.recorded``) and the uniform guess, every round and class; empty when the
    job records no composition or no estimate."""
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
    rows = recorded(folder)
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


def reference_records(reference: Path | str, say: Callable[[str], None] | None = None) -> pd.DataFrame:
    """``job_records`` of every job of a reference set (or results folder) that records the composition, read through
    ``jobfolder`` (each folder checked) and concatenated."""
    import pandas as pd

    from fedbalance.jobs.jobfolder import job_folders

    parts = []
    for folder in job_folders(reference):
        part = job_records(folder)
        if say is not None:
            say(f"{folder}: {len(part)} records")
        if len(part):
            parts.append(part)
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=list(RECORD_COLUMNS))
