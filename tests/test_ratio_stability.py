"""benchmarks/ratio_stability.py: spike counting by hand, and a replay that reproduces the weights a job trained with."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

from fedbalance.jobs.config import load_config, configured_job
from fedbalance.common.records import Job

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
    from fedbalance.jobs.run import run_job

    torch.set_num_threads(1)
    spec = configured_job(load_config(REPO / "config" / "quick.yaml"), Job("losses", "mnist", "g10", "ratio", 0))
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


def _toy_job(root: Path, loss: str, seed: int, acc: list[float], acm: float, weights: list[list[float]] | None) -> Path:
    from fedbalance.jobs import jobfolder

    folder = root / "ratio_stability" / "mnist" / "g50" / loss / f"seed{seed}"
    base = "ratio" if loss.startswith("ratio") else loss
    metrics = {"job": {"experiment": "ratio_stability", "dataset": "mnist", "setting": "g50", "loss": loss, "seed": seed},
               "config": {"experiment": "ratio_stability", "setting": "g50", "loss": loss, "base_loss": base, "seed": seed,
                          "minority_classes": [0]},
               "final": {"acc": acc[-1], "acc_minority": acm, "acc_majority": 0.9 + seed / 100, "auc_hard": 0.95,
                         "train_loss": 0.1, "auc_micro": 0.95, "auc_macro": 0.95,
                         "per_class_acc": [acm] + [0.9 + seed / 100] * 9},
               "rounds": len(acc)}
    rows = [{"round": t, "acc": a, "acc_minority": acm, "acc_majority": 0.9 + seed / 100, "train_loss": 0.1,
             "auc_micro": 0.95, "auc_hard": 0.95, "weights": None if weights is None else weights[t]}
            for t, a in enumerate(acc)]
    jobfolder.write(folder, metrics, jobfolder.rounds_text(rows))
    return folder


def test_the_table_by_hand(tmp_path: Path) -> None:
    """Two Ratio-Loss seeds and a CE job: seeds, mean ± std, the largest π a round trained with, spikes and drops."""
    late = [[1.0, 2.0]] * 4 + [[1.0, 40.0], [1.0, 2.0]]  # round 5 trains with 40: a late spike (t >= LATE = 5)
    spiky = [[1.0, 2.0], [1.0, 2.0], [1.0, 2.0], [1.0, 30.0], [1.0, 2.0], [1.0, 2.0]]  # round 4 trains with 30 (a spike)
    jobs = [ratio_stability.recorded_job(_toy_job(tmp_path, "ratio", 0, [0.5, 0.7, 0.9, 0.9, 0.6, 0.9], 0.80, spiky), 5.0),
            ratio_stability.recorded_job(_toy_job(tmp_path, "ratio", 1, [0.5, 0.7, 0.9, 0.9, 0.9, 0.9], 0.90, late), 5.0),
            ratio_stability.recorded_job(_toy_job(tmp_path, "ce", 0, [0.5, 0.6, 0.7, 0.8, 0.8, 0.8], 0.50, None), 5.0)]
    assert jobs[0]["spike_rounds"] == [4] and jobs[0]["max_pi"] == 30.0 and jobs[0]["drops"] == 1  # 0.9 -> 0.6
    assert jobs[1]["spike_rounds"] == [5] and jobs[1]["max_pi"] == 40.0 and jobs[1]["drops"] == 0
    assert jobs[2]["max_pi"] is None and jobs[2]["last5_acc_minority"] == pytest.approx(0.5)
    lines = ratio_stability.table(jobs).splitlines()
    assert lines[2] == "| 50 | ce | 0 | 50.00 | 50.00 | 90.00 | 0.9500 | – | 0 (0) | 0 | 0 |"
    # Ac.M 80 and 90: mean 85, std 7.07; majority 90 and 91
    assert lines[3] == "| 50 | ratio | 0, 1 | 85.00 ± 7.07 | 85.00 ± 7.07 | 90.50 ± 0.71 | 0.9500 ± 0.0000 | 40.0 | 2 (2) | 1 | 1 |"
