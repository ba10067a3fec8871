# Stage 3: one FedAvg (or centralised) training job per (experiment, dataset, setting, loss, seed).
# fedbalance.jobs.run_job writes metrics.json and rounds.csv (fedbalance.jobfolder) atomically and checkpoints every
# round to checkpoint.pt beside them (not a declared output, so it survives a failed or killed
# job and the rerun resumes from it).


rule train:
    input:
        unpack(train_inputs),
    output:
        metrics=result("{experiment}", "{dataset}", "{setting}", "{loss}", "seed{seed}", METRICS),
        rounds=result("{experiment}", "{dataset}", "{setting}", "{loss}", "seed{seed}", ROUNDS),
    log:
        result("logs", "train", "{experiment}", "{dataset}", "{setting}", "{loss}", "seed{seed}.log"),
    benchmark:
        result("benchmarks", "train", "{experiment}", "{dataset}", "{setting}", "{loss}", "seed{seed}.tsv")
    conda:
        "../envs/torch.yaml"
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
    output:
        metrics=[result(path, METRICS) for path in FROM_REFERENCE],
        rounds=[result(path, ROUNDS) for path in FROM_REFERENCE],
    log:
        result("logs", "from_reference.log"),
    localrule: True
    conda:
        "../envs/report.yaml"
    params:
        copies=reference_copies,
    script:
        "../scripts/from_reference.py"
