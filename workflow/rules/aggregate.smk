# Stage 4: every job's metrics.json / rounds.csv -> three tidy CSVs (one row per job; one per job
# and round; one per partition's client and class) that the tables and figures read.

from pathlib import Path

TRAIN_OUTPUTS = [result(j.path, f) for j in JOBS for f in (METRICS, ROUNDS)]


localrules:
    aggregate,


rule aggregate:
    input:
        TRAIN_OUTPUTS,
    output:
        final=result("aggregate", "final.csv"),
        rounds=result("aggregate", "rounds.csv"),
        clients=result("aggregate", "clients.csv"),
    log:
        result("logs", "aggregate.log"),
    benchmark:
        result("benchmarks", "aggregate.tsv")
    conda:
        "../envs/report.yaml"
    threads: 1
    resources:
        mem_mb=4000,
        runtime=30,
    params:
        # plain str/int only: Snakemake unpickles params before the script puts this repository's
        # src/ on sys.path, so pickled fedbalance objects could load another installed copy
        results_dir=lambda wildcards, output: str(Path(output.final).parent.parent),
        jobs=[[j.experiment, j.dataset, j.setting, j.loss, j.seed] for j in JOBS],
    script:
        "../scripts/aggregate.py"
