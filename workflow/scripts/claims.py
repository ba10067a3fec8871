"""Rule claims: tidy CSVs -> claims.md, each headline claim of the paper with a verdict
(fedbalance.presentation.claims.write_claims, with the config's default monitor estimator and, for a reference
set's render, the set's looks: fedbalance.evidence.looks)."""

import _common

from fedbalance.evidence.looks import read_looks
from fedbalance.jobs.aggregate import read_frame
from fedbalance.presentation.claims import write_claims

smk = snakemake  # noqa: F821  (injected by Snakemake)

with _common.logged(smk):
    final, rounds = read_frame(smk.input.final), read_frame(smk.input.rounds)
    looks = read_looks(smk.input.looks[0] if smk.input.looks else None)
    print(write_claims(final, rounds, smk.output[0], estimator=smk.params.estimator, looks=looks))
