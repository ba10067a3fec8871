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
    p = smk.params
    written = write_figures(final, rounds, p.results_dir, p.out_dir, dataset_map=p.dataset_map, estimator=p.estimator)
    print("\n".join(map(str, written)))
