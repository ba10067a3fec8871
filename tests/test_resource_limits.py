"""Limits on what a config or command may ask of the machine: torch threads (config ``threads``, ``train --threads``,
``cost --threads``) between 1 and the machine's CPUs unless FEDBALANCE_MAX_CPUS raises the ceiling; the reference
runner's ``--workers`` likewise (tests/test_reference_runner.py)."""

from __future__ import annotations

import copy
import os
from pathlib import Path

import pytest

from fedbalance.cli import main
from fedbalance.jobs.config import MAX_CPUS_ENV, ConfigError, load_config, max_cpus, read_yaml

QUICK = Path(__file__).resolve().parents[1] / "config" / "quick.yaml"
JOB = ["--config", str(QUICK), "--experiment", "losses", "--dataset", "mnist", "--setting", "g10", "--loss", "ce",
       "--seed", "0"]


def test_the_ceiling_is_the_machine_unless_raised(monkeypatch) -> None:
    monkeypatch.delenv(MAX_CPUS_ENV, raising=False)
    assert max_cpus() == len(os.sched_getaffinity(0))
    monkeypatch.setenv(MAX_CPUS_ENV, "64")
    assert max_cpus() == 64
    for bad in ("0", "-2", "many"):
        monkeypatch.setenv(MAX_CPUS_ENV, bad)
        with pytest.raises(ConfigError, match=MAX_CPUS_ENV):
            max_cpus()


def test_config_threads_above_the_machine_are_refused(monkeypatch) -> None:
    monkeypatch.delenv(MAX_CPUS_ENV, raising=False)
    cfg = copy.deepcopy(read_yaml(QUICK))
    cfg["threads"] = max_cpus() + 1
    with pytest.raises(ConfigError, match=rf"threads: {max_cpus() + 1} torch threads; ask for 1 to {max_cpus()}"):
        load_config(cfg)
    monkeypatch.setenv(MAX_CPUS_ENV, str(max_cpus() + 1))
    assert load_config(cfg)["threads"] == max_cpus()


@pytest.mark.parametrize("threads", ["4096", "0", "-1"])
def test_cli_threads_out_of_range_fail_before_any_work(threads: str, tmp_path: Path, capsys, monkeypatch) -> None:
    import fedbalance.jobs.cost
    import fedbalance.jobs.run

    def refuse(*args, **kwargs):
        raise AssertionError("work started")

    monkeypatch.delenv(MAX_CPUS_ENV, raising=False)
    monkeypatch.setattr(fedbalance.jobs.run, "run_job", refuse)
    monkeypatch.setattr(fedbalance.jobs.cost, "calibrate", refuse)
    assert main(["train", *JOB, "--out", str(tmp_path / "out"), "--threads", threads]) == 2
    assert f"--threads: {threads} torch threads; ask for 1 to" in capsys.readouterr().err
    assert main(["cost", "--config", str(QUICK), "--threads", threads]) == 2
    assert f"--threads: {threads} torch threads" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
