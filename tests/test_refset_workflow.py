"""One runner: the reference set's jobs are made by the workflow and collected (issue 61). At the quick protocol: a job
made by the workflow equals, cell for cell but `seconds`, the job `python -m fedbalance train` makes (what
scripts/reference_jobs.py ran), and collected its record reads like the old runner's; a branched job starts as soon as
its source's kept round exists and a derived one from its source's trajectory, both equal to their runner-made twins;
a job killed mid-run resumes from its checkpoint under --rerun-incomplete; the commit a run records is checked first."""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fedbalance.jobs import provenance
from fedbalance.evidence import refset
from fedbalance.jobs import seal

REPO = Path(__file__).resolve().parents[1]
QUICK = REPO / "config" / "quick.yaml"
ENV = {**os.environ, "PYTHONPATH": str(REPO / "src")}
MONITOR, DERIVED, TWIN = "monitor/mnist/default/ce/seed0", "t_ra/mnist/t2/ce/seed0", "t_ra/mnist/t1.25/ce/seed0"
SOURCE, BRANCHED = "early/mnist/E/ce/seed0", "early/mnist/S/ce/seed0"
OLD_FIELDS = {"job", "commit", "checkout_dirty", "command", "config", "host", "started", "runtime",
              "wall_s_this_process", "wall_s_job", "finished"}
"""The fields of every provenance.json scripts/reference_jobs.py wrote (reference/mnist)."""

pytestmark = pytest.mark.skipif(shutil.which("snakemake") is None, reason="no snakemake")


def _snakemake(runs: Path, *targets: str, extra: tuple[str, ...] = (), env: dict | None = None,
               popen: bool = False):
    cmd = [sys.executable, "-m", "snakemake", "--cores", "2", "--configfile", str(QUICK), "--config",
           f"results_dir={runs}", *extra, "--", *(f"{runs}/{t}/metrics.json" for t in targets)]
    if popen:
        return subprocess.Popen(cmd, cwd=REPO, env={**ENV, **(env or {})}, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, start_new_session=True)
    return subprocess.run(cmd, cwd=REPO, env={**ENV, **(env or {})}, capture_output=True, text=True, timeout=3000)


def _fedbalance(*args: str) -> None:
    r = subprocess.run([sys.executable, "-m", "fedbalance", *args], cwd=REPO, env=ENV, capture_output=True, text=True,
                       timeout=3000)
    assert r.returncode == 0, (args, r.stderr[-3000:])


def _old_runner(out: Path, job: str, verb: str, *extra: str) -> None:
    """The job as scripts/reference_jobs.py made it: ``python -m fedbalance train|derive ... --threads 1 --device cpu``
    into its folder, and a provenance.json of that runner's fields."""
    exp, ds, setting, loss, seed = job.split("/")
    folder = out / job
    args = ["--config", str(QUICK), "--experiment", exp, "--dataset", ds, "--setting", setting, "--loss", loss,
            "--seed", seed[4:], "--out", str(folder), "--threads", "1", *extra]
    started = time.time()
    _fedbalance(verb, *args, *([] if verb == "derive" else ["--device", "cpu"]))
    metrics = json.loads((folder / "metrics.json").read_text())
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    record = {"job": job, "commit": head, "checkout_dirty": False, "command": f"python -m fedbalance {verb} ...",
              "config": "config/quick.yaml", "host": provenance.host(), "started": provenance.now(started),
              "runtime": provenance.runtime_of(metrics), "wall_s_this_process": 1.0,
              "wall_s_job": metrics["wall_time_s"], "finished": provenance.now()}
    (folder / "provenance.json").write_text(json.dumps(record))


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> dict[str, Path]:
    """The workflow's jobs (a reference job, a branched one and its source, a derived one and a twin) in one run, and
    the same jobs made as the old runner made them."""
    root = tmp_path_factory.mktemp("made")
    runs, old = root / "runs", root / "old"
    r = _snakemake(runs, MONITOR, DERIVED, TWIN, SOURCE, BRANCHED)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    _old_runner(old, MONITOR, "train")
    _old_runner(old, DERIVED, "derive", "--source", str(old / MONITOR))
    _old_runner(old, SOURCE, "train", "--keep-rounds", "3")
    _old_runner(old, BRANCHED, "train", "--branch-from", str(old / SOURCE))
    return {"runs": runs, "old": old}


def _rows(folder: Path) -> list[dict[str, str]]:
    with open(folder / "rounds.csv", newline="") as fh:
        return [{k: v for k, v in row.items() if k != "seconds"} for row in csv.DictReader(fh)]


def _same_job(a: Path, b: Path) -> None:
    """Two folders of one job: every cell of rounds.csv but `seconds`, and every key of metrics.json but the wall
    time, equal."""
    assert _rows(a) == _rows(b) and len(_rows(a)) > 1
    ma, mb = (json.loads((f / "metrics.json").read_text()) for f in (a, b))
    assert {k: v for k, v in ma.items() if k != "wall_time_s"} == {k: v for k, v in mb.items() if k != "wall_time_s"}


@pytest.mark.slow
def test_a_job_made_by_the_workflow_and_collected_equals_the_old_runners(made, tmp_path: Path, monkeypatch) -> None:
    """Collected into a new set each, the workflow's reference job and the old runner's are the same cell for cell;
    the workflow's record holds every field the old runner's does, and says how it was made."""
    new_set, old_set = tmp_path / "new", tmp_path / "old"
    for runs, into in ((made["runs"], new_set), (made["old"], old_set)):
        r = subprocess.run([sys.executable, "-m", "fedbalance", "reference", "collect", str(runs), "--into", str(into),
                            "--config", str(QUICK)], cwd=REPO, env=ENV, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stdout + r.stderr
        seal.verify(into)
    _same_job(new_set / MONITOR, old_set / MONITOR)
    record = json.loads((new_set / MONITOR / "provenance.json").read_text())
    assert OLD_FIELDS <= set(record) and provenance.runner(record) == "snakemake" and "collected" in record
    assert record["rule"] == "train" and record["wildcards"] == {"experiment": "monitor", "dataset": "mnist",
                                                                 "setting": "default", "loss": "ce", "seed": "0"}
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    assert record["commit"] == head and record["config"] == "config/quick.yaml"
    assert record["command"].startswith("snakemake --cores 2 --configfile ") and f"RUNS/{MONITOR}/metrics.json" in \
        record["command"] and str(made["runs"]) not in record["command"]
    assert record["runtime"] == provenance.runtime_of(json.loads((new_set / MONITOR / "metrics.json").read_text()))
    assert record["wall_s_job"] == json.loads((new_set / MONITOR / "metrics.json").read_text())["wall_time_s"]
    # the rule's process trained the job: it used CPU, no more than its cores over its wall time (5 s for the
    # interpreter's start before the rule's clock), and the machine's three load averages are recorded
    assert 0 < record["cpu_s_this_process"] <= record["wall_s_this_process"] * record["host"]["cpus"] + 5
    assert len(record["load_average"]) == 3 and all(x >= 0 for x in record["load_average"])
    old_record = json.loads((old_set / MONITOR / "provenance.json").read_text())
    assert provenance.runner(old_record) == provenance.OLD_RUNNER
    monkeypatch.setenv(seal.ACCEPT_ENV, "1")  # a set in tmp_path, outside the checkout: read on purpose
    assert "made by snakemake (4 jobs)" in refset.status_text(new_set)  # the twin is not collected
    assert not (new_set / TWIN).exists()


@pytest.mark.slow
def test_branched_and_derived_jobs_equal_their_runner_made_twins(made) -> None:
    runs, old = made["runs"], made["old"]
    for job in (SOURCE, BRANCHED, DERIVED):
        _same_job(runs / job, old / job)
    source, branched, derived = (json.loads((runs / j / "provenance.json").read_text()) for j in (SOURCE, BRANCHED,
                                                                                                 DERIVED))
    assert branched["branched_from"] == SOURCE and derived["derived_from"] == MONITOR
    assert derived["rule"] == "derive" and derived["wall_s_job"] == derived["wall_s_this_process"]
    # the branched job started before its source ended: it waited for the kept round, not for the source's metrics
    assert branched["started"] < source["finished"], (branched["started"], source["finished"])
    twin = json.loads((runs / TWIN / "provenance.json").read_text())
    assert twin["rule"] == "reuse" and twin["reused_from"] == MONITOR and twin["wall_s_job"] is None


@pytest.mark.slow
def test_nothing_is_trained_twice(made) -> None:
    """The source's first 3 rounds were trained by rule keep, the rest by rule train resuming its checkpoint; the
    branched job trained its rounds after the branch only; the twin and the derived job trained nothing."""
    logs = made["runs"] / "logs"

    def rounds(log: Path) -> list[int]:
        return [int(m.group(1)) for m in re.finditer(r" round (\d+)/\d+ ", log.read_text())]

    assert rounds(logs / "keep" / SOURCE / "r003.log") == [1, 2, 3]
    assert rounds(logs / "train" / f"{SOURCE}.log") == list(range(4, 17))
    assert rounds(logs / "train" / f"{BRANCHED}.log") == list(range(4, 17))
    assert not (logs / "train" / f"{DERIVED}.log").exists() and not (logs / "train" / f"{TWIN}.log").exists()


@pytest.mark.slow
def test_a_killed_job_resumes_from_its_checkpoint_under_rerun_incomplete(made, tmp_path: Path) -> None:
    """Snakemake and its job killed (SIGKILL, as a machine going down) once the job checkpointed a round: after
    `snakemake --unlock`, the same command with --rerun-incomplete resumes the job and writes the job of one run."""
    runs = tmp_path / "runs"
    proc = _snakemake(runs, MONITOR, popen=True)
    checkpoint = runs / MONITOR / "checkpoint.pt"
    try:
        while not checkpoint.exists():
            assert proc.poll() is None, proc.communicate()[0][-3000:]
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert not (runs / MONITOR / "metrics.json").exists()
    unlock = subprocess.run([sys.executable, "-m", "snakemake", "--unlock", "--configfile", str(QUICK), "--config",
                             f"results_dir={runs}"], cwd=REPO, env=ENV, capture_output=True, text=True)
    assert unlock.returncode == 0, unlock.stderr
    r = _snakemake(runs, MONITOR, extra=("--rerun-incomplete",))
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    log = (runs / "logs" / "train" / f"{MONITOR}.log").read_text()
    first = int(re.search(r" round (\d+)/\d+ ", log).group(1))
    assert first > 1, log[-2000:]
    _same_job(runs / MONITOR, made["old"] / MONITOR)


def test_the_commit_a_run_records_is_checked_before_any_job(tmp_path: Path) -> None:
    """FEDBALANCE_COMMIT (a copy without git) must look like a commit and, on a git checkout, be its HEAD."""
    for commit, words in (("not-a-commit", "not a commit"), ("abc1234", "unset it on a git checkout")):
        r = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--configfile", str(QUICK), "--config",
                            f"results_dir={tmp_path / 'runs'}"], cwd=REPO, env={**ENV, provenance.COMMIT_ENV: commit},
                           capture_output=True, text=True, timeout=600)
        assert r.returncode != 0 and words in r.stdout + r.stderr, (r.stdout + r.stderr)[-2000:]
    assert not (tmp_path / "runs").exists()
