"""Rule derive: a job's metrics.json and rounds.csv from its source's trajectory (fedbalance.jobs.derive), then its
provenance.json."""

import time
from pathlib import Path

import _common

smk = snakemake  # noqa: F821  (injected by Snakemake)
started = time.time()

with _common.logged(smk):
    import torch

    from fedbalance.data.datasets import check_manifest
    from fedbalance.jobs.derive import derive_job

    check_manifest(smk.input.manifest)
    torch.set_num_threads(smk.params.threads)
    source, out = Path(smk.input.metrics).parent, Path(smk.output.metrics).parent
    metrics = derive_job(source, smk.params.spec, out, data_dir=smk.params.data_dir)
    _common.record(smk, out, metrics, started)
    print(f"{out} derived from {source}'s trajectory")

_common.done()
