"""Aggregation of synthetic job folders: one row per job / per round, clear errors naming the file."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fedbalance.aggregate import AggregateError, collect, parse_list, read_tidy, write_tidy
from fedbalance.config import Job
from fedbalance.records import ROUND_COLUMNS

ROUND_HEADER = list(ROUND_COLUMNS)


def write_job(
    root: Path,
    job: Job,
    *,
    acm: float = 0.5,
    auc: float = 0.9,
    acc_majority: float = 0.95,
    mean_cs: float = 0.7,
    train_loss: list[float] | None = None,
    cs: dict[str, list[float]] | None = None,
    emp: tuple[list[float], list[float]] | None = None,
    class_counts: list[list[int]] | None = None,
    monitor: dict[str, float] | None = None,
) -> Path:
    """Write a synthetic ``metrics.json`` + ``rounds.csv`` for ``job``; return its folder."""
    d = root / job.path
    d.mkdir(parents=True, exist_ok=True)
    train_loss = train_loss or [1.0, 0.5]
    n = len(train_loss)
    counts = class_counts or [[5, 5, 1], [5, 0, 1]]
    metrics = {
        "job": {"experiment": job.experiment, "dataset": job.dataset, "setting": job.setting, "loss": job.loss,
                "seed": job.seed},
        "config": {"partition": {"scheme": "imbalance"}, "minority_classes": [2], "monitor": {}},
        "final": {"acc": 0.9, "acc_minority": acm, "acc_majority": acc_majority, "auc_micro": auc,
                  "auc_hard": auc, "auc_macro": auc - 0.01, "per_class_acc": [0.9, 0.9, acm], "train_loss": train_loss[-1]},
        "partition": {"class_counts": counts, "global_counts": list(np.sum(counts, axis=0).tolist()), "gamma": 5.0,
                      "cs": [mean_cs, mean_cs], "mean_cs": mean_cs, "num_samples": int(np.sum(counts))},
        "monitor": {"mean_cs": monitor} if monitor else None,
        "acknowledged_round": None,
        "device": "cpu",
        "versions": {},
        "wall_time_s": 1.5,
        "rounds": n,
    }
    (d / "metrics.json").write_text(json.dumps(metrics))
    rows = []
    for i in range(n):
        row = {k: "" for k in ROUND_HEADER}
        row.update(round=i + 1, train_loss=train_loss[i], acc=0.9, acc_minority=acm, acc_majority=acc_majority,
                   auc_micro=auc, auc_hard=auc, seconds=0.1, true_composition=json.dumps([10, 6, 2]))
        for k, v in (cs or {}).items():
            row[f"cs_{k}"] = v[i]
        if emp:
            row["emp_cos"], row["emp_cv"] = emp[0][i], emp[1][i]
        rows.append(row)
    pd.DataFrame(rows, columns=ROUND_HEADER).to_csv(d / "rounds.csv", index=False)
    return d


def test_collect_one_row_per_job_and_round(tmp_path: Path) -> None:
    a = Job("losses", "mnist", "g10", "ce", 0)
    b = Job("losses", "mnist", "g10", "ce", 1)
    write_job(tmp_path, a, acm=0.2, train_loss=[2.0, 1.0, 0.5], cs={"released": [0.9, 0.8, 0.7]})
    write_job(tmp_path, b, acm=0.4, train_loss=[3.0, 1.5, 0.25], cs={"released": [0.6, 0.5, 0.4]},
              monitor={"paper": 0.91, "released": 0.92, "nnls": 0.93, "uniform": 0.5})
    final, rounds = collect(tmp_path)
    assert len(final) == 2 and len(rounds) == 6
    assert final.groupby("setting")["acc_minority"].mean().loc["g10"] == pytest.approx(0.3)
    assert final.groupby("setting")["acc_minority"].std().loc["g10"] == pytest.approx(np.std([0.2, 0.4], ddof=1))
    assert final.set_index("seed").loc[1, "mon_cs_nnls"] == pytest.approx(0.93)
    assert np.isnan(final.set_index("seed").loc[0, "mon_cs_paper"])
    assert final["gamma_realised"].tolist() == [5.0, 5.0]
    assert rounds[rounds.seed == 1]["train_loss"].tolist() == [3.0, 1.5, 0.25]
    assert rounds["cs_released"].mean() == pytest.approx(np.mean([0.9, 0.8, 0.7, 0.6, 0.5, 0.4]))
    assert rounds["cs_paper"].isna().all()
    assert parse_list(rounds.loc[0, "true_composition"]) == [10.0, 6.0, 2.0]
    assert parse_list(rounds.loc[0, "est_paper"]) is None
    same, _ = collect(tmp_path, [b])
    assert same["seed"].tolist() == [1]


def test_write_and_read_tidy_round_trip(tmp_path: Path) -> None:
    write_job(tmp_path / "res", Job("alpha", "mnist", "a1", "ratio", 0), acm=0.25)
    final, rounds = collect(tmp_path / "res")
    paths = write_tidy(final, rounds, tmp_path / "tidy")
    assert all(p.is_file() for p in paths)
    f2, r2 = read_tidy(tmp_path / "tidy")
    assert f2.loc[0, "setting"] == "a1" and f2.loc[0, "acc_minority"] == 0.25
    assert len(r2) == len(rounds)


def test_empty_results_give_empty_frames(tmp_path: Path) -> None:
    final, rounds = collect(tmp_path)
    assert final.empty and rounds.empty and "acc_minority" in final.columns and "cs_nnls" in rounds.columns


def test_missing_file_names_it(tmp_path: Path) -> None:
    job = Job("losses", "mnist", "g1", "ce", 0)
    with pytest.raises(AggregateError, match="losses/mnist/g1/ce/seed0/metrics.json"):
        collect(tmp_path, [job])
    d = write_job(tmp_path, job)
    (d / "rounds.csv").unlink()
    with pytest.raises(AggregateError, match="rounds.csv"):
        collect(tmp_path)


def test_corrupt_file_names_it(tmp_path: Path) -> None:
    d = write_job(tmp_path, Job("losses", "mnist", "g1", "ce", 0))
    (d / "metrics.json").write_text("{not json")
    with pytest.raises(AggregateError, match="metrics.json: not valid JSON"):
        collect(tmp_path)
    (d / "metrics.json").write_text(json.dumps({"job": {}}))
    with pytest.raises(AggregateError, match="metrics.json: missing or bad key"):
        collect(tmp_path)
