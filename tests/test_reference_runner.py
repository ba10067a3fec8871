"""scripts/reference_jobs.py: provenance (also of a job whose runner died), the deadline window, a checkout without git
(a fake trainer), and every bad argument as one line and exit status 2 before anything is written."""

from __future__ import annotations

import argparse
import importlib.util
import json
import time
from pathlib import Path

import pytest

from conftest import seal_set, write_job
from fedbalance.records import Job

REPO = Path(__file__).resolve().parents[1]

FAKE_MAIN = '''
import json, os, sys, time
args = sys.argv[1:]
arg = lambda name: args[args.index("--" + name) + 1]
out = arg("out")
seed = int(arg("seed"))
open(os.path.join(out, "fake.pid"), "w").write(str(os.getpid()))
time.sleep(float(os.environ["FAKE_SECONDS"]))
os.makedirs(out, exist_ok=True)
open(os.path.join(out, "rounds.csv"), "w").write("round,acc\\n0,0.5\\n")
job = {"experiment": arg("experiment"), "dataset": arg("dataset"), "setting": arg("setting"), "loss": arg("loss"), "seed": seed}
json.dump({"job": job, "config": {"path": "auto"}, "device": "cpu", "threads": 1, "deterministic": False, "rounds": 1,
           "versions": {"torch": "x"}, "path": "sequential", "wall_time_s": 1.0, "final": {"seed": seed}},
          open(os.path.join(out, "metrics.json"), "w"))
'''


def _spec_of(config: Path, job: Job) -> dict:
    from fedbalance.config import load_config, resolve_job

    return resolve_job(load_config(config), job).as_dict()


def _head() -> str:
    """This checkout's commit (``--commit`` on a git checkout must be its HEAD)."""
    import subprocess

    return subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()


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
                              workers=workers, device="cuda", commit="abc1234", deadline_s=None, capture=False)


def test_jobs_run_with_the_given_commit_and_record_it(checkout: Path, tmp_path: Path, monkeypatch) -> None:
    rj = _runner()
    monkeypatch.setenv("FAKE_SECONDS", "0")
    args = _args(checkout, tmp_path / "runs")
    jobs = rj.parse_jobs(["losses:g10:ce,ratio:3,4"], "mnist")
    assert jobs[:2] == [("losses", "mnist", "g10", "ce", 3), ("losses", "mnist", "g10", "ratio", 3)]  # seeds outermost
    msgs = [rj.run_one(args, job) for job in jobs]
    assert all(m.startswith("done") for m in msgs), msgs
    prov = json.loads((tmp_path / "runs/losses/mnist/g10/ratio/seed4/provenance.json").read_text())
    assert prov["commit"] == "abc1234" and prov["checkout_dirty"] is None  # a copy without git: its state unknown
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


def test_gpu_session_script_without_jobspecs_runs_the_sets_missing_jobs(tmp_path: Path) -> None:
    """No JOBSPEC: the runner is handed every job that `missing` lists for the (here empty) set, in its order; a window
    of 1 s is spent before the jobs (the deadline is 0, not negative), so none runs on."""
    import os
    import re
    import subprocess
    import sys

    (tmp_path / "ref").mkdir()
    env = {**os.environ, "DEVICE": "cpu", "CONFIG": "config/quick.yaml", "RUNS": str(tmp_path / "runs"),
           "REFERENCE": str(tmp_path / "ref"), "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    out = tmp_path / "out"
    proc = subprocess.run(["bash", "scripts/gpu_session.sh", str(out), _head(), "1", "1", "0"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    listed = int(re.search(r"^(\d+) jobs to run: early::0,1,2 ", (out / "missing.log").read_text()).group(1))
    ran = re.search(r"^(\d+) jobs to train, (\d+) to branch from another's rounds, (\d+) to derive",
                    (out / "runner.log").read_text(), re.M)
    assert listed > 20 and sum(map(int, ran.groups())) == listed
    assert "no JOBSPEC: the " in proc.stdout
    skipped = re.findall(r"not started \(deadline\) .*/runs/(\S+)", (out / "runner.log").read_text())
    # in the plan's order: early first (quick.yaml: E and S, seed 0), E (the source S branches from) followed at once
    # by S, then t_ra: the monitor job its jobs derive from (not in the plan: trained in their place), then them; mfe
    assert skipped[:5] == ["early/mnist/E/ce/seed0", "early/mnist/S/ce/seed0", "monitor/mnist/default/ce/seed0",
                           "t_ra/mnist/t2/ce/seed0", "mfe/mnist/c2/mfe/seed0"]
    assert not (tmp_path / "runs").exists()


def test_status_counts_seeds_commits_and_minutes_per_device(tmp_path: Path) -> None:
    rj = _runner()
    jobs = [("losses/mnist/g50/ce/seed0", "a" * 40, "cpu", 600.0), ("losses/mnist/g50/ce/seed3", "b" * 40, "cuda (H200)", 180.0),
            ("losses/mnist/g10/ce/seed1", "a" * 40, "cpu", 1200.0), ("losses/mnist/g10/ce/seed0", "a" * 40, "cpu", 900.0)]
    for job, commit, device, wall in jobs:
        write_job(tmp_path, Job.from_path(job))
        (tmp_path / job / "provenance.json").write_text(json.dumps({"commit": commit, "runtime": {"device": device}, "wall_s_job": wall}))
    seal_set(tmp_path, REPO / "config" / "mnist.yaml")
    lines = rj.status_text(tmp_path).splitlines()
    assert lines[2:4] == ["| losses | mnist | g10 | ce | 0, 1 |", "| losses | mnist | g50 | ce | 0, 3 |"]  # Γ order, seeds sorted
    assert lines[-1] == ("4 jobs; commits {'aaaaaaa': 3, 'bbbbbbb': 1}; devices {'cpu': 3, 'cuda (H200)': 1}; "
                         "minutes per job: cpu 10.0–20.0 (median 15.0); cuda (H200) 3.0–3.0 (median 3.0)")


def test_gpu_session_script_runs_jobs_until_its_window_closes_and_archives_them(tmp_path: Path) -> None:
    """scripts/gpu_session.sh on the CPU (DEVICE=cpu, config/quick.yaml, no suite, CAPTURE=1): the finished job comes
    back in the archive with its provenance (trained with --capture); a job that the window cannot hold is not started."""
    import os
    import subprocess
    import tarfile

    import sys

    env = {**os.environ, "DEVICE": "cpu", "CONFIG": "config/quick.yaml", "RUNS": str(tmp_path / "runs"), "CAPTURE": "1",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}  # the script's `python` is ours
    out = tmp_path / "out"
    proc = subprocess.run(["bash", "scripts/gpu_session.sh", str(out), _head(), "600", "1", "0", "monitor:default:ce:0,1"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    with tarfile.open(out / "refruns.tgz") as tar:
        names = set(tar.getnames())
        prov = json.load(tar.extractfile("./monitor/mnist/default/ce/seed0/provenance.json"))
    assert {"./monitor/mnist/default/ce/seed0/metrics.json", "./monitor/mnist/default/ce/seed0/rounds.csv"} <= names
    assert prov["commit"] == _head() and prov["runtime"]["device"] == "cpu" and "--device cpu --capture" in prov["command"]
    assert "./monitor/mnist/default/ce/seed1/metrics.json" in names  # 600 s hold both quick jobs
    assert not any(n.endswith("trajectory.pt") or n.endswith(".lock") for n in names)
    assert "2 jobs to train, 0 to branch from another's rounds, 0 to derive from their trajectories, 1 workers" in (out / "runner.log").read_text()


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


def _script(*argv: str, env: dict | None = None, cwd: Path = REPO, timeout: int = 120):
    import os
    import subprocess
    import sys

    return subprocess.run([sys.executable, str(REPO / "scripts" / "reference_jobs.py"), *argv], capture_output=True,
                          text=True, cwd=cwd, env={**os.environ, **(env or {})}, timeout=timeout)


def _wait_for(path: Path, seconds: float = 60.0) -> None:
    end = time.time() + seconds
    while not path.exists():
        assert time.time() < end, f"{path} did not appear"
        time.sleep(0.1)


def _run_args(checkout: Path, out: Path, *jobs: str) -> list[str]:
    return ["run", "--checkout", str(checkout), "--commit", "abc1234", "--out", str(out), "--config", "config/quick.yaml",
            "--workers", "1", "--jobs", *jobs]


@pytest.fixture()
def quick_checkout(checkout: Path) -> Path:
    """The fake trainer's checkout with config/quick.yaml (the runner checks the jobs against it)."""
    (checkout / "config").mkdir()
    (checkout / "config" / "quick.yaml").write_text((REPO / "config" / "quick.yaml").read_text())
    return checkout


def test_a_job_whose_runner_died_is_recorded_from_its_start_record(quick_checkout: Path, tmp_path: Path) -> None:
    """The runner killed (SIGKILL) while its job runs: the job finishes as an orphan; the next run records its
    provenance from the start record (commit, command) and metrics.json, and collect copies it."""
    import os
    import signal
    import subprocess
    import sys

    out, job = tmp_path / "runs", tmp_path / "runs" / "monitor/mnist/default/ce/seed0"
    env = {**os.environ, "FAKE_SECONDS": "3"}
    runner = subprocess.Popen([sys.executable, str(REPO / "scripts" / "reference_jobs.py"),
                               *_run_args(quick_checkout, out, "monitor:default:ce:0")], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _wait_for(job / "fake.pid")
    start = json.loads((job / "provenance.pending.json").read_text())
    assert start["commit"] == "abc1234" and "--seed 0" in start["command"] and "started" in start
    runner.send_signal(signal.SIGKILL)
    runner.wait()
    _wait_for(job / "metrics.json")
    time.sleep(0.5)
    assert not (job / "provenance.json").exists()
    again = _script(*_run_args(quick_checkout, out, "monitor:default:ce:0"), env={"FAKE_SECONDS": "0"})
    assert again.returncode == 0 and "recovered" in again.stdout and "skip" not in again.stdout, again.stdout + again.stderr
    prov = json.loads((job / "provenance.json").read_text())
    assert prov["commit"] == "abc1234" and prov["command"] == start["command"] and prov["started"] == start["started"]
    assert prov["runtime"]["device"] == "cpu" and prov["wall_s_this_process"] is None and "recovered" in prov
    assert not (job / "provenance.pending.json").exists()
    assert _script(*_run_args(quick_checkout, out, "monitor:default:ce:0")).stdout.count("skip") == 1
    ref = tmp_path / "ref"
    refused = _script("collect", "--out", str(out), "--reference", str(ref), "--config", str(REPO / "config/quick.yaml"))
    assert refused.returncode == 2 and "another protocol than the set's config" in refused.stderr and not ref.exists()
    metrics = json.loads((job / "metrics.json").read_text())  # the fake trainer's config is no spec: make it quick.yaml's
    metrics["config"] = _spec_of(REPO / "config/quick.yaml", Job.from_path("monitor/mnist/default/ce/seed0"))
    (job / "metrics.json").write_text(json.dumps(metrics))
    collected = _script("collect", "--out", str(out), "--reference", str(ref), "--config", str(REPO / "config/quick.yaml"))
    assert collected.returncode == 0 and "1 finished jobs" in collected.stdout, collected.stdout + collected.stderr
    assert json.loads((ref / "monitor/mnist/default/ce/seed0/provenance.json").read_text())["commit"] == "abc1234"


def test_a_finished_job_without_any_record_is_never_reported_done(quick_checkout: Path, tmp_path: Path) -> None:
    out = tmp_path / "runs"
    write_job(out, Job("monitor", "mnist", "default", "ce", 0))
    run = _script(*_run_args(quick_checkout, out, "monitor:default:ce:0"), env={"FAKE_SECONDS": "0"})
    assert run.returncode == 1 and "FAILED" in run.stdout and "nothing records which code ran it" in run.stdout
    assert "skip" not in run.stdout and "done" not in run.stdout
    collected = _script("collect", "--out", str(out), "--reference", str(tmp_path / "ref"))
    assert collected.returncode == 1 and "1 finished job(s) without provenance not collected" in collected.stderr
    assert not (tmp_path / "ref").exists() or not any((tmp_path / "ref").rglob("*.json"))


def test_sigterm_stops_the_running_jobs_with_the_runner(quick_checkout: Path, tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import sys

    out, job = tmp_path / "runs", tmp_path / "runs" / "monitor/mnist/default/ce/seed0"
    runner = subprocess.Popen([sys.executable, str(REPO / "scripts" / "reference_jobs.py"),
                               *_run_args(quick_checkout, out, "monitor:default:ce:0,1")],
                              env={**os.environ, "FAKE_SECONDS": "60"}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    _wait_for(job / "fake.pid")
    child = int((job / "fake.pid").read_text())
    runner.send_signal(signal.SIGTERM)
    stdout, stderr = runner.communicate(timeout=30)
    assert runner.returncode == 2 and "stopped by signal" in stderr and "Traceback" not in stderr, stdout + stderr
    time.sleep(0.5)
    with pytest.raises(ProcessLookupError):
        os.kill(child, 0)
    assert not (out / "monitor/mnist/default/ce/seed1").exists()  # no further job started


def _bad_inputs(tmp_path: Path, checkout: Path) -> list[tuple[list[str], str]]:
    """(arguments, words of the one-line error) of ordinary bad inputs to every subcommand."""
    runs, ref, empty, afile = tmp_path / "runs", tmp_path / "ref", tmp_path / "empty", tmp_path / "afile"
    empty.mkdir()
    afile.write_text("x")
    nogit = tmp_path / "nogit"
    (nogit / "src" / "fedbalance").mkdir(parents=True)
    (nogit / "config").mkdir()
    (nogit / "config" / "quick.yaml").write_text((REPO / "config" / "quick.yaml").read_text())
    run = ["run", "--checkout", str(checkout), "--out", str(runs), "--config", "config/quick.yaml", "--commit", "abc1234"]
    good = ["--jobs", "monitor:default:ce:0"]
    write_job(runs, Job("monitor", "mnist", "default", "ce", 0))
    (runs / "monitor/mnist/default/ce/seed0/provenance.json").write_text("{not json")
    torn = tmp_path / "torn"
    job = write_job(torn, Job("monitor", "mnist", "default", "ce", 1), train_loss=[1.0, 0.5, 0.2])
    (job / "provenance.json").write_text(json.dumps({"commit": "abc"}))
    (job / "rounds.csv").write_text((job / "rounds.csv").read_text().splitlines(keepends=True)[0])
    seal_set(torn, REPO / "config" / "quick.yaml")
    badprov = tmp_path / "badprov"
    (write_job(badprov, Job("monitor", "mnist", "default", "ce", 0)) / "provenance.json").write_text("{not json")
    seal_set(badprov, REPO / "config" / "quick.yaml")
    return [
        ([*run, "--workers", "0", *good], "--workers 0: must be 1 to"),
        ([*run, "--workers", "100000", *good], "--workers 100000: must be 1 to"),
        ([*run, "--deadline-s", "nan", *good], "--deadline-s nan"),
        ([*run, "--deadline-s", "-5", *good], "--deadline-s -5.0"),
        (["run", "--checkout", str(nogit), "--out", str(runs), "--config", "config/quick.yaml", *good], "no commit to record"),
        (["run", "--checkout", str(tmp_path / "missing"), "--out", str(runs), *good], "no src/fedbalance"),
        ([*run[:3], "--out", str(afile), *run[5:], *good], "is a file"),
        ([*run[:3], "--out", str(REPO / "reference" / "mnist"), *run[5:], *good], "lies in"),
        ([*run[:3], "--out", "", *run[5:], *good], "an empty path"),
        ([*run, "--device", "gpu", *good], "invalid choice"),
        ([*run, "--jobs", "monitor:default:ce"], "--jobs"),
        (["collect", "--out", str(tmp_path / "missing"), "--reference", str(ref)], "not a folder"),
        (["collect", "--out", str(empty), "--reference", str(ref)], "holds no finished job"),
        (["collect", "--out", str(runs), "--reference", str(runs)], "the same folder"),
        (["collect", "--out", str(runs), "--reference", str(ref)], "provenance.json: not a provenance record"),
        (["collect", "--out", str(torn), "--reference", str(ref)], "rounds.csv: 0 rows"),
        (["collect", "--out", str(torn), "--reference", str(afile)], "is a file"),
        (["status", "--reference", str(tmp_path / "missing")], "not a folder"),
        (["status", "--reference", str(empty)], "holds no job"),
        (["status", "--reference", str(runs)], "an unsealed reference set"),
        (["status", "--reference", str(badprov)], "not a provenance record"),
        (["status", "--reference", str(torn)], "rounds.csv: 0 rows"),
        (["docs", "--rendered", str(empty), "--reference", str(ref), "--docs", str(empty)], "render the reference set first"),
    ]


def test_every_bad_argument_is_one_line_and_exit_2(quick_checkout: Path, tmp_path: Path) -> None:
    """Each ordinary bad input: exit status 2, one error line (argparse's usage line besides), no traceback, and
    nothing collected or run."""
    for argv, words in _bad_inputs(tmp_path, quick_checkout):
        r = _script(*argv, env={"FAKE_SECONDS": "0"})
        err = [line for line in r.stderr.splitlines() if line.strip() and not line.startswith("usage:")
               and not line.startswith(" ")]
        assert r.returncode == 2 and len(err) == 1 and words in err[0], (argv, r.returncode, r.stdout, r.stderr)
    assert not (tmp_path / "ref").exists()
    assert not (tmp_path / "runs" / "monitor/mnist/default/ce/seed0" / "train.log").exists()


def test_collect_replaces_a_different_job_only_on_purpose(tmp_path: Path) -> None:
    runs, ref = tmp_path / "runs", tmp_path / "ref"
    mnist = REPO / "config" / "mnist.yaml"
    for root, acm in ((runs, 0.5), (ref, 0.7)):
        job = write_job(root, Job("losses", "mnist", "g10", "ce", 0), acm=acm, spec_of=mnist)
        (job / "provenance.json").write_text(json.dumps({"commit": "abc", "runtime": {"device": "cpu"}}))
    seal_set(ref, mnist)
    before = (ref / "losses/mnist/g10/ce/seed0/metrics.json").read_bytes()
    r = _script("collect", "--out", str(runs), "--reference", str(ref))
    assert r.returncode == 2 and "would replace them; pass --replace" in r.stderr
    assert "final.acc_minority 0.7 -> 0.5" in r.stderr  # what a replacement would change, named
    assert (ref / "losses/mnist/g10/ce/seed0/metrics.json").read_bytes() == before
    r = _script("collect", "--out", str(runs), "--reference", str(ref), "--replace")
    assert r.returncode == 2 and "--replace needs --reason" in r.stderr
    r = _script("collect", "--out", str(runs), "--reference", str(ref), "--replace", "--reason", "rerun on purpose")
    assert r.returncode == 0, r.stderr
    assert (ref / "losses/mnist/g10/ce/seed0/metrics.json").read_bytes() == (runs / "losses/mnist/g10/ce/seed0/metrics.json").read_bytes()
    prov = json.loads((ref / "losses/mnist/g10/ce/seed0/provenance.json").read_text())
    assert prov["replaced"][0]["reason"] == "rerun on purpose" and len(prov["replaced"][0]["previous_sha256"]) == 2
    # collected again, unchanged: the record of the replacement stays (the run's own provenance.json lacks it)
    held = (ref / "losses/mnist/g10/ce/seed0/provenance.json").read_bytes()
    r = _script("collect", "--out", str(runs), "--reference", str(ref))
    assert r.returncode == 0 and "(0 replaced)" in r.stdout, r.stderr
    assert (ref / "losses/mnist/g10/ce/seed0/provenance.json").read_bytes() == held
    from fedbalance import seal

    seal.verify(ref)  # collect sealed the set again


def _render(root: Path, jobs: list[Job]) -> Path:
    """A stand-in for a render: the files `docs` reads first, final.csv holding ``jobs``."""
    import pandas as pd

    (root / "tables").mkdir(parents=True)
    (root / "tables" / "Fidelity.md").write_text("| x |\n")
    (root / "tables" / "Reproduction.md").write_text("- x\n")
    (root / "claims.md").write_text("# claims\n\nx\n")
    (root / "aggregate").mkdir()
    pd.DataFrame([{"experiment": j.experiment, "dataset": j.dataset, "setting": j.setting, "loss": j.loss, "seed": j.seed}
                  for j in jobs]).to_csv(root / "aggregate" / "final.csv", index=False)
    return root


def test_docs_refuse_a_render_of_another_or_a_smaller_set(tmp_path: Path) -> None:
    """docs splices only a render of the set it names, holding no fewer jobs than the docs were rendered from."""
    rj = _runner()
    ref, docs = tmp_path / "ref", tmp_path / "docs"
    jobs = [Job("losses", "mnist", "g10", "ce", s) for s in (0, 1, 2)]
    for job in jobs:
        (write_job(ref, job) / "provenance.json").write_text(json.dumps({"commit": "abc", "runtime": {"device": "cpu"}}))
    seal_set(ref, REPO / "config" / "mnist.yaml")
    docs.mkdir()
    (docs / "fidelity.md").write_text("`tables/Fidelity.md` of the render of the 3 `losses` jobs of ref (commits x):\n")
    (docs / "claims-mnist.md").write_text("`claims.md` of the render of the 3 jobs of ref (commits x):\n")
    rj.check_render(_render(tmp_path / "full", jobs), ref, docs, allow_fewer=False)  # the set as it was rendered
    with pytest.raises(SystemExit, match="lacks 1 of the 3 jobs of"):
        rj.check_render(_render(tmp_path / "other", jobs[:2]), ref, docs, allow_fewer=False)
    import shutil

    shutil.rmtree(ref / jobs[2].path)
    with pytest.raises(SystemExit, match="files differ from MANIFEST.sha256: 3 missing"):
        rj.check_render(_render(tmp_path / "smaller", jobs[:2]), ref, docs, allow_fewer=False)  # removed by hand
    seal_set(ref, REPO / "config" / "mnist.yaml")  # removed on purpose (and sealed again)
    with pytest.raises(SystemExit, match="holds 2 `losses` jobs, but .*fidelity.md was rendered from 3"):
        rj.check_render(tmp_path / "smaller", ref, docs, allow_fewer=False)
    rj.check_render(tmp_path / "smaller", ref, docs, allow_fewer=True)
    for job in jobs[:2]:
        shutil.rmtree(ref / job.path)
    seal_set(ref, REPO / "config" / "mnist.yaml")
    with pytest.raises(SystemExit, match="holds no job"):
        rj.check_render(tmp_path / "smaller", ref, docs, allow_fewer=True)


def test_twins_are_not_run_and_derived_jobs_follow_their_source(tmp_path: Path, monkeypatch, capsys) -> None:
    """The real trainer on config/quick.yaml: t_ra/t1.25 copies the monitor family's job (not run), t_ra/t2 is derived
    from its trajectory after the runner trains it (added to the jobs: it was not asked for)."""
    from fedbalance.jobfolder import read_metrics, round_records

    rj = _runner()
    monkeypatch.setattr("sys.argv", ["reference_jobs.py", "run", "--checkout", str(REPO), "--out", str(tmp_path / "runs"),
                                     "--config", "config/quick.yaml", "--device", "cpu",
                                     "--workers", "1", "--jobs", "t_ra:t2,t1.25:ce:0"])
    assert rj.main() == 0
    out = capsys.readouterr().out
    assert "twin t_ra/mnist/t1.25/ce/0 of monitor/mnist/default/ce/0" in out
    assert "1 jobs to train, 0 to branch from another's rounds, 1 to derive" in out
    runs = tmp_path / "runs"
    assert not (runs / "t_ra/mnist/t1.25").exists()
    source, derived = runs / "monitor/mnist/default/ce/seed0", runs / "t_ra/mnist/t2/ce/seed0"
    assert (source / "trajectory.pt").is_file()
    prov = json.loads((derived / "provenance.json").read_text())
    assert prov["command"].startswith("python -m fedbalance derive ") and "--source RUNS/monitor/mnist/default/ce/seed0" \
        in prov["command"]
    assert prov["derived_from"] == "monitor/mnist/default/ce/seed0" and prov["commit"] == _head()
    m = read_metrics(derived)
    assert m["derived_from"] == "monitor/mnist/default/ce/seed0" and m["config"]["monitor"]["t_ra"] == 2.0
    # the same training, another monitor: accuracy columns equal, the threshold's own weights
    src_rows, der_rows = round_records(source), round_records(derived)
    assert [r["acc"] for r in der_rows] == [r["acc"] for r in src_rows]
    assert [r["weights"] for r in der_rows] != [r["weights"] for r in src_rows]
    assert prov["wall_s_job"] == prov["wall_s_this_process"]


def test_branched_jobs_start_from_their_source_s_kept_rounds(quick_checkout: Path, tmp_path: Path, monkeypatch,
                                                             capsys) -> None:
    """quick.yaml's early S and E differ in switch_round only (3 and 14): E trains first keeping its state after 3
    rounds, S starts from it (``--branch-from``); a source finished without that state lets S train from round 0."""
    main = quick_checkout / "src" / "fedbalance" / "__main__.py"
    main.write_text(FAKE_MAIN + '''
json.dump(args, open(os.path.join(out, "argv.json"), "w"))
if "--keep-rounds" in args:
    for r in arg("keep-rounds").split(","):
        open(os.path.join(out, "branch-r%03d.pt" % int(r)), "w").write("state")
''')
    monkeypatch.setenv("FAKE_SECONDS", "0")
    rj = _runner()
    runs = tmp_path / "runs"
    monkeypatch.setattr("sys.argv", ["reference_jobs.py", *_run_args(quick_checkout, runs, "early:S,E:ce:0")])
    assert rj.main() == 0
    out = capsys.readouterr().out
    assert "1 jobs to train, 1 to branch from another's rounds, 0 to derive" in out
    assert out.index("done " + str(runs / "early/mnist/E/ce/seed0")) < out.index("done " + str(runs / "early/mnist/S/ce/seed0"))
    e, s = runs / "early/mnist/E/ce/seed0", runs / "early/mnist/S/ce/seed0"
    e_argv, s_argv = (json.loads((d / "argv.json").read_text()) for d in (e, s))
    assert e_argv[e_argv.index("--keep-rounds") + 1] == "3" and "--branch-from" not in e_argv
    assert s_argv[s_argv.index("--branch-from") + 1] == str(e.resolve()) and "--keep-rounds" not in s_argv
    prov = json.loads((s / "provenance.json").read_text())
    assert prov["branched_from"] == "early/mnist/E/ce/seed0" and "--branch-from RUNS/early/mnist/E/ce/seed0" in prov["command"]
    assert "branched_from" not in json.loads((e / "provenance.json").read_text())

    (e / "branch-r003.pt").unlink()
    for f in s.iterdir():
        f.unlink()
    assert rj.main() == 0
    s_argv = json.loads((s / "argv.json").read_text())
    assert "--branch-from" not in s_argv and "branched_from" not in json.loads((s / "provenance.json").read_text())


def test_a_job_that_waits_for_another_runs_as_soon_as_that_one_ends() -> None:
    """One worker, jobs a, b, c queued and d waiting for a, e for d, f for a job not in the run: d runs right after a
    and e after d, ahead of b and c; f runs in its place in the queue; every line is reported as its job ends."""
    rj = _runner()
    order: list[str] = []

    def task(name: str, after: str | None = None):
        def call() -> str:
            order.append(name)
            return f"done {name}"
        return rj.Task((name, "", "", "", 0), call, None if after is None else (after, "", "", "", 0))

    tasks = [task("a"), task("b"), task("f", "z"), task("c"), task("d", "a"), task("e", "d")]
    reported: list[str] = []
    assert rj.run_tasks(tasks, 1, reported.append) == [f"done {n}" for n in "adebfc"]
    assert order == list("adebfc") and reported == [f"done {n}" for n in order]


def test_branched_jobs_do_not_wait_for_the_rest_of_the_run(quick_checkout: Path, tmp_path: Path, monkeypatch,
                                                          capsys) -> None:
    """early E and S of seed 0 listed before a losses job, one worker: S (branched from E) runs right after E, before
    the losses job, not after every trained job of the run."""
    monkeypatch.setenv("FAKE_SECONDS", "0")
    rj = _runner()
    runs = tmp_path / "runs"
    monkeypatch.setattr("sys.argv", ["reference_jobs.py", *_run_args(quick_checkout, runs, "early:S,E:ce:0",
                                                                     "losses:g10:ce:0")])
    assert rj.main() == 0
    done = [line.split()[2] for line in capsys.readouterr().out.splitlines() if line.split()[1:2] == ["done"]]
    assert done == [str(runs / p) for p in ("early/mnist/E/ce/seed0", "early/mnist/S/ce/seed0",
                                            "losses/mnist/g10/ce/seed0")]


def test_a_source_not_asked_for_trains_where_its_first_branched_job_stands(quick_checkout: Path, tmp_path: Path,
                                                                             monkeypatch, capsys) -> None:
    """early S of seed 0 (branched from E, not asked for) listed before a losses job, one worker: E trains in S's
    place, then S, then the losses job; not E after every other trained job of the run."""
    monkeypatch.setenv("FAKE_SECONDS", "0")
    rj = _runner()
    runs = tmp_path / "runs"
    monkeypatch.setattr("sys.argv", ["reference_jobs.py", *_run_args(quick_checkout, runs, "early:S:ce:0",
                                                                     "losses:g10:ce:0")])
    assert rj.main() == 0
    out = capsys.readouterr().out
    assert "2 jobs to train, 1 to branch from another's rounds, 0 to derive" in out
    done = [line.split()[2] for line in out.splitlines() if line.split()[1:2] == ["done"]]
    assert done == [str(runs / p) for p in ("early/mnist/E/ce/seed0", "early/mnist/S/ce/seed0",
                                            "losses/mnist/g10/ce/seed0")]


def test_missing_prints_the_specs_of_the_lacking_jobs_in_the_plans_order(tmp_path: Path) -> None:
    """`missing`: one spec per (experiment, setting), the held jobs left out, steps in the order given; a bad step or
    an experiment the config lacks is refused naming it."""
    ref = tmp_path / "ref"
    for seed in (0, 1, 2):
        write_job(ref, Job("mfe", "mnist", "c5", "mse", seed))
    write_job(ref, Job("mfe", "mnist", "c4", "mfe", 1))
    r = _script("missing", "--reference", str(ref), "--plan", "mfe:c5,c4:0,1", "alpha:a0.5,a2:2")
    assert r.returncode == 0, r.stderr
    # within a step the config's order (settings, then losses): c4 before c5, mfe before mse
    assert r.stdout.splitlines() == ["mfe:c4:mfe:0", "mfe:c4:mse:0,1", "mfe:c5:mfe:0,1", "alpha:a0.5:ratio:2",
                                     "alpha:a2:ratio:2"]
    assert r.stderr.strip() == "7 jobs to run: mfe:c5,c4:0,1 5, alpha:a0.5,a2:2 2"
    # globs, and a job named by two steps is listed once, under the first
    r = _script("missing", "--reference", str(ref), "--plan", "mfe:c[45]:2", "mfe::2")
    assert r.stdout.splitlines() == ["mfe:c4:mfe,mse:2", "mfe:c5:mfe:2", "mfe:c2:mfe,mse:2", "mfe:c3:mfe,mse:2"]
    bad = _script("missing", "--reference", str(ref), "--plan", "mfe:c5")
    assert bad.returncode == 2 and "'mfe:c5' is not experiment:settings:seeds" in bad.stderr
    bad = _script("missing", "--reference", str(ref), "--plan", "nosuch::0")
    assert bad.returncode == 2 and "has no experiment 'nosuch'" in bad.stderr
