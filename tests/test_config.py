"""Configuration: schema, cross-key checks that name the key, merge order, job expansion."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from fedbalance.jobs.config import ConfigError, deep_merge, jobs, load_config, configured_job, settings
from fedbalance.data.partition import partition_args
from fedbalance.common.records import Job

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def quick() -> dict:
    return yaml.safe_load((ROOT / "config" / "quick.yaml").read_text())


@pytest.fixture(scope="module")
def full() -> dict:
    return yaml.safe_load((ROOT / "config" / "config.yaml").read_text())


def test_shipped_configs_validate(quick: dict, full: dict) -> None:
    assert load_config(ROOT / "config" / "quick.yaml")["seeds"] == [0, 1]
    assert load_config(ROOT / "config" / "config.yaml")["results_dir"] == "results"


def test_full_config_job_count(full: dict) -> None:
    # losses: 4 datasets x 5 gammas x 4 losses x 5 seeds; mismatch: 2 x (4 x 5) x 4 x 5
    counts = {}
    for j in jobs(full):
        counts[j.experiment] = counts.get(j.experiment, 0) + 1
    assert counts["losses"] == 4 * 5 * 4 * 5
    assert counts["mismatch"] == 2 * 20 * 4 * 5
    assert counts["t_ra"] == 11 * 5
    assert counts["early"] == 4 * 3 * 5
    assert len(jobs(full)) == sum(counts.values())


def test_grid_names_and_merge_order(full: dict) -> None:
    names = list(settings(full, "mismatch"))
    assert names[:2] == ["c5_g1", "c5_g10"] and len(names) == 20
    assert "t1.25" in settings(full, "t_ra")
    spec = configured_job(full, Job("monitor", "femnist", "default", "ce", 3))
    # experiment params set scheme=monitor, num_clients=100; dataset_params restore writers
    assert spec["partition"]["scheme"] == "writers"
    assert spec["partition"]["num_clients"] == 100
    assert spec["selection"] == "random" and spec["seed"] == 3
    spec = configured_job(full, Job("mismatch", "cifar10", "c3_g50", "ratio", 0))
    assert (spec["partition"]["classes_per_client"], spec["partition"]["gamma"]) == (3, 50)
    assert spec["rounds"] == 50 and spec["local_epochs"] == 5 and spec["lr"] == 0.001
    scheme, kwargs = partition_args(spec)
    assert scheme == "mismatch"
    assert kwargs == {"num_clients": 20, "classes_per_client": 3, "majority_samples": 250, "gamma": 50,
                      "minority_classes": (2, 4, 7)}


def test_deep_merge_does_not_mutate() -> None:
    a = {"x": {"y": 1, "z": 2}}
    b = deep_merge(a, {"x": {"y": 5}})
    assert b == {"x": {"y": 5, "z": 2}} and a == {"x": {"y": 1, "z": 2}}


@pytest.mark.parametrize(
    ("edit", "key"),
    [
        (lambda c: c["experiments"]["losses"].update(losses=["ce", "hinge"]), "experiments.losses.losses: unknown loss 'hinge'"),
        (lambda c: c["defaults"]["partition"].update(gamma=0.5), "defaults.partition.gamma"),
        (lambda c: c["defaults"].update(clients_per_round=50), "clients_per_round"),
        (lambda c: c["defaults"]["partition"].update(majority_samples=-3), "defaults.partition.majority_samples"),
        (lambda c: c["experiments"]["losses"].update(datasets=["svhn"]), "experiments.losses.datasets"),
        (lambda c: c["datasets"]["mnist"].update(source="imagenet"), "datasets.mnist.source"),
        (lambda c: c["datasets"]["mnist"].update(minority_classes=[2, 11]), "minority_classes"),
        (lambda c: c["experiments"]["early"]["settings"]["S"].update(switch_round=99), "switch_round"),
        (lambda c: c["experiments"]["mfe"]["grid"]["c"].update(key="partition.classes"), "experiments.mfe"),
        (lambda c: c.update(typo_key=1), "typo_key"),
        (lambda c: c["experiments"]["mfe"]["params"]["partition"].update(num_clients=13), "partition.num_clients"),
    ],
)
def test_bad_values_name_the_key(quick: dict, edit, key: str) -> None:
    cfg = copy.deepcopy(quick)
    edit(cfg)
    with pytest.raises(ConfigError) as err:
        load_config(cfg)
    assert key in str(err.value)


def test_missing_and_malformed_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("datasets: [unclosed\n")
    with pytest.raises(ConfigError, match="bad.yaml"):
        load_config(bad)


def test_loss_variant_resolves_to_its_base_loss(full: dict) -> None:
    cfg = load_config(ROOT / "config" / "mnist.yaml")
    spec = configured_job(cfg, Job("losses", "mnist", "g10", "ratio_rel", 0))
    assert spec["loss"] == "ratio_rel" and spec["base_loss"] == "ratio"
    assert spec["monitor"]["variant"] == "released"
    assert spec["loss_params"]["ratio"]["weighting"] == "batch_mean"
    assert spec["partition"]["gamma"] == 10
    plain = configured_job(cfg, Job("losses", "mnist", "g10", "ratio", 0))
    assert (plain["base_loss"], plain["monitor"]["variant"], plain["loss_params"]["ratio"]["weighting"]) == (
        "ratio", "paper", "per_sample")
    # the paper's competitor settings are the authors' GHM-C
    assert full["defaults"]["loss_params"]["ghmc"] == {"bins": 30, "momentum": 0.0, "g": "sigmoid"}


def test_unknown_or_shadowing_loss_names_the_key(full: dict) -> None:
    bad = copy.deepcopy(full)
    bad["experiments"]["losses"]["losses"] = ["ce", "ratio_paper"]
    with pytest.raises(ConfigError, match=r"experiments\.losses\.losses: unknown loss 'ratio_paper'"):
        load_config(bad)
    bad = copy.deepcopy(full)
    bad["loss_variants"]["ce"] = {"loss": "ratio"}
    with pytest.raises(ConfigError, match=r"loss_variants\.ce"):
        load_config(bad)
    bad = copy.deepcopy(full)
    bad["loss_variants"]["ratio_rel"]["params"]["loss_params"]["ratio"]["weighting"] = "per_class"
    with pytest.raises(ConfigError, match=r"loss_variants\.ratio_rel\.params\.loss_params\.ratio\.weighting"):
        load_config(bad)


def test_mnist_config_is_the_full_protocol_on_mnist(full: dict) -> None:
    mnist = yaml.safe_load((ROOT / "config" / "mnist.yaml").read_text())
    assert mnist["defaults"] == full["defaults"] and mnist["loss_variants"] == full["loss_variants"]
    assert mnist["datasets"] == {"mnist": full["datasets"]["mnist"]}
    expected = {name for name, e in full["experiments"].items() if "mnist" in e["datasets"]}
    assert set(mnist["experiments"]) == expected
    cfg_m, cfg_f = load_config(mnist), load_config(full)
    for name in expected:
        assert settings(cfg_m, name) == settings(cfg_f, name), name
        for s in settings(cfg_f, name):
            fm = configured_job(cfg_m, Job(name, "mnist", s, "ce", 0))
            ff = configured_job(cfg_f, Job(name, "mnist", s, "ce", 0))
            extra = {"monitor", "save_trajectory"} if name == "losses" else set()
            assert {k: v for k, v in fm.items() if k not in extra} == {k: v for k, v in ff.items() if k not in extra}
    assert mnist["experiments"]["losses"]["losses"] == ["ce", "focal", "ghmc", "ratio", "ratio_rel"]


def test_beyond_family(full: dict, quick: dict) -> None:
    from fedbalance.engine.fl import needs_monitor

    cfg = load_config(full)
    beyond = [j for j in jobs(cfg) if j.experiment == "beyond"]
    assert len(beyond) == 2 * 5 * 7 * 5  # MNIST + CIFAR10, 5 Γ, 7 losses, 5 seeds
    median = configured_job(cfg, Job("beyond", "mnist", "g50", "ratio_median", 0))
    assert median["base_loss"] == "ratio" and median["monitor"]["variant"] == "median"
    for loss, monitored in (("la", True), ("ratio", True), ("la_local", False), ("fedlc", False), ("fedrs", False)):
        spec = configured_job(cfg, Job("beyond", "cifar10", "g50", loss, 0))
        assert needs_monitor(spec) is monitored, loss
        # the same protocol and partition as the paper's loss comparison
        ref = configured_job(cfg, Job("losses", "cifar10", "g50", "ce", 0))
        drop = {"experiment", "loss", "base_loss"}
        assert {k: v for k, v in spec.items() if k not in drop} == {k: v for k, v in ref.items() if k not in drop}
    assert spec["loss_params"]["fedrs"] == {"alpha": 0.5, "scaling": "hard"}
    q = load_config(quick)
    assert {j.loss for j in jobs(q, ["beyond"])} == {"ce", "ratio", "la", "fedlc"}


def test_schema_lists_exactly_the_recorded_estimators() -> None:
    from fedbalance.jobs.config import schema
    from fedbalance.monitor.estimators import REGISTRY
    from fedbalance.common.records import ESTIMATORS, REPLAY_ESTIMATORS

    def enums(node):
        """Every enum of the built-in names of a list property named ``estimators`` anywhere in the schema (the
        other alternative of its items is a plug-in's name, docs/extending.md)."""
        if isinstance(node, dict):
            if isinstance(node.get("estimators"), dict) and "items" in node["estimators"]:
                yield node["estimators"]["items"]["anyOf"][0]["enum"]
            for v in node.values():
                yield from enums(v)
        elif isinstance(node, list):
            for v in node:
                yield from enums(v)

    found = list(enums(schema()))
    assert found and all(e == list(ESTIMATORS) for e in found)
    # the recorded built-ins, one diagnostic, and the estimators registered for replays only
    assert set(REGISTRY) == set(ESTIMATORS) | {"paper_signed"} | set(REPLAY_ESTIMATORS)
    assert not set(REPLAY_ESTIMATORS) & set(ESTIMATORS)


def test_resolve_jobs_equals_resolve_job_and_follows_the_configs_content() -> None:
    """The bulk resolution (cached by content) gives each job's spec as resolving it alone does, and an edited
    config (same object, other content) gets specs of its own."""
    from fedbalance.jobs.config import resolve_job, resolve_jobs

    cfg = load_config(ROOT / "config" / "quick.yaml")
    every = jobs(cfg)
    bulk = resolve_jobs(cfg, every)
    assert list(bulk) == every
    assert all(bulk[j].as_dict() == resolve_job(cfg, j).as_dict() for j in every)
    assert resolve_jobs(cfg, every[:3])[every[0]] is bulk[every[0]]  # the second call reads the first's specs
    cfg["defaults"]["lr"] = 0.123
    again = resolve_jobs(cfg, every)
    assert {s.lr for s in again.values()} == {0.123} != {s.lr for s in bulk.values()}
    assert all(again[j].as_dict() == resolve_job(cfg, j).as_dict() for j in every)


def test_deep_merge_leaves_both_sides_untouched() -> None:
    base = {"a": {"b": {"c": 1, "d": [1]}}, "e": 1}
    over = {"a": {"b": {"c": 2}, "f": {"g": 3}}}
    before = copy.deepcopy((base, over))
    out = deep_merge(base, over)
    assert out == {"a": {"b": {"c": 2, "d": [1]}, "f": {"g": 3}}, "e": 1}
    out["a"]["b"]["d"].append(2)
    out["a"]["f"]["g"] = 4
    assert (base, over) == before
