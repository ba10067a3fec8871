"""The release: setuptools-scm's version of the tree, read by the library, printed by the CLI, checked by the workflow."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import fedbalance
from fedbalance import version as v

REPO = Path(__file__).resolve().parents[1]


def _git(*args: str, cwd: Path = REPO) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()


def test_scm_version_is_the_git_history() -> None:
    """Before any tag: 0.1.devN+gHASH, N the commits so far; at a tag: the tag's release."""
    pytest.importorskip("setuptools_scm")
    got = v._scm_version(REPO)
    tags = subprocess.run(["git", "describe", "--tags", "--abbrev=0"], cwd=REPO, capture_output=True, text=True)
    if tags.returncode == 0:
        assert got.startswith(v.release(tags.stdout.strip())[:1]) and got != v.UNKNOWN
    else:
        count, short = _git("rev-list", "--count", "HEAD"), _git("rev-parse", "--short=7", "HEAD")
        assert got.startswith(f"0.1.dev{count}+g{short}"), got


def _import_copy(tmp_path: Path, version_file: str | None) -> str:
    """fedbalance.__version__ of a copy of src/fedbalance (outside any git tree), with or without _version.py."""
    pkg = tmp_path / "src" / "fedbalance"
    shutil.copytree(REPO / "src" / "fedbalance", pkg, ignore=shutil.ignore_patterns("_version.py", "__pycache__"))
    if version_file is not None:
        (pkg / "_version.py").write_text(f"version = {version_file!r}\n")
    env = {**os.environ, "PYTHONPATH": str(pkg.parent)}
    r = subprocess.run([sys.executable, "-c", "import fedbalance; print(fedbalance.__version__)"], cwd=tmp_path,
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def test_version_is_the_build_file_of_this_code(tmp_path: Path) -> None:
    assert _import_copy(tmp_path, "9.8.7") == "9.8.7"


def test_another_trees_install_is_not_this_codes_version(tmp_path: Path) -> None:
    """A copy never built, beside an install of another tree (this checkout's, editable): its version is unknown."""
    assert _import_copy(tmp_path, None) == v.UNKNOWN


def test_cli_version() -> None:
    r = subprocess.run([sys.executable, "-m", "fedbalance", "--version"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == f"fedbalance {fedbalance.__version__}", r.stdout + r.stderr


def test_job_metrics_record_the_version() -> None:
    import torch

    from fedbalance.jobs.run import runtime

    assert runtime(torch.device("cpu"), True)["fedbalance"] == fedbalance.__version__ != "0.1.0"


def test_workflow_release_problem(tmp_path: Path) -> None:
    src = Path(v.__file__).resolve().parents[1]
    assert v.workflow_release_problem(src=src, tag=None, origin="here") is None
    (tmp_path / "fedbalance").mkdir()
    other = v.workflow_release_problem(src=tmp_path, tag=None, origin="/elsewhere")
    assert other is not None and str(tmp_path) in other and "/elsewhere" in other
    assert v.workflow_release_problem(src=None, tag=f"v{fedbalance.__version__}", origin="gh") is None
    assert v.workflow_release_problem(src=None, tag="main", origin="gh") is None  # a branch
    msg = v.workflow_release_problem(src=None, tag="v9.9.9", origin="github OWNER/fedbalance")
    assert msg is not None and "9.9.9" in msg and fedbalance.__version__ in msg and "@v9.9.9" in msg
    assert v.mismatch_allowed({v.ALLOW_MISMATCH_ENV: "1"}) and not v.mismatch_allowed({v.ALLOW_MISMATCH_ENV: "0"})
    assert not v.mismatch_allowed({})


def test_workflow_stops_on_another_release(tmp_path: Path) -> None:
    """A module fetched at a tag that is not the installed library's release stops before planning; the override runs on."""
    wf = tmp_path / "wf"
    subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{REPO}", str(wf)], check=True)
    shutil.copy2(REPO / "workflow" / "Snakefile", wf / "workflow" / "Snakefile")  # this working tree's check
    for args in (["add", "workflow/Snakefile"],
                 ["-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "--allow-empty", "-m", "t"],
                 ["tag", "v9.9.9"]):
        _git(*args, cwd=wf)
    study = tmp_path / "study"
    study.mkdir()
    (study / "Snakefile").write_text(
        f'configfile: "{REPO}/config/quick.yaml"\n\n\nmodule fedbalance:\n    snakefile:\n'
        f'        gitfile("{wf}", path="workflow/Snakefile", tag="v9.9.9")\n    config:\n        config\n\n\n'
        "use rule * from fedbalance\n")
    cmd = [sys.executable, "-m", "snakemake", "-n", "--cores", "1"]
    env = {k: val for k, val in os.environ.items() if k != v.ALLOW_MISMATCH_ENV}
    r = subprocess.run(cmd, cwd=study, capture_output=True, text=True, env=env, timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode != 0 and "release 9.9.9" in out and v.ALLOW_MISMATCH_ENV in out, out[-3000:]
    r = subprocess.run(cmd, cwd=study, capture_output=True, text=True, env={**env, v.ALLOW_MISMATCH_ENV: "1"}, timeout=300)
    assert "release 9.9.9" not in r.stdout + r.stderr
