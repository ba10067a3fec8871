"""The shipped studies run to the end: config/mnist.yaml and config/config.yaml's MNIST part, shrunk.

``shrink`` keeps every family, setting, loss, variant and twin of a shipped config and its
``path: auto`` and ``device: auto``, and makes each job tiny: one seed, one round (a switch round's
family: as few as keep its settings apart), one local epoch, a dozen samples per majority class, the
embedded ``mnist5k`` for MNIST. Each shrunk study then runs through every rule, down to the tables,
figures, claims and fidelity files. A shipped config that cannot finish fails here.
"""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from fedbalance.jobs.config import jobs, load_config, read_yaml, resolve_job, run_key, twins
from fedbalance.jobs.reuse import twin_config
from fedbalance.common.records import Job

from test_workflow import in_tmp, job_stats

REPO = Path(__file__).resolve().parents[1]
SHIPPED = {"mnist": REPO / "config" / "mnist.yaml", "config": REPO / "config" / "config.yaml"}
TINY = {"majority_samples": 12, "samples_per_class": 4}


def _job_levels(cfg: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every mapping of job parameters in a config (defaults, datasets, experiments' params and settings, variants)."""
    yield cfg.setdefault("defaults", {})
    yield from cfg["datasets"].values()
    for variant in (cfg.get("loss_variants") or {}).values():
        yield variant.setdefault("params", {})
    for exp in cfg["experiments"].values():
        yield exp.setdefault("params", {})
        yield from (exp.get("dataset_params") or {}).values()
        yield from (exp.get("settings") or {}).values()


def shrink(path: Path, source: str = "mnist", results: str = "results") -> dict[str, Any]:
    """``path``'s study restricted to the datasets of ``source`` (now the embedded mnist5k), every job tiny."""
    cfg = copy.deepcopy(read_yaml(path))
    keep = [d for d, v in cfg["datasets"].items() if v.get("source", cfg.get("defaults", {}).get("source")) == source]
    cfg["datasets"] = {d: {**cfg["datasets"][d], "source": "mnist5k"} for d in keep}
    cfg["experiments"] = {
        name: {**exp, "datasets": [d for d in exp["datasets"] if d in keep]}
        for name, exp in cfg["experiments"].items()
        if any(d in keep for d in exp["datasets"])
    }
    for exp in cfg["experiments"].values():
        if "dataset_params" in exp:
            exp["dataset_params"] = {d: v for d, v in exp["dataset_params"].items() if d in keep}
        if "seeds" in exp:
            exp["seeds"] = [0]
        for axis in (exp.get("grid") or {}).values():
            assert axis["key"] not in ("rounds", "local_epochs", "switch_round"), "shrink cannot keep this grid's values"
    cfg.update(seeds=[0], results_dir=results, data_dir="data")
    for level in _job_levels(cfg):
        for key in ("rounds", "local_epochs"):
            if key in level:
                level[key] = 1
        if level.get("centralised_epochs") is not None:
            level["centralised_epochs"] = 1
        for key, value in TINY.items():
            if key in (level.get("partition") or {}):
                level["partition"][key] = value
        if "aux_per_class" in (level.get("monitor") or {}):
            level["monitor"]["aux_per_class"] = 4
    # a family with switch rounds keeps them apart: rounds 1..n before a last round n + 1
    for exp in cfg["experiments"].values():
        switches = sorted(
            {lvl["switch_round"] for lvl in [exp["params"], *(exp.get("settings") or {}).values()]
             if lvl.get("switch_round") is not None}
        )
        if not switches:
            continue
        rank = {s: i + 1 for i, s in enumerate(switches)}
        for lvl in [exp["params"], *(exp.get("settings") or {}).values()]:
            if lvl.get("switch_round") is not None:
                lvl["switch_round"] = rank[lvl["switch_round"]]
        exp["params"]["rounds"] = len(switches) + 1
    return cfg


def _twin_paths(cfg: Mapping[str, Any], datasets: list[str]) -> dict[str, str]:
    return {j.path: s.path for j, s in twins(cfg).items() if j.seed == 0 and j.dataset in datasets}


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_shrink_keeps_families_settings_losses_and_twins(name):
    original = load_config(SHIPPED[name])
    small = load_config(shrink(SHIPPED[name]))
    mnist = [d for d, v in original["datasets"].items() if v["source"] == "mnist"]
    want = sorted(j for j in jobs(original) if j.seed == 0 and j.dataset in mnist)
    assert sorted(jobs(small)) == want and len(want) > 150
    assert _twin_paths(small, mnist) == _twin_paths(original, mnist)
    assert small["defaults"]["path"] == original["defaults"]["path"] == "auto"
    assert small["device"] == original["device"] == "auto"


def _run_shrunk(name: str, folder: Path) -> subprocess.CompletedProcess:
    """Run ``name``'s shrunk study in ``folder`` through every rule; the snakemake call's result."""
    cfg = shrink(SHIPPED[name])
    (folder / "study.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    t0 = time.perf_counter()
    r = in_tmp(folder, "--cores", "2", "--configfile", str(folder / "study.yaml"), timeout=40 * 60)
    print(f"\nshrunk {SHIPPED[name].name}: {len(jobs(load_config(cfg)))} jobs, {time.perf_counter() - t0:.0f} s on 2 cores")
    return r


@pytest.fixture(scope="module")
def mnist_study(tmp_path_factory) -> Path:
    """config/mnist.yaml's shrunk study, run once in a folder of its own (config.yaml's test starts from a copy)."""
    folder = tmp_path_factory.mktemp("shrunk_mnist")
    r = _run_shrunk("mnist", folder)
    assert r.returncode == 0, (r.stdout + r.stderr)[-5000:]
    return folder


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_shipped_config_runs_to_the_end(name, tmp_path, mnist_study):
    """Every job of the shrunk study ends and every rule after it runs. config.yaml's study starts from a copy of
    mnist.yaml's finished one (its results and Snakemake's records of them): Snakemake trains again every job whose
    spec (the rule's params) or inputs differ and reuses the rest, which are the same jobs, trained already."""
    from fedbalance.presentation.tables import table_labels

    small = load_config(shrink(SHIPPED[name]))
    tw = twins(small)
    if name == "mnist":
        folder = mnist_study
    else:
        folder = tmp_path
        for part in ("results", ".snakemake"):
            shutil.copytree(mnist_study / part, folder / part, symlinks=True)
        shutil.rmtree(folder / ".snakemake" / "locks", ignore_errors=True)
        started = time.time()
        r = _run_shrunk(name, folder)
        assert r.returncode == 0, (r.stdout + r.stderr)[-5000:]
        # every job that mnist.yaml's study does not hold with the same spec is trained; most others are not
        # (Snakemake also retrains the jobs of a partition it writes again)
        before = load_config(shrink(SHIPPED["mnist"]))
        held = {run_key(resolve_job(before, j)) for j in jobs(before)}
        own = [j for j in jobs(small) if j not in tw]
        new = {j for j in own if run_key(resolve_job(small, j)) not in held}
        trained = {j for j in own if (folder / "results" / j.path / "metrics.json").stat().st_mtime > started}
        assert new and new <= trained and len(trained) == job_stats(r.stdout + r.stderr)["train"] < len(own) / 4
    res = folder / "results"
    for job in jobs(small):
        m = json.loads((res / job.path / "metrics.json").read_text())
        assert m["job"]["experiment"] == job.experiment and m["config"]["path"] == "auto", job.path
        if job in tw:
            assert m["reused_from"].endswith(tw[job].path), job.path
        else:
            assert m["path"] == "sequential" and "reused_from" not in m, job.path
            twin_config(m, resolve_job(small, job), job.path)  # trained with the spec this config gives it
    for label in table_labels():
        assert (res / "tables" / f"{label}.tex").read_text().strip(), label
    assert "| 1 |" in (res / "claims.md").read_text()
    assert (res / "tables" / "Fidelity.md").is_file() and (res / "paper_tables.tex").is_file()
    assert Job.from_path(jobs(small)[0].path) == jobs(small)[0]
