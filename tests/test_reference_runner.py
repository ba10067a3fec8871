"""scripts/reference_jobs.py run: provenance, the deadline window and a checkout without git (a fake trainer)."""

from __future__ import annotations

import argparse
import importlib.util
import json
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

FAKE_MAIN = '''
import json, os, sys, time
args = sys.argv[1:]
arg = lambda name: args[args.index("--" + name) + 1]
out = arg("out")
seed = int(arg("seed"))
time.sleep(float(os.environ["FAKE_SECONDS"]))
os.makedirs(out, exist_ok=True)
open(os.path.join(out, "rounds.csv"), "w").write("round,acc\\n0,0.5\\n")
job = {"experiment": arg("experiment"), "dataset": arg("dataset"), "setting": arg("setting"), "loss": arg("loss"), "seed": seed}
json.dump({"job": job, "config": {"path": "auto"}, "device": "cpu", "threads": 1, "deterministic": False, "rounds": 1,
           "versions": {"torch": "x"}, "path": "sequential", "wall_time_s": 1.0, "final": {"seed": seed}},
          open(os.path.join(out, "metrics.json"), "w"))
'''


def _runner():
    spec = importlib.util.spec_from_file_location("reference_jobs", REPO / "scripts" / "reference_jobs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture()
def checkout(tmp_path: Path) -> Path:
    """A folder without git whose ``src/fedbalance`` is a trainer that sleeps FAKE_SECONDS, then writes metrics.json."""
    pkg = tmp_path / "checkout" / "src" / "fedbalance"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "__main__.py").write_text(FAKE_MAIN)
    return tmp_path / "checkout"


def _args(checkout: Path, out: Path, workers: int = 1) -> argparse.Namespace:
    return argparse.Namespace(checkout=checkout, out=out, config="config/mnist.yaml", dataset="mnist",
                              workers=workers, device="cuda", commit="abc1234", deadline_s=None)


def test_jobs_run_with_the_given_commit_and_record_it(checkout: Path, tmp_path: Path, monkeypatch) -> None:
    rj = _runner()
    monkeypatch.setenv("FAKE_SECONDS", "0")
    args = _args(checkout, tmp_path / "runs")
    jobs = rj.parse_jobs(["losses:g10:ce,ratio:3,4"], "mnist")
    assert jobs[:2] == [("losses", "mnist", "g10", "ce", 3), ("losses", "mnist", "g10", "ratio", 3)]  # seeds outermost
    msgs = [rj.run_one(args, job) for job in jobs]
    assert all(m.startswith("done") for m in msgs), msgs
    prov = json.loads((tmp_path / "runs/losses/mnist/g10/ratio/seed4/provenance.json").read_text())
    assert prov["commit"] == "abc1234" and prov["checkout_dirty"] is False
    assert prov["job"] == "losses/mnist/g10/ratio/seed4" and prov["concurrent_jobs"] == 1
    assert "--device cuda" in prov["command"] and "--seed 4" in prov["command"]
    assert json.loads((tmp_path / "runs/losses/mnist/g10/ratio/seed4/metrics.json").read_text())["final"] == {"seed": 4}
    assert rj.run_one(args, jobs[0]).startswith("skip")  # a finished job is not run again


def test_window_admits_by_the_median_finished_job() -> None:
    rj = _runner()
    assert rj.Window(None).admits() and rj.Window(None).left() is None
    w = rj.Window(100.0)
    assert w.admits()  # nothing finished yet: no estimate, start
    w.walls = [10.0, 500.0, 20.0]  # median 20 s < 100 s left
    assert w.admits()
    w.walls = [150.0, 120.0, 5.0]  # median 120 s > 100 s left
    assert not w.admits()
    assert 99.0 < w.left() <= 100.0


def test_a_job_past_the_deadline_is_stopped_and_no_later_one_starts(checkout: Path, tmp_path: Path, monkeypatch) -> None:
    rj = _runner()
    monkeypatch.setenv("FAKE_SECONDS", "30")
    args = _args(checkout, tmp_path / "runs")
    window = rj.Window(1.5)
    t0 = time.time()
    msg = rj.run_one(args, ("losses", "mnist", "g10", "ce", 0), window)
    assert msg.startswith("stopped at the deadline") and time.time() - t0 < 20
    assert not (tmp_path / "runs/losses/mnist/g10/ce/seed0/metrics.json").exists()
    assert not (tmp_path / "runs/losses/mnist/g10/ce/seed0/provenance.json").exists()
    window.walls = [60.0]
    assert rj.run_one(args, ("losses", "mnist", "g10", "ce", 1), window).startswith("not started (deadline)")
    assert not (tmp_path / "runs/losses/mnist/g10/ce/seed1").exists()


def test_status_counts_seeds_commits_and_minutes_per_device(tmp_path: Path) -> None:
    rj = _runner()
    jobs = [("losses/mnist/g50/ce/seed0", "a" * 40, "cpu", 600.0), ("losses/mnist/g50/ce/seed3", "b" * 40, "cuda (H200)", 180.0),
            ("losses/mnist/g10/ce/seed1", "a" * 40, "cpu", 1200.0), ("losses/mnist/g10/ce/seed0", "a" * 40, "cpu", 900.0)]
    for job, commit, device, wall in jobs:
        (tmp_path / job).mkdir(parents=True)
        (tmp_path / job / "provenance.json").write_text(json.dumps({"commit": commit, "runtime": {"device": device}, "wall_s_job": wall}))
    lines = rj.status_text(tmp_path).splitlines()
    assert lines[2:4] == ["| losses | mnist | g10 | ce | 0, 1 |", "| losses | mnist | g50 | ce | 0, 3 |"]  # Γ order, seeds sorted
    assert lines[-1] == ("4 jobs; commits {'aaaaaaa': 3, 'bbbbbbb': 1}; devices {'cpu': 3, 'cuda (H200)': 1}; "
                         "minutes per job: cpu 10.0–20.0 (median 15.0); cuda (H200) 3.0–3.0 (median 3.0)")


def test_gpu_session_script_runs_jobs_until_its_window_closes_and_archives_them(tmp_path: Path) -> None:
    """scripts/gpu_session.sh on the CPU (DEVICE=cpu, config/quick.yaml, no suite): the finished job comes back in the
    archive with its provenance; a job that the window cannot hold is not started."""
    import os
    import subprocess
    import tarfile

    env = {**os.environ, "DEVICE": "cpu", "CONFIG": "config/quick.yaml", "RUNS": str(tmp_path / "runs")}
    out = tmp_path / "out"
    proc = subprocess.run(["bash", "scripts/gpu_session.sh", str(out), "abc1234", "600", "1", "0", "monitor:default:ce:0,1"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    with tarfile.open(out / "refruns.tgz") as tar:
        names = set(tar.getnames())
        prov = json.load(tar.extractfile("./monitor/mnist/default/ce/seed0/provenance.json"))
    assert {"./monitor/mnist/default/ce/seed0/metrics.json", "./monitor/mnist/default/ce/seed0/rounds.csv"} <= names
    assert prov["commit"] == "abc1234" and prov["runtime"]["device"] == "cpu" and "--device cpu" in prov["command"]
    assert "./monitor/mnist/default/ce/seed1/metrics.json" in names  # 600 s hold both quick jobs
    assert not any(n.endswith("trajectory.pt") or n.endswith(".lock") for n in names)
    assert "2 jobs, 1 workers" in (out / "runner.log").read_text()


def test_a_malformed_job_spec_is_named() -> None:
    rj = _runner()
    for bad in ("losses:g10:ce", "losses:g10:ce:zero", "losses::ce:0", "losses:g10:ce,:0", "losses:g10:ce:-1"):
        with pytest.raises(SystemExit, match="--jobs"):
            rj.parse_jobs([bad], "mnist")


def test_jobs_the_config_does_not_define_stop_the_run_before_any_starts(tmp_path: Path, monkeypatch) -> None:
    """Several specs after one --jobs; a setting or loss the config lacks is named and no job folder is made
    (any seed is allowed: the reference set runs seeds beyond the config's list)."""
    rj = _runner()
    out = tmp_path / "runs"
    argv = ["reference_jobs.py", "run", "--checkout", str(REPO), "--out", str(out), "--config", "config/quick.yaml",
            "--jobs", "monitor:default:ce:7", "losses:g999:ce:0", "monitor:default:nope:1"]
    monkeypatch.setattr("sys.argv", argv)
    with pytest.raises(SystemExit) as exc:
        rj.main()
    msg = str(exc.value)
    assert "losses/mnist/g999/ce" in msg and "monitor/mnist/default/nope" in msg and "nothing was started" in msg
    assert "monitor/mnist/default/ce" not in msg  # defined: seed 7 is fine
    assert not out.exists()
    assert rj.unknown_jobs(REPO / "config" / "quick.yaml", [("monitor", "mnist", "default", "ce", 9)]) == []
    with pytest.raises(SystemExit, match="is not a file"):
        rj.unknown_jobs(tmp_path / "missing.yaml", [])
