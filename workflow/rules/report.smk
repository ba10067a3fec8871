# Stage 5: one job per LaTeX table (+ std, + comparison with the published numbers), one per table's HTML page
# and one per figure (PDF + PNG), claims.md and paper_tables.tex, and the pages `snakemake --report` shows: each
# table as HTML, each figure, claims, Fidelity and Reproduction as HTML, and the landing page (the study: config,
# datasets, each family's protocol, where the numbers come from), each with a caption filled from the study
# (workflow/report/table.rst, figure.rst: jinja2 over the job's wildcards and params) in a category named after
# its experiment family. A table or figure that no job of the study fills (fedbalance.presentation.study) is not
# shown: the landing page and paper_tables.tex list it as not run. Every table's LaTeX and CSV files are still
# written (cells without jobs print '–'; Reproduction.md reads them all). Each job declares what it reads: the
# tidy CSVs it uses and the code that draws it (a figure's own module, not the others').

import os

from fedbalance.presentation.study import (
    describe,
    figure_reads,
    figures_run,
    filling,
    identity,
    table_reads,
    tables_run,
)
from fedbalance.jobs.config import study_plugins
from fedbalance.presentation.table_specs import TABLE_SUFFIXES

TABLES_DIR = result("tables")
FIGURES_DIR = result("figures")
FIGURE_FORMATS = presentation_figures.FORMATS
# A table or figure is drawn from the datasets it names, or it is not run: a figure of one dataset (the CIFAR10
# curves) needs that dataset's jobs (config/quick.yaml, MNIST alone, does not draw it).
TABLES_RUN, TABLES_NOT_RUN = tables_run(JOBS)
FIGURES_RUN, FIGURES_NOT_RUN = figures_run(JOBS)

TABLE_FILES = [f"{TABLES_DIR}/{label}{suffix}" for label in TABLES for suffix in TABLE_SUFFIXES]
TABLE_PAGES = [f"{TABLES_DIR}/{label}.html" for label in TABLES_RUN]
FIGURE_FILES = [
    f"{FIGURES_DIR}/{name}.{ext}" for name in FIGURES_RUN for ext in (*FIGURE_FORMATS, presentation_figures.POINTS)
]
SUMMARY_FILES = [result("claims.md"), result("paper_tables.tex")]
FIDELITY_FILES = [f"{TABLES_DIR}/Fidelity.md", f"{TABLES_DIR}/Fidelity.csv", f"{TABLES_DIR}/Reproduction.md"]
# the Markdown summaries as HTML pages (rule markdown_page), and the report's landing page (rule landing_page)
PAGES = {
    result("claims.html"): result("claims.md"),
    **{f"{TABLES_DIR}/{n}.html": f"{TABLES_DIR}/{n}.md" for n in ("Fidelity", "Reproduction")},
}
LANDING_PAGE = result("report", "workflow.rst")
STUDY_PAGE = result("study.html")
REPORT_FILES = [*TABLE_PAGES, *PAGES, LANDING_PAGE, STUDY_PAGE]
LOSS_BASES = {name: v["loss"] for name, v in (config.get("loss_variants") or {}).items()}
# Which study this is (the landing page and paper_tables.tex say so)
STUDY = identity(
    config,
    JOBS,
    configfiles=[os.path.relpath(f) for f in workflow.config_settings.configfiles],
    trained=len(JOBS) - len(TWINS) - len(_derived) - len(FROM_REFERENCE),
    copied=len(TWINS) + len(_twins if REFERENCE_DIR is not None else {}),
    derived=len(_derived),
    reference_dir=REFERENCE_DIR,
)


wildcard_constraints:
    label=_alternation(TABLES),
    name=_alternation(FIGURES),


localrules:
    table,
    table_page,
    figure,
    claims,
    paper_tables,
    fidelity,
    reproduction,
    markdown_page,
    landing_page,


rule table:
    input:
        unpack(table_inputs),
    output:
        [f"{TABLES_DIR}/{{label}}{suffix}" for suffix in TABLE_SUFFIXES],
    log:
        result("logs", "tables", "{label}.log"),
    conda:
        "../envs/report.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        out_dir=lambda wildcards, output: str(Path(output[0]).parent),
        estimator=DEFAULT_ESTIMATOR,
        study_config=study_config(),
    script:
        "../scripts/table.py"


rule table_page:
    input:
        final=TIDY["final"],
        rounds=TIDY["rounds"],
        code=[*TABLES_CODE, str(PRESENTATION / "html.py")],
        protocol=PAPER_PROTOCOL,
    output:
        report(
            f"{TABLES_DIR}/{{label}}.html",
            caption="../report/table.rst",
            category=lambda wildcards: TABLES[wildcards.label].family,
            subcategory="Tables",
        ),
    log:
        result("logs", "tables", "{label}.html.log"),
    conda:
        "../envs/report.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        estimator=DEFAULT_ESTIMATOR,
        family=lambda wildcards: TABLES[wildcards.label].family,
        study=lambda wildcards: table_study(wildcards.label),
        study_config=study_config(),
    script:
        "../scripts/table_page.py"


rule figure:
    input:
        unpack(figure_inputs),
    output:
        [
            report(
                f"{FIGURES_DIR}/{{name}}.{ext}",
                caption="../report/figure.rst",
                category=lambda wildcards: FIGURES[wildcards.name].family,
                subcategory="Figures",
            )
            for ext in FIGURE_FORMATS
        ],
        points=f"{FIGURES_DIR}/{{name}}.{presentation_figures.POINTS}",
    log:
        result("logs", "figures", "{name}.log"),
    conda:
        "../envs/report.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        out_dir=lambda wildcards, output: str(Path(output[0]).parent),
        dataset=lambda wildcards: FIGURES[wildcards.name].dataset,
        estimator=DEFAULT_ESTIMATOR,
        family=lambda wildcards: FIGURES[wildcards.name].family,
        study=lambda wildcards: figure_study(wildcards.name),
    script:
        "../scripts/figure.py"


rule claims:
    input:
        final=TIDY["final"],
        rounds=TIDY["rounds"],
        looks=claims_looks(),
        code=[str(PRESENTATION / "claims.py"), *TABLES_CODE, str(TEMPLATES / "claims.md.j2")],
    output:
        result("claims.md"),
    log:
        result("logs", "claims.log"),
    conda:
        "../envs/report.yaml"
    threads: 1
    resources:
        mem_mb=4000,
        runtime=30,
    params:
        estimator=DEFAULT_ESTIMATOR,
    script:
        "../scripts/claims.py"


rule paper_tables:
    input:
        # the files it \input's: the tables the study fills (the others are listed as not run)
        tables=[
            f"{TABLES_DIR}/{label}{suffix}" for label in TABLES_RUN for suffix in (".tex", "_std.tex", "_vs_paper.tex")
        ],
        code=[*TABLES_CODE, str(TEMPLATES / "paper_tables.tex.j2")],
    output:
        report(result("paper_tables.tex"), caption="../report/paper_tables.rst", category="summary"),
    log:
        result("logs", "paper_tables.log"),
    conda:
        "../envs/report.yaml"
    threads: 1
    resources:
        mem_mb=1000,
        runtime=5,
    params:
        tables_dir=lambda wildcards, output: str(Path(output[0]).parent / "tables"),
        labels=TABLES_RUN,
        not_run=TABLES_NOT_RUN,
        study=STUDY,
        estimator=DEFAULT_ESTIMATOR,
    script:
        "../scripts/paper_tables.py"


rule fidelity:
    input:
        final=TIDY["final"],
        rounds=TIDY["rounds"],
        code=[str(PRESENTATION / "fidelity.py"), *TABLES_CODE],
    output:
        markdown=f"{TABLES_DIR}/Fidelity.md",
        csv=f"{TABLES_DIR}/Fidelity.csv",
    log:
        result("logs", "fidelity.log"),
    conda:
        "../envs/report.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        bases=LOSS_BASES,
    script:
        "../scripts/fidelity.py"


rule reproduction:
    input:
        tables=[f"{TABLES_DIR}/{label}_vs_paper.csv" for label in TABLES],
        code=[str(PRESENTATION / "fidelity.py"), *TABLES_CODE],
    output:
        f"{TABLES_DIR}/Reproduction.md",
    log:
        result("logs", "reproduction.log"),
    conda:
        "../envs/report.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        datasets=config["datasets"],
    script:
        "../scripts/reproduction.py"


rule markdown_page:
    input:
        markdown=lambda wildcards: PAGES[f"{wildcards.folder}/{wildcards.page}.html"],
        code=str(PRESENTATION / "html.py"),
    output:
        report(
            "{folder}/{page}.html",
            caption="../report/summary.rst",
            category="summary",
        ),
    log:
        result("logs", "pages", "{folder}", "{page}.log"),
    wildcard_constraints:
        folder=_paths({str(Path(p).parent) for p in PAGES}),
        page="claims|Fidelity|Reproduction",
    conda:
        "../envs/report.yaml"
    threads: 1
    resources:
        mem_mb=1000,
        runtime=5,
    script:
        "../scripts/markdown_page.py"


rule landing_page:
    input:
        code=[str(PRESENTATION / "study.py")],
    output:
        landing=LANDING_PAGE,
        study=report(STUDY_PAGE, caption="../report/study.rst", category="summary"),
    log:
        result("logs", "landing_page.log"),
    conda:
        "../envs/report.yaml"
    threads: 1
    resources:
        mem_mb=1000,
        runtime=5,
    params:
        study=STUDY,
        jobs=[[j.experiment, j.dataset, j.setting, j.loss, j.seed] for j in JOBS],
        tables_not_run=TABLES_NOT_RUN,
        figures_not_run=FIGURES_NOT_RUN,
        plugins=study_plugins(config),
    script:
        "../scripts/landing_page.py"
