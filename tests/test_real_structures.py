"""Every partition of every shipped config on the real datasets' label structure (issue: every dataset on its real
files).

``fedbalance.data.structures`` commits each dataset's real class counts (labels only); the tests here check them
against the real files in ../shared/data, build every partition of every job of every shipped config (every seed it
lists) on them, and show that a config asking more than a real dataset has is refused when it loads. The full LEAF
FEMNIST is not at hand: its partitions are checked on its published writer count only (the writers scheme takes whole
writers; per-writer class counts are not published), and the partial LEAF copy, which config/real.yaml runs on, is
checked whole.
"""

from __future__ import annotations

import copy
import gzip
import io
import json
import lzma
import tarfile
from pathlib import Path

import numpy as np
import pytest

from fedbalance.data import structures
from fedbalance.common.jobspec import runs_monitor
from fedbalance.data.partition import PartitionError, class_demand, make_partition, spec_partitions, unused_writers
from fedbalance.jobs.config import ConfigError, jobs, load_config, partition_key, read_yaml, resolve_job, validate

REPO = Path(__file__).resolve().parents[1]
SHIPPED = sorted((REPO / "config").glob("*.yaml"))
# the FEMNIST a shipped config runs on: the full LEAF set, or (config/real.yaml) the partial copy at hand
FEMNIST_OF = {"real.yaml": "femnist_partial"}


def _idx_labels(path: Path) -> np.ndarray:
    """An IDX label file read by hand (magic 2049, count, bytes), not through torchvision."""
    raw = gzip.decompress(path.read_bytes())
    assert int.from_bytes(raw[:4], "big") == 2049
    n = int.from_bytes(raw[4:8], "big")
    return np.frombuffer(raw[8:8 + n], dtype=np.uint8)


def test_mnist_and_fer2013_counts_are_the_real_files(shared_data):
    mnist = structures.structure("mnist")
    for split, name in (("train", "train-labels-idx1-ubyte.gz"), ("test", "t10k-labels-idx1-ubyte.gz")):
        counts = np.bincount(_idx_labels(shared_data / "MNIST" / "raw" / name), minlength=10)
        assert tuple(counts) == getattr(mnist, split)
    raw = np.frombuffer(lzma.open(shared_data / "fer2013" / "fer2013.u8.xz").read(), dtype=np.uint8).reshape(-1, 2306)
    emotion, usage = raw[:, 0], raw[:, 1]  # usage 0 Training, 1 PublicTest, 2 PrivateTest (to_csv.py)
    fer = structures.structure("fer2013")
    assert tuple(np.bincount(emotion[usage == 0], minlength=7)) == fer.train
    assert tuple(np.bincount(emotion[usage > 0], minlength=7)) == fer.test
    assert len(raw) == 35887 and fer.train[1] == 436 and sum(fer.train) == 28709  # the figures MANIFEST.md states


def test_the_partial_femnist_writers_are_the_real_shards(shared_data):
    part = structures.structure("femnist_partial")
    writers: dict[str, np.ndarray] = {}
    test = np.zeros(62, dtype=np.int64)
    with tarfile.open(shared_data / "femnist" / "leaf_sf0.05_partial.tar.xz") as tar:
        for member in tar.getmembers():
            if not member.name.endswith(".json"):
                continue
            shard = json.load(tar.extractfile(member))
            for user in shard["users"]:
                counts = np.bincount(shard["user_data"][user]["y"], minlength=62)
                if "/train/" in member.name:
                    writers[user] = counts
                else:
                    test += counts
    assert {w: tuple(c) for w, c in writers.items()} == dict(part.writer_counts)
    assert part.writers == len(writers) == 105 and sum(part.train) == 14708 and tuple(test) == part.test
    letters = part.letters()
    assert letters.num_classes == 26 and sum(letters.train) == sum(part.train[10:])
    assert letters.train[0] == part.train[10] + part.train[36]  # 'A' + 'a'


def test_mnist5k_counts_are_the_embedded_split():
    from fedbalance.data.datasets import _mnist5k_split

    _, y_train, _, y_test = _mnist5k_split()
    found = structures.structure("mnist5k")
    assert (tuple(np.bincount(y_train)), tuple(np.bincount(y_test))) == (found.train, found.test)


def _structure_of(source: str, options: dict, config: Path) -> structures.Structure | None:
    if source == "femnist":
        found = structures.structure(FEMNIST_OF.get(config.name, "femnist"))
        return found.letters() if options.get("letters_only", True) else found
    return structures.for_source(source, options)


def partition_failures(config: Path, cfg: dict, pick=_structure_of) -> tuple[list[str], int, list[str]]:
    """(one line per partition of ``cfg`` that cannot be built on its dataset's real structure, naming the job and the
    class; the number of partitions built; what could only be checked in part): every job, every seed, the balanced
    partition of a switch too."""
    failures, gaps, built, seen = [], [], 0, set()
    for job in jobs(cfg):
        spec = resolve_job(cfg, job)
        key = (partition_key(spec), job.seed)
        if key in seen:
            continue
        seen.add(key)
        found = pick(spec.source, dict(spec.options), config)
        if found is None:
            continue
        where = f"{config.name}: experiments.{job.experiment}[{job.dataset}, {job.setting}, {job.loss}, seed {job.seed}]"
        if spec.scheme == "writers" and found.writer_counts is None:
            p = spec.partition
            if p["num_clients"] * p["writers_per_client"] > found.writers:
                failures.append(f"{where}: needs {p['num_clients'] * p['writers_per_client']} writers, "
                                f"{found.name} has {found.writers}")
            gaps.append(where)
            continue
        labels, writers = found.writer_labels() if spec.scheme == "writers" else (found.labels(), None)
        try:
            parts = spec_partitions(spec, labels, writers, num_classes=found.num_classes)
        except PartitionError as exc:
            failures.append(f"{where}: {exc}")
            continue
        built += len(parts)
        for part in parts.values():
            assert (part.class_counts(labels).sum(axis=0) <= np.bincount(labels, minlength=found.num_classes)).all()
        if writers is not None and runs_monitor(spec) and spec.monitor.aux_source == "test":
            # the auxiliary data of a writers dataset: training samples of the writers no client uses (run.py)
            free = set(range(len(found.writer_counts)))
            for part in parts.values():
                free &= set(unused_writers(part, writers).tolist())
            have = np.bincount(labels[np.isin(writers, sorted(free))], minlength=found.num_classes)
            short = [f"{found.class_name(c)} has {n}" for c, n in enumerate(have) if n < spec.monitor.aux_per_class]
            if short:
                failures.append(f"{where}: monitor.aux_per_class {spec.monitor.aux_per_class}, but the {len(free)} "
                                f"writers no client uses hold too few: " + "; ".join(short[:3]))
    return failures, built, gaps


@pytest.mark.parametrize("config", SHIPPED, ids=[p.name for p in SHIPPED])
def test_every_partition_of_every_shipped_config_builds_on_the_real_counts(config):
    failures, built, gaps = partition_failures(config, load_config(config))
    assert not failures, f"{len(failures)} partition(s) cannot be built on the real data:\n" + "\n".join(failures[:20])
    assert built > 0
    # the gap, said: the full LEAF FEMNIST's writers scheme is checked on its writer count only
    assert all("femnist" in g for g in gaps)


def test_a_structure_short_of_a_class_names_the_job_and_the_class():
    """The test above can fail: the same configs on a Fer2013 whose disgust class had 300 samples instead of 436."""
    real = structures.structure("fer2013")
    short = structures.Structure("fer2013", real.classes, (real.train[0], 300, *real.train[2:]), real.test, "mutated")

    def pick(source, options, config):
        return short if source == "fer2013" else None

    config = REPO / "config" / "config.yaml"
    failures, _, _ = partition_failures(config, load_config(config), pick)
    assert failures and all("class 1 needs" in f and "has 300" in f for f in failures)
    # losses and centralised share their partitions (a partition is built once, for the first family that has it)
    assert any("experiments.centralised[fer2013, g1," in f for f in failures)
    # 18 holders x 24 (mismatch_fer2013 with 6 classes a client) = 432 > 300; 12 x 24 = 288 (4 classes) fits
    assert not any("c4_g1," in f or "c3_g1," in f for f in failures)
    assert any("experiments.mismatch_fer2013[fer2013, c6_g1," in f and "needs 432 samples" in f for f in failures)


def _raised(cfg: dict, changes: dict) -> dict:
    out = copy.deepcopy(cfg)
    out["datasets"]["fer2013"]["partition"].update(changes)
    return out


@pytest.mark.parametrize("changes, family, seed_phrase, klass", [
    # Γ = 10, 200 a majority class: the first seed whose design holds surprise 16 times needs 3,200 > 3,171
    ({"majority_samples": 200}, "experiments.", "seed", "class 5 (surprise)"),
    ({"balanced_samples": 26}, "experiments.", "seed", "class 1 (disgust)"),
    # 7 a class: seed 2's design gives disgust 65 holders, 7 x 65 = 455 > 436 (6 would fit seeds 0-4)
    ({"samples_per_class": 7}, "experiments.monitor[fer2013, default, seed 2]", "seed", "class 1 (disgust)"),
])
def test_a_config_asking_more_than_the_real_data_is_refused_when_it_loads(changes, family, seed_phrase, klass):
    cfg = _raised(read_yaml(REPO / "config" / "config.yaml"), changes)
    with pytest.raises(ConfigError) as err:
        validate(cfg)
    msg = str(err.value)
    assert family in msg and "fer2013" in msg and klass in msg and seed_phrase in msg, msg
    assert "real fer2013 training split" in msg and "\n" not in msg


def test_the_refusal_is_exact_for_the_seed_it_names():
    """balanced_samples 26: a Γ = 1 partition with m holders of disgust needs 26 m; refused exactly when 26 m > 436."""
    cfg = _raised(read_yaml(REPO / "config" / "config.yaml"), {"balanced_samples": 26})
    with pytest.raises(ConfigError) as err:
        validate(cfg)
    msg = str(err.value)
    need = int(msg.split("class 1 (disgust) needs ")[1].split()[0])
    assert need % 26 == 0 and need > 436 and need - 26 <= 436 + 26 * 2  # m = need/26 holders, 17 or 18 of them


@pytest.mark.parametrize("seed", range(6))
def test_class_demand_is_what_the_scheme_draws(seed):
    """``class_demand`` (no labels) against the class totals of the partition the scheme builds (a second method)."""
    rng = np.random.default_rng(100 + seed)
    q = int(rng.integers(4, 12))
    labels = np.repeat(np.arange(q), 4000)
    cases = [
        ("monitor", dict(num_clients=int(rng.integers(5, 60)), samples_per_class=int(rng.integers(1, 20)))),
        ("imbalance", dict(num_clients=20, min_classes=2, max_classes=q - 1, majority_samples=int(rng.integers(20, 90)),
                           gamma=float(rng.choice([1, 3, 10])), minority_classes=(0, 1), balanced_samples=7)),
        ("mismatch", dict(num_clients=q, classes_per_client=3, majority_samples=50, gamma=5.0,
                          minority_classes=(1,))),
    ]
    for scheme, params in cases:
        built = make_partition(scheme, labels, num_classes=q, seed=seed, **params)
        need = class_demand(scheme, num_classes=q, seed=seed, **params)
        assert np.array_equal(built.class_counts(labels).sum(axis=0), need), scheme


def test_balanced_samples_acts_at_gamma_one_only():
    labels = np.repeat(np.arange(7), 2000)
    common = dict(num_classes=7, num_clients=21, classes_per_client=6, majority_samples=100, minority_classes=(1, 2, 4),
                  balanced_samples=24, seed=3)
    flat = make_partition("mismatch", labels, gamma=1, **common).class_counts(labels).sum(axis=0)
    assert (flat == 18 * 24).all()  # 21 clients x 6 classes / 7 = 18 holders a class, 24 each
    tilted = make_partition("mismatch", labels, gamma=10, **common).class_counts(labels).sum(axis=0)
    assert list(tilted) == [1800, 180, 180, 1800, 180, 1800, 1800]
    with pytest.raises(PartitionError, match="partition.balanced_samples"):
        make_partition("mismatch", np.repeat(np.arange(7), 400), gamma=1, **common)  # 432 > 400


def test_fer2013s_shipped_gammas_are_realised_exactly():
    """On the real Fer2013 counts every Γ of the losses grid is realised exactly (docs/deviations.md's arithmetic)."""
    cfg = load_config(REPO / "config" / "config.yaml")
    fer = structures.structure("fer2013")
    for job in jobs(cfg, ["losses"]):
        if job.dataset != "fer2013" or job.loss != "ce":
            continue
        spec = resolve_job(cfg, job)
        part = spec_partitions(spec, fer.labels(), num_classes=7)["main"]
        assert part.stats(fer.labels())["gamma"] == spec.partition["gamma"], job


def test_snakemake_dry_run_refuses_an_infeasible_study_in_one_line(tmp_path):
    """The check runs while the Snakefile parses: ``snakemake -n`` stops before any data is prepared."""
    from test_workflow import in_tmp

    cfg = _raised(read_yaml(REPO / "config" / "config.yaml"), {"balanced_samples": 30})
    path = tmp_path / "study.yaml"
    path.write_text(__import__("yaml").safe_dump(cfg, sort_keys=False))
    run = in_tmp(tmp_path, "-n", "--configfile", str(path))
    out = run.stdout + run.stderr
    assert run.returncode != 0 and "Traceback" not in out, out[-2000:]
    line = next(x for x in out.splitlines() if "invalid configuration" in x)
    assert "fer2013" in line and "class 1 (disgust)" in line and "balanced_samples" in line, line
    assert not (tmp_path / "results").exists()


def test_real_yaml_runs_every_family_of_the_paper_on_its_datasets_models_and_schemes():
    """config/real.yaml is config/config.yaml shrunk, not another study: the same families on the same datasets, each
    family's partition scheme and every dataset's model and Fer2013 counts (FEMNIST: the writers a partial copy has)."""
    paper, real = load_config(REPO / "config" / "config.yaml"), load_config(REPO / "config" / "real.yaml")
    assert {e: x["datasets"] for e, x in paper["experiments"].items()} == \
        {e: x["datasets"] for e, x in real["experiments"].items()}
    first = {}
    for cfg in (paper, real):
        seen = {}
        for job in jobs(cfg):
            spec = resolve_job(cfg, job)
            seen.setdefault((job.experiment, job.dataset), (spec.model, spec.scheme, spec.monitor.record,
                                                            spec.mode, spec.selection))
        first[id(cfg)] = seen
    assert first[id(paper)] == first[id(real)]
    for key in ("majority_samples", "balanced_samples", "samples_per_class"):
        assert paper["datasets"]["fer2013"]["partition"][key] == real["datasets"]["fer2013"]["partition"][key]
