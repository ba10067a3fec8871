"""The report's contract with the config: every table cell, figure and claim reads a job of
the study, and a config that renames a family or a grid prefix is warned about before the DAG is built."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import yaml

from fedbalance.jobs.config import load_config, jobs, read_yaml
from fedbalance.presentation.contract import contract_warnings, report_reads, setting_shape, unmatched, unread
from fedbalance.presentation.figures import FIGURES
from fedbalance.presentation.tables import TABLES, cell_values
from fedbalance.common.records import ESTIMATORS, UNIFORM, cs_column

ROOT = Path(__file__).resolve().parents[1]
FULL = ROOT / "config" / "config.yaml"
QUICK = ROOT / "config" / "quick.yaml"


def _frames(cfg) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One final row and two rounds per job of the study, every metric and CS column set."""
    keys = [dict(experiment=j.experiment, dataset=j.dataset, setting=j.setting, loss=j.loss, seed=j.seed) for j in jobs(cfg)]
    final = pd.DataFrame([{**k, "acc_minority": 0.5, "auc_hard": 0.9, "acc_majority": 0.9, "mean_cs": 0.7} for k in keys])
    cs = {cs_column(e): 0.95 for e in (*ESTIMATORS, UNIFORM)}
    rounds = pd.DataFrame([{**k, "round": r, "train_loss": 1.0, **cs} for k in keys for r in (0, 1)])
    return final, rounds


def test_every_table_cell_of_the_full_study_is_a_job():
    """Rendered from one row per job of config/config.yaml, no cell of any table is empty (every one of them is a job),
    and the contract module, which matches names instead of rendering, agrees."""
    cfg = load_config(FULL)
    final, rounds = _frames(cfg)
    empty = []
    for label, spec in TABLES.items():
        v = cell_values(spec, final, rounds)
        empty += [(label, *k) for k in v.loc[v["n"] == 0, ["experiment", "dataset", "setting", "loss"]].itertuples(index=False)]
    assert empty == [], empty[:10]
    assert sum(len(s.cells) for s in TABLES.values()) > 1000
    assert unmatched(cfg) == []
    assert unread(cfg) == []
    assert contract_warnings(cfg) == []


def test_every_figure_and_claim_read_is_a_job_of_the_full_study():
    cfg = load_config(FULL)
    keys = {(j.experiment, j.dataset, j.setting, j.loss) for j in jobs(cfg)}
    for fig in FIGURES.values():
        assert fig.reads, fig.name
        for r in fig.reads:
            assert any(r.matches(*k) for k in keys), (fig.name, r)
            assert r.dataset in (None, fig.dataset) or fig.dataset is None, (fig.name, r)
    others = [r for r in report_reads() if r.by in ("claims", "Fidelity")]
    assert {r.experiment for r in others} >= {"monitor", "losses", "mismatch", "clients_cifar10"}
    assert all(any(r.matches(*k) for k in keys) for r in others)


def test_a_smaller_study_of_the_paper_families_gets_no_warning():
    """config/quick.yaml runs fewer settings (Γ in {1, 10}) and losses: many cells are absent, none misnamed."""
    cfg = load_config(QUICK)
    assert len(unmatched(cfg)) > 50  # cells it does not run: g20, g50, g100, ...
    assert unmatched(cfg, exact=False) == []
    assert contract_warnings(cfg) == []


def test_a_renamed_family_is_named():
    raw = read_yaml(QUICK)
    raw["experiments"]["loss_comparison"] = raw["experiments"].pop("losses")
    warnings = contract_warnings(load_config(raw))
    assert len(warnings) == 1 and "loss_comparison" in warnings[0], warnings


def test_a_renamed_grid_prefix_is_named():
    """The losses grid's prefix g -> gamma: every Γ cell of the family reads a setting of a shape it has not."""
    raw = read_yaml(QUICK)
    grid = raw["experiments"]["losses"]["grid"]
    grid["gamma"] = grid.pop("g")
    cfg = load_config(raw)
    missing = unmatched(cfg, exact=False)
    assert missing and {r.experiment for r in missing} == {"losses"}
    assert {r.setting for r in missing if r.setting} >= {"g1", "g10", "g100"}
    assert {setting_shape(j.setting) for j in jobs(cfg) if j.experiment == "losses"} == {("gamma",)}
    (w,) = contract_warnings(cfg)
    assert "losses/mnist/g1/ce (Res_3_datasets)" in w and "grid prefix" in w


def test_setting_shape():
    assert setting_shape("c5_g10") == ("c", "g")
    assert setting_shape("g100") == ("g",)
    assert setting_shape("t1.25") == ("t",)
    assert setting_shape("S") == () and setting_shape("default") == ()
    assert setting_shape(None) is None


def test_snakemake_warns_when_it_plans_the_study(tmp_path):
    """The warning comes when rule all is planned (its input function: the contract needs the claims' code, which the
    workflow does not import when it parses, tests/test_catalog.py), before the jobs are listed."""
    raw = read_yaml(QUICK)
    raw["experiments"]["loss_comparison"] = raw["experiments"].pop("losses")
    bad = tmp_path / "renamed.yaml"
    bad.write_text(yaml.safe_dump(raw, allow_unicode=True))
    r = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--cores", "1", "--configfile", str(bad),
                        "--directory", str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    assert "WARNING: experiment families that no table, figure or claim reads: loss_comparison" in out
    assert out.index("Building DAG") < out.index("loss_comparison (their jobs") < out.index("Job stats")
    assert out.count("loss_comparison (their jobs") == 1


def test_a_reference_set_of_some_families_gets_no_warning():
    """Rendering from a reference set that holds some families only (``reference_dir``): the others are not run."""
    from fedbalance.evidence.reference import reference_jobs

    cfg = load_config(ROOT / "config" / "mnist.yaml")
    held, twin = reference_jobs(cfg, ROOT / "reference" / "mnist")
    # the committed set less two families: a set of some families, however far the committed one has got
    study = [j for j in [*held, *twin] if j.experiment not in ("centralised", "beyond")]
    assert {j.experiment for j in study} < set(cfg["experiments"])  # some families only
    assert contract_warnings(cfg, study) == []
    # Without its Γ = 20 jobs the set is a smaller study still: no warning, and exactly the reads of Γ = 20 unmatched.
    smaller = [j for j in study if not (j.experiment == "losses" and j.setting == "g20")]
    assert len(smaller) < len(study)
    assert contract_warnings(cfg, smaller) == []
    before, after = set(unmatched(cfg, study)), set(unmatched(cfg, smaller))
    dropped = {(j.experiment, j.dataset, j.setting, j.loss) for j in study} - {
        (j.experiment, j.dataset, j.setting, j.loss) for j in smaller}
    only_dropped = {r for r in report_reads() if any(r.matches(*k) for k in dropped)
                    and not any(r.matches(j.experiment, j.dataset, j.setting, j.loss) for j in smaller)}
    assert before <= after and after - before == only_dropped != set()
    assert all(r.setting == "g20" for r in only_dropped)
