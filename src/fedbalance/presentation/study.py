"""What a study's report is about: which tables and figures its jobs fill, and the protocol they ran.

Standard library only (the workflow plans from it when it parses, tests/test_catalog.py): a table is *run* when a
job of the study fills one of its cells (``TableSpec.cells``, each on the dataset it names), a figure when a job of
the study is one it reads (``FigureSpec.reads``, on the dataset it names: the CIFAR10 curves need CIFAR10 jobs); the
others are listed once as "not run in this study" (the
report's landing page, paper_tables.tex) instead of being shown as dashes or empty panels. ``describe`` gives the
protocol of a set of jobs in words (datasets, settings, rounds, clients, seeds) for the landing page and the
captions.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from fedbalance.jobs.config import resolve_job
from fedbalance.presentation.figures import FIGURES
from fedbalance.presentation.names import DATASET_NAME, DATASETS, Read
from fedbalance.presentation.table_specs import TABLES
from fedbalance.common.records import Job, parse_setting

NOT_RUN = "not run in this study"
"""How the report and paper_tables.tex name a table or figure that no job of the study fills."""

SETTING_WORDS = {"g": "Γ = {}", "c": "{} classes a client", "t": "T_Ra = {}", "a": "α = {}", "b": "β = {}",
                 "k": "{} clients a round", "bs": "batch {}", "ep": "{} local epochs"}
"""How a grid setting's ``<prefix><value>`` part reads ("g10" -> "Γ = 10"; Γ = 1 reads "balanced")."""


def table_reads(label: str, jobs: Iterable[Job] = ()) -> list[Read]:
    """The jobs the cells of table ``label`` read; for a table that lists datasets (``TableSpec.open_datasets``), also
    those of each dataset among ``jobs`` that is not the paper's (``names.DATASETS``), which it shows under its own
    name (``tables.with_plugins``)."""
    spec = TABLES[label]
    reads = [Read(c.experiment, c.dataset, c.setting, c.loss, by=label) for c in spec.cells]
    if spec.open_datasets:
        extra = dict.fromkeys(j.dataset for j in jobs if j.dataset not in DATASETS)
        first = spec.cells[0].dataset
        reads += [Read(c.experiment, d, c.setting, c.loss, by=label) for d in extra for c in spec.cells
                  if c.dataset == first]
    return reads


def figure_reads(name: str) -> list[Read]:
    """The jobs figure ``name`` reads, on the datasets it names (a figure of one dataset: that dataset's jobs alone)."""
    return [Read(r.experiment, r.dataset, r.setting, r.loss, by=name) for r in FIGURES[name].reads]


def filling(reads: Iterable[Read], jobs: Iterable[Job]) -> list[Job]:
    """The jobs among ``jobs`` that one of ``reads`` takes, in their order."""
    reads = list(reads)
    return [j for j in jobs if any(r.matches(j.experiment, j.dataset, j.setting, j.loss) for r in reads)]


def tables_run(jobs: Iterable[Job]) -> tuple[list[str], list[str]]:
    """(labels of the tables a job of ``jobs`` fills, labels of the others), in the tables' order."""
    jobs = list(jobs)
    run = [label for label in TABLES if filling(table_reads(label, jobs), jobs)]
    return run, [label for label in TABLES if label not in run]


def figures_run(jobs: Iterable[Job]) -> tuple[list[str], list[str]]:
    """(names of the figures a job of ``jobs`` fills, on the datasets each names; names of the others)."""
    jobs = list(jobs)
    run = [name for name in FIGURES if filling(figure_reads(name), jobs)]
    return run, [name for name in FIGURES if name not in run]


def setting_words(setting: str) -> str:
    """A setting name in words: "g10" -> "Γ = 10", "g1" -> "balanced", "c5_g10" -> "5 classes a client, Γ = 10"; a
    named setting ("S", "default") as it is."""
    try:
        pairs = parse_setting(setting)
    except ValueError:
        return setting
    words = []
    for prefix, value in pairs:
        if prefix == "g" and value == 1:
            words.append("balanced")
        else:
            words.append(SETTING_WORDS.get(prefix, prefix + " = {}").format(f"{value:g}" if isinstance(value, float)
                                                                             else value))
    return ", ".join(words)


def _span(values: Iterable[Any]) -> str:
    """Distinct values in words: "16", "0, 1, 2", "4 to 16" (more than three numbers), or "a, b"."""
    vals = sorted(set(values), key=lambda v: (str(type(v)), v))
    if not vals:
        return "–"
    if len(vals) > 3 and all(isinstance(v, (int, float)) for v in vals):
        return f"{vals[0]} to {vals[-1]}"
    return ", ".join(map(str, vals))


def dataset_words(cfg: Mapping[str, Any], dataset: str) -> str:
    """A dataset of the study with its source when that differs: "MNIST (mnist5k)"."""
    source = (cfg.get("datasets", {}).get(dataset) or {}).get("source", dataset)
    name = DATASET_NAME.get(dataset, dataset)
    return name if source == dataset else f"{name} ({source})"


def describe(cfg: Mapping[str, Any], jobs: Iterable[Job]) -> dict[str, str]:
    """The protocol of ``jobs`` in words: datasets, settings, losses, rounds, clients (selected a round of all), seeds
    and the number of jobs. Values that vary between the jobs are listed or given as a range ("4 to 16"); a
    centralised job counts epochs, not rounds, and has no clients."""
    jobs = list(jobs)
    specs = [resolve_job(cfg, j) for j in jobs]
    fl = [s for s in specs if s.mode == "fl"]
    central = [s for s in specs if s.mode != "fl"]
    rounds = [_span(s.rounds for s in fl) + " rounds"] if fl else []
    rounds += [_span(s.centralised_epochs or s.rounds * s.local_epochs for s in central) + " epochs (centralised)"
               ] if central else []
    clients = sorted({(s.clients_per_round, s.partition.get("num_clients")) for s in fl})
    return {
        "datasets": ", ".join(dataset_words(cfg, d) for d in dict.fromkeys(j.dataset for j in jobs)) or "–",
        "settings": "; ".join(setting_words(s) for s in dict.fromkeys(j.setting for j in jobs)) or "–",
        "losses": ", ".join(dict.fromkeys(j.loss for j in jobs)) or "–",
        "rounds": ", ".join(rounds) or "–",
        "clients": ", ".join(f"{k} of {n}" for k, n in clients) or "–",
        "seeds": f"{len({j.seed for j in jobs})} ({_span(j.seed for j in jobs)})" if jobs else "–",
        "jobs": str(len(jobs)),
    }


def family_rows(cfg: Mapping[str, Any], jobs: Iterable[Job]) -> list[dict[str, str]]:
    """``describe`` of each experiment family's jobs, in the config's order (the landing page's table)."""
    jobs = list(jobs)
    out = []
    for family in cfg["experiments"]:
        mine = [j for j in jobs if j.experiment == family]
        if mine:
            out.append({"family": family, **describe(cfg, mine)})
    return out


PAGES = (("claims.html", "each claim of the paper with its verdict"),
         ("Fidelity.html", "every loss-comparison cell beside the paper's"),
         ("Reproduction.html", "how many published cells reproduce"),
         ("study.html", "each family's protocol, what was not run, the plug-ins"))
"""The report's pages the landing page links first (file name, what it holds), in the order a reader wants them."""

LANDING = """\
Wang et al., *Addressing Class Imbalance in Federated Learning* (AAAI 2021), regenerated: every table and figure
this study fills, beside the published numbers.

**Study**: {configs}; {datasets}; {origin}

**Verdicts**: {verdicts}

**Read first**:

{links}
"""
"""The report's landing page (reStructuredText, rendered by Snakemake with jinja2 and docutils). Snakemake centres it
in a box of the window's height, so a page taller than the window loses its top: it stays a few lines, and the
detail is on ``study.html`` (``study_page``)."""

LINK = """{{% if "{name}" in shown %}}- `{name}`_: {what}\n{{% endif %}}"""
"""A link to a report page, written only when the report holds it (Snakemake's jinja2 context: ``files``, each with
its ``target``, the file's name, which Snakemake defines as a link target)."""


def verdict_note(jobs: Iterable[Job]) -> str:
    """Whether this study's claims can get a verdict: a comparison needs ``MIN_SEEDS`` seeds both sides hold, so a
    study whose every family runs fewer gets "too few seeds" (or "not enough data") for every claim."""
    from fedbalance.evidence.seedstats import MIN_SEEDS

    seeds: dict[str, set[int]] = {}
    for j in jobs:
        seeds.setdefault(j.experiment, set()).add(j.seed)
    judged = sorted(f for f, s in seeds.items() if len(s) >= MIN_SEEDS)
    most = max((len(s) for s in seeds.values()), default=0)
    if not judged:
        return (f"none to be had: a verdict compares {MIN_SEEDS} seeds or more, and this study runs {most} at most "
                f"in a family, so every claim reads 'too few seeds' or 'not enough data' (the paper's protocol, "
                f"``config/config.yaml``, runs enough).")
    return (f"judged seed by seed (95 % intervals) in the families with {MIN_SEEDS} seeds or more: "
            f"{', '.join(judged)}.")


def identity(cfg: Mapping[str, Any], jobs: Iterable[Job], *, configfiles: Iterable[str], trained: int, copied: int,
             derived: int, reference_dir: str | None = None) -> dict[str, str]:
    """Which study a report or paper_tables.tex is about, in words: ``config`` (its files), ``datasets`` and
    ``origin`` (trained here, or rendered from a reference set, with the job counts)."""
    jobs = list(jobs)
    if reference_dir is not None:
        origin = (f"rendered from the reference set {reference_dir}, nothing trained: {len(jobs)} jobs, "
                  f"{len(jobs) - copied} held by the set and {copied} copied from a held job that trains alike")
    else:
        origin = (f"trained by this workflow: {len(jobs)} jobs, {trained} trained, {copied} copied from a job that "
                  f"trains alike and {derived} derived from a trained job's trajectory")
    return {"config": ", ".join(configfiles) or "config/config.yaml (the default)",
            "datasets": ", ".join(dataset_words(cfg, d) for d in dict.fromkeys(j.dataset for j in jobs)) or "none",
            "origin": origin}


PLUGINS_TEXT = (
    "Each job's <code>metrics.json</code> records, under <code>plugins</code>, the package, version and origin of each "
    "plug-in it ran with; an estimator's columns in Monitor_under_imbalance are those of the version its job "
    "recorded. The jobs recorded with another version than the one installed, whose columns the older version made: "
    "<code>python -m fedbalance plugins --config C</code>.")
"""What the study page says of the plug-ins' versions under their table."""

STAGES = ("<code>prepare_data</code> (verify or download each dataset) → <code>partition</code> (the clients' data per "
          "experiment, dataset, setting and seed) → <code>train</code> (one FedAvg or centralised job per experiment, "
          "dataset, setting, loss and seed) → <code>aggregate</code> (tidy CSVs) → one job per table (HTML here; LaTeX, "
          "its standard deviations and its comparison with the published numbers in <code>tables/</code>) and per "
          "figure; <code>claims</code>, <code>Fidelity</code> and <code>Reproduction</code> weigh the numbers against "
          "the paper's.")
"""The workflow's stages, on the study page."""


def plugins_table(found: Iterable[Mapping[str, Any]], tablefmt: str = "grid") -> str:
    """The study's plug-ins (``config.study_plugins``) as a table (``tablefmt``: tabulate's): kind, name, package,
    version, origin, how many jobs use it and how many train on it; "" when there are none."""
    from tabulate import tabulate

    rows = [[p["kind"], p["name"], p["package"] or "no installed package", p["version"], p["origin"], p["jobs"],
             p["trains"]] for p in found]
    if not rows:
        return ""
    return tabulate(rows, headers=["kind", "name", "package", "version", "origin", "jobs", "train on it"],
                    tablefmt=tablefmt)


def landing_page(cfg: Mapping[str, Any], jobs: Iterable[Job], study: Mapping[str, str]) -> str:
    """The report's landing page (reStructuredText with jinja2, ``LANDING``): the study in three lines (``identity``:
    the config, the datasets, where the numbers come from; ``verdict_note``), then links to the claims, Fidelity,
    Reproduction and study pages (those the report holds)."""
    jobs = list(jobs)
    configs = ", ".join(f"``{c.strip()}``" for c in study["config"].split(","))
    links = "".join(LINK.format(name=name, what=what) for name, what in PAGES)
    return ('{% set shown = files|map(attribute="target")|list %}\n'
            + LANDING.format(configs=configs, datasets=study["datasets"], origin=study["origin"] + ".",
                             verdicts=verdict_note(jobs), links=links))


def study_page(cfg: Mapping[str, Any], jobs: Iterable[Job], study: Mapping[str, str], *,
               tables_not_run: Iterable[str] = (), figures_not_run: Iterable[str] = (),
               plugins: Iterable[Mapping[str, Any]] = ()) -> str:
    """The study in detail (an HTML page of the report): where the numbers come from, each family's protocol
    (``family_rows``), the tables and figures not run, the plug-ins (``config.study_plugins``: each one's package,
    version and origin) and the workflow's stages."""
    import html as _html

    from tabulate import tabulate

    from fedbalance.presentation.html import page

    rows = family_rows(cfg, jobs)
    # the datasets column only when the families differ in them (else the line above names them)
    columns = ["family", *(["datasets"] if len({r["datasets"] for r in rows}) > 1 else []), "settings", "losses",
               "rounds", "clients", "seeds", "jobs"]
    table = tabulate([[r[c] for c in columns] for r in rows], headers=columns, tablefmt="html")
    tables_not_run, figures_not_run = list(tables_not_run), list(figures_not_run)
    not_run = "; ".join(part for part in (
        f"tables {', '.join(tables_not_run)}" if tables_not_run else "",
        f"figures {', '.join(figures_not_run)}" if figures_not_run else "") if part) or "none"
    found = plugins_table(plugins, "html")
    e = _html.escape
    body = [f"<p><b>Config</b>: {e(study['config'])}. <b>Datasets</b>: {e(study['datasets'])}. <b>Where the numbers "
            f"come from</b>: {e(study['origin'])}.</p>",
            "<h2>Protocol of each experiment family</h2>",
            "<p>The report's categories: settings, losses, rounds, clients selected each round of all, seeds.</p>",
            table,
            f"<h2>{NOT_RUN.capitalize()}</h2>",
            f"<p>No job of the study fills them, so they are not shown: {e(not_run)}.</p>"]
    if found:
        body += ["<h2>Plug-ins</h2>", "<p>The plug-ins the study uses (docs/extending.md), as installed when the "
                 "workflow planned the jobs.</p>", found, f"<p>{PLUGINS_TEXT}</p>"]
    body += ["<h2>Stages</h2>", f"<p>{STAGES}</p>"]
    return page("The study", "\n".join(body))


def write_landing_page(path: str | Path, details: str | Path, cfg: Mapping[str, Any], jobs: Iterable[Job],
                       study: Mapping[str, str], *, tables_not_run: Iterable[str] = (),
                       figures_not_run: Iterable[str] = (), plugins: Iterable[Mapping[str, Any]] = ()) -> Path:
    """Write ``landing_page`` at ``path`` and ``study_page`` at ``details``."""
    jobs = list(jobs)
    p, d = Path(path), Path(details)
    for f in (p, d):
        f.parent.mkdir(parents=True, exist_ok=True)
    d.write_text(study_page(cfg, jobs, study, tables_not_run=tables_not_run, figures_not_run=figures_not_run,
                            plugins=plugins))
    p.write_text(landing_page(cfg, jobs, study))
    return p


def study_line(study: Mapping[str, str], *, html: bool = False) -> str:
    """``describe``'s words as one sentence ("The jobs shown: MNIST (mnist5k); balanced; Γ = 10; ..."), HTML-escaped
    when ``html``."""
    text = (f"The jobs shown: {study['datasets']}; {study['settings']}; losses {study['losses']}; {study['rounds']}; "
            f"clients selected a round of all: {study['clients']}; seeds {study['seeds']}; {study['jobs']} jobs.")
    if html:
        import html as _html

        return _html.escape(text)
    return text
