"""cli: subcommands end to end (in-process) and one-line errors before any training."""

from __future__ import annotations

import json
import runpy
import sys

import pytest
import torch
import yaml

from fedbalance.cli import main
from fedbalance.data.datasets import load_dataset
from fedbalance.jobs.run import load_partitions

torch.set_num_threads(1)
QUICK = "config/quick.yaml"


@pytest.fixture()
def tiny_config(tmp_path) -> str:
    cfg = yaml.safe_load(open(QUICK))
    cfg["defaults"]["partition"].update(majority_samples=12)
    cfg["defaults"].update(clients_per_round=3, rounds=2, batch_size=16)
    cfg["defaults"]["monitor"]["aux_per_class"] = 8
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def job(config: str, *extra: str, loss: str | None = "ratio") -> list[str]:
    args = ["--config", config, "--experiment", "losses", "--dataset", "mnist", "--setting", "g10", "--seed", "0"]
    return args + (["--loss", loss] if loss else []) + list(extra)


def test_jobs_lists_the_study(capsys):
    assert main(["jobs", "--config", QUICK, "--experiment", "early"]) == 0
    out = capsys.readouterr().out.split()
    assert out == ["early/mnist/E/ce/seed0", "early/mnist/S/ce/seed0"]  # quick.yaml: early runs seed 0 only


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--config", QUICK, "--experiment", "nope", "--dataset", "mnist", "--setting", "g10", "--loss", "ce", "--seed", "0"], "unknown experiment 'nope'"),
        (["--config", QUICK, "--experiment", "losses", "--dataset", "cifar10", "--setting", "g10", "--loss", "ce", "--seed", "0"], "unknown dataset 'cifar10'"),
        (["--config", QUICK, "--experiment", "losses", "--dataset", "mnist", "--setting", "g99", "--loss", "ce", "--seed", "0"], "unknown setting 'g99'"),
        (["--config", QUICK, "--experiment", "losses", "--dataset", "mnist", "--setting", "g10", "--loss", "mse", "--seed", "0"], "unknown loss 'mse'"),
        (["--config", "missing.yaml", "--experiment", "losses", "--dataset", "mnist", "--setting", "g10", "--loss", "ce", "--seed", "0"], "missing.yaml does not exist"),
    ],
)
def test_bad_arguments_one_line_error(argv, needle, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["train", *argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1
    assert not out.exists()


def test_missing_data_fails_before_training(tmp_path, capsys):
    cfg = yaml.safe_load(open(QUICK))
    cfg["datasets"]["mnist"]["source"] = "mnist"
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    out = tmp_path / "out"
    rc = main(["train", *job(str(path), "--out", str(out), "--data-dir", str(tmp_path / "empty"))])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "mnist" in err and len(err.splitlines()) == 1
    assert not (out / "metrics.json").exists() and not (out / "checkpoint.pt").exists()


def test_partition_then_train(tiny_config, tmp_path, capsys):
    pfile = tmp_path / "part.json"
    assert main(["partition", *job(tiny_config, "--out", str(pfile), loss=None)]) == 0
    parts = load_partitions(pfile)
    assert list(parts) == ["main"] and parts["main"].num_clients == 10
    out = tmp_path / "run"
    assert main(["train", *job(tiny_config, "--out", str(out), "--partition", str(pfile), "--device", "cpu", "--threads", "1")]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["rounds"] == 2 and metrics["job"]["loss"] == "ratio"
    assert metrics["partition"]["class_counts"] == parts["main"].class_counts(load_dataset("mnist5k").y_train.numpy()).tolist()
    assert (out / "rounds.csv").read_text().count("\n") == 3
    assert "acc" in capsys.readouterr().out


def test_prepare_and_module_help(capsys, monkeypatch):
    assert main(["prepare", "--config", QUICK, "--dataset", "mnist"]) == 0
    assert "mnist5k" in capsys.readouterr().out
    assert main(["prepare", "--config", QUICK, "--dataset", "nope"]) == 2
    monkeypatch.setattr(sys, "argv", ["fedbalance", "train", "--help"])
    with pytest.raises(SystemExit) as exc:
        runpy.run_module("fedbalance", run_name="__main__")
    assert exc.value.code == 0
    help_text = capsys.readouterr().out
    for flag in ("--config", "--experiment", "--dataset", "--setting", "--loss", "--seed", "--out", "--data-dir", "--partition", "--device"):
        assert flag in help_text
