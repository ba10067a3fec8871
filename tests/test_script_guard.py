"""The shipped scripts delete or write nothing of a set, the checkout's root, its git folder or a tracked folder
(issue 75, item 2): ``scripts/collect_render.sh`` (RENDER, which it empties, and RUNS), ``scripts/evidence_slots.sh``
(RUNS) and ``scripts/gpu_session.sh`` (OUT, RUNS, SITE) each refuse such a path however it is spelled (relative, with
``..``, a trailing slash, absolute, through a link to it or to its parent, a folder holding a link into a set), with one
line and exit status 2, before any command runs; the checkout's bytes are the same afterwards.

Each test runs the scripts in a sandbox: a git repository of its own holding copies of the scripts and of ``src/`` (the
guard is the script's own checkout's library), a tracked ``docs/`` and a sealed ``reference/mnist``; were a guard to
fail, only the sandbox would be emptied."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fedbalance.jobs import seal

REPO = Path(__file__).resolve().parents[1]
GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
JOB = "losses/mnist/g10/ce/seed0"

# One stand-in for Snakemake and fedbalance: it records that it ran (no command may run once a path is refused), with
# FEDBALANCE_ACCEPT_UNCOMMITTED as it found it.
FAKE = ("import os, sys\nopen(os.environ['CALLS'], 'a').write(' '.join(sys.argv[1:]) + ' accept='"
        " + os.environ.get('FEDBALANCE_ACCEPT_UNCOMMITTED', '-') + '\\n')\n")


def _git(where: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(where), *args], env={**os.environ, **GIT_ENV}, capture_output=True,
                          text=True, check=True).stdout


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A checkout of its own: the scripts, src/, config/mnist.yaml, a tracked docs/guide.md and a sealed, committed
    reference/mnist of one job; results* and runs ignored."""
    root = tmp_path_factory.mktemp("guard") / "checkout"
    shutil.copytree(REPO / "scripts", root / "scripts", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "src", root / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    (root / "config").mkdir()
    shutil.copy(REPO / "config" / "mnist.yaml", root / "config" / "mnist.yaml")
    (root / "docs").mkdir()
    (root / "docs" / "guide.md").write_text("a tracked doc\n")
    shutil.copytree(REPO / "reference" / "mnist" / JOB, root / "reference" / "mnist" / JOB)
    seal.seal(root / "reference" / "mnist", root / "config" / "mnist.yaml")
    (root / ".gitignore").write_text("results*/\nruns/\n__pycache__/\n")
    _git(root, "init", "-q")
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", "sandbox")
    return root


def _digest(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if "__pycache__" in p.parts or ".git" in p.relative_to(root).parts[:1]:
            continue
        h.update(str(p.relative_to(root)).encode())
        if p.is_symlink():
            h.update(os.readlink(p).encode())
        elif p.is_file():
            h.update(p.read_bytes())
    return h.hexdigest()


def _spellings(sandbox: Path, links: Path) -> dict[str, tuple[str, str]]:
    """Name -> (the path as a script is given it, run from the sandbox; words its refusal holds)."""
    links.mkdir(exist_ok=True)
    made = {"set": sandbox / "reference" / "mnist", "set's parent": sandbox / "reference", "root": sandbox,
            "docs": sandbox / "docs"}
    for name, target in made.items():
        link = links / name.replace("'", "").replace(" ", "_")
        if not link.is_symlink():
            link.symlink_to(target)
    holder = links / "holder"
    if not holder.exists():
        holder.mkdir()
        (holder / "losses").symlink_to(sandbox / "reference" / "mnist" / "losses")
    return {
        "the set, relative": ("reference/mnist", "lies in the reference set"),
        "the set, trailing slash": ("reference/mnist/", "lies in the reference set"),
        "the set, through ..": ("docs/../reference/mnist", "lies in the reference set"),
        "the set, absolute": (str(sandbox / "reference" / "mnist"), "lies in the reference set"),
        "in the set": ("reference/mnist/losses/", "lies in the reference set"),
        "holding the set": ("reference", "holds the reference set"),
        "a link to the set": (str(links / "set"), "lies in the reference set"),
        "a link to the set's parent": (str(links / "sets_parent"), "holds the reference set"),
        "a folder linking into the set": (str(holder), "is a link to"),
        "the root": (".", "holds the reference set"),
        "the root, through ..": ("docs/..", "holds the reference set"),
        "the root, absolute with a slash": (f"{sandbox}/", "holds the reference set"),
        "a link to the root": (str(links / "root"), "holds the reference set"),
        "above the root": ("..", "holds the reference set"),
        "docs": ("docs", "a folder git tracks"),
        "docs, trailing slash": ("docs/", "a folder git tracks"),
        "in docs": ("docs/render", "lies in"),
        "docs, through ..": ("src/../docs", "a folder git tracks"),
        "a link to docs": (str(links / "docs"), "a folder git tracks"),
        "a tracked folder": ("src", "a folder git tracks"),
        "in a tracked folder": ("config/render", "a folder git tracks"),
        "the git folder": (".git", "git folder"),
        "in the git folder": (".git/render", "git folder"),
        "empty": ("", "is empty"),
        "a tracked file": ("docs/guide.md", "is a file"),
    }


NAMES = ["the set, relative", "the set, trailing slash", "the set, through ..", "the set, absolute", "in the set",
         "holding the set", "a link to the set", "a link to the set's parent", "a folder linking into the set",
         "the root", "the root, through ..", "the root, absolute with a slash", "a link to the root", "above the root",
         "docs", "docs, trailing slash", "in docs", "docs, through ..", "a link to docs", "a tracked folder",
         "in a tracked folder", "the git folder", "in the git folder", "empty", "a tracked file"]
FEW = ["the set, relative", "the set, through ..", "the set, trailing slash", "a link to the set",
       "a link to the set's parent", "a link to the root", "docs"]
"""The spellings every other path of a script is tried with: relative, ``..``, a trailing slash, a link, a link to the
parent, and the checkout's root and docs/ through a link or by name."""


def _run(sandbox: Path, tmp_path: Path, script: str, args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    fake = tmp_path / "fake.py"
    fake.write_text(FAKE)
    full = {**os.environ, "CALLS": str(tmp_path / "calls.log"), "SNAKEMAKE": f"{sys.executable} {fake}",
            "FEDBALANCE": f"{sys.executable} {fake}", "PYTHON": sys.executable,
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
            "WHEELS": str(tmp_path / "no-wheels"), **env}
    full.pop("PYTHONPATH", None)
    return subprocess.run(["bash", f"scripts/{script}", *args], cwd=sandbox, env=full, capture_output=True, text=True,
                          timeout=120)


def _cases() -> list[tuple[str, str, str]]:
    """(script, its path variable, spelling): every spelling for the paths a script deletes or writes first (RENDER,
    evidence_slots' RUNS, gpu_session's OUT), the few for the others."""
    out = []
    for script, var in (("collect_render.sh", "RENDER"), ("evidence_slots.sh", "RUNS"), ("gpu_session.sh", "OUT")):
        out += [(script, var, name) for name in NAMES if not (var == "RENDER" and name == "empty")]  # "": the default
    for script, var in (("collect_render.sh", "RUNS"), ("gpu_session.sh", "RUNS"), ("gpu_session.sh", "SITE")):
        out += [(script, var, name) for name in FEW]
    return out


def _invocation(sandbox: Path, tmp_path: Path, script: str, var: str, path: str) -> tuple[list[str], dict[str, str]]:
    runs = tmp_path / "runs"
    runs.mkdir(exist_ok=True)
    if script == "collect_render.sh":
        if var == "RENDER":
            return [str(runs)], {"RENDER": path}
        return [path], {"RENDER": str(tmp_path / "render")}
    if script == "evidence_slots.sh":
        return ["1", path], {}
    env = {"RUNS": str(tmp_path / "refruns"), "SITE": str(tmp_path / "site"), "DEVICE": "cpu"}
    out = str(tmp_path / "out")
    if var == "OUT":
        out = path
    else:
        env[var] = path
    return [out, "0" * 40, "1", "1", "0", JOB], env


@pytest.mark.parametrize("script, var, name", _cases())
def test_a_script_refuses_a_path_it_must_not_write_before_anything_runs(sandbox: Path, tmp_path: Path, script: str,
                                                                       var: str, name: str) -> None:
    path, words = _spellings(sandbox, tmp_path / "links")[name]
    before = _digest(sandbox)
    args, env = _invocation(sandbox, tmp_path, script, var, path)
    proc = _run(sandbox, tmp_path, script, args, env)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1, (proc.returncode, proc.stdout, proc.stderr)
    assert lines[0].startswith(f"FAILED: {var}") and words in lines[0], lines[0]
    assert not (tmp_path / "calls.log").exists() and proc.stdout == ""
    assert _digest(sandbox) == before
    assert not (sandbox / "docs" / "render").exists() and not (sandbox / "config" / "render").exists()
    assert not (tmp_path / "out").exists() and not (tmp_path / "site").exists() and not (tmp_path / "refruns").exists()


def test_a_folder_of_its_own_is_taken(sandbox: Path, tmp_path: Path) -> None:
    """The guard refuses the paths above, not every path: an ignored folder below the root and one outside the checkout
    pass it, and the script's commands run."""
    for render in ("results_reference", str(tmp_path / "render")):
        args, env = _invocation(sandbox, tmp_path, "collect_render.sh", "RENDER", render)
        proc = _run(sandbox, tmp_path, "collect_render.sh", args, {**env, "REFERENCE": "reference/mnist"})
        assert proc.returncode == 0, proc.stderr
        first = (tmp_path / "calls.log").read_text().splitlines()[0]
        assert first.startswith("reference collect") and first.endswith("accept=-")  # collect reads as committed
        (tmp_path / "calls.log").unlink()
    shutil.rmtree(sandbox / "results_reference", ignore_errors=True)
    for runs in ("runs/slots", str(tmp_path / "slots")):
        proc = _run(sandbox, tmp_path, "evidence_slots.sh", ["1", runs], {})
        calls = (tmp_path / "calls.log").read_text().splitlines()
        # the slots' list of missing jobs reads the set as it is: a collect not yet committed leaves it at once
        assert calls[0].startswith("reference missing") and calls[0].endswith("accept=1"), (calls, proc.stderr)
        (tmp_path / "calls.log").unlink()
    shutil.rmtree(sandbox / "runs", ignore_errors=True)


def test_evidence_slots_names_a_bad_runs_in_one_line(sandbox: Path, tmp_path: Path) -> None:
    """RUNS "" or a file: one line naming RUNS (it was a bash error), exit status 2, nothing written."""
    (tmp_path / "afile").write_text("x")
    for runs, words in (("", "RUNS is empty"), (str(tmp_path / "afile"), "is a file")):
        proc = _run(sandbox, tmp_path, "evidence_slots.sh", ["1", runs], {})
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        assert proc.returncode == 2 and len(lines) == 1 and words in lines[0], proc.stderr
        assert not (tmp_path / "calls.log").exists()
