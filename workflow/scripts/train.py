"""Rules train and keep: one training job; fedbalance.jobs.run.run_job writes metrics.json and rounds.csv beside each other
(atomically) and resumes from checkpoint.pt in the same folder; a branched job starts from its source's kept round
state when the source kept it. Rule train then writes provenance.json; rule keep stops after its round (``until``),
keeping that round's state and the checkpoint for the job's next rule."""

import time
from pathlib import Path

import _common

smk = snakemake  # noqa: F821  (injected by Snakemake)
started = time.time()

with _common.logged(smk):
    import torch

    from fedbalance.data.datasets import check_manifest
    from fedbalance.jobs.jobfolder import kept_branch
    from fedbalance.jobs.run import load_partitions, run_job

    check_manifest(smk.input.manifest)  # the data files are those prepare_data recorded
    # the config's thread count, not smk.threads (which --set-threads or --cores may change)
    torch.set_num_threads(smk.params.threads)
    print(f"torch threads: {torch.get_num_threads()} (config threads: {smk.params.threads})", flush=True)
    out_dir = Path(smk.output[0]).parent
    metrics = run_job(
        smk.params.spec,
        out_dir,
        data_dir=smk.params.data_dir,
        device=smk.params.device,
        deterministic=smk.params.deterministic,
        precision=smk.params.precision,
        capture=smk.params.capture,
        partitions=load_partitions(smk.input.partition),
        keep_rounds=smk.params.keep_rounds,
        branch_from=kept_branch(smk.params.branch_from, smk.params.branch_rounds),
        until=smk.params.until,
    )
    if metrics is not None:
        _common.record(smk, out_dir, metrics, started)
    for name in smk.output.keys() or [0]:
        if not Path(smk.output[name]).is_file():
            raise RuntimeError(f"run_job did not write {smk.output[name]}")

_common.done()
