"""``train --out`` (``run_job``) resolves its folder once and writes under it (issue 75, item 6): a folder on its path
replaced by a link while the job runs (to a reference set, say) stops the job at its next write, and nothing is written
through the link."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import torch

from fedbalance.common.records import Job
from fedbalance.jobs import seal
from fedbalance.jobs.config import configured_job, load_config
from fedbalance.jobs.run import CHECKPOINT, JobError, run_job

REPO = Path(__file__).resolve().parents[1]
torch.set_num_threads(1)


def _tiny() -> dict:
    """quick.yaml's early job, cut to 4 rounds of 3 small clients."""
    spec = configured_job(load_config(REPO / "config" / "quick.yaml"), Job("early", "mnist", "S", "ce", 0))
    spec["partition"].update(num_clients=4, majority_samples=12)
    spec["monitor"] = {**spec.get("monitor", {}), "aux_per_class": 8}
    spec.update(clients_per_round=3, rounds=4, batch_size=16, lr=0.05, selection="random")
    return spec


def _digest(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*"))
            if p.is_file()}


def test_a_folder_that_becomes_a_link_mid_run_is_written_no_more(tmp_path: Path, monkeypatch) -> None:
    ref = tmp_path / "set"
    (ref / "job").mkdir(parents=True)
    (ref / "job" / "metrics.json").write_text("{}\n")
    seal.seal(ref, REPO / "config" / "quick.yaml")
    before = _digest(ref)
    monkeypatch.chdir(tmp_path)
    swapped: list[int] = []

    def swap(state, row) -> None:  # after round 1's checkpoint: R -> the set, the job's folder moved aside
        if not swapped:
            Path("R").rename("R-moved")
            Path("R").symlink_to(ref)
            swapped.append(row["round"])

    with pytest.raises(JobError, match=r"output folder .*/R/job resolves to .*/set/job now: a folder on its path became "
                                       "a link"):
        run_job(_tiny(), "R/job", device="cpu", progress=False, on_round=swap)
    assert swapped and _digest(ref) == before
    seal.verify(ref)
    assert (tmp_path / "R-moved" / "job" / CHECKPOINT).is_file()  # its checkpoint stays where it started


def test_an_out_given_through_a_link_is_written_where_the_link_led_when_the_job_began(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "via").symlink_to(tmp_path / "real")
    metrics = run_job(_tiny(), tmp_path / "via" / "job", device="cpu", progress=False)
    assert metrics["rounds"] == 4 and (tmp_path / "real" / "job" / "metrics.json").is_file()
