"""Rule figure: the tidy CSVs a figure reads -> that figure as PDF and PNG, and its plotted numbers as CSV
(fedbalance.presentation.figures.write_figure)."""

import _common

import matplotlib

matplotlib.use("Agg")

from fedbalance.jobs.aggregate import read_frame  # noqa: E402
from fedbalance.presentation.figures import write_figure  # noqa: E402

smk = snakemake  # noqa: F821  (injected by Snakemake)

with _common.logged(smk):
    frames = {k: read_frame(smk.input[k]) for k in ("final", "rounds", "clients") if k in smk.input.keys()}
    p = smk.params
    written = write_figure(smk.wildcards.name, p.out_dir, estimator=p.estimator, **frames)
    print("\n".join(map(str, written)))
