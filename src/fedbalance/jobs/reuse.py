"""A twin job's outputs, written from the job trained in its place (``fedbalance.jobs.config.twins``); torch-free.

Two jobs of a study that train alike (``jobspec.training_key``: they differ only in their experiment's
and setting's names, and in keys that change what a job writes, ``OUTPUT_KEYS``) give the same model
in every round, so the workflow trains the first and writes the other's ``metrics.json`` and
``rounds.csv`` from it: the same numbers, less the columns the twin does not record (the monitor's of
a loss that does not train on them, the empirical statistics), the twin's own ``job`` and ``config``,
and ``reused_from`` naming the folder it came from.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from fedbalance.jobs import jobfolder
from fedbalance.jobs.config import (
    IDENTITY_KEYS, ConfigError, earlier_sources, jobs, resolve_job, resolve_jobs, study_plugins, twins,
)
from fedbalance.common.jobspec import (
    JobSpec, as_spec, branch_key, covers, derivable, runs_monitor, shared_rounds, trained_estimators,
)
from fedbalance.common.records import EMPIRICAL_COLUMNS, JOB_KEYS, Job, is_monitor_column

# What ``path: auto`` resolves to (fedbalance.jobs.run.resolve_path).
RESOLVED_PATHS = ("sequential", "vectorised")


def derived(cfg: Mapping[str, Any], experiments: list[str] | None = None) -> dict[Job, Job]:
    """Each job, not a twin, whose outputs follow from an earlier trained job's trajectory (``jobspec.derivable``:
    it differs only in the monitor of a loss that does not train on it), mapped to that job; ``fedbalance.jobs.derive``
    writes it. "Earlier" as in ``config.twins``; a config makes the first job of such a group save its trajectory."""
    return earlier_sources(cfg, experiments, derivable, skip=twins(cfg, experiments))


def branches(cfg: Mapping[str, Any], experiments: list[str] | None = None,
             skip: Collection[Job] | None = None) -> dict[Job, tuple[Job, int]]:
    """Each trained job (neither a twin nor derived) that shares its first rounds with another trained job
    (``jobspec.shared_rounds``: e.g. ``early``'s S, M and E, which differ in ``switch_round`` only), mapped to that
    job and the number of rounds it starts from (``run_job``'s ``branch_from``; the source keeps those rounds'
    states, ``branch_rounds``). In each such group one job is trained from round 0: the one sharing the most rounds
    with the rest (the first in the config's order on a tie); the others branch from it. ``skip``: the twins and
    derived jobs, when the caller has them."""
    if skip is None:
        skip = set(twins(cfg, experiments)) | set(derived(cfg, experiments))
    todo = [j for j in jobs(cfg, experiments) if j not in skip]
    specs = resolve_jobs(cfg, todo)
    groups: dict[str, list[Job]] = {}
    for job in todo:
        key = branch_key(specs[job])
        if key is not None:
            groups.setdefault(key, []).append(job)
    out: dict[Job, tuple[Job, int]] = {}
    for group in groups.values():
        if len(group) == 1:
            continue
        root = max(group, key=lambda r: (sum(shared_rounds(specs[r], specs[j]) for j in group), -group.index(r)))
        for j in group:
            shared = 0 if j == root else shared_rounds(specs[root], specs[j])
            if shared > 0:
                out[j] = (root, shared)
    return out


def branch_rounds(plan: Mapping[Job, tuple[Job, int]]) -> dict[Job, list[int]]:
    """The rounds whose states each source of ``plan`` (``branches``) keeps for the jobs that branch from it."""
    out: dict[Job, list[int]] = {}
    for source, rounds in plan.values():
        out.setdefault(source, [])
        if rounds not in out[source]:
            out[source] = sorted([*out[source], rounds])
    return out


def twin_config(source: Mapping[str, Any], spec: JobSpec, source_path: str) -> dict[str, Any]:
    """``source``'s ``config`` with ``spec``'s configured keys, after checking that ``source`` covers ``spec``."""
    configured = spec.as_dict()
    config = dict(source["config"])
    if spec.path == "auto" and config.get("path") in RESOLVED_PATHS:
        # an older metrics.json recorded what ``auto`` resolved to in ``config``; the job ran as configured
        if "path" in configured:
            config["path"] = configured["path"]
        else:
            del config["path"]
    try:
        ok = covers({**config, **{k: configured[k] for k in IDENTITY_KEYS}}, spec)
    except ConfigError as exc:
        raise ConfigError(f"{source_path}: its config is not a job spec ({exc})") from None
    if not ok:
        raise ConfigError(
            f"{source_path} was trained with other parameters than {spec.name} has now (results of an older config?): "
            "train that job again, or point at a folder of the current config"
        )
    return configured


def twin_rows(rows: list[dict[str, Any]], spec: JobSpec) -> list[dict[str, Any]]:
    """The source's rounds as ``spec``'s job records them: the monitor's columns emptied when it does not run
    the monitor, the empirical ones when it does not ask for them."""
    drop_monitor, drop_emp = not runs_monitor(spec), not spec.empirical
    return [
        {k: (None if (drop_monitor and is_monitor_column(k)) or (drop_emp and k in EMPIRICAL_COLUMNS) else v)
         for k, v in row.items()}
        for row in rows
    ]


def twin_metrics(source: Mapping[str, Any], spec: Mapping[str, Any] | JobSpec, source_path: str,
                 rows: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """``source``'s metrics.json as the job of ``spec`` (its twin) would have written it; ``rows``: the twin's
    rounds (``twin_rows``), from which its monitor summary is recomputed when it does not run the monitor."""
    spec = as_spec(spec)
    out = {**source, "job": {k: getattr(spec.job, k) for k in JOB_KEYS}, "config": twin_config(source, spec, source_path),
           "reused_from": source_path}
    if not runs_monitor(spec):
        out["monitor"] = jobfolder.monitor_summary(rows or [])
        out["acknowledged_round"] = None
        if "estimators" in (source.get("plugins") or {}):  # the twin records no estimate: none of the estimators ran
            out["plugins"] = {k: v for k, v in source["plugins"].items() if k != "estimators"}
            if not out["plugins"]:
                del out["plugins"]
    return out


def stale_plugins(cfg: Mapping[str, Any], results_dir: str | Path) -> list[dict[str, Any]]:
    """Each plug-in that a finished job of the study under ``results_dir`` ran at another version than the one
    installed now (metrics.json's ``plugins``; ``config.study_plugins``): {job, kind, name, recorded, installed,
    trains}. A job that trains on the plug-in (``trains``) is planned again by the workflow, whose spec holds that
    version; a job whose monitor merely recorded an estimator is not (its training does not change), and its columns
    stay those of the version it recorded until it is run again (``snakemake --forcerun`` its metrics.json)."""
    installed = {(p["kind"], p["name"]): p["version"] for p in study_plugins(cfg)}
    out = []
    for job in jobs(cfg):
        folder = Path(results_dir) / job.path
        if not jobfolder.finished(folder):
            continue
        spec = resolve_job(cfg, job)
        trained = set(trained_estimators(spec))
        ran = jobfolder.read_metrics(folder).get("plugins") or {}
        for what, rec in ran.items():
            for name, r in (rec.items() if what == "estimators" else [(None, rec)]):
                kind = "estimator" if what == "estimators" else what
                name = name if name is not None else (spec.base_loss if what == "loss" else spec.source)
                now = installed.get((kind, name))
                if now is not None and r.get("version") != now:
                    out.append({"job": job.path, "kind": kind, "name": name, "recorded": r.get("version"),
                                "installed": now, "trains": what != "estimators" or name in trained})
    return out


def write_twin(source_dir: str | Path, target_dir: str | Path, spec: Mapping[str, Any] | JobSpec) -> dict[str, Any]:
    """Write ``target_dir``'s rounds.csv and metrics.json (last, as ``run_job`` does) from ``source_dir``'s.

    The rounds are copied byte for byte when the twin records all the source does, else rewritten without
    the columns it does not record.
    """
    source_dir = Path(source_dir)
    spec = as_spec(spec)
    try:
        source = jobfolder.read_metrics(source_dir)
        rounds: str | bytes = (source_dir / jobfolder.ROUNDS).read_bytes()
        source_spec = as_spec(source["config"])
        same_outputs = runs_monitor(source_spec) == runs_monitor(spec) and source_spec.empirical == spec.empirical
        rows = None if same_outputs else twin_rows(jobfolder.round_records(source_dir), spec)
    except (OSError, ValueError, KeyError) as exc:
        raise ConfigError(f"cannot reuse {source_dir}: {exc}") from None
    metrics = twin_metrics(source, spec, str(source_dir), rows)
    if rows is not None:
        rounds = jobfolder.rounds_text(rows)
    jobfolder.write(target_dir, metrics, rounds)
    return metrics
