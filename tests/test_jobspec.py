"""fedbalance.common.jobspec: the typed, frozen job spec every consumer reads, checked against the configured dicts."""

from __future__ import annotations

import dataclasses
import pickle

import pytest

from fedbalance.jobs.config import ConfigError, configured_job, jobs, load_config, resolve_job, run_key
from fedbalance.common.jobspec import JOB_DEFAULTS, JobSpec, as_spec
from fedbalance.common.records import Job

CONFIGS = ("config/quick.yaml", "config/mnist.yaml", "config/config.yaml")


@pytest.fixture(scope="module")
def quick() -> dict:
    return load_config("config/quick.yaml")


def _dotted(d: dict, key: str):
    for part in key.split("."):
        d = d[part]
    return d


def test_fields_are_the_configured_values_typed() -> None:
    mnist = load_config("config/mnist.yaml")
    job = Job("losses", "mnist", "g10", "ratio_rel", 1)  # a loss variant of the Ratio Loss
    raw = configured_job(mnist, job)
    spec = resolve_job(mnist, job)
    assert isinstance(spec, JobSpec) and spec.job == job and spec.seed == 1 and spec.name == "losses/mnist/g10/ratio_rel/seed1"
    assert spec.base_loss == raw["base_loss"] == "ratio" and spec.job.loss == "ratio_rel"
    for field, key, kind in [("lr", "lr", float), ("momentum", "momentum", float), ("rounds", "rounds", int),
                             ("batch_size", "batch_size", int), ("local_epochs", "local_epochs", int),
                             ("clients_per_round", "clients_per_round", int), ("eval_every", "eval_every", int)]:
        value = getattr(spec, field)
        assert type(value) is kind and value == kind(raw[key]), field
    assert spec.monitor.t_ra == float(raw["monitor"]["t_ra"]) and spec.monitor.variant == raw["monitor"]["variant"]
    assert spec.monitor.ack_rounds == int(raw["monitor"]["acknowledge"]["rounds"])
    assert spec.monitor.estimators == tuple(raw["monitor"]["estimators"])
    assert spec.partition == raw["partition"] and spec.scheme == raw["partition"]["scheme"]


def test_optional_keys_take_their_one_default(quick: dict) -> None:
    raw = configured_job(quick, Job("losses", "mnist", "g10", "ce", 0))
    for key in ("save_trajectory", "empirical", "switch_round", "centralised_epochs", "monitor.aux_source",
                "monitor.aux_selection", "monitor.ratio_clip", "monitor.record"):
        parent, _, leaf = key.rpartition(".")
        (_dotted(raw, parent) if parent else raw).pop(leaf, None)
    spec = as_spec(raw)
    assert spec.save_trajectory is False and spec.empirical is False and spec.switch_round is None
    assert spec.centralised_epochs is None and spec.monitor.record is False
    assert spec.monitor.aux_source == JOB_DEFAULTS["monitor"]["aux_source"] == "test"
    assert spec.monitor.aux_selection == "random" and spec.monitor.ratio_clip == 5000.0
    raw.pop("path", None)
    assert as_spec(raw).path == "auto"


def test_frozen_and_copies(quick: dict) -> None:
    spec = resolve_job(quick, Job("losses", "mnist", "g10", "ratio", 0))
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.lr = 1.0  # type: ignore[misc]
    d = spec.as_dict()
    d["lr"] = 123.0
    d["monitor"]["t_ra"] = -1
    assert spec.as_dict()["lr"] != 123.0 and spec.as_dict()["monitor"]["t_ra"] == spec.monitor.t_ra
    assert as_spec(spec) is spec
    assert pickle.loads(pickle.dumps(spec.as_dict())) == spec.as_dict()  # what Snakemake params carry


def test_with_path_keeps_the_configured_dict(quick: dict) -> None:
    raw = configured_job(quick, Job("losses", "mnist", "g10", "ratio", 0))
    raw["path"] = "auto"
    spec = as_spec(raw).with_path("sequential")
    assert spec.path == "sequential" and spec.as_dict()["path"] == "auto"  # metrics.json's config, run_key
    assert spec.resolved_dict() == {**raw, "path": "sequential"}  # the checkpoint fingerprint, trajectory.pt
    assert run_key(spec) == run_key(raw)


@pytest.mark.parametrize("key", ["lr", "monitor.t_ra", "clients_per_round", "loss"])
def test_a_missing_required_key_is_named(quick: dict, key: str) -> None:
    raw = configured_job(quick, Job("losses", "mnist", "g10", "ratio", 0))
    parent, _, leaf = key.rpartition(".")
    del (_dotted(raw, parent) if parent else raw)[leaf]
    with pytest.raises(ConfigError, match=f"'{key}' is not set"):
        as_spec(raw)


def test_a_monitor_key_unset_for_a_job_without_monitor_is_named_when_read(quick: dict) -> None:
    raw = configured_job(quick, Job("losses", "mnist", "g10", "ce", 0))
    del raw["monitor"]["t_ra"]
    spec = as_spec(raw)  # a CE job needs no t_ra
    assert spec.monitor.t_ra is None
    with pytest.raises(ConfigError, match="'monitor.t_ra' is not set"):
        spec.monitor.required("t_ra")


@pytest.mark.parametrize("path", CONFIGS)
def test_every_shipped_job_resolves(path: str) -> None:
    """Every job of the shipped configs types; run_key of the typed spec is that of its configured dict."""
    cfg = load_config(path)
    for job in jobs(cfg):
        raw = configured_job(cfg, job)
        spec = resolve_job(cfg, job)
        assert spec.as_dict() == raw and run_key(spec) == run_key(raw)
        assert spec.rounds == raw["rounds"] and spec.model == raw["model"] and spec.mode == raw["mode"]


def test_training_and_monitor_keys_leave_the_spec_as_it_was() -> None:
    """The keys drop dotted keys from a view of the configured dict; the spec keeps them all."""
    from pathlib import Path

    from fedbalance.common.jobspec import monitor_key, training_key

    cfg = load_config(Path(__file__).resolve().parents[1] / "config" / "quick.yaml")
    spec = resolve_job(cfg, Job("monitor", "mnist", "default", "ce", 0))
    before = spec.as_dict()
    assert before["monitor"]["record"] is True and "save_trajectory" in before
    training_key(spec), monitor_key(spec), training_key(before), monitor_key(before)
    assert spec.as_dict() == before and before["monitor"]["record"] is True
    assert '"record"' not in monitor_key(spec) and '"save_trajectory"' not in training_key(spec)
