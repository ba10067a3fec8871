"""Rule tables: tidy CSVs -> one LaTeX table per paper table (+ _std, + _vs_paper), claims.md,
paper_tables.tex (fedbalance.tables.write_tables, with the config's default monitor estimator)."""

from pathlib import Path

import _common

from fedbalance.aggregate import read_tidy
from fedbalance.tables import write_tables

smk = snakemake  # noqa: F821  (injected by Snakemake)

with _common.logged(smk):
    final, rounds = read_tidy(Path(smk.input.final).parent)
    p = smk.params
    written = write_tables(final, rounds, p.out_dir, estimator=p.estimator, summary_dir=p.summary_dir)
    print("\n".join(map(str, written)))
