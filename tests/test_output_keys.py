"""Output-only keys: jobs that differ only in what they write share one training run, and the twin's files
equal those the job writes when it trains itself."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from fedbalance.jobs import jobfolder
from fedbalance.jobs.config import configured_job, load_config
from fedbalance.jobs.run import run_job
from fedbalance.common.jobspec import MONITOR_FED_LOSSES, OUTPUT_KEYS, covers, monitor_key, runs_monitor, training_key
from fedbalance.methods.losses import LOSSES, receives
from fedbalance.common.records import Job
from fedbalance.jobs.reuse import write_twin

ROOT = Path(__file__).resolve().parents[1]
# what differs between two runs of one job by construction: its timings, and the twin's pointer to its source
TIMINGS = {"seconds"}
RUN_ONLY = {"wall_time_s", "reused_from"}


@pytest.fixture(scope="module")
def quick() -> dict:
    return load_config(ROOT / "config" / "quick.yaml")


def tiny(quick: dict, loss: str, experiment: str = "losses", **over) -> dict:
    spec = configured_job(quick, Job("losses", "mnist", "g10", loss, 0))
    spec["partition"].update(num_clients=4, majority_samples=12)
    spec["monitor"]["aux_per_class"] = 8
    spec.update(clients_per_round=3, rounds=3, batch_size=16, lr=0.05, selection="random", experiment=experiment)
    for key, value in over.items():
        if key.startswith("monitor_"):
            spec["monitor"][key[len("monitor_"):]] = value
        else:
            spec[key] = value
    return spec


def test_the_losses_fed_by_the_monitor_are_the_registry_s() -> None:
    # the torch-free list beside the loss registry's own declarations (losses.receives)
    assert MONITOR_FED_LOSSES == {n for n in LOSSES if receives(n) & {"weights", "prior"}}


def test_training_key_ignores_output_keys_and_the_monitor_of_a_loss_it_does_not_feed(quick: dict) -> None:
    ce = tiny(quick, "ce", monitor_record=False, save_trajectory=False, empirical=False)
    assert OUTPUT_KEYS == ("monitor.record", "save_trajectory", "empirical")
    for over in ({"monitor_record": True}, {"save_trajectory": True}, {"empirical": True}, {"monitor_t_ra": 2.0},
                 {"monitor_estimators": ["paper"]}, {"experiment": "alpha"}):
        assert training_key(tiny(quick, "ce", **{**dict(monitor_record=False, save_trajectory=False, empirical=False),
                                                 **over})) == training_key(ce), over
    for over in ({"lr": 0.01}, {"seed": 1}, {"rounds": 4}, {"loss": "focal", "base_loss": "focal"}):
        assert training_key({**ce, **over}) != training_key(ce), over
    # the Ratio Loss trains on π: its monitor keys are training keys, record is not
    ratio = tiny(quick, "ratio", monitor_record=False)
    assert training_key(tiny(quick, "ratio", monitor_record=True)) == training_key(ratio)
    assert training_key(tiny(quick, "ratio", monitor_t_ra=2.0)) != training_key(ratio)
    assert runs_monitor(ratio) and not runs_monitor(ce)
    assert monitor_key(ce) is None and monitor_key(ratio) == monitor_key(tiny(quick, "ratio", monitor_record=True))


def test_covers_asks_the_source_for_every_output_of_the_target(quick: dict) -> None:
    rich = tiny(quick, "ce", monitor_record=True, save_trajectory=True, empirical=True)
    bare = tiny(quick, "ce", monitor_record=False, save_trajectory=False, empirical=False)
    assert covers(rich, bare) and not covers(bare, rich)
    for key in ("empirical", "monitor_record"):
        assert not covers(tiny(quick, "ce", **{**dict(monitor_record=True, save_trajectory=True, empirical=True),
                                               key: False}), rich), key
    # trajectory.pt is no declared output: a copy never carries one, so it does not decide
    assert covers(tiny(quick, "ce", monitor_record=True, save_trajectory=False, empirical=True), rich)
    # another threshold gives other recorded columns: not a copy (a replay would be)
    assert not covers(rich, tiny(quick, "ce", monitor_record=True, save_trajectory=True, empirical=True,
                                 monitor_t_ra=2.0))
    assert covers(rich, tiny(quick, "ce", monitor_record=False, monitor_t_ra=2.0))


@pytest.mark.parametrize("loss", ["ce", "ratio"])
def test_a_twin_written_from_a_richer_run_equals_the_job_trained_itself(
    quick: dict, loss: str, tmp_path: Path, torch_one_thread: None
) -> None:
    source = tiny(quick, loss, monitor_record=True, save_trajectory=True, empirical=True)
    target = tiny(quick, loss, experiment="alpha", monitor_record=False, save_trajectory=False, empirical=False)
    assert covers(source, target)
    run_job(source, tmp_path / "source", device="cpu", deterministic=True, progress=False)
    run_job(target, tmp_path / "trained", device="cpu", deterministic=True, progress=False)
    write_twin(tmp_path / "source", tmp_path / "twin", target)

    trained, twin = (jobfolder.round_records(tmp_path / d) for d in ("trained", "twin"))
    source_rows = jobfolder.round_records(tmp_path / "source")
    assert [{k: v for k, v in r.items() if k not in TIMINGS} for r in twin] == \
        [{k: v for k, v in r.items() if k not in TIMINGS} for r in trained]
    # the source recorded more than the target: the twin's copy left those columns out, no others
    assert all(r["emp_cos"] is not None for r in source_rows) and all(r["emp_cos"] is None for r in twin)
    if loss == "ce":
        assert all(r["cs_uniform"] is not None for r in source_rows) and all(r["cs_uniform"] is None for r in twin)
    else:  # the Ratio Loss runs the monitor whatever record says
        assert [r["weights"] for r in twin] == [r["weights"] for r in source_rows]
    m_trained, m_twin = (json.loads((tmp_path / d / "metrics.json").read_text()) for d in ("trained", "twin"))
    assert m_twin["reused_from"] == str(tmp_path / "source")
    assert {k: v for k, v in m_twin.items() if k not in RUN_ONLY} == {k: v for k, v in m_trained.items() if k not in RUN_ONLY}


def test_a_job_derived_from_a_trajectory_equals_the_job_trained_itself(
    quick: dict, tmp_path: Path, torch_one_thread: None
) -> None:
    from fedbalance.jobs.derive import derive_job
    from fedbalance.common.jobspec import ConfigError, derivable

    # the source records the empirical statistics of Y too; the target does not ask for them (its columns stay empty)
    source = tiny(quick, "ce", monitor_record=True, save_trajectory=True, monitor_t_ra=1.25, empirical=True,
                  monitor_estimators=["paper", "released", "pooled"])
    # another threshold (other weights π) and another lead estimator, read by the acknowledgment
    target = tiny(quick, "ce", experiment="t_ra", monitor_record=True, monitor_t_ra=1.02,
                  monitor_estimators=["pooled", "paper"])
    assert derivable(source, target) and not covers(source, target)
    run_job(source, tmp_path / "source", device="cpu", deterministic=True, progress=False)
    run_job(target, tmp_path / "trained", device="cpu", deterministic=True, progress=False)
    derive_job(tmp_path / "source", target, tmp_path / "derived")

    trained, derived, src = (jobfolder.round_records(tmp_path / d) for d in ("trained", "derived", "source"))
    strip = lambda rows: [{k: v for k, v in r.items() if k not in TIMINGS} for r in rows]  # noqa: E731
    assert strip(derived) == strip(trained)
    # the threshold changed what the monitor recorded: a copy of the source's columns would not do
    assert [r["weights"] for r in src] != [r["weights"] for r in trained]
    assert all(r["emp_cos"] is not None for r in src) and all(r["emp_cos"] is None for r in derived)
    m_trained, m_derived = (json.loads((tmp_path / d / "metrics.json").read_text()) for d in ("trained", "derived"))
    assert m_derived["derived_from"] == str(tmp_path / "source")
    run_only = RUN_ONLY | {"derived_from"}
    assert {k: v for k, v in m_derived.items() if k not in run_only} == \
        {k: v for k, v in m_trained.items() if k not in run_only}

    # a target that trains otherwise (another lr), or a source without its trajectory, is refused, writing nothing
    with pytest.raises(ConfigError, match="cannot be derived"):
        derive_job(tmp_path / "source", {**target, "lr": 0.01}, tmp_path / "other")
    (tmp_path / "source" / "trajectory.pt").unlink()
    with pytest.raises(ConfigError, match="trajectory"):
        derive_job(tmp_path / "source", target, tmp_path / "other")
    assert not (tmp_path / "other").exists()


def test_the_design_doc_states_the_shipped_configs_counts() -> None:
    """docs/design.md's counts of trained, copied and derived jobs, recomputed from the configs."""
    import re

    from fedbalance.jobs.config import jobs, twins
    from fedbalance.jobs.reuse import derived

    text = " ".join((ROOT / "docs" / "design.md").read_text().split())
    for name in ("mnist", "config"):
        cfg = load_config(ROOT / "config" / f"{name}.yaml")
        n, tw, der = len(jobs(cfg)), len(twins(cfg)), len(derived(cfg))
        stated = f"config/{name}.yaml: {n - tw - der:,} of {n:,} train ({tw} twins, {der} derived)"
        assert stated in text, stated
    quick = load_config(ROOT / "config" / "quick.yaml")
    n, tw, der = len(jobs(quick)), len(twins(quick)), len(derived(quick))
    assert f"config/quick.yaml: {n - tw - der} of {n} jobs train, {tw} are copied, {der} derived" in text
    assert re.search(rf"{n - tw - der} train, {tw} are copied .* {der} is derived", " ".join(
        (ROOT / "README.md").read_text().split()))
