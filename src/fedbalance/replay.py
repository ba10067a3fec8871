"""Replay the monitor offline on a saved trajectory (``save_trajectory: true``): every estimator, every round.

A job's ``trajectory.pt`` holds G_t and the selected clients' totals of every round and the final
model, which are exactly the monitor's inputs; the auxiliary data and the per-class copies are
rebuilt from the job spec and seeds, so a replay reproduces the estimates recorded in rounds.csv
and can score estimators the job did not run.
"""

from __future__ import annotations

import csv
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from fedbalance.data import Dataset, load_dataset
from fedbalance.fl import TAG_MONITOR, build_monitor, pooled_over_rounds, select_clients, sgd_config, torch_generator
from fedbalance.jobs import auxiliary_data, build_partitions
from fedbalance.models import build_model, device_layout
from fedbalance.monitor import POOLED_BASE, cosine_similarity, per_round_methods, uniform_guess
from fedbalance.records import ESTIMATORS, POOLED, UNIFORM


def load_trajectory(path: str | Path) -> dict[str, Any]:
    """A job's trajectory.pt (see ``fedbalance.jobs``)."""
    return torch.load(Path(path), map_location="cpu", weights_only=False)


def replay(
    trajectory: dict[str, Any],
    estimators: Sequence[str],
    *,
    dataset: Dataset | None = None,
    data_dir: str | Path = "data",
) -> list[dict[str, Any]]:
    """One row per round: {"round", "cs_<estimator>", "est_<estimator>", "cs_uniform", "seconds_<estimator>"}.

    The monitor runs with the job's own settings (optimiser, aux data, seeds) and ``estimators``.
    """
    spec = dict(trajectory["spec"])
    per_round = list(per_round_methods(estimators))
    spec["monitor"] = {**spec["monitor"], "estimators": per_round}
    ds = dataset if dataset is not None else load_dataset(spec["source"], data_dir, **dict(spec.get("options") or {}))
    parts = build_partitions(spec, ds)
    aux_x, aux_y = auxiliary_data(spec, ds, parts)
    q = ds.num_classes
    model = device_layout(build_model(spec["model"], ds.in_channels, q, ds.image_size), "cpu")
    monitor = build_monitor(spec, aux_x, aux_y, q, sgd_config(spec))
    rounds = trajectory["rounds"]
    nxt = [r["model"] for r in rounds[1:]] + [trajectory["final"]]
    num_clients, k, seed = parts["main"].num_clients, int(spec["clients_per_round"]), int(spec["seed"])
    base: list[list[float]] = []
    chosen: list[list[int]] = []
    totals: list[list[int]] = []
    rows = []
    for r, state_t1, true in zip(rounds, nxt, trajectory["true_composition"], strict=True):
        t = int(r["round"])
        model.load_state_dict(r["model"])
        gen = torch_generator(int(spec["seed"]), TAG_MONITOR, t)
        truth = torch.as_tensor(true, dtype=torch.float64)
        row: dict[str, Any] = {"round": t, f"cs_{UNIFORM}": cosine_similarity(uniform_guess(r["totals"], q), truth)}
        dW = monitor.updates(model, gen)
        for m in per_round:
            start = time.perf_counter()
            est = monitor.observe(model, state_t1, r["totals"], gen, dW=dW, methods=(m,))["estimates"][m]
            row[f"seconds_{m}"] = time.perf_counter() - start
            row[f"est_{m}"] = [float(v) for v in est.counts]
            row[f"cs_{m}"] = cosine_similarity(est.counts, truth)
        if POOLED in estimators:
            start = time.perf_counter()
            base.append(row[f"est_{POOLED_BASE}"])
            chosen.append(select_clients(spec["selection"], num_clients, k, seed, t).tolist())
            totals.append(r["totals"])
            counts = pooled_over_rounds(spec, base, chosen, totals).counts
            row[f"seconds_{POOLED}"] = row[f"seconds_{POOLED_BASE}"] + time.perf_counter() - start
            row[f"est_{POOLED}"] = [float(v) for v in counts]
            row[f"cs_{POOLED}"] = cosine_similarity(counts, truth)
        rows.append(row)
    return rows


def recorded(folder: str | Path) -> list[dict[str, Any]]:
    """One row per round of a finished job with ``monitor.record``, from its rounds.csv, plus ``pooled``.

    The recorded estimators' ``est_``/``cs_`` columns are read as written; ``pooled`` is computed from the
    recorded ``released`` estimates, the rounds' selected clients and the partition's client totals.
    No model is replayed, so this takes seconds where ``replay`` takes minutes.
    """
    folder = Path(folder)
    metrics = json.loads((folder / "metrics.json").read_text())
    spec = metrics["config"]
    sizes = [sum(c) for c in metrics["partition"]["class_counts"]]
    rows: list[dict[str, Any]] = []
    k, seed = int(spec["clients_per_round"]), int(spec["seed"])
    pool = spec.get("switch_round") is None
    base: list[list[float]] = []
    chosen: list[list[int]] = []
    with open(folder / "rounds.csv", newline="") as fh:
        for rec in csv.DictReader(fh):
            t = int(rec["round"])
            truth = json.loads(rec["true_composition"])
            row: dict[str, Any] = {"round": t, f"cs_{UNIFORM}": float(rec[f"cs_{UNIFORM}"])}
            for m in ESTIMATORS:
                if rec.get(f"est_{m}"):
                    row[f"est_{m}"] = json.loads(rec[f"est_{m}"])
                    row[f"cs_{m}"] = float(rec[f"cs_{m}"])
            if pool and f"est_{POOLED_BASE}" in row:
                base.append(row[f"est_{POOLED_BASE}"])
                chosen.append(select_clients(spec["selection"], len(sizes), k, seed, t).tolist())
                counts = pooled_over_rounds(spec, base, chosen, [[sizes[c] for c in ids] for ids in chosen]).counts
                row[f"est_{POOLED}"] = [float(v) for v in counts]
                row[f"cs_{POOLED}"] = cosine_similarity(counts, truth)
            rows.append(row)
    return rows
