"""Reference sets are sealed (``fedbalance.jobs.seal``): every route that writes job folders refuses a path in a set, every
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
from fedbalance.jobs import seal
from fedbalance.jobs.config import ConfigError, load_config, validate
from fedbalance.jobs.jobfolder import JobFolderError, read_metrics
from fedbalance.common.records import Job

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
    """``python -m fedbalance reference ARGS`` (the set's commands)."""
    return _cli("reference", *args)


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
    from fedbalance.evidence.reference import ReferenceSetError, compare, render_jobs

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
    """H1: train --out, pack --results and derive --out into the set (by a link, by '..', relative and absolute) are
    refused in one line with exit status 2, and nothing is written (the workflow's results_dir: below)."""
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
    assert seal.digests(copy) == before
    with pytest.raises(seal.SealError, match="lies in the reference set"):
        from fedbalance.jobs.jobfolder import write

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


def test_derive_checks_its_source_trajectory_and_folders(tmp_path: Path) -> None:
    """M1, M2, L2: a trajectory of another seed or lr, the source's own folder as --out, a folder a running job holds,
    a torn trajectory: each refused before anything is written."""
    import torch

    from fedbalance.jobs.config import resolve_job
    from fedbalance.jobs.derive import derive_job
    from fedbalance.jobs.run import JobError, job_lock

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


def test_a_pack_refuses_a_job_finished_on_the_other_path_and_leaves_no_folder_when_refused(tmp_path: Path) -> None:
    """L6: a pack trains on the vectorised path; a job `train` finished on the sequential one (path: auto on the CPU) is
    not counted as the pack's. A nit: a pack refused because one of its folders is locked leaves none of its own."""
    from fedbalance.jobs.config import resolve_job
    from fedbalance.jobs.run import JobError, job_lock
    from fedbalance.jobs.pack import PackError, run_pack

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

    from fedbalance.jobs.config import resolve_job
    from fedbalance.jobs.run import JobError, load_branch

    cfg = load_config(QUICK)
    spec = resolve_job(cfg, Job("early", "mnist", "S", "ce", 0))
    source = tmp_path / "E"
    source.mkdir()
    torch.save({"spec": {**spec.as_dict(), "lr": 0.5, "switch_round": spec.rounds - 1}}, source / "branch-r003.pt")
    with pytest.raises(JobError, match=r"trains otherwise from round 0 \(lr 0.5 there"):
        load_branch(source, spec, {}, {})


def test_a_source_named_by_a_machine_path_is_rewritten_as_its_job_path() -> None:
    """The migration `collect --adopt` ran on the committed sets: the path is dropped, the change recorded."""
    from fedbalance.evidence.refset import relative_sources

    metrics = {"derived_from": "/work/refruns/mnist/monitor/mnist/default/ce/seed0",
               "branched_from": {"folder": "early/mnist/E/ce/seed1", "round": 3}}
    fixed, changes = relative_sources(metrics)
    assert fixed == {"derived_from": "monitor/mnist/default/ce/seed0",
                     "branched_from": {"folder": "early/mnist/E/ce/seed1", "round": 3}}
    assert changes == [{"key": "derived_from", "to": "monitor/mnist/default/ce/seed0"}] and "/work" not in str(changes)
