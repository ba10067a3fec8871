"""Rule fidelity: tidy CSVs -> the loss-comparison cells (final, last 5, best) beside the published ones."""

from pathlib import Path

import _common

from fedbalance.jobs.aggregate import read_tidy
from fedbalance.presentation.fidelity import fidelity_frame, fidelity_markdown

smk = snakemake  # noqa: F821  (injected by Snakemake)

with _common.logged(smk):
    final, rounds = read_tidy(Path(smk.input.final).parent)
    frame = fidelity_frame(final, rounds, base=smk.params.bases)
    frame.to_csv(smk.output.csv, index=False)
    Path(smk.output.markdown).write_text(fidelity_markdown(frame))
