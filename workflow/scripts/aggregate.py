"""Rule aggregate: every job's metrics.json / rounds.csv -> results/aggregate/{final,rounds}.csv."""

from pathlib import Path

import _common

from fedbalance.aggregate import collect, write_tidy
from fedbalance.config import Job

smk = snakemake  # noqa: F821  (injected by Snakemake)

with _common.logged(smk):
    final, rounds = collect(smk.params.results_dir, [Job(*row) for row in smk.params.jobs])
    written = write_tidy(final, rounds, Path(smk.output.final).parent)
    print(f"{len(final)} jobs, {len(rounds)} job-rounds -> {written}")
