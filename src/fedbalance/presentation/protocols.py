"""The protocol a table cell of ours and its published value were made at, and the keys in which they differ.

A published value was made at the paper's protocol: the job ``config/config.yaml`` (the paper's full protocol,
docs/design.md §3; shipped with the package as ``published/paper_protocol.yaml``) gives the cell. Ours at the study's:
the job its config gives the cell. Both are read as ``fedbalance.jobs.config.protocol`` gives a job's protocol (the keys
that act on its result: Γ, rounds, local epochs, clients, the learning rate, the dataset's source, ...), the rule
``compare`` uses between two result folders, and ``differences`` names the keys whose values differ. Where they
differ, a comparison with the published value is no verdict: the tables' ``_vs_paper`` files and pages say so.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from fedbalance.jobs.config import jobs, protocol, protocol_differences, read_yaml, resolve_job, shown_values, with_defaults
from fedbalance.common.records import Job

PAPER_PROTOCOL = Path(__file__).parent.parent / "published" / "paper_protocol.yaml"
"""The paper's protocol: config/config.yaml (a link to it in a clone; a copy in an installed package)."""

Cell = tuple[str, str, str, str]
"""A table cell's jobs: (experiment, dataset, setting, loss), their seeds pooled."""


@functools.lru_cache(maxsize=1)
def paper_config() -> dict[str, Any]:
    """The paper's protocol as a config (``PAPER_PROTOCOL``, its top-level defaults filled; tests/test_config.py
    validates the file, which takes minutes)."""
    return with_defaults(read_yaml(PAPER_PROTOCOL))


def cell_protocols(cfg: Mapping[str, Any], cells: Iterable[Cell]) -> dict[Cell, dict[str, set[str]]]:
    """The protocol (``config.protocol``: key -> the values its jobs run with) of each of ``cells`` that ``cfg``
    defines a job for; the cells it has no job of are left out."""
    cells = list(dict.fromkeys(cells))
    families = sorted({c[0] for c in cells if c[0] in cfg.get("experiments", {})})
    first: dict[Cell, Job] = {}
    for job in jobs(cfg, families) if families else []:
        first.setdefault((job.experiment, job.dataset, job.setting, job.loss), job)
    out: dict[Cell, dict[str, set[str]]] = {}
    for cell in cells:
        if cell in first:
            out[cell] = {k: {v} for k, v in protocol(resolve_job(cfg, first[cell]).as_dict(), cell[3]).items()}
    return out


def differences(study: Mapping[str, Any], cells: Iterable[Cell],
                paper: Mapping[str, Any] | None = None) -> dict[Cell, dict[str, tuple[str, str]]]:
    """For each of ``cells`` that both the study's config and the paper's protocol define: the keys whose values
    differ -> (ours, the paper's) as printed (``config.protocol_differences``); a cell run alike maps to {}. Cells one
    side lacks are left out."""
    cells = list(cells)
    ours = cell_protocols(study, cells)
    theirs = cell_protocols(paper if paper is not None else paper_config(), cells)
    return {c: protocol_differences(ours[c], theirs[c]) for c in cells if c in ours and c in theirs}


def differences_text(differ: Mapping[str, tuple[str, str]]) -> str:
    """One cell's differences in a line ("partition.gamma: 10 vs 50; rounds: 16 vs 30"); "" when there are none."""
    return "; ".join(f"{k}: {a} vs {b}" for k, (a, b) in differ.items())


def differences_header(differ: Mapping[Cell, Mapping[str, tuple[str, str]]]) -> str:
    """The keys in which ours and the paper's protocols differ over several cells, in a sentence (each key with the
    values of every cell: "rounds: 16 vs 30"); "" when every cell was run at the paper's protocol."""
    keys: dict[str, tuple[set[str], set[str]]] = {}
    for d in differ.values():
        for key, (a, b) in d.items():
            keys.setdefault(key, (set(), set()))
            keys[key][0].update(a.split("/"))
            keys[key][1].update(b.split("/"))
    if not keys:
        return ""
    n = sum(1 for d in differ.values() if d)
    listed = "; ".join(f"{k}: {shown_values(a)} vs {shown_values(b)}" for k, (a, b) in sorted(keys.items()))
    return (f"Ours and the paper's protocol differ in {n} of the {len(differ)} cells set beside a published value, in "
            f"the keys that act on the result (ours vs the paper's): {listed}. Where they differ, the difference is no "
            "verdict: the seeds' spread says nothing across protocols.")
