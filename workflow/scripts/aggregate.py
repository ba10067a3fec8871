"""Rule aggregate: every job's metrics.json / rounds.csv -> results/aggregate/{final,rounds,clients}.csv."""

from pathlib import Path

import _common

from fedbalance.jobs.aggregate import collect_tidy, write_tidy
from fedbalance.common.records import Job

smk = snakemake  # noqa: F821  (injected by Snakemake)

with _common.logged(smk):
    tidy = collect_tidy(smk.params.results_dir, [Job(*row) for row in smk.params.jobs])
    out = Path(smk.output.final).parent
    written = write_tidy(tidy.final, tidy.rounds, out, clients=tidy.clients)
    assert written == [Path(smk.output.final), Path(smk.output.rounds), Path(smk.output.clients)], written
    print(f"{len(tidy.final)} jobs, {len(tidy.rounds)} job-rounds, {len(tidy.clients)} client classes -> {written}")
