"""The job folder's format in one module (issue 24, item 2): a toy folder written and read back, and its errors."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
import torch

from fedbalance import jobfolder
from fedbalance.aggregate import AggregateError, collect_tidy
from fedbalance.records import ROUND_COLUMNS, cs_column, est_column

ROWS = [
    {"round": 0, "train_loss": 2.5, "true_composition": [4, 1], est_column("paper"): [3.0, 2.0],
     cs_column("paper"): 0.9, cs_column("uniform"): 0.8, "acknowledged": False},
    {"round": 1, "train_loss": float("nan"), "acc": 0.75, "true_composition": [4, 1], est_column("paper"): [4.0, 1.0],
     cs_column("paper"): 1.0, cs_column("uniform"): 0.6, cs_column("toy"): 0.5, est_column("toy"): [1, 1],
     "acknowledged": True},
]


def test_round_trip(tmp_path):
    metrics = {"job": {"experiment": "e", "dataset": "d", "setting": "s", "loss": "ce", "seed": 0}, "final": {"acc": 0.75}}
    folder = tmp_path / "e" / "d" / "s" / "ce" / "seed0"
    assert not jobfolder.finished(folder)
    jobfolder.write(folder, metrics, jobfolder.rounds_text(ROWS))
    assert jobfolder.finished(folder)
    assert jobfolder.job_folders(tmp_path) == [folder]
    assert jobfolder.read_metrics(folder) == metrics
    assert jobfolder.read_metrics(folder / jobfolder.METRICS) == metrics
    header = (folder / jobfolder.ROUNDS).read_text().splitlines()[0].split(",")
    # the built-in columns in records' order, then the toy estimator's pair
    assert header == [*ROUND_COLUMNS, est_column("toy"), cs_column("toy")]
    back = jobfolder.round_records(folder)
    assert [r["round"] for r in back] == [0, 1]
    assert back[0]["train_loss"] == 2.5 and back[1]["train_loss"] is None  # non-finite: empty
    assert back[0]["acc"] is None and back[1]["acc"] == 0.75
    assert back[1][est_column("paper")] == [4.0, 1.0] and back[1][est_column("toy")] == [1, 1]
    assert back[0]["acknowledged"] is False and back[1]["acknowledged"] is True
    assert back[0][cs_column("toy")] is None
    frame = jobfolder.read_rounds(folder)
    assert list(frame["round"]) == [0, 1] and frame["acc"].isna().tolist() == [True, False]


def test_monitor_summary_by_hand():
    s = jobfolder.monitor_summary(ROWS)["mean_cs"]
    assert list(s) == ["paper", "toy", "uniform"]
    assert s["paper"] == pytest.approx((0.9 + 1.0) / 2) and s["toy"] == 0.5 and s["uniform"] == pytest.approx(0.7)
    assert jobfolder.monitor_summary([{"round": 0, "train_loss": 1.0}]) is None


def test_clean():
    value = {"a": np.float32(0.5), "b": torch.tensor([1, 2]), "c": (np.int64(3), float("inf")), 4: np.array([[1.5]]),
             "d": "text", "e": None, "f": True}
    out = jobfolder.clean(value)
    assert out == {"a": 0.5, "b": [1, 2], "c": [3, None], "4": [[1.5]], "d": "text", "e": None, "f": True}
    assert type(out["a"]) is float and type(out["c"][0]) is int
    json.dumps(out, allow_nan=False)


@pytest.mark.parametrize("damage, words", [
    (lambda f: (f / jobfolder.METRICS).unlink(), ["metrics.json", "missing"]),
    (lambda f: (f / jobfolder.METRICS).write_text("{not json"), ["metrics.json", "not valid JSON"]),
    (lambda f: (f / jobfolder.METRICS).write_text("[1, 2]"), ["metrics.json", "object"]),
    (lambda f: (f / jobfolder.ROUNDS).write_text("a,b\n1,2\n"), ["rounds.csv", "'round'"]),
    (lambda f: (f / jobfolder.ROUNDS).write_bytes(b"\xff\xfe\x00round\n"), ["rounds.csv"]),
], ids=["no-metrics", "bad-json", "not-object", "no-round", "binary"])
def test_errors_name_the_file(tmp_path, damage, words):
    folder = tmp_path / "e" / "d" / "s" / "ce" / "seed0"
    metrics = {"job": {"experiment": "e", "dataset": "d", "setting": "s", "loss": "ce", "seed": 0},
               "final": {}, "partition": {"class_counts": [[1, 1]]}}
    jobfolder.write(folder, metrics, jobfolder.rounds_text(ROWS))
    damage(folder)
    with pytest.raises(AggregateError) as exc:
        jobfolder.read_metrics(folder)
        jobfolder.read_rounds(folder)
    for w in words:
        assert w in str(exc.value), str(exc.value)
    assert isinstance(exc.value, jobfolder.JobFolderError)


def test_the_tidy_frames_read_the_folder(tmp_path):
    """aggregate reads what jobfolder wrote: the final row from metrics.json, the rounds from rounds.csv."""
    metrics = {"job": {"experiment": "e", "dataset": "d", "setting": "s", "loss": "ce", "seed": 3},
               "final": {"acc": 0.75, "acc_minority": 0.5}, "partition": {"class_counts": [[2, 0], [1, 1]], "mean_cs": 0.6,
                                                                        "gamma": 3.0}}
    jobfolder.write(tmp_path / "e/d/s/ce/seed3", metrics, jobfolder.rounds_text(ROWS))
    tidy = collect_tidy(tmp_path)
    assert tidy.final.loc[0, "acc"] == 0.75 and tidy.final.loc[0, "seed"] == 3 and math.isnan(tidy.final.loc[0, "auc_hard"])
    assert list(tidy.rounds["round"]) == [0, 1] and set(tidy.rounds["experiment"]) == {"e"}
    assert tidy.clients[["client", "class", "count"]].values.tolist() == [[0, 0, 2], [1, 0, 1], [1, 1, 1]]
    assert isinstance(tidy.rounds, pd.DataFrame)
