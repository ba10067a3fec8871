"""A job derived from another's trajectory: the same training, its own monitor run again on every round.

Jobs that differ from a trained job only in their ``monitor`` keys (a ``T_Ra`` sweep of CE jobs, another
estimator list) train alike when their loss does not train on the monitor's outputs
(``jobspec.derivable``). Their rounds.csv differs only in the monitor's columns, and those are a function
of each round's G_t and G_{t+1}, the selected clients' totals, the auxiliary data and the monitor's seeds:
exactly what the source's ``trajectory.pt`` holds or the spec rebuilds. ``derive_job`` runs the target's
monitor on those inputs, round after round, as ``fl.run_rounds`` would have, and writes the target's
folder: the source's training columns and metrics, the target's monitor columns, monitor summary and
acknowledgment, its own ``job`` and ``config``, and ``derived_from`` naming the source.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedbalance.jobs import jobfolder
from fedbalance.data.datasets import Dataset, load_dataset
from fedbalance.monitor.estimators import Observer
from fedbalance.engine.fl import (
    TAG_MONITOR, RoundState, build_acknowledger, client_keys, guarded_observe, monitor_round, select_clients,
    torch_generator,
)
from fedbalance.jobs.run import JobError, installed_plugins, job_lock, lock_holder
from fedbalance.common.jobspec import ConfigError, JobSpec, as_spec, derivable, training_differences
from fedbalance.monitor.intervals import protocol
from fedbalance.common.records import EMPIRICAL_COLUMNS, JOB_KEYS, is_monitor_column
from fedbalance.jobs.replay import load_trajectory, replay_setup


def derive_rows(
    trajectory: Mapping[str, Any], rows: list[dict[str, Any]], spec: JobSpec, dataset: Dataset
) -> tuple[list[dict[str, Any]], int | None]:
    """(``spec``'s rounds, its first acknowledged round): ``rows``' training columns, the monitor's run again with
    ``spec``'s keys on the trajectory's models (the round's G_t, then G_{t+1}: the next round's or the final one)."""
    _, _, parts, model, monitor = replay_setup(dict(trajectory), dataset=dataset, spec=spec)
    q = dataset.num_classes
    observer, ack = Observer(monitor, spec.monitor.estimators, targets=spec.estimator_targets), build_acknowledger(spec)
    lead = spec.monitor.estimators[0]
    ones = torch.ones(q, dtype=torch.float64)
    state = RoundState(model={}, loss_state={}, pi=ones, prior=ones.clone())
    rounds = list(trajectory["rounds"])
    if len(rounds) != len(rows):
        raise ConfigError(f"the trajectory holds {len(rounds)} rounds but rounds.csv {len(rows)}")
    after = [r["model"] for r in rounds[1:]] + [trajectory["final"]]
    num_clients, k = parts["main"].num_clients, spec.required("clients_per_round")
    out = []
    for r, state_t1, row in zip(rounds, after, rows):
        t = int(r["round"])
        if t != row["round"]:
            raise ConfigError(f"the trajectory's round {t} meets rounds.csv's round {row['round']}")
        new = {c: (None if is_monitor_column(c) or (c in EMPIRICAL_COLUMNS and not spec.empirical) else v)
               for c, v in row.items()}
        model.load_state_dict(r["model"])
        clients = select_clients(spec.required("selection"), num_clients, k, spec.seed, t)
        observed = guarded_observe(spec, t, lambda: observer.observe(
            model, state_t1, r["totals"], torch_generator(spec.seed, TAG_MONITOR, t), clients=client_keys(spec, t, clients)))
        monitor_round(state, new, observed, ack, lead, np.asarray(row["true_composition"]), r["totals"],
                      protocol(spec.mode, spec.required("selection")))
        out.append(new)
    return out, state.ack_round


def read_trajectory(path: Path) -> dict[str, Any]:
    """A source's ``trajectory.pt``; ConfigError in one line naming the file when it is missing, torn or not one."""
    if not path.is_file():
        raise ConfigError(f"{path}: missing; a derived job needs its source's trajectory (save_trajectory: true)")
    try:
        trajectory = load_trajectory(path)
    except Exception as exc:  # noqa: BLE001 - torch.load of a torn or foreign file raises many kinds
        raise ConfigError(f"{path}: not a readable trajectory ({type(exc).__name__}: {str(exc).splitlines()[0][:120]}); "
                          "train the source again with save_trajectory: true") from None
    if not isinstance(trajectory, Mapping) or not {"spec", "rounds", "final"} <= set(trajectory):
        raise ConfigError(f"{path}: not a trajectory (a dict with spec, rounds and final)")
    return dict(trajectory)


def check_trajectory(trajectory: Mapping[str, Any], source: Mapping[str, Any], path: Path) -> None:
    """ConfigError naming the keys unless the trajectory was saved by the very job whose metrics.json is ``source``:
    the same seed and training keys (``jobspec.training_differences``; the path as each resolved it)."""
    recorded = dict(source["config"])
    recorded["path"] = source.get("path") or recorded.get("path")
    try:
        differ = training_differences(trajectory["spec"], recorded)
    except ConfigError as exc:
        raise ConfigError(f"{path}: its spec is not a job spec ({exc})") from None
    if differ:
        shown = ", ".join(f"{k} {a} vs {b}" for k, (a, b) in list(differ.items())[:4])
        raise ConfigError(f"{path} was saved by another job than the one in its folder (trajectory vs metrics.json: "
                          f"{shown}): a trajectory copied from another run; train the source again")


def derive_job(
    source_dir: str | Path,
    target: Mapping[str, Any] | JobSpec,
    out_dir: str | Path,
    *,
    data_dir: str | Path = "data",
    dataset: Dataset | None = None,
) -> dict[str, Any]:
    """Write ``out_dir``'s rounds.csv and metrics.json (last) for ``target`` from the finished job in ``source_dir``
    and its ``trajectory.pt``, holding ``out_dir``'s job lock; return the metrics. ConfigError when ``target`` is not
    derivable from it, when the trajectory is not the source's own or unreadable, or when ``out_dir`` is the
    source's folder; JobError when ``out_dir`` or the source is in use (``jobs.job_lock``, ``jobs.lock_holder``) or
    ``out_dir`` lies in a reference set."""
    source_dir, out = Path(source_dir), Path(out_dir)
    if out.resolve() == source_dir.resolve():
        raise ConfigError(f"--out {out_dir} is the source's folder {source_dir}: a derived job gets a folder of its own")
    holder = lock_holder(source_dir)
    if holder is not None:
        raise JobError(f"--source {source_dir} is in use by {holder} (a running job writes its files and trajectory); "
                       "wait for that job or stop it")
    source = jobfolder.read_metrics(source_dir)
    rows = jobfolder.round_records(source_dir)
    trajectory_path = source_dir / jobfolder.TRAJECTORY
    spec = as_spec(target)
    source_spec = as_spec(source["config"])
    if not derivable(source_spec, spec):
        raise ConfigError(
            f"{spec.name} cannot be derived from {source_dir}: it must train alike (jobspec.training_key), record the "
            "monitor with a loss that does not train on it, in FedAvg without a switch of partition, from a saved trajectory"
        )
    trajectory = read_trajectory(trajectory_path)
    check_trajectory(trajectory, source, trajectory_path)
    spec = spec.with_path(str(source.get("path") or source_spec.path))
    with job_lock(out):
        ds = dataset if dataset is not None else load_dataset(spec.source, data_dir, **dict(spec.options))
        new_rows, ack_round = derive_rows(trajectory, rows, spec, ds)
        metrics = {
            **{k: v for k, v in source.items() if k != "plugins"},
            "job": {k: getattr(spec.job, k) for k in JOB_KEYS},
            "config": as_spec(target).as_dict(),
            "monitor": jobfolder.monitor_summary(new_rows),
            "acknowledged_round": ack_round,
            "derived_from": jobfolder.folder_job(source_dir) or str(source_dir),
            **({"plugins": ran} if (ran := installed_plugins(spec)) else {}),
        }
        jobfolder.write(out, jobfolder.clean(metrics), jobfolder.rounds_text(new_rows))
    return metrics
