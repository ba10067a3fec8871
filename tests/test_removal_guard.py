"""A link into a set made after the workflow parsed deletes nothing of the set (issue 75, item 3): every removal of an
output by Snakemake (before a job, after it failed, an incomplete one: ``snakemake.io.remove``) is checked where it
happens (``fedbalance.jobs.seal.refuse_removal``, wired in workflow/Snakefile), and one that would reach a set stops the
run with one message naming the link's target and the set."""

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
QUICK = REPO / "config" / "quick.yaml"
JOB = "monitor/mnist/default/ce/seed0"

# Snakemake, with one hook: once the workflow has parsed and the DAG is built (the job scheduler is made, before any
# job), the link LINK -> TARGET is made, as a user or another process could make it while the run goes on.
DRIVER = r'''
import os, sys
import snakemake.scheduling.job_scheduler as js
_init = js.JobScheduler.__init__
def init(self, *a, **k):
    os.makedirs(os.path.dirname(os.environ["LINK"]), exist_ok=True)
    os.symlink(os.environ["TARGET"], os.environ["LINK"])
    _init(self, *a, **k)
js.JobScheduler.__init__ = init
from snakemake.cli import main
sys.exit(main())
'''


def _set(root: Path) -> Path:
    """A sealed set holding files at the quick study's monitor job (copied from a committed job: the seal hashes them)."""
    source = REPO / "reference" / "mnist" / "losses" / "mnist" / "g10" / "ce" / "seed0"
    for name in ("metrics.json", "rounds.csv", "provenance.json"):
        (root / JOB).mkdir(parents=True, exist_ok=True)
        shutil.copy(source / name, root / JOB / name)
    seal.seal(root, QUICK)
    return root


def _digest(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*"))
            if p.is_file()}


def test_refuse_removal_refuses_what_lies_in_a_set_only(tmp_path: Path) -> None:
    """An output reached through a link to a set's folder, a folder holding a set: refused; the link itself (removing it
    removes no file of the set), a file beside the set: not."""
    ref = _set(tmp_path / "set")
    results = tmp_path / "R"
    results.mkdir()
    (results / "monitor").symlink_to(ref / "monitor")
    with pytest.raises(seal.SealError, match=f"would remove {ref / JOB / 'metrics.json'}, in the reference set {ref}"):
        seal.refuse_removal(results / JOB / "metrics.json")
    seal.refuse_removal(results / "monitor")  # the link itself
    (results / "file.json").symlink_to(ref / JOB / "metrics.json")
    seal.refuse_removal(results / "file.json")
    (results / "plain.json").write_text("{}")
    seal.refuse_removal(results / "plain.json")
    with pytest.raises(seal.SealError, match="would remove the reference set"):
        seal.refuse_removal(tmp_path)


@pytest.mark.skipif(shutil.which("snakemake") is None, reason="snakemake is not installed")
def test_a_link_made_after_parse_deletes_nothing_of_the_set(tmp_path: Path) -> None:
    """The issue's route run for real: results_dir holds no link while the workflow parses (its parse-time check
    passes), then R/monitor -> the set's monitor/ is made; the train job's output exists through it, and Snakemake
    would remove it before the job runs. The run stops with one message, and every file of the set is as it was."""
    ref = _set(tmp_path / "set")
    before = _digest(ref)
    (tmp_path / "driver.py").write_text(DRIVER)
    results = tmp_path / "R"
    env = {**os.environ, "LINK": str(results / "monitor"), "TARGET": str(ref / "monitor")}
    env.pop("PYTHONPATH", None)
    proc = subprocess.run([sys.executable, str(tmp_path / "driver.py"), "--cores", "1", "--configfile", str(QUICK),
                           "--config", f"results_dir={results}", f"data_dir={tmp_path / 'data'}", "--",
                           f"{results}/{JOB}/metrics.json"], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=900)
    out = proc.stdout + proc.stderr
    assert (results / "monitor").is_symlink()  # the hook made the link, after the parse
    assert proc.returncode != 0, out[-3000:]
    assert f"would remove {ref / JOB / 'metrics.json'}, in the reference set {ref}" in out, out[-3000:]
    assert _digest(ref) == before
    seal.verify(ref)


def test_the_guard_wraps_a_remover_as_it_is_and_once(tmp_path: Path) -> None:
    """Snakemake's remover, a coroutine function in 9.x, or a plain one: wrapped as it is, refusing with the error
    class given (the run's WorkflowError) before it removes anything; a guarded remover is not wrapped twice."""
    import asyncio

    ref = _set(tmp_path / "set")
    (tmp_path / "R").mkdir()
    (tmp_path / "R" / "monitor").symlink_to(ref / "monitor")
    removed: list[str] = []

    def plain(file, **kwargs) -> None:
        removed.append(str(file))

    async def coroutine(file, **kwargs) -> None:
        removed.append(str(file))

    class Stop(Exception):
        pass

    target = tmp_path / "R" / JOB / "metrics.json"
    sync_guarded, async_guarded = seal.guarded_removal(plain, Stop), seal.guarded_removal(coroutine, Stop)
    with pytest.raises(Stop, match="^stopped: Snakemake, removing the output .* in the reference set"):
        sync_guarded(target)
    with pytest.raises(Stop, match="in the reference set"):
        asyncio.run(async_guarded(target, remove_non_empty_dir=False))
    assert removed == [] and (ref / JOB / "metrics.json").is_file()
    sync_guarded(tmp_path / "R" / "plain.json")
    asyncio.run(async_guarded(tmp_path / "R" / "plain.json"))
    assert removed == [str(tmp_path / "R" / "plain.json")] * 2
    assert seal.guarded_removal(async_guarded, Stop) is async_guarded
