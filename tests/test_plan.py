"""``fedbalance reference plan``'s arithmetic (``evidence.plan.jobs_to_decide``): the jobs a claim's cells lack at
the seeds it needs, twins as the job trained in their place, and their hours by ``fedbalance cost``'s arithmetic."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedbalance.evidence.plan import jobs_to_decide
from fedbalance.jobs import cost
from fedbalance.jobs.config import load_config

CONFIG = Path(__file__).resolve().parents[1] / "config" / "mnist.yaml"


def test_the_jobs_a_claim_lacks_and_their_hours() -> None:
    """Two cells held at seeds 0-4, needed at 7 seeds: seeds 5 and 6 of each, 4 jobs; their hours are what
    ``cost.study_work`` (the study's own count, a second path) gives those jobs under the shipped calibration."""
    cfg = load_config(CONFIG)
    cells = [("losses", "mnist", "g10", "ce"), ("losses", "mnist", "g10", "ratio")]
    held = {(*c, s) for c in cells for s in range(5)}
    jobs, hours = jobs_to_decide(cells, 7, cfg, held)
    assert jobs == ["losses/mnist/g10/ce/seed5", "losses/mnist/g10/ce/seed6", "losses/mnist/g10/ratio/seed5",
                    "losses/mnist/g10/ratio/seed6"]
    from fedbalance.evidence.plan import extended

    works = [w for w in cost.study_work(extended(cfg, 7), ["losses"], device_type="cuda") if w.job.path in jobs]
    cal = cost.with_estimates(cost.shipped_calibration("cuda"), {w.shape for w in works})
    assert len(works) == 4 and hours == pytest.approx(sum(cost.job_seconds(w, cal) for w in works) / 3600)
    assert hours > 0
    # nothing lacking: no job, no hours
    assert jobs_to_decide(cells, 5, cfg, held) == ([], 0.0)


def test_a_twin_is_planned_as_the_job_trained_in_its_place() -> None:
    """The beyond family's CE at Γ = 10 is the losses family's job (a twin): a claim that reads it plans that job."""
    cfg = load_config(CONFIG)
    jobs, _ = jobs_to_decide([("beyond", "mnist", "g10", "ce")], 6, cfg,
                             {("losses", "mnist", "g10", "ce", s) for s in range(5)})
    assert jobs == ["losses/mnist/g10/ce/seed5"]


def test_a_derived_job_is_planned_with_its_source() -> None:
    """A T_Ra job (T_Ra = 1) is derived from the monitor job's trajectory (it costs nothing itself): planning it plans
    the monitor job it needs, whose hours are the plan's (T_Ra = 1.25, the monitor's default, is that job's twin)."""
    cfg = load_config(CONFIG)
    jobs, hours = jobs_to_decide([("t_ra", "mnist", "t1", "ce")], 6, cfg,
                                 {("t_ra", "mnist", "t1", "ce", s) for s in range(5)})
    assert jobs == ["t_ra/mnist/t1/ce/seed5", "monitor/mnist/default/ce/seed5"]
    from fedbalance.evidence.plan import extended

    works = [w for w in cost.study_work(extended(cfg, 6), ["monitor"], device_type="cuda") if w.job.path in jobs]
    cal = cost.with_estimates(cost.shipped_calibration("cuda"), {w.shape for w in works})
    assert len(works) == 1 and hours == pytest.approx(cost.job_seconds(works[0], cal) / 3600) and hours > 0
