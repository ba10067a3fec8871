"""The job folder's format in one module (issue 24, item 2): a toy folder written and read back, and its errors."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from fedbalance.jobs import jobfolder
from fedbalance.jobs.aggregate import AggregateError, collect_tidy
from fedbalance.common.records import ROUND_COLUMNS, Job, cs_column, est_column

QUICK = Path(__file__).resolve().parents[1] / "config" / "quick.yaml"

ROWS = [
    {"round": 0, "train_loss": 2.5, "true_composition": [4, 1], est_column("paper"): [3.0, 2.0],
     cs_column("paper"): 0.9, cs_column("uniform"): 0.8, "acknowledged": False},
    {"round": 1, "train_loss": float("nan"), "acc": 0.75, "acc_minority": 0.5, "acc_majority": 1.0, "auc_micro": 0.9,
     "auc_hard": 0.8, "true_composition": [4, 1], est_column("paper"): [4.0, 1.0], cs_column("paper"): 1.0,
     cs_column("uniform"): 0.6, cs_column("toy"): 0.5, est_column("toy"): [1, 1], "acknowledged": True},
]
FINAL = {"train_loss": None, "acc": 0.75, "acc_minority": 0.5, "acc_majority": 1.0, "auc_micro": 0.9, "auc_macro": None,
         "auc_hard": 0.8, "per_class_acc": [1.0, 0.5]}
"""``final`` of a job whose last round is ROWS[1] (class 1 the minority class: Ac.M 0.5, the other class 1.0)."""
JOB = {"experiment": "e", "dataset": "d", "setting": "s", "loss": "ce", "seed": 0}


def test_round_trip(tmp_path):
    metrics = {"job": JOB, "config": {"minority_classes": [1]}, "final": FINAL, "rounds": 2}
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
    metrics = {"job": JOB, "config": {"minority_classes": [1]}, "final": FINAL, "partition": {"class_counts": [[1, 1]]},
               "rounds": 2}
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
    metrics = {"job": {**JOB, "seed": 3}, "config": {"minority_classes": [1]}, "rounds": 2, "final": FINAL,
               "partition": {"class_counts": [[2, 0], [1, 1]], "mean_cs": 0.6, "gamma": 3.0}}
    jobfolder.write(tmp_path / "e/d/s/ce/seed3", metrics, jobfolder.rounds_text(ROWS))
    tidy = collect_tidy(tmp_path)
    assert tidy.final.loc[0, "acc"] == 0.75 and tidy.final.loc[0, "seed"] == 3 and math.isnan(tidy.final.loc[0, "auc_macro"])
    assert list(tidy.rounds["round"]) == [0, 1] and set(tidy.rounds["experiment"]) == {"e"}
    assert tidy.clients[["client", "class", "count"]].values.tolist() == [[0, 0, 2], [1, 0, 1], [1, 1, 1]]
    assert isinstance(tidy.rounds, pd.DataFrame)


def _truncate(folder, keep):
    """Keep rounds.csv's header and its first ``keep`` rows."""
    path = folder / jobfolder.ROUNDS
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:1 + keep]))


def _readers(root, folder):
    """Every reader of a job folder: the jobfolder readers, the tidy frames, compare, twins and the recorded monitor."""
    from fedbalance.jobs.config import ConfigError, configured_job, load_config
    from fedbalance.evidence.reference import compare
    from fedbalance.jobs.replay import recorded
    from fedbalance.jobs.reuse import write_twin

    def twin():
        try:
            write_twin(folder, root.parent / "twin" / "seed0", configured_job(load_config(QUICK), Job.from_path(
                "/".join(folder.parts[-5:]))))
        except ConfigError as exc:
            raise jobfolder.JobFolderError(str(exc)) from exc

    return {"read_metrics": lambda: jobfolder.read_metrics(folder), "read_rounds": lambda: jobfolder.read_rounds(folder),
            "round_records": lambda: jobfolder.round_records(folder), "collect_tidy": lambda: collect_tidy(root),
            "compare": lambda: compare(root, root), "recorded": lambda: recorded(folder), "write_twin": twin}


@pytest.mark.parametrize("keep", [1, 0], ids=["half", "header-only"])
def test_every_reader_refuses_a_truncated_rounds_file(tmp_path, keep):
    """rounds.csv with fewer rows than metrics.json's ``rounds``: every reader names the file and both counts."""
    from conftest import write_job

    root = tmp_path / "res"
    folder = write_job(root, Job("losses", "mnist", "g10", "ce", 0), train_loss=[1.0, 0.8, 0.6, 0.5])
    _truncate(folder, keep)
    for name, read in _readers(root, folder).items():
        with pytest.raises(jobfolder.JobFolderError) as exc:
            read()
        msg = str(exc.value)
        assert "rounds.csv" in msg and f"{keep} rows" in msg and "4 rounds" in msg, (name, msg)
    assert not (tmp_path / "twin").exists()


@pytest.mark.parametrize("edit, words", [
    (lambda m: m.pop("rounds"), "'rounds'"),
    (lambda m: m.pop("config"), "'config'"),
    (lambda m: m.update(rounds="2"), "'rounds'"),
    (lambda m: m.update(job={"experiment": "losses"}), "'dataset'"),
    (lambda m: m["job"].update(seed=3), "losses/mnist/g10/ce/seed3 but it lies in"),
    (lambda m: m["job"].update(setting="g50"), "losses/mnist/g50/ce/seed0 but it lies in"),
], ids=["no-rounds", "no-config", "rounds-text", "job-incomplete", "other-seed", "other-setting"])
def test_every_reader_refuses_metrics_that_do_not_fit_the_folder(tmp_path, edit, words):
    from conftest import write_job

    root = tmp_path / "res"
    folder = write_job(root, Job("losses", "mnist", "g10", "ce", 0))
    metrics = json.loads((folder / jobfolder.METRICS).read_text())
    edit(metrics)
    (folder / jobfolder.METRICS).write_text(json.dumps(metrics))
    for name, read in _readers(root, folder).items():
        with pytest.raises(jobfolder.JobFolderError, match="metrics.json") as exc:
            read()
        assert words in str(exc.value), (name, str(exc.value))


def test_rounds_out_of_order_or_not_integers_are_refused(tmp_path):
    from conftest import write_job

    folder = write_job(tmp_path, Job("losses", "mnist", "g10", "ce", 0), train_loss=[1.0, 0.8, 0.6])
    path = folder / jobfolder.ROUNDS
    header, *rows = path.read_text().splitlines(keepends=True)
    path.write_text(header + rows[0] + rows[1] + rows[1])  # a row repeated: three rows, as metrics.json says
    with pytest.raises(jobfolder.JobFolderError, match="rounds.csv: the rounds are not increasing"):
        jobfolder.read_metrics(folder)
    path.write_text(header + rows[0] + rows[1] + "x," + rows[2].split(",", 1)[1])
    with pytest.raises(jobfolder.JobFolderError, match="rounds.csv: column 'round': bad cell 'x'"):
        jobfolder.read_rounds(folder)


def test_a_seed_copied_under_another_seed_is_not_counted_twice(tmp_path):
    """A seed folder copied to another seed's place is refused by the tidy frames and compare; a copy named like a
    backup (seed1.bak) is no job folder; the same job listed twice is refused, naming both folders."""
    import shutil

    from conftest import write_job
    from fedbalance.evidence.reference import compare

    root = tmp_path / "res"
    for seed, acm in enumerate([0.5, 0.6, 0.7]):
        write_job(root, Job("losses", "mnist", "g10", "ce", seed), acm=acm)
    cell = root / "losses/mnist/g10/ce"
    shutil.copytree(cell / "seed1", cell / "seed1.bak")
    assert [p.name for p in jobfolder.job_folders(root)] == ["seed0", "seed1", "seed2"]
    row = compare(root, root, ["acc_minority"]).iloc[0]
    assert (row.n_ours, row.seeds_ours) == (3, "0,1,2") and row.mean_ours == pytest.approx(60.0)
    shutil.copytree(cell / "seed0", cell / "seed3")
    for read in (lambda: collect_tidy(root), lambda: compare(root, root)):
        with pytest.raises(jobfolder.JobFolderError, match="seed3/metrics.json: its job is losses/mnist/g10/ce/seed0"):
            read()
    shutil.rmtree(cell / "seed3")
    job = Job("losses", "mnist", "g10", "ce", 0)
    with pytest.raises(AggregateError, match="the job losses/mnist/g10/ce/seed0 again"):
        collect_tidy(root, [job, job])
