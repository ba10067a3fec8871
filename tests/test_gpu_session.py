"""scripts/gpu_session.sh in its reduced form on the CPU (DEVICE=cpu, config/quick.yaml, no suite): it runs the
workflow on the jobs it is given, or on those the reference set lacks in the evidence order, installs carried wheels,
archives the results folder, and fails with Snakemake's status."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _head() -> str:
    return subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()


def _session(tmp_path: Path, window: int, *jobs: str, **env: str) -> tuple[subprocess.CompletedProcess, Path]:
    out = tmp_path / "out"
    full = {**os.environ, "DEVICE": "cpu", "CONFIG": "config/quick.yaml", "RUNS": str(tmp_path / "runs"),
            "SITE": str(tmp_path / "site"), "WHEELS": str(tmp_path / "no-wheels"),
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}", **env}
    proc = subprocess.run(["bash", "scripts/gpu_session.sh", str(out), _head(), str(window), "1", "0", *jobs],
                          cwd=REPO, env=full, capture_output=True, text=True, timeout=1800)
    return proc, out


@pytest.mark.slow
def test_the_session_trains_its_jobs_with_the_workflow_and_archives_them(tmp_path: Path) -> None:
    """A job and the one derived from it: trained and derived by the workflow, back in the archive with their records
    (the commit given, the command), without trajectories or locks."""
    proc, out = _session(tmp_path, 1500, "monitor/mnist/default/ce/seed0", "t_ra/mnist/t2/ce/seed0", CAPTURE="1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with tarfile.open(out / "refruns.tgz") as tar:
        names = set(tar.getnames())
        record = json.load(tar.extractfile("./monitor/mnist/default/ce/seed0/provenance.json"))
        derived = json.load(tar.extractfile("./t_ra/mnist/t2/ce/seed0/provenance.json"))
    assert {"./monitor/mnist/default/ce/seed0/metrics.json", "./monitor/mnist/default/ce/seed0/rounds.csv"} <= names
    assert record["commit"] == _head() and record["runner"] == "snakemake" and record["runtime"]["device"] == "cpu"
    assert "--config results_dir=RUNS device=cpu capture=True" in record["command"] and record["rule"] == "train"
    assert derived["derived_from"] == "monitor/mnist/default/ce/seed0" and derived["rule"] == "derive"
    assert not any(n.endswith("trajectory.pt") or n.endswith(".lock") for n in names)
    assert (out / "targets.txt").read_text().splitlines() == [
        f"{tmp_path / 'runs'}/{j}/metrics.json" for j in ("monitor/mnist/default/ce/seed0", "t_ra/mnist/t2/ce/seed0")]


def test_without_jobs_the_session_takes_the_sets_missing_jobs_in_the_evidence_order(tmp_path: Path) -> None:
    """No JOB: the targets are those `reference missing --targets RUNS` lists for the set REFERENCE (here empty), in
    its order; a window already spent starts no job, and the archive is written (empty)."""
    (tmp_path / "ref").mkdir()
    proc, out = _session(tmp_path, 1, REFERENCE=str(tmp_path / "ref"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    listed = subprocess.run([sys.executable, "-m", "fedbalance", "reference", "missing", "--config", "config/quick.yaml",
                             "--reference", str(tmp_path / "ref"), "--targets", str(tmp_path / "runs")], cwd=REPO,
                            env={**os.environ, "PYTHONPATH": str(REPO / "src")}, capture_output=True, text=True)
    targets = (out / "targets.txt").read_text().splitlines()
    assert targets == listed.stdout.splitlines() and len(targets) > 20
    assert targets[0] == f"{tmp_path / 'runs'}/early/mnist/E/ce/seed0/metrics.json"
    # the next step's jobs, which Snakemake is told to run first (--prioritize): the early family's, seeds 0-2
    first = (out / "first.txt").read_text().splitlines()
    assert first == [t for t in targets if "/early/" in t and t.split("/seed")[-1][0] in "012"] and first == targets[:len(first)]
    assert "the window is spent: no job starts" in proc.stdout and f"no JOB: the {len(targets)} jobs" in proc.stdout
    assert f"the {len(first)} of its next step first" in proc.stdout
    assert not (tmp_path / "runs").exists()
    with tarfile.open(out / "refruns.tgz") as tar:
        assert tar.getnames() == []


def test_the_session_fails_with_snakemakes_status(tmp_path: Path) -> None:
    """A job the config does not define: Snakemake refuses it (exit 1), the session fails saying so, the archive is
    written anyway."""
    proc, out = _session(tmp_path, 600, "losses/mnist/g10/no_such_loss/seed0")
    assert proc.returncode == 1 and "FAILED: snakemake exited with status 1" in proc.stderr, proc.stdout + proc.stderr
    assert "done after" not in proc.stdout and (out / "refruns.tgz").is_file()


def test_carried_wheels_are_installed_for_the_session(tmp_path: Path) -> None:
    """A machine without Snakemake gets it from the wheels carried in WHEELS (here one small wheel): installed with
    pip into SITE, which the session puts first on its path."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    dist = "fbcarried-0.1.dist-info"
    with zipfile.ZipFile(wheels / "fbcarried-0.1-py3-none-any.whl", "w") as whl:
        whl.writestr("fbcarried/__init__.py", "CARRIED = True\n")
        whl.writestr(f"{dist}/METADATA", "Metadata-Version: 2.1\nName: fbcarried\nVersion: 0.1\n")
        whl.writestr(f"{dist}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        whl.writestr(f"{dist}/RECORD", "")
    proc, out = _session(tmp_path, 1, "monitor/mnist/default/ce/seed0", WHEELS=str(wheels))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"installed 1 wheels from {wheels} into {tmp_path / 'site'}" in proc.stdout
    assert (tmp_path / "site" / "fbcarried" / "__init__.py").read_text() == "CARRIED = True\n"


def test_a_copy_without_git_lists_its_sets_missing_jobs_on_purpose(tmp_path: Path) -> None:
    """A device machine gets a copy of the checkout without git, where no set can be read as committed: the session's
    `missing` takes the set on purpose there (said in missing.log), so the jobs it lacks are still listed; OUT inside
    the copy is refused (no git to tell its tracked folders)."""
    copy = tmp_path / "copy"
    for part in ("src", "scripts", "config", "workflow", "reference/cuda-vs-cpu"):
        shutil.copytree(REPO / part, copy / part, ignore=shutil.ignore_patterns("__pycache__"))
    env = {**os.environ, "DEVICE": "cpu", "RUNS": str(tmp_path / "runs"), "SITE": str(tmp_path / "site"),
           "WHEELS": str(tmp_path / "no-wheels"), "REFERENCE": "reference/cuda-vs-cpu",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("PYTHONPATH", None)
    proc = subprocess.run(["bash", "scripts/gpu_session.sh", str(tmp_path / "out"), _head(), "1", "1", "0"], cwd=copy,
                          env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    targets = (tmp_path / "out" / "targets.txt").read_text().splitlines()
    assert len(targets) > 20 and targets[0].startswith(f"{tmp_path / 'runs'}/")
    assert "accepting uncommitted evidence" in (tmp_path / "out" / "missing.log").read_text()
    inside = subprocess.run(["bash", "scripts/gpu_session.sh", "results_gpu", _head(), "1", "1", "0"], cwd=copy,
                            env=env, capture_output=True, text=True, timeout=300)
    assert inside.returncode == 2 and "which has no git to tell its tracked folders" in inside.stderr, inside.stderr
    assert not (copy / "results_gpu").exists()
