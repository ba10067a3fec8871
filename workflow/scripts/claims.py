"""Rule claims: tidy CSVs -> claims.md, each headline claim of the paper with a verdict
(fedbalance.presentation.claims.write_claims, with the config's default monitor estimator)."""

import _common

from fedbalance.jobs.aggregate import read_frame
from fedbalance.presentation.claims import write_claims

smk = snakemake  # noqa: F821  (injected by Snakemake)

with _common.logged(smk):
    final, rounds = read_frame(smk.input.final), read_frame(smk.input.rounds)
    print(write_claims(final, rounds, smk.output[0], estimator=smk.params.estimator))
