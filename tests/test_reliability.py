"""Reliability: required keys, refused configs, locks, fingerprints, permissions, tracked data.

Each test names the issue item it covers; docs/reliability.md lists the guarantees and these tests.
"""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from conftest import write_job
from fedbalance.jobs.config import SCHEMA_PATH, ConfigError, load_config, configured_job, validate
from fedbalance.common.records import Job

ROOT = Path(__file__).resolve().parents[1]
SNAKEFILE = ROOT / "workflow" / "Snakefile"
QUICK = ROOT / "config" / "quick.yaml"
LR_TEXT = next(line.split(":", 1)[1].strip() for line in QUICK.read_text().splitlines() if line.startswith("  lr:"))
LR_LINE = f"  lr: {LR_TEXT}\n"  # the quick config's learning-rate line, edited by the tests below


@pytest.fixture()
def quick() -> dict:
    return yaml.safe_load(QUICK.read_text())


def one_experiment(cfg: dict, name: str, **settings: dict) -> dict:
    """``cfg`` with only experiment ``name``, its grid replaced by explicit ``settings`` (default: one empty)."""
    exp = copy.deepcopy(cfg["experiments"][name])
    exp.pop("grid", None)
    exp["settings"] = settings or {"s": {}}
    return {**cfg, "experiments": {name: exp}}


def _drop(cfg: dict, dotted: str) -> None:
    *head, last = dotted.split(".")
    d = cfg["defaults"]
    for k in head:
        d = d[k]
    del d[last]


# --- item 1: every key a job reads is required after merging, or has one default -----------------


@pytest.mark.parametrize(
    "key, experiment",
    [
        ("lr", "losses"),
        ("rounds", "losses"),
        ("batch_size", "losses"),
        ("monitor.t_ra", "losses"),
        ("mode", "losses"),
        ("partition.scheme", "losses"),
        ("partition.num_clients", "losses"),
        ("partition.min_classes", "losses"),
        ("partition.majority_samples", "losses"),
        ("partition.gamma", "losses"),
        ("partition.samples_per_class", "monitor"),
        ("partition.classes_per_client", "mismatch"),
        ("clients_per_round", "losses"),
        ("monitor.acknowledge.threshold", "losses"),
    ],
)
def test_missing_required_key_is_refused_naming_it(quick: dict, key: str, experiment: str) -> None:
    cfg = one_experiment(quick, experiment)
    if experiment == "losses":
        cfg["experiments"]["losses"]["losses"] = ["ce", "ratio"]  # ratio reads the monitor keys
    validate(cfg)  # complete: accepted
    _drop(cfg, key)
    with pytest.raises(ConfigError) as err:
        validate(cfg)
    msg = str(err.value)
    assert f"'{key}' is not set" in msg and "defaults" in msg and f"experiments.{experiment}[mnist, s," in msg


def test_monitor_keys_required_only_where_the_monitor_runs(quick: dict) -> None:
    cfg = one_experiment(quick, "losses")
    cfg["experiments"]["losses"]["losses"] = ["ce", "focal"]
    _drop(cfg, "monitor.t_ra")
    validate(cfg)  # no job of this study runs the monitor
    cfg["experiments"]["losses"]["losses"] = ["ce", "ratio"]  # ratio is not the first loss: still checked
    with pytest.raises(ConfigError, match=r"\[mnist, s, ratio\]: 'monitor.t_ra' is not set"):
        validate(cfg)


def test_optional_keys_have_one_default(quick: dict) -> None:
    from fedbalance.jobs.config import JOB_DEFAULTS, job_value

    cfg = load_config(quick)
    spec = configured_job(cfg, Job("losses", "mnist", "g10", "ratio", 0))
    assert "aux_source" not in spec["monitor"] and "save_trajectory" not in spec  # quick.yaml leaves them out
    assert job_value(spec, "monitor.aux_source") == "test" == JOB_DEFAULTS["monitor"]["aux_source"]
    assert job_value(spec, "monitor.aux_selection") == "random"
    assert job_value(spec, "save_trajectory") is False
    assert job_value(spec, "monitor.t_ra") == 1.25  # set: the spec's value, not a default
    spec["monitor"]["aux_source"] = "train"
    assert job_value(spec, "monitor.aux_source") == "train"


# --- item 2: colliding setting names --------------------------------------------------------------


@pytest.mark.parametrize(
    "values, name, shown",
    [
        ([0.5, 0.5000001], "a0.5", ["monitor.alpha=0.5 ", "monitor.alpha=0.5000001 "]),
        ([10, 10.0], "g10", ["partition.gamma=10 ", "partition.gamma=10.0 "]),
    ],
)
def test_colliding_grid_names_are_refused(quick: dict, values: list, name: str, shown: list) -> None:
    cfg = one_experiment(quick, "losses")
    exp = cfg["experiments"]["losses"]
    del exp["settings"]
    key = "monitor.alpha" if name.startswith("a") else "partition.gamma"
    exp["grid"] = {name[0]: {"key": key, "values": values}}
    with pytest.raises(ConfigError) as err:
        validate(cfg)
    msg = str(err.value)
    assert repr(name) in msg and all(s in msg for s in shown), msg


def test_explicit_setting_named_like_a_grid_one_is_refused(quick: dict) -> None:
    cfg = copy.deepcopy(quick)
    cfg["experiments"]["losses"]["settings"] = {"g10": {"partition": {"gamma": 50}}}
    with pytest.raises(ConfigError, match=r"settings\.g10.*'g10'|'g10'.*settings\.g10"):
        validate(cfg)


# --- item 3: NaN and inf ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "edit, key",
    [
        (LR_LINE, "defaults.lr"),
        ("      g: {key: partition.gamma, values: [1, 10]}\n", "experiments.losses.grid.g.values.1"),
    ],
)
@pytest.mark.parametrize("bad", [".nan", ".inf", "-.inf"])
def test_non_finite_numbers_are_refused_naming_the_key(tmp_path: Path, edit: str, key: str, bad: str) -> None:
    text = QUICK.read_text()
    assert edit in text
    new = edit.replace(LR_TEXT, bad) if "lr" in edit else edit.replace("10]", f"{bad}]")
    path = tmp_path / "bad.yaml"
    path.write_text(text.replace(edit, new))
    with pytest.raises(ConfigError, match=rf"^{key}: .* is not a finite number"):
        load_config(path)


# --- item 4: duplicate YAML keys ------------------------------------------------------------------


def test_duplicate_key_is_refused_with_file_and_line(tmp_path: Path) -> None:
    from fedbalance.jobs.config import read_yaml

    text = QUICK.read_text()
    lines = text.splitlines(keepends=True)
    at = lines.index(LR_LINE)
    path = tmp_path / "dup.yaml"
    path.write_text("".join(lines[: at + 1] + ["  lr: 5.0\n"] + lines[at + 1:]))
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value) == f"{path}: line {at + 2}: key 'lr' is given twice in one mapping (first on line {at + 1})"
    path.write_text("a: {b: 1, b: 2}\n")
    with pytest.raises(ConfigError, match="line 1: key 'b' is given twice"):
        read_yaml(path)
    path.write_text("base: &x {b: 1}\nother:\n  <<: *x\n  b: 2\n")  # a merge key may be overridden
    assert read_yaml(path) == {"base": {"b": 1}, "other": {"b": 2}}


def test_schema_copies_equal_and_free_of_duplicates() -> None:
    from fedbalance.jobs.config import read_yaml

    other = ROOT / "workflow" / "schemas" / "config.schema.yaml"
    assert SCHEMA_PATH.read_bytes() == other.read_bytes()
    assert "loss_variants" in read_yaml(SCHEMA_PATH)["properties"]


def _snakemake_dry(tmp: Path, config_text: str) -> subprocess.CompletedProcess:
    path = tmp / "cfg.yaml"
    path.write_text(config_text)
    return subprocess.run(
        ["snakemake", "-s", str(SNAKEFILE), "--directory", str(tmp / "run"), "-n", "--configfile", str(path)],
        capture_output=True, text=True, timeout=600,
    )


@pytest.mark.skipif(shutil.which("snakemake") is None, reason="snakemake is not installed")
def test_snakemake_refuses_duplicate_keys_and_bad_dataset_options(tmp_path: Path) -> None:
    """Items 4 and 12 under Snakemake: one 'invalid configuration' line, no DAG, no traceback."""
    text = QUICK.read_text()
    r = _snakemake_dry(tmp_path, text.replace(LR_LINE, LR_LINE + "  lr: 5.0\n"))
    out = r.stdout + r.stderr
    assert r.returncode != 0 and "Building DAG" not in out
    assert "invalid configuration:" in out and "key 'lr' is given twice" in out and "line " in out, out
    cfg = yaml.safe_load(text)
    cfg["datasets"]["mnist"]["options"] = {"bogus": 1}
    r = _snakemake_dry(tmp_path, yaml.safe_dump(cfg))
    out = r.stdout + r.stderr
    assert r.returncode != 0 and "Building DAG" not in out and "Traceback" not in out, out
    assert "invalid configuration: datasets.mnist.options:" in out and "bogus" in out, out


# --- item 12: a bad dataset option is a ConfigError naming the key ------------------------------------


def test_bad_dataset_option_names_the_key(quick: dict) -> None:
    cfg = copy.deepcopy(quick)
    cfg["datasets"]["mnist"]["options"] = {"bogus": 1}
    with pytest.raises(ConfigError, match=r"^datasets\.mnist\.options: .*unknown option 'bogus'"):
        validate(cfg)
    cfg = copy.deepcopy(quick)
    cfg["experiments"]["losses"]["params"] = {"options": {"bogus": 1}}  # below the dataset: refused
    with pytest.raises(ConfigError, match=r"^experiments\.losses\[mnist, g1, ce\]: experiments\.losses\.params sets options"):
        validate(cfg)


# --- jobs: a tiny run_job on the embedded mnist5k -------------------------------------------------


def tiny_spec(seed: int = 0, gamma: float = 10) -> dict:
    cfg = load_config(QUICK)
    spec = configured_job(cfg, Job("losses", "mnist", "g10", "ratio", seed))
    spec["partition"].update(num_clients=4, majority_samples=12, gamma=gamma)
    spec["monitor"]["aux_per_class"] = 8
    spec.update(clients_per_round=3, rounds=3, batch_size=16, lr=0.05, selection="random")
    return spec


@pytest.fixture()
def one_thread():
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# --- item 5: a second job in the same folder is refused; it deletes nothing ---------------------------


def test_second_job_in_a_busy_folder_is_refused_and_deletes_nothing(tmp_path: Path, one_thread) -> None:
    import sys

    from fedbalance.jobs.run import JobError, run_job

    out = tmp_path / "job"
    out.mkdir()
    live = out / ".metrics.json.k2x9_1.tmp"  # a temp file of the job that holds the folder
    live.write_text("being written")
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from pathlib import Path; from fedbalance.jobs.run import job_lock\n"
         "with job_lock(Path(sys.argv[1])):\n    print('locked', flush=True); time.sleep(120)", str(out)],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(JobError, match=rf"{out} is in use by pid {holder.pid} on \S+ \(lock file"):
            run_job(tiny_spec(), out, device="cpu", progress=False)
        assert live.read_text() == "being written"
        assert not (out / "metrics.json").exists()
    finally:
        holder.kill()
        holder.wait()
    m = run_job(tiny_spec(), out, device="cpu", progress=False)  # its owner is gone: the leftover goes
    assert m["rounds"] == 3 and not live.exists()
    assert not (out / ".lock").exists()  # the killed holder's lock file too, once the job that took it over ended


def test_a_job_lock_leaves_no_file(tmp_path: Path) -> None:
    """The lock file holds the holder's pid while held and is gone after the job, whether it ends or fails; a second
    holder, here in the same process, is refused while it is held."""
    import os

    from fedbalance.jobs.run import JobError, job_lock

    out = tmp_path / "job"
    with job_lock(out):
        assert (out / ".lock").read_text().startswith(f"pid {os.getpid()} on ")
        with pytest.raises(JobError, match="is in use by pid"):
            with job_lock(out):
                pass
    assert list(out.iterdir()) == []
    with pytest.raises(RuntimeError, match="boom"):
        with job_lock(out):
            raise RuntimeError("boom")
    assert list(out.iterdir()) == []


# --- item 6: threads, device and versions recorded; a resume that changes them is refused ------------


def test_resume_under_other_threads_is_refused(tmp_path: Path, one_thread) -> None:
    import torch

    from fedbalance.jobs.run import CHECKPOINT, JobError, run_job

    class Killed(Exception):
        pass

    def kill(state: dict, row: dict) -> None:
        if row["round"] == 1:
            raise Killed

    spec, out = tiny_spec(), tmp_path / "job"
    with pytest.raises(Killed):
        run_job(spec, out, device="cpu", progress=False, on_round=kill)
    ckpt = torch.load(out / CHECKPOINT, weights_only=False)
    assert ckpt["runtime"]["threads"] == 1 and ckpt["runtime"]["device"] == "cpu"
    assert ckpt["runtime"]["torch"] == torch.__version__ and "fedbalance" in ckpt["runtime"]
    torch.set_num_threads(2)
    with pytest.raises(JobError, match=r"another runtime \(threads 1 -> 2\).*--threads 1"):
        run_job(spec, out, device="cpu", progress=False)
    assert (out / CHECKPOINT).exists() and not (out / "metrics.json").exists()
    torch.set_num_threads(1)
    m = run_job(spec, out, device="cpu", progress=False)
    assert m["rounds"] == 3 and m["threads"] == 1


def test_legacy_checkpoint_without_runtime_resumes_with_a_warning(tmp_path: Path, one_thread, caplog) -> None:
    import torch

    from fedbalance.jobs.run import CHECKPOINT, run_job

    def kill(state: dict, row: dict) -> None:
        if row["round"] == 0:
            raise KeyboardInterrupt

    spec, out = tiny_spec(), tmp_path / "job"
    with pytest.raises(KeyboardInterrupt):
        run_job(spec, out, device="cpu", progress=False, on_round=kill)
    ckpt = torch.load(out / CHECKPOINT, weights_only=False)
    del ckpt["runtime"]
    torch.save(ckpt, out / CHECKPOINT)
    with caplog.at_level("WARNING", logger="fedbalance.jobs.run"):
        assert run_job(spec, out, device="cpu", progress=False)["rounds"] == 3
    assert any("does not record its threads" in m for m in caplog.messages), caplog.messages


def test_checkpoint_with_an_unknown_round_state_is_ignored_with_a_warning(tmp_path: Path, one_thread, caplog) -> None:
    import torch

    from fedbalance.jobs.run import CHECKPOINT, run_job

    def kill(state, row: dict) -> None:
        if row["round"] == 0:
            raise KeyboardInterrupt

    spec, out = tiny_spec(), tmp_path / "job"
    with pytest.raises(KeyboardInterrupt):
        run_job(spec, out, device="cpu", progress=False, on_round=kill)
    ckpt = torch.load(out / CHECKPOINT, weights_only=False)
    ckpt["state"]["format"] = 2
    torch.save(ckpt, out / CHECKPOINT)
    with caplog.at_level("WARNING", logger="fedbalance.jobs.run"):
        m = run_job(spec, out, device="cpu", progress=False)
    wanted = r"round state this version cannot read.*unknown keys \['format'\]"
    assert any(re.search(wanted, m) for m in caplog.messages), caplog.messages
    assert m["rounds"] == 3 and not (out / CHECKPOINT).exists()


def test_cli_default_threads_equal_the_workflows(tmp_path: Path, quick: dict) -> None:
    import json

    import torch

    from fedbalance.cli import main

    cfg = copy.deepcopy(quick)
    cfg["defaults"]["partition"].update(majority_samples=12)
    cfg["defaults"].update(clients_per_round=3, rounds=1, batch_size=16)
    cfg["defaults"]["monitor"]["aux_per_class"] = 8
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(cfg))
    smk = (ROOT / "workflow" / "rules" / "common.smk").read_text()
    assert 'TRAIN_THREADS = config["threads"]' in smk
    before = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        argv = ["train", "--config", str(path), "--experiment", "losses", "--dataset", "mnist", "--setting", "g10",
                "--loss", "ce", "--seed", "0", "--device", "cpu", "--out", str(tmp_path / "out")]
        assert main(argv) == 0
    finally:
        torch.set_num_threads(before)
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert metrics["threads"] == quick.get("threads", 1) == 1


# --- item 7: outputs honour the umask --------------------------------------------------------------


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o027, 0o640), (0o077, 0o600)])
def test_atomic_write_honours_the_umask(tmp_path: Path, umask: int, mode: int) -> None:
    import os

    from fedbalance.atomic import atomic_write, write_json

    old = os.umask(umask)
    try:
        atomic_write(tmp_path / "a.txt", lambda fh: fh.write("x"))
        write_json({"a": 1}, tmp_path / "b.json")
    finally:
        os.umask(old)
    assert (tmp_path / "a.txt").stat().st_mode & 0o777 == mode
    assert (tmp_path / "b.json").stat().st_mode & 0o777 == mode


# --- item 9: a partition made for another setting or seed is refused ----------------------------------


def test_partition_of_another_setting_or_seed_is_refused(tmp_path: Path, one_thread) -> None:
    from fedbalance.data.datasets import load_dataset
    from fedbalance.jobs.run import JobError, build_partitions, run_job

    ds = load_dataset("mnist5k")
    spec = tiny_spec()
    for other, words in [
        (tiny_spec(seed=1), "made with seed = 1 but the job has seed = 0"),
        (tiny_spec(gamma=1), "made with gamma = 1 but the job has partition.gamma = 10"),
    ]:
        with pytest.raises(JobError, match=words):
            run_job(spec, tmp_path / "job", device="cpu", progress=False, partitions=build_partitions(other, ds))
    assert not (tmp_path / "job" / "metrics.json").exists()


# --- item 11: an --out that is a file: exit 2, one line, before any work ------------------------------


def test_out_that_is_a_file_fails_before_training(tmp_path: Path, capsys, monkeypatch) -> None:
    import fedbalance.jobs.run
    from fedbalance.cli import main
    from fedbalance.jobs.run import JobError, run_job

    def no_training(*args, **kwargs):
        raise AssertionError("training started")

    monkeypatch.setattr(fedbalance.jobs.run, "run_job", no_training)
    out = tmp_path / "out"
    out.write_text("not a folder")
    argv = ["train", "--config", str(QUICK), "--experiment", "losses", "--dataset", "mnist", "--setting", "g10",
            "--loss", "ce", "--seed", "0", "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err == f"fedbalance train: error: --out {out} is a file; it must be a folder (new or a job's earlier output)\n"
    monkeypatch.undo()
    with pytest.raises(JobError, match="is a file, not a folder"):
        run_job(tiny_spec(), out, device="cpu", progress=False)
    assert out.read_text() == "not a folder"


# --- item 8: a data file changed after prepare_data fails loudly, naming the file ----------------------


def test_changed_data_file_fails_against_the_manifest(tmp_path: Path) -> None:
    import json

    from fedbalance.data.datasets import DataError, check_manifest, data_manifest

    csv = tmp_path / "data" / "fer2013" / "fer2013.csv"
    csv.parent.mkdir(parents=True)
    csv.write_text("emotion,pixels,Usage\n0,1 2,Training\n")
    manifest = tmp_path / "fer.json"
    record = data_manifest("fer", "fer2013", {}, tmp_path / "data", [csv])
    assert record["files"] == [{"path": str(csv), "size": csv.stat().st_size,
                                "md5": __import__("hashlib").md5(csv.read_bytes()).hexdigest()}]
    manifest.write_text(json.dumps(record))
    check_manifest(manifest)  # unchanged: passes
    csv.write_text("emotion,pixels,Usage\n3,1 2,Training\n")  # same size, other label
    with pytest.raises(DataError, match=rf"data file {csv} changed since {manifest} recorded it.*--forcerun prepare_data"):
        check_manifest(manifest)
    csv.unlink()
    with pytest.raises(DataError, match=rf"data file {csv} is missing"):
        check_manifest(manifest)
    train_script = (ROOT / "workflow" / "scripts" / "train.py").read_text()
    assert "check_manifest(smk.input.manifest)" in train_script  # every train job checks before it loads data


# --- item 10: the aggregate rule's params are plain data ---------------------------------------------


@pytest.mark.skipif(shutil.which("snakemake") is None, reason="snakemake is not installed")
def test_aggregate_runs_this_checkout_even_with_another_fedbalance_first(tmp_path: Path) -> None:
    """Only rule aggregate runs (every upstream file staged), with a broken fedbalance first on PYTHONPATH."""
    import json
    import os

    import pandas as pd

    from fedbalance.jobs.config import jobs

    cfg = load_config(QUICK)
    run = tmp_path / "run"
    results = run / "results"

    def touch(path: Path, text: str, age: int) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        os.utime(path, (1_700_000_000 + age,) * 2)

    for d in cfg["datasets"]:
        touch(results / "data" / f"{d}.json", "{}", 0)
        touch(results / "data" / f"{d}.labels.npz", "", 0)
    all_jobs = jobs(cfg)
    for j in all_jobs:
        touch(results / "partitions" / j.experiment / j.dataset / j.setting / f"seed{j.seed}.json", "{}", 10)
        folder = write_job(results, j)  # a whole finished job (jobfolder.check), its final acc 0.9
        for name in ("metrics.json", "rounds.csv"):
            os.utime(folder / name, (1_700_000_000 + 20,) * 2)
    poison = tmp_path / "other" / "fedbalance"
    poison.mkdir(parents=True)
    (poison / "__init__.py").write_text("raise ImportError('another installed copy of fedbalance')\n")
    r = subprocess.run(
        ["snakemake", "results/aggregate/final.csv", "-s", str(SNAKEFILE), "--directory", str(run),
         "--configfile", str(QUICK), "--cores", "1", "--workflow-profile", "none", "--allowed-rules", "aggregate"],
        capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(poison.parent)},
    )
    log = results / "logs" / "aggregate.log"
    assert r.returncode == 0, r.stdout + r.stderr + (log.read_text() if log.is_file() else "")
    final = pd.read_csv(results / "aggregate" / "final.csv")
    assert len(final) == len(all_jobs) and set(final["acc"]) == {0.9}


# --- item 13: prepare parses the files; infeasible partitions and MNIST errors name the key or file ------


def _config_with(tmp_path: Path, quick: dict, name: str, dataset: dict) -> str:
    cfg = copy.deepcopy(quick)
    cfg["datasets"][name] = dataset
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def test_prepare_refuses_a_malformed_fer2013(tmp_path: Path, quick: dict, capsys) -> None:
    from fedbalance.cli import main

    cfg = _config_with(tmp_path, quick, "fer", {"source": "fer2013", "model": "resnet18", "options": {"verify": False}})
    csv = tmp_path / "data" / "fer2013" / "fer2013.csv"
    csv.parent.mkdir(parents=True)
    good = " ".join(["0"] * 2304)
    csv.write_text(f"emotion,pixels,Usage\n0,{good},Training\n9,{good},PublicTest\n")
    assert main(["prepare", "--config", cfg, "--dataset", "fer", "--data-dir", str(tmp_path / "data")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"fedbalance prepare: error: fer2013: {csv} line 3: emotion must be an integer 0..6")
    csv.write_text(f"emotion,pixels,Usage\n0,{good},Training\n6,{good},PublicTest\n")
    assert main(["prepare", "--config", cfg, "--dataset", "fer", "--data-dir", str(tmp_path / "data")]) == 0
    assert "1 file(s) ready, 1 training and 1 test samples" in capsys.readouterr().out


def test_prepare_refuses_a_malformed_leaf_shard(tmp_path: Path, quick: dict, capsys) -> None:
    from fedbalance.cli import main

    cfg = _config_with(tmp_path, quick, "fem", {"source": "femnist", "model": "resnet50", "options": {"cache": False}})
    leaf = tmp_path / "data" / "femnist" / "leaf"
    for split in ("train", "test"):
        (leaf / split).mkdir(parents=True)
    (leaf / "train" / "a.json").write_text('{"users": ["u"], "user_data": {"u": {"x": [[0.5]], "y": [3]}}}')
    (leaf / "test" / "b.json").write_text("{not json")
    assert main(["prepare", "--config", cfg, "--dataset", "fem", "--data-dir", str(tmp_path / "data")]) == 2
    err = capsys.readouterr().err
    assert f"{leaf / 'train' / 'a.json'}, user u: x must be n lists of 784 values" in err


@pytest.mark.parametrize(
    "scheme, params, knob",
    [
        ("monitor", {"num_clients": 100, "samples_per_class": 2000}, "samples_per_class"),
        ("imbalance", {"num_clients": 20, "min_classes": 3, "max_classes": 6, "majority_samples": 20000,
                       "gamma": 1}, "majority_samples"),
        ("mismatch", {"num_clients": 20, "classes_per_client": 5, "majority_samples": 20000, "gamma": 1},
         "majority_samples"),
    ],
)
def test_infeasible_partition_names_the_key(scheme: str, params: dict, knob: str) -> None:
    import numpy as np

    from fedbalance.data.partition import PartitionError, make_partition

    labels = np.repeat(np.arange(10), 400)
    with pytest.raises(PartitionError, match=rf"^partition\.{knob} and partition\.num_clients ask more samples than "
                                             rf"the dataset has: class 0 needs \d+ samples, has 400.*; lower "
                                             rf"partition\.{knob} or partition\.num_clients$") as caught:
        make_partition(scheme, labels, num_classes=10, seed=0, **params)
    short = [p for p in range(10) if f"class {p} needs" in str(caught.value)]
    assert short == sorted(short) and len(short) <= 3
    assert len(short) == 3 or "more classes" not in str(caught.value)


def _idx(path: Path, array) -> None:
    import struct

    import numpy as np

    path.parent.mkdir(parents=True, exist_ok=True)
    header = struct.pack(">I", 0x0800 | array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    path.write_bytes(header + np.asarray(array, dtype=np.uint8).tobytes())


def test_unverified_mnist_errors_name_the_file(tmp_path: Path) -> None:
    import numpy as np

    from fedbalance.data.datasets import DataError, load_dataset

    raw = tmp_path / "MNIST" / "raw"
    _idx(raw / "train-images-idx3-ubyte", np.zeros((6, 28, 28)))
    _idx(raw / "train-labels-idx1-ubyte", np.arange(5))  # one label short
    _idx(raw / "t10k-images-idx3-ubyte", np.zeros((3, 28, 28)))
    _idx(raw / "t10k-labels-idx1-ubyte", np.arange(3))
    with pytest.raises(DataError) as err:
        load_dataset("mnist", tmp_path, verify=False)
    assert str(err.value) == (f"mnist: {raw / 'train-images-idx3-ubyte'} has 6 images but "
                              f"{raw / 'train-labels-idx1-ubyte'} has 5 labels; replace them")
    _idx(raw / "train-labels-idx1-ubyte", np.arange(6))
    (raw / "t10k-images-idx3-ubyte").write_bytes(b"\x00\x00\x08\x03\x00")  # truncated header
    with pytest.raises(DataError, match=rf"^mnist: {raw / 't10k-images-idx3-ubyte'} is not an IDX file of images"):
        load_dataset("mnist", tmp_path, verify=False)
    _idx(raw / "t10k-images-idx3-ubyte", np.zeros((3, 28, 28)))
    _idx(raw / "t10k-labels-idx1-ubyte", np.array([1, 2, 12]))
    with pytest.raises(DataError, match=rf"^mnist: {raw / 't10k-labels-idx1-ubyte'} has labels outside 0..9"):
        load_dataset("mnist", tmp_path, verify=False)
    _idx(raw / "t10k-labels-idx1-ubyte", np.array([1, 2, 9]))
    ds = load_dataset("mnist", tmp_path, verify=False)
    assert ds.y_train.tolist() == list(range(6)) and ds.y_test.tolist() == [1, 2, 9]


def test_the_final_metrics_are_the_last_rounds_evaluation_not_a_second_one(tmp_path: Path, monkeypatch) -> None:
    """The test set is evaluated once for the last round; the final metrics read that evaluation (the same model), and
    a job resumed after its last round evaluates the model again, to the same numbers."""
    import json

    from fedbalance.engine import fl
    from fedbalance.jobs import run
    from fedbalance.jobs.run import run_job

    calls = []
    real = fl.evaluate

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(fl, "evaluate", counted)
    monkeypatch.setattr(run, "evaluate", counted)
    import pandas as pd
    import torch

    spec = {**tiny_spec(), "eval_every": 1}
    out = tmp_path / "job"
    run_job(spec, out, device="cpu", progress=False)
    assert len(calls) == spec["rounds"] == 3  # one evaluation a round, none more (before: a fourth for the final)
    metrics = json.loads((out / "metrics.json").read_text())
    last = pd.read_csv(out / "rounds.csv").iloc[-1]
    assert metrics["final"]["acc"] == last["acc"] and metrics["final"]["auc_hard"] == last["auc_hard"]
    state = fl.RoundState.fresh(torch.nn.Linear(1, 1), torch.nn.Linear(1, 1), 2)
    assert state.last_eval is None and "last_eval" not in state.to_dict()


# --- eval_samples: a smoke run evaluates on a seeded, stratified part of the test split -----------------------------


def test_the_evaluation_subset_keeps_each_class_in_proportion_and_is_fixed_by_the_seed() -> None:
    """``evaluation_subset``: round(n × share) samples of each class (by hand), at least one of a class the split
    holds, the same draw for a seed, another for another seed; None (the whole split) when unset or not below it."""
    import numpy as np

    from fedbalance.jobs.run import evaluation_subset

    labels = np.array([0] * 50 + [1] * 30 + [2] * 20)
    labels = labels[np.random.default_rng(3).permutation(100)]
    idx = evaluation_subset(labels, 10, seed=0)
    assert np.bincount(labels[idx], minlength=3).tolist() == [5, 3, 2]  # 10 × .5, .3, .2
    assert idx.tolist() == sorted(set(idx.tolist()))  # sorted, no sample twice
    assert (evaluation_subset(labels, 10, seed=0) == idx).all()
    assert any((evaluation_subset(labels, 10, seed=s) != idx).any() for s in (1, 2))
    assert evaluation_subset(labels, None, seed=0) is None and evaluation_subset(labels, 100, seed=0) is None
    rare = np.array([0] * 99 + [1])
    assert np.bincount(rare[evaluation_subset(rare, 10, seed=0)]).tolist() == [10, 1]  # round(9.9), max(1, round(.1))


def test_a_job_with_eval_samples_evaluates_that_subset_and_draws_its_auxiliary_data_as_without(tmp_path: Path,
                                                                                              monkeypatch) -> None:
    """``eval_samples: 40``: every evaluation reads the test samples ``evaluation_subset`` picks (labels compared
    sample by sample), the monitor's auxiliary data are those of the job without it, and 0 is refused by the schema
    naming the key."""
    import numpy as np
    import torch

    from fedbalance.data.datasets import load_dataset
    from fedbalance.engine import fl
    from fedbalance.jobs import run
    from fedbalance.jobs.run import evaluation_subset, run_job

    seen, aux = [], []
    real_eval, real_aux = fl.evaluate, run.auxiliary_data

    def counted(model, x, y, *args, **kwargs):
        seen.append(y.cpu().clone())
        return real_eval(model, x, y, *args, **kwargs)

    def recorded(*args, **kwargs):
        out = real_aux(*args, **kwargs)
        aux.append(out[1].clone())
        return out

    monkeypatch.setattr(fl, "evaluate", counted)
    monkeypatch.setattr(run, "evaluate", counted)
    monkeypatch.setattr(run, "auxiliary_data", recorded)
    spec = {**tiny_spec(), "eval_every": 1, "rounds": 2}
    run_job(spec, tmp_path / "whole", device="cpu", progress=False)
    run_job({**spec, "eval_samples": 40}, tmp_path / "part", device="cpu", progress=False)
    ds = load_dataset(spec["source"], spec.get("data_dir", "data"), **spec.get("options", {}))
    want = ds.y_test[torch.as_tensor(evaluation_subset(ds.y_test.numpy(), 40, spec["seed"]))]
    assert [len(y) for y in seen] == [len(ds.y_test)] * 2 + [len(want)] * 2 and 40 <= len(want) <= 50
    assert all(torch.equal(y, want) for y in seen[2:])
    assert len(aux) == 2 and torch.equal(aux[0], aux[1])
    bad = copy.deepcopy(load_config(QUICK))
    bad["defaults"]["eval_samples"] = 0
    with pytest.raises(ConfigError, match="eval_samples"):
        validate(bad)
    assert np.unique(want.numpy()).size == len(np.unique(ds.y_test.numpy()))
