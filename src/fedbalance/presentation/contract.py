"""The report's contract with the config: every job a table cell, figure or claim reads is a job of the study.

The tables, figures and claims name the paper's experiment families ("losses", "monitor", ...) and
setting names ("g10", "c5_g10", ...); a config that renames a family or a grid prefix would leave
their cells at "--" without a word. ``unmatched`` lists the reads of the report that a config's
families hold no job for, ``unread`` the config's families that nothing in the report reads; the
workflow warns with both when it plans rule ``all`` (before any job runs).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from fedbalance.jobs.config import jobs
from fedbalance.common.records import Job
from fedbalance.presentation.claims import READS as CLAIM_READS
from fedbalance.presentation.figures import FIGURES
from fedbalance.presentation.fidelity import READS as FIDELITY_READS
from fedbalance.presentation.names import Read
from fedbalance.presentation.tables import TABLES
from fedbalance.common.records import parse_setting

READ_ELSEWHERE: frozenset[str] = frozenset({"ratio_stability"})
"""Families read outside the report's tables, figures and claims (benchmarks/ratio_stability.py)."""


def report_reads() -> list[Read]:
    """Every read of the report: one per table cell (distinct jobs), then the figures', the claims' and fidelity's."""
    seen: dict[tuple, Read] = {}
    for spec in TABLES.values():
        for c in spec.cells:
            seen.setdefault((c.experiment, c.dataset, c.setting, c.loss, spec.label),
                            Read(c.experiment, c.dataset, c.setting, c.loss, by=spec.label))
    out = list(seen.values())
    for fig in FIGURES.values():
        out += [Read(r.experiment, r.dataset, r.setting, r.loss, by=fig.name) for r in fig.reads]
    return out + list(CLAIM_READS) + list(FIDELITY_READS)


def _in_scope(read: Read, cfg: Mapping[str, Any], held: set[tuple[str, str]]) -> bool:
    """Whether the study runs the read's family (on the read's dataset, when it names one): the config lists it
    and the study holds a job of it (a reference set may hold only some families)."""
    exp = cfg["experiments"].get(read.experiment)
    if exp is None or (read.dataset is not None and read.dataset not in exp["datasets"]):
        return False
    return any(e == read.experiment and read.dataset in (None, d) for e, d in held)


def setting_shape(setting: str | None) -> tuple[str, ...] | None:
    """The grid prefixes of a setting name ("c5_g10" -> ("c", "g")); () for a named setting ("S", "default")."""
    if setting is None:
        return None
    try:
        return tuple(prefix for prefix, _ in parse_setting(setting))
    except ValueError:
        return ()


def unmatched(cfg: Mapping[str, Any], study: Iterable[Job] | None = None, *, exact: bool = True) -> list[Read]:
    """The reads of families the config runs (on the read's dataset) that match none of its jobs.

    ``exact``: the read's setting and loss must be jobs (a full study: config/config.yaml holds every
    cell). Otherwise only the setting's shape must be one the family has ("g20" needs some "g<Γ>"
    setting), so a smaller grid or loss list passes and a renamed grid prefix does not. Families the
    study does not run (not in the config, or without a job in ``study``) are a smaller study, not a mismatch.
    """
    keys = {(j.experiment, j.dataset, j.setting, j.loss) for j in (jobs(cfg) if study is None else study)}
    held = {(e, d) for e, d, _, _ in keys}
    if not exact:
        shapes = {(e, d, setting_shape(s)) for e, d, s, _ in keys}
        return [r for r in report_reads() if _in_scope(r, cfg, held) and not any(
            e == r.experiment and r.dataset in (None, d) and (r.setting is None or sh == setting_shape(r.setting))
            for e, d, sh in shapes)]
    return [r for r in report_reads() if _in_scope(r, cfg, held) and not any(r.matches(*k) for k in keys)]


def unread(cfg: Mapping[str, Any]) -> list[str]:
    """The config's families that no table, figure or claim reads (a renamed or a new family)."""
    read = {r.experiment for r in report_reads()} | READ_ELSEWHERE
    return [e for e in cfg["experiments"] if e not in read]


def _label(r: Read) -> str:
    where = "/".join(x or "*" for x in (r.experiment, r.dataset, r.setting, r.loss))
    return f"{where} ({r.by})" if r.by else where


def contract_warnings(cfg: Mapping[str, Any], study: Iterable[Job] | None = None, *, show: int = 5) -> list[str]:
    """The planning-time warnings: reads of a setting shape the config lacks, and families nothing reads (empty when
    the config fits, including a smaller study of the paper's families)."""
    out = []
    missing = unmatched(cfg, study, exact=False)
    if missing:
        shown = ", ".join(_label(r) for r in missing[:show]) + (f" and {len(missing) - show} more" if len(missing) > show else "")
        out.append(f"{len(missing)} table cells, figure lines or claims of the report read settings of a shape that "
                   f"this config's families do not have (they will print '--'): {shown}. A renamed grid prefix? "
                   "The report reads the paper's setting names (g<Γ>, c<classes>_g<Γ>, ...).")
    orphans = unread(cfg)
    if orphans:
        out.append(f"experiment families that no table, figure or claim reads: {', '.join(orphans)} (their jobs "
                   "run, but the report shows nothing of them; the report reads the paper's family names).")
    return out
