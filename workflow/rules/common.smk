# Shared helpers of the rules: the job list, each job's resolved parameters, device and resources.
# `config` has been validated by the Snakefile (schema + fedbalance.jobs.config.validate) before this runs.
#
# What is imported here, when the workflow parses, needs the standard library, PyYAML and jsonschema only (which
# Snakemake brings): the workflow catalog lints it with Snakemake alone (tests/test_catalog.py). Whatever needs
# numpy, pandas or torch is imported inside a function that runs when the DAG is built (the reference set's check,
# the report's contract, the GPU probe of device: auto) or in the rules' scripts.

import json
import re

from functools import cache
from pathlib import Path

from fedbalance.jobs.config import (
    data_args,
    dataset_plugin,
    dataset_spec,
    estimator_versions,
    jobs,
    resolve_job,
    settings,
    twins,
)
from fedbalance.common.jobspec import partition_dict
from fedbalance.common.records import Job
from fedbalance.jobs.jobfolder import METRICS, PROVENANCE, ROUNDS, JobFolderError, branch_file
from fedbalance.jobs.reuse import branch_rounds, branches, derived
from fedbalance.presentation import figures as presentation_figures
from fedbalance.presentation import table_specs as presentation_tables
from fedbalance.presentation.figures import FIGURES
from fedbalance.presentation.table_specs import TABLES
from fedbalance.presentation.study import describe, figure_reads, filling, table_reads
from fedbalance.common.records import DEFAULT_ESTIMATOR as RECORDS_DEFAULT_ESTIMATOR

# With `reference_dir` (a reference result set, fedbalance.evidence.reference) the study is the jobs that set
# holds, copied by rule from_reference (and their twins); nothing is trained, nothing is written into the set
# (fedbalance.jobs.config.validate keeps results_dir apart from it). A set holding no job of the config, a job
# folder that is not whole or a job of other parameters stops here, before the DAG.
REFERENCE_DIR = config.get("reference_dir")
if REFERENCE_DIR is not None:
    # pandas: a render needs the library's dependencies
    from fedbalance.evidence.reference import ReferenceSetError, render_jobs

    try:
        _held, _twins = render_jobs(config, REFERENCE_DIR, notice=lambda line: logger.warning(f"WARNING: {line}"))
    except (ReferenceSetError, JobFolderError) as exc:
        raise WorkflowError(f"invalid reference_dir: {exc}") from None
    JOBS = sorted([*_held, *_twins])
    # Every job of the render -> the job of the set it is written from (itself, or the held job covering it): one
    # job of rule from_reference writes them all (one process, not one per job).
    FROM_REFERENCE = {j.path: j.path for j in _held} | {j.path: s.path for j, s in _twins.items()}
    # Jobs equal to an earlier one but for their experiment's and setting's names: none when rendering (above).
    TWINS = {}
else:
    JOBS = jobs(config)
    _twins = twins(config)
    FROM_REFERENCE = {}
    # Jobs equal to an earlier one but for their experiment's and setting's names: written from it by
    # rule reuse instead of trained again (fedbalance.jobs.config.twins).
    TWINS = {job.path: source.path for job, source in _twins.items()}
# Jobs derived from a trained job's trajectory (rule derive; none when rendering a reference set).
_derived = {} if REFERENCE_DIR is not None else derived(config)
# Jobs that share their first rounds with another (fedbalance.jobs.reuse.branches: early's S and M with E): their source
# trains up to each round it keeps for them in a job of its own (rule keep writes branch-rNNN.pt and its checkpoint, which
# the next of its jobs resumes), and each of them starts as soon as the state it shares exists (a source that finished
# without it, trained before, lets them train from round 0). A reference set holds its jobs as they are, so nothing
# branches when rendering one.
_branches = {} if REFERENCE_DIR is not None else branches(config, skip=set(_twins) | set(_derived))
BRANCHED = {job.path: (src.path, rounds) for job, (src, rounds) in _branches.items()}
KEEP_ROUNDS = {src.path: rounds for src, rounds in branch_rounds(_branches).items()}


def contract_checked():
    """Warn, once, in the main process, when this config's family and setting names do not fit the ones the report
    reads (a renamed family or grid prefix would leave cells at '--'). Called when rule all is planned (its input
    function, before any job runs): the report's contract imports the claims' code, which needs pandas."""
    if workflow.is_main_process and not _CONTRACT_CHECKED:
        from fedbalance.presentation.contract import contract_warnings

        _CONTRACT_CHECKED.append(True)
        for warning in contract_warnings(config, JOBS):
            logger.warning(f"WARNING: {warning}")


_CONTRACT_CHECKED = []


def all_inputs(wildcards):
    """Rule all's inputs: every table, figure and summary of the study (rules/report.smk) and the tidy CSVs; warns
    first when the config's names do not fit the report's (contract_checked)."""
    contract_checked()
    tidy = [result("aggregate", f"{name}.csv") for name in ("final", "rounds", "clients")]
    return [*TABLE_FILES, *FIGURE_FILES, *SUMMARY_FILES, *FIDELITY_FILES, *REPORT_FILES, *tidy]


EXPERIMENTS = list(config["experiments"])
DATASETS = list(config["datasets"])
# The default composition estimator: the first of monitor.estimators (docs/design.md §2; docs/deviations.md).
DEFAULT_ESTIMATOR = config.get("defaults", {}).get("monitor", {}).get("estimators", [RECORDS_DEFAULT_ESTIMATOR])[0]
LOSSES = sorted({loss for e in config["experiments"].values() for loss in e["losses"]})


def _alternation(names):
    return "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))


def _paths(paths):
    """A regex matching exactly these job paths (never matching when there are none)."""
    return "|".join(re.escape(p) for p in sorted(paths)) or "(?!)"


wildcard_constraints:
    experiment=_alternation(EXPERIMENTS),
    dataset=_alternation(DATASETS),
    # setting names are [A-Za-z0-9._-]+ (checked by fedbalance.jobs.config.validate), e.g. "t1.25", "c5_g10", "S"
    setting=r"[A-Za-z0-9._\-]+",
    loss=_alternation(LOSSES),
    seed=r"\d+",


# One partition per (experiment, dataset, setting, seed): it does not depend on the loss.
PARTITIONS = sorted({(j.experiment, j.dataset, j.setting, j.seed) for j in JOBS})


def job_of(wildcards):
    return Job(wildcards.experiment, wildcards.dataset, wildcards.setting, wildcards.loss, int(wildcards.seed))


def job_spec(wildcards):
    """The configured dict of one training job (fedbalance.jobs.config.resolve_job(...).as_dict()): params are
    pickled plain, the script types it again (fedbalance.common.jobspec.as_spec) once src/ is on its path."""
    return resolve_job(config, job_of(wildcards)).as_dict()


def twin_spec(path):
    """job_spec of the job whose result folder is ``path`` (a twin, a job of the reference set)."""
    return resolve_job(config, Job.from_path(path)).as_dict()


def reference_copies(wildcards):
    """(folder in the reference set, result folder, twin_spec) of every job rule from_reference writes."""
    return [(f"{REFERENCE_DIR}/{src}", result(path), twin_spec(path)) for path, src in FROM_REFERENCE.items()]


def reference_records(wildcards):
    """The provenance.json of the set's jobs that rule from_reference copies, where the set holds one."""
    found = (f"{REFERENCE_DIR}/{src}/{PROVENANCE}" for src in sorted(set(FROM_REFERENCE.values())))
    return [f for f in found if Path(f).is_file()]


def partition_spec(wildcards):
    """Parameters of a partition job: those of the experiment's first loss (partitions ignore the loss), less the
    records of plug-ins that do not act on a partition (fedbalance.common.jobspec.partition_dict: a loss's, an
    estimator's)."""
    loss = config["experiments"][wildcards.experiment]["losses"][0]
    return partition_dict(
        resolve_job(config, Job(wildcards.experiment, wildcards.dataset, wildcards.setting, loss, int(wildcards.seed)))
    )


def plugin_param(value, otherwise):
    """A param about plug-ins (a record, versions): ``value`` when there is one, else ``otherwise``, a value another
    param of the same rule holds. Snakemake compares a job's params as a set of values, so a rule's new plug-in param
    plans no job of a study without plug-ins again."""
    return value if value else otherwise


def dataset_data(dataset):
    """(source, loader options) of a dataset: every job of it trains on these (fedbalance.jobs.config.validate)."""
    return data_args(dataset_spec(config, dataset))


def dataset_source(dataset):
    return dataset_data(dataset)[0]


@cache
def _uses_gpu():
    """Config-driven: device cuda -> every training job asks for one GPU; cpu -> none; auto -> one
    when the machine that plans the workflow sees CUDA (on a cluster whose login node has no GPU,
    set `device: cuda` -- profiles/slurm does so with `--config device=cuda`). Asked when the DAG is
    built (auto imports torch), once."""
    device = config["device"]
    if device == "cuda":
        return True
    if device == "cpu":
        return False
    import torch

    return torch.cuda.is_available()


def torch_env(wildcards):
    """The data and training rules' conda environment: CUDA's where the training jobs use a GPU, else the CPU one
    (fedbalance.jobs.envs; asked per job, so planning imports no torch before it has to)."""
    from fedbalance.jobs.envs import env_for

    return env_for(_uses_gpu())


# A GPU training job asks one `gpu` (on SLURM the plugin turns it into --gpus=1) and one of the
# machine's `gpu_slots`: locally `--resources gpu_slots=N` (or profiles/local: gpu_slots=2) offers N slots
# per GPU, with no global `gpu` cap, so N jobs share the GPU (without either nothing caps them);
# gpu_slots is scoped "local", so on a cluster it caps one submission, never the workflow.
def train_gpus(wildcards):
    """Rule train's `gpu` and `gpu_slots`: 1 on a GPU, else 0."""
    return 1 if _uses_gpu() else 0


resource_scopes:
    gpu_slots="local",


# One thread-count policy: every training job runs torch with the config's `threads` (default 1),
# on CPU or GPU, locally or on SLURM. The numbers depend on it (float summation order), so it is
# part of the study, not of where a job runs: `--set-threads train:N` or a `--cores` below it
# change only how many cores Snakemake/SLURM reserve, never the torch thread count (train.py).
TRAIN_THREADS = config["threads"]

# Per dataset source: memory (MB) and wall time (minutes) of one training job of the full protocol
# on one GPU, with headroom. Override per rule with --set-resources; no profile does (profiles/slurm sets none).
TRAIN_MEM_MB = {"mnist5k": 2000, "mnist": 4000, "cifar10": 6000, "fer2013": 8000, "femnist": 24000}
TRAIN_RUNTIME = {"mnist5k": 15, "mnist": 120, "cifar10": 240, "fer2013": 480, "femnist": 1440}


def _dataset(wildcards):
    """The dataset of a training rule's job: its wildcard, or the one its job path names (rule keep's {source})."""
    return wildcards.dataset if hasattr(wildcards, "dataset") else Job.from_path(wildcards.source).dataset


def train_mem_mb(wildcards, attempt):
    return TRAIN_MEM_MB.get(dataset_source(_dataset(wildcards)), 8000) * attempt


def train_runtime(wildcards, attempt):
    return TRAIN_RUNTIME.get(dataset_source(_dataset(wildcards)), 480) * attempt


def data_mem_mb(wildcards, attempt):
    return (16000 if dataset_source(wildcards.dataset) == "femnist" else 4000) * attempt


def result(*parts):
    return "/".join([RESULTS, *parts])


def job_path(wildcards):
    """The result folder of rule train's job, relative to results_dir."""
    return f"{wildcards.experiment}/{wildcards.dataset}/{wildcards.setting}/{wildcards.loss}/seed{wildcards.seed}"


def keep_rounds(wildcards):
    """The rounds whose states rule train's job keeps for the jobs that branch from it (rule keep keeps them first)."""
    return KEEP_ROUNDS.get(job_path(wildcards), [])


def kept_state(source, rounds, name="kept"):
    """The input ``name``, the file of ``source``'s round state after ``rounds`` rounds, which the keep rule writes;
    none when the source finished without it (trained before it kept states), and the jobs that wait for it then
    train from round 0."""
    kept = str(branch_file(result(source), rounds))
    return {} if Path(result(source, METRICS)).exists() and not Path(kept).exists() else {name: kept}


def keep_inputs(wildcards):
    """Rule keep's inputs: the source's partition and data manifest, and its state at the round it kept before."""
    rounds = KEEP_ROUNDS[wildcards.source]
    if int(wildcards.kept) not in rounds:
        raise WorkflowError(f"{wildcards.source} keeps its round state after {rounds} rounds, not {wildcards.kept}")
    job = Job.from_path(wildcards.source)
    inputs = {
        "partition": result("partitions", job.experiment, job.dataset, job.setting, f"seed{job.seed}.json"),
        "manifest": result("data", f"{job.dataset}.json"),
    }
    earlier = [r for r in rounds if r < int(wildcards.kept)]
    return inputs | (kept_state(wildcards.source, earlier[-1]) if earlier else {})


def branch_source(wildcards):
    """The folder of the job that rule train's job branches from, or None."""
    source = BRANCHED.get(job_path(wildcards))
    return None if source is None else result(source[0])


def branch_after(wildcards):
    """The rounds rule train's job shares with its source, or None."""
    source = BRANCHED.get(job_path(wildcards))
    return None if source is None else source[1]


def train_inputs(wildcards):
    """Rule train's inputs: the partition and the data manifest; a branch source's last kept state (rule keep trains
    its rounds before it); a branched job's source's state after the rounds they share (BRANCHED)."""
    w = wildcards
    inputs = {
        "partition": result("partitions", w.experiment, w.dataset, w.setting, f"seed{w.seed}.json"),
        "manifest": result("data", f"{w.dataset}.json"),
    }
    if job_path(w) in KEEP_ROUNDS:
        inputs |= kept_state(job_path(w), KEEP_ROUNDS[job_path(w)][-1])
    if job_path(w) in BRANCHED:
        inputs |= kept_state(*BRANCHED[job_path(w)], name="source")
    return inputs


# The report's jobs (report.smk): what each table and figure job reads.
PRESENTATION = Path(presentation_tables.__file__).parent
TEMPLATES = presentation_tables.TEMPLATES
NAMES_CODE = str(PRESENTATION / "names.py")
TABLES_CODE = [
    str(PRESENTATION / "tables.py"),
    str(PRESENTATION / "table_specs.py"),
    str(PRESENTATION / "protocols.py"),
    NAMES_CODE,
]
# the paper's protocol, which a published cell was made at (fedbalance.presentation.protocols)
PAPER_PROTOCOL = str(Path(presentation_tables.PUBLISHED).with_name("paper_protocol.yaml"))
TIDY = {name: result("aggregate", f"{name}.csv") for name in ("final", "rounds", "clients")}


def claims_looks():
    """The reference set's record of its looks (fedbalance.evidence.looks), when a render of a set has one."""
    from fedbalance.evidence.looks import looks_path

    path = looks_path(REFERENCE_DIR) if REFERENCE_DIR is not None else None
    return [str(path)] if path is not None and path.is_file() else []


def table_inputs(wildcards):
    """The tidy CSVs a table reads, its code, its templates, the published numbers and the paper's protocol."""
    spec = TABLES[wildcards.label]
    templates = ("table.tex.j2", "vs_paper.tex.j2", "std_one_seed.tex.j2")
    code = TABLES_CODE + [str(TEMPLATES / t) for t in templates]
    return {
        **{k: TIDY[k] for k in spec.inputs},
        "code": code,
        "published": str(presentation_tables.PUBLISHED),
        "protocol": PAPER_PROTOCOL,
    }


def figure_inputs(wildcards):
    """The tidy CSVs a figure reads and its code: its own module, the shared helpers, the registry and the tables'
    code (the seeds a table reads, the published numbers)."""
    spec = FIGURES[wildcards.name]
    code = [str(spec.module_file), str(presentation_figures.COMMON_FILE), presentation_figures.__file__, *TABLES_CODE]
    return {**{k: TIDY[k] for k in spec.inputs}, "code": code, "published": str(presentation_tables.PUBLISHED)}


def study_config():
    """The study's config as plain data (the tables set its protocol beside the paper's)."""
    return json.loads(json.dumps(config, default=str))


# The protocol of the jobs each table and figure shows, for their pages' captions (rules table_page and figure).
@cache
def table_study(label):
    """The protocol of the jobs that fill table ``label`` in words (fedbalance.presentation.study.describe)."""
    return describe(config, filling(table_reads(label, JOBS), JOBS))


@cache
def figure_study(name):
    """The protocol of the jobs figure ``name`` draws, in words."""
    return describe(config, filling(figure_reads(name), JOBS))


# A link into a set made after the workflow parsed (the Snakefile's refuse_links_into_sets ran then) would let
# Snakemake delete the set's files when it removes a job's outputs (before the job, after it failed, an incomplete
# one), which it does through snakemake.io.remove. Every such removal is checked first
# (fedbalance.jobs.seal.refuse_removal): one that would reach a set stops the run, and nothing of the set is removed.
import snakemake.io as snakemake_io

from fedbalance.jobs.seal import guarded_removal

snakemake_io.remove = guarded_removal(snakemake_io.remove, WorkflowError)
