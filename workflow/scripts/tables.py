"""Rule tables: tidy CSVs -> one LaTeX table per paper table (+ _std, + _vs_paper), claims.md,
paper_tables.tex (fedbalance.tables.write_tables, with its default monitor estimator)."""

from pathlib import Path

import _common

from fedbalance.aggregate import read_tidy
from fedbalance.tables import write_tables

smk = snakemake  # noqa: F821  (injected by Snakemake)

with _common.logged(smk):
    final, rounds = read_tidy(Path(smk.input.final).parent)
    written = write_tables(final, rounds, smk.params.out_dir)
    print("\n".join(map(str, written)))
