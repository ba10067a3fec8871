"""Everything at once, outside Snakemake: every table, claims.md and paper_tables.tex (and the figures)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from fedbalance.presentation.claims import write_claims
from fedbalance.presentation.tables import TABLES, cell_values, write_paper_tables, write_table
from fedbalance.common.records import DEFAULT_ESTIMATOR


def write_report(final: pd.DataFrame, rounds: pd.DataFrame, out_dir: str | Path, *, estimator: str = DEFAULT_ESTIMATOR,
                 summary_dir: str | Path | None = None, templates: str | Path | None = None,
                 clients: pd.DataFrame | None = None, figures_dir: str | Path | None = None) -> list[Path]:
    """Write every table into ``out_dir``, ``claims.md`` and ``paper_tables.tex`` into ``summary_dir`` (default
    ``out_dir``) and, when ``figures_dir`` is given, every figure there; return the paths written."""
    summary = Path(summary_dir) if summary_dir is not None else Path(out_dir)
    values = {label: cell_values(spec, final, rounds, estimator) for label, spec in TABLES.items()}
    paths = [p for label in TABLES for p in write_table(label, final, rounds, out_dir, estimator=estimator,
                                                        templates=templates, values=values[label])]
    paths.append(write_claims(final, rounds, summary / "claims.md", estimator=estimator, values=values,
                              templates=templates))
    paths.append(write_paper_tables(summary / "paper_tables.tex", out_dir, estimator=estimator, templates=templates))
    if figures_dir is not None:
        from fedbalance.presentation.figures import write_figures

        paths += write_figures(figures_dir, final=final, rounds=rounds, clients=clients, estimator=estimator)
    return paths
