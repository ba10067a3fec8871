"""Rule reuse: a twin job's metrics.json and rounds.csv from the job trained in its place."""

from pathlib import Path

import _common

smk = snakemake  # noqa: F821  (injected by Snakemake)

with _common.logged(smk):
    from fedbalance.reuse import write_twin

    write_twin(Path(smk.input.metrics).parent, Path(smk.output.metrics).parent, smk.params.spec)
    print(f"{Path(smk.output.metrics).parent} written from {Path(smk.input.metrics).parent}")
