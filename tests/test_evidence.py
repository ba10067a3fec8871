"""Evidence integrity, round 3 (issue 60): a consistent forgery of a committed set is refused, no link lets Snakemake
delete a set's files, every writing option of the CLI refuses a set, and every impossible number of a job is refused by
``jobfolder.check``, the one check every read and ``collect`` run."""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import write_job
from fedbalance.jobs import jobfolder
from fedbalance.jobs import seal
from fedbalance.jobs.config import ConfigError, load_config, validate
from fedbalance.jobs.jobfolder import JobFolderError
from fedbalance.common.records import Job

REPO = Path(__file__).resolve().parents[1]
MNIST = REPO / "config" / "mnist.yaml"
QUICK = REPO / "config" / "quick.yaml"
SETS = ("reference/mnist", "reference/cuda-vs-cpu")
FORGED = "losses/mnist/g10/ce/seed0"
"""The job of reference/cuda-vs-cpu the forgery tests change."""
GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != seal.ACCEPT_ENV}
    return {**env, "PYTHONPATH": str(REPO / "src"), **extra}


def _cli(*args: str, cwd: Path = REPO, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fedbalance", *args], cwd=cwd, env=_env(**env), capture_output=True,
                          text=True, timeout=600)


def _script(*args: str, cwd: Path = REPO, **env: str) -> subprocess.CompletedProcess:
    """``fedbalance reference ARGS`` in a process of its own, run in ``cwd`` (whose repository a set is read from)."""
    return _cli("reference", *args, cwd=cwd, **env)


def _snakemake(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "snakemake", "--cores", "1", *args], cwd=REPO, env=_env(),
                          capture_output=True, text=True, timeout=900)


def _one_line(proc: subprocess.CompletedProcess, *words: str) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1, (proc.returncode, proc.stdout[-2000:], proc.stderr[-4000:])
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


def _git(where: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(where), *args], env={**os.environ, **GIT_ENV}, capture_output=True,
                          text=True, check=True).stdout


def _sealed_copy(root: Path, jobs: list[str], source: str = "reference/mnist") -> Path:
    """``jobs`` of a committed set copied into a sealed set of their own at ``root`` (outside git)."""
    for job in jobs:
        shutil.copytree(REPO / source / job, root / job)
    seal.seal(root, MNIST)
    return root


def _clone(tmp_path: Path) -> Path:
    """A clone of this repository holding its committed reference/cuda-vs-cpu and config/ (a sparse checkout)."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--no-checkout", str(REPO), str(clone)], check=True, env={**os.environ, **GIT_ENV})
    _git(clone, "sparse-checkout", "set", "reference/cuda-vs-cpu", "config")
    _git(clone, "checkout", "-q")
    return clone


def _rows(path: Path) -> list[list[str]]:
    return list(csv.reader(io.StringIO(path.read_text(), newline="")))


def _write_rows(path: Path, rows: list[list[str]]) -> None:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    path.write_text(buf.getvalue())


def _forge(root: Path, job: str, shift: float) -> float:
    """Raise the job's Ac.M by ``shift`` everywhere it is recorded (each minority class's accuracy, final.acc_minority,
    the last row of rounds.csv) and rewrite both files' manifest lines: a consistent forgery; return the forged Ac.M."""
    folder = root / job
    metrics = json.loads((folder / "metrics.json").read_text())
    final = metrics["final"]
    minority = metrics["config"]["minority_classes"]
    final["per_class_acc"] = [a + shift if q in minority else a for q, a in enumerate(final["per_class_acc"])]
    final["acc_minority"] = sum(final["per_class_acc"][q] for q in minority) / len(minority)
    (folder / "metrics.json").write_text(json.dumps(metrics, indent=1))
    rows = _rows(folder / "rounds.csv")
    rows[-1][rows[0].index("acc_minority")] = repr(final["acc_minority"])
    _write_rows(folder / "rounds.csv", rows)
    manifest = seal.read_manifest(root)
    for name in ("metrics.json", "rounds.csv"):
        manifest[f"{job}/{name}"] = seal.sha256(folder / name)
    (root / seal.MANIFEST).write_text(seal.manifest_text(manifest))
    return final["acc_minority"]


# -- item 1: a set inside a git work tree is read as committed -------------------------------------------------------

def test_the_committed_sets_are_their_commit_and_every_job_passes_the_check() -> None:
    """Both committed sets equal HEAD (a fresh clone's, as CI reads them) and each of their jobs passes every rule of
    ``jobfolder.check``; the set's own files, compared with git's, are what ``uncommitted`` reports (nothing)."""
    for name in SETS:
        root = REPO / name
        assert seal.verify_committed(root) == [] and seal.uncommitted(root) == []
        folders = jobfolder.job_folders(root)
        assert folders and all(jobfolder.check(f)["rounds"] > 0 for f in folders)
        # git agrees with the hashing: every file of the set is tracked at HEAD
        tracked = set(_git(REPO, "ls-files", "--", name).splitlines())
        assert tracked == {f"{name}/{p}" for p in seal.set_files(root)}


def test_a_consistent_forgery_in_a_clone_is_refused_by_every_read_naming_the_files(tmp_path: Path, monkeypatch) -> None:
    """The issue's forgery: final.acc_minority and rounds.csv's last row changed alike (each minority class's accuracy
    too, so final.per_class_acc agrees), both manifest lines rewritten. The manifest and the job's own checks pass;
    the commit does not: a render's render_jobs, compare and the runner's status refuse it naming the three files, and
    neither git's index (--assume-unchanged), a replacement object (git replace) nor GIT_DIR naming a repository whose
    HEAD holds the forgery hides it."""
    from fedbalance.evidence.reference import ReferenceSetError, compare, render_jobs

    clone = _clone(tmp_path)
    monkeypatch.chdir(clone)  # the clone is the working folder's repository (seal.checkouts)
    root = clone / "reference" / "cuda-vs-cpu"
    before = jobfolder.check(root / FORGED)["final"]["acc_minority"]
    forged = _forge(root, FORGED, 0.02)
    assert forged == pytest.approx(before + 0.02)
    seal.verify(root)  # the manifest agrees with the forged files ...
    assert jobfolder.check(root / FORGED)["final"]["acc_minority"] == forged  # ... and so do the job's two files
    files = [f"{FORGED}/metrics.json", f"{FORGED}/rounds.csv", seal.MANIFEST]
    assert seal.uncommitted(root) == sorted(files)
    named = "3 changed (" + ", ".join(sorted(files)) + ")"
    cfg = load_config(MNIST)
    with pytest.raises(ReferenceSetError, match="differs from its commit") as exc:
        render_jobs(cfg, root)
    assert named in str(exc.value) and "\n" not in str(exc.value)
    with pytest.raises(seal.SealError, match="differs from its commit"):
        compare(REPO / "reference" / "cuda-vs-cpu", root)
    _one_line(_script("status", "--reference", str(root), cwd=clone), "differs from its commit", named)
    _one_line(_cli("compare", "--ours", str(REPO / "reference" / "cuda-vs-cpu"), "--reference", str(root), cwd=clone),
              "differs from its commit", named)
    # git's own view hidden: the index told the files are unchanged, then HEAD replaced by a commit holding them
    _git(clone, "update-index", "--assume-unchanged", *(f"reference/cuda-vs-cpu/{f}" for f in files))
    assert _git(clone, "status", "--porcelain") == ""
    with pytest.raises(seal.SealError, match=r"3 changed"):
        seal.verify_committed(root)
    _git(clone, "update-index", "--no-assume-unchanged", *(f"reference/cuda-vs-cpu/{f}" for f in files))
    original = _git(clone, "rev-parse", "HEAD").strip()
    _git(clone, "commit", "-qam", "forged")
    forged_commit = _git(clone, "rev-parse", "HEAD").strip()
    other = tmp_path / "other"  # a repository whose HEAD is the forged commit
    subprocess.run(["git", "clone", "-q", "--no-checkout", str(clone), str(other)], check=True)
    _git(clone, "reset", "-q", "--soft", original)
    _git(clone, "replace", original, forged_commit)
    assert _git(clone, "diff", "HEAD", "--stat") == ""  # git itself now reads the forgery as HEAD's
    with pytest.raises(seal.SealError, match=r"3 changed"):
        seal.verify_committed(root)
    monkeypatch.setenv("GIT_DIR", str(other / ".git"))
    monkeypatch.setenv("GIT_WORK_TREE", str(clone))
    with pytest.raises(seal.SealError, match=r"3 changed"):
        seal.verify_committed(root)
    monkeypatch.delenv("GIT_DIR")
    monkeypatch.delenv("GIT_WORK_TREE")
    # the same forged set outside the checkout: its manifest agrees, but no commit of the repository holds it, so it is
    # read only on purpose, and then said, every file named as not the commit's
    outside = tmp_path / "outside"
    shutil.copytree(root, outside)
    seal.verify(outside)
    with pytest.raises(seal.SealError, match="lies outside the checkout the code runs in"):
        seal.verify_committed(outside)
    said: list[str] = []
    assert seal.verify_committed(outside, accept_uncommitted=True, notice=said.append) == seal.set_files(outside)
    assert len(said) == 1 and "accepting uncommitted evidence" in said[0] and "lies outside the checkout" in said[0]


def test_uncommitted_evidence_is_read_only_on_purpose_and_said(tmp_path: Path, monkeypatch) -> None:
    """A set collected but not committed (a new job, the manifest rewritten by `collect`): refused by default; read with
    compare --accept-uncommitted (above the table and on stderr), the config's accept_uncommitted (the render's notice)
    or FEDBALANCE_ACCEPT_UNCOMMITTED=1 (status), each naming the files."""
    from fedbalance.evidence.reference import render_jobs

    clone = _clone(tmp_path)
    monkeypatch.chdir(clone)
    root = clone / "reference" / "cuda-vs-cpu"
    new = "losses/mnist/g10/ce/seed1"
    shutil.copytree(REPO / "reference" / "mnist" / new, root / new)
    seal.seal(root)  # as collect seals it again
    assert seal.uncommitted(root) == sorted([seal.MANIFEST, *(f"{new}/{f}" for f in
                                                              ("metrics.json", "provenance.json", "rounds.csv"))])
    cfg = load_config(MNIST)
    with pytest.raises(seal.SealError, match=r"1 changed \(MANIFEST.sha256\); 3 extra"):
        seal.verify_committed(root)
    said: list[str] = []
    held, _ = render_jobs({**cfg, "accept_uncommitted": True}, root, notice=said.append)
    assert Job.from_path(new) in held and len(said) == 1 and "accepting uncommitted evidence" in said[0]
    assert "3 extra" in said[0]
    ours = REPO / "reference" / "cuda-vs-cpu"
    proc = _cli("compare", "--ours", str(ours), "--reference", str(root), "--accept-uncommitted", cwd=clone)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("**accepting uncommitted evidence: reference set ") and "3 extra" in proc.stdout
    assert "warning: accepting uncommitted evidence" in proc.stderr
    status = _script("status", "--reference", str(root), cwd=clone, **{seal.ACCEPT_ENV: "1"})
    assert status.returncode == 0 and "| losses | mnist | g10 | ce | 0, 1 |" in status.stdout, status.stderr
    assert "warning: accepting uncommitted evidence" in status.stderr and "1 changed (MANIFEST.sha256)" in status.stderr
    # committed, it is read without a word
    _git(clone, "add", "-A", "reference")
    _git(clone, "commit", "-qm", "collected")
    assert seal.verify_committed(root) == []
    status = _script("status", "--reference", str(root), cwd=clone)
    assert status.returncode == 0 and status.stderr == ""


def test_uncommitted_names_changed_extra_and_missing_files(tmp_path: Path, monkeypatch) -> None:
    """What collect will print it leaves uncommitted: by hand, one file of each kind; outside git it cannot say."""
    root = _sealed_copy(tmp_path / "repo" / "set", ["losses/mnist/g10/ce/seed0", "losses/mnist/g10/ce/seed1"])
    monkeypatch.chdir(tmp_path / "repo")
    with pytest.raises(seal.SealError, match="lies outside the checkout"):
        seal.uncommitted(root)
    _git(tmp_path / "repo", "init", "-q")
    assert len(seal.uncommitted(root)) == 8  # no commit yet: every file (2 jobs x 3 files, the marker, the manifest)
    _git(tmp_path / "repo", "add", "-A")
    _git(tmp_path / "repo", "commit", "-qm", "set")
    assert seal.uncommitted(root) == []
    (root / "losses/mnist/g10/ce/seed0/provenance.json").write_text("{}\n")
    (root / "losses/mnist/g10/ce/seed1/rounds.csv").unlink()
    (root / "notes.txt").write_text("x")
    assert seal.against_commit(root) == {"changed": ["losses/mnist/g10/ce/seed0/provenance.json"],
                                         "extra": ["notes.txt"], "missing": ["losses/mnist/g10/ce/seed1/rounds.csv"]}
    assert seal.uncommitted(root) == ["losses/mnist/g10/ce/seed0/provenance.json", "losses/mnist/g10/ce/seed1/rounds.csv",
                                      "notes.txt"]


# -- item 2: the workflow refuses a results_dir whose outputs reach a set, before Snakemake touches a file -----------

DEPTHS = {
    "experiment": "losses",
    "dataset": "losses/mnist",
    "setting": "losses/mnist/g10",
    "loss": "losses/mnist/g10/ce",
    "job": "losses/mnist/g10/ce/seed0",
    "file": "losses/mnist/g10/ce/seed0/metrics.json",
}


@pytest.mark.parametrize("depth", list(DEPTHS))
def test_a_link_into_a_set_at_any_depth_of_results_dir_is_refused(tmp_path: Path, depth: str) -> None:
    """results_dir/<part> -> the same part of a set, at every depth of a job's path (the file itself included), and the
    same through a second link outside results_dir or dangling into the set: refused, naming the link."""
    ref = _sealed_copy(tmp_path / "set", ["losses/mnist/g10/ce/seed0"])
    part = DEPTHS[depth]
    results = tmp_path / "R"
    link = results / part
    link.parent.mkdir(parents=True)
    link.symlink_to(ref / part)
    with pytest.raises(seal.SealError, match=re.escape(f"{link} is a link to ") + ".*" + re.escape(f"in the reference set {ref}")):
        seal.refuse_links_into_sets(results, "results_dir")
    link.unlink()
    seal.refuse_links_into_sets(results, "results_dir")  # without the link: nothing to refuse
    if "/" in part:  # a chain: results_dir/losses -> elsewhere/losses, a real folder, below which is the link
        chained, elsewhere = tmp_path / "R3", tmp_path / "elsewhere"
        chained.mkdir()
        (elsewhere / part).parent.mkdir(parents=True)
        (elsewhere / part).symlink_to(ref / part)
        (chained / "losses").symlink_to(elsewhere / "losses")
        with pytest.raises(seal.SealError, match=re.escape(f"{chained / part} is a link to")):
            seal.refuse_links_into_sets(chained, "results_dir")
    dangling = tmp_path / "R2" / "x"
    dangling.parent.mkdir()
    dangling.symlink_to(ref / "losses" / "not-there")
    with pytest.raises(seal.SealError, match="in the reference set"):
        seal.refuse_links_into_sets(dangling.parent, "results_dir")


def test_a_link_to_a_folder_holding_a_set_and_a_set_deep_in_results_dir_are_refused(tmp_path: Path) -> None:
    ref = _sealed_copy(tmp_path / "sets" / "mnist", ["losses/mnist/g10/ce/seed0"])
    results = tmp_path / "R"
    results.mkdir()
    (results / "losses").symlink_to(ref.parent)
    with pytest.raises(seal.SealError, match=re.escape(f"{results} holds the reference set ") + ".*mnist"):
        seal.refuse_links_into_sets(results, "results_dir")
    (results / "losses").unlink()
    deep = results / "a" / "b" / "c" / "d"  # deeper than refuse_inside looks (seal.BELOW)
    shutil.copytree(ref, deep)
    seal.refuse_inside(results, "results_dir")
    with pytest.raises(seal.SealError, match="holds the reference set"):
        seal.refuse_links_into_sets(results, "results_dir")


def test_snakemake_deletes_nothing_through_a_link_into_a_set(tmp_path: Path) -> None:
    """The issue's two routes, run for real: (1) results_dir/losses -> a set's losses/ and a target in it; (2) a render
    of reference/mnist whose results_dir holds losses -> a copy of reference/cuda-vs-cpu's losses/. Both stop while the
    workflow parses, with one message naming the link; no file of either set changed (sha256 before and after)."""
    ref = _sealed_copy(tmp_path / "set", ["losses/mnist/g10/ghmc/seed0", "losses/mnist/g10/ce/seed0"])
    cuda = tmp_path / "cuda-vs-cpu"
    shutil.copytree(REPO / "reference" / "cuda-vs-cpu", cuda)
    before = {p: seal.digests(p) for p in (ref, cuda, REPO / "reference" / "mnist")}
    results = tmp_path / "R"
    results.mkdir()
    (results / "losses").symlink_to(ref / "losses")
    proc = _snakemake("--configfile", "config/quick.yaml", "--config", f"results_dir={results}", "--",
                      f"{results}/losses/mnist/g10/ghmc/seed0/metrics.json")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and f"{results}/losses is a link to" in out and "in the reference set" in out, out[-3000:]
    rendered = tmp_path / "rendered"
    rendered.mkdir()
    (rendered / "losses").symlink_to(cuda / "losses")
    proc = _snakemake("--configfile", "config/mnist.yaml", "--config", "reference_dir=reference/mnist",
                      f"results_dir={rendered}")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and f"{rendered}/losses is a link to" in out, out[-3000:]
    assert {p: seal.digests(p) for p in before} == before
    seal.verify(cuda)
    seal.verify(ref)


def test_a_report_file_in_a_set_is_refused(tmp_path: Path) -> None:
    ref = _sealed_copy(tmp_path / "set", ["losses/mnist/g10/ce/seed0"])
    before = seal.digests(ref)
    proc = _snakemake("--configfile", "config/quick.yaml", "--config", f"results_dir={tmp_path / 'R'}",
                      "--report", str(ref / seal.MANIFEST))
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "invalid --report: --report" in out and "lies in the reference set" in out, out[-3000:]
    assert seal.digests(ref) == before and (ref / seal.MANIFEST).is_file()


def test_data_dir_in_a_set_is_refused(tmp_path: Path) -> None:
    ref = _sealed_copy(tmp_path / "set", ["losses/mnist/g10/ce/seed0"])
    with pytest.raises(ConfigError, match="data_dir .* lies in the reference set"):
        validate({**load_config(QUICK), "data_dir": str(ref / "data")})


# -- item 3: every writing option of the CLI refuses a set -----------------------------------------------------------

KNOWN_WRITERS = {("train", "--out"), ("pack", "--results"), ("derive", "--out"), ("partition", "--out"),
                 ("compare", "--csv"), ("cost", "--calibration"), ("train", "--data-dir"), ("prepare", "--data-dir")}
"""Writing options as the issue and the commands' help name them (a subset: the test finds the rest)."""


def _commands() -> dict[str, argparse.ArgumentParser]:
    from fedbalance.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def _argv(command: str, parser: argparse.ArgumentParser, written: str, path: str) -> list[str]:
    """A command line of ``command`` with every required option given something it parses and ``written`` = ``path``."""
    from fedbalance.cli import read_path

    argv = [command]
    for action in parser._actions:
        if not action.option_strings or action.option_strings[0] == "-h":
            continue
        flag = action.option_strings[0]
        if flag == written:
            argv += [flag, path]
        elif action.required:
            value = (str(QUICK) if action.type is read_path else "1" if action.type is int
                     else sorted(action.choices)[0] if action.choices else "losses/mnist/g10/ce/seed0")
            argv += [flag, value]
    return argv


def test_every_path_option_of_the_cli_is_marked_and_every_writing_one_refuses_a_set(tmp_path: Path, capsys) -> None:
    """Every path-typed option of every command is read_path or written_path (a new one must say which), the writing
    ones include the issue's, and each writing one, pointed into a set by a link, by '..' or relatively, ends the
    command in one line with exit status 2 before any work; the set is unchanged."""
    from fedbalance.cli import main, path_argument, read_path, written_path

    ref = _sealed_copy(tmp_path / "set", ["losses/mnist/g10/ce/seed0"])
    (tmp_path / "link").symlink_to(ref)
    before = seal.digests(ref)
    writers = set()
    for command, parser in _commands().items():
        for action in parser._actions:
            if action.type in (path_argument, Path, str) or "dir" in action.dest or action.dest in ("out", "csv"):
                assert action.type in (read_path, written_path), (command, action.option_strings, action.type)
            if action.type is written_path:
                writers.add((command, action.option_strings[0]))
    assert KNOWN_WRITERS <= writers, KNOWN_WRITERS - writers
    job = "losses/mnist/g10/ce/seed0"
    spellings = [str(tmp_path / "link" / job / "rounds.csv"), str(ref / "losses" / ".." / "losses" / "x.csv"),
                 os.path.relpath(ref / job, Path.cwd())]
    for command, flag in sorted(writers):
        for path in spellings:
            code = main(_argv(command, _commands()[command], flag, path))
            err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
            assert code == 2 and len(err) == 1 and f"fedbalance {command}: error: {flag} " in err[0], (command, path, err)
            assert "reference set" in err[0], err
    assert seal.digests(ref) == before


def test_compare_csv_and_partition_out_into_the_committed_set_are_refused() -> None:
    """The issue's two writers, as it ran them: nothing written, the set as committed."""
    before = seal.digests(REPO / "reference" / "mnist")
    _one_line(_cli("compare", "--ours", "reference/cuda-vs-cpu", "--reference", "reference/mnist",
                   "--csv", "reference/mnist/cmp.csv"), "--csv reference/mnist/cmp.csv lies in the reference set")
    _one_line(_cli("partition", "--config", "config/mnist.yaml", "--experiment", "losses", "--dataset", "mnist",
                   "--setting", "g10", "--seed", "0", "--out", "reference/mnist/losses/mnist/g10/ce/seed0/rounds.csv"),
              "--out reference/mnist/losses/mnist/g10/ce/seed0/rounds.csv lies in the reference set")
    assert seal.digests(REPO / "reference" / "mnist") == before and seal.uncommitted(REPO / "reference" / "mnist") == []


# -- item 4: one check of a job's numbers --------------------------------------------------------------------------

def _job(tmp_path: Path) -> Path:
    """A copy of a committed job (30 rounds of losses/mnist/g10/ce/seed0), outside any set."""
    folder = tmp_path / "res" / "losses/mnist/g10/ce/seed0"
    shutil.copytree(REPO / "reference" / "mnist" / "losses/mnist/g10/ce/seed0", folder)
    (folder / "provenance.json").unlink()
    return folder


def _both(folder: Path, key: str, value: str) -> None:
    """Write ``value`` (JSON text) as final.<key> and as the last row's cell of ``key``: the same in both files."""
    path = folder / "metrics.json"
    text = path.read_text()
    metrics = json.loads(text)
    old = json.dumps(metrics["final"][key])
    assert text.count(f'"{key}": {old}') == 1
    path.write_text(text.replace(f'"{key}": {old}', f'"{key}": {value}'))
    rows = _rows(folder / "rounds.csv")
    rows[-1][rows[0].index(key)] = value
    _write_rows(folder / "rounds.csv", rows)


def _edit_metrics(folder: Path, edit) -> None:
    metrics = json.loads((folder / "metrics.json").read_text())
    edit(metrics)
    (folder / "metrics.json").write_text(json.dumps(metrics, indent=1))


def _edit_last_cell(folder: Path, column: str, value: str) -> None:
    rows = _rows(folder / "rounds.csv")
    rows[-1][rows[0].index(column)] = value
    _write_rows(folder / "rounds.csv", rows)


def _cut(folder: Path, n: int) -> None:
    data = (folder / "rounds.csv").read_bytes()
    (folder / "rounds.csv").write_bytes(data[:-n])


IMPOSSIBLE = {
    "acc_minority-Infinity": (lambda f: _both(f, "acc_minority", "Infinity"), "holds Infinity, a number that is not finite"),
    "acc_minority-1e999": (lambda f: _both(f, "acc_minority", "1e999"), "holds 1e999, a number that is not finite"),
    "acc_minority-negative": (lambda f: _both(f, "acc_minority", "-0.5"), "final.acc_minority is -0.5, but it must be in [0, 1]"),
    "auc-above-1": (lambda f: _both(f, "auc_micro", "1.5"), "final.auc_micro is 1.5, but it must be in [0, 1]"),
    "acc_minority-missing": (lambda f: _edit_metrics(f, lambda m: m["final"].pop("acc_minority")),
                             "final has no acc_minority"),
    "per_class_acc-missing": (lambda f: _edit_metrics(f, lambda m: m["final"].pop("per_class_acc")),
                              "final has no per_class_acc"),
    "acc-nan-both": (lambda f: _both(f, "acc", "NaN"), "holds NaN, a number that is not finite"),
    "acc-null": (lambda f: _edit_metrics(f, lambda m: m["final"].update(acc=None)), "final.acc is null"),
    "count-negative": (lambda f: _edit_metrics(f, lambda m: m["partition"]["global_counts"].__setitem__(0, -3)),
                       "partition.global_counts[0] is -3, but it must be >= 0"),
    "mean_cs-above-1": (lambda f: _edit_metrics(f, lambda m: m["monitor"]["mean_cs"].__setitem__("paper", 1.2)),
                        "monitor.mean_cs.paper is 1.2, but it must be in [-1, 1]"),
    "last-row-blank": (lambda f: _edit_last_cell(f, "acc_minority", ""),
                       "but the last row of rounds.csv records nothing (an empty cell)"),
    "row-inf": (lambda f: _edit_last_cell(f, "emp_cv", "inf"), "line 31, column 'emp_cv': 'inf' is a number that is not finite"),
    "row-acc-above-1": (lambda f: _rows_edit(f, 3, "acc", "1.2"), "line 5, column 'acc' is 1.2, but it must be in [0, 1]"),
    "row-list-nan": (lambda f: _rows_edit(f, 2, "true_composition", "[1.0, NaN]"), "is a number that is not finite"),
    "row-count-negative": (lambda f: _rows_edit(f, 2, "true_composition", "[1.0, -2.0]"), "[1] is -2.0, but it must be >= 0"),
    "per_class_acc-edited": (lambda f: _edit_metrics(f, lambda m: m["final"]["per_class_acc"].__setitem__(2, 0.5)),
                             "but final.per_class_acc averages"),
    "cut-9-bytes": (lambda f: _cut(f, 9), "its last line has no line end: the file is torn or cut"),
    "cut-40-bytes": (lambda f: _cut(f, 40), "its last line has no line end"),
    "last-line-dropped": (lambda f: _cut(f, len(_lines(f)[-1])), "29 rows, but metrics.json says the job ran 30 rounds"),
    "short-line": (lambda f: _rows_edit(f, 5, None, None), "line 7: 23 cells, the header 24"),
}


def _lines(folder: Path) -> list[bytes]:
    return (folder / "rounds.csv").read_bytes().splitlines(keepends=True)


def _rows_edit(folder: Path, index: int, column: str | None, value: str | None) -> None:
    """Set one cell of row ``index`` (0: the first round); without a column, drop that row's last cell."""
    rows = _rows(folder / "rounds.csv")
    if column is None:
        rows[index + 1] = rows[index + 1][:-1]
    else:
        rows[index + 1][rows[0].index(column)] = value
    _write_rows(folder / "rounds.csv", rows)


@pytest.mark.parametrize("case", list(IMPOSSIBLE))
def test_an_impossible_job_is_refused_by_the_one_check(tmp_path: Path, case: str) -> None:
    """Each impossible value or torn file, the same in both files where both record it: jobfolder.check (behind every
    read) refuses it in one line naming the file and the key."""
    folder = _job(tmp_path)
    jobfolder.check(folder)
    damage, words = IMPOSSIBLE[case]
    damage(folder)
    with pytest.raises(JobFolderError) as exc:
        jobfolder.check(folder)
    msg = str(exc.value)
    assert words in msg and str(folder) in msg and "\n" not in msg, msg


def test_the_one_check_remembers_a_folder_by_its_bytes_and_its_place(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A folder that passed is not parsed again while its two files hold the same bytes (rounds.csv's cells are where
    a check spends its time); a byte changed in either file, or the same files under another job's folder, is checked
    anew; each call returns a dict of its own."""
    folder = _job(tmp_path)
    first = jobfolder.check(folder)
    parsed: list[Path] = []
    real = jobfolder._round_rows
    monkeypatch.setattr(jobfolder, "_round_rows", lambda path, raw: parsed.append(path) or real(path, raw))
    second = jobfolder.check(folder)
    assert second == first and second is not first and parsed == []
    second["final"]["acc"] = -1.0
    assert jobfolder.check(folder / "metrics.json")["final"]["acc"] == first["final"]["acc"] and parsed == []
    rows = _rows(folder / "rounds.csv")  # a digit of one cell of rounds.csv: checked again (and passes)
    column = rows[0].index("train_loss")
    cell = rows[5][column]
    rows[5][column] = cell[:-1] + ("1" if cell[-1] != "1" else "2")
    _write_rows(folder / "rounds.csv", rows)
    assert jobfolder.check(folder) == first and parsed == [folder / "rounds.csv"]
    _both(folder, "acc_minority", "-0.5")
    with pytest.raises(JobFolderError, match="final.acc_minority is -0.5"):
        jobfolder.check(folder)
    moved = tmp_path / "res" / "losses/mnist/g10/ce/seed7"  # the same bytes, another job's place: refused
    shutil.copytree(_job(tmp_path / "again"), moved)
    jobfolder.check(tmp_path / "again" / "res" / "losses/mnist/g10/ce/seed0")
    with pytest.raises(JobFolderError, match="a job folder copied or moved"):
        jobfolder.check(moved)


def test_impossible_values_are_refused_by_compare_adopt_and_the_tidy_frames(tmp_path: Path) -> None:
    """The issue's reads of final.acc_minority Infinity: compare printed 'inf (1)', collect --adopt sealed it; now each
    refuses, in one line and exit status 2 for the commands."""
    from fedbalance.jobs.aggregate import collect_tidy

    folder = _job(tmp_path)
    _both(folder, "acc_minority", "Infinity")
    res = tmp_path / "res"
    with pytest.raises(JobFolderError, match="Infinity"):
        collect_tidy(res)
    _one_line(_cli("compare", "--ours", str(res), "--reference", "reference/cuda-vs-cpu"), "holds Infinity")
    shutil.copyfile(REPO / "reference" / "mnist" / FORGED / "provenance.json", folder / "provenance.json")
    _one_line(_script("collect", "--into", str(res), "--adopt", "--config", str(MNIST)), "holds Infinity")
    assert not (res / seal.MARKER).exists() and not (res / seal.MANIFEST).exists()


def test_a_nan_recorded_twice_is_named_as_not_finite(tmp_path: Path) -> None:
    """'final.acc is nan but the last row records nan' no more: the value itself is refused, in either file."""
    folder = _job(tmp_path)
    _both(folder, "acc", "NaN")
    _edit_last_cell(folder, "acc", "nan")
    with pytest.raises(JobFolderError) as exc:
        jobfolder.check(folder)
    assert "metrics.json: holds NaN, a number that is not finite" in str(exc.value), str(exc.value)
    assert "but the last row" not in str(exc.value)
    metrics = (folder / "metrics.json").read_text()  # as a job writes a value that is not finite: null ...
    (folder / "metrics.json").write_text(metrics.replace('"acc": NaN', '"acc": null'))
    with pytest.raises(JobFolderError, match="final.acc is null"):
        jobfolder.check(folder)
    metrics = json.loads((REPO / "reference" / "mnist" / FORGED / "metrics.json").read_text())
    (folder / "metrics.json").write_text(json.dumps(metrics, indent=1))  # ... and rounds.csv's last acc "nan"
    with pytest.raises(JobFolderError, match="line 31, column 'acc': 'nan' is a number that is not finite"):
        jobfolder.check(folder)


# -- item 6: the smaller ones ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["link-to-file", "link-to-folder", "dangling-link", "pipe"])
def test_a_set_holding_a_link_or_a_pipe_is_refused_in_one_line(tmp_path: Path, kind: str) -> None:
    """status, compare and a render: one line naming the entry, exit status 2, no traceback and no wait on a pipe."""
    from fedbalance.evidence.reference import ReferenceSetError, render_jobs

    ref = _sealed_copy(tmp_path / "set", ["losses/mnist/g10/ce/seed0"])
    entry = ref / "losses" / "extra"
    if kind == "pipe":
        os.mkfifo(entry)
    else:
        target = {"link-to-file": ref / "losses/mnist/g10/ce/seed0/metrics.json", "link-to-folder": tmp_path,
                  "dangling-link": tmp_path / "gone"}[kind]
        entry.symlink_to(target)
    words = "losses/extra is " + ("not a plain file" if kind == "pipe" else "a link")
    _one_line(_script("status", "--reference", str(ref)), words)
    _one_line(_cli("compare", "--ours", str(REPO / "reference" / "cuda-vs-cpu"), "--reference", str(ref)), words)
    with pytest.raises(ReferenceSetError, match=words):
        render_jobs(load_config(MNIST), ref)
    with pytest.raises(seal.SealError, match=words):
        seal.seal(ref)


def test_derive_respects_a_running_jobs_lock_on_its_out_and_its_source(tmp_path: Path) -> None:
    """A job running in another process (this one, holding the lock as a running job does) holds --out, or the
    --source being read: derive, in a process of its own, refuses in one line, exit 2, and writes nothing."""
    import torch

    from fedbalance.jobs.config import resolve_job
    from fedbalance.jobs.run import job_lock

    src_job = Job("monitor", "mnist", "default", "ce", 0)
    source = write_job(tmp_path / "runs", src_job, spec_of=QUICK)
    metrics = json.loads((source / "metrics.json").read_text())
    (source / "metrics.json").write_text(json.dumps({**metrics, "path": "sequential"}))
    spec = resolve_job(load_config(QUICK), src_job).resolved_dict() | {"path": "sequential"}
    torch.save({"spec": spec, "rounds": [], "final": {}}, source / "trajectory.pt")
    out = tmp_path / "runs" / "t_ra/mnist/t2/ce/seed0"
    args = ["derive", "--config", str(QUICK), "--experiment", "t_ra", "--dataset", "mnist", "--setting", "t2", "--loss",
            "ce", "--seed", "0", "--source", str(source), "--out", str(out)]
    for held, words in ((out, f"{out} is in use by pid"), (source, f"--source {source} is in use by pid")):
        with job_lock(held):
            _one_line(_cli(*args), words)
        assert not (out / "metrics.json").exists() and not (out / "rounds.csv").exists()
    assert json.loads((source / "metrics.json").read_text()) == {**metrics, "path": "sequential"}
