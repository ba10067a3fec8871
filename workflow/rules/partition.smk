# Stage 2: client partitions (client -> sample indices), one JSON per
# (experiment, dataset, setting, seed); every loss of that setting trains on the same partition.
# About a second of work each, so they run on the submitting host, never through a cluster queue; torch-free,
# so in the small environment of the report rules.


localrules:
    partition,


rule partition:
    input:
        labels=result("data", "{dataset}.labels.npz"),
    output:
        partition=result("partitions", "{experiment}", "{dataset}", "{setting}", "seed{seed}.json"),
    log:
        result("logs", "partition", "{experiment}", "{dataset}", "{setting}", "seed{seed}.log"),
    benchmark:
        result("benchmarks", "partition", "{experiment}", "{dataset}", "{setting}", "seed{seed}.tsv")
    conda:
        "../envs/report.yaml"
    threads: 1
    resources:
        mem_mb=data_mem_mb,
        runtime=30,
    params:
        spec=partition_spec,
    script:
        "../scripts/partition.py"
