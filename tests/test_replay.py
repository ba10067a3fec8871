"""Replaying the monitor on a saved trajectory reproduces the estimates the job recorded."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch

from fedbalance.config import Job, load_config, resolve_job
from fedbalance.jobs import run_job
from fedbalance.replay import load_trajectory, replay

torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> Path:
    cfg = load_config(ROOT / "config" / "quick.yaml")
    spec = resolve_job(cfg, Job("losses", "mnist", "g10", "ratio", 0))
    spec["partition"].update(num_clients=4, majority_samples=12)
    spec["monitor"] = {**spec["monitor"], "aux_per_class": 8, "estimators": ["released", "nnls", "paper"]}
    spec.update(clients_per_round=3, rounds=3, batch_size=16, lr=0.05, local_epochs=2, save_trajectory=True)
    out = tmp_path_factory.mktemp("replay") / "job"
    run_job(spec, out, device="cpu")
    return out


def test_replay_reproduces_recorded_estimates(job: Path) -> None:
    rows = list(csv.DictReader(open(job / "rounds.csv", newline="")))
    replayed = replay(load_trajectory(job / "trajectory.pt"), ["released", "nnls", "paper", "simulated"])
    assert [r["round"] for r in replayed] == [int(r["round"]) for r in rows]
    for rec, rep in zip(rows, replayed):
        for m in ("released", "nnls", "paper"):
            assert json.loads(rec[f"est_{m}"]) == pytest.approx(rep[f"est_{m}"], rel=1e-12), (rec["round"], m)
            assert float(rec[f"cs_{m}"]) == pytest.approx(rep[f"cs_{m}"], rel=1e-12)
        assert float(rec["cs_uniform"]) == pytest.approx(rep["cs_uniform"], rel=1e-12)
        truth = json.loads(rec["true_composition"])
        assert sum(rep["est_simulated"]) == pytest.approx(sum(truth))
        assert min(rep["est_simulated"]) >= 0.0
