"""Reference sets are sealed (``fedbalance.seal``): every route that writes job folders refuses a path in a set, every
read of a set detects a changed, extra or missing file, ``collect`` keeps a set one protocol, and a derived job is
checked against its source."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import write_job
from fedbalance import seal
from fedbalance.config import ConfigError, load_config, validate
from fedbalance.jobfolder import JobFolderError, read_metrics
from fedbalance.records import Job

REPO = Path(__file__).resolve().parents[1]
MNIST = REPO / "config" / "mnist.yaml"
QUICK = REPO / "config" / "quick.yaml"
SETS = ("reference/mnist", "reference/cuda-vs-cpu")
JOBS = [f"losses/mnist/g10/{loss}/seed{s}" for loss in ("ce", "ratio") for s in (0, 1, 2)]


@pytest.fixture()
def copy(tmp_path: Path) -> Path:
    """Six jobs of reference/mnist (Γ = 10, CE and Ratio, seeds 0-2) as a sealed set of their own."""
    root = tmp_path / "set"
    for job in JOBS:
        shutil.copytree(REPO / "reference" / "mnist" / job, root / job)
    seal.seal(root, MNIST)
    return root


def _cli(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    return subprocess.run([sys.executable, "-m", "fedbalance", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


def _script(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    return subprocess.run([sys.executable, str(REPO / "scripts" / "reference_jobs.py"), *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)


def _one_line(proc: subprocess.CompletedProcess, words: str) -> None:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and words in lines[0], (proc.returncode, proc.stdout, proc.stderr)


def test_the_committed_sets_are_sealed_and_hold_no_machine_path() -> None:
    for name in SETS:
        root = REPO / name
        seal.verify(root)
        assert seal.marker_config(root).resolve() == MNIST.resolve()
        recorded = seal.read_manifest(root)
        # the manifest is sha256sum's format: the coreutils tool agrees with it
        assert subprocess.run(["sha256sum", "-c", "--quiet", seal.MANIFEST], cwd=root).returncode == 0
        assert set(recorded) == {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()} - {seal.MANIFEST}
        for path in root.rglob("*.json"):
            text = path.read_text()
            assert '"/' not in text, f"{path} holds an absolute path"


def test_a_changed_extra_or_missing_file_is_named(copy: Path) -> None:
    seal.verify(copy)
    metrics = copy / JOBS[0] / "metrics.json"
    original = metrics.read_text()
    metrics.write_text(original.replace('"acc_minority": 0.', '"acc_minority": 0.0', 1))
    with pytest.raises(seal.SealError, match=rf"1 changed \({JOBS[0]}/metrics.json\)"):
        seal.verify(copy)
    metrics.write_text(original)
    (copy / "logs").mkdir()
    (copy / "logs" / "x.log").write_text("x")
    with pytest.raises(seal.SealError, match=r"1 extra \(logs/x.log\)"):
        seal.verify(copy)
    shutil.rmtree(copy / "logs")
    (copy / JOBS[1] / "rounds.csv").unlink()
    with pytest.raises(seal.SealError, match=rf"1 missing \({JOBS[1]}/rounds.csv\)"):
        seal.verify(copy)


def test_a_hand_edit_of_final_is_detected_by_render_compare_and_docs(copy: Path, tmp_path: Path) -> None:
    """M3: final.acc_minority edited by hand. Sealed: every reader refuses naming the file. Unsealed (marker and
    manifest removed too): the job's final no longer equals its rounds.csv's last row, which every read checks."""
    from fedbalance.reference import ReferenceSetError, compare, render_jobs

    path = copy / JOBS[0] / "metrics.json"
    data = json.loads(path.read_text())
    data["final"]["acc_minority"] = 0.99
    path.write_text(json.dumps(data, indent=1))
    cfg = load_config(MNIST)
    with pytest.raises(ReferenceSetError, match="metrics.json"):
        render_jobs(cfg, copy)
    with pytest.raises(seal.SealError, match="1 changed"):
        compare(REPO / "reference" / "cuda-vs-cpu", copy)
    status = _script("status", "--reference", str(copy))
    _one_line(status, "1 changed")
    rendered, docs = tmp_path / "rendered", tmp_path / "docs"
    for name in ("tables/Fidelity.md", "tables/Reproduction.md", "claims.md"):
        (rendered / name).parent.mkdir(parents=True, exist_ok=True)
        (rendered / name).write_text("x\n")
    docs.mkdir()
    _one_line(_script("docs", "--rendered", str(rendered), "--reference", str(copy), "--docs", str(docs), "--check"),
              "1 changed")
    (copy / seal.MARKER).unlink()
    (copy / seal.MANIFEST).unlink()
    with pytest.raises(ReferenceSetError, match="unsealed reference set"):
        render_jobs(cfg, copy)
    for job in JOBS:  # a copy without provenance: a plain results folder, read job by job
        (copy / job / "provenance.json").unlink()
    with pytest.raises(JobFolderError, match=r"final.acc_minority is 0.99 but the last row of rounds.csv records 0.87"):
        read_metrics(copy / JOBS[0])


def test_every_writer_refuses_a_path_in_a_set_however_spelled(copy: Path, tmp_path: Path) -> None:
    """H1: train --out, pack --results, derive --out and the runner's --out into the set (by a link, by '..', relative
    and absolute) are refused in one line with exit status 2, and nothing is written."""
    link = tmp_path / "link"
    link.symlink_to(copy)
    before = seal.digests(copy)
    dotted = str(copy / "losses" / ".." / "losses" / "mnist" / "g10" / "ce" / "seed3")
    job = ["--config", str(MNIST), "--experiment", "losses", "--dataset", "mnist", "--setting", "g10", "--loss", "ce",
           "--seed", "3"]
    for out in (str(link / "losses/mnist/g10/ce/seed3"), dotted, os.path.relpath(copy / "x", tmp_path)):
        _one_line(_cli("train", *job, "--out", out, cwd=tmp_path), "lies in the reference set")
    _one_line(_cli("pack", "--config", str(MNIST), "--results", str(link), "--job", "losses/mnist/g10/ce/seed3"),
              "--results")
    _one_line(_cli("derive", *job[:-2], "--seed", "0", "--source", str(copy / JOBS[0]), "--out", str(copy / "t")),
              "lies in the reference set")
    _one_line(_script("run", "--checkout", str(REPO), "--out", str(link / "runs"), "--jobs", "losses:g10:ce:3"),
              "lies in the reference set")
    assert seal.digests(copy) == before
    with pytest.raises(seal.SealError, match="lies in the reference set"):
        from fedbalance.jobfolder import write

        write(copy / JOBS[0], {}, "")
    assert seal.digests(copy) == before


def test_a_study_whose_results_dir_is_in_a_set_is_refused_before_the_dag(copy: Path, tmp_path: Path) -> None:
    """H1 (a) and (b): the workflow's results_dir in a set, or in another set it renders into, or above a set."""
    other = tmp_path / "other"
    write_job(other, Job("losses", "mnist", "g10", "ce", 0), spec_of=MNIST)
    seal.seal(other, MNIST)
    cfg = load_config(QUICK)
    for results in (copy, copy / "losses", tmp_path):
        with pytest.raises(ConfigError, match="reference set"):
            validate({**cfg, "results_dir": str(results)})
    with pytest.raises(ConfigError, match="lies in the reference set"):
        validate({**load_config(MNIST), "reference_dir": str(copy), "results_dir": str(other)})
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    proc = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "1", "--configfile", "config/quick.yaml",
                           "--config", f"results_dir={copy}", "-n"], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode != 0 and "lies in the reference set" in proc.stdout + proc.stderr
    seal.verify(copy)


def test_collect_refuses_a_job_of_another_protocol_naming_the_keys(copy: Path, tmp_path: Path) -> None:
    """M4: a quick.yaml job into a set of config/mnist.yaml's protocol."""
    runs = tmp_path / "runs"
    job = write_job(runs, Job("losses", "mnist", "g10", "ce", 5), spec_of=QUICK)
    (job / "provenance.json").write_text(json.dumps({"commit": "a" * 40, "runtime": {"device": "cpu"}}))
    before = seal.digests(copy)
    proc = _script("collect", "--out", str(runs), "--reference", str(copy))
    _one_line(proc, "another protocol than the set's config")
    assert "rounds" in proc.stderr and "local_epochs" in proc.stderr and "(the set's config: " in proc.stderr
    assert seal.digests(copy) == before
    # the same job at the set's protocol is collected, and the set sealed again
    job = write_job(runs, Job("losses", "mnist", "g10", "ce", 5), spec_of=MNIST)
    proc = _script("collect", "--out", str(runs), "--reference", str(copy))
    assert proc.returncode == 0, proc.stderr
    seal.verify(copy)
    assert "losses/mnist/g10/ce/seed5/metrics.json" in seal.read_manifest(copy)


def test_derive_checks_its_source_trajectory_and_folders(tmp_path: Path) -> None:
    """M1, M2, L2: a trajectory of another seed or lr, the source's own folder as --out, a folder a running job holds,
    a torn trajectory: each refused before anything is written."""
    import torch

    from fedbalance.config import resolve_job
    from fedbalance.derive import derive_job
    from fedbalance.jobs import JobError, job_lock

    cfg = load_config(QUICK)
    src_job, target = Job("monitor", "mnist", "default", "ce", 0), Job("t_ra", "mnist", "t2", "ce", 0)
    source = write_job(tmp_path / "runs", src_job, spec_of=QUICK)
    spec = resolve_job(cfg, src_job).resolved_dict() | {"path": "sequential"}
    metrics = json.loads((source / "metrics.json").read_text())
    metrics["path"] = "sequential"
    (source / "metrics.json").write_text(json.dumps(metrics))
    out = tmp_path / "runs" / target.path
    for other, named in (({"seed": 1}, "seed 1 vs 0"), ({"lr": 0.03}, "lr 0.03 vs")):
        torch.save({"spec": {**spec, **other}, "rounds": [], "final": {}}, source / "trajectory.pt")
        with pytest.raises(ConfigError, match=f"saved by another job .*{named}"):
            derive_job(source, resolve_job(cfg, target), out)
    (source / "trajectory.pt").write_bytes(b"PK\x03\x04 torn")
    with pytest.raises(ConfigError, match="not a readable trajectory") as err:
        derive_job(source, resolve_job(cfg, target), out)
    assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="the source's folder"):
        derive_job(source, resolve_job(cfg, target), source)
    torch.save({"spec": spec, "rounds": [], "final": {}}, source / "trajectory.pt")
    with job_lock(out), pytest.raises(JobError, match="in use"):
        derive_job(source, resolve_job(cfg, target), out)
    assert not (out / "metrics.json").exists() and (source / "metrics.json").read_text() == json.dumps(metrics)


def test_a_commit_that_is_not_one_is_refused_and_a_git_checkout_records_its_own(tmp_path: Path) -> None:
    """L3: --commit must look like a commit; on a git checkout it must be its HEAD (whose dirty state is recorded)."""
    for commit, words in (("not-a-commit", "not a commit"), ("abc1234", "leave --commit out for a git checkout")):
        proc = _script("run", "--checkout", str(REPO), "--out", str(tmp_path / "runs"), "--config", "config/quick.yaml",
                       "--commit", commit, "--jobs", "losses:g10:ce:0")
        _one_line(proc, words)
    assert not (tmp_path / "runs").exists()


def test_status_names_a_provenance_whose_wall_time_is_not_a_number(tmp_path: Path) -> None:
    """L4: one line naming the file, not a TypeError."""
    root = tmp_path / "set"
    job = write_job(root, Job("losses", "mnist", "g10", "ce", 0), spec_of=MNIST)
    (job / "provenance.json").write_text(json.dumps({"commit": "a" * 40, "wall_s_job": "twelve minutes"}))
    seal.seal(root, MNIST)
    _one_line(_script("status", "--reference", str(root)), "wall_s_job 'twelve minutes' is not a number")


def test_a_pack_refuses_a_job_finished_on_the_other_path_and_leaves_no_folder_when_refused(tmp_path: Path) -> None:
    """L6: a pack trains on the vectorised path; a job `train` finished on the sequential one (path: auto on the CPU) is
    not counted as the pack's. A nit: a pack refused because one of its folders is locked leaves none of its own."""
    from fedbalance.config import resolve_job
    from fedbalance.jobs import JobError, job_lock
    from fedbalance.pack import PackError, run_pack

    cfg = load_config(QUICK)
    jobs = [Job("losses", "mnist", "g10", loss, 0) for loss in ("ce", "focal")]
    specs = [{**resolve_job(cfg, j).as_dict(), "path": "auto"} for j in jobs]  # auto: sequential for `train` on the CPU
    done = write_job(tmp_path / "res", jobs[0], spec_of=QUICK)
    metrics = json.loads((done / "metrics.json").read_text())
    metrics["config"]["path"] = "auto"
    (done / "metrics.json").write_text(json.dumps({**metrics, "path": "sequential"}))
    outs = [tmp_path / "res" / j.path for j in jobs]
    with pytest.raises(PackError, match="finished on the sequential path; a pack trains on the vectorised path"):
        run_pack(specs, outs, device="cpu")
    assert not outs[1].exists()
    fresh = [tmp_path / "fresh" / j.path for j in jobs]
    with job_lock(fresh[1]):
        with pytest.raises(JobError, match="in use"):
            run_pack(specs, fresh, device="cpu")
        assert not fresh[0].exists() and {p.name for p in fresh[1].iterdir()} == {".lock"}  # the holder's lock only


def test_a_branch_of_another_training_names_the_keys_that_differ(tmp_path: Path) -> None:
    """A nit: a branch refused for another lr said "shares its first 0 rounds" without naming lr."""
    import torch

    from fedbalance.config import resolve_job
    from fedbalance.jobs import JobError, load_branch

    cfg = load_config(QUICK)
    spec = resolve_job(cfg, Job("early", "mnist", "S", "ce", 0))
    source = tmp_path / "E"
    source.mkdir()
    torch.save({"spec": {**spec.as_dict(), "lr": 0.5, "switch_round": spec.rounds - 1}}, source / "branch-r003.pt")
    with pytest.raises(JobError, match=r"trains otherwise from round 0 \(lr 0.5 there"):
        load_branch(source, spec, {}, {})


def test_collect_notes_uncommitted_changes_of_the_set(copy: Path, tmp_path: Path) -> None:
    """A nit: collecting into a set whose earlier collected jobs are not committed says so."""
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "set"]):  # the set in a repository, as reference/
        subprocess.run(["git", *cmd], cwd=tmp_path, env=env, check=True)
    runs = tmp_path.parent / f"{tmp_path.name}-runs"
    for seed in (5, 6):
        job = write_job(runs / str(seed), Job("losses", "mnist", "g10", "ce", seed), spec_of=MNIST)
        (job / "provenance.json").write_text(json.dumps({"commit": "a" * 40, "runtime": {"device": "cpu"}}))
    first = _script("collect", "--out", str(runs / "5"), "--reference", str(copy))
    assert first.returncode == 0 and "uncommitted" not in first.stderr, first.stderr
    second = _script("collect", "--out", str(runs / "6"), "--reference", str(copy))
    assert second.returncode == 0 and "uncommitted change(s)" in second.stderr
    seal.verify(copy)


def test_the_gpu_session_fails_when_its_runner_refuses(tmp_path: Path) -> None:
    """L1: a runner that refuses its jobs (exit 2) makes the session fail with its status, the archive written anyway."""
    env = {**os.environ, "DEVICE": "cpu", "CONFIG": "config/quick.yaml", "RUNS": str(tmp_path / "runs"),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    proc = subprocess.run(["bash", "scripts/gpu_session.sh", str(tmp_path / "out"), commit, "60", "1", "0",
                           "losses:g10:no_such_loss:0"], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "FAILED: the runner exited with status 2" in proc.stderr
    assert "done after" not in proc.stdout and (tmp_path / "out" / "refruns.tgz").is_file()


def test_a_source_named_by_a_machine_path_is_rewritten_as_its_job_path() -> None:
    """The migration `collect --adopt` ran on the committed sets: the path is dropped, the change recorded."""
    from fedbalance.reference import relative_sources

    metrics = {"derived_from": "/work/refruns/mnist/monitor/mnist/default/ce/seed0",
               "branched_from": {"folder": "early/mnist/E/ce/seed1", "round": 3}}
    fixed, changes = relative_sources(metrics)
    assert fixed == {"derived_from": "monitor/mnist/default/ce/seed0",
                     "branched_from": {"folder": "early/mnist/E/ce/seed1", "round": 3}}
    assert changes == [{"key": "derived_from", "to": "monitor/mnist/default/ce/seed0"}] and "/work" not in str(changes)


def test_collect_names_a_source_by_its_job_path_and_records_the_change(copy: Path, tmp_path: Path) -> None:
    """A branched job whose metrics.json names its source by the machine's path (a runner of an older commit) is
    collected with the job path instead, the change in its provenance; collecting it again changes nothing."""
    from fedbalance.seal import sha256

    runs = tmp_path / "runs"
    job = write_job(runs, Job("early", "mnist", "S", "ce", 7), spec_of=MNIST)
    metrics = json.loads((job / "metrics.json").read_text())
    source = runs.resolve() / "early" / "mnist" / "E" / "ce" / "seed7"
    metrics["branched_from"] = {"folder": str(source), "round": 10}
    (job / "metrics.json").write_text(json.dumps(metrics, indent=1))
    (job / "provenance.json").write_text(json.dumps({"commit": "a" * 40, "runtime": {"device": "cpu"}}))
    before = sha256(job / "metrics.json")
    for _ in range(2):
        proc = _script("collect", "--out", str(runs), "--reference", str(copy))
        assert proc.returncode == 0 and "(0 replaced)" in proc.stdout, proc.stdout + proc.stderr
    dst = copy / "early" / "mnist" / "S" / "ce" / "seed7"
    text = (dst / "metrics.json").read_text()
    assert '"/' not in text and json.loads(text)["branched_from"] == {"folder": "early/mnist/E/ce/seed7", "round": 10}
    assert {k: v for k, v in json.loads(text).items() if k != "branched_from"} == {
        k: v for k, v in metrics.items() if k != "branched_from"}
    record = json.loads((dst / "provenance.json").read_text())
    assert record["migrated"] == [{
        "file": "metrics.json", "changed": [{"key": "branched_from.folder", "to": "early/mnist/E/ce/seed7"}],
        "previous_sha256": before,
        "why": "a source named by its job path relative to the results root, not by a machine's absolute path"}]
    assert sha256(job / "metrics.json") == before  # the run's own folder is left as it was
    seal.verify(copy)
    # a set that holds the job as the runner wrote it: collecting names what would change, the path among it
    shutil.copyfile(job / "metrics.json", dst / "metrics.json")
    seal.seal(copy, MNIST)
    proc = _script("collect", "--out", str(runs), "--reference", str(copy))
    assert proc.returncode == 2 and "would replace them" in proc.stderr
    assert f'metrics.json differ: branched_from {{"folder": "{source}", "round": 10}} -> {{"folder": ' \
           '"early/mnist/E/ce/seed7", "round": 10}' in proc.stderr, proc.stderr
