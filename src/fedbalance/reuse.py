"""A twin job's outputs, written from the job trained in its place (``fedbalance.config.twins``); torch-free.

Two jobs of a study that differ only in their experiment's and setting's names (a sweep's default
point and the loss comparison's job, say) give the same results, so the workflow trains the first
and writes the other's ``metrics.json`` and ``rounds.csv`` from it: the same numbers, the twin's
own ``job`` and ``config``, and ``reused_from`` naming the folder it came from.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fedbalance import jobfolder
from fedbalance.config import IDENTITY_KEYS, ConfigError, run_key
from fedbalance.jobspec import JobSpec, as_spec
from fedbalance.records import JOB_KEYS

# What ``path: auto`` resolves to (fedbalance.jobs.resolve_path).
RESOLVED_PATHS = ("sequential", "vectorised")


def twin_metrics(source: Mapping[str, Any], spec: Mapping[str, Any] | JobSpec, source_path: str) -> dict[str, Any]:
    """``source``'s metrics.json as the job of ``spec`` (its twin) would have written it."""
    spec = as_spec(spec)
    configured = spec.as_dict()
    config = dict(source["config"])
    config.update({k: configured[k] for k in IDENTITY_KEYS})
    if spec.path == "auto" and config.get("path") in RESOLVED_PATHS:
        # an older metrics.json recorded what ``auto`` resolved to in ``config``; the job ran as configured
        if "path" in configured:
            config["path"] = configured["path"]
        else:
            del config["path"]
    if run_key(config) != run_key(spec):
        raise ConfigError(
            f"{source_path} was trained with other parameters than {spec.name} has now (results of an older config?): rerun it"
        )
    return {**source, "job": {k: getattr(spec.job, k) for k in JOB_KEYS}, "config": config, "reused_from": source_path}


def write_twin(source_dir: str | Path, target_dir: str | Path, spec: Mapping[str, Any] | JobSpec) -> dict[str, Any]:
    """Write ``target_dir``'s rounds.csv and metrics.json (last, as ``run_job`` does) from ``source_dir``'s."""
    source_dir = Path(source_dir)
    try:
        source = jobfolder.read_metrics(source_dir)
        rounds = (source_dir / jobfolder.ROUNDS).read_bytes()
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot reuse {source_dir}: {exc}") from None
    metrics = twin_metrics(source, spec, str(source_dir))
    jobfolder.write(target_dir, metrics, rounds)
    return metrics
