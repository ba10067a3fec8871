"""Every read finds a set in the checkout the code runs in (issue 75, item 1; ``fedbalance.jobs.seal.locate``): the
repository is the package's own checkout's or the working folder's (with every ``git worktree`` of it), never the one
found above the set's resolved path. A set reached through a link on its path (the set itself, or a folder above it,
replaced by a link to a forged copy outside the repository), lying outside that work tree, or under another ``.git``
(a ``git init`` in ``reference/``, or a ``.git`` file naming another repository) between the set and the work tree's
root is refused by ``status``, ``missing``, ``compare`` and a render, unless uncommitted evidence is accepted on purpose
(then said, naming why). A work tree's own ``.git`` file at its root (``git worktree add``) is its own: a set in a
worktree, and one read from another worktree of the same repository, are read as committed."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from fedbalance.jobs import seal
from fedbalance.jobs.config import load_config

REPO = Path(__file__).resolve().parents[1]
MNIST = REPO / "config" / "mnist.yaml"
SET = "reference/cuda-vs-cpu"
FORGED = "losses/mnist/g10/ce/seed0"
GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}


def _git(where: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(where), *args], env={**os.environ, **GIT_ENV}, capture_output=True,
                          text=True, check=True).stdout


def _clone(tmp_path: Path) -> Path:
    """A clone of this repository holding its committed reference/cuda-vs-cpu and config/ (a sparse checkout)."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--no-checkout", str(REPO), str(clone)], check=True,
                   env={**os.environ, **GIT_ENV})
    _git(clone, "sparse-checkout", "set", SET, "config")
    _git(clone, "checkout", "-q")
    return clone


def _forge(root: Path) -> None:
    """Rewrite one job's provenance.json (its commit) and its manifest line: the manifest agrees, the commit does not
    (test_evidence.py forges the numbers themselves)."""
    record = root / FORGED / "provenance.json"
    data = json.loads(record.read_text())
    data["commit"] = "f" * 40
    record.write_text(json.dumps(data, indent=1))
    manifest = seal.read_manifest(root)
    manifest[f"{FORGED}/provenance.json"] = seal.sha256(record)
    (root / seal.MANIFEST).write_text(seal.manifest_text(manifest))


def _reads(root: Path, cwd: Path, **env: str) -> list[subprocess.CompletedProcess]:
    """``reference status``, ``reference missing`` and ``compare`` of the set ``root`` run in ``cwd`` (``cli.main``, in
    this process), each's exit status and output as a process's."""
    from fedbalance.cli import main

    commands = [["reference", "status", "--reference", str(root)],
                ["reference", "missing", "--reference", str(root), "--config", str(MNIST)],
                ["compare", "--ours", str(REPO / SET), "--reference", str(root)]]
    out = []
    saved = os.environ.pop(seal.ACCEPT_ENV, None)
    os.environ.update(env)
    try:
        for argv in commands:
            stdout, stderr = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr), contextlib.chdir(cwd):
                code = main(argv)
            out.append(subprocess.CompletedProcess(argv, code, stdout.getvalue(), stderr.getvalue()))
    finally:
        for key in env:
            os.environ.pop(key, None)
        if saved is not None:
            os.environ[seal.ACCEPT_ENV] = saved
    return out


def _refused(procs: list[subprocess.CompletedProcess], *words: str) -> None:
    for proc in procs:
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        assert proc.returncode == 2 and len(lines) == 1, (proc.args, proc.stderr[-2000:])
        for w in words:
            assert w in lines[0], (w, lines[0])


def _read(procs: list[subprocess.CompletedProcess]) -> None:
    for proc in procs:
        assert proc.returncode == 0, (proc.args, proc.stderr[-2000:])


def test_a_set_replaced_by_a_link_to_a_forged_copy_is_refused(tmp_path: Path, monkeypatch) -> None:
    """The issue's route: the set moved out of the repository, forged there with its manifest, and a link left in its
    place (no repository above the copy: before, the manifest was all that was checked). Refused by every read and a
    render, naming the link; the same through a link one folder up (reference/ -> a copy); read on purpose only."""
    from fedbalance.evidence.reference import ReferenceSetError, render_jobs

    clone = _clone(tmp_path)
    root = clone / SET
    _read(_reads(root, clone))
    forged = tmp_path / "elsewhere" / "cuda-vs-cpu"
    shutil.move(root, forged)
    _forge(forged)
    seal.verify(forged)  # the forged copy's manifest agrees with it
    root.symlink_to(forged)
    _refused(_reads(root, clone), f"is reached through the link {root} -> {forged}")
    from fedbalance.cli import main

    (tmp_path / "runs").mkdir()
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.chdir(clone):  # collect reads its target as every read does
        assert main(["reference", "collect", str(tmp_path / "runs"), "--into", SET]) == 2
    assert "is reached through the link" in err.getvalue() and seal.verify(forged) is None
    monkeypatch.chdir(clone)
    with pytest.raises(ReferenceSetError, match="reached through the link"):
        render_jobs(load_config(MNIST), SET)
    # accepted on purpose: read, and the output says why it is not committed evidence
    said: list[str] = []
    held, _ = render_jobs({**load_config(MNIST), "accept_uncommitted": True}, SET, notice=said.append)
    assert held and len(said) == 1 and "accepting uncommitted evidence" in said[0] and "reached through the link" in said[0]
    status = _reads(root, clone, **{seal.ACCEPT_ENV: "1"})[0]
    assert status.returncode == 0 and "warning: accepting uncommitted evidence" in status.stderr
    # a link one folder up: reference/ -> a copy holding the forged set
    shutil.rmtree(clone / "reference")
    (clone / "reference").symlink_to(forged.parent)
    _refused(_reads(clone / SET, clone), "is reached through the link", str(clone / "reference"))
    # the set named through a link to the whole checkout (e.g. a home folder that is a link) is the checkout's set
    (clone / "reference").unlink()
    _git(clone, "checkout", "-q", "--", "reference")
    (tmp_path / "home").symlink_to(clone)
    _read(_reads(tmp_path / "home" / SET, clone))


def test_a_set_outside_the_checkout_is_refused_unless_accepted(tmp_path: Path) -> None:
    """A copy of a committed set outside any checkout (its manifest intact), and one in a repository of its own that is
    not the code's nor the working folder's: refused, naming the checkout; the committed set of the package's own
    checkout is read from any working folder."""
    copy = tmp_path / "copy"
    shutil.copytree(REPO / SET, copy)
    seal.verify(copy)
    _refused(_reads(copy, tmp_path), "lies outside the checkout the code runs in")
    other = tmp_path / "other"
    shutil.copytree(REPO / SET, other / "reference" / "set")
    _git(other, "init", "-q")
    _git(other, "add", "-A")
    _git(other, "commit", "-qm", "forged, but committed in a repository of its own")
    _refused(_reads(other / "reference" / "set", tmp_path), "lies outside the checkout the code runs in")
    _read(_reads(REPO / SET, tmp_path))


def test_a_nested_repository_does_not_make_a_forgery_committed(tmp_path: Path, monkeypatch) -> None:
    """The issue's routes: ``git init && git add && git commit`` inside reference/ after forging, and a ``.git`` file
    in reference/ naming another repository whose HEAD holds the forgery: git itself then reads the forgery as
    committed, every read refuses it naming the nested ``.git``. Run from inside the nested repository too: the
    working folder's repository is not taken then (its work tree lies inside another repository's)."""
    clone = _clone(tmp_path)
    root = clone / SET
    _forge(root)
    _refused(_reads(root, clone), "differs from its commit")
    nested = clone / "reference"
    _git(nested, "init", "-q")
    _git(nested, "add", "-A")
    _git(nested, "commit", "-qm", "forged")
    assert _git(nested, "status", "--porcelain") == ""  # git, asked from the set, sees nothing uncommitted
    _refused(_reads(root, clone), f"{nested / '.git'} lies between it and the checkout's root {clone}")
    monkeypatch.chdir(nested)  # the working folder's repository is then the nested one: not taken (it is nested)
    with pytest.raises(seal.SealError, match="lies outside the checkout the code runs in"):
        seal.verify_committed(root)
    assert nested.resolve() not in seal.checkouts()
    # a .git file naming another repository whose HEAD holds the forgery
    shutil.move(nested / ".git", tmp_path / "forged.git")
    (nested / ".git").write_text(f"gitdir: {tmp_path / 'forged.git'}\n")
    assert _git(nested, "status", "--porcelain") == ""
    _refused(_reads(root, clone), f"{nested / '.git'} lies between it and the checkout's root")
    (nested / ".git").unlink()
    _git(clone, "checkout", "-q", "--", SET)
    _read(_reads(root, clone))


def test_a_set_in_a_git_worktree_and_one_read_from_another_worktree_are_committed(tmp_path: Path, monkeypatch) -> None:
    """The project's own workflow: a `git worktree` (its root holds a .git file) reads its own set, and reads the main
    checkout's set (REFERENCE=<checkout>/reference/mnist) as committed, each against the HEAD of the work tree holding
    it; a forgery in either is refused; a .git file below the worktree's root is refused as in the main checkout."""
    clone = _clone(tmp_path)
    wt = tmp_path / "wt"
    _git(clone, "worktree", "add", "-q", "--detach", "--no-checkout", str(wt))
    _git(wt, "sparse-checkout", "set", SET, "config")
    _git(wt, "checkout", "-q")
    assert (wt / ".git").is_file()
    _read(_reads(wt / SET, wt))  # the worktree's own set
    _read(_reads(clone / SET, wt))  # the main checkout's set, read from the worktree
    _read(_reads(wt / SET, clone))  # and the other way
    _forge(clone / SET)
    _refused(_reads(clone / SET, wt), "differs from its commit", f"2 changed (MANIFEST.sha256, {FORGED}/provenance.json)")
    _git(clone, "checkout", "-q", "--", SET)
    (wt / "reference" / ".git").write_text(f"gitdir: {clone / '.git'}\n")
    _refused(_reads(wt / SET, wt), "lies between it and the checkout's root")
    (wt / "reference" / ".git").unlink()
    monkeypatch.chdir(wt)
    assert seal.locate(wt / SET) == wt.resolve() and seal.locate(clone / SET) == clone.resolve()
    assert seal.verify_committed(wt / SET) == []


def test_the_committed_sets_pass_every_read_here() -> None:
    """This checkout's sets: located in it, equal to HEAD, read by status, missing and compare."""
    for name in ("reference/mnist", SET):
        assert seal.locate(REPO / name) == REPO.resolve()
        assert seal.verify_committed(REPO / name) == []
    _read(_reads(REPO / SET, REPO))


def test_a_checkout_with_autocrlf_keeps_the_sets_bytes(tmp_path: Path, monkeypatch) -> None:
    """core.autocrlf=true converts text files' line ends on checkout: without the repository's .gitattributes
    (``-text`` for the sets' files and the study configs) a set checked out so is refused by every read (its files are
    not its manifest's), and the advice (git checkout) makes the same files again; with it, the bytes are kept."""
    for attributes in (False, True):
        repo = tmp_path / f"repo-{attributes}"
        shutil.copytree(REPO / "reference" / "mnist" / FORGED, repo / "reference" / "set" / FORGED)
        (repo / "config").mkdir()
        shutil.copy(MNIST, repo / "config" / "mnist.yaml")
        seal.seal(repo / "reference" / "set", repo / "config" / "mnist.yaml")
        if attributes:
            shutil.copy(REPO / ".gitattributes", repo / ".gitattributes")
        _git(repo, "init", "-q")
        _git(repo, "config", "core.autocrlf", "true")
        _git(repo, "add", "-A")
        _git(repo, "commit", "-qm", "set")
        shutil.rmtree(repo / "reference")
        _git(repo, "checkout", "-q", "--", ".")
        monkeypatch.chdir(repo)
        root = repo / "reference" / "set"
        if attributes:
            assert seal.verify_committed(root) == []
            assert seal.marker_config(root) == root / "../../config/mnist.yaml"
        else:
            assert b"\r\n" in (root / FORGED / "rounds.csv").read_bytes()
            with pytest.raises(seal.SealError, match="its files differ from MANIFEST.sha256"):
                seal.verify_committed(root)


def test_status_names_a_job_changed_after_the_commit_that_collected_it(tmp_path: Path, monkeypatch) -> None:
    """A job's files changed by a later commit than the one that last changed its provenance.json (collect rewrites
    the record with every change it makes): ``reference status`` names the job and both commits; a job whose three
    files changed together (a replacement) is not named."""
    from fedbalance.evidence import refset

    repo = tmp_path / "repo"
    jobs = ["losses/mnist/g10/ce/seed0", "losses/mnist/g10/ce/seed1"]
    for job in jobs:
        shutil.copytree(REPO / "reference" / "mnist" / job, repo / "reference" / "set" / job)
    shutil.copytree(REPO / "config", repo / "config")
    root = repo / "reference" / "set"
    seal.seal(root, repo / "config" / "mnist.yaml")
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "collected")
    monkeypatch.chdir(repo)
    assert "changed after" not in refset.status_text(root)
    for job, files in ((jobs[0], ("metrics.json",)), (jobs[1], ("metrics.json", "provenance.json"))):
        for name in files:  # a key added: the job's numbers stay whole
            data = json.loads((root / job / name).read_text())
            data["note"] = "edited"
            (root / job / name).write_text(json.dumps(data, indent=1))
    seal.seal(root)
    _git(repo, "commit", "-qam", "edited")
    edited, collected = (_git(repo, "rev-parse", f"HEAD{s}").strip()[:7] for s in ("", "~1"))
    text = refset.status_text(root)
    assert f"changed after it was collected: {jobs[0]}: metrics.json last changed by {edited}, its provenance.json " \
           f"by {collected}" in text, text
    assert jobs[1] not in text.split("changed after")[1]


def test_an_ignored_file_in_a_set_is_named_with_the_command_that_removes_it(tmp_path: Path, monkeypatch) -> None:
    """A file git ignores (``*.log``) put into a committed set: ``git status`` shows nothing, every read refuses the set
    naming the file, and the advice's command removes it (after which the set is read)."""
    repo = tmp_path / "repo"
    shutil.copytree(REPO / "reference" / "mnist" / FORGED, repo / "reference" / "set" / FORGED)
    (repo / ".gitignore").write_text("*.log\n")
    root = repo / "reference" / "set"
    seal.seal(root)
    (root / seal.MARKER).write_text(json.dumps({"format": seal.FORMAT, "config": "../../config/mnist.yaml"}))
    seal.seal(root)
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "set")
    monkeypatch.chdir(repo)
    (root / FORGED / "run.log").write_text("a log\n")
    assert _git(repo, "status", "--porcelain") == ""
    with pytest.raises(seal.SealError) as exc:
        seal.verify_committed(root)
    message = str(exc.value)
    assert f"1 extra ({FORGED}/run.log)" in message and f"rm -- {root}/{FORGED}/run.log" in message, message
    command = message.split("rm -- ", 1)[1].split(" (")[0]
    subprocess.run(["rm", "--", *command.split()], check=True)
    assert seal.verify_committed(root) == []


def test_a_folder_gone_while_it_is_looked_through_is_no_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A folder that vanishes between being listed and being opened (a process's folder in /proc when a script is
    given RENDER=/, a temporary folder another process removes) holds no set: the search for sets below a folder
    goes on past it, finds the set beside it, and a refusal is still the one-line SealError."""
    (tmp_path / "a" / "set").mkdir(parents=True)
    (tmp_path / "a" / "set" / seal.MARKER).write_text("{}")
    (tmp_path / "gone" / "x").mkdir(parents=True)
    real = os.scandir

    def scandir(path: str | os.PathLike = ".") -> object:
        if Path(path).name in ("gone", "x"):
            raise FileNotFoundError(2, "No such file or directory", str(path))
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    assert seal.sets_below(tmp_path) == [tmp_path / "a" / "set"]
    with pytest.raises(seal.SealError, match="RENDER .* holds the reference set"):
        seal.refuse_inside(tmp_path, "RENDER")
