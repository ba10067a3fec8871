"""Rule table_page: tidy CSVs -> one table as an HTML page for the report, headed by the protocol of the jobs that
fill it (fedbalance.presentation.tables.write_table_html)."""

import _common

from fedbalance.jobs.aggregate import read_frame
from fedbalance.presentation.study import study_line
from fedbalance.presentation.tables import write_table_html

smk = snakemake  # noqa: F821  (injected by Snakemake)

with _common.logged(smk):
    final = read_frame(smk.input.final)
    rounds = read_frame(smk.input.rounds)
    written = write_table_html(smk.wildcards.label, final, rounds, smk.output[0], estimator=smk.params.estimator,
                               description=study_line(smk.params.study, html=True), study=smk.params.study_config)
    print(written)
