"""benchmarks/ratio_stability.py: spike counting by hand, and a replay that reproduces the weights a job trained with."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

from fedbalance.config import load_config, resolve_job
from fedbalance.records import Job

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
import ratio_stability  # noqa: E402


def test_spikes_by_hand() -> None:
    pis = [[1.0, 2.0], [1.0, 2.0], [1.0, 3.0], [5.1, 2.0], [4.9, 20.0]]
    # round 3: class 0 at 5.1 > 5 x median(1, 1, 1) = 5; round 4: class 0 at 4.9 > 5 x median(1, 1, 1, 5.1) = 5? no;
    # class 1 at 20 > 5 x median(2, 2, 3, 2) = 10: yes
    assert ratio_stability.spikes(pis, 5.0) == [(3, 0, 5.1, 1.0), (4, 1, 20.0, 2.0)]
    assert ratio_stability.spikes(pis, 5.0, warmup=4) == [(4, 1, 20.0, 2.0)]


def test_replay_reproduces_the_trained_weights(tmp_path: Path) -> None:
    from fedbalance.jobs import run_job

    torch.set_num_threads(1)
    spec = resolve_job(load_config(REPO / "config" / "quick.yaml"), Job("losses", "mnist", "g10", "ratio", 0))
    spec["partition"].update(num_clients=5, majority_samples=8)
    spec["monitor"].update(aux_per_class=4, record=True)
    spec.update(clients_per_round=3, rounds=3, local_epochs=1, batch_size=16, save_trajectory=True, path="sequential")
    run_job(spec, tmp_path, device="cpu", progress=False)
    job = ratio_stability.replay_job(tmp_path / "trajectory.pt", "data", factor=5.0)
    recorded = [json.loads(w) for w in pd.read_csv(tmp_path / "rounds.csv").weights]
    variant = spec["monitor"]["variant"]
    a, b = spec["monitor"]["alpha"], spec["monitor"]["beta"]
    for row, want in zip(job["rounds"], recorded, strict=True):
        assert [a + b * r for r in row["ra"][variant]] == pytest.approx(want, rel=1e-9)
    assert set(job["max_pi"]) == set(ratio_stability.READINGS)
