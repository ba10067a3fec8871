"""Rule paper_tables: the standalone paper_tables.tex about the study, every table it fills copied in, so it compiles
alone (fedbalance.presentation.tables.write_paper_tables)."""

import _common

from fedbalance.presentation.tables import write_paper_tables

smk = snakemake  # noqa: F821  (injected by Snakemake)

with _common.logged(smk):
    p = smk.params
    print(write_paper_tables(smk.output[0], p.tables_dir, estimator=p.estimator, labels=p.labels, not_run=p.not_run,
                             study=dict(p.study)))
