"""Plug-ins (docs/extending.md): the example package examples/fedbalance-cb found by entry point and by dotted path,
its loss and estimator checked against hand-computed values, the contract checked when the config is loaded (each
bad input one line naming the key, nothing written), a plug-in job recorded with its package and version and not
reused across versions, and plug-in rows in the tables."""

from __future__ import annotations

import copy
import hashlib
import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml

from fedbalance.common import plugins
from fedbalance.jobs.config import ConfigError, configured_job, jobs, load_config, resolve_job
from fedbalance.common.jobspec import JobSpec, covers, runs_monitor, training_key
from fedbalance.common.records import Job

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "fedbalance-cb"
QUICK = ROOT / "config" / "quick.yaml"
CB = "fedbalance_cb.losses:ClassBalancedLoss"


def install_example(target: Path) -> Path:
    """pip-install the example plug-in (no dependencies, no build isolation: offline) into ``target``, a folder to put
    on the path: an installed distribution with its entry points, as `pip install` makes it. Built from a copy, so
    that concurrent tests and the checkout get no build folders."""
    source = target.with_name(target.name + "-src")
    shutil.copytree(EXAMPLE, source, ignore=shutil.ignore_patterns("build", "*.egg-info"))
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target",
                        str(target), str(source)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return target


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    return install_example(tmp_path_factory.mktemp("site"))


@pytest.fixture
def installed(site, monkeypatch):
    """The example plug-in installed (its folder first on sys.path) for one test."""
    monkeypatch.syspath_prepend(str(site))
    plugins.forget()
    yield site
    plugins.forget()


@pytest.fixture
def on_path(tmp_path, monkeypatch):
    """A copy of the example's source on sys.path, not installed: reachable by dotted path only."""
    shutil.copytree(EXAMPLE / "src" / "fedbalance_cb", tmp_path / "fedbalance_cb")
    monkeypatch.syspath_prepend(str(tmp_path))
    plugins.forget()
    yield
    plugins.forget()


def quick(**edits) -> dict:
    cfg = yaml.safe_load(QUICK.read_text())
    for key, value in edits.items():
        cfg[key] = value
    return cfg


# ---------------------------------------------------------------- the example, against the paper by hand


def test_class_balanced_weights_are_cui_et_al_by_hand(on_path):
    """alpha_c = (1 - beta) / (1 - beta^n_c), normalised to sum to Q (Cui et al. 2019, Eq. 3-4), by hand in floats."""
    from fedbalance_cb.losses import class_balanced_weights

    counts, beta = [100.0, 10.0, 1.0], 0.9
    inverse = [(1 - beta) / (1 - beta ** n) for n in counts]
    by_hand = [3 * w / sum(inverse) for w in inverse]
    # 1/E: 0.100003, 0.153534, 1.0 -> x 3 / 1.253537
    assert by_hand == pytest.approx([0.239330, 0.367442, 2.393228], abs=1e-6)
    got = class_balanced_weights(torch.tensor(counts, dtype=torch.float64), beta)
    assert got.tolist() == pytest.approx(by_hand, rel=1e-12)
    assert float(got.sum()) == pytest.approx(3.0)
    # beta = 0: every effective number is 1, plain cross-entropy; a class never seen counts min_count samples
    assert class_balanced_weights(torch.tensor(counts), 0.0).tolist() == [1.0, 1.0, 1.0]
    assert class_balanced_weights(torch.tensor([0.0, 1.0]), 0.5).tolist() == [1.0, 1.0]


def test_class_balanced_loss_is_the_weighted_cross_entropy_by_hand(on_path):
    """-alpha_y log softmax(z)_y per sample, 'mean' over the real samples (not over the weights), from math."""
    from fedbalance_cb.losses import ClassBalancedLoss

    logits = torch.tensor([[2.0, 0.0, -1.0], [0.5, 0.5, 0.0], [0.0, 1.0, 3.0]], dtype=torch.float64)
    target = torch.tensor([0, 2, 1])
    counts, beta = [50.0, 5.0, 2.0], 0.99
    inverse = [(1 - beta) / (1 - beta ** n) for n in counts]
    alpha = [3 * w / sum(inverse) for w in inverse]

    def nll(z, y):
        return -(z[y] - math.log(sum(math.exp(v) for v in z)))

    per = [alpha[y] * nll(z, y) for z, y in zip(logits.tolist(), target.tolist())]
    loss = ClassBalancedLoss(beta=beta, num_classes=3).double()
    loss.set_prior(torch.tensor(counts))
    assert float(loss(logits, target)) == pytest.approx(sum(per) / 3, rel=1e-12)
    mask = torch.tensor([1.0, 0.0, 1.0])
    assert float(loss(logits, target, mask)) == pytest.approx((per[0] + per[2]) / 2, rel=1e-12)
    with pytest.raises(ValueError, match="does not take local counts"):
        loss.set_client_counts(torch.ones(3))


def test_ema_estimator_smooths_the_released_shares_by_hand(on_path):
    """m_0 = s_0, m_t = 0.5 m_{t-1} + 0.5 s_t, times the last round's total; as a registry entry through ``plan``."""
    from fedbalance.monitor.estimators import Track, plan
    from fedbalance_cb.estimators import ema_counts

    track = Track()
    track.add([0, 1], [20, 20], {"released": [30.0, 10.0]})  # shares .75 .25
    track.add([0, 1], [20, 20], {"released": [10.0, 30.0]})  # .25 .75 -> m = .5 .5
    track.add([0, 1], [10, 20], {"released": [-4.0, 8.0]})  # 0 1 (negative read as 0) -> m = .25 .75, x 30
    assert ema_counts(track).tolist() == pytest.approx([7.5, 22.5])
    entries = plan(["pooled", "ema"], {"ema": "fedbalance_cb.estimators:ema"})
    assert [e.name for e in entries] == ["released", "pooled", "ema"]
    assert entries[-1].history and entries[-1].fn(track).counts.tolist() == pytest.approx([7.5, 22.5])


# ---------------------------------------------------------------- found by entry point and by dotted path


def test_the_installed_example_is_found_by_entry_point_with_its_package_and_version(installed):
    cfg = quick()
    cfg["experiments"]["losses"]["losses"].append("cb")
    cfg["defaults"]["monitor"]["estimators"].append("ema")
    cfg = load_config(cfg)
    spec = resolve_job(cfg, Job("losses", "mnist", "g10", "cb", 0))
    assert spec.base_loss == "cb"
    assert spec.plugins["loss"] == {"target": CB, "how": "entry point", "package": "fedbalance-cb", "version": "0.1.0",
                                    "receives": ["prior"], "vectorisable": True}
    assert spec.plugins["estimators"]["ema"]["package"] == "fedbalance-cb"
    # the loss trains on the monitor's prior: the monitor runs and its keys are part of the job's training
    assert runs_monitor(spec) and '"t_ra"' in training_key(spec)
    assert len(jobs(cfg)) == 47 + 4
    # a job of built-ins records no plug-in loss
    assert "loss" not in resolve_job(cfg, Job("losses", "mnist", "g10", "ce", 0)).plugins


def test_a_dotted_path_names_a_loss_estimator_and_dataset_without_installing(on_path):
    cfg = quick()
    cfg["loss_variants"] = {"cbd": {"loss": CB, "params": {"loss_params": {"cbd": {"beta": 0.99}}}}}
    cfg["estimators"] = {"ema2": "fedbalance_cb.estimators:ema"}
    cfg["defaults"]["monitor"]["estimators"] = ["pooled", "released", "ema2"]
    cfg["experiments"] = {"losses": {"datasets": ["mnist"], "losses": ["ce", "cbd"], "seeds": [0],
                                     "grid": {"g": {"key": "partition.gamma", "values": [10]}}}}
    cfg = load_config(cfg)
    spec = resolve_job(cfg, Job("losses", "mnist", "g10", "cbd", 0))
    assert spec.base_loss == CB and spec.loss_kwargs() == {"beta": 0.99}
    record = spec.plugins["loss"]
    assert record["how"] == "dotted path" and record["package"] is None
    digest = hashlib.sha256((EXAMPLE / "src/fedbalance_cb/losses.py").read_bytes()).hexdigest()[:12]
    assert record["version"] == f"sha256:{digest}"
    assert spec.estimator_targets == {"ema2": "fedbalance_cb.estimators:ema"}


def test_a_job_whose_plugin_version_changed_is_not_reused(installed, tmp_path):
    """Recorded in the spec, the version decides twins and reference copies (``covers``), the checkpoint's fingerprint,
    and the run refuses a spec planned with another version than the one installed."""
    from fedbalance.jobs.run import JobError, check_plugins, fingerprint
    from fedbalance.jobs.reuse import twin_config

    cfg = quick()
    cfg["experiments"]["losses"]["losses"].append("cb")
    cfg = load_config(cfg)
    now = configured_job(cfg, Job("losses", "mnist", "g10", "cb", 0))
    old = copy.deepcopy(now)
    old["plugins"]["loss"]["version"] = "0.0.9"
    spec, old_spec = JobSpec.from_config(now), JobSpec.from_config(old)
    assert covers(now, now) and not covers(old, now)
    twin_config({"config": now}, spec, "reference/x")
    with pytest.raises(ConfigError, match="trained with other parameters"):
        twin_config({"config": old}, spec, "reference/x")
    assert fingerprint(spec, {}) != fingerprint(old_spec, {})
    check_plugins(spec)  # the installed version: runs
    with pytest.raises(JobError, match=r"planned with fedbalance-cb 0\.0\.9, fedbalance-cb 0\.1\.0 is installed"):
        check_plugins(old_spec)


# ---------------------------------------------------------------- bad input: one line naming the key, before any job

BAD_MODULE = '''
import torch
from fedbalance.methods.losses import Loss
from fedbalance.data.datasets import Source

class NotALoss(torch.nn.Module):
    def forward(self, logits, target, mask=None):
        return logits.sum()

class NoMask(Loss):
    def forward(self, logits, target):
        return logits.sum()

class Sequential(Loss):
    vectorisable = False
    def forward(self, logits, target, mask=None):
        return logits.sum()

def two_arguments(inputs, other):
    return [1.0]

source = Source(10, 1, (28, 28), lambda data_dir: [], lambda data_dir, files: None)
'''


@pytest.fixture
def bad_module(tmp_path, monkeypatch):
    (tmp_path / "badplug.py").write_text(BAD_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    plugins.forget()
    yield
    plugins.forget()
    sys.modules.pop("badplug", None)


def one_loss(loss: str, **variant) -> dict:
    cfg = quick()
    cfg["loss_variants"] = {"mine": {"loss": loss, **variant}}
    cfg["experiments"] = {"losses": {"datasets": ["mnist"], "losses": ["ce", "mine"], "seeds": [0],
                                     "grid": {"g": {"key": "partition.gamma", "values": [10]}}}}
    return cfg


def with_estimator(target: str) -> dict:
    cfg = quick()
    cfg["estimators"] = {"mine": target}
    cfg["defaults"]["monitor"]["estimators"] = ["pooled", "mine"]
    return cfg


def with_source(source: str) -> dict:
    cfg = quick()
    cfg["datasets"]["mnist"]["source"] = source
    return cfg


BAD = [
    (lambda: one_loss("nopkg.losses:Mine"), r"^loss_variants\.mine\.loss: .*no module 'nopkg\.losses' on the Python path"),
    (lambda: one_loss("badplug:Missing"), r"^loss_variants\.mine\.loss: .*module 'badplug' has no attribute 'Missing'"),
    (lambda: one_loss("badplug:NotALoss"), r"^loss_variants\.mine\.loss: .*is not a subclass of fedbalance\.methods\.losses\.Loss"),
    (lambda: one_loss("badplug:NoMask"), r"^loss_variants\.mine\.loss: .*must be forward\(logits, target, mask=None\)"),
    (lambda: one_loss("badplug:Sequential", params={"path": "vectorised"}),
     r"^experiments\.losses\[mnist, g10, mine\]\.path: 'vectorised', but the loss 'badplug:Sequential' is declared "
     "sequential-only"),
    (lambda: one_loss("cb_typo"), r"^loss_variants\.mine\.loss: .*unknown loss 'cb_typo'"),
    (lambda: {**quick(), "experiments": {"losses": {"datasets": ["mnist"], "losses": ["cbx"],
                                                    "grid": {"g": {"key": "partition.gamma", "values": [10]}}}}},
     r"^experiments\.losses\.losses: unknown loss 'cbx'"),
    (lambda: one_loss("badplug:Sequential", params={"loss_params": {"mine": {"beta": 1}}}),
     r"^experiments\.losses\[mnist, g10, mine\]\.loss_params\.mine: \['beta'\] not parameters"),
    (lambda: {**quick(), "defaults": {**quick()["defaults"], "loss_params": {"focla": {"gamma": 1.0}}}},
     r"\.loss_params\.focla: no loss of that name"),
    (lambda: with_estimator("badplug:two_arguments"), r"^estimators\.mine: .*one argument, not 2"),
    (lambda: with_estimator("badplug:nothing"), r"^estimators\.mine: .*has no attribute 'nothing'"),
    (lambda: {**with_estimator("badplug:two_arguments"), "estimators": {}},
     r"^experiments\.monitor\[mnist, default, ce\]\.monitor\.estimators: unknown estimator 'mine'"),
    (lambda: with_source("badplug:source"), r"^datasets\.mnist\.source: .*prepare must be prepare\(data_dir, download"),
    (lambda: with_source("badplug:nope"), r"^datasets\.mnist\.source: .*has no attribute 'nope'"),
]


@pytest.mark.parametrize("make, message", BAD, ids=[m for _, m in BAD])
def test_bad_plugins_are_refused_in_one_line_naming_the_key(bad_module, make, message):
    with pytest.raises(ConfigError) as err:
        load_config(make())
    text = str(err.value)
    assert "\n" not in text and re.search(message, text), text


def test_a_clash_names_both_origins(installed, tmp_path, monkeypatch):
    """An entry point named like a built-in loss, a loss variant or config estimator named like a plug-in: an error
    naming both, never one shadowing the other."""
    cfg = quick()
    cfg["loss_variants"] = {"cb": {"loss": "ratio"}}
    with pytest.raises(ConfigError, match=r"^loss_variants\.cb: 'cb' is also the name of entry point 'cb' "
                                          r"\(fedbalance\.losses\) of fedbalance-cb 0\.1\.0"):
        load_config(cfg)
    cfg = with_estimator("fedbalance_cb.estimators:ema")
    cfg["estimators"] = {"pooled": "fedbalance_cb.estimators:ema"}
    with pytest.raises(ConfigError, match=r"^estimators\.pooled: 'pooled' is the name of fedbalance's own estimator"):
        load_config(cfg)
    dist = tmp_path / "shadow-9.9.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: shadow\nVersion: 9.9\n")
    (dist / "entry_points.txt").write_text("[fedbalance.losses]\nfocal = fedbalance_cb.losses:ClassBalancedLoss\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    plugins.forget()
    with pytest.raises(ConfigError, match=r"^loss 'focal' is both fedbalance's own and entry point 'focal' "
                                          r"\(fedbalance\.losses\) of shadow 9\.9"):
        load_config(quick())
    # a study that does not name 'focal' runs in the same environment (issue 77): the clash blocks only its users
    cfg = quick()
    cfg["experiments"] = {name: exp for name, exp in cfg["experiments"].items() if "focal" not in exp["losses"]}
    assert cfg["experiments"] and load_config(cfg)["experiments"].keys() == cfg["experiments"].keys()


def test_a_bad_plugin_stops_the_workflow_before_anything_is_written(tmp_path):
    """Snakemake from an empty folder with a config naming a missing module: one line naming the key, no results."""
    cfg = one_loss("nopkg.losses:Mine")
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    r = subprocess.run([sys.executable, "-m", "snakemake", "-s", str(ROOT / "workflow" / "Snakefile"), "--directory",
                        str(tmp_path), "--cores", "1", "--configfile", str(tmp_path / "c.yaml")],
                       capture_output=True, text=True, timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode != 0
    lines = [line for line in out.splitlines() if "loss_variants.mine.loss" in line]
    assert len(lines) == 1 and "invalid configuration: loss_variants.mine.loss:" in lines[0] and "nopkg" in lines[0], out
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == ["c.yaml"]


# ---------------------------------------------------------------- through the tables


def test_a_plugin_loss_gets_rows_in_the_loss_tables(tmp_path):
    """A loss whose jobs record a plug-in (final.csv's ``plugin``) is a row of every loss table it ran for, with its
    own numbers; a loss variant of a built-in (no plug-in) gets none."""
    from fedbalance.presentation.tables import TABLES, cell_values, write_table

    rows = []
    for i, loss in enumerate(("ce", "focal", "ghmc", "ratio", "cb", "ratio_rel")):
        for seed in (0, 1):
            rows.append({"experiment": "losses", "dataset": "mnist", "setting": "g10", "loss": loss, "seed": seed,
                         "acc_minority": 0.1 * i + 0.01 * seed, "auc_hard": 0.5 + 0.01 * i, "acc_majority": 0.9,
                         "plugin": "fedbalance-cb 0.1.0" if loss == "cb" else ""})
    final = pd.DataFrame(rows)
    values = cell_values(TABLES["Res_3_datasets"], final, pd.DataFrame())
    cb = values[(values.row == "cb") & (values.metric == "acm") & (values.column == "10:1") & (values.dataset == "mnist")]
    assert len(cb) == 1 and cb.iloc[0]["mean"] == pytest.approx(100 * (0.4 + 0.005)) and cb.iloc[0]["n"] == 2
    assert "ratio_rel" not in set(values.row)
    write_table("Res_3_datasets", final, pd.DataFrame(), tmp_path)
    tex = (tmp_path / "Res_3_datasets.tex").read_text()
    assert r"\texttt{cb}" in tex and r"\textbf{40.50}" in tex  # cb's Ac.M is the column's best: bold
    assert "cb" in set(pd.read_csv(tmp_path / "Res_3_datasets_vs_paper.csv").row)
    # the tables without a plug-in are the paper's, cell for cell
    plain = final[final.loss != "cb"]
    assert len(cell_values(TABLES["Res_3_datasets"], plain, pd.DataFrame())) == len(TABLES["Res_3_datasets"].cells)


# ---------------------------------------------------------------- end to end (slow tier)


def claim_one_count(final: pd.DataFrame) -> tuple[int, int]:
    """(Γ columns where the Ratio Loss's mean Ac.M is above that of every other row, columns), computed here from the
    jobs' metrics: the count claim 1 of claims.md reports for Res_3_datasets ("ahead of the best other loss": every loss
    of the quick study holds the same seeds, so on the seeds both hold; MNIST only in the quick study)."""
    sel = final[(final.experiment == "losses") & (final.dataset == "mnist") & (final.loss != "ratio_rel")]
    best = total = 0
    for _, col in sel.groupby("setting"):
        means = col.groupby("loss")["acc_minority"].mean()
        total += 1
        best += int(means["ratio"] > means.drop("ratio").max())
    return best, total


@pytest.mark.slow
def test_the_quick_study_with_the_example_plugin_from_config_alone(site, tmp_path):
    """config/quick.yaml plus two lines (``cb`` among the loss comparison's losses, ``ema`` among the estimators), the
    example installed: its jobs train, record the plug-in, and are rows of the tables (their numbers), a competitor in
    the claims (claim 1's count includes it) and cells of `compare`; the estimator is a column of its table."""
    cfg = yaml.safe_load(QUICK.read_text())
    cfg["experiments"]["losses"]["losses"].append("cb")
    cfg["defaults"]["monitor"]["estimators"].append("ema")
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    env = {**os.environ, "PYTHONPATH": str(site)}
    r = subprocess.run([sys.executable, "-m", "snakemake", "-s", str(ROOT / "workflow" / "Snakefile"), "--directory",
                        str(tmp_path), "--cores", "2", "--configfile", str(tmp_path / "study.yaml")],
                       capture_output=True, text=True, timeout=3600, env=env)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    res = tmp_path / "results"
    finals = []
    for setting in ("g1", "g10"):
        for seed in (0, 1):
            m = json.loads((res / "losses" / "mnist" / setting / "cb" / f"seed{seed}" / "metrics.json").read_text())
            assert m["config"]["plugins"]["loss"]["package"] == "fedbalance-cb"
            assert m["versions"]["fedbalance-cb"] == "0.1.0"
            finals.append(m["final"]["acc_minority"])
    vs = pd.read_csv(res / "tables" / "Res_3_datasets_vs_paper.csv")
    cb = vs[(vs.row == "cb") & (vs.metric == "acm") & (vs.dataset == "mnist")].set_index("column")
    assert cb.loc["B.", "ours_mean"] == pytest.approx(100 * (finals[0] + finals[1]) / 2)
    assert cb.loc["10:1", "ours_mean"] == pytest.approx(100 * (finals[2] + finals[3]) / 2)
    assert r"\texttt{cb}" in (res / "tables" / "Res_3_datasets.tex").read_text()
    assert r"\texttt{cb}" in (res / "tables" / "Sup_majority.tex").read_text()
    assert r"\texttt{ema}" in (res / "tables" / "Monitor_under_imbalance.tex").read_text()
    final = pd.read_csv(res / "aggregate" / "final.csv")
    best, total = claim_one_count(final)
    claims = (res / "claims.md").read_text()
    assert f"| 1 | Ratio Loss has the best Ac.M in almost all cells of Res_3_datasets | paper reading | " in claims
    line = next(x for x in claims.splitlines() if x.startswith("| 1 |"))
    assert f"{best}/{total} cells" in line, line
    out = subprocess.run([sys.executable, "-m", "fedbalance", "compare", "--ours", str(res), "--reference", str(res),
                          "--experiment", "losses"], capture_output=True, text=True, timeout=300,
                         env={**env, "PYTHONPATH": f"{site}{os.pathsep}{ROOT / 'src'}"})
    assert out.returncode == 0 and re.search(r"\|\s*losses\s*\|\s*mnist\s*\|\s*g10\s*\|\s*cb\s*\|\s*acc_minority\s*\|", out.stdout), out.stderr


def test_plugin_losses_and_estimators_are_lines_of_the_figures():
    """The mismatch and loss-curve figures draw a plug-in loss beside the four, labelled by its name; the estimator
    figure a plug-in estimator's CS (its ``cs_<name>`` column)."""
    from fedbalance.presentation.figures.curves import make_Sup_curve_cifar_four_losses
    from fedbalance.presentation.figures.mismatch import make_Res_mismatch
    from fedbalance.presentation.figures.monitor_imbalance import make_Monitor_under_imbalance
    from fedbalance.presentation.names import ESTIMATORS

    def legend(fig):
        return [t.get_text().split(" (")[0] if not t.get_text().startswith("Ratio") else t.get_text().rsplit(" (", 1)[0]
                for t in fig.axes[0].get_legend().get_texts()]

    final = pd.DataFrame([{"experiment": "mismatch", "dataset": "mnist", "setting": f"c{c}_g10", "loss": loss,
                           "seed": 0, "mean_cs": 0.1 * c, "acc_minority": 0.5, "plugin": plugin}
                          for c in (2, 5) for loss, plugin in (("ce", None), ("ratio", None), ("cb", "fedbalance-cb 0.1.0"))])
    fig, _ = make_Res_mismatch(final)
    assert legend(fig)[:3] == ["CE", "Ratio", "cb"]
    rounds = pd.DataFrame([{"experiment": "losses", "dataset": "cifar10", "setting": "g100", "loss": loss, "seed": 0,
                            "round": r, "train_loss": 1.0 / (r + 1), "plugin": plugin}
                           for r in range(3) for loss, plugin in (("ce", None), ("cb", "fedbalance-cb 0.1.0"))])
    fig, _ = make_Sup_curve_cifar_four_losses(rounds=rounds)
    assert legend(fig) == ["CE", "cb"]
    rounds = pd.DataFrame([{"experiment": "losses", "dataset": "mnist", "setting": f"g{g}", "loss": "ratio", "seed": 0,
                            "round": r, **{f"cs_{e}": 0.9 for e in ESTIMATORS}, "cs_ema": 0.95}
                           for g in (10, 100) for r in range(2)])
    fig, _ = make_Monitor_under_imbalance(rounds=rounds)
    assert "ema" in legend(fig)


GOOD_DATA = '''
import torch
from fedbalance.data.datasets import Dataset, Source

def prepare(data_dir, download, size=40):
    return []

def load(data_dir, files, size=40):
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (size, 1, 28, 28), dtype=torch.uint8, generator=g)
    y = torch.arange(size) % 10
    return Dataset("tiny", x, y, x[:20], y[:20], 10)

source = Source(10, 1, (28, 28), prepare, load, {"size": 40})
'''


def test_a_plugin_dataset_by_dotted_path_is_checked_recorded_and_loaded(tmp_path, monkeypatch):
    """A ``Source`` named by dotted path: its options are checked like a built-in's, the job records it, and
    ``load_dataset`` gives its data."""
    from fedbalance.data.datasets import dataset_info, load_dataset

    (tmp_path / "goodplug.py").write_text(GOOD_DATA)
    monkeypatch.syspath_prepend(str(tmp_path))
    plugins.forget()
    cfg = with_source("goodplug:source")
    cfg["datasets"]["mnist"]["options"] = {"size": 50}
    spec = resolve_job(load_config(cfg), Job("losses", "mnist", "g10", "ce", 0))
    assert spec.source == "goodplug:source" and spec.plugins["dataset"]["how"] == "dotted path"
    assert dataset_info("goodplug:source", size=50)["num_classes"] == 10
    ds = load_dataset("goodplug:source", tmp_path, size=50)
    assert ds.x_train.shape == (50, 1, 28, 28) and ds.y_train.tolist()[:12] == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1]
    cfg["datasets"]["mnist"]["options"] = {"sise": 50}
    with pytest.raises(ConfigError, match=r"^datasets\.mnist\.options: goodplug:source: unknown option 'sise'"):
        load_config(cfg)
    plugins.forget()
    sys.modules.pop("goodplug", None)
