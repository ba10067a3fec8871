"""Replay the monitor offline on a saved trajectory (``save_trajectory: true``): every estimator, every round.

A job's ``trajectory.pt`` holds G_t and the selected clients' totals of every round and the final
model, which are exactly the monitor's inputs; the auxiliary data and the per-class copies are
rebuilt from the job spec and seeds, so a replay reproduces the estimates recorded in rounds.csv
and can score estimators the job did not run.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from fedbalance.common.jobspec import JobSpec, as_spec
from fedbalance.data.datasets import Dataset, load_dataset
from fedbalance.monitor.estimators import REGISTRY, Observer, Track, entry, plan
from fedbalance.engine.fl import TAG_MONITOR, build_monitor, client_keys, select_clients, sgd_config, torch_generator
from fedbalance.jobs.jobfolder import read_metrics, round_records
from fedbalance.jobs.run import auxiliary_data, build_partitions
from fedbalance.methods.losses import feed, get_loss
from fedbalance.methods.models import build_model, device_layout
from fedbalance.monitor.monitor import Monitor, cosine_similarity, uniform_guess
from fedbalance.common.records import (
    TRUE_IMBALANCE, UNIFORM, composition_measures, cs_column, est_column, high_column, imbalance_ratio, low_column,
)
from fedbalance.monitor import intervals


def load_trajectory(path: str | Path) -> dict[str, Any]:
    """A job's trajectory.pt (see ``fedbalance.jobs.run``)."""
    return torch.load(Path(path), map_location="cpu", weights_only=False)


def add_measures(row: dict[str, Any], truth: Sequence[float]) -> dict[str, Any]:
    """``row`` with the measures beside CS (``records.composition_measures``) of each ``est_<name>`` it holds and of
    the uniform guess, and the true max/min ratio: what a rounds.csv without these columns gets at read time."""
    prefix = est_column("")
    names = [c[len(prefix):] for c, v in row.items() if c.startswith(prefix) and v is not None]
    guess = [sum(truth) / len(truth)] * len(truth)
    for m, counts in [(UNIFORM, guess), *((m, row[est_column(m)]) for m in names)]:
        row.update(composition_measures(m, counts, truth))
    row[TRUE_IMBALANCE] = imbalance_ratio(truth)
    return row


def add_intervals(row: dict[str, Any], proto: str) -> dict[str, Any]:
    """``row`` with the 95 % interval ends ``lo_<name>``/``hi_<name>`` of each ``est_<name>`` it holds that the
    shipped calibration covers (``intervals.count_interval``; round ``row["round"]``, protocol ``proto``): what a
    rounds.csv written before the interval columns gets at read time."""
    calibration = intervals.shipped()
    if calibration is None:
        return row
    prefix = est_column("")
    for name in [c[len(prefix):] for c, v in row.items() if c.startswith(prefix) and v is not None]:
        ends = intervals.count_interval(calibration, name, proto, int(row["round"]), row[est_column(name)])
        if ends is not None:
            row[low_column(name)], row[high_column(name)] = ends
    return row


def replay_setup(
    trajectory: dict[str, Any], *, dataset: Dataset | None = None, data_dir: str | Path = "data",
    spec: JobSpec | None = None,
) -> tuple[JobSpec, Dataset, dict[str, Any], torch.nn.Module, Monitor]:
    """(spec, dataset, partitions, a model to load each G_t into, the job's monitor) of a saved trajectory; ``spec``:
    another job of the same training, whose monitor is built instead (``fedbalance.jobs.derive``)."""
    spec = as_spec(trajectory["spec"]) if spec is None else spec
    ds = dataset if dataset is not None else load_dataset(spec.source, data_dir, **dict(spec.options))
    parts = build_partitions(spec, ds)
    aux_x, aux_y = auxiliary_data(spec, ds, parts)
    model = device_layout(build_model(spec.model, ds.in_channels, ds.num_classes, ds.image_size), "cpu")
    return spec, ds, parts, model, build_monitor(spec, aux_x, aux_y, ds.num_classes, sgd_config(spec))


def observer_groups(estimators: Sequence[str], targets: Mapping[str, str] | None = None) -> list[tuple[str, ...]]:
    """``estimators`` split into the groups one ``Observer`` each runs in a replay: a history estimator joins the
    group of the listed per-round estimator it requires (so ``rlu`` runs once for ``rlu`` and ``rlu_pooled``);
    every other estimator is a group of its own. Each estimator is in exactly one group; ValueError (``plan``) on
    an unknown name. ``targets``: name -> dotted path of estimators that are plug-ins named by path (``entry``)."""
    targets = targets or {}
    plan(estimators, targets)
    entries = {m: entry(m, targets.get(m)) for m in estimators}
    groups: dict[str, list[str]] = {m: [m] for m in estimators if not entries[m].history}
    for m in estimators:
        requires = entries[m].requires
        if not entries[m].history:
            continue
        if len(requires) == 1 and requires[0] in groups:
            groups[requires[0]].append(m)
        else:
            groups[m] = [m]
    return [tuple(g) for g in groups.values()]


def replay(
    trajectory: dict[str, Any],
    estimators: Sequence[str],
    *,
    dataset: Dataset | None = None,
    data_dir: str | Path = "data",
    targets: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """One row per round: {"round", "cs_<estimator>", "est_<estimator>", "cs_uniform", "seconds_<estimator>"}, the
    measures beside CS (``add_measures``) and the intervals (``add_intervals``).

    The monitor runs with the job's own settings (optimiser, aux data, seeds) and ``estimators``
    (any registered in ``fedbalance.monitor.estimators``), through the ``Observer`` the run uses, one per group of
    ``observer_groups``: a history estimator listed with the per-round estimator it requires shares its
    computation, and the group's seconds are each member's (a history estimator's include its requirement's).
    ``estimators`` may name installed plug-ins, or plug-ins by dotted path through ``targets`` (name -> path, as a
    config's ``estimators``). The estimators get the round's loss as the run fed it (``fl.hand_over``): the job's loss with the Ratio-Loss
    weights π of the previous round's dW and, as its prior, the job's lead estimator's estimate when it is replayed
    (uniform otherwise).
    """
    spec, ds, parts, model, monitor = replay_setup(trajectory, dataset=dataset, data_dir=data_dir)
    q = ds.num_classes
    rounds = trajectory["rounds"]
    nxt = [r["model"] for r in rounds[1:]] + [trajectory["final"]]
    num_clients, k, seed = parts["main"].num_clients, spec.required("clients_per_round"), spec.seed
    observers = {group: Observer(monitor, group, targets=targets) for group in observer_groups(estimators, targets)}
    loss_fn = get_loss(spec.base_loss, q, **spec.loss_kwargs())
    lead = spec.monitor.estimators[0]
    pi, prior = torch.ones(q, dtype=torch.float64), torch.ones(q, dtype=torch.float64)
    rows = []
    for r, state_t1, true in zip(rounds, nxt, trajectory["true_composition"], strict=True):
        t = int(r["round"])
        model.load_state_dict(r["model"])
        truth = torch.as_tensor(true, dtype=torch.float64)
        row: dict[str, Any] = {"round": t, cs_column(UNIFORM): cosine_similarity(uniform_guess(r["totals"], q), truth)}
        gen = torch_generator(seed, TAG_MONITOR, t)
        dW = monitor.updates(model, gen)
        after_dW = gen.get_state()  # each estimator draws from where the run's would (after dW)
        clients = client_keys(spec, t, select_clients(spec.required("selection"), num_clients, k, seed, t))
        feed(loss_fn, weights=pi, prior=prior)
        for group, obs in observers.items():
            start = time.perf_counter()
            gen.set_state(after_dW)
            found = obs.observe(model, state_t1, r["totals"], gen, clients=clients, dW=dW, loss_fn=loss_fn)["estimates"]
            seconds = time.perf_counter() - start
            if lead in found:
                prior = torch.as_tensor(found[lead].counts).detach().cpu().double()
            for m in group:
                row[f"seconds_{m}"] = seconds
                row[est_column(m)] = [float(v) for v in found[m].counts]
                row[cs_column(m)] = cosine_similarity(found[m].counts, truth)
        pi = monitor.weights(dW)[1].detach().cpu().double()
        rows.append(add_intervals(add_measures(row, truth.tolist()), intervals.protocol(spec.mode, spec.required("selection"))))
    return rows


def recorded(folder: str | Path, history: Sequence[str] | None = None,
             targets: Mapping[str, str] | None = None, plugins: Sequence[str] = ()) -> list[dict[str, Any]]:
    """One row per round of a finished job with ``monitor.record``, from its rounds.csv, plus the history estimators.

    The recorded estimators' ``est_``/``cs_`` columns are read as written; each registered history
    estimator (``history``, default all, and the history plug-ins among ``plugins``: installed or named by path in
    ``targets``) whose requirements were recorded is computed from the recorded
    per-round estimates, the rounds' selected clients and the partition's client totals, as the run
    would, and the measures beside CS of every estimate (``add_measures``: a rounds.csv written before they existed
    gets them from its ``est_``/``true_composition`` cells) and their 95 % intervals (``add_intervals``). No model is replayed, so this takes seconds where
    ``replay`` takes minutes.
    """
    metrics = read_metrics(folder)
    spec = as_spec(metrics["config"])
    sizes = [sum(c) for c in metrics["partition"]["class_counts"]]
    targets = targets or {}
    if history is None:
        entries = [e for e in REGISTRY.values() if e.history]
        entries += [e for e in (entry(m, targets.get(m)) for m in plugins if m not in REGISTRY) if e.history]
    else:
        entries = [entry(m, targets.get(m)) for m in history]
    k, seed = spec.required("clients_per_round"), spec.seed
    balanced = spec.switch_round is not None  # the balanced partition's clients are not in metrics.json
    proto = intervals.protocol(spec.mode, spec.required("selection"))
    track = Track()
    rows: list[dict[str, Any]] = []
    est_prefix = est_column("")
    for rec in round_records(folder):
        t = rec["round"]
        truth = rec["true_composition"]
        row: dict[str, Any] = {"round": t, cs_column(UNIFORM): rec[cs_column(UNIFORM)]}
        for col, value in rec.items():
            if col.startswith(est_prefix) and value is not None:
                m = col[len(est_prefix):]
                row[est_column(m)] = value
                row[cs_column(m)] = rec[cs_column(m)]
        ids = select_clients(spec.required("selection"), len(sizes), k, seed, t).tolist()
        per_round = {m[len(est_prefix):]: v for m, v in row.items() if m.startswith(est_prefix)}
        track.add(client_keys(spec, t, ids), [sizes[c] for c in ids], per_round)
        if not balanced:
            for e in entries:
                m = e.name
                if e.history and all(r in per_round for r in e.requires):
                    counts = e.fn(track).counts
                    track.estimates[-1][m] = counts.tolist()
                    row[est_column(m)] = [float(v) for v in counts]
                    row[cs_column(m)] = cosine_similarity(counts, truth)
        rows.append(add_intervals(add_measures(row, truth), proto))
    return rows
