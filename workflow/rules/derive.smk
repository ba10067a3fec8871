# Stage 3b: jobs derived from a trained job's trajectory instead of trained (fedbalance.jobs.reuse.derived): they
# differ from it only in the monitor of a loss that does not train on it (a T_Ra sweep of CE jobs), so the
# monitor is run again with their keys on every round's G_t (fedbalance.jobs.derive). Its source saved
# trajectory.pt beside its metrics.json (save_trajectory: true). A reference set holds derived jobs as they
# are, so nothing is derived when rendering one. A derived job's outputs are its monitor's alone: the versions of the
# plug-in estimators it records are a param (fedbalance.jobs.config.estimator_versions), so a new version re-derives it,
# while no training reruns (an estimator acts on no job's training but a prior-fed loss's lead one).

DERIVED = {job.path: src.path for job, src in _derived.items()}


ruleorder: derive > train


rule derive:
    input:
        metrics=lambda wc: result(DERIVED[wc.derived], METRICS),
        rounds=lambda wc: result(DERIVED[wc.derived], ROUNDS),
        manifest=lambda wc: result("data", f"{Job.from_path(wc.derived).dataset}.json"),
    output:
        metrics=result("{derived}", METRICS),
        rounds=result("{derived}", ROUNDS),
        provenance=result("{derived}", PROVENANCE),
    log:
        result("logs", "derive", "{derived}.log"),
    wildcard_constraints:
        derived=_paths(DERIVED),
    conda:
        torch_env
    threads: TRAIN_THREADS
    params:
        spec=lambda wc: twin_spec(wc.derived),
        estimators=lambda wc: plugin_param(estimator_versions(config, Job.from_path(wc.derived)), DATA_DIR),
        data_dir=DATA_DIR,
        threads=TRAIN_THREADS,
    script:
        "../scripts/derive.py"
