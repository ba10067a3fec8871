"""Aggregation of synthetic job folders: one row per job / per round, clear errors naming the file."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from conftest import write_job

from fedbalance.jobs.aggregate import (
    AggregateError, class_counts, collect, collect_tidy, parse_list, read_clients, read_tidy, write_tidy,
)
from fedbalance.common.records import Job

def test_collect_one_row_per_job_and_round(tmp_path: Path) -> None:
    a = Job("losses", "mnist", "g10", "ce", 0)
    b = Job("losses", "mnist", "g10", "ce", 1)
    write_job(tmp_path, a, acm=0.2, train_loss=[2.0, 1.0, 0.5], cs={"released": [0.9, 0.8, 0.7]})
    # metrics.json's monitor summary is the mean of rounds.csv's columns (jobfolder.check_recorded_twice)
    write_job(tmp_path, b, acm=0.4, train_loss=[3.0, 1.5, 0.25],
              cs={"released": [0.6, 0.5, 0.4], "nnls": [0.92, 0.93, 0.94], "uniform": [0.5, 0.5, 0.5]},
              monitor={"released": 0.5, "nnls": 0.93, "uniform": 0.5})
    final, rounds = collect(tmp_path)
    assert len(final) == 2 and len(rounds) == 6
    assert final.groupby("setting")["acc_minority"].mean().loc["g10"] == pytest.approx(0.3)
    assert final.groupby("setting")["acc_minority"].std().loc["g10"] == pytest.approx(np.std([0.2, 0.4], ddof=1))
    assert final.set_index("seed").loc[1, "mon_cs_nnls"] == pytest.approx(0.93)
    assert np.isnan(final.set_index("seed").loc[0, "mon_cs_paper"])
    assert final["gamma_realised"].tolist() == [5.0, 5.0]
    assert rounds[rounds.seed == 1]["train_loss"].tolist() == [3.0, 1.5, 0.25]
    assert rounds["cs_released"].mean() == pytest.approx(np.mean([0.9, 0.8, 0.7, 0.6, 0.5, 0.4]))
    assert rounds["cs_paper"].isna().all() and rounds[rounds.seed == 0]["cs_nnls"].isna().all()
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


def test_clients_hold_each_partition_once_with_its_class_counts(tmp_path: Path) -> None:
    """clients.csv: one row per positive (client, class) count, once per partition (the losses share it)."""
    a = [[250, 25, 0], [0, 25, 250], [250, 0, 0]]
    b = [[7, 0, 3], [1, 2, 0]]
    for loss in ("ce", "ratio"):
        write_job(tmp_path / "res", Job("losses", "mnist", "g10", loss, 0), class_counts=a)
    write_job(tmp_path / "res", Job("losses", "mnist", "g10", "ce", 1), class_counts=b)
    tidy = collect_tidy(tmp_path / "res")
    paths = write_tidy(tidy.final, tidy.rounds, tmp_path / "tidy", clients=tidy.clients)
    assert [p.name for p in paths] == ["final.csv", "rounds.csv", "clients.csv"]
    clients = read_clients(tmp_path / "tidy")
    assert len(clients) == sum(n > 0 for m in (a, b) for row in m for n in row)
    for seed, m in ((0, a), (1, b)):
        rows = clients[clients.seed == seed]
        got = {(r.client, r["class"]): r["count"] for _, r in rows.iterrows()}
        want = {(c, q): n for c, row in enumerate(m) for q, n in enumerate(row) if n > 0}
        assert got == want
        assert class_counts(clients, "losses", "mnist", "g10", seed).to_numpy().tolist() == m
    assert class_counts(clients, "losses", "mnist", "g10").to_numpy().tolist() == a  # lowest seed
    assert class_counts(clients, "losses", "mnist", "g20") is None
    assert clients.setting.tolist()[0] == "g10" and set(clients.columns) >= {"client", "class", "count"}
