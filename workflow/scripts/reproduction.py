"""Rule reproduction: every table's comparison with the paper -> per dataset and table, where the paper reproduces."""

from pathlib import Path

import _common

from fedbalance.presentation.fidelity import read_vs_paper, reproduction_summary

smk = snakemake  # noqa: F821  (injected by Snakemake)

with _common.logged(smk):
    Path(smk.output[0]).write_text(reproduction_summary(read_vs_paper(smk.input.tables), smk.params.datasets))
