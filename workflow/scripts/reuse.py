"""Rule reuse: a twin job's metrics.json and rounds.csv from the job trained in its place, then its provenance.json."""

import time
from pathlib import Path

import _common

smk = snakemake  # noqa: F821  (injected by Snakemake)
started = time.time()

with _common.logged(smk):
    from fedbalance.jobs.jobfolder import folder_job
    from fedbalance.jobs.reuse import write_twin

    source, out = Path(smk.input.metrics).parent, Path(smk.output.metrics).parent
    metrics = write_twin(source, out, smk.params.spec)
    _common.record(smk, out, metrics, started, trained=False, reused_from=folder_job(source))
    print(f"{out} written from {source}")
