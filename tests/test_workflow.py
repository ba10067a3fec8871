"""The Snakemake workflow: lint, dry-run plans, config errors before the DAG, and the quick DAG end to end.

Every call runs `snakemake` as a subprocess with `-s <repo>/Snakefile --directory <tmp>`, so nothing is
written into the repository (except .snakemake/ by the lint, which git ignores).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
SNAKEFILE = REPO / "Snakefile"
FULL = REPO / "config" / "config.yaml"
QUICK = REPO / "config" / "quick.yaml"

sys.path.insert(0, str(REPO / "src"))
from fedbalance.config import jobs, load_config  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("snakemake") is None, reason="snakemake is not installed")


def snakemake(*args: str, cwd: Path | None = None, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["snakemake", *args], cwd=cwd or REPO, capture_output=True, text=True, timeout=timeout,
    )


def in_tmp(tmp: Path, *args: str, **kw) -> subprocess.CompletedProcess:
    return snakemake("-s", str(SNAKEFILE), "--directory", str(tmp), *args, **kw)


def job_stats(text: str) -> dict[str, int]:
    """Parse the 'Job stats' table a dry run prints: rule -> number of jobs."""
    block = text[text.index("Job stats:"):]
    counts = {}
    for line in block.splitlines()[3:]:
        m = re.match(r"^(\w+)\s+(\d+)$", line.strip())
        if not m:
            break
        counts[m.group(1)] = int(m.group(2))
    return counts


def test_lint_is_clean():
    r = snakemake("--lint")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Lints for" not in r.stdout + r.stderr


def test_dry_run_full_protocol_plans_every_job(tmp_path):
    cfg = load_config(FULL)
    expected = jobs(cfg)
    r = in_tmp(tmp_path, "-n", "--quiet", "rules", "--configfile", str(FULL))
    assert r.returncode == 0, r.stdout + r.stderr
    counts = job_stats(r.stdout + r.stderr)
    assert counts["train"] == len(expected) == 2790  # 2490 of the paper + 300 of beyond
    partitions = {(j.experiment, j.dataset, j.setting, j.seed) for j in expected}
    assert counts["partition"] == len(partitions)
    assert counts["prepare_data"] == len(cfg["datasets"])
    for rule in ("aggregate", "tables", "figures", "all"):
        assert counts[rule] == 1
    # every experiment family is planned
    assert {j.experiment for j in expected} == set(cfg["experiments"])


def test_dry_run_quick_protocol(tmp_path):
    """--configfile replaces config/config.yaml (not merged into it): only the quick jobs are planned."""
    r = in_tmp(tmp_path, "-n", "--quiet", "rules", "--configfile", str(QUICK))
    assert r.returncode == 0, r.stdout + r.stderr
    counts = job_stats(r.stdout + r.stderr)
    assert counts["train"] == len(jobs(load_config(QUICK))) == 63
    assert counts["prepare_data"] == 1


def _bad_config(tmp: Path, edit) -> Path:
    cfg = yaml.safe_load(QUICK.read_text())
    edit(cfg)
    path = tmp / "bad.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.mark.parametrize(
    "edit, words",
    [
        (lambda c: c["defaults"].update(clients_per_round=50), ["clients_per_round", "num_clients"]),
        (lambda c: c["experiments"]["losses"].update(losses=["ce", "bogus"]), ["bogus", "losses"]),
        (lambda c: c["experiments"]["early"]["settings"]["E"].update(switch_round=99), ["switch_round"]),
        (lambda c: c["experiments"]["losses"].update(datasets=["cifar"]), ["experiments.losses.datasets", "cifar"]),
    ],
    ids=["clients_per_round", "unknown_loss", "switch_round", "unknown_dataset"],
)
def test_bad_config_fails_before_the_dag(tmp_path, edit, words):
    bad = _bad_config(tmp_path, edit)
    r = in_tmp(tmp_path / "run", "-n", "--configfile", str(bad))
    out = r.stdout + r.stderr
    assert r.returncode != 0
    assert "Building DAG" not in out
    for w in words:
        assert w in out, out


def _expected_rows(label: str, final: pd.DataFrame, rounds: pd.DataFrame, what: str) -> int:
    from fedbalance.tables import TABLES, cell_values, layout

    spec = TABLES[label]
    kind = "pm" if spec.layout == "imbalance" and what == "mean" else what
    _, lines = layout(spec, cell_values(spec, final, rounds), final, kind)
    return sum(1 for line in lines if line != "hline")


@pytest.mark.slow
def test_quick_dag_end_to_end(tmp_path):
    from fedbalance.aggregate import read_tidy
    from fedbalance.figures import FIGURES
    from fedbalance.tables import TABLES, table_labels

    t0 = time.perf_counter()
    r = in_tmp(tmp_path, "--cores", "2", "--configfile", str(QUICK), timeout=80 * 60)
    wall = time.perf_counter() - t0
    print(f"\nquick DAG on 2 cores: {wall:.0f} s")
    assert r.returncode == 0, (r.stdout + r.stderr)[-5000:]

    res = tmp_path / "results"
    final, rounds = read_tidy(res / "aggregate")
    assert len(final) == len(jobs(load_config(QUICK))) == 63
    tables = res / "tables"
    for label in table_labels():
        for name, what in ((label, "mean"), (f"{label}_std", "std")):
            tex = (tables / f"{name}.tex").read_text()
            assert r"\begin{tabular}" in tex and r"\end{tabular}" in tex, name
            n = sum(1 for line in tex.splitlines() if line.rstrip().endswith("\\\\"))
            assert n == _expected_rows(label, final, rounds, what), name
        cmp = pd.read_csv(tables / f"{label}_vs_paper.csv")
        assert len(cmp) == len(TABLES[label].cells), label
        assert (tables / f"{label}_vs_paper.tex").read_text().strip(), label
    # the quick protocol fills the MNIST B. and 10:1 cells of the loss comparison (g1, g10), two seeds each
    cmp = pd.read_csv(tables / "Res_3_datasets_vs_paper.csv")
    filled = cmp[(cmp.dataset == "mnist") & cmp.column.isin(["B.", "10:1"])]
    assert len(filled) == 16 and filled.ours_mean.notna().all() and (filled.n_seeds == 2).all()
    for name in FIGURES:
        for ext in ("pdf", "png"):
            p = res / "figures" / f"{name}.{ext}"
            assert p.is_file() and p.stat().st_size > 0, p
    assert (res / "figures" / "fig_monitoring.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (res / "figures" / "fig_monitoring.pdf").read_bytes()[:5] == b"%PDF-"
    assert (res / "claims.md").read_text().strip()
    paper = (res / "paper_tables.tex").read_text()
    assert r"\begin{document}" in paper
    for label in table_labels():
        assert f"\\input{{tables/{label}}}" in paper, label

    # the report holds every table and figure with captions
    rep = in_tmp(tmp_path, "--configfile", str(QUICK), "--report", str(tmp_path / "report.html"), timeout=600)
    assert rep.returncode == 0, (rep.stdout + rep.stderr)[-5000:]
    html = (tmp_path / "report.html").read_text(errors="replace")
    for name in ("Res_3_datasets", "fig_monitoring", "claims.md"):
        assert name in html

    # a second call has nothing left to do
    again = in_tmp(tmp_path, "-n", "--configfile", str(QUICK))
    assert again.returncode == 0
    assert "Nothing to be done" in again.stdout + again.stderr
