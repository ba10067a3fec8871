"""Rule figures: tidy CSVs (+ per-job files under results_dir) -> every figure as PDF and PNG
(fedbalance.figures.write_figures)."""

from pathlib import Path

import _common

import matplotlib

matplotlib.use("Agg")

from fedbalance.aggregate import read_tidy  # noqa: E402
from fedbalance.figures import write_figures  # noqa: E402

smk = snakemake  # noqa: F821  (injected by Snakemake)

with _common.logged(smk):
    final, rounds = read_tidy(Path(smk.input.final).parent)
    written = write_figures(final, rounds, smk.params.results_dir, smk.params.out_dir, dataset_map=smk.params.dataset_map)
    print("\n".join(map(str, written)))
