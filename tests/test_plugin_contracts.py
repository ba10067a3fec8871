"""Plug-ins, round 2 (docs/extending.md): each plug-in point's contract, with a plug-in of the kind that broke.

At load (``fedbalance.jobs.contracts``, before any file is written: one line naming the key, the plug-in and its origin):
an estimator entry point that raises on import, lacks its attribute or takes two arguments; a NaN, vector or detached
loss; a client-counts loss without ``num_classes``; a loss that is not vmap-safe; a wrong-length, NaN or negative
estimate; a dataset whose declared images the model cannot take. While a job runs: a loss that goes NaN, a loss that
turns a vector, an estimate that goes NaN or wrong-length stop the job (failed.json, no metrics.json, exit 2). A bumped
estimator version enters no training key nor partition spec; a plug-in dataset gets its columns; ``compare`` lists a
plug-in's cells and only the keys that act on a cell; metrics.json, the landing page and ``fedbalance plugins`` name
each plug-in's package, version and origin.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml

from conftest import write_job
from fedbalance.common import plugins
from fedbalance.jobs.config import ConfigError, configured_job, estimator_versions, jobs, load_config, resolve_job
from fedbalance.common.jobspec import partition_dict, trained_estimators, training_key
from fedbalance.common.records import Job

ROOT = Path(__file__).resolve().parents[1]
QUICK = ROOT / "config" / "quick.yaml"
EXTENDING = ROOT / "docs" / "extending.md"

BROKEN = '''
import torch
from fedbalance.data.datasets import Dataset, Source
from fedbalance.monitor.estimators import Estimator
from fedbalance.methods.losses import CountsLoss, Loss, cross_entropy

SMALL = 6  # the load check's batch: these losses break only on larger (a run's) batches


class NaNLoss(Loss):
    def forward(self, logits, target, mask=None):
        return cross_entropy(logits, target, self.reduction, mask) * float("nan")


class VectorLoss(Loss):
    def forward(self, logits, target, mask=None):
        return cross_entropy(logits, target, "none", mask)


class Detached(Loss):
    def forward(self, logits, target, mask=None):
        return cross_entropy(logits, target, self.reduction, mask).detach()


class NoClasses(CountsLoss):
    receives = frozenset({"client_counts"})

    def __init__(self, beta: float = 0.5):
        super().__init__()
        self.beta = beta

    def forward_counts(self, logits, target, counts, mask=None):
        return cross_entropy(logits, target, self.reduction, mask)


class ItemLoss(Loss):
    def forward(self, logits, target, mask=None):
        return cross_entropy(logits, target, self.reduction, mask) * float(logits.abs().max().item() > -1)


class LateNaN(Loss):
    def forward(self, logits, target, mask=None):
        out = cross_entropy(logits, target, self.reduction, mask)
        return out * float("nan") if logits.shape[-2] > SMALL else out


class LateVector(Loss):
    def forward(self, logits, target, mask=None):
        return cross_entropy(logits, target, "none" if logits.shape[-2] > SMALL else self.reduction, mask)


def too_long(inputs):
    return [1.0] * (inputs.monitor.num_classes + 1)


def nan_estimate(inputs):
    return [float("nan")] * inputs.monitor.num_classes


def negative(inputs):
    return [-1.0] + [1.0] * (inputs.monitor.num_classes - 1)


def raises(inputs):
    return inputs.no_such_field


def two_arguments(inputs, other):
    return [1.0]


def late_nan(track):
    q = track.num_classes
    return [float("nan")] * q if len(track.estimates) > 3 else [1.0] * q


late = Estimator("late", late_nan, history=True, requires=("released",))


def late_long(inputs):
    q = inputs.monitor.num_classes
    return [1.0] * (q + 1 if len(inputs.totals) > 2 else q)


def prepare(data_dir, download, size=400):
    return []


def load(data_dir, files, size=400):
    g = torch.Generator().manual_seed(0)
    y = torch.arange(size) % 10
    x = (torch.rand(size, 1, 28, 28, generator=g) * 64 + y.view(-1, 1, 1, 1) * 19).to(torch.uint8)
    return Dataset("synthetic", x[: size // 2], y[: size // 2], x[size // 2:], y[size // 2:], 10)


def load_wrong(data_dir, files, size=400):
    ds = load(data_dir, files, size)
    return Dataset("synthetic", ds.x_train, ds.y_train % 5, ds.x_test, ds.y_test % 5, 5)


synthetic = Source(10, 1, (28, 28), prepare, load, {"size": 400})
tiny_images = Source(10, 1, (6, 6), prepare, load, {"size": 400})
wrong = Source(10, 1, (28, 28), prepare, load_wrong, {"size": 400})
'''


@pytest.fixture
def broken(tmp_path, monkeypatch):
    """The module ``brokenplug`` (BROKEN) on the path, reachable by dotted path."""
    (tmp_path / "brokenplug.py").write_text(BROKEN)
    monkeypatch.syspath_prepend(str(tmp_path))
    plugins.forget()
    yield tmp_path / "brokenplug.py"
    plugins.forget()
    sys.modules.pop("brokenplug", None)


def small(cfg: dict, rounds: int = 2) -> dict:
    """``cfg`` cut to a few rounds of 4 small clients, one seed."""
    cfg["seeds"] = [0]
    cfg["defaults"]["rounds"] = rounds
    cfg["defaults"]["eval_every"] = 1
    cfg["defaults"]["batch_size"] = 16
    cfg["defaults"]["clients_per_round"] = 3
    cfg["defaults"]["partition"].update(num_clients=4, majority_samples=12)
    cfg["defaults"]["monitor"]["aux_per_class"] = 8
    return cfg


def with_loss(target: str, path: str = "sequential", rounds: int = 2) -> dict:
    cfg = small(yaml.safe_load(QUICK.read_text()), rounds)
    cfg["defaults"]["path"] = path
    cfg["loss_variants"] = {"mine": {"loss": target}}
    cfg["experiments"] = {"losses": {"datasets": ["mnist"], "losses": ["ce", "mine"],
                                     "grid": {"g": {"key": "partition.gamma", "values": [10]}}}}
    return cfg


def with_estimator(target: str, rounds: int = 2, losses: tuple[str, ...] = ("ce", "ratio")) -> dict:
    cfg = small(yaml.safe_load(QUICK.read_text()), rounds)
    cfg["estimators"] = {"mine": target}
    cfg["defaults"]["monitor"]["estimators"] = ["pooled", "released", "mine"]
    cfg["experiments"] = {"losses": {"datasets": ["mnist"], "losses": list(losses),
                                     "grid": {"g": {"key": "partition.gamma", "values": [10]}}}}
    return cfg


def refused(cfg: dict) -> str:
    with pytest.raises(ConfigError) as err:
        load_config(cfg)
    text = str(err.value)
    assert "\n" not in text, text
    return text


# ---------------------------------------------------------------- 1. at load: one line naming key, plug-in, origin

def fake_distribution(root: Path, entry: str, module: str, source: str) -> None:
    """An installed distribution ``boom 1.0`` declaring estimator entry point ``boom = <entry>``, its module beside."""
    dist = root / "boom-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: boom\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[fedbalance.estimators]\nboom = {entry}\n")
    (root / f"{module}.py").write_text(source)


ENTRY_POINTS = [
    ("boomplug:est", 'raise ImportError("no such thing")', r"cannot import 'boomplug' \(ImportError: no such thing\)"),
    ("boomplug:missing", "est = None", r"module 'boomplug' has no attribute 'missing'"),
    ("boomplug:est", "def est(inputs, other):\n    return [1.0]", r"one argument, not 2"),
]


@pytest.mark.parametrize("entry, source, message", ENTRY_POINTS, ids=["import", "attribute", "arity"])
def test_an_estimator_entry_point_that_breaks_is_refused_at_load(tmp_path, monkeypatch, entry, source, message):
    """Issue 64, 1: an entry point named in monitor.estimators is loaded and called when the config loads."""
    fake_distribution(tmp_path, entry, "boomplug", source)
    monkeypatch.syspath_prepend(str(tmp_path))
    plugins.forget()
    try:
        cfg = with_estimator("x:y")
        cfg.pop("estimators")
        cfg["defaults"]["monitor"]["estimators"] = ["pooled", "boom"]
        text = refused(cfg)
    finally:
        plugins.forget()
        sys.modules.pop("boomplug", None)
    assert re.match(r"^experiments\.losses\[mnist, g10, ce\]\.monitor\.estimators: estimator 'boom'", text), text
    assert "entry point 'boom' (fedbalance.estimators) of boom 1.0" in text and re.search(message, text), text


def test_a_broken_estimator_entry_point_stops_snakemake_before_anything_is_written(tmp_path):
    site = tmp_path / "site"
    fake_distribution(site, "boomplug:est", "boomplug", 'raise ImportError("no such thing")')
    cfg = with_estimator("x:y")
    cfg.pop("estimators")
    cfg["defaults"]["monitor"]["estimators"] = ["pooled", "boom"]
    study = tmp_path / "study"
    study.mkdir()
    (study / "c.yaml").write_text(yaml.safe_dump(cfg))
    r = subprocess.run([sys.executable, "-m", "snakemake", "-s", str(ROOT / "workflow" / "Snakefile"), "--directory",
                        str(study), "--cores", "1", "--configfile", str(study / "c.yaml")], capture_output=True,
                       text=True, timeout=600, env={**__import__("os").environ, "PYTHONPATH": str(site)})
    out = r.stdout + r.stderr
    assert r.returncode != 0
    lines = [line for line in out.splitlines() if "monitor.estimators: estimator 'boom'" in line]
    assert len(lines) == 1 and "invalid configuration:" in lines[0] and "ImportError: no such thing" in lines[0], out
    assert sorted(p.name for p in study.iterdir() if not p.name.startswith(".")) == ["c.yaml"]


BAD_LOSSES = [
    ("brokenplug:NaNLoss", "sequential", r"forward\(logits \[6, 10\], target \[6\]\) returned nan, not a finite number"),
    ("brokenplug:VectorLoss", "sequential", r"returned shape \(6,\), not a scalar"),
    ("brokenplug:Detached", "sequential", r"returned a value without a gradient"),
    ("brokenplug:NoClasses", "sequential", r"receives client_counts, but after get_loss its num_classes is None, not 10"),
    ("brokenplug:ItemLoss", "auto", r"fails under torch\.func\.vmap"),
]


@pytest.mark.parametrize("target, path, message", BAD_LOSSES, ids=["nan", "vector", "detached", "no-classes", "item"])
def test_a_loss_that_breaks_its_contract_is_refused_at_load(broken, target, path, message):
    """Issue 64, 3-5: the loss is built and called on 6 samples of the job's 10 classes before any job."""
    text = refused(with_loss(target, path))
    assert text.startswith(f"experiments.losses[mnist, g10, mine]: loss 'mine' (dotted path {target} (no installed "
                           "package, sha256:"), text
    assert re.search(message, text), text


def test_a_loss_not_vmap_safe_passes_on_the_sequential_path(broken):
    """The vmap trial is for jobs that may run vectorised (path auto or vectorised) only."""
    load_config(with_loss("brokenplug:ItemLoss", "sequential"))


BAD_ESTIMATES = [
    ("brokenplug:too_long", r"returned counts of shape \(11,\), not \[10\]"),
    ("brokenplug:nan_estimate", r"returned counts \[nan, .*class\(es\) \[0, 1, 2, 3, 4, 5, 6, 7, 8, 9\] not a finite"),
    ("brokenplug:negative", r"returned counts \[-1\.0, 1\.0, .*class\(es\) \[0\] not a finite non-negative number"),
    ("brokenplug:raises", r"raised AttributeError: 'RoundInputs' object has no attribute 'no_such_field'"),
    ("brokenplug:two_arguments", r"one argument, not 2"),
]


@pytest.mark.parametrize("target, message", BAD_ESTIMATES, ids=["length", "nan", "negative", "raises", "arity"])
def test_an_estimator_that_breaks_its_contract_is_refused_at_load(broken, target, message):
    """Called once on a synthetic round of the job's 10 classes: Q finite non-negative counts or a one-line error."""
    text = refused(with_estimator(target))
    assert re.match(r"^(estimators\.mine|experiments\.losses\[mnist, g10, ce\]\.monitor\.estimators): ", text), text
    assert f"dotted path {target}" in text and re.search(message, text), text


def test_a_dataset_whose_images_the_model_cannot_take_is_refused_at_load(broken):
    cfg = with_loss("ce")
    cfg.pop("loss_variants")
    cfg["experiments"]["losses"]["losses"] = ["ce"]
    cfg["datasets"] = {"synth": {"source": "brokenplug:tiny_images", "model": "lenet5", "minority_classes": [2]}}
    cfg["experiments"]["losses"]["datasets"] = ["synth"]
    text = refused(cfg)
    assert text.startswith("datasets.synth.source: dataset 'brokenplug:tiny_images' (dotted path brokenplug:tiny_images"), text
    assert "the model 'lenet5' cannot take its declared images [1, 6, 6] of 10 classes" in text, text
    cfg["datasets"]["synth"]["source"] = "brokenplug:synthetic"
    load_config(cfg)


def test_a_plugin_dataset_that_yields_other_data_than_it_declares_is_refused_when_loaded(broken, tmp_path):
    from fedbalance.data.datasets import DataError, load_dataset

    ds = load_dataset("brokenplug:synthetic", tmp_path)
    assert ds.num_classes == 10 and ds.x_train.shape == (200, 1, 28, 28)
    with pytest.raises(DataError, match=r"^dataset 'brokenplug:wrong' \(dotted path brokenplug:wrong .*\): load returned "
                                        r"5 classes of images \[1, 28, 28\], the source declares 10 of \[1, 28, 28\]$"):
        load_dataset("brokenplug:wrong", tmp_path)


def test_the_docs_examples_keep_the_contracts(tmp_path, monkeypatch):
    """The Python examples of docs/extending.md, as a module: the loss and both estimators pass the load checks, and
    their numbers are the ones described (Balanced Softmax: CE of z + log n, by hand; the estimators' totals)."""
    from fedbalance.jobs import contracts

    code = "\n".join(re.findall(r"```python\n(.*?)```", EXTENDING.read_text(), re.S))
    (tmp_path / "docsplug.py").write_text(code)
    monkeypatch.syspath_prepend(str(tmp_path))
    plugins.forget()
    try:
        import docsplug

        contracts.check_loss("docsplug:BalancedSoftmax", "t", 10, "{}", True)
        contracts.check_estimator("a", "docsplug:last_two_estimator", "t", 10)
        contracts.check_estimator("b", "docsplug:uniform", "t", 10)
        contracts.check_dataset("docsplug:source", "t", "lenet5", "{}")
        loss = docsplug.BalancedSoftmax(num_classes=3)
        loss.set_client_counts(torch.tensor([4.0, 1.0, 0.0]))
        z, y = torch.tensor([[1.0, 2.0, 0.5]]), torch.tensor([0])
        shifted = [1.0 + torch.log(torch.tensor(4.0)).item(), 2.0, 0.5]  # log max(n, 1): 4, 1, 1
        by_hand = -(shifted[0] - torch.logsumexp(torch.tensor(shifted), 0).item())
        assert float(loss(z, y)) == pytest.approx(by_hand)
        track = contracts.synthetic_track(4, ("released",))
        last = docsplug.last_two(track)
        assert sum(last) == pytest.approx(sum(track.totals[-1])) and len(last) == 4
    finally:
        plugins.forget()
        sys.modules.pop("docsplug", None)


# ---------------------------------------------------------------- 2. while a job runs: the job fails, no metrics.json

def run_small(cfg: dict, loss: str, out: Path):
    from fedbalance.jobs.run import run_job

    cfg = load_config(cfg)
    return run_job(resolve_job(cfg, Job("losses", "mnist", "g10", loss, 0)), out, device="cpu", progress=False)


def check_failed(out: Path, message: str) -> None:
    """The folder of a job a plug-in stopped: failed.json naming the reason, no metrics.json, no checkpoint."""
    assert not (out / "metrics.json").exists() and not (out / "checkpoint.pt").exists()
    failed = json.loads((out / "failed.json").read_text())
    assert failed["job"] == "losses/mnist/g10/" + out.name.split("-")[0] + "/seed0"
    assert re.search(message, failed["reason"]), failed["reason"]


RUNTIME = [
    ("loss", "brokenplug:LateNaN", r"round 0: loss 'mine' \(dotted path brokenplug:LateNaN .*\): the round's training "
                                   r"loss is nan"),
    ("loss", "brokenplug:LateVector", r"round 0: loss 'mine' \(dotted path brokenplug:LateVector .*\): training with it "
                                      r"raised RuntimeError: grad can be implicitly created only for scalar outputs"),
    ("estimator", "brokenplug:late", r"round 3: estimator 'mine' \(dotted path brokenplug:late .*\): returned counts "
                                     r"\[nan, .* not a finite non-negative number"),
    ("estimator", "brokenplug:late_long", r"round 0: estimator 'mine' \(dotted path brokenplug:late_long .*\): returned "
                                          r"counts of shape \(11,\), not \[10\]"),
]


@pytest.mark.parametrize("what, target, message", RUNTIME, ids=["nan-loss", "vector-loss", "nan-estimate", "long-estimate"])
def test_a_plugin_that_breaks_during_training_fails_the_job(broken, tmp_path, what, target, message):
    """Issue 64, 3-4: the load check passes (6 samples, 2 clients), the run's batches and rounds do not: the job stops
    with one line naming the job, the round and the plug-in, its folder marked failed, never finished."""
    from fedbalance.jobs.run import JobError

    loss = "mine" if what == "loss" else "ratio"
    cfg = with_loss(target, rounds=2) if what == "loss" else with_estimator(target, rounds=5)
    out = tmp_path / f"{loss}-run"
    with pytest.raises(JobError) as err:
        run_small(cfg, loss, out)
    text = str(err.value)
    assert "\n" not in text and text.startswith(f"losses/mnist/g10/{loss}/seed0: round "), text
    assert re.search(message, text), text
    check_failed(out, message)


def test_the_cli_exits_non_zero_on_a_failing_plugin_and_a_rerun_clears_the_mark(broken, tmp_path, capsys):
    from fedbalance.cli import main
    from fedbalance.jobs.jobfolder import job_folders

    cfg = with_loss("brokenplug:LateNaN")
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    out = tmp_path / "results" / "losses" / "mnist" / "g10" / "mine" / "seed0"
    args = ["train", "--config", str(tmp_path / "c.yaml"), "--experiment", "losses", "--dataset", "mnist", "--setting",
            "g10", "--loss", "mine", "--seed", "0", "--out", str(out), "--device", "cpu"]
    assert main(args) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert len(err) == 1 and "round 0: loss 'mine'" in err[0] and "training loss is nan" in err[0], err
    assert (out / "failed.json").is_file() and job_folders(tmp_path / "results") == []  # no table reads it
    # the plug-in fixed (a finite loss under the same name): the rerun finishes and the mark goes
    broken.write_text(broken.read_text().replace('out * float("nan") if', 'out if'))
    plugins.forget()
    sys.modules.pop("brokenplug", None)
    assert main(args) == 0
    assert (out / "metrics.json").is_file() and not (out / "failed.json").exists()


# ---------------------------------------------------------------- 3. an estimator's version: no training key, no partition

def test_a_bumped_estimator_version_changes_no_training_and_no_partition_spec(broken):
    """Issue 64, 2: what the train and partition rules are given (their params: the job's configured dict, the
    partition's) is the same before and after an estimator plug-in's new version, for every job that does not train
    on its estimate; a derived job's estimator versions (rule derive's params) and a prior-fed loss whose lead
    estimator it is (its training) change."""
    cfg = with_estimator("brokenplug:uniform_counts", losses=("ce", "ratio", "la"))
    broken.write_text(broken.read_text() + "\n\ndef uniform_counts(inputs):\n"
                      "    return [sum(inputs.totals) / inputs.monitor.num_classes] * inputs.monitor.num_classes\n")
    lead = {**cfg, "experiments": {**cfg["experiments"], "lead": {
        **cfg["experiments"]["losses"], "losses": ["la"], "params": {"monitor": {"estimators": ["mine", "released"]}}}}}

    def snapshot():
        plugins.forget()
        c = load_config(lead)
        specs = {j: resolve_job(c, j) for j in jobs(c)}
        return ({j: s.as_dict() for j, s in specs.items()}, {j: partition_dict(s) for j, s in specs.items()},
                {j: training_key(s) for j, s in specs.items()}, {j: estimator_versions(c, j) for j in specs})

    before = snapshot()
    broken.write_text(broken.read_text() + "\n# a new version of the estimator\n")
    after = snapshot()
    changed = {j for j in before[0] if before[0][j] != after[0][j]}
    assert changed == {Job("lead", "mnist", "g10", "la", 0)}  # the one job that trains on its estimate
    assert {j for j in before[2] if before[2][j] != after[2][j]} == changed
    assert before[1] == after[1]  # no partition
    assert all(before[3][j]["mine"] != after[3][j]["mine"] for j in before[3])  # every job's monitor: a new version
    spec = resolve_job(load_config(lead), Job("losses", "mnist", "g10", "la", 0))
    assert trained_estimators(spec) == ("pooled",) and "version" not in spec.plugins["estimators"]["mine"]


@pytest.mark.slow
def test_a_bumped_estimator_version_plans_no_training_with_snakemake(tmp_path):
    """Issue 64, 2, end to end: a study with a dotted-path estimator in monitor.estimators (CE and Ratio jobs, a CE
    monitor job and a job derived from its trajectory) run to its tidy CSVs; the estimator's module edited (a new
    version); ``snakemake -n`` plans no train and no partition job, and re-derives the derived job."""
    (tmp_path / "myest.py").write_text("def flat(inputs):\n    q = inputs.monitor.num_classes\n"
                                       "    return [sum(inputs.totals) / q] * q\n")
    cfg = with_estimator("myest:flat")
    cfg["experiments"]["monitor"] = {"datasets": ["mnist"], "losses": ["ce"], "settings": {"default": {}}, "params": {
        "rounds": 2, "selection": "random", "partition": {"scheme": "monitor", "num_clients": 8, "samples_per_class": 4},
        "monitor": {"record": True}, "save_trajectory": True}}
    cfg["experiments"]["t_ra"] = {**cfg["experiments"]["monitor"], "settings": {"t2": {"monitor": {"t_ra": 2.0}}}}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    env = {**__import__("os").environ, "PYTHONPATH": str(tmp_path)}
    base = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "workflow" / "Snakefile"), "--directory", str(tmp_path),
            "--cores", "2", "results/aggregate/final.csv", "--configfile", str(tmp_path / "c.yaml")]  # the target first:
    # --configfile takes every word after it
    r = subprocess.run(base, capture_output=True, text=True, timeout=1800, env=env)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    derived = json.loads((tmp_path / "results/t_ra/mnist/t2/ce/seed0/metrics.json").read_text())
    assert derived["derived_from"] == "monitor/mnist/default/ce/seed0"
    assert derived["plugins"]["estimators"]["mine"]["version"].startswith("sha256:")
    (tmp_path / "myest.py").write_text((tmp_path / "myest.py").read_text() + "# version 2\n")
    r = subprocess.run([*base, "-n"], capture_output=True, text=True, timeout=600, env=env)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    planned = dict(re.findall(r"^(\w+)\s+(\d+)$", out.split("Job stats:")[1].split("total")[0], re.M))
    assert "train" not in planned and "partition" not in planned and planned.get("derive") == "1", out[-3000:]


# ---------------------------------------------------------------- 4. a plug-in dataset in the tables

def _final(rows: list[dict]) -> pd.DataFrame:
    from fedbalance.jobs.aggregate import FINAL_COLUMNS

    return pd.DataFrame([{**dict.fromkeys(FINAL_COLUMNS), "plugin": "", **r} for r in rows], columns=FINAL_COLUMNS)


def test_a_plugin_dataset_gets_its_columns_in_the_tables_that_list_datasets(tmp_path):
    """Issue 64, 6: jobs of a dataset named ``synth`` (not one of the paper's) fill a block of columns of their own, under
    that name, in Res_3_datasets, Importance_early and Monitor_under_imbalance (their means over seeds, by hand); the
    one-dataset FL_FEMNIST does not take it; the study counts these tables as run."""
    from fedbalance.presentation.study import tables_run
    from fedbalance.presentation.tables import TABLES, cell_values, write_table

    rows = [{"experiment": "losses", "dataset": "synth", "setting": "g10", "loss": loss, "seed": seed,
             "acc_minority": 0.1 * i + 0.02 * seed, "auc_hard": 0.6, "acc_majority": 0.9}
            for i, loss in enumerate(("ce", "focal", "ghmc", "ratio")) for seed in (0, 1)]
    rows += [{"experiment": "early", "dataset": "synth", "setting": st, "loss": "ce", "seed": 0,
              "acc_minority": a, "auc_hard": 0.7, "acc_majority": 0.9} for st, a in (("S", 0.3), ("E", 0.1))]
    final = _final(rows)
    values = cell_values(TABLES["Res_3_datasets"], final, pd.DataFrame())
    ratio = values[(values.dataset == "synth") & (values.row == "ratio") & (values.metric == "acm") & (values.column == "10:1")]
    assert len(ratio) == 1 and ratio.iloc[0]["mean"] == pytest.approx(100 * (0.30 + 0.32) / 2) and ratio.iloc[0]["n"] == 2
    assert set(values.dataset) == {"mnist", "cifar10", "fer2013", "synth"}
    assert "synth" not in set(cell_values(TABLES["FL_FEMNIST"], final, pd.DataFrame()).dataset)
    write_table("Res_3_datasets", final, pd.DataFrame(), tmp_path)
    tex = (tmp_path / "Res_3_datasets.tex").read_text()
    assert r"\textbf{\texttt{synth}}" in tex and r"\textbf{31.00}" in tex  # the ratio row, the column's best
    early = cell_values(TABLES["Importance_early"], final, pd.DataFrame())
    s = early[(early.dataset == "synth") & (early.metric == "acm")].set_index("row")
    assert s.loc["S", "column"] == "synth" and s.loc["S", "mean"] == pytest.approx(30.0) and s.loc["E", "mean"] == pytest.approx(10.0)
    write_table("Importance_early", final, pd.DataFrame(), tmp_path)
    assert r"\textbf{\texttt{synth}}" in (tmp_path / "Importance_early.tex").read_text()
    rounds = pd.DataFrame([{"experiment": "losses", "dataset": "synth", "setting": "g10", "loss": "ratio", "seed": 0,
                            "round": r, "cs_pooled": 0.8 + 0.1 * r} for r in range(2)])
    imb = cell_values(TABLES["Monitor_under_imbalance"], final, rounds)
    cell = imb[(imb.dataset == "synth") & (imb.row == "pooled") & (imb.column == "10:1")]
    assert cell.iloc[0]["mean"] == pytest.approx(0.85)
    write_table("Monitor_under_imbalance", final, rounds, tmp_path)
    assert r"\textbf{\texttt{synth}}" in (tmp_path / "Monitor_under_imbalance.tex").read_text()
    study = [Job(r["experiment"], "synth", r["setting"], r["loss"], r["seed"]) for r in rows]
    run, not_run = tables_run(study)
    assert {"Res_3_datasets", "Sup_majority", "Importance_early", "Monitor_under_imbalance"} <= set(run)
    assert "FL_FEMNIST" in not_run


# ---------------------------------------------------------------- 5. compare: a plug-in's cells, the keys that act

def _plugin_config(estimators: list[str], versions: dict[str, str], **more) -> dict:
    return {"monitor": {"estimators": estimators}, "plugins": {"estimators": {
        n: {"target": f"mypkg:{n}", "how": "dotted path", "package": "mypkg", "version": v} for n, v in versions.items()}},
        **more}


def test_compare_lists_a_plugin_cell_without_reference_and_only_the_keys_that_act(tmp_path):
    """Issue 64, 7: ours ran a plug-in loss ``cb`` the reference lacks (one line each: "no reference cell") and a
    plug-in estimator in every job (another version than the reference's, and one the reference lacks); the CE, Focal,
    GHM-C and Ratio cells list no protocol difference, a prior-fed cell (la) whose lead estimator differs does."""
    from fedbalance.evidence.reference import NO_REFERENCE, compare, compare_markdown, protocol_differences

    ours, ref = tmp_path / "ours", tmp_path / "ref"
    for seed in (0, 1, 2):
        for loss in ("ce", "focal", "ghmc", "ratio"):
            write_job(ours, Job("losses", "mnist", "g10", loss, seed),
                      config=_plugin_config(["pooled", "ema", "mine"], {"ema": "0.2", "mine": "1"}))
            write_job(ref, Job("losses", "mnist", "g10", loss, seed),
                      config=_plugin_config(["pooled", "ema"], {"ema": "0.1"}))
        write_job(ours, Job("losses", "mnist", "g10", "la", seed), config=_plugin_config(["ema"], {"ema": "0.2"}))
        write_job(ref, Job("losses", "mnist", "g10", "la", seed), config=_plugin_config(["ema"], {"ema": "0.1"}))
        write_job(ours, Job("losses", "mnist", "g10", "cb", seed), acm=0.4 + 0.01 * seed, config={
            "plugins": {"loss": {"target": "fedbalance_cb.losses:ClassBalancedLoss", "how": "entry point",
                                 "package": "fedbalance-cb", "version": "0.1.0", "receives": ["prior"]}}})
    differences = protocol_differences(ours, ref)
    assert set(differences) == {("losses", "mnist", "g10", "la")}
    assert differences[("losses", "mnist", "g10", "la")] == {"plugins.estimators.ema.version": ("0.2", "0.1")}
    frame = compare(ours, ref, ["acc_minority"])
    cb = frame[frame.loss == "cb"].iloc[0]
    assert cb.verdict == NO_REFERENCE and cb.plugin == "loss cb (fedbalance-cb 0.1.0)"
    assert set(frame[frame.loss.isin(["ce", "focal", "ghmc", "ratio"])].verdict) == {"identical"}
    md = compare_markdown(frame)
    line = next(x for x in md.splitlines() if x.startswith("- losses/mnist/g10/cb"))
    assert line == "- losses/mnist/g10/cb (loss cb (fedbalance-cb 0.1.0)): no reference cell; ours: acc_minority 41.00 ± 1.00 (3)"
    assert "1 cell of a plug-in only ours holds, one line each:" in md


# ---------------------------------------------------------------- 6. package, version and origin: metrics, report, CLI

def test_metrics_landing_page_and_the_plugins_command_name_each_plugin(broken, tmp_path, capsys):
    """Issue 64, 8: a job with a plug-in loss and estimator records both (package, version, origin) in metrics.json;
    the landing page and ``fedbalance plugins`` list them; after the estimator's module changes, the command names the
    job whose monitor recorded the old version and the command that reruns it."""
    from fedbalance.cli import main
    from fedbalance.jobs.config import study_plugins
    from fedbalance.presentation.study import identity, study_page

    broken.write_text(broken.read_text() + "\n\ndef flat(inputs):\n    q = inputs.monitor.num_classes\n"
                      "    return [sum(inputs.totals) / q] * q\n")
    plugins.forget()
    cfg = with_estimator("brokenplug:flat", rounds=1, losses=("ratio", "mine"))
    cfg["loss_variants"] = {"mine": {"loss": "fedbalance.methods.losses:CrossEntropyLoss"}}
    cfg["results_dir"] = str(tmp_path / "results")
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    out = tmp_path / "results" / "losses" / "mnist" / "g10" / "ratio" / "seed0"
    metrics = run_small(cfg, "ratio", out)
    ran = metrics["plugins"]["estimators"]["mine"]
    digest = __import__("hashlib").sha256(broken.read_bytes()).hexdigest()[:12]
    assert ran["version"] == f"sha256:{digest}" and ran["package"] is None
    assert ran["origin"] == f"dotted path brokenplug:flat (no installed package, sha256:{digest})"
    assert json.loads((out / "metrics.json").read_text())["plugins"] == metrics["plugins"]
    loss_job = run_small(cfg, "mine", tmp_path / "results" / "losses" / "mnist" / "g10" / "mine" / "seed0")
    assert loss_job["plugins"]["loss"]["origin"].startswith("dotted path fedbalance.methods.losses:CrossEntropyLoss (fedbalance ")
    loaded = load_config(cfg)
    found = {(p["kind"], p["name"]): p for p in study_plugins(loaded)}
    # the Ratio job records the estimator, the CE-like plug-in loss runs no monitor; neither trains on it
    assert found[("estimator", "mine")]["jobs"] == 1 and found[("estimator", "mine")]["trains"] == 0
    assert found[("loss", "fedbalance.methods.losses:CrossEntropyLoss")]["trains"] == 1
    page = study_page(loaded, jobs(loaded), identity(loaded, jobs(loaded), configfiles=["c.yaml"], trained=2, copied=0,
                                                     derived=0), plugins=found.values())
    assert "<h2>Plug-ins</h2>" in page and __import__("html").escape(ran["origin"]) in page
    assert main(["plugins", "--config", str(tmp_path / "c.yaml")]) == 0
    shown = capsys.readouterr().out
    assert ran["origin"] in shown and "no finished job ran a plug-in at another version" in shown
    broken.write_text(broken.read_text() + "# version 2\n")
    plugins.forget()
    assert main(["plugins", "--config", str(tmp_path / "c.yaml")]) == 0
    shown = capsys.readouterr().out
    stale = [line for line in shown.splitlines() if line.startswith("- ")]
    assert stale == [f"- losses/mnist/g10/ratio/seed0: estimator mine sha256:{digest} (installed: "
                     f"sha256:{__import__('hashlib').sha256(broken.read_bytes()).hexdigest()[:12]}); its monitor's mine "
                     f"columns are sha256:{digest}'s: rerun it with snakemake --forcerun {out / 'metrics.json'}"], shown
