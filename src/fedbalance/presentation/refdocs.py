"""``fedbalance reference docs``: a render of a reference set spliced into the docs, and the set's status into the sets'
README (on top of ``presentation``: it reads a render's claims and the prose blocks).

A render (``snakemake ... --config reference_dir=reference/mnist results_dir=results_reference``) writes
``tables/Fidelity.md``, ``tables/Reproduction.md`` and ``claims.md``; ``docs`` puts them, the before/after table of the
claims' rule and every generated prose block (``presentation.prose``) between their marks in docs/fidelity.md and
docs/claims-mnist.md (``<!-- name: fedbalance reference docs -->`` ... ``<!-- /name -->``), the wall times of the set's
jobs (``job_times_frame``) into docs/performance.md and the README, and the status table (``refset.status_text``) into
reference/README.md; ``--check`` only compares.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import pandas as pd

from fedbalance.jobs.aggregate import read_frame, read_tidy
from fedbalance.jobs.jobfolder import JobFolderError
from fedbalance.presentation.headline import install_figures, tally_text
from fedbalance.presentation.prose import blocks as prose_blocks
from fedbalance.presentation.prose import job_time_context, render
from fedbalance.jobs.provenance import PROVENANCE
from fedbalance.common.records import Job
from fedbalance.evidence.refset import STATUS_SOURCE, RefSetError, provenances, spliced, status_text

DOCS_SOURCE = "fedbalance reference docs"
"""The mark of every block ``docs`` writes."""
RENDERED_DOCS = ("tables/Fidelity.md", "tables/Reproduction.md", "claims.md")
"""The files of a render that ``docs`` splices into docs/."""
RENDERED_FROM = re.compile(r"of the render of the (\d+) (?:`[\w-]+` )?jobs of ")
"""How a doc says how many jobs its block was rendered from (``held_summary``)."""


def provenance_counts(reference: Path, experiment: str | None = None) -> tuple[dict[str, int], dict[str, int]]:
    """Jobs per commit (7 hex digits) and per device among the set's jobs (of ``experiment``, or all)."""
    commits: dict[str, int] = {}
    devices: dict[str, int] = {}
    for parts, record, device, _ in provenances(reference):
        if experiment is not None and parts[0] != experiment:
            continue
        commits[record["commit"][:7]] = commits.get(record["commit"][:7], 0) + 1
        devices[device] = devices.get(device, 0) + 1
    return commits, devices


def set_label(reference: Path, root: Path) -> str:
    """How the docs name the set: its path from the repository's ``root`` (the README's folder) when it lies there,
    however it was spelled on the command line (``reference/mnist``, ``/abs/.../reference/mnist``); else as given."""
    where, top = reference.resolve(), root.resolve()
    return where.relative_to(top).as_posix() if top in where.parents else reference.as_posix()


def held_summary(reference: Path, experiment: str | None = None, label: str | None = None) -> str:
    """One line: how many jobs (of ``experiment``, or all) the set holds, from which commits and devices; the set
    named ``label`` (default: as given)."""
    commits, devices = provenance_counts(reference, experiment)
    what = f"`{experiment}` jobs" if experiment else "jobs"
    return (f"{sum(commits.values())} {what} of {label or reference.as_posix()} "
            f"(commits {', '.join(f'{c}: {n}' for c, n in sorted(commits.items()))}; "
            f"devices {', '.join(f'{d}: {n}' for d, n in sorted(devices.items()))})")


def rule_change_text(rendered: Path, reference: Path | None = None) -> str:
    """The before/after table of the claims' verdicts (``presentation.claims.write_rule_changes``) of a render, from
    its tidy frames, at the looks of ``reference`` (``evidence.looks``)."""
    from fedbalance.evidence.looks import looks_path, read_looks
    from fedbalance.jobs.aggregate import read_tidy
    from fedbalance.presentation.claims import write_rule_changes

    final, rounds = read_tidy(rendered / "aggregate")
    looks = read_looks(looks_path(reference)) if reference is not None else None
    with tempfile.TemporaryDirectory() as tmp:
        return write_rule_changes(final, rounds, Path(tmp) / "rule.md", looks=looks).read_text()


JOB_TIME_COLUMNS = ["experiment", "device", "wall_time_s", "derived", "branched", "threads", "cores", "process_wall_s",
                    "process_cpu_s"]
"""The columns of ``job_times_frame`` (what ``prose.job_time_context`` reads)."""


def job_times_frame(reference: Path) -> pd.DataFrame:
    """One row a job of the set (its seal and folders checked, ``refset.provenances``): experiment, device,
    wall_time_s (metrics.json), derived and branched (``derived_from``, ``branched_from`` in its record), the torch
    threads and host cores its record names, and the seconds of the process that made it, wall and CPU
    (``wall_s_this_process``, ``cpu_s_this_process``: None in a record older than the latter)."""
    rows = []
    for parts, record, device, metrics in provenances(reference):
        rows.append({"experiment": parts[0], "device": device or "unknown", "wall_time_s": metrics.get("wall_time_s"),
                     "derived": "derived_from" in record, "branched": "branched_from" in record,
                     "threads": (record.get("runtime") or {}).get("threads"), "cores": (record.get("host") or {}).get("cpus"),
                     "process_wall_s": record.get("wall_s_this_process"), "process_cpu_s": record.get("cpu_s_this_process")})
    return pd.DataFrame(rows, columns=JOB_TIME_COLUMNS)


def docs_texts(rendered: Path, reference: Path, docs: Path) -> dict[Path, str]:
    """docs/fidelity.md and docs/claims-mnist.md with the render of ``reference`` (in ``rendered``) spliced in, every
    generated prose block (computed from ``reference``'s job folders) in its page, the claims' tally in the README's
    first screen (``docs``' parent) and the set's status in the sets' README (``reference``'s parent, when it has the
    status marks)."""
    fidelity = (rendered / "tables" / "Fidelity.md").read_text()
    claims = (rendered / "claims.md").read_text().split("\n", 1)[1].lstrip("\n")
    reproduction = (rendered / "tables" / "Reproduction.md").read_text()
    label = set_label(reference, docs.parent)
    every = held_summary(reference, label=label)
    blocks = [
        (docs / "claims-mnist.md", "rule-change", f"Every claim under the rule used until 2026-12-07 and the rule now, "
                                                  f"from the render of the {every}:\n\n"
                                                  f"{rule_change_text(rendered, reference)}"),
        (docs / "fidelity.md", "reproduction", f"`tables/Reproduction.md` of the render of the {every}:\n\n{reproduction}"),
        (docs / "fidelity.md", "fidelity", f"`tables/Fidelity.md` of the render of the "
                                           f"{held_summary(reference, 'losses', label)}:\n\n{fidelity}"),
        (docs / "claims-mnist.md", "claims", f"`claims.md` of the render of the {every}:\n\n{claims}"),
        *((docs / page, name, body) for name, (page, body) in prose_blocks(reference).items()),
    ]
    final, rounds = read_tidy(rendered / "aggregate")  # the README's first screen: the claims' verdicts counted
    jobs = job_times_frame(reference)  # one pass over the set's records: the tally's count and the job times
    held = len(jobs)
    from fedbalance.evidence.looks import looks_path, read_looks

    times = job_time_context(jobs)
    blocks += [(docs / "performance.md", "job-times", render("job_times.md.j2", times)),
               (docs.parent / "README.md", "job-times", render("job_times_readme.md.j2", times))]
    blocks.append((docs.parent / "README.md", "findings",
                   tally_text(final, rounds, f"the {held} jobs of {label}",
                              looks=read_looks(looks_path(reference)))))
    texts: dict[Path, str] = {}
    for path, name, body in blocks:
        texts[path] = spliced(texts.get(path, path.read_text()), name, body, source=DOCS_SOURCE)
    readme = reference.parent / "README.md"
    text = readme.read_text() if readme.is_file() else ""
    if f"<!-- status: {STATUS_SOURCE} -->" in text:
        texts[readme] = spliced(text, "status", status_text(reference), source=STATUS_SOURCE)
    return texts


def check_render(rendered: Path, reference: Path, docs: Path, allow_fewer: bool) -> None:
    """The render to splice is one of ``reference`` (it holds every job of the set), and the set holds no fewer jobs
    than the docs were last rendered from (unless ``allow_fewer``); RefSetError otherwise."""
    held = {"/".join(job.parts) for job in provenances(reference)}
    if not held:
        raise RefSetError(f"--reference {reference} holds no job ({PROVENANCE} below it): name a reference set, e.g. "
                          "reference/mnist")
    try:
        final = read_frame(rendered / "aggregate" / "final.csv")
        done = {Job(r.experiment, r.dataset, r.setting, r.loss, int(r.seed)).path for r in final.itertuples()}
    except (JobFolderError, AttributeError, ValueError) as exc:
        raise RefSetError(f"{rendered / 'aggregate' / 'final.csv'}: not a render's job table ({exc}); render the "
                          "reference set first") from None
    lacking = sorted(held - done)
    if lacking:
        raise RefSetError(f"the render in {rendered} lacks {len(lacking)} of the {len(held)} jobs of {reference} (e.g. "
                          f"{lacking[0]}): it is not a render of this set as it is; render {reference} again "
                          "(reference/README.md)")
    for name in ("fidelity.md", "claims-mnist.md"):
        path = docs / name
        text = path.read_text() if path.is_file() else ""
        for match in RENDERED_FROM.finditer(text):
            experiment = match.group(0).split("`")[1] if "`" in match.group(0) else None
            now = sum(experiment is None or job.split("/")[0] == experiment for job in held)
            if now < int(match.group(1)) and not allow_fewer:
                raise RefSetError(f"{reference} holds {now} {f'`{experiment}` ' if experiment else ''}jobs, but {path} "
                                  f"was rendered from {match.group(1)}: the set lost jobs since (restore them, e.g. git "
                                  f"checkout -- {reference}); --allow-fewer splices a smaller set on purpose")


def splice(rendered: Path, reference: Path, docs: Path, *, check: bool = False,
           allow_fewer: bool = False) -> list[Path]:
    """Splice the render of the reference set (``RENDERED_DOCS``) into the docs, the README's tally and headline
    figures (``presentation.headline``) and the set's status into the sets' README; with ``check`` only compare.
    Returns the files that differed (and, without ``check``, were written)."""
    for name in RENDERED_DOCS:
        if not (rendered / name).is_file():
            raise RefSetError(f"{rendered / name} is missing: render the reference set first (reference/README.md)")
    check_render(rendered, reference, docs, allow_fewer)
    stale = []
    for path, text in docs_texts(rendered, reference, docs).items():
        if path.read_text() != text:
            stale.append(path)
            if not check:
                path.write_text(text)
    stale += install_figures(rendered / "figures", docs / "figures", check=check)  # the README's headline figures
    return stale
