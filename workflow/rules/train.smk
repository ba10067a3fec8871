# Stage 3: one FedAvg (or centralised) training job per (experiment, dataset, setting, loss, seed).
# fedbalance.jobs.run.run_job writes metrics.json and rounds.csv (fedbalance.jobs.jobfolder) atomically and checkpoints every
# round to checkpoint.pt beside them (not a declared output, so it survives a failed or killed
# job and the rerun, with --rerun-incomplete after a kill, resumes from it); then provenance.json (fedbalance.jobs.provenance:
# the commit, this Snakemake command, the rule and its wildcards, device, threads, wall time). Every rule that writes
# a job folder writes all three.


rule train:
    input:
        unpack(train_inputs),
    output:
        metrics=result("{experiment}", "{dataset}", "{setting}", "{loss}", "seed{seed}", METRICS),
        rounds=result("{experiment}", "{dataset}", "{setting}", "{loss}", "seed{seed}", ROUNDS),
        provenance=result("{experiment}", "{dataset}", "{setting}", "{loss}", "seed{seed}", PROVENANCE),
    log:
        result("logs", "train", "{experiment}", "{dataset}", "{setting}", "{loss}", "seed{seed}.log"),
    benchmark:
        result("benchmarks", "train", "{experiment}", "{dataset}", "{setting}", "{loss}", "seed{seed}.tsv")
    conda:
        torch_env
    threads: TRAIN_THREADS
    resources:
        gpu=train_gpus,
        gpu_slots=train_gpus,
        mem_mb=train_mem_mb,
        runtime=train_runtime,
    params:
        spec=job_spec,
        data_dir=DATA_DIR,
        device=config["device"],
        deterministic=config["deterministic"],
        precision=config["precision"],
        capture=config["capture"],
        threads=TRAIN_THREADS,
        keep_rounds=keep_rounds,
        branch_from=branch_source,
        branch_rounds=branch_after,
        until=None,
    script:
        "../scripts/train.py"


# A job that others branch from (common.smk: KEEP_ROUNDS) trains up to each round whose state they start from in a job
# of its own, which keeps that state (branch-rNNN.pt) and its checkpoint; its next job (the next kept round, then rule
# train) resumes the checkpoint, so the jobs that branch from it start as soon as their state exists and no round is
# trained twice.
rule keep:
    input:
        unpack(keep_inputs),
    output:
        result("{source}", "branch-r{kept}.pt"),
    log:
        result("logs", "keep", "{source}", "r{kept}.log"),
    wildcard_constraints:
        source=_paths(KEEP_ROUNDS),
        kept=r"\d\d\d+",
    conda:
        torch_env
    threads: TRAIN_THREADS
    resources:
        gpu=train_gpus,
        gpu_slots=train_gpus,
        mem_mb=train_mem_mb,
        runtime=train_runtime,
    params:
        spec=lambda wc: twin_spec(wc.source),
        data_dir=DATA_DIR,
        device=config["device"],
        deterministic=config["deterministic"],
        precision=config["precision"],
        capture=config["capture"],
        threads=TRAIN_THREADS,
        keep_rounds=lambda wc: [int(wc.kept)],
        branch_from=None,
        branch_rounds=None,
        until=lambda wc: int(wc.kept),
    script:
        "../scripts/train.py"


# A twin job (common.smk: TWINS) is written from the job trained in its place; only the twins'
# paths match {twin}, so every other job falls through to rule train. With `reference_dir`, every job of the
# render is copied from the set (rule from_reference, one job for all), after the same spec check.
ruleorder: from_reference > reuse > train


rule reuse:
    input:
        metrics=lambda wc: result(TWINS[wc.twin], METRICS),
        rounds=lambda wc: result(TWINS[wc.twin], ROUNDS),
    output:
        metrics=result("{twin}", METRICS),
        rounds=result("{twin}", ROUNDS),
        provenance=result("{twin}", PROVENANCE),
    log:
        result("logs", "reuse", "{twin}.log"),
    wildcard_constraints:
        twin=_paths(TWINS),
    localrule: True
    conda:
        "../envs/report.yaml"
    params:
        spec=lambda wc: twin_spec(wc.twin),
    script:
        "../scripts/reuse.py"


rule from_reference:
    input:
        metrics=[f"{REFERENCE_DIR}/{src}/{METRICS}" for src in sorted(set(FROM_REFERENCE.values()))],
        rounds=[f"{REFERENCE_DIR}/{src}/{ROUNDS}" for src in sorted(set(FROM_REFERENCE.values()))],
        provenance=reference_records,
    output:
        metrics=[result(path, METRICS) for path in FROM_REFERENCE],
        rounds=[result(path, ROUNDS) for path in FROM_REFERENCE],
        provenance=[result(path, PROVENANCE) for path in FROM_REFERENCE],
    log:
        result("logs", "from_reference.log"),
    localrule: True
    conda:
        "../envs/report.yaml"
    params:
        copies=reference_copies,
    script:
        "../scripts/from_reference.py"
