"""Rule from_reference: every job of a render written from the reference set (a twin from the job covering it), each
with a provenance.json that holds the set's record of its job."""

import time

import _common

smk = snakemake  # noqa: F821  (injected by Snakemake)
started = time.time()

with _common.logged(smk):
    from pathlib import Path

    from fedbalance.jobs.jobfolder import PROVENANCE
    from fedbalance.jobs.provenance import read
    from fedbalance.jobs.reuse import write_twin

    copies = smk.params.copies
    for i, (source, target, spec) in enumerate(copies, 1):
        metrics = write_twin(source, target, spec)
        held = Path(source, PROVENANCE)
        _common.record(smk, target, metrics, started, trained=False, copied_from=source,
                       reference_provenance=read(held) if held.is_file() else None)
        _common.progress(smk, i, len(copies), "jobs written", started)
    print(f"{len(smk.params.copies)} jobs written from {len({c[0] for c in smk.params.copies})} of the reference set")
