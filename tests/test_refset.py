"""``fedbalance reference collect|status|missing|docs`` (fedbalance.evidence.refset, fedbalance.presentation.refdocs): the checks collect
makes (protocol, replace with a reason, adopt, provenance), its lock and its one swap (a collect killed at any write
leaves the old set or the new one; --recover finishes or undoes it), status, missing in the evidence order, and every
bad argument as one line and exit status 2 before anything is written."""

from __future__ import annotations

import contextlib
import hashlib
import io
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from conftest import seal_set, write_job
from fedbalance.jobs import provenance
from fedbalance.evidence import refset
from fedbalance.jobs import seal
from fedbalance.common.records import Job

REPO = Path(__file__).resolve().parents[1]
MNIST = REPO / "config" / "mnist.yaml"
QUICK = REPO / "config" / "quick.yaml"
HEAD = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True,
                      check=True).stdout.strip()
"""A commit of this repository: what a record collected names (``collect`` refuses one the repository lacks)."""
OLD_RECORD = {"commit": HEAD, "runtime": {"device": "cpu"}}
"""A provenance record as scripts/reference_jobs.py wrote it (no runner named)."""
MADE = {"commit": HEAD, "runner": "snakemake", "rule": "train", "config": "config/mnist.yaml"}
"""A record of a job the workflow made with config/mnist.yaml."""


@pytest.fixture(autouse=True)
def _sets_outside_the_checkout(monkeypatch) -> None:
    """The sets these tests make lie in tmp_path, outside the checkout: every read and collect takes them as uncommitted
    evidence on purpose (``seal.ACCEPT_ENV``, a warning each time), whose refusal test_seal.py and test_evidence.py
    check; the test of collect's own commit check unsets it."""
    monkeypatch.setenv(seal.ACCEPT_ENV, "1")


def _ref(*args: str, env: dict | None = None, cwd: Path = REPO, timeout: int = 300) -> subprocess.CompletedProcess:
    """``python -m fedbalance reference ARGS`` with this checkout's library: in a process of its own with ``env`` (the
    tests' kill and pause points: a child forked from this one, so that a kill ends it alone without paying the
    imports again), else in this one (``cli.main``), its exit status and output as a process's."""
    if env is not None:
        return _forked(["reference", *args], env, cwd, timeout)
    from fedbalance.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), contextlib.chdir(cwd):
        try:
            code = main(["reference", *args])
        except SystemExit as exc:  # argparse's own errors
            code = exc.code
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


def _forked(argv: list[str], env: dict, cwd: Path, timeout: int) -> subprocess.CompletedProcess:
    """``cli.main(argv)`` in a forked child with ``env`` added to its environment and a transaction's write count of
    its own: its exit status (137 when a kill point ended it) and what it wrote, as a process's."""
    from fedbalance.cli import main

    with tempfile.TemporaryDirectory() as tmp:
        out, err = Path(tmp, "out"), Path(tmp, "err")
        pid = os.fork()
        if pid == 0:  # the child: never returns into pytest
            code = 1
            try:
                os.environ.update(env)
                refset._WRITES = itertools.count(1)
                with out.open("w") as o, err.open("w") as e, contextlib.redirect_stdout(o), \
                        contextlib.redirect_stderr(e), contextlib.chdir(cwd):
                    try:
                        code = main(argv)
                    except SystemExit as exc:
                        code = exc.code if isinstance(exc.code, int) else 1
            finally:
                os._exit(code or 0)
        deadline = time.monotonic() + timeout
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                raise subprocess.TimeoutExpired(argv, timeout)
            time.sleep(0.01)
        return subprocess.CompletedProcess(argv, os.waitstatus_to_exitcode(status), out.read_text(), err.read_text())


def _one_line(proc: subprocess.CompletedProcess, words: str) -> None:
    err = [line for line in proc.stderr.splitlines() if line.strip() and not line.startswith("usage:")
           and not line.startswith(" ") and "warning: accepting uncommitted evidence" not in line]
    assert proc.returncode == 2 and len(err) == 1 and words in err[0], (proc.returncode, proc.stdout, proc.stderr)


def _job(root: Path, path: str, *, record: dict | None = OLD_RECORD, spec_of: Path = MNIST, **kw) -> Path:
    folder = write_job(root, Job.from_path(path), spec_of=spec_of, **kw)
    if record is not None:
        (folder / "provenance.json").write_text(json.dumps(record))
    return folder


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _numbers(files: dict[str, bytes]) -> dict[str, bytes]:
    """The job files of a set (``_files``) but the records and the manifest: what two collects of the same jobs share
    (each record says when it was collected)."""
    return {k: v for k, v in files.items() if not k.endswith("provenance.json") and k != seal.MANIFEST}


def test_collect_replaces_a_different_job_only_on_purpose(tmp_path: Path) -> None:
    runs, ref = tmp_path / "runs", tmp_path / "ref"
    for root, acm in ((runs, 0.5), (ref, 0.7)):
        _job(root, "losses/mnist/g10/ce/seed0", acm=acm)
    seal_set(ref, MNIST)
    before = (ref / "losses/mnist/g10/ce/seed0/metrics.json").read_bytes()
    r = _ref("collect", str(runs), "--into", str(ref))
    _one_line(r, "would replace them; pass --replace")
    assert "final.acc_minority 0.7 -> 0.5" in r.stderr  # what a replacement would change, named
    assert (ref / "losses/mnist/g10/ce/seed0/metrics.json").read_bytes() == before
    _one_line(_ref("collect", str(runs), "--into", str(ref), "--replace"), "--replace needs --reason")
    r = _ref("collect", str(runs), "--into", str(ref), "--replace", "--reason", "rerun on purpose")
    assert r.returncode == 0, r.stderr
    assert f"1 finished jobs of {runs} in {ref} (0 added, 1 replaced, 0 held already)" in r.stdout, r.stdout
    assert (ref / "losses/mnist/g10/ce/seed0/metrics.json").read_bytes() == \
        (runs / "losses/mnist/g10/ce/seed0/metrics.json").read_bytes()
    prov = json.loads((ref / "losses/mnist/g10/ce/seed0/provenance.json").read_text())
    assert prov["replaced"][0]["reason"] == "rerun on purpose" and len(prov["replaced"][0]["previous_sha256"]) == 2
    assert prov["replaced"][0]["previous_sha256"]["metrics.json"] == hashlib.sha256(before).hexdigest()
    assert "collected" in prov and prov["commit"] == HEAD
    # collected again, unchanged: the record of the replacement stays (the run's own provenance.json lacks it)
    held = (ref / "losses/mnist/g10/ce/seed0/provenance.json").read_bytes()
    r = _ref("collect", str(runs), "--into", str(ref))
    assert r.returncode == 0 and "(0 added, 0 replaced, 1 held already)" in r.stdout, r.stderr
    assert (ref / "losses/mnist/g10/ce/seed0/provenance.json").read_bytes() == held
    seal.verify(ref)  # collect sealed the set again
    assert not [p for p in tmp_path.iterdir() if ".collect." in p.name]  # no lock, journal or folder left beside it


def test_status_counts_seeds_commits_runners_and_minutes_per_device(tmp_path: Path) -> None:
    jobs = [("losses/mnist/g50/ce/seed0", "a" * 40, "cpu", 600.0, None, {}),
            ("losses/mnist/g50/ce/seed3", "b" * 40, "cuda (H200)", 180.0, "snakemake", {}),
            ("losses/mnist/g10/ce/seed1", "a" * 40, "cpu", 1200.0, None, {}),
            ("losses/mnist/g10/ce/seed0", "a" * 40, "cpu", 900.0, "snakemake", {}),
            ("losses/mnist/g10/ce/seed2", "a" * 40, "cpu", 1500.0, None, {}),
            # a derived job: its own 12 seconds are not a trained job's minutes, but it is one of the device's jobs
            ("losses/mnist/g10/ce/seed3", "a" * 40, "cpu", 12.0, "snakemake",
             {"derived_from": "losses/mnist/g10/ce/seed0"})]
    for job, commit, device, wall, runner, more in jobs:
        record = {"commit": commit, "runtime": {"device": device}, "wall_s_job": wall, **({"runner": runner} if runner
                                                                                         else {}), **more}
        _job(tmp_path, job, record=record)
    seal_set(tmp_path, MNIST)
    lines = refset.status_text(tmp_path).splitlines()
    assert lines[2:4] == ["| losses | mnist | g10 | ce | 0, 1, 2, 3 |", "| losses | mnist | g50 | ce | 0, 3 |"]  # Γ order
    # the counts in words and a table, no Python dict; cpu: trained 10, 15, 20, 25 minutes (median 17.5, the mean of
    # the middle two), the derived job counted among the device's 5 jobs and not in their minutes
    assert lines[-6:] == ["6 jobs, made by scripts/reference_jobs.py (3 jobs), snakemake (3 jobs); at commits aaaaaaa "
                          "(5 jobs), bbbbbbb (1 job).", "",
                          "| device | jobs | derived | minutes per trained job: least–most (median) |",
                          "|---|---|---|---|", "| cpu | 5 | 1 | 10.0–25.0 (17.5) |", "| cuda (H200) | 1 | 0 | 3.0–3.0 (3.0) |"]
    # how far the evidence order is: the six jobs are losses Γ = 10 and 50, which only the last step (every other
    # job) names; every row's jobs in all are those in the set and those to run
    rows = [line.split(" | ") for line in lines if line.startswith("| `")]
    assert [row[0] for row in rows] == [f"| `{step}`" for step in refset.EVIDENCE_PLAN]
    assert [int(row[2]) for row in rows] == [0] * (len(rows) - 1) + [6]
    assert all(int(row[1]) == int(row[2]) + int(row[3].rstrip(" |")) for row in rows)
    r = _ref("status", "--reference", str(tmp_path))
    assert r.returncode == 0 and r.stdout == refset.status_text(tmp_path)


def test_status_names_a_provenance_whose_wall_time_is_not_a_number(tmp_path: Path) -> None:
    root = tmp_path / "set"
    _job(root, "losses/mnist/g10/ce/seed0", record={"commit": "a" * 40, "wall_s_job": "twelve minutes"})
    seal_set(root, MNIST)
    _one_line(_ref("status", "--reference", str(root)), "wall_s_job 'twelve minutes' is not a number")


@pytest.mark.parametrize("key, value", [("cpu_s_this_process", "7 s"), ("cpu_s_this_process", -1.0),
                                        ("wall_s_this_process", True), ("wall_s_job", float("inf"))])
def test_a_record_whose_seconds_are_not_seconds_is_named(tmp_path: Path, key: str, value) -> None:
    """Every reader of a record (``provenance.read``) refuses seconds that are not a non-negative number, naming the
    file and the key; null is a record without them."""
    path = tmp_path / "provenance.json"
    path.write_text(json.dumps({"commit": "a" * 40, key: value}))
    with pytest.raises(provenance.ProvenanceError, match=rf"{re.escape(str(path))}: {key} .* is not a number of seconds"):
        provenance.read(path)
    path.write_text(json.dumps({"commit": "a" * 40, "wall_s_job": 0, key: None}))
    assert provenance.read(path)[key] is None


def test_missing_counts_each_steps_jobs_in_all_so_that_the_held_ones_are_the_sets() -> None:
    """On the shipped set and the evidence order (its last step, every other job): the steps' jobs in all less the
    jobs to run are the jobs the set holds, counted here from its folders; no step is larger than the study's jobs of
    its experiment and seeds (counted from ``config.jobs``, twins and all)."""
    from fedbalance.jobs.config import jobs, load_config

    ref = REPO / "reference" / "mnist"
    planned: list[int] = []
    steps = refset.missing(MNIST, ref, planned=planned)
    held = len(list(ref.glob("*/mnist/*/*/seed*/provenance.json")))
    assert held > 0 and len(planned) == len(steps)
    assert sum(planned) - sum(len(j) for _, j in steps) == held
    every = jobs(load_config(MNIST))
    for (step, lacking), n in zip(steps, planned):
        exp, globs, seeds = refset.plan_step(step)
        if exp != "*":
            assert len(lacking) <= n <= sum(
                j.experiment == exp and (seeds is None or j.seed in seeds) and j.dataset == "mnist" for j in every), step


def test_missing_lists_the_lacking_jobs_in_the_plans_order_as_jobs_or_targets(tmp_path: Path) -> None:
    """One batch per (experiment, setting) and list of seeds, seeds outermost, the held jobs left out, steps in the order
    given (the order scripts/reference_jobs.py ran them in); --targets prints each job's metrics.json under RUNS."""
    ref = tmp_path / "ref"
    for seed in (0, 1, 2):
        write_job(ref, Job("mfe", "mnist", "c5", "mse", seed))
    write_job(ref, Job("mfe", "mnist", "c4", "mfe", 1))
    r = _ref("missing", "--reference", str(ref), "--plan", "mfe:c5,c4:0,1", "alpha:a0.5,a2:2")
    assert r.returncode == 0, r.stderr
    # within a step the config's order (settings, then losses): c4 before c5, mfe before mse
    assert r.stdout.splitlines() == ["mfe/mnist/c4/mfe/seed0", "mfe/mnist/c4/mse/seed0", "mfe/mnist/c4/mse/seed1",
                                     "mfe/mnist/c5/mfe/seed0", "mfe/mnist/c5/mfe/seed1", "alpha/mnist/a0.5/ratio/seed2",
                                     "alpha/mnist/a2/ratio/seed2"]
    # per step its jobs to run, of its jobs in all: mfe at c4 and c5, losses mfe and mse, seeds 0-1 = 8, of which the
    # set holds c5 mse seeds 0-1 and c4 mfe seed 1 (its c5 mse seed 2 is outside the step); alpha's two settings, ratio
    # alone, seed 2 = 2
    assert r.stderr.strip() == "7 jobs to run: mfe:c5,c4:0,1 5 of 8, alpha:a0.5,a2:2 2 of 2"
    # a step named twice: its jobs go to the first, none to the second
    r = _ref("missing", "--reference", str(ref), "--plan", "mfe:c5,c4:0,1", "mfe:c5,c4:0,1")
    assert r.returncode == 0 and r.stderr.strip() == "5 jobs to run: mfe:c5,c4:0,1 5 of 8, mfe:c5,c4:0,1 0 of 0"
    # a batch of two losses at seeds 0 and 1: seed 0's losses, then seed 1's
    r = _ref("missing", "--reference", str(ref), "--plan", "mfe:c3:0,1", "--targets", "RUNS")
    assert r.stdout.splitlines() == [f"RUNS/mfe/mnist/c3/{loss}/seed{s}/metrics.json" for s in (0, 1)
                                     for loss in ("mfe", "mse")]
    # globs, and a job named by two steps is listed once, under the first
    r = _ref("missing", "--reference", str(ref), "--plan", "mfe:c[45]:2", "mfe::2")
    assert r.stdout.splitlines() == ["mfe/mnist/c4/mfe/seed2", "mfe/mnist/c4/mse/seed2", "mfe/mnist/c5/mfe/seed2",
                                     "mfe/mnist/c2/mfe/seed2", "mfe/mnist/c2/mse/seed2", "mfe/mnist/c3/mfe/seed2",
                                     "mfe/mnist/c3/mse/seed2"]
    _one_line(_ref("missing", "--reference", str(ref), "--plan", "mfe:c5"), "'mfe:c5' is not experiment:settings:seeds")
    _one_line(_ref("missing", "--reference", str(ref), "--plan", "nosuch::0"), "has no experiment 'nosuch'")


def test_next_step_lists_one_step_the_first_with_a_job_still_to_run(tmp_path: Path) -> None:
    """--next-step: the first step that lacks a job, alone (a batch never mixes steps); with --targets RUNS a step whose
    jobs all finished in RUNS (not yet collected) is passed over; nothing left: no line."""
    ref = tmp_path / "ref"
    for seed in (0, 1):
        write_job(ref, Job("mfe", "mnist", "c5", "mse", seed))
        write_job(ref, Job("mfe", "mnist", "c5", "mfe", seed))
    plan = ["--plan", "mfe:c5:0,1", "mfe:c4:1", "alpha:a2:2"]
    r = _ref("missing", "--reference", str(ref), *plan, "--next-step")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["mfe/mnist/c4/mfe/seed1", "mfe/mnist/c4/mse/seed1"]  # mfe:c5 is held: step 2
    assert r.stderr.splitlines()[-1] == "next step: mfe:c4:1"
    runs = tmp_path / "runs"
    r = _ref("missing", "--reference", str(ref), *plan, "--next-step", "--targets", str(runs))
    assert "not collected yet" not in r.stderr
    write_job(runs, Job("mfe", "mnist", "c4", "mfe", 1))
    r = _ref("missing", "--reference", str(ref), *plan, "--next-step", "--targets", str(runs))
    assert r.stdout.splitlines() == [f"{runs}/mfe/mnist/c4/{loss}/seed1/metrics.json" for loss in ("mfe", "mse")]
    assert (f"1 of them finished in {runs}, not collected yet: python -m fedbalance reference collect {runs} "
            f"--into {ref}") in r.stderr.splitlines()
    write_job(runs, Job("mfe", "mnist", "c4", "mse", 1))
    r = _ref("missing", "--reference", str(ref), *plan, "--next-step", "--targets", str(runs))
    assert r.stdout.splitlines() == [f"{runs}/alpha/mnist/a2/ratio/seed2/metrics.json"]
    a, b = Job("mfe", "mnist", "c4", "mfe", 1), Job("alpha", "mnist", "a2", "ratio", 2)
    assert refset.next_step([("x", []), ("y", [a]), ("z", [b])]) == [("y", [a])]
    assert refset.next_step([("y", [a]), ("z", [b])], lambda j: True) == []


def test_missing_follows_the_evidence_plan_and_lists_every_lacking_job_once(tmp_path: Path) -> None:
    """The default plan (the evidence issue's, fixed before the results) on quick.yaml and an empty set: early first
    (the config's job order, `fedbalance jobs`: E, then S), then t_ra (its twin t1.25 is the monitor job, trained in its place and listed
    with the rest), mfe, ...; every job the set lacks once; `| head` reads the first ones without an error."""
    from fedbalance.jobs.config import load_config
    from fedbalance.evidence.reference import missing_jobs

    (tmp_path / "ref").mkdir()
    assert refset.EVIDENCE_PLAN[:3] == ("early::0,1,2", "t_ra::0,1,2", "mfe::0,1,2") and refset.EVIDENCE_PLAN[-1] == "*::"
    r = _ref("missing", "--config", str(QUICK), "--reference", str(tmp_path / "ref"), "--targets", str(tmp_path / "R"))
    assert r.returncode == 0, r.stderr
    listed = [line.removeprefix(f"{tmp_path / 'R'}/").removesuffix("/metrics.json") for line in r.stdout.splitlines()]
    assert listed[:5] == ["early/mnist/E/ce/seed0", "early/mnist/S/ce/seed0", "t_ra/mnist/t2/ce/seed0",
                          "mfe/mnist/c2/mfe/seed0", "mfe/mnist/c2/mse/seed0"]
    lacking = missing_jobs(load_config(QUICK), tmp_path / "ref")
    assert sorted(listed) == sorted(j.path for j in lacking) and len(set(listed)) == len(listed)
    # an empty set: each step's jobs to run are all of its jobs
    assert r.stderr.startswith(f"{len(lacking)} jobs to run: early::0,1,2 2 of 2, t_ra::0,1,2 1 of 1, mfe::0,1,2 2 of 2, ")
    piped = subprocess.run(f"{sys.executable} -m fedbalance reference missing --config {QUICK} --reference "
                           f"{tmp_path / 'ref'} | head -n 2", shell=True, capture_output=True, text=True,
                           env={**os.environ, "PYTHONPATH": str(REPO / "src")}, cwd=REPO)
    assert piped.stdout.splitlines() == listed[:2] and "Error" not in piped.stderr, piped.stderr


def test_a_job_whose_old_runner_died_is_recorded_from_its_start_record(tmp_path: Path) -> None:
    """A job of scripts/reference_jobs.py that finished after its runner was killed (provenance.pending.json, no
    provenance.json) is recorded from the start record and collected; a finished job without any record is never."""
    from fedbalance.jobs.config import load_config, resolve_job

    runs, ref = tmp_path / "runs", tmp_path / "ref"
    job = _job(runs, "monitor/mnist/default/ce/seed0", record=None, spec_of=QUICK)
    start = {"job": "monitor/mnist/default/ce/seed0", "commit": HEAD[:7], "command": "python -m fedbalance train ...",
             "started": "2026-11-30T00:00:00Z"}
    (job / "provenance.pending.json").write_text(json.dumps(start))
    metrics = json.loads((job / "metrics.json").read_text())
    assert metrics["config"] == resolve_job(load_config(QUICK), Job.from_path(start["job"])).as_dict()
    r = _ref("collect", str(runs), "--into", str(ref), "--config", str(QUICK))
    assert r.returncode == 0 and "recovered" in r.stderr and "1 finished jobs" in r.stdout, r.stdout + r.stderr
    prov = json.loads((ref / "monitor/mnist/default/ce/seed0/provenance.json").read_text())
    assert prov["commit"] == HEAD[:7] and prov["command"] == start["command"] and prov["started"] == start["started"]
    assert prov["runtime"]["device"] == "cpu" and prov["wall_s_this_process"] is None and "recovered" in prov
    # RUNS is read, never written: the start record stays, no provenance.json is made there
    assert (job / "provenance.pending.json").exists() and not (job / "provenance.json").exists()
    other = tmp_path / "other"
    _job(other, "monitor/mnist/default/ce/seed1", record=None, spec_of=QUICK)
    r = _ref("collect", str(other), "--into", str(ref))
    assert r.returncode == 1 and "1 finished job(s) without provenance not collected" in r.stderr
    assert "FAILED" in r.stderr and not (ref / "monitor/mnist/default/ce/seed1").exists()


def _bad_inputs(tmp_path: Path) -> list[tuple[list[str], str]]:
    """(arguments, words of the one-line error) of ordinary bad inputs to every action."""
    runs, ref, empty, afile = tmp_path / "runs", tmp_path / "ref", tmp_path / "empty", tmp_path / "afile"
    empty.mkdir()
    afile.write_text("x")
    _job(runs, "monitor/mnist/default/ce/seed0", record=None, spec_of=QUICK)
    (runs / "monitor/mnist/default/ce/seed0/provenance.json").write_text("{not json")
    torn = tmp_path / "torn"
    job = _job(torn, "monitor/mnist/default/ce/seed1", spec_of=QUICK, train_loss=[1.0, 0.5, 0.2])
    (job / "rounds.csv").write_text((job / "rounds.csv").read_text().splitlines(keepends=True)[0])
    seal_set(torn, QUICK)
    badprov = tmp_path / "badprov"
    (_job(badprov, "monitor/mnist/default/ce/seed0", record=None, spec_of=QUICK) / "provenance.json").write_text("{x")
    seal_set(badprov, QUICK)
    nocommit = tmp_path / "nocommit"
    _job(nocommit, "monitor/mnist/default/ce/seed0", record={"commit": None, "runner": "snakemake"}, spec_of=QUICK)
    return [
        (["collect", str(tmp_path / "missing"), "--into", str(ref)], "not a folder"),
        (["collect", str(empty), "--into", str(ref)], "holds no finished job"),
        (["collect", str(runs), "--into", str(runs)], "the same folder"),
        (["collect", str(runs), "--into", str(ref)], "provenance.json: not a provenance record"),
        (["collect", str(nocommit), "--into", str(ref)], "its commit is null"),
        (["collect", str(torn), "--into", str(ref)], "rounds.csv: 0 rows"),
        (["collect", str(torn), "--into", str(afile)], "is a file"),
        (["collect", "--into", str(ref)], "RUNS: name the folder"),
        (["collect", str(runs), "--into", str(ref), "--recover"], "--recover takes --into SET alone"),
        (["collect", str(nocommit), "--into", str(ref), "--config", str(tmp_path / "no.yaml")], "--config"),
        (["collect", str(runs), "--into", ""], "an empty path"),
        (["status", "--reference", str(tmp_path / "missing")], "not a folder"),
        (["status", "--reference", str(empty)], "holds no job"),
        (["status", "--reference", str(badprov)], "not a provenance record"),
        (["status", "--reference", str(torn)], "rounds.csv: 0 rows"),
        (["status", "--reference", str(runs)], "an unsealed reference set"),
        (["missing", "--reference", str(tmp_path / "missing")], "not a folder"),
        (["missing", "--reference", str(empty), "--config", str(tmp_path / "no.yaml")], "not a file"),
        (["docs", "--rendered", str(empty), "--reference", str(ref), "--docs", str(empty)], "render the reference set first"),
    ]


def test_every_bad_argument_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """Each ordinary bad input: exit status 2, one error line (argparse's usage line besides), no traceback, and
    nothing collected."""
    for argv, words in _bad_inputs(tmp_path):
        _one_line(_ref(*argv), words)
    assert not (tmp_path / "ref").exists()
    assert not [p for p in tmp_path.iterdir() if ".collect." in p.name]


def test_collect_refuses_a_job_of_another_protocol_naming_the_keys(tmp_path: Path) -> None:
    """A quick.yaml job into a set of config/mnist.yaml's protocol; the same job at the set's protocol is collected."""
    ref, runs = tmp_path / "ref", tmp_path / "runs"
    _job(ref, "losses/mnist/g10/ce/seed0")
    seal_set(ref, MNIST)
    _job(runs, "losses/mnist/g10/ce/seed5", spec_of=QUICK)
    before = seal.digests(ref)
    proc = _ref("collect", str(runs), "--into", str(ref))
    _one_line(proc, "another protocol than the set's config")
    assert "rounds" in proc.stderr and "local_epochs" in proc.stderr and "(the set's config: " in proc.stderr
    assert seal.digests(ref) == before
    _one_line(_ref("collect", str(runs), "--into", str(ref), "--config", str(QUICK)), "whose content differs")
    _job(runs, "losses/mnist/g10/ce/seed5")
    assert _ref("collect", str(runs), "--into", str(ref)).returncode == 0
    seal.verify(ref)
    assert "losses/mnist/g10/ce/seed5/metrics.json" in seal.read_manifest(ref)


def test_collect_reads_the_set_as_committed_and_takes_real_commits_only(tmp_path: Path, monkeypatch) -> None:
    """collect reads its target as every read does: a set whose files differ from its commit (an earlier collect not
    committed, or a forgery rewritten with its manifest) is refused naming the files, and read only on purpose
    (FEDBALANCE_ACCEPT_UNCOMMITTED=1, said); a job's record must name a commit of the repository ("", a word, forty zeros
    and a commit of another repository are refused) or the URL of the clone it ran from (then said)."""
    monkeypatch.delenv(seal.ACCEPT_ENV)
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    repo = tmp_path / "repo"
    shutil.copytree(REPO / "config", repo / "config")
    ref = repo / "ref"
    _job(ref, "losses/mnist/g10/ce/seed0")
    seal_set(ref, repo / "config" / "mnist.yaml")
    for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "set"]):  # the set in a repository, as reference/
        subprocess.run(["git", *cmd], cwd=repo, env=env, check=True)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()
    for seed in (5, 6):
        _job(tmp_path / "runs" / str(seed), f"losses/mnist/g10/ce/seed{seed}", record={**MADE, "commit": commit})
    for bad in ("", "zzzz-not-a-commit", "0" * 40, HEAD if HEAD != commit else "f" * 40):
        _job(tmp_path / "bad", "losses/mnist/g10/ce/seed7", record={**MADE, "commit": bad})
        proc = _ref("collect", str(tmp_path / "bad"), "--into", str(ref), cwd=repo)
        _one_line(proc, f"commit {bad!r} is no commit of this repository")
    _job(tmp_path / "cloned", "losses/mnist/g10/ce/seed8", record={**MADE, "commit": "f" * 40,
                                                                   "clone": "https://example.org/fork.git"})
    first = _ref("collect", str(tmp_path / "runs" / "5"), "--into", str(ref), cwd=repo)
    assert first.returncode == 0 and "uncommitted" not in first.stderr, first.stderr
    second = _ref("collect", str(tmp_path / "runs" / "6"), "--into", str(ref), cwd=repo)
    _one_line(second, "differs from its commit (git HEAD): 1 changed (MANIFEST.sha256); 3 extra")
    assert not (ref / "losses/mnist/g10/ce/seed6").exists()
    accepted = _ref("collect", str(tmp_path / "runs" / "6"), "--into", str(ref), cwd=repo,
                    env={seal.ACCEPT_ENV: "1"})
    assert accepted.returncode == 0 and "warning: accepting uncommitted evidence" in accepted.stderr, accepted.stderr
    assert "3 extra (losses/mnist/g10/ce/seed5/" in accepted.stderr
    cloned = _ref("collect", str(tmp_path / "cloned"), "--into", str(ref), cwd=repo, env={seal.ACCEPT_ENV: "1"})
    assert cloned.returncode == 0 and "of https://example.org/fork.git" in cloned.stderr, cloned.stderr
    seal.verify(ref)


def test_collect_names_a_source_by_its_job_path_and_records_the_change(tmp_path: Path) -> None:
    """A branched job whose metrics.json names its source by the machine's path (a runner of an older commit) is
    collected with the job path instead, the change in its provenance; collecting it again changes nothing; a set
    holding the job as the runner wrote it names what would change."""
    ref, runs = tmp_path / "ref", tmp_path / "runs"
    _job(ref, "losses/mnist/g10/ce/seed0")
    seal_set(ref, MNIST)
    job = _job(runs, "early/mnist/S/ce/seed7")
    metrics = json.loads((job / "metrics.json").read_text())
    source = runs.resolve() / "early" / "mnist" / "E" / "ce" / "seed7"
    metrics["branched_from"] = {"folder": str(source), "round": 10}
    (job / "metrics.json").write_text(json.dumps(metrics, indent=1))
    before = seal.sha256(job / "metrics.json")
    for again in (False, True):  # the second collect adds nothing: every job is held already
        proc = _ref("collect", str(runs), "--into", str(ref))
        counts = re.search(r"(\d+) finished jobs of .* \((\d+) added, 0 replaced, (\d+) held already\)", proc.stdout)
        assert proc.returncode == 0 and counts, proc.stdout + proc.stderr
        found, added, held = map(int, counts.groups())
        assert (added, held) == ((0, found) if again else (found, 0)) and found > 0, proc.stdout
    dst = ref / "early" / "mnist" / "S" / "ce" / "seed7"
    text = (dst / "metrics.json").read_text()
    assert '"/' not in text and json.loads(text)["branched_from"] == {"folder": "early/mnist/E/ce/seed7", "round": 10}
    record = json.loads((dst / "provenance.json").read_text())
    assert record["migrated"] == [{
        "file": "metrics.json", "changed": [{"key": "branched_from.folder", "to": "early/mnist/E/ce/seed7"}],
        "previous_sha256": before,
        "why": "a source named by its job path relative to the results root, not by a machine's absolute path"}]
    assert seal.sha256(job / "metrics.json") == before  # the run's own folder is left as it was
    shutil.copyfile(job / "metrics.json", dst / "metrics.json")
    seal_set(ref, MNIST)
    proc = _ref("collect", str(runs), "--into", str(ref))
    assert proc.returncode == 2 and "would replace them" in proc.stderr
    assert f'metrics.json differ: branched_from {{"folder": "{source}", "round": 10}} -> {{"folder": ' \
           '"early/mnist/E/ce/seed7", "round": 10}' in proc.stderr, proc.stderr


def test_twins_and_copies_are_not_collected(tmp_path: Path) -> None:
    """A results folder of the workflow holds twins (rule reuse) and, for a render, copies of a set's jobs (rule
    from_reference): collect takes the trained jobs only, saying what it left out."""
    ref, runs = tmp_path / "ref", tmp_path / "runs"
    trained = {**MADE, "runtime": {"device": "cpu"}}
    _job(runs, "losses/mnist/g50/ratio/seed0", record=trained)
    twin = _job(runs, "alpha/mnist/a1/ratio/seed0", record={**trained, "rule": "reuse",
                                                           "reused_from": "losses/mnist/g50/ratio/seed0"})
    metrics = json.loads((twin / "metrics.json").read_text())
    (twin / "metrics.json").write_text(json.dumps({**metrics, "reused_from": str(runs / "losses/mnist/g50/ratio/seed0")}))
    _job(runs, "losses/mnist/g10/ce/seed0", record={**trained, "rule": "from_reference", "copied_from": "x"})
    r = _ref("collect", str(runs), "--into", str(ref))
    assert r.returncode == 0 and "1 finished jobs" in r.stdout and "2 twin(s) or copies" in r.stderr, r.stdout + r.stderr
    assert sorted(p.parent.relative_to(ref).as_posix() for p in ref.rglob("metrics.json")) == \
        ["losses/mnist/g50/ratio/seed0"]


def test_a_results_folder_of_the_workflow_is_no_unsealed_set(tmp_path: Path) -> None:
    """The workflow's jobs carry provenance.json too: a results folder (or a render's, whose records hold the set's
    record of each job inside) is read as a results folder; a folder of a set's records without a marker is refused."""
    from fedbalance.evidence.reference import compare

    made = MADE
    for seed in (0, 1, 2):
        _job(tmp_path / "results", f"losses/mnist/g10/ce/seed{seed}", record=made)
        _job(tmp_path / "render", f"losses/mnist/g10/ce/seed{seed}",
             record={**made, "rule": "from_reference", "copied_from": "reference/mnist/x", "reference_provenance":
                     OLD_RECORD})
        _job(tmp_path / "unsealed", f"losses/mnist/g10/ce/seed{seed}")
    assert seal.verify_if_sealed(tmp_path / "results", "--ours") is None
    assert seal.verify_if_sealed(tmp_path / "render", "--ours") is None
    assert set(compare(tmp_path / "results", tmp_path / "render").verdict) == {"identical"}
    with pytest.raises(seal.SealError, match="unsealed reference set.*reference collect --into"):
        seal.verify_if_sealed(tmp_path / "unsealed", "--ours")


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
    from fedbalance.presentation.refdocs import check_render

    ref, docs = tmp_path / "ref", tmp_path / "docs"
    jobs = [Job("losses", "mnist", "g10", "ce", s) for s in (0, 1, 2)]
    for job in jobs:
        _job(ref, job.path)
    seal_set(ref, MNIST)
    docs.mkdir()
    (docs / "fidelity.md").write_text("`tables/Fidelity.md` of the render of the 3 `losses` jobs of ref (commits x):\n")
    (docs / "claims-mnist.md").write_text("`claims.md` of the render of the 3 jobs of ref (commits x):\n")
    check_render(_render(tmp_path / "full", jobs), ref, docs, allow_fewer=False)  # the set as it was rendered
    with pytest.raises(refset.RefSetError, match="lacks 1 of the 3 jobs of"):
        check_render(_render(tmp_path / "other", jobs[:2]), ref, docs, allow_fewer=False)
    shutil.rmtree(ref / jobs[2].path)
    with pytest.raises(refset.RefSetError, match="files differ from MANIFEST.sha256: 3 missing"):
        check_render(_render(tmp_path / "smaller", jobs[:2]), ref, docs, allow_fewer=False)  # removed by hand
    seal_set(ref, MNIST)  # removed on purpose (and sealed again)
    with pytest.raises(refset.RefSetError, match="holds 2 `losses` jobs, but .*fidelity.md was rendered from 3"):
        check_render(tmp_path / "smaller", ref, docs, allow_fewer=False)
    check_render(tmp_path / "smaller", ref, docs, allow_fewer=True)
    for job in jobs[:2]:
        shutil.rmtree(ref / job.path)
    seal_set(ref, MNIST)
    with pytest.raises(refset.RefSetError, match="holds no job"):
        check_render(tmp_path / "smaller", ref, docs, allow_fewer=True)


# --- one collect, one swap: kills, recovery, the lock, adopt, a moved set -------------------------------------------


def _beside(folder: Path) -> list[Path]:
    """What a collect left beside the set in ``folder`` (its journal, the new or the old set), its lock left out (a
    killed collect leaves it; the next one takes it)."""
    return [p for p in folder.iterdir() if ".collect." in p.name and not p.name.endswith(".lock")]


def _old_and_runs(tmp_path: Path) -> tuple[Path, Path]:
    """A sealed set of two jobs and a runs folder replacing one of them and adding one."""
    ref, runs = tmp_path / "ref", tmp_path / "runs"
    _job(ref, "losses/mnist/g10/ce/seed0", acm=0.7)
    _job(ref, "losses/mnist/g10/ce/seed1", acm=0.7)
    seal_set(ref, MNIST)
    _job(runs, "losses/mnist/g10/ce/seed1", acm=0.5)
    _job(runs, "losses/mnist/g10/ce/seed2")
    return ref, runs


def test_a_collect_killed_at_any_write_leaves_the_old_or_the_new_set(tmp_path: Path) -> None:
    """The collect is killed (exit 137, no clean-up: as SIGKILL) after each of its writes in turn, outside git: the set
    is then the old one or the new one, every read accepts it, a second collect is refused naming --recover, and
    --recover finishes or undoes the interrupted one; collecting again then gives the new set."""
    ref, runs = _old_and_runs(tmp_path)
    old = _files(ref)
    args = ["collect", str(runs), "--into", str(ref), "--replace", "--reason", "a kill test"]
    done = _ref(*args, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    new = _numbers(_files(ref))
    assert new != _numbers(old)
    runs_before = _files(runs)
    kills = 0
    for n in range(1, 40):
        shutil.rmtree(ref)
        for rel, data in old.items():
            (ref / rel).parent.mkdir(parents=True, exist_ok=True)
            (ref / rel).write_bytes(data)
        r = _ref(*args, env={refset.CRASH_ENV: str(n)}, cwd=tmp_path)  # a process of its own, killed
        if r.returncode == 0:
            break
        kills += 1
        assert r.returncode == refset.KILLED, (n, r.stderr)
        now = _files(ref)
        assert now == old or _numbers(now) == new, n
        seal.verify(ref)
        assert _ref("status", "--reference", str(ref)).returncode == 0
        if not _beside(tmp_path):  # killed after its last write: the new set, nothing left to recover
            assert _numbers(now) == new
            continue
        _one_line(_ref(*args, cwd=tmp_path), "--recover")
        rec = _ref("collect", "--into", str(ref), "--recover", cwd=tmp_path)
        assert rec.returncode == 0 and rec.stdout.split(":")[0] in ("undone", "finished"), rec.stdout + rec.stderr
        assert not _beside(tmp_path) and not seal.collect_files(ref)["lock"].exists(), n
        seal.verify(ref)
        assert rec.stdout.startswith("undone") == (_files(ref) == old), (n, rec.stdout)
        if rec.stdout.startswith("undone"):
            assert _ref(*args, cwd=tmp_path).returncode == 0
        assert _numbers(_files(ref)) == new, n
    assert kills == 13, kills  # the journal, the new set, 2 jobs x 3 files, the seal, the journal, the swap, the old
    # set removed, the journal removed
    assert _files(runs) == runs_before


def test_a_collect_without_one_rename_that_swaps_recovers_between_its_two(tmp_path: Path, monkeypatch) -> None:
    """Where the file system cannot exchange two folders in one rename, the set is moved aside, then the new one in
    place: a collect stopped between the two leaves no set, and --recover finishes it."""
    ref, runs = _old_and_runs(tmp_path)
    monkeypatch.setattr(refset, "_exchange", lambda a, b: False)
    real = refset._step

    class Killed(Exception):
        pass

    def step() -> None:
        real()
        if not ref.exists():  # right after the set was moved aside
            raise Killed

    monkeypatch.setattr(refset, "_step", step)
    with pytest.raises(Killed):
        refset.collect(runs, ref, replace=True, reason="x")
    files = seal.collect_files(ref)
    assert not ref.exists() and files["old"].is_dir() and files["new"].is_dir()
    with pytest.raises(refset.RefSetError, match="--recover"):
        refset.collect(runs, ref, replace=True, reason="x")
    with pytest.raises(refset.RefSetError, match="not a folder.*interrupted.*--recover"):
        refset.status_text(ref)
    assert refset.recover(ref).startswith("finished")
    seal.verify(ref)
    assert json.loads((ref / "losses/mnist/g10/ce/seed1/metrics.json").read_text())["final"]["acc_minority"] == 0.5
    assert not [p for p in tmp_path.iterdir() if ".collect." in p.name]


def test_two_collects_replacing_one_job_wait_for_each_other_and_both_are_recorded(tmp_path: Path) -> None:
    """The first collect holds the set's lock (paused at its first write); the second waits, saying so, then replaces
    the first one's job: both replacements are in the job's record, none vanished."""
    ref = tmp_path / "ref"
    _job(ref, "losses/mnist/g10/ce/seed0", acm=0.7)
    seal_set(ref, MNIST)
    for name, acm in (("a", 0.5), ("b", 0.6)):
        _job(tmp_path / name, "losses/mnist/g10/ce/seed0", acm=acm)
    flag = tmp_path / "go"
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    cmd = [sys.executable, "-m", "fedbalance", "reference", "collect"]
    first = subprocess.Popen([*cmd, str(tmp_path / "a"), "--into", str(ref), "--replace", "--reason", "first"],
                             env={**env, refset.PAUSE_ENV: f"1:{flag}"}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    try:
        while not Path(f"{flag}.reached").exists():
            assert first.poll() is None, first.communicate()
            time.sleep(0.05)
        second = subprocess.Popen([*cmd, str(tmp_path / "b"), "--into", str(ref), "--replace", "--reason", "second"],
                                  env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert "waiting for the collect into" in second.stderr.readline()  # blocks until it says so
        flag.write_text("")
        assert first.wait(timeout=300) == 0, first.communicate()
        assert second.wait(timeout=300) == 0, second.communicate()
    finally:
        flag.write_text("")
    record = json.loads((ref / "losses/mnist/g10/ce/seed0/provenance.json").read_text())
    assert [r["reason"] for r in record["replaced"]] == ["first", "second"]
    assert json.loads((ref / "losses/mnist/g10/ce/seed0/metrics.json").read_text())["final"]["acc_minority"] == 0.6
    seal.verify(ref)


def test_adopt_seals_whole_jobs_only(tmp_path: Path) -> None:
    """--adopt after a first collect into a new folder was stopped by hand midway (a lone rounds.csv): refused, naming
    the file; without it the folder is sealed, whole jobs only."""
    ref = tmp_path / "ref"
    _job(ref, "losses/mnist/g10/ce/seed0")
    half = ref / "losses/mnist/g10/ce/seed1"
    half.mkdir(parents=True)
    shutil.copyfile(ref / "losses/mnist/g10/ce/seed0/rounds.csv", half / "rounds.csv")
    _one_line(_ref("collect", "--into", str(ref), "--adopt"), "lone rounds.csv of a half-copied job")
    assert not (ref / seal.MARKER).exists()
    _one_line(_ref("collect", str(tmp_path / "x"), "--into", str(ref)), "not a folder")
    (tmp_path / "runs").mkdir()
    _one_line(_ref("collect", str(tmp_path / "runs"), "--into", str(ref)), "an unsealed set")
    half.joinpath("rounds.csv").unlink()
    r = _ref("collect", "--into", str(ref), "--adopt")
    assert r.returncode == 0 and "sealed" in r.stdout, r.stderr
    seal.verify(ref)
    assert seal.read_marker(ref)["config_sha256"] == seal.sha256(MNIST)
    _one_line(_ref("collect", "--into", str(ref), "--adopt"), "is sealed already")


def test_a_moved_set_says_why_and_is_collected_into_with_its_config(tmp_path: Path) -> None:
    """The marker names the config relative to where the set was sealed: a copy elsewhere says so (and is read as it
    is); --config names the config (checked by content, or, for a marker without its hash, against every held job),
    and the marker is written anew."""
    ref = tmp_path / "ref"
    _job(ref, "losses/mnist/g10/ce/seed0")
    seal_set(ref, MNIST)
    deeper = tmp_path / "a" / "b" / "c"  # ../../config/mnist.yaml from there is another (missing) file
    old_style = deeper / "old"
    shutil.copytree(ref, old_style)
    marker = json.loads((old_style / seal.MARKER).read_text())
    (old_style / seal.MARKER).write_text(json.dumps({"format": 1, "config": marker["config"]}))  # no hash: as committed
    seal.seal(old_style)
    runs = tmp_path / "runs"
    _job(runs, "losses/mnist/g10/ce/seed1")
    moved = deeper / "moved"
    shutil.copytree(ref, moved)
    for where in (moved, old_style):
        _one_line(_ref("collect", str(runs), "--into", str(where)), "the set was moved or copied away")
        r = _ref("status", "--reference", str(where))  # reading needs no config: no evidence order without it
        assert r.returncode == 0 and "| losses | mnist | g10 | ce | 0 |" in r.stdout and "How far" not in r.stdout
        _one_line(_ref("collect", str(runs), "--into", str(where), "--config", str(QUICK)),
                  "another protocol" if where == old_style else "not the study config")
        r = _ref("collect", str(runs), "--into", str(where), "--config", str(MNIST))
        assert r.returncode == 0, r.stderr
        assert seal.marker_config(where).resolve() == MNIST.resolve() and (where / "losses/mnist/g10/ce/seed1").is_dir()
    (moved / "losses/mnist/g10/ce/seed0/metrics.json").write_text("{}")
    _one_line(_ref("collect", str(runs), "--into", str(moved)), "1 changed")


def test_the_host_names_its_cpu_model_and_torchs_instruction_set(tmp_path: Path) -> None:
    """A record names the CPU (the same job drifts on another one): the model from /proc/cpuinfo's first "model name",
    torch's kernel capability once torch is loaded; without cpuinfo, platform's answer or "unknown"."""
    import platform

    import torch

    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Gold 6338 CPU\n\n"
                    "processor\t: 1\nmodel name\t: other\n")
    assert provenance.cpu_model(info) == "Intel(R) Xeon(R) Gold 6338 CPU"
    assert provenance.cpu_model(tmp_path / "absent") == (platform.processor() or "unknown")
    record = provenance.host()
    assert record["cpu_capability"] == torch.backends.cpu.get_cpu_capability() and record["cpu"]


def test_a_record_says_how_its_job_was_made(tmp_path: Path) -> None:
    """fedbalance.jobs.provenance: the run's command with the results folder written RUNS and the config relative to the
    checkout; the commit (HEAD, or FEDBALANCE_COMMIT for a copy without git, checked); a branched job's source and the
    training's wall time, none for a copy; an old runner's record (no runner) is a set's."""
    runs = tmp_path / "runs"
    context = provenance.run_context(
        ["/venv/bin/snakemake", "--cores", "2", "--config", f"results_dir={runs}", "--", f"{runs}/a/b/c/d/seed0/x"],
        [QUICK], runs, REPO, env={})
    assert json.loads(context) == {"command": "snakemake --cores 2 --config results_dir=RUNS -- RUNS/a/b/c/d/seed0/x",
                                   "config": "config/quick.yaml"}
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    assert provenance.code_state(REPO, env={})[0] == head
    assert provenance.code_state(tmp_path, env={provenance.COMMIT_ENV: "abc1234"}) == ("abc1234", None)
    assert provenance.code_state(None, env={}) == (None, None)
    for bad, words in (("xyz", "not a commit"), ("abc1234", "unset it on a git checkout")):
        with pytest.raises(provenance.ProvenanceError, match=words):
            provenance.code_state(REPO, env={provenance.COMMIT_ENV: bad})
    metrics = json.loads((write_job(tmp_path, Job.from_path("early/mnist/S/ce/seed4")) / "metrics.json").read_text())
    metrics["branched_from"] = {"folder": "early/mnist/E/ce/seed4", "round": 10}
    how = {"runner": "snakemake", "runner_version": "9", "rule": "train", "wildcards": {"seed": "4"}}
    env = {provenance.RUN_ENV: context, provenance.COMMIT_ENV: "abc1234"}
    record = provenance.job_record(metrics, how=how, code=tmp_path, started=0.0, env=env)
    assert record["job"] == "early/mnist/S/ce/seed4" and record["commit"] == "abc1234" and record["checkout_dirty"] is None
    assert record["command"].startswith("snakemake --cores 2") and record["config"] == "config/quick.yaml"
    assert record["branched_from"] == "early/mnist/E/ce/seed4" and record["wall_s_job"] == metrics["wall_time_s"] == 1.5
    assert record["started"] == "1970-01-01T00:00:00Z" and record["runtime"]["device"] == "cpu"
    copy = provenance.job_record(metrics, how={**how, "rule": "reuse"}, code=tmp_path, started=0.0, trained=False,
                                 extra={"reused_from": "x/y/z/w/seed4"}, env=env)
    assert copy["wall_s_job"] is None and "branched_from" not in copy and not provenance.trained(copy)
    assert provenance.runner({"commit": "a"}) == provenance.OLD_RUNNER and provenance.in_a_set({"commit": "a"})
    assert not provenance.in_a_set(record) and provenance.in_a_set({**record, "collected": "now"})


def test_a_record_says_how_much_cpu_its_process_had_and_the_machines_load(tmp_path: Path) -> None:
    """``cpu_s_this_process`` is the process's CPU seconds (read here a second way, ``time.process_time``), so that CPU
    seconds beside wall seconds say what else shared the machine; ``load_average`` is Linux's /proc/loadavg."""
    def burn(seconds: float) -> None:
        end = time.process_time() + seconds
        while time.process_time() < end:
            pass

    before, clock = provenance.cpu_seconds(), time.process_time()
    burn(0.6)
    after, clock_after = provenance.cpu_seconds(), time.process_time()
    assert after - before == pytest.approx(clock_after - clock, abs=0.15) and after - before >= 0.45
    metrics = json.loads((write_job(tmp_path, Job.from_path("losses/mnist/g10/ce/seed0")) / "metrics.json").read_text())
    how = {"runner": "snakemake", "runner_version": "9", "rule": "train", "wildcards": {}}
    loads = [Path("/proc/loadavg").read_text().split()[:3]]
    record = provenance.job_record(metrics, how=how, code=tmp_path, started=time.time() - 1.0,
                                   env={provenance.COMMIT_ENV: "abc1234"})
    loads.append(Path("/proc/loadavg").read_text().split()[:3])
    assert clock_after - 0.15 <= record["cpu_s_this_process"] <= time.process_time() + 0.15
    assert record["load_average"] in [[float(x) for x in load] for load in loads]
    assert json.loads(provenance.text(record))["cpu_s_this_process"] == record["cpu_s_this_process"]


def test_a_full_disk_during_a_collect_names_recover_as_the_next_step(tmp_path: Path, monkeypatch) -> None:
    """The disk fills while the new set is written: the line says to free space, then `collect --recover` (the
    interrupted collect's journal is there), then collect again; the set is as it was and --recover undoes the rest."""
    import errno

    runs, ref = tmp_path / "runs", tmp_path / "ref"
    _job(ref, "losses/mnist/g10/ce/seed0")
    seal_set(ref, MNIST)
    before = _files(ref)
    _job(runs, "losses/mnist/g10/ce/seed1")

    def full(self, config) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", str(self.files["new"] / seal.MANIFEST))

    monkeypatch.setattr(refset._Swap, "seal", full)
    proc = _ref("collect", str(runs), "--into", str(ref))
    assert proc.returncode == 1 and "no space left on the device while collecting into" in proc.stderr, proc.stderr
    assert f"--into {ref.resolve()} --recover`, and collect again" in proc.stderr
    assert "resumes from its last checkpoint" not in proc.stderr
    assert _files(ref) == before
    monkeypatch.undo()
    monkeypatch.setenv(seal.ACCEPT_ENV, "1")
    assert "undone" in _ref("collect", "--into", str(ref), "--recover").stdout


def test_recover_checks_what_it_installs_as_collect_does(tmp_path: Path) -> None:
    """A collect killed once its new set is journalled complete; the staged set is then changed consistently (a job's
    record given a commit of no repository, the staged set resealed, the journal's sha256 rewritten): --recover refuses
    to install it, naming the file, and the set stays the old one; untouched, it installs."""
    ref, runs = _old_and_runs(tmp_path)
    old = _files(ref)
    args = ["collect", str(runs), "--into", str(ref), "--replace", "--reason", "a recover test"]
    files = seal.collect_files(ref)
    for n in range(1, 40):  # the first kill after which the journal says "ready"
        r = _ref(*args, env={refset.CRASH_ENV: str(n)}, cwd=tmp_path)
        assert r.returncode == refset.KILLED, (n, r.stderr)
        if json.loads(files["journal"].read_text())["state"] == "ready" and files["new"].is_dir():
            break
        assert "undone" in _ref("collect", "--into", str(ref), "--recover").stdout
    else:
        pytest.fail("no kill left a ready journal")
    record_path = files["new"] / "losses/mnist/g10/ce/seed2/provenance.json"
    original = record_path.read_bytes()
    record_path.write_text(json.dumps({**json.loads(original), "commit": "0" * 40}))
    seal.seal(files["new"])
    journal = json.loads(files["journal"].read_text())
    files["journal"].write_text(json.dumps({**journal, "manifest_sha256": seal.sha256(files["new"] / seal.MANIFEST)}))
    _one_line(_ref("collect", "--into", str(ref), "--recover"), f"commit {'0' * 40!r} is no commit of this repository")
    assert _files(ref) == old
    record_path.write_bytes(original)
    seal.seal(files["new"])
    files["journal"].write_text(json.dumps({**journal, "manifest_sha256": seal.sha256(files["new"] / seal.MANIFEST)}))
    assert "finished" in _ref("collect", "--into", str(ref), "--recover").stdout
    assert "losses/mnist/g10/ce/seed2/metrics.json" in seal.read_manifest(ref)


@pytest.mark.parametrize("change, words", [
    ({"runner": "my-script.sh"}, "runner 'my-script.sh' is none of snakemake"),
    ({"config": "config/quick.yaml"}, "config 'config/quick.yaml' is not the set's study config"),
    ({"config": "/elsewhere/mnist.yaml"}, "is not the set's study config"),
    ({"replaced": [{"reason": "invented", "previous_commit": HEAD}]}, "holds 'replaced', which only"),
    ({"collected": "2026-01-01T00:00:00Z"}, "holds 'collected', which only"),
])
def test_collect_refuses_a_record_a_set_cannot_hold(tmp_path: Path, change: dict, words: str) -> None:
    """A job of the set's protocol whose record names another runner, another config, or carries collect's own keys (an
    invented replacement history): one line naming the file, nothing collected, RUNS unchanged."""
    ref, runs = tmp_path / "ref", tmp_path / "runs"
    _job(ref, "losses/mnist/g10/ce/seed0")
    seal_set(ref, MNIST)
    _job(runs, "losses/mnist/g10/ce/seed1", record={**MADE, **change})
    before, held = _files(runs), _files(ref)
    proc = _ref("collect", str(runs), "--into", str(ref))
    _one_line(proc, words)
    assert "losses/mnist/g10/ce/seed1/provenance.json" in proc.stderr
    assert _files(runs) == before and _files(ref) == held


def test_the_docs_name_a_set_by_its_path_in_the_repository_however_it_is_spelled(tmp_path, monkeypatch):
    """``reference docs --reference /abs/path/reference/mnist`` and ``--reference reference/mnist`` (run from the root)
    write the same name, the set's path from the README's folder; a set outside that folder keeps its spelling."""
    from fedbalance.presentation.refdocs import set_label

    root = tmp_path / "repo"
    (root / "reference" / "mnist").mkdir(parents=True)
    (root / "docs").mkdir()
    monkeypatch.chdir(root)
    spellings = [root / "reference" / "mnist", Path("reference/mnist"), Path("docs/../reference/mnist"),
                 Path("./reference/mnist/")]
    assert {set_label(p, Path("docs").parent) for p in spellings} == {"reference/mnist"}
    assert {set_label(p, root / "docs" / "..") for p in spellings} == {"reference/mnist"}
    outside = tmp_path / "elsewhere" / "mnist"
    outside.mkdir(parents=True)
    assert set_label(outside, root) == outside.as_posix()
