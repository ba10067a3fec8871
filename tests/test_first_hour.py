"""A newcomer's first hour (issue 77): the workflow's errors for a user's mistake are one line, the report's landing
page fits a screen and links the summary pages first, the claims page opens with its verdicts, one display name per
loss, the figures' ticks, legends and captions, the LaTeX a reader compiles."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
SNAKEFILE = REPO / "workflow" / "Snakefile"
QUICK = REPO / "config" / "quick.yaml"


def _snakemake(tmp: Path, cfg: dict, *args: str) -> subprocess.CompletedProcess:
    path = tmp / "study.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return subprocess.run(["snakemake", "-s", str(SNAKEFILE), "--directory", str(tmp / "run"), "--configfile",
                           str(path), *args], capture_output=True, text=True, timeout=600)


# --- item 3: a user's mistake reaches the console as one line ------------------------------------------------------


@pytest.mark.skipif(shutil.which("snakemake") is None, reason="snakemake is not installed")
def test_a_missing_data_file_is_one_line_without_a_traceback(tmp_path: Path) -> None:
    """Real MNIST named, its files absent and ``download: false``: rule prepare_data stops with the library's line
    naming the missing file on the console; the traceback goes to the rule's log alone."""
    cfg = yaml.safe_load(QUICK.read_text())
    cfg["datasets"]["mnist"]["source"] = "mnist"
    cfg["download"], cfg["data_dir"] = False, str(tmp_path / "nodata")
    r = _snakemake(tmp_path, cfg, "--cores", "1", "--", "results/data/mnist.json")
    out = r.stdout + r.stderr
    assert r.returncode != 0
    lines = [line for line in out.splitlines() if line.startswith("fedbalance: error in rule prepare_data:")]
    missing = str(tmp_path / "nodata" / "MNIST" / "raw" / "train-images-idx3-ubyte")
    assert len(lines) == 1 and missing in lines[0], out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    log = (tmp_path / "run" / "results" / "logs" / "data" / "mnist.log").read_text()
    assert "Traceback" in log and missing in log


@pytest.mark.skipif(shutil.which("snakemake") is None, reason="snakemake is not installed")
def test_a_wrong_typed_command_line_value_says_how_to_write_it(tmp_path: Path) -> None:
    """``--config download=false`` (Snakemake reads it as the string 'false'): the line says to write False."""
    r = _snakemake(tmp_path, yaml.safe_load(QUICK.read_text()), "-n", "--config", "download=false")
    out = r.stdout + r.stderr
    assert r.returncode != 0 and "Building DAG" not in out
    assert "download: 'false' is not of type 'boolean'" in out and "write download=True or download=False" in out, out


def test_command_line_hint_names_the_written_form() -> None:
    from fedbalance.jobs.config import command_line_hint

    assert command_line_hint({"threads": "two"}, "threads: 'two' is not of type 'integer'") == (
        "; given as --config threads=two, write threads=N with N a whole number (e.g. threads=2)")
    # a key from a config file, or an error that is not about a type, gets no hint
    assert command_line_hint({}, "threads: 'two' is not of type 'integer'") == ""
    assert command_line_hint({"threads": 0}, "threads: 0 is less than the minimum of 1") == ""


# --- item 1: the report's landing page fits a screen, the summary pages linked first --------------------------------

LANDING_WIDTH_CHARS = 70
"""Characters a line of the landing page holds: Snakemake shows it in a ``prose prose-sm max-w-lg`` box (32 rem, 512 px,
14 px type: about 73 characters of 7 px), rounded down."""
LINE_PX, PARAGRAPH_PX, SCREEN_PX = 24, 16, 800
"""prose-sm's line height (14 px x 1.714) and paragraph margin, and the height of a 1280 x 800 window."""


CHROMIUM = next((c for c in ("chromium", "chromium-browser", "google-chrome") if shutil.which(c)), None)

PROBE = """<script>
let tries = 0;
const probe = setInterval(() => {
  const first = document.querySelector(".prose p, .prose h1, .prose h2");
  if (first || ++tries > 40) {
    clearInterval(probe);
    document.title = "TOP=" + (first ? Math.round(first.getBoundingClientRect().top) : "none");
  }
}, 250);
</script>"""
"""Appended to a copy of report.html: after the page has drawn, the title says where the landing page's first block
starts (pixels from the window's top; negative: cut off above it)."""


def landing_top(report: Path, width: int, height: int) -> float:
    """Where the first block of a Snakemake report's landing page starts in headless Chromium at ``width`` x
    ``height`` (Debian's ``chromium``; .ci/run installs it)."""
    from conftest import needs_ci_tool

    needs_ci_tool(None if CHROMIUM else "chromium is not installed (apt-get install chromium)")
    probe = report.with_name(report.stem + ".probe.html")
    head, tag, tail = report.read_text(errors="replace").rpartition("</body>")  # the page's own (scripts hold others)
    probe.write_text(head + PROBE + tag + tail)
    r = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", f"--window-size={width},{height}",
                        "--virtual-time-budget=20000", "--dump-dom", probe.as_uri()], capture_output=True, text=True,
                       timeout=300)
    m = re.search(r"<title>TOP=(-?\d+)</title>", r.stdout)
    assert m, (r.stdout[:500], r.stderr[-2000:])
    return float(m.group(1))


def rendered_landing(text: str, targets: list[str]) -> str:
    """The landing page as Snakemake's report renders it (snakemake.report.auto_report): the link targets it defines
    for its files appended, jinja2 with ``files``, then docutils' html_body."""
    from types import SimpleNamespace

    from docutils.core import publish_parts
    from jinja2 import Environment

    links = "\n".join(f".. _{t}: javascript:app.showResultInfo('{t}')" for t in targets)
    files = [SimpleNamespace(target=t) for t in targets]
    source = Environment().from_string(text + "\n\n" + links + "\n").render(files=files)
    return publish_parts(source, writer="html", settings_overrides={"report_level": 2, "halt_level": 2})[
        "html_body"]


def estimated_height(html: str) -> int:
    """Pixels the landing page's paragraphs, list items and table rows take at ``LANDING_WIDTH_CHARS`` a line (each: its
    lines, then a paragraph's margin)."""
    paragraphs = [re.sub(r"<[^>]+>", " ", p) for _, p in re.findall(r"<(p|li|tr)\b[^>]*>(.*?)</\1>", html, re.S)]
    lines = sum(-(-len(" ".join(p.split())) // LANDING_WIDTH_CHARS) for p in paragraphs)
    return lines * LINE_PX + len(paragraphs) * PARAGRAPH_PX


def test_the_landing_page_fits_a_screen_and_links_the_summaries_first() -> None:
    """The quick study's landing page, rendered as Snakemake does: valid reStructuredText, short enough that its top
    is not cut in a 1280 x 800 window (Snakemake centres it vertically; a taller page loses its top), the links to the
    claims, Fidelity, Reproduction and study pages the first links on it; a page the report lacks is not linked."""
    from fedbalance.jobs.config import jobs, load_config
    from fedbalance.presentation.study import PAGES, identity, landing_page

    cfg = load_config(QUICK)
    study = jobs(cfg)
    who = identity(cfg, study, configfiles=["config/quick.yaml"], trained=38, copied=8, derived=1)
    text = landing_page(cfg, study, who)
    pages = [name for name, _ in PAGES]
    html = rendered_landing(text, [*pages, "Res_3_datasets.html"])
    assert "System Message" not in html and "trained by this workflow: 47 jobs" in html
    links = re.findall(r'<a class="reference external" href="javascript:app.showResultInfo\(\'([^\']+)\'\)">', html)
    assert links == pages, links
    height = estimated_height(html)
    assert 4 * LINE_PX < height <= SCREEN_PX - 200, height  # room for Snakemake's padding and its metadata list
    partial = rendered_landing(text, ["claims.html"])
    assert "System Message" not in partial and re.findall(r"showResultInfo\('([^']+)'\)", partial) == ["claims.html"]


def test_the_claims_page_opens_with_its_tally_and_verdicts(tmp_path: Path) -> None:
    """claims.md: the title, then the tally of the verdicts (counted here from the table's verdict column), then the
    verdict table; the method after them."""
    from collections import Counter

    from conftest import write_job

    from fedbalance.common.records import Job
    from fedbalance.jobs.aggregate import collect
    from fedbalance.presentation.claims import write_claims

    for seed, (ce, ratio) in enumerate([(0.30, 0.80), (0.34, 0.84), (0.31, 0.86)]):
        write_job(tmp_path / "res", Job("losses", "mnist", "g10", "ce", seed), acm=ce, auc=0.8)
        write_job(tmp_path / "res", Job("losses", "mnist", "g10", "ratio", seed), acm=ratio, auc=0.9)
    final, rounds = collect(tmp_path / "res")
    text = write_claims(final, rounds, tmp_path / "claims.md").read_text()
    lines = [line for line in text.splitlines() if line.strip()]
    assert lines[0].startswith("# ") and lines[1].startswith("**Tally**: ")
    assert lines[2].startswith("| # | Claim | Reading | Looks | Verdict |")
    assert text.index("| # | Claim") < text.index("## How the verdicts are reached")
    verdicts = Counter(re.findall(r"^\|[^|]*\|[^|]*\|[^|]*\|[^|]*\| \*\*([^*]+)\*\* \|", text, re.M))
    said = dict((v, int(n)) for n, v in re.findall(r"(\d+) \*([^*]+)\*", lines[1]))
    assert said == dict(verdicts) and sum(said.values()) > 1, (said, verdicts)


# --- item 5: one display name per loss and estimator ---------------------------------------------------------------


def test_each_loss_has_one_name_in_tables_latex_and_figures(tmp_path: Path) -> None:
    """The loss comparison's jobs: the HTML table's rows, the LaTeX table's rows, the loss figure's and the
    beyond-the-paper figure's legends name each loss alike (CE, Focal, GHM-C, Ratio), as the docs' prose does."""
    from conftest import write_job

    from fedbalance.common.records import Job
    from fedbalance.jobs.aggregate import collect
    from fedbalance.presentation.figures import maker
    from fedbalance.presentation.tables import TABLES, cell_values, table_frame, write_table

    root = tmp_path / "res"
    for seed in range(2):
        for i, loss in enumerate(("ce", "focal", "ghmc", "ratio")):
            write_job(root, Job("losses", "mnist", "g10", loss, seed), acm=0.3 + 0.1 * i + 0.01 * seed, auc=0.8)
        for loss in ("ce", "ratio"):
            write_job(root, Job("beyond", "mnist", "g10", loss, seed), acm=0.4 + 0.01 * seed, auc=0.8)
    final, rounds = collect(root)
    expected = ["CE", "Focal", "GHM-C", "Ratio"]
    frame, _ = table_frame(TABLES["Res_3_datasets"], cell_values(TABLES["Res_3_datasets"], final, rounds))
    assert [r for m, r in frame.index if m == "Ac.M"] == expected
    write_table("Res_3_datasets", final, rounds, tmp_path / "tables")
    tex = (tmp_path / "tables" / "Res_3_datasets.tex").read_text()
    rows = [line.split("&")[1].strip() for line in tex.splitlines() if line.count("&") > 2
            and line.split("&")[1].strip() in {*expected, "GHM-C"}]
    assert rows == expected * 2, tex  # Ac.M, then AUC
    _, points = maker("Losses_acm_gamma")(final, rounds, None)
    assert list(dict.fromkeys(points.series)) == expected
    _, beyond = maker("Beyond_paper")(final, rounds, None)
    assert list(dict.fromkeys(beyond.series)) == ["CE", "Ratio"]


def test_monitor_under_imbalance_counts_the_seeds_it_draws() -> None:
    """Two seeds of Ratio-Loss jobs at two Γ, each recording the default estimator and the uniform guess: one line
    each, its legend saying 2 seeds, each point the mean over the seeds of each seed's mean over its rounds (the
    uniform guess was counted twice, once as a plug-in estimator: "4 seeds")."""
    import pandas as pd

    from fedbalance.presentation.figures import maker

    cs = {("g10", 0): ([0.90, 0.94], [0.80, 0.82]), ("g10", 1): ([0.92, 0.96], [0.81, 0.85]),
          ("g20", 0): ([0.85, 0.87], [0.70, 0.74]), ("g20", 1): ([0.89, 0.91], [0.72, 0.76])}
    rounds = pd.DataFrame([{"experiment": "losses", "dataset": "mnist", "setting": s, "loss": "ratio", "seed": seed,
                            "round": r + 1, "cs_pooled": pooled[r], "cs_uniform": uniform[r]}
                           for (s, seed), (pooled, uniform) in cs.items() for r in range(2)])
    fig, points = maker("Monitor_under_imbalance")(None, rounds, None)
    assert sorted(set(points.series)) == ["pooled", "uniform guess N/Q"] and len(points) == 4
    assert (points.n == 2).all()
    got = points.set_index(["series", "x_label"])["mean"]
    assert got[("pooled", "10:1")] == pytest.approx((0.92 + 0.94) / 2)
    assert got[("uniform guess N/Q", "20:1")] == pytest.approx((0.72 + 0.74) / 2)
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert "pooled (2 seeds)" in labels and "uniform guess N/Q (2 seeds)" in labels


def test_rounds_are_ticked_at_whole_numbers() -> None:
    """A curve over rounds 1 to 3 (a band): every x tick a whole number (matplotlib's own would put 1.25, 1.5, ...)."""
    import pandas as pd

    from fedbalance.presentation.figures.common import POINT_COLUMNS, draw_points, plt

    points = pd.DataFrame([{"panel": "mnist", "series": "a", "x": x, "x_label": "", "n": 2, "mean": 0.5 + 0.1 * x,
                            "low": 0.4 + 0.1 * x, "high": 0.6 + 0.1 * x, "clipped": "", "paper": float("nan"),
                            "paper_x": float("nan")} for x in (1, 2, 3)], columns=POINT_COLUMNS)
    fig, ax = plt.subplots()
    draw_points(ax, points, band=True)
    fig.canvas.draw()
    ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
    assert len(ticks) >= 2 and all(float(t).is_integer() for t in ticks), ticks
    plt.close(fig)


def test_the_cli_prints_the_tables_auc() -> None:
    """`fedbalance train`'s last line: the AUC the tables print (auc_hard), not the score-based micro AUC."""
    from fedbalance.cli import final_line

    metrics = {"final": {"acc": 0.95, "acc_minority": 0.81234, "auc_hard": 0.92149, "auc_micro": 0.98611},
               "wall_time_s": 12.34}
    assert final_line(metrics) == "acc 0.9500, Ac.M 0.8123, AUC 0.9215, 12.3 s"


# --- item 6: LaTeX a reader compiles --------------------------------------------------------------------------------


def _beyond_jobs(root: Path, seeds: int = 2) -> None:
    from conftest import write_job

    from fedbalance.common.records import Job

    for seed in range(seeds):
        for i, loss in enumerate(("ce", "ratio", "la", "fedrs")):
            for g in ("g10", "g20", "g50", "g100"):
                write_job(root, Job("beyond", "mnist", g, loss, seed), acm=0.2 + 0.1 * i + 0.01 * seed, auc=0.8)


def test_a_vs_paper_table_without_published_values_is_a_line(tmp_path: Path) -> None:
    """Beyond_paper has no published value in any cell: its _vs_paper.tex is one line saying so, no table; the loss
    comparison's cells that have one are a longtable row each."""
    from conftest import write_job

    from fedbalance.common.records import Job
    from fedbalance.jobs.aggregate import collect
    from fedbalance.presentation.tables import write_table

    root = tmp_path / "res"
    _beyond_jobs(root)
    for seed in range(2):
        write_job(root, Job("losses", "mnist", "g10", "ce", seed), acm=0.3, auc=0.8)
    final, rounds = collect(root)
    write_table("Beyond_paper", final, rounds, tmp_path / "tables")
    tex = (tmp_path / "tables" / "Beyond_paper_vs_paper.tex").read_text()
    assert "tabular" not in tex and "longtable" not in tex
    assert "none of its 32 cells with numbers in this study has a published value" in tex  # 4 losses x 4 Γ x 2 metrics
    write_table("Res_3_datasets", final, rounds, tmp_path / "tables")
    tex = (tmp_path / "tables" / "Res_3_datasets_vs_paper.tex").read_text()
    assert "\\begin{longtable}" in tex and tex.count("\\\\\n") - 2 == 2  # two header lines, Ac.M and AUC of CE at 10:1


def test_paper_tables_compiles_alone_with_a_long_table(tmp_path: Path) -> None:
    """paper_tables.tex copied alone into an empty folder (as the report bundles it) compiles; a comparison of 150 rows
    breaks across pages (longtable) with no overfull box."""
    from conftest import needs_ci_tool

    from fedbalance.presentation.tables import write_paper_tables

    needs_ci_tool(None if shutil.which("pdflatex") else "pdflatex is not installed (apt-get install texlive-latex-base)")
    from fedbalance.presentation.tables import environment

    tables = tmp_path / "results" / "tables"
    tables.mkdir(parents=True)
    rows = [["Ac.M", "MNIST", f"{i}:1", "CE", f"{i}.00 $\\pm$ 1.00", "5", "50.00", f"{i - 50:+.2f}"] for i in range(150)]
    (tables / "Long.tex").write_text("Long table.\n")
    (tables / "Long_std.tex").write_text("No standard deviations.\n")
    (tables / "Long_vs_paper.tex").write_text(environment().get_template("vs_paper.tex.j2").render(
        title="Long", rows=rows, left_out=0, unpublished=0, protocols="", mark=""))
    doc = write_paper_tables(tmp_path / "results" / "paper_tables.tex", tables, labels=["Long"])
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(doc, alone / "paper_tables.tex")
    for _ in range(2):
        run = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "paper_tables.tex"], cwd=alone,
                             capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stdout[-3000:]
    log = (alone / "paper_tables.log").read_text(errors="replace")
    assert "Overfull \\vbox" not in log, log[-3000:]
    pages = int(re.search(r"Output written on paper_tables\.pdf \((\d+) pages?", log).group(1))
    assert pages >= 4, pages  # 150 rows do not fit one landscape page: the table went on across pages


# --- item 9: a long step says how far it is ------------------------------------------------------------------------


def test_a_long_step_prints_its_progress_on_the_console(tmp_path: Path, capfd, monkeypatch) -> None:
    """rule from_reference's loop (``_common.progress``) under ``_common.logged``: a line on the console at every
    tenth of the jobs, with the count, while everything else goes to the log."""
    from types import SimpleNamespace

    monkeypatch.syspath_prepend(str(REPO / "workflow" / "scripts"))
    import _common

    smk = SimpleNamespace(rule="from_reference", log=[str(tmp_path / "r.log")])
    with _common.logged(smk):
        print("only in the log")
        for i in range(1, 21):
            _common.progress(smk, i, 20, "jobs written", 0.0)
    err = capfd.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("rule from_reference:")]
    assert [line.split(" (")[0] for line in lines] == [f"rule from_reference: {i} of 20 jobs written"
                                                       for i in range(2, 21, 2)]
    assert "only in the log" not in err and "only in the log" in (tmp_path / "r.log").read_text()


# --- item 4: conda environments, CPU and CUDA, pinned ---------------------------------------------------------------


def test_conda_envs_are_pinned_from_the_lock_and_chosen_by_device() -> None:
    """workflow/envs: each file is what ``fedbalance envs`` writes from pins.txt (none edited by hand); every package
    is one the project declares, pinned inside its declared range; the CPU environment asks PyTorch's CPU builds, the
    CUDA one its CUDA builds; the data and training rules take theirs from the config's ``device``. Not tested here:
    that conda-forge holds each pin (no channel is reachable from CI), nor PyPI (tests use no network): pins.txt was
    written from a venv that pip installed from PyPI."""
    import tomllib

    from packaging.requirements import Requirement
    from packaging.version import Version

    from fedbalance.jobs.envs import BUILD, CONDA_NAME, ENVS, PINS, env_for, env_text, read_pins

    envs = REPO / "workflow" / "envs"
    python, pins = read_pins(envs / PINS)
    assert {p.name for p in envs.iterdir()} == {PINS, *(f"{n}.yaml" for n in ENVS)}
    declared = {Requirement(d).name.lower(): Requirement(d) for d in
                tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]}
    for name in ENVS:
        text = (envs / f"{name}.yaml").read_text()
        assert text == env_text(name, pins, python), f"{name}.yaml is not what `fedbalance envs` writes"
        deps = yaml.safe_load(text)["dependencies"]
        assert deps[0] == f"python={python}" and yaml.safe_load(text)["channels"] == ["conda-forge", "nodefaults"]
        by_conda = {CONDA_NAME.get(p, p): p for p in ENVS[name]}
        for dep in deps[1:]:
            conda, version, *build = dep.split("=")
            pkg = by_conda[conda]
            assert pkg in declared and declared[pkg].specifier.contains(Version(version)), dep
            assert version == pins[pkg] and build == ([BUILD[name][pkg]] if pkg in BUILD.get(name, {}) else []), dep
    cpu, cuda = (yaml.safe_load((envs / f"torch-{k}.yaml").read_text())["dependencies"] for k in ("cpu", "cuda"))
    assert [d for d in cpu if d.startswith(("pytorch=", "torchvision="))] == [
        f"pytorch={pins['torch']}=cpu*", f"torchvision={pins['torchvision']}=cpu*"]
    assert all(d.endswith("=*cuda*") for d in cuda if d.startswith(("pytorch=", "torchvision=")))
    assert env_for(False) == "../envs/torch-cpu.yaml" and env_for(True) == "../envs/torch-cuda.yaml"
    for rule, smk in (("prepare_data", "data"), ("train", "train"), ("keep", "train"), ("derive", "derive")):
        body = (REPO / "workflow" / "rules" / f"{smk}.smk").read_text().split(f"rule {rule}:\n")[1].split("\nrule ")[0]
        assert "    conda:\n        torch_env\n" in body, rule


def test_the_envs_command_writes_and_checks(tmp_path: Path) -> None:
    """``fedbalance envs --dir D``: writes the lock and every environment; ``--check`` then finds nothing to change,
    and exits 1 naming the file once one is edited."""
    from fedbalance.cli import main

    assert main(["envs", "--dir", str(tmp_path)]) == 0
    assert main(["envs", "--dir", str(tmp_path), "--check"]) == 0
    (tmp_path / "report.yaml").write_text((tmp_path / "report.yaml").read_text().replace("numpy=", "numpy>="))
    assert main(["envs", "--dir", str(tmp_path), "--check"]) == 1


# --- item 10: the plug-in route ------------------------------------------------------------------------------------


def test_compare_reads_a_dotted_path_losss_own_parameters() -> None:
    """A loss variant named by dotted path takes its constructor's arguments from ``loss_params.<variant>`` (the
    engine's key, ``jobspec.loss_params_key``): the protocol ``compare`` and the tables read keeps them, so two runs
    that both set max_m 0.5 do not differ, and 0.5 against 0.3 does."""
    from fedbalance.jobs.config import protocol, protocol_differences

    def job(max_m: float) -> dict:
        return {"base_loss": "fedbalance.methods.losses:CrossEntropyLoss", "loss": "ldam",
                "loss_params": {"ldam": {"max_m": max_m}, "focal": {"gamma": 2.0}}}

    mine = protocol(job(0.5), "ldam")
    assert mine["loss_params.ldam.max_m"] == "0.5" and not any(k.startswith("loss_params.focal") for k in mine)
    same = protocol_differences({k: {v} for k, v in mine.items()}, {k: {v} for k, v in protocol(job(0.5), "ldam").items()})
    other = protocol_differences({k: {v} for k, v in mine.items()}, {k: {v} for k, v in protocol(job(0.3), "ldam").items()})
    assert same == {} and other == {"loss_params.ldam.max_m": ("0.5", "0.3")}


def test_the_docs_name_the_librarys_entry_point_groups_and_a_whole_module_snakefile() -> None:
    """The README's entry-point groups are the ones the library reads (``plugins.group`` of each ``plugins.KINDS``),
    and docs/usage.md's module Snakefile for a local clone is the whole one tests/test_module.py deploys, with
    ``config: config``."""
    from test_module import MODULE_SNAKEFILE

    from fedbalance.common import plugins

    readme = " ".join((REPO / "README.md").read_text().split())
    said = re.search(r"The entry-point groups are ((?:`[\w.]+`(?:, | and )?)+)", readme)
    assert said and re.findall(r"`([\w.]+)`", said.group(1)) == [plugins.group(k) for k in plugins.KINDS]
    usage = (REPO / "docs" / "usage.md").read_text()
    assert MODULE_SNAKEFILE.format(snakefile="/path/to/fedbalance/workflow/Snakefile") in usage
