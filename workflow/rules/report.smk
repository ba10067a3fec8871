# Stage 5: one job per LaTeX table (+ std, + comparison with the published numbers), one per
# figure (PDF + PNG), claims.md and paper_tables.tex, every one registered for `snakemake --report`
# with its caption (workflow/report/<name>.rst, through table.rst and figure.rst there) in a category
# named after the experiment family it comes from (the table's spec, the figure's registry entry).
# The library always writes every table and figure: cells whose jobs the config does not run are
# rendered as '–', so the file lists below do not depend on the config. Each job declares what it
# reads: the tidy CSVs it uses and the code that draws it (a figure's own module, not the others').

from fedbalance.presentation.figures import DEFAULT_DATASET
from fedbalance.presentation.table_specs import TABLE_SUFFIXES

TABLES_DIR = result("tables")
FIGURES_DIR = result("figures")
FIGURE_FORMATS = presentation_figures.FORMATS

TABLE_FILES = [f"{TABLES_DIR}/{label}{suffix}" for label in TABLES for suffix in TABLE_SUFFIXES]
FIGURE_FILES = [f"{FIGURES_DIR}/{name}.{ext}" for name in FIGURES for ext in FIGURE_FORMATS]
# A figure drawn from one dataset (e.g. the CIFAR10 curves) uses the first dataset of the config
# when that dataset is not part of the study (config/quick.yaml has only mnist).
FIGURE_DATASETS = {name: (d if d in config["datasets"] else DATASETS[0]) for name, d in DEFAULT_DATASET.items()}
SUMMARY_FILES = [result("claims.md"), result("paper_tables.tex")]
FIDELITY_FILES = [f"{TABLES_DIR}/Fidelity.md", f"{TABLES_DIR}/Fidelity.csv", f"{TABLES_DIR}/Reproduction.md"]
LOSS_BASES = {name: v["loss"] for name, v in (config.get("loss_variants") or {}).items()}


wildcard_constraints:
    label=_alternation(TABLES),
    name=_alternation(FIGURES),


localrules:
    table,
    figure,
    claims,
    paper_tables,
    fidelity,
    reproduction,


rule table:
    input:
        unpack(table_inputs),
    output:
        [
            report(
                f"{TABLES_DIR}/{{label}}{suffix}",
                caption="../report/table.rst",
                category=lambda wildcards: TABLES[wildcards.label].family,
                subcategory="Tables",
            )
            for suffix in TABLE_SUFFIXES
        ],
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
        caption=caption_text("label"),
    script:
        "../scripts/table.py"


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
        dataset=lambda wildcards: FIGURE_DATASETS.get(wildcards.name),
        estimator=DEFAULT_ESTIMATOR,
        caption=caption_text("name"),
    script:
        "../scripts/figure.py"


rule claims:
    input:
        final=TIDY["final"],
        rounds=TIDY["rounds"],
        code=[str(PRESENTATION / "claims.py"), *TABLES_CODE, str(TEMPLATES / "claims.md.j2")],
    output:
        report(result("claims.md"), caption="../report/claims.rst", category="summary"),
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
        # the files it \input's
        tables=[f"{TABLES_DIR}/{label}{suffix}" for label in TABLES for suffix in (".tex", "_std.tex", "_vs_paper.tex")],
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
        tables_dir=lambda wildcards, input: str(Path(input.tables[0]).parent),
        labels=list(TABLES),
        estimator=DEFAULT_ESTIMATOR,
    script:
        "../scripts/paper_tables.py"


rule fidelity:
    input:
        final=TIDY["final"],
        rounds=TIDY["rounds"],
        code=[str(PRESENTATION / "fidelity.py"), *TABLES_CODE],
    output:
        markdown=report(f"{TABLES_DIR}/Fidelity.md", caption="../report/Fidelity.rst", category="summary"),
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
        report(f"{TABLES_DIR}/Reproduction.md", caption="../report/Reproduction.rst", category="summary"),
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
