"""Twin jobs: equal runs found from the resolved specs, trained once, the twin written from its source."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

from conftest import write_job
from fedbalance.jobs.config import ConfigError, load_config, configured_job, twins
from fedbalance.common.records import Job
from fedbalance.jobs.reuse import write_twin

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def quick() -> dict:
    return load_config(ROOT / "config" / "quick.yaml")


def test_twins_of_the_quick_config_by_hand(quick: dict) -> None:
    # read off config/quick.yaml: a sweep's default point with the loss comparison's parameters
    # (alpha 1.0 and beta 0.1 are the defaults; beyond has no params of its own), and the
    # monitor-family jobs whose grid value is the default (bs 32, 2 local epochs, K = 10, T_Ra 1.25), all
    # copied from the monitor family's job, which differs from them only in output keys (empirical: true)
    ratio, ce = Job("losses", "mnist", "g10", "ratio", 0), Job("losses", "mnist", "g10", "ce", 0)
    t125 = Job("monitor", "mnist", "default", "ce", 0)
    expected = {
        Job("t_ra", "mnist", "t1.25", "ce", 0): t125,
        Job("alpha", "mnist", "a1", "ratio", 0): ratio,
        Job("beta", "mnist", "b0.1", "ratio", 0): ratio,
        Job("beyond", "mnist", "g10", "ratio", 0): ratio,
        Job("beyond", "mnist", "g10", "ce", 0): ce,
        Job("batch_size", "mnist", "bs32", "ce", 0): t125,
        Job("local_epochs", "mnist", "ep2", "ce", 0): t125,
        Job("clients_cifar10", "mnist", "k10", "ce", 0): t125,
    }
    assert twins(quick) == expected
    # the source comes first in the config's order of experiments (monitor before t_ra and batch_size there)
    order = list(quick["experiments"])
    assert order.index("monitor") < order.index("t_ra") < order.index("batch_size")
    assert quick["experiments"]["monitor"]["params"]["empirical"] is True


def test_twins_follow_the_config_order_and_any_difference_splits_them(quick: dict) -> None:
    cfg = copy.deepcopy(quick)
    cfg["experiments"] = {k: cfg["experiments"][k] for k in ("beyond", "losses")}  # beyond first now
    got = twins(cfg)
    assert got[Job("losses", "mnist", "g10", "ce", 0)] == Job("beyond", "mnist", "g10", "ce", 0)
    cfg["experiments"]["beyond"]["params"] = {"lr": 0.021}
    assert twins(cfg) == {}
    assert twins(quick, ["losses"]) == {}  # within one family every job differs


def test_job_from_path_round_trips() -> None:
    job = Job("t_ra", "mnist", "t1.25", "ratio_rel", 12)
    assert Job.from_path(job.path) == job
    for bad in ("losses/mnist/g10/ce", "losses/mnist/g10/ce/s0", "a/b/c/d/seed1/x"):
        with pytest.raises(ValueError, match="job folder"):
            Job.from_path(bad)


def _source(tmp: Path, cfg: dict, job: Job) -> Path:
    """A finished job of ``cfg``'s spec for ``job`` (a whole folder: ``jobfolder.check``)."""
    return write_job(tmp, job, config=configured_job(cfg, job))


def test_write_twin_rewrites_the_identity_only(tmp_path: Path, quick: dict) -> None:
    src_job, twin = Job("losses", "mnist", "g10", "ratio", 0), Job("alpha", "mnist", "a1", "ratio", 0)
    folder = _source(tmp_path, quick, src_job)
    out = tmp_path / twin.path
    write_twin(folder, out, configured_job(quick, twin))
    got = json.loads((out / "metrics.json").read_text())
    assert got["job"] == {"experiment": "alpha", "dataset": "mnist", "setting": "a1", "loss": "ratio", "seed": 0}
    assert got["config"] == json.loads(json.dumps(configured_job(quick, twin)))
    source = json.loads((folder / "metrics.json").read_text())
    assert got["final"] == source["final"] and got["wall_time_s"] == source["wall_time_s"] == 1.5
    assert got["reused_from"] == str(folder)
    assert (out / "rounds.csv").read_bytes() == (folder / "rounds.csv").read_bytes()


def test_write_twin_refuses_a_source_of_other_parameters(tmp_path: Path, quick: dict) -> None:
    src_job, twin = Job("losses", "mnist", "g10", "ratio", 0), Job("alpha", "mnist", "a1", "ratio", 0)
    old = copy.deepcopy(quick)
    old["defaults"]["lr"] = 0.5  # the source was trained under an older config
    folder = _source(tmp_path, old, src_job)
    with pytest.raises(ConfigError, match="other parameters"):
        write_twin(folder, tmp_path / twin.path, configured_job(quick, twin))
    assert not (tmp_path / twin.path).exists()
    with pytest.raises(ConfigError, match="cannot reuse"):
        write_twin(tmp_path / "nowhere", tmp_path / "x", configured_job(quick, twin))
