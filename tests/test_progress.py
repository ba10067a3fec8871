"""Progress of a running job in its log: one plain line per round when stderr is not a terminal."""

from __future__ import annotations

import csv
import re
from datetime import datetime, timedelta, timezone

import pytest
import torch

from fedbalance.jobs.config import load_config, configured_job
from fedbalance.common.records import Job
from fedbalance.jobs.run import progress_line, run_job

torch.set_num_threads(1)

LINE = re.compile(
    r"^(?P<time>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d) (?P<name>\S+) round (?P<done>\d+)/(?P<total>\d+)  acc (?P<acc>\S+)  Ac\.M (?P<acm>\S+)"
    r"(?:  CS (?P<cs>\S+))?  (?P<spr>[0-9.]+) s/round  ETA (?P<eta>\d+:\d\d:\d\d)$"
)


def test_progress_line_fields():
    row = {"acc": 0.61234, "acc_minority": None}
    at = datetime(2025, 3, 4, 5, 6, 7, tzinfo=timezone(timedelta(hours=2)))
    line = progress_line("losses/mnist/g10/ratio/seed0", 3, 30, row, 0.98765, 125.0, now=at)
    assert line == ("2025-03-04T05:06:07+02:00 losses/mnist/g10/ratio/seed0 round 3/30  acc 0.6123  Ac.M -  CS 0.9877"
                    "  125.00 s/round  ETA 0:56:15")
    no_cs = progress_line("j", 30, 30, {"acc": float("nan"), "acc_minority": 0.5}, None, 2.0, now=at)
    assert no_cs.endswith(" j round 30/30  acc -  Ac.M 0.5000  2.00 s/round  ETA 0:00:00")
    before = datetime.now().astimezone().replace(microsecond=0)
    stamp = datetime.fromisoformat(LINE.match(progress_line("j", 1, 2, {}, None, 1.0))["time"])
    assert before <= stamp <= datetime.now().astimezone()
    assert progress_line("j", 1, 100, {}, None, 3600.0).endswith("ETA 99:00:00")


def _tiny() -> dict:
    spec = configured_job(load_config("config/quick.yaml"), Job("losses", "mnist", "g10", "ratio", 0))
    spec["partition"].update(num_clients=4, majority_samples=12)
    spec["monitor"]["aux_per_class"] = 8
    spec.update(clients_per_round=3, rounds=3, batch_size=16, lr=0.05, selection="random", eval_every=1)
    return spec


@pytest.fixture
def logged_to_stderr():
    """The library's messages to stderr at INFO, as the CLI and the workflow's scripts set it (fedbalance.logs)."""
    import logging

    from fedbalance.logs import configure

    handler = configure()
    yield
    logging.getLogger("fedbalance").removeHandler(handler)
    logging.getLogger("py.warnings").removeHandler(handler)
    logging.captureWarnings(False)


def test_without_a_handler_the_library_prints_nothing(tmp_path, capsys, monkeypatch):
    """A library's convention: its log lines go where the application says, nowhere by default (the handlers an
    earlier CLI call of this process set are put aside)."""
    import logging

    monkeypatch.setattr(logging.getLogger("fedbalance"), "handlers", [logging.NullHandler()])
    monkeypatch.setattr(logging.getLogger("fedbalance"), "level", logging.NOTSET)
    run_job(_tiny(), tmp_path / "job", device="cpu")
    assert not [ln for ln in capsys.readouterr().err.splitlines() if LINE.match(ln)]


def test_run_job_logs_one_line_per_round_without_a_terminal(tmp_path, capsys, logged_to_stderr):
    spec = _tiny()

    class Killed(Exception):
        pass

    def kill(state, row):
        if row["round"] == 0:
            raise Killed

    # pytest's captured stderr is not a terminal: progress=None logs plain lines, as under Snakemake
    with pytest.raises(Killed):
        run_job(spec, tmp_path / "job", device="cpu", on_round=kill)
    first = capsys.readouterr().err.splitlines()
    run_job(spec, tmp_path / "job", device="cpu")  # resumes from round 1
    resumed = capsys.readouterr().err.splitlines()
    lines = [m.groupdict() for m in map(LINE.match, first + resumed) if m]
    assert len(lines) == 3, first + resumed
    assert [(d["done"], d["total"]) for d in lines] == [("1", "3"), ("2", "3"), ("3", "3")]
    assert {d["name"] for d in lines} == {"losses/mnist/g10/ratio/seed0"}
    with open(tmp_path / "job" / "rounds.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    estimator = spec["monitor"]["estimators"][0]
    for d, row in zip(lines, rows):
        assert d["acc"] == f"{float(row['acc']):.4f}"
        assert d["acm"] == f"{float(row['acc_minority']):.4f}"
        assert d["cs"] == f"{float(row[f'cs_{estimator}']):.4f}"
        assert float(d["spr"]) > 0
    assert lines[-1]["eta"] == "0:00:00"

    run_job(spec, tmp_path / "quiet", device="cpu", progress=False)
    assert not [ln for ln in capsys.readouterr().err.splitlines() if LINE.match(ln)]
