"""Rule table: tidy CSVs -> one paper table as LaTeX (+ _std, + _vs_paper CSV and LaTeX)
(fedbalance.presentation.tables.write_table, with the config's default monitor estimator and the study's config,
whose protocol is set beside the paper's)."""

import _common

import pandas as pd

from fedbalance.jobs.aggregate import read_frame
from fedbalance.presentation.tables import write_table

smk = snakemake  # noqa: F821  (injected by Snakemake)

with _common.logged(smk):
    final = read_frame(smk.input.final)
    rounds = read_frame(smk.input.rounds) if "rounds" in smk.input.keys() else pd.DataFrame()
    written = write_table(smk.wildcards.label, final, rounds, smk.params.out_dir, estimator=smk.params.estimator,
                          study=smk.params.study_config)
    print("\n".join(map(str, written)))
