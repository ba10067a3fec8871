"""Ordinary bad input to the CLI: one line and exit status 2 before any work (paths, files, calibrations), and no
training over a reference job."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from conftest import write_job
from fedbalance.cli import main
from fedbalance.common.records import Job

REPO = Path(__file__).resolve().parents[1]
QUICK = str(REPO / "config" / "quick.yaml")
JOB = ["--config", QUICK, "--experiment", "losses", "--dataset", "mnist", "--setting", "g10", "--seed", "0"]


def _one_line(capsys, words: str) -> None:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("usage:") and not line.startswith(" ")]
    assert len(lines) == 1 and words in lines[0] and "Traceback" not in err, err


@pytest.fixture()
def no_work(monkeypatch):
    """Fail the test if data is loaded or a job starts."""
    import fedbalance.data.datasets
    import fedbalance.jobs.run

    def refuse(*args, **kwargs):
        raise AssertionError("work started")

    monkeypatch.setattr(fedbalance.data.datasets, "load_dataset", refuse)
    monkeypatch.setattr(fedbalance.jobs.run, "run_job", refuse)


@pytest.mark.parametrize("argv, words", [
    (["train", *JOB, "--loss", "ce", "--out", ""], "an empty path"),
    (["train", *JOB, "--loss", "ce", "--out", "   "], "an empty path"),
    (["partition", *JOB, "--out", ""], "an empty path"),
    (["train", "--config", "", *JOB[2:], "--loss", "ce", "--out", "x"], "an empty path"),
    (["compare", "--ours", "", "--reference", "x"], "an empty path"),
])
def test_an_empty_path_is_refused(argv, words, capsys, no_work, tmp_path, monkeypatch) -> None:
    """An empty path would be the working folder (``train --out ''`` trained into it)."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    _one_line(capsys, words)
    assert list(tmp_path.iterdir()) == []


def test_partition_out_a_folder_or_below_a_file(tmp_path: Path, capsys, no_work) -> None:
    assert main(["partition", *JOB, "--out", str(tmp_path)]) == 2
    _one_line(capsys, "is a folder; name the partition JSON file")
    (tmp_path / "f").write_text("x")
    assert main(["partition", *JOB, "--out", str(tmp_path / "f" / "p.json")]) == 2
    _one_line(capsys, "is a file, not a folder")


def test_compare_csv_a_folder(tmp_path: Path, capsys) -> None:
    write_job(tmp_path / "a", Job("losses", "mnist", "g10", "ce", 0))
    args = ["compare", "--ours", str(tmp_path / "a"), "--reference", str(tmp_path / "a")]
    assert main([*args, "--csv", str(tmp_path)]) == 2
    _one_line(capsys, "not a file that can be written")
    assert main([*args, "--csv", str(tmp_path / "c.csv")]) == 0


def test_a_config_that_is_not_text(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "c.yaml"
    bad.write_bytes(b"results_dir: \xff\xfe\n")
    assert main(["jobs", "--config", str(bad)]) == 2
    _one_line(capsys, f"{bad}: not a readable text file")


def test_train_never_writes_over_a_reference_job(tmp_path: Path, capsys, no_work) -> None:
    folder = write_job(tmp_path, Job("losses", "mnist", "g10", "ce", 0))
    (folder / "provenance.json").write_text(json.dumps({"commit": "abc"}))
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    assert main(["train", *JOB, "--loss", "ce", "--out", str(folder)]) == 2
    _one_line(capsys, "holds provenance.json: a job of a reference set")
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before


def _calibration(tmp_path: Path) -> dict:
    from fedbalance.jobs import cost
    from fedbalance.jobs.config import load_config

    keys = {w.shape.model_key for w in cost.study_work(load_config(QUICK), None, device_type="cpu")}
    cal = cost.Calibration(device="cpu", device_type="cpu", threads=1, copies=1, startup_s=2.0,
                           probes={k: {"batch": 16, "step_s": 0.01, "forward_s": 0.0001} for k in keys})
    return cal.to_json()


@pytest.mark.parametrize("damage, words", [
    (lambda c: c.update(startup_s=-1.0), "startup_s: -1.0 is not a number of seconds >= 0"),
    (lambda c: c.update(startup_s=math.nan), "startup_s: nan"),
    (lambda c: next(iter(c["probes"].values())).update(step_s=-0.5), ".step_s: -0.5 is not a number of seconds > 0"),
    (lambda c: next(iter(c["probes"].values())).update(forward_s=math.inf), ".forward_s: inf"),
    (lambda c: next(iter(c["probes"].values())).update(batch=0), ".batch: 0 is not a whole number >= 1"),
    (lambda c: next(iter(c["probes"].values())).pop("forward_s"), "must hold batch, step_s and forward_s"),
    (lambda c: c.update(probes=[1, 2]), "probes and steps: must be objects"),
    (lambda c: c.update(steps={"x": "fast"}), "steps.x: 'fast'"),
    (lambda c: c.update(threads="1"), "threads: '1' is not a whole number"),
], ids=["negative-startup", "nan-startup", "negative-step", "inf-forward", "zero-batch", "no-forward", "probes-list",
        "steps-text", "threads-text"])
def test_a_calibration_of_the_wrong_shape_or_bad_seconds_is_refused(tmp_path: Path, capsys, damage, words) -> None:
    path = tmp_path / "cal.json"
    good = _calibration(tmp_path)
    path.write_text(json.dumps(good))
    assert main(["cost", "--config", QUICK, "--calibration", str(path)]) == 0
    assert "h" in capsys.readouterr().out
    damage(good)
    path.write_text(json.dumps(good))
    assert main(["cost", "--config", QUICK, "--calibration", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{path}: calibration " in err and words in err, err
