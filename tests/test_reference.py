"""The reference result set: which jobs it covers, rendering from it, and comparing a run with it."""

from __future__ import annotations

import copy
import json
import math
import re
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from conftest import write_job
from fedbalance.jobs.config import load_config, read_yaml
from fedbalance.presentation.names import GAMMAS, gamma_setting
from fedbalance.common.records import Job
from fedbalance.evidence.reference import compare, compare_markdown, reference_jobs, verdict

REPO = Path(__file__).resolve().parents[1]
SNAKEFILE = REPO / "workflow" / "Snakefile"
REFERENCE = REPO / "reference" / "mnist"
MNIST = REPO / "config" / "mnist.yaml"


T975_2 = 4.302652729911275
"""The 0.975 quantile of Student's t with 2 degrees of freedom (tables)."""


def test_verdict_by_hand() -> None:
    """Paired on 3 common seeds: differences 1, 2, 3 -> mean 2, sd 1, interval 2 ± 4.3027/sqrt(3) holds 0;
    differences 0.9, 1, 1.1 -> 1 ± 4.3027 * 0.1/sqrt(3) excludes it; equal values everywhere are identical."""
    v = verdict({0: 1.0, 1: 2.0, 2: 3.0, 7: 9.0}, {0: 0.0, 1: 0.0, 2: 0.0})
    assert (v.verdict, v.test, v.seeds) == ("not distinguishable", "paired", 3)
    assert (v.low, v.high) == pytest.approx((2 - T975_2 / math.sqrt(3), 2 + T975_2 / math.sqrt(3)))
    v = verdict({0: 1.9, 1: 2.0, 2: 2.1}, {0: 1.0, 1: 1.0, 2: 1.0})
    assert v.verdict == "differs" and v.low == pytest.approx(1 - T975_2 * 0.1 / math.sqrt(3))
    assert verdict({0: 0.5, 1: 0.7, 2: 0.6}, {0: 0.5, 1: 0.7, 2: 0.6}).verdict == "identical"
    assert verdict({0: 1.0}, {0: 1.0, 1: 2.0}).verdict == "too few seeds"
    assert verdict({}, {0: 1.0}).verdict == "missing"


def test_welch_verdict_by_hand() -> None:
    """Two common seeds: Welch's t on every seed, its interval from the Welch-Satterthwaite degrees of freedom."""
    from scipy import stats

    a, b = [60.0, 70.0, 80.0], [74.0, 76.0]
    va, vb = 100.0 / 3, 2.0 / 2  # variance / n of each side
    df = (va + vb) ** 2 / (va ** 2 / 2 + vb ** 2 / 1)
    half = stats.t.ppf(0.975, df) * math.sqrt(va + vb)
    v = verdict(dict(enumerate(a)), dict(enumerate(b)))
    assert (v.verdict, v.test, v.seeds) == ("not distinguishable", "Welch", 5)
    assert (v.low, v.high) == pytest.approx((-5 - half, -5 + half))
    far = verdict({0: 50.0, 1: 51.0}, {3: 90.0, 4: 91.0})
    assert far.verdict == "differs" and far.high < -30


def test_compare_cells_by_hand(tmp_path: Path) -> None:
    ours, ref = tmp_path / "ours", tmp_path / "ref"
    for seed, acm in enumerate([0.60, 0.70, 0.80]):
        write_job(ours, Job("losses", "mnist", "g10", "ratio", seed), acm=acm)
    for seed, acm in enumerate([0.74, 0.76]):
        write_job(ref, Job("losses", "mnist", "g10", "ratio", seed), acm=acm)
    write_job(ref, Job("losses", "mnist", "g50", "ce", 0), acm=0.5)
    frame = compare(ours, ref, ["acc_minority"])
    row = frame[(frame.setting == "g10")].iloc[0]
    # ours: 60, 70, 80 -> 70 ± 10; reference: 74, 76 -> 75 ± 1.414; diff -5 within the larger std (10)
    assert (row.n_ours, row.n_ref) == (3, 2)
    assert row.mean_ours == pytest.approx(70.0) and row.std_ours == pytest.approx(10.0)
    assert row.mean_ref == pytest.approx(75.0) and row.std_ref == pytest.approx(math.sqrt(2))
    assert row["diff"] == pytest.approx(-5.0) and row.verdict == "not distinguishable" and row.test == "Welch"
    assert frame[frame.setting == "g50"].iloc[0].verdict == "missing"
    md = compare_markdown(frame)
    # two common seeds: Welch's t on every seed of each side, unlike seed sets, which the row says and marks
    assert md_rows(md) == [["losses", "mnist", "g10", "ratio", "acc_minority", "70.00 ± 10.00 (3)", "75.00 ± 1.41 (2)",
                            f"-5.00 [{row.low:+.2f}, {row.high:+.2f}]",
                            "Welch (5)<!-- seeds losses/mnist/g10/ratio: 0,1,2 / 0,1 --> (unlike seeds: 0–2 against 0, 1)",
                            "not distinguishable"]]
    assert md.startswith("1 cell (experiment, dataset, setting, loss) both sides hold, 1 metric each (acc_minority);\n"
                         "0 cells only ours holds, 1 only the reference holds (not listed: --unmatched lists them).")
    assert "\n\n1 row: 1 not distinguishable.\n\nRule: ours − reference at 95 %." in md
    # short lines as a reader sees them: without the seed marks and the columns' padding to their width
    assert max(len(re.sub(r"([ -]){2,}", r"\1", re.sub(r"<!-- seeds [^>]*-->", "", line))) for line in md.splitlines()) < 200
    listed = compare_markdown(frame, unmatched=True)
    assert md_rows(listed)[0][:3] == ["losses", "mnist", "g10"] and md_rows(listed)[1][2::7] == ["g50", "missing"]
    assert "2 rows: 1 not distinguishable, 1 missing." in listed


def test_compare_pairs_on_the_common_seeds_and_shows_them(tmp_path: Path) -> None:
    """Ours at seeds 0-3, the reference at 0-2: paired on the three both hold; both sides and the difference are shown
    on those seeds ("(3 of 4)"), not ours over its four beside the reference's three."""
    from fedbalance.evidence.seedstats import seed_marks

    ours, ref = tmp_path / "ours", tmp_path / "ref"
    for seed, acm in enumerate([0.60, 0.62, 0.64, 0.20]):
        write_job(ours, Job("losses", "mnist", "g10", "ce", seed), acm=acm)
    for seed, acm in enumerate([0.50, 0.53, 0.55]):
        write_job(ref, Job("losses", "mnist", "g10", "ce", seed), acm=acm)
    row = compare(ours, ref, ["acc_minority"]).iloc[0]
    assert (row.test, row.seeds_compared, row.seeds_common) == ("paired", 3, "0,1,2")
    assert row.mean_ours == pytest.approx(51.5) and row.mean_ours_common == pytest.approx(62.0)
    assert row["diff"] == pytest.approx(62.0 - 52.666667, abs=1e-4)  # on seeds 0-2, not 51.5 - 52.67
    md = compare_markdown(compare(ours, ref, ["acc_minority"]))
    cells = md_rows(md)[0]
    assert cells[5] == "62.00 ± 2.00 (3 of 4)" and cells[6] == "52.67 ± 2.52 (3)"
    assert cells[8] == "paired (3; seeds 0–2)<!-- seeds losses/mnist/g10/ce: 0,1,2 / 0,1,2 -->"
    assert all(m.like for m in seed_marks(md))


def md_rows(md: str) -> list[list[str]]:
    """The body rows of the Markdown table in ``md``, their cells stripped."""
    lines = [line for line in md.splitlines() if line.startswith("|")]
    return [[c.strip() for c in line.strip("|").split("|")] for line in lines[2:]]


def test_compare_cli(tmp_path: Path, capsys) -> None:
    from fedbalance.cli import main

    for root, acm in ((tmp_path / "a", 0.5), (tmp_path / "b", 0.9)):
        for seed in (0, 1):
            write_job(root, Job("losses", "mnist", "g10", "ce", seed), acm=acm + 0.01 * seed)
    assert main(["compare", "--ours", str(tmp_path / "a"), "--reference", str(tmp_path / "b"), "--metric",
                 "acc_minority", "--csv", str(tmp_path / "c.csv")]) == 0
    out = capsys.readouterr().out
    assert "differs" in out and "-40.00" in out
    assert pd.read_csv(tmp_path / "c.csv").verdict.tolist() == ["differs"]
    assert main(["compare", "--ours", str(tmp_path / "none"), "--reference", str(tmp_path / "b")]) == 2


def _protocol_sides(tmp_path: Path) -> tuple[Path, Path]:
    """Two sides of two cells: g10/ce run alike; g10/ratio with other rounds, clients and source, and another seed."""
    ours, ref = tmp_path / "ours", tmp_path / "ref"
    quick = {"rounds": 16, "partition": {"scheme": "imbalance", "num_clients": 10}, "source": "mnist5k"}
    paper = {"rounds": 30, "partition": {"scheme": "imbalance", "num_clients": 20}, "source": "mnist"}
    for seed in (0, 1):
        for root, cfg in ((ours, quick), (ref, paper)):
            write_job(root, Job("losses", "mnist", "g10", "ratio", seed), config={**cfg, "seed": seed + 7 * (root == ref)})
            write_job(root, Job("losses", "mnist", "g10", "ce", seed),
                      config={"seed": seed, "experiment": root.name, "save_trajectory": root == ref, "rounds": 16})
    return ours, ref


def test_compare_names_the_protocols_differences(tmp_path: Path) -> None:
    """Every key that acts on the cell's loss but the seed, the names and output-only keys is compared, cell by cell,
    and summed up in a header, one line per key."""
    from fedbalance.evidence.reference import protocol_differences, protocol_header

    ours, ref = _protocol_sides(tmp_path)
    differences = protocol_differences(ours, ref)
    assert differences == {("losses", "mnist", "g10", "ratio"): {
        "partition.num_clients": ("10", "20"), "rounds": ("16", "30"), "source": ("mnist5k", "mnist")}}
    header = protocol_header(differences, 2)
    assert header.splitlines() == [
        "protocols differ in 1 of 2 cells both sides hold, in the keys that act on the cell's loss (ours vs reference):",
        "- partition.num_clients: 10 vs 20", "- rounds: 16 vs 30", "- source: mnist5k vs mnist"]
    frame = compare(ours, ref, ["acc_minority"])
    assert dict(zip(frame.loss, frame.protocol)) == {"ce": "", "ratio": "partition.num_clients, rounds, source"}
    # no verdict across protocols unless asked
    assert dict(zip(frame.loss, frame.verdict)) == {"ce": "not distinguishable", "ratio": "protocols differ"}
    across = compare(ours, ref, ["acc_minority"], across_protocols=True)
    assert dict(zip(across.loss, across.verdict)) == {"ce": "not distinguishable", "ratio": "not distinguishable"}
    assert protocol_header({}, 3) == "protocols: the same in all 3 cells both sides hold"


def test_only_keys_that_act_on_the_cells_loss_differ(tmp_path: Path) -> None:
    """Another loss's parameters, a partition key the scheme does not read, and an optional key left unset where the
    other side sets its default are no difference; the cell's own loss parameters are."""
    from fedbalance.common.jobspec import JOB_DEFAULTS
    from fedbalance.evidence.reference import protocol_differences

    ours, ref = tmp_path / "ours", tmp_path / "ref"
    aux = JOB_DEFAULTS["monitor"]["aux_source"]
    for root, extra in ((ours, {"loss_params": {"focal": {"gamma": 2.0}}}),
                        (ref, {"loss_params": {"focal": {"gamma": 2.0}, "fedlc": {"tau": 1.0}, "la": {"tau": 1.0}},
                               "partition": {"scheme": "imbalance", "writers_per_client": 20},
                               "monitor": {"aux_source": aux}})):
        for seed in (0, 1):
            write_job(root, Job("losses", "mnist", "g10", "ce", seed), config=extra)
            write_job(root, Job("losses", "mnist", "g10", "focal", seed), config=extra)
    assert protocol_differences(ours, ref) == {}
    write_job(ref, Job("losses", "mnist", "g10", "focal", 1), config={"loss_params": {"focal": {"gamma": 1.0}}})
    assert protocol_differences(ours, ref) == {
        ("losses", "mnist", "g10", "focal"): {"loss_params.focal.gamma": ("2.0", "1.0/2.0")}}


def test_compare_cli_protocols(tmp_path: Path, capsys) -> None:
    from fedbalance.cli import main

    ours, ref = _protocol_sides(tmp_path)
    args = ["compare", "--ours", str(ours), "--reference", str(ref), "--metric", "acc_minority"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[2] == ("protocols differ in 1 of 2 cells both sides hold, in the keys that act on the "
                                   "cell's loss (ours vs reference):")
    rows = {r[3]: r[-1] for r in md_rows(out)}
    assert rows == {"ce": "not distinguishable", "ratio": "protocols differ"}
    assert "--across-protocols gives one" in out and "2 rows: 1 not distinguishable, 1 protocols differ." in out
    assert main([*args, "--across-protocols"]) == 0
    assert {r[3]: r[-1] for r in md_rows(capsys.readouterr().out)} == {"ce": "not distinguishable",
                                                                       "ratio": "not distinguishable"}
    assert main([*args, "--strict"]) == 2
    err = capsys.readouterr().err
    assert "--strict: protocols differ" in err and "- rounds: 16 vs 30" in err
    assert main([*args, "--strict", "--experiment", "losses"]) == 2
    capsys.readouterr()
    shutil.rmtree(ours / "losses/mnist/g10/ratio")
    assert main([*args, "--strict"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[2] == "protocols: the same in all 1 cell both sides hold"
    assert "0 only the reference holds" not in out and "1 only the reference holds" in out


def test_compare_cli_names_a_bad_experiment_and_a_corrupt_job(tmp_path: Path, capsys) -> None:
    from fedbalance.cli import main

    for root in (tmp_path / "a", tmp_path / "b"):
        write_job(root, Job("losses", "mnist", "g10", "ce", 0))
    args = ["compare", "--ours", str(tmp_path / "a"), "--reference", str(tmp_path / "b")]
    assert main([*args, "--experiment", "losses"]) == 0
    capsys.readouterr()
    assert main([*args, "--experiment", "lossez"]) == 2
    assert "--experiment lossez: neither result set holds a job of it (they hold: losses)" in capsys.readouterr().err
    bad = tmp_path / "a" / "losses/mnist/g10/ce/seed0/metrics.json"
    bad.write_text("{bad")
    assert main(args) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "not valid JSON" in err and "Traceback" not in err


def test_reference_jobs_holds_finished_jobs_and_their_twins(tmp_path: Path) -> None:
    cfg = load_config(MNIST)
    # a job without its rounds.csv is not held
    write_job(tmp_path, Job("alpha", "mnist", "a1", "ratio", 0))
    write_job(tmp_path, Job("losses", "mnist", "g10", "ce", 0))
    (tmp_path / "losses/mnist/g10/ce/seed0/rounds.csv").unlink()
    held, tw = reference_jobs(cfg, tmp_path)
    assert held == [Job("alpha", "mnist", "a1", "ratio", 0)]
    # alpha/a1 is itself the twin of losses/g50/ratio, which the set does not hold: it is held as it is, and every
    # job of that training it covers (the Ratio Loss runs its monitor whatever monitor.record says) comes from it,
    # losses/g50/ratio too
    assert tw == {Job("beta", "mnist", "b0.1", "ratio", 0): held[0], Job("beyond", "mnist", "g50", "ratio", 0): held[0],
                  Job("ratio_stability", "mnist", "g50", "ratio", 0): held[0], Job("losses", "mnist", "g50", "ratio", 0): held[0]}


def test_missing_jobs_are_the_studys_less_the_held_and_copied_twins_by_their_source(tmp_path: Path) -> None:
    from fedbalance.jobs.config import jobs, twins
    from fedbalance.evidence.reference import missing_jobs

    cfg = load_config(MNIST)
    every, tw = jobs(cfg), twins(cfg)
    missing = missing_jobs(cfg, tmp_path)
    # an empty set: every job but the twins, each twin's trained job once, at the first place it is needed
    assert len(missing) == len(set(missing)) == len(set(every) - set(tw))
    a1 = Job("alpha", "mnist", "a1", "ratio", 0)
    assert a1 not in missing and tw[a1] == Job("losses", "mnist", "g50", "ratio", 0)
    first_user = min(every.index(j) for j in every if j == tw[a1] or tw.get(j) == tw[a1])
    before = {tw.get(j, j) for j in every[:first_user]}
    assert missing.index(tw[a1]) == len([j for j in dict.fromkeys(tw.get(j, j) for j in every[:first_user])])
    assert tw[a1] not in before
    # holding the trained job removes it and every twin it is copied to; another job stays missing
    write_job(tmp_path, tw[a1])
    after = missing_jobs(cfg, tmp_path)
    assert tw[a1] not in after and len(after) == len(missing) - 1
    assert Job("alpha", "mnist", "a2", "ratio", 0) in after


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("snakemake") is None, reason="snakemake is not installed")
def test_render_from_the_reference_set(tmp_path: Path) -> None:
    """Render the whole committed set (no training): cells equal the jobs' own values, and docs/ holds the render.
    The set is read where it is committed (a copy outside the checkout is refused as uncommitted evidence), and the
    render leaves it as it was."""
    ref = REFERENCE
    before = {p: p.stat().st_mtime_ns for p in ref.rglob("*")}
    metrics = {Job.from_path(str(p.parent.relative_to(ref))): json.loads(p.read_text()) for p in ref.glob("**/metrics.json")}
    assert sum(j.experiment == "losses" for j in metrics) >= 2, "the committed reference set has no finished losses job"
    cfg = copy.deepcopy(read_yaml(MNIST))
    cfg.update(reference_dir=str(ref), results_dir="results_reference")
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    t0 = time.perf_counter()
    r = subprocess.run(["snakemake", "-s", str(SNAKEFILE), "--directory", str(tmp_path), "--cores", "2",
                        "--configfile", str(tmp_path / "c.yaml")], capture_output=True, text=True, timeout=1200)
    print(f"\nrendered {len(metrics)} reference jobs in {time.perf_counter() - t0:.0f} s")
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    assert "rule train" not in r.stdout + r.stderr
    res = tmp_path / "results_reference"
    final = pd.read_csv(res / "aggregate" / "final.csv")
    held, tw = reference_jobs(load_config(cfg), ref)
    assert len(final) == len(held) + len(tw) and len(held) == len(metrics)
    # each Res_3_datasets MNIST cell: the mean over seeds of the jobs' own acc_minority, in %
    cmp = pd.read_csv(res / "tables" / "Res_3_datasets_vs_paper.csv")
    column = {gamma_setting(g): label for label, g in GAMMAS}
    cells: dict[tuple[str, str], list[float]] = {}
    by_seed: dict[tuple[str, str], dict[int, float]] = {}
    for job, m in metrics.items():
        if job.experiment == "losses":
            cells.setdefault((job.setting, job.loss), []).append(100 * m["final"]["acc_minority"])
            by_seed.setdefault((job.setting, job.loss), {})[job.seed] = 100 * m["final"]["acc_minority"]
    checked = 0
    rows = ("ce", "focal", "ghmc", "ratio")  # the table's rows: a cell is read on the seeds another row of its column holds
    for (setting, loss), vals in cells.items():
        row = cmp[(cmp.dataset == "mnist") & (cmp.column == column[setting]) & (cmp.row == loss) & (cmp.metric == "acm")]
        if loss == "ratio_rel":
            assert row.empty
            continue
        others = set().union(*(by_seed.get((setting, o), {}).keys() for o in rows if o != loss))
        kept = [v for seed, v in by_seed[(setting, loss)].items() if seed in others or not others]
        assert len(row) == 1, (setting, loss)
        assert row.ours_mean.iloc[0] == pytest.approx(sum(kept) / len(kept), abs=0.006), (setting, loss)
        assert row.n_seeds.iloc[0] == len(kept)
        checked += 1
    assert checked >= 1
    fid = pd.read_csv(res / "tables" / "Fidelity.csv", dtype={"seed_ids": str})
    assert len(fid) == len(cells)
    for (setting, loss), vals in cells.items():
        # a Fidelity row is read on the seeds every loss of its Γ holds
        common = set.intersection(*(set(v) for (s, _), v in by_seed.items() if s == setting))
        got = fid[(fid.setting == setting) & (fid.loss == loss)].iloc[0]
        kept = [v for seed, v in by_seed[(setting, loss)].items() if seed in common]
        assert got.acm_final == pytest.approx(sum(kept) / len(kept), abs=1e-9), (setting, loss)
        assert (got.seed_ids, got.held) == (",".join(map(str, sorted(common))), len(vals)), (setting, loss)
    assert (res / "claims.md").read_text().count("| ") > 30 and (res / "paper_tables.tex").is_file()
    assert all((res / "figures" / f).stat().st_size > 0 for f in ("fig_monitoring.png", "fig_monitoring.pdf"))
    # docs/fidelity.md and docs/claims-mnist.md hold this render of the committed set (regenerate: reference/README.md)
    check = subprocess.run([sys.executable, "-m", "fedbalance", "reference", "docs", "--check",
                            "--rendered", "results_reference", "--reference", str(REFERENCE),
                            "--docs", str(REPO / "docs")], capture_output=True, text=True, cwd=tmp_path,
                           env={**os.environ, "PYTHONPATH": str(REPO / "src")})
    assert check.returncode == 0, check.stdout + check.stderr
    assert {p: p.stat().st_mtime_ns for p in ref.rglob("*")} == before


def test_the_set_renders_the_same_jobs_whatever_the_order_of_the_experiments() -> None:
    """Which of two jobs that train alike the config trains depends on the order of its experiments (a YAML dump
    sorts them); the jobs a reference set renders do not: a held job covers the other either way."""
    raw = copy.deepcopy(read_yaml(MNIST))
    held, copied = reference_jobs(load_config(raw), REFERENCE)
    raw["experiments"] = dict(sorted(raw["experiments"].items()))  # beyond and alpha before losses now
    held2, copied2 = reference_jobs(load_config(raw), REFERENCE)
    assert set(held2) == set(held) and set(copied2) == set(copied)
    assert Job("beyond", "mnist", "g10", "ce", 0) in copied2 and copied2[Job("beyond", "mnist", "g10", "ce", 0)] == \
        Job("losses", "mnist", "g10", "ce", 0)
