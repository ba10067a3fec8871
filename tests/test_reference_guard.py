"""The reference set is read, never written: a render keeps results_dir apart from it, refuses a set holding no job of
the config (missing, empty, a file, a set's parent), a held job folder that is not whole or of other parameters, and an
empty ``reference_dir=``; the set's bytes are the same after every refused render."""

from __future__ import annotations

import re

import copy
import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from fedbalance.jobs.config import ConfigError, load_config, read_yaml
from fedbalance.jobs.jobfolder import JobFolderError
from fedbalance.evidence.reference import ReferenceSetError, render_jobs

REPO = Path(__file__).resolve().parents[1]
SNAKEFILE = REPO / "workflow" / "Snakefile"
MNIST = REPO / "config" / "mnist.yaml"
JOBS = ["losses/mnist/g10/ce/seed0", "losses/mnist/g10/ratio/seed0", "losses/mnist/g50/ce/seed1"]


def _reference(root: Path, sealed: bool = True) -> Path:
    """A small copy of the committed set: three of its jobs under ``root/reference/mnist``, sealed as ``collect`` seals
    a set and committed in ``root``, a repository of its own (read from there: ``seal.checkouts``); unsealed: a plain
    results folder (no provenance.json, no marker), whose jobs a render reads one by one."""
    from fedbalance.jobs import seal

    ref = root / "reference" / "mnist"
    for job in JOBS:
        shutil.copytree(REPO / "reference" / "mnist" / job, ref / job)
        if not sealed:
            (ref / job / "provenance.json").unlink()
    if sealed:
        seal.seal(ref, MNIST)
        git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(root)]
        for args in (["init", "-q"], ["add", "reference"], ["commit", "-qm", "set"]):
            subprocess.run([*git, *args], check=True, capture_output=True)
    return ref


def _digest(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        h.update(str(p.relative_to(root)).encode())
        if p.is_file():
            h.update(p.read_bytes())
    return h.hexdigest()


def _mnist(**keys: object) -> dict:
    cfg = copy.deepcopy(read_yaml(MNIST))
    cfg.update(keys)
    return cfg


@pytest.mark.parametrize("reference, results, how", [
    ("ref", "ref", "the same folder"),
    ("ref", "./ref/", "the same folder"),
    ("ref/../ref", "ref", "the same folder"),
    ("ref", "ref/rendered", "results_dir lies inside reference_dir"),
    ("res/ref", "res", "reference_dir lies inside results_dir"),
    ("ref", "link", "the same folder"),
])
def test_results_dir_apart_from_the_reference_set(tmp_path: Path, monkeypatch, reference: str, results: str,
                                                  how: str) -> None:
    """Both folders are named, however the paths are spelled (a link to the set included)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ref").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "ref")
    with pytest.raises(ConfigError) as exc:
        load_config(_mnist(reference_dir=reference, results_dir=results))
    msg = str(exc.value)
    assert how in msg and repr(reference) in msg and repr(results) in msg, msg


def test_folders_beside_the_set_are_accepted(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    for reference, results in (("reference/mnist", "results_reference"), ("ref", "ref2"), ("ref2", "ref")):
        assert load_config(_mnist(reference_dir=reference, results_dir=results))["reference_dir"] == reference


@pytest.mark.parametrize("value", ["", "   "])
def test_an_empty_reference_dir_is_refused(value: str) -> None:
    with pytest.raises(ConfigError, match="reference_dir: .* names no folder; leave it out"):
        load_config(_mnist(reference_dir=value))


def test_a_set_without_jobs_of_the_config_is_refused(tmp_path: Path, monkeypatch) -> None:
    """Missing, a file, an empty folder, the sets' parent (naming the sets below it), a set of other experiments."""
    monkeypatch.chdir(tmp_path)
    cfg = load_config(MNIST)
    ref = _reference(tmp_path)
    (tmp_path / "empty").mkdir()
    (tmp_path / "file").write_text("x")
    cases = {tmp_path / "missing": "does not exist", tmp_path / "file": "is a file",
             tmp_path / "empty": "holds no finished job of this config",
             tmp_path / "reference": f"the folders below it that do: {ref} (3 jobs)"}
    for root, words in cases.items():
        with pytest.raises(ReferenceSetError) as exc:
            render_jobs(cfg, root)
        assert str(root) in str(exc.value) and words in str(exc.value), str(exc.value)
    held, _ = render_jobs(cfg, ref)
    assert sorted(j.path for j in held) == sorted(JOBS)
    monitor_only = load_config(_mnist(experiments={"monitor": read_yaml(MNIST)["experiments"]["monitor"]}))
    with pytest.raises(ReferenceSetError, match="holds no finished job of this config"):
        render_jobs(monitor_only, ref)


def test_each_held_job_is_checked_before_the_render(tmp_path: Path, monkeypatch) -> None:
    """A truncated rounds.csv or a metrics.json without its config names the file; a job of other parameters says
    that a render cannot train it (not "rerun it")."""
    cfg = load_config(MNIST)
    ref = _reference(tmp_path, sealed=False)
    rounds = ref / JOBS[0] / "rounds.csv"
    rounds.write_text("".join(rounds.read_text().splitlines(keepends=True)[:16]))
    with pytest.raises(JobFolderError, match="rounds.csv: 15 rows, but metrics.json says the job ran 30 rounds"):
        render_jobs(cfg, ref)
    shutil.copyfile(REPO / "reference" / "mnist" / JOBS[0] / "rounds.csv", rounds)
    metrics = ref / JOBS[1] / "metrics.json"
    data = json.loads(metrics.read_text())
    metrics.write_text(json.dumps({k: v for k, v in data.items() if k != "config"}))
    with pytest.raises(JobFolderError, match="metrics.json: missing or bad key 'config'"):
        render_jobs(cfg, ref)
    metrics.write_text(json.dumps(data))
    other = load_config(_mnist(defaults={**read_yaml(MNIST)["defaults"], "lr": 0.002}))
    with pytest.raises(ReferenceSetError, match="cannot train one") as exc:
        render_jobs(other, ref)
    assert "rerun" not in str(exc.value) and "provenance.json" in str(exc.value)
    sealed = _reference(tmp_path / "sealed")
    monkeypatch.chdir(tmp_path / "sealed")
    rounds = sealed / JOBS[0] / "rounds.csv"
    rounds.write_text("".join(rounds.read_text().splitlines(keepends=True)[:16]))
    with pytest.raises(ReferenceSetError, match=f"1 changed \\({JOBS[0]}/rounds.csv\\)"):
        render_jobs(cfg, sealed)  # in a sealed set the seal names the edited file first


@pytest.mark.skipif(shutil.which("snakemake") is None, reason="snakemake is not installed")
def test_a_hostile_render_is_refused_before_any_job_and_leaves_the_set_as_it_was(tmp_path: Path) -> None:
    """Snakemake, not a dry run: the set as results_dir, a results_dir inside it, the sets' parent, an empty
    ``reference_dir=``: each stops before the DAG with one message, and the set's bytes do not change."""
    ref = _reference(tmp_path)
    before = _digest(tmp_path / "reference")
    cases = [(["reference_dir=reference/mnist", "results_dir=reference/mnist"], "the same folder"),
             (["reference_dir=reference/mnist", "results_dir=reference/mnist/losses"], "results_dir lies inside"),
             (["reference_dir=reference", "results_dir=results_reference"], "holds no finished job of this config"),
             (["reference_dir="], "reference_dir: empty (--config reference_dir=)")]
    for extra, words in cases:
        r = subprocess.run([sys.executable, "-m", "snakemake", "-s", str(SNAKEFILE), "--directory", str(tmp_path),
                            "--cores", "1", "--configfile", str(MNIST), "--config", *extra],
                           capture_output=True, text=True, timeout=600)
        out = r.stdout + r.stderr
        assert r.returncode != 0 and words in out, (extra, out[-3000:])
        assert "rule train" not in out and "rule prepare_data" not in out
    assert _digest(tmp_path / "reference") == before
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == ["reference"]
    assert ref.is_dir()


def test_snakemake_config_file_keys_are_the_same_checks(tmp_path: Path) -> None:
    """The same refusal when the keys come from a config file (the Snakefile's validation is the library's)."""
    cfg = _mnist(reference_dir=str(tmp_path / "ref"), results_dir=str(tmp_path / "ref" / "out"))
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    with pytest.raises(ConfigError, match="results_dir lies inside reference_dir"):
        load_config(tmp_path / "c.yaml")


@pytest.mark.skipif(shutil.which("snakemake") is None, reason="snakemake is not installed")
def test_one_job_copies_the_whole_render_from_the_set(tmp_path: Path, monkeypatch) -> None:
    """Rule from_reference is one job, however many jobs the set holds: it writes every held job and every job one
    of them covers (a twin such as beyond/g10/ce), straight from the set, and nothing is trained or reused."""
    ref = _reference(tmp_path)
    before = _digest(tmp_path / "reference")
    monkeypatch.chdir(tmp_path)
    held, copied = render_jobs(load_config(MNIST), ref)
    assert len(held) == 3 and copied
    target = "results_reference/beyond/mnist/g10/ce/seed0/metrics.json"
    r = subprocess.run([sys.executable, "-m", "snakemake", "-s", str(SNAKEFILE), "--directory", str(tmp_path),
                        "--cores", "1", "--configfile", str(MNIST), "--config", "reference_dir=reference/mnist",
                        "results_dir=results_reference", "--", target],
                       capture_output=True, text=True, timeout=600)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    # one job of the rule (Snakemake's "rule from_reference:" block; its progress lines say "rule from_reference: N of")
    jobs = re.findall(r"^(?:local)?rule from_reference:\s*$", out, re.M)
    assert len(jobs) == 1 and "rule reuse" not in out and "rule train" not in out, out[-2000:]
    res = tmp_path / "results_reference"
    for job in [*held, *copied]:
        source = ref / copied.get(job, job).path
        got = json.loads((res / job.path / "metrics.json").read_text())
        want = json.loads((source / "metrics.json").read_text())
        assert got["final"] == want["final"], job
        assert got["config"]["experiment"] == job.experiment and got["config"]["setting"] == job.setting
        rows, src_rows = pd.read_csv(res / job.path / "rounds.csv"), pd.read_csv(source / "rounds.csv")
        # each column the copy records is the source's; one it does not record (the monitor's, for a twin that
        # does not run it) is empty
        kept = [c for c in rows.columns if rows[c].notna().any()]
        assert len(rows) == len(src_rows) == 30 and {"acc", "acc_minority", "auc_hard"} <= set(kept), job
        pd.testing.assert_frame_equal(rows[kept], src_rows[kept])
        if job in copied:
            assert got["reused_from"] == f"reference/mnist/{copied[job].path}", job  # as reference_dir names it
        else:
            assert (res / job.path / "rounds.csv").read_bytes() == (source / "rounds.csv").read_bytes(), job
    assert len(list(res.glob("*/mnist/*/*/seed*/metrics.json"))) == len(held) + len(copied)
    assert _digest(tmp_path / "reference") == before
