# Stage 5: LaTeX tables (+ std, + comparison with the published numbers), claims.md,
# paper_tables.tex and figures, every one registered for `snakemake --report` with a caption
# (report/<name>.rst) in a category named after the experiment family it comes from.
# The library always writes every table and figure: cells whose jobs the config does not run
# are rendered as '–', so the file lists below do not depend on the config.

from pathlib import Path

from fedbalance.figures import DEFAULT_DATASET, FIGURES
from fedbalance.tables import table_labels

TABLES = list(table_labels())
TABLES_DIR = result("tables")
FIGURES_DIR = result("figures")

TABLE_SUFFIXES = (".tex", "_std.tex", "_vs_paper.csv", "_vs_paper.tex")
TABLE_FILES = [f"{TABLES_DIR}/{label}{suffix}" for label in TABLES for suffix in TABLE_SUFFIXES]
FIGURE_FILES = [f"{FIGURES_DIR}/{name}.{ext}" for name in FIGURES for ext in ("pdf", "png")]
# A figure drawn from one dataset (e.g. the CIFAR10 curves) uses the first dataset of the config
# when that dataset is not part of the study (config/quick.yaml has only mnist).
FIGURE_DATASETS = {name: (d if d in config["datasets"] else DATASETS[0]) for name, d in DEFAULT_DATASET.items()}
SUMMARY_FILES = [result("claims.md"), result("paper_tables.tex")]
FIDELITY_FILES = [f"{TABLES_DIR}/Fidelity.md", f"{TABLES_DIR}/Fidelity.csv"]
LOSS_BASES = {name: v["loss"] for name, v in (config.get("loss_variants") or {}).items()}


localrules:
    tables,
    figures,
    fidelity,


rule tables:
    input:
        final=result("aggregate", "final.csv"),
        rounds=result("aggregate", "rounds.csv"),
    output:
        [
            report(
                f"{TABLES_DIR}/{label}{suffix}", caption=caption(label), category=family(label), subcategory="Tables"
            )
            for label in TABLES
            for suffix in TABLE_SUFFIXES
        ],
        claims=report(result("claims.md"), caption="../../report/claims.rst", category="summary"),
        paper_tables=report(result("paper_tables.tex"), caption="../../report/paper_tables.rst", category="summary"),
    log:
        result("logs", "tables.log"),
    conda:
        "../../envs/report.yaml"
    threads: 1
    resources:
        mem_mb=4000,
        runtime=30,
    params:
        out_dir=lambda wildcards, output: Path(output[0]).parent,
        summary_dir=lambda wildcards, output: Path(output.claims).parent,
        estimator=DEFAULT_ESTIMATOR,
    script:
        "../scripts/tables.py"


rule figures:
    input:
        final=result("aggregate", "final.csv"),
        rounds=result("aggregate", "rounds.csv"),
    output:
        [
            report(f"{FIGURES_DIR}/{name}.{ext}", caption=caption(name), category=family(name), subcategory="Figures")
            for name in FIGURES
            for ext in ("pdf", "png")
        ],
    log:
        result("logs", "figures.log"),
    conda:
        "../../envs/report.yaml"
    threads: 1
    resources:
        mem_mb=4000,
        runtime=30,
    params:
        results_dir=lambda wildcards, input: Path(input.final).parent.parent,
        out_dir=lambda wildcards, output: Path(output[0]).parent,
        dataset_map=FIGURE_DATASETS,
        estimator=DEFAULT_ESTIMATOR,
    script:
        "../scripts/figures.py"


rule fidelity:
    input:
        final=result("aggregate", "final.csv"),
        rounds=result("aggregate", "rounds.csv"),
    output:
        markdown=report(f"{TABLES_DIR}/Fidelity.md", caption="../../report/Fidelity.rst", category="summary"),
        csv=f"{TABLES_DIR}/Fidelity.csv",
    log:
        result("logs", "fidelity.log"),
    conda:
        "../../envs/report.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        bases=LOSS_BASES,
    script:
        "../scripts/fidelity.py"
