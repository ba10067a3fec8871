"""``python -m fedbalance`` / ``fedbalance``: run one job or a pack of jobs, write a partition, prepare data, list jobs, estimate the cost;
``reference collect|status|missing|plan|docs``: grow and read a reference set.

Every subcommand reads the study configuration (``--config``, e.g. config/quick.yaml). Bad
arguments or configuration (unknown experiment, dataset, setting or loss, missing files, invalid
values, data that cannot supply the partition) end with exit status 2 and a one-line message
naming the problem, before any training starts.
"""

from __future__ import annotations

import argparse
import errno
import logging
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fedbalance import __version__
from fedbalance.jobs.config import ConfigError, base_losses, check_threads, data_args, dataset_spec, jobs, load_config, resolve_job, settings
from fedbalance.jobs.jobfolder import PROVENANCE
from fedbalance.common.jobspec import JobSpec
from fedbalance.logs import configure as configure_logging
from fedbalance.common.records import METRIC_SCALES, Job
from fedbalance.data.partition import PartitionError
from fedbalance.jobs.seal import refuse_inside

logger = logging.getLogger(__name__)


USER_ERRORS = {
    "fedbalance.jobs.config": "ConfigError", "fedbalance.data.datasets": "DataError", "fedbalance.data.partition": "PartitionError",
    "fedbalance.engine.fl": "FLError", "fedbalance.jobs.cost": "CostError", "fedbalance.jobs.jobfolder": "JobFolderError",
    "fedbalance.jobs.run": "JobError", "fedbalance.jobs.seal": "SealError", "fedbalance.jobs.provenance": "ProvenanceError",
    "fedbalance.evidence.refset": "RefSetError", "fedbalance.common.plugins": "PluginError",
}
"""The errors that end a subcommand with status 2, by module."""


def user_errors() -> tuple[type[Exception], ...]:
    """``USER_ERRORS`` of the modules imported so far (one not imported raised none): an error of ``jobs``, ``cost``
    or ``reference`` imports no torch to be reported."""
    return tuple(getattr(sys.modules[m], name) for m, name in USER_ERRORS.items() if m in sys.modules)


def path_argument(text: str) -> Path:
    """An argparse ``type`` for paths: an empty one (``--out ''``, which would mean the working folder) is refused."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path; name a file or folder")
    return Path(text)


class WrittenPath(type(Path())):  # type: ignore[misc]
    """A path a command writes, or writes below (``written_path``): ``main`` refuses one in a reference set."""


def read_path(text: str) -> Path:
    """An argparse ``type`` for a path a command only reads (``path_argument``)."""
    return path_argument(text)


def written_path(text: str) -> Path:
    """An argparse ``type`` for a path a command writes, or writes below (``path_argument``): ``main`` refuses one that
    lies in a reference set or holds one, however spelled (``seal.refuse_inside``), before the command starts. Every
    path option is ``read_path`` or ``written_path`` (tests/test_evidence.py enumerates them)."""
    return WrittenPath(path_argument(text))


def refuse_written_in_sets(args: argparse.Namespace) -> None:
    """SealError naming the option unless every path the command writes (``written_path``) lies apart from the
    reference sets: the one guard of every writing option."""
    for dest, value in vars(args).items():
        for path in value if isinstance(value, list) else [value]:
            if isinstance(path, WrittenPath):
                refuse_inside(path, "--" + dest.replace("_", "-"))


def rounds_argument(text: str) -> list[int]:
    """An argparse ``type`` for a comma-separated list of round counts (``--keep-rounds 10,30``)."""
    try:
        rounds = [int(r) for r in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: comma-separated numbers of rounds, e.g. 10,30") from None
    if any(r < 1 for r in rounds):
        raise argparse.ArgumentTypeError(f"{text!r}: each must be a number of rounds of at least 1")
    return rounds


def _job_args(p: argparse.ArgumentParser, *, loss: bool) -> None:
    p.add_argument("--config", required=True, type=read_path, help="study configuration YAML (e.g. config/quick.yaml)")
    p.add_argument("--experiment", required=True, help="experiment name under 'experiments' of the config")
    p.add_argument("--dataset", required=True, help="dataset name listed by that experiment (e.g. mnist)")
    p.add_argument("--setting", required=True, help="setting name of that experiment (e.g. g10, c5_g10, default)")
    if loss:
        p.add_argument("--loss", required=True, help="loss listed by that experiment: a registered loss "
                       f"({', '.join(base_losses())}), an installed plug-in loss (docs/extending.md) or a name under the "
                       "config's loss_variants (e.g. ratio_rel)")
    p.add_argument("--seed", required=True, type=int, help="job seed (fixes partition, init, selection, batches)")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of all subcommands."""
    parser = argparse.ArgumentParser(
        prog="fedbalance",
        description="Class imbalance in federated learning (Wang et al., AAAI 2021): run jobs of the study outside Snakemake.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    train = sub.add_parser(
        "train",
        help="run one training job",
        description="Run one job (experiment, dataset, setting, loss, seed); write metrics.json and rounds.csv into --out. "
        "A job interrupted earlier resumes from --out/checkpoint.pt.",
    )
    _job_args(train, loss=True)
    train.add_argument("--out", required=True, type=written_path, help="output folder for metrics.json, rounds.csv and the checkpoint")
    train.add_argument("--data-dir", type=written_path, default=None, help="dataset folder (default: the config's data_dir)")
    train.add_argument("--partition", type=read_path, default=None, help="partition JSON written by 'fedbalance partition' (default: build it)")
    train.add_argument("--device", choices=("auto", "cpu", "cuda"), default=None, help="device (default: the config's device; auto = cuda if available)")
    train.add_argument(
        "--deterministic",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="deterministic kernels (default: the config's deterministic)",
    )
    train.add_argument(
        "--precision",
        choices=("fp32", "tf32"),
        default=None,
        help="float32 policy on CUDA: fp32 = TF32 off for matmuls and cuDNN, tf32 = on (default: the config's precision; "
        "the numbers depend on it)",
    )
    train.add_argument(
        "--capture",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="vectorised path: capture each chunk's batched step once and replay it (a CUDA graph on CUDA; "
        "default: the config's capture)",
    )
    train.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch CPU threads (default: the config's `threads`, as the workflow's training jobs; "
        "the numbers depend on it)",
    )
    train.add_argument(
        "--keep-rounds",
        type=rounds_argument,
        default=[],
        metavar="R[,R...]",
        help="also keep the round state after each of these numbers of rounds in --out (branch-rNNN.pt), for jobs "
        "that share those rounds with this one to start from (--branch-from)",
    )
    train.add_argument(
        "--branch-from",
        type=read_path,
        default=None,
        metavar="DIR",
        help="start from the latest round state kept in DIR (--keep-rounds of a job that trains the same first rounds, "
        "e.g. the same early job with a later switch_round); the outputs are those of a run from round 0",
    )
    train.set_defaults(func=cmd_train)

    pk = sub.add_parser(
        "pack",
        help="run several jobs of one shape as one pack (their clients trained together)",
        description="Run the --job jobs (same model, batch size, local epochs and optimiser; any loss, seed or setting) "
        "in one process, their clients' copies trained together on the vectorised path (fedbalance.jobs.pack); each job "
        "writes metrics.json, rounds.csv and its checkpoint into <results>/<job>, as 'fedbalance train' would. A pack "
        "interrupted earlier resumes every job from its checkpoint; a job already finished is not trained again.",
    )
    pk.add_argument("--config", required=True, type=read_path, help="study configuration YAML (e.g. config/quick.yaml)")
    pk.add_argument("--job", required=True, action="append", metavar="EXPERIMENT/DATASET/SETTING/LOSS/seedK",
                    help="a job of the config, as 'fedbalance jobs' prints it (repeatable: one per job of the pack)")
    pk.add_argument("--results", type=written_path, default=None, help="results folder (default: the config's results_dir)")
    pk.add_argument("--data-dir", type=written_path, default=None, help="dataset folder (default: the config's data_dir)")
    pk.add_argument("--device", choices=("auto", "cpu", "cuda"), default=None, help="device (default: the config's device)")
    pk.add_argument("--deterministic", action=argparse.BooleanOptionalAction, default=None,
                    help="deterministic kernels (default: the config's deterministic)")
    pk.add_argument("--precision", choices=("fp32", "tf32"), default=None, help="float32 policy on CUDA (default: the config's)")
    pk.add_argument("--capture", action=argparse.BooleanOptionalAction, default=None,
                    help="capture each chunk's batched step once and replay it (default: the config's capture)")
    pk.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: the config's `threads`)")
    pk.set_defaults(func=cmd_pack)

    der = sub.add_parser(
        "derive",
        help="write a job from a trained job's trajectory (a T_Ra or estimator variant of a CE job)",
        description="Write the job (experiment, dataset, setting, loss, seed) into --out from the finished job in --source "
        "and its trajectory.pt: the same training, the monitor run again with the job's own keys (fedbalance.jobs.derive). "
        "Refused unless the config's job differs from the source's only there.",
    )
    _job_args(der, loss=True)
    der.add_argument("--source", required=True, type=read_path, help="the trained job's folder (metrics.json, "
                     "rounds.csv, trajectory.pt)")
    der.add_argument("--out", required=True, type=written_path, help="output folder for metrics.json and rounds.csv")
    der.add_argument("--data-dir", type=written_path, default=None, help="dataset folder (default: the config's data_dir)")
    der.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: the config's `threads`)")
    der.set_defaults(func=cmd_derive)

    part = sub.add_parser(
        "partition",
        help="write the client partition JSON of one job",
        description="Build the partition(s) of (experiment, dataset, setting, seed) and write them as JSON ('main', and "
        "'balanced' when the setting has a switch_round).",
    )
    _job_args(part, loss=False)
    part.add_argument("--out", required=True, type=written_path, help="partition JSON file to write")
    part.add_argument("--data-dir", type=written_path, default=None, help="dataset folder (default: the config's data_dir)")
    part.set_defaults(func=cmd_partition)

    prep = sub.add_parser(
        "prepare",
        help="download/verify one dataset into data_dir",
        description="Make sure a dataset's files are present and verified in data_dir (downloading when the config allows).",
    )
    prep.add_argument("--config", required=True, type=read_path, help="study configuration YAML")
    prep.add_argument("--dataset", required=True, help="dataset name under 'datasets' of the config")
    prep.add_argument("--data-dir", type=written_path, default=None, help="dataset folder (default: the config's data_dir)")
    prep.set_defaults(func=cmd_prepare)

    plug = sub.add_parser(
        "plugins",
        help="list the plug-ins the study uses, with their package, version and origin",
        description="Print every plug-in (loss, composition estimator, dataset) the config's jobs use: its package and "
        "version as installed, where it comes from (entry point or dotted path), how many jobs use it and how many "
        "train on it; then the finished jobs under the results folder that ran one at another version (their "
        "metrics.json's plugins). A job that trains on the plug-in is planned again by the workflow; one whose monitor "
        "only recorded an estimator keeps that version's columns until rerun (snakemake --forcerun its metrics.json).",
    )
    plug.add_argument("--config", required=True, type=read_path, help="study configuration YAML")
    plug.add_argument("--results", type=read_path, default=None,
                      help="results folder whose finished jobs to check (default: the config's results_dir)")
    plug.set_defaults(func=cmd_plugins)

    env = sub.add_parser("envs", help="write the workflow's conda environments, pinned",
                         description="Write workflow/envs/*.yaml and pins.txt, every package at the version installed "
                                     "here (fedbalance.jobs.envs); --check: exit 1 when they differ, writing nothing.")
    env.add_argument("--dir", type=written_path, default=Path("workflow/envs"), help="default: workflow/envs")
    env.add_argument("--check", action="store_true")
    env.set_defaults(func=cmd_envs)

    ls = sub.add_parser("jobs", help="list the jobs of the study", description="Print every job as experiment/dataset/setting/loss/seedK.")
    ls.add_argument("--config", required=True, type=read_path, help="study configuration YAML")
    ls.add_argument("--experiment", action="append", default=None, help="only this experiment (repeatable)")
    ls.set_defaults(func=cmd_jobs)

    cost = sub.add_parser(
        "cost",
        help="estimate the device-hours of the study before running it",
        description="Count every job's SGD steps and forward passes from the config (no data files needed) and "
        "multiply by seconds per step: measured now on this device (a short calibration on synthetic data), "
        "read from --calibration, or, for --device cuda without either, the calibration shipped with the package "
        "(measured on an NVIDIA H200; it says so). Prints device-hours per experiment family and in total.",
    )
    cost.add_argument("--config", required=True, type=read_path, help="study configuration YAML")
    cost.add_argument("--experiment", action="append", default=None, help="only this experiment (repeatable)")
    cost.add_argument("--calibration", type=written_path, default=None, help="calibration JSON: read it if it exists (unless --calibrate), else write it")
    cost.add_argument("--calibrate", action="store_true", help="measure now even when --calibration exists (and overwrite it)")
    cost.add_argument("--device", choices=("auto", "cpu", "cuda"), default=None, help="device to calibrate (default: the config's device)")
    cost.add_argument("--threads", type=int, default=None, help="torch CPU threads while calibrating (default: 1 on the CPU, as the workflow's CPU jobs)")
    cost.add_argument("--samples-per-writer", type=int, default=None, help="FEMNIST samples per writer (default: fedbalance.jobs.cost.SAMPLES_PER_WRITER)")
    cost.add_argument("--json", action="store_true", help="print the rows, total and calibration as JSON instead of the table")
    cost.set_defaults(func=cmd_cost)

    cmp = sub.add_parser(
        "compare",
        help="set your results beside a reference result set, cell by cell",
        description="For every cell (experiment, dataset, setting, loss) both folders hold: mean ± std over seeds "
        "of each metric on both sides, the difference and its 95 % interval (paired by seed on 3 common seeds or "
        "more, both sides then shown on those seeds; else Welch's t on every seed, the row saying 'unlike seeds') "
        "-- where both sides ran the cell alike. Prints Markdown, headed by "
        "the keys (every configured key that acts on the cell's loss but the seed, the names and the output-only "
        "keys) whose values differ between the two sides' jobs of a cell; the cells one side alone holds are "
        "counted (--unmatched lists them); --csv also writes the table, every cell.",
    )
    cmp.add_argument("--ours", required=True, type=read_path, help="your results folder (e.g. results)")
    cmp.add_argument("--reference", required=True, type=read_path, help="the reference set (e.g. reference/mnist)")
    cmp.add_argument("--metric", action="append", default=None, choices=sorted(_compare_metrics()),
                     help="metric (repeatable; default: acc_minority, acc_majority, auc_hard)")
    cmp.add_argument("--experiment", action="append", default=None, help="only this experiment (repeatable)")
    cmp.add_argument("--csv", type=written_path, default=None, help="also write the table as CSV here")
    cmp.add_argument("--strict", action="store_true", help="refuse (exit status 2) when the two sides' protocols differ")
    cmp.add_argument("--across-protocols", action="store_true",
                     help="give a verdict also where the two sides' protocols differ (default: only the differences)")
    cmp.add_argument("--unmatched", action="store_true", help="also list the cells only one side holds (default: counted)")
    cmp.add_argument("--accept-uncommitted", action="store_true",
                     help="read a reference set inside a git work tree whose files differ from the commit checked out "
                     "(collected jobs not yet committed; refused without it); the output says so, naming the files")
    cmp.set_defaults(func=cmd_compare)
    _reference_parser(sub)
    return parser


def _reference_parser(sub: Any) -> None:
    """``fedbalance reference collect|status|missing|docs`` (``fedbalance.evidence.refset``, ``fedbalance.presentation.refdocs``)."""
    ref = sub.add_parser(
        "reference",
        help="grow and read a reference set: collect jobs into it, its status, what it lacks, the docs it renders",
        description="A reference set (reference/mnist) grows through the workflow: `missing --targets RUNS` prints the "
        "jobs it lacks, in the evidence order, as Snakemake targets; `collect RUNS --into SET` copies the finished jobs "
        "of RUNS into it, each checked first, and seals it again (reference/README.md).",
    )
    rsub = ref.add_subparsers(dest="action", required=True, metavar="ACTION")
    col = rsub.add_parser(
        "collect",
        help="copy the finished jobs of a results folder into a reference set and seal it",
        description="Check every finished job of RUNS (whole, of the set's protocol, with a provenance.json naming "
        "its commit), then write the new set beside the old one and swap them in one rename, holding the set's lock: "
        "a kill leaves the old set or the new one (--recover finishes or undoes an interrupted collect).",
    )
    col.add_argument("runs", nargs="?", type=read_path, default=None, metavar="RUNS",
                     help="the results_dir the workflow ran the jobs in")
    col.add_argument("--into", required=True, type=read_path, metavar="SET", help="the reference set (e.g. reference/mnist)")
    col.add_argument("--config", type=read_path, default=None, help="the study config of a new set (default "
                     "config/mnist.yaml), or of a sealed set moved away from it; a sealed set's is in its marker")
    col.add_argument("--replace", action="store_true", help="replace jobs of the set that differ from the runs'")
    col.add_argument("--reason", default=None, help="why (with --replace): recorded in the replaced jobs' provenance")
    col.add_argument("--adopt", action="store_true", help="seal an existing set that has no marker, as it is")
    col.add_argument("--recover", action="store_true", help="finish or undo a collect into SET that was interrupted")
    col.set_defaults(func=cmd_reference_collect)
    st = rsub.add_parser("status", help="what the set holds (Markdown)",
                         description="Per (experiment, setting, loss) the seeds the set holds; how far the evidence "
                         "order is (per step: jobs in all, in the set, to run); its commits, runners, and per device "
                         "its jobs, the derived ones and the minutes a trained job took.")
    st.add_argument("--reference", required=True, type=read_path, help="the reference set")
    st.add_argument("--readme", type=written_path, default=None, help="write the table into this README's status block")
    st.set_defaults(func=cmd_reference_status)
    mi = rsub.add_parser("missing", help="the jobs the set lacks, in the evidence order (job paths, or targets)",
                         description="The jobs of the study the set lacks (twins: the job trained in their place), in "
                         "the evidence issue's order, one a line; on stderr a count per step: its jobs to run, of "
                         "its jobs in all.")
    mi.add_argument("--reference", type=read_path, default=Path("reference/mnist"), help="the reference set")
    mi.add_argument("--config", type=read_path, default=None,
                    help="the study config (default: the set's marker's, else config/mnist.yaml)")
    mi.add_argument("--dataset", default="mnist")
    mi.add_argument("--plan", nargs="+", default=None, help="steps experiment:settings:seeds (settings: globs, empty "
                    "for all) in order; default: the evidence order (fedbalance.evidence.refset.EVIDENCE_PLAN)")
    mi.add_argument("--targets", type=read_path, default=None, metavar="RUNS",
                    help="print Snakemake targets under this results_dir (RUNS/<job>/metrics.json) instead of job paths")
    mi.add_argument("--next-step", action="store_true",
                    help="print only the first step that still has a job to run (with --targets: one not finished in "
                    "RUNS), so that a batch never mixes steps: Snakemake runs a batch's jobs in an order of its own")
    mi.set_defaults(func=cmd_reference_missing)
    pl = rsub.add_parser("plan", help="per undecided claim, the jobs that would decide it and their cost",
                         description="From a render of the set: each claim not distinguishable (or on too few seeds), "
                         "the seeds 80 % power needs at its bottleneck's observed effect and spread, the jobs of its "
                         "cells those seeds lack and their estimated hours (fedbalance cost's arithmetic, the shipped "
                         "calibration, or one measured).")
    pl.add_argument("--rendered", type=read_path, default=Path("results_reference"), help="results_dir of the render")
    pl.add_argument("--reference", type=read_path, default=Path("reference/mnist"),
                    help="the set (its looks: SET.looks.yaml beside it)")
    pl.add_argument("--config", type=read_path, default=None,
                    help="the study config (default: the set's marker's, else config/mnist.yaml)")
    pl.add_argument("--calibration", type=read_path, default=None,
                    help="a calibration JSON (fedbalance cost --calibration); default: the one shipped for CUDA")
    pl.set_defaults(func=cmd_reference_plan)
    dc = rsub.add_parser("docs", help="splice a render of the set into docs/ and its status into reference/README.md",
                         description="Splice the rendered Fidelity.md, Reproduction.md and claims.md into docs/ (between "
                         "their marks), every prose block computed from the set, and the set's status table.")
    dc.add_argument("--rendered", type=read_path, default=Path("results_reference"), help="results_dir of the render")
    dc.add_argument("--reference", type=read_path, default=Path("reference/mnist"))
    dc.add_argument("--docs", type=written_path, default=Path("docs"))
    dc.add_argument("--check", action="store_true", help="change nothing; exit 1 when a doc differs from the render")
    dc.add_argument("--allow-fewer", action="store_true", help="splice a render of fewer jobs than the docs were rendered from")
    dc.set_defaults(func=cmd_reference_docs)


def _compare_metrics() -> tuple[str, ...]:
    return tuple(METRIC_SCALES)


def _choose(what: str, value: str, options: Sequence[str], where: str) -> None:
    if value not in options:
        raise ConfigError(f"{where}: unknown {what} {value!r}; choose from {sorted(options)}")


def job_spec(cfg: dict[str, Any], experiment: str, dataset: str, setting: str, loss: str | None, seed: int) -> JobSpec:
    """Validate the job's names against the config and return its resolved spec."""
    _choose("experiment", experiment, list(cfg["experiments"]), "experiments")
    exp = cfg["experiments"][experiment]
    where = f"experiments.{experiment}"
    _choose("dataset", dataset, exp["datasets"], f"{where}.datasets")
    _choose("setting", setting, list(settings(cfg, experiment)), where)
    if loss is not None:
        _choose("loss", loss, exp["losses"], f"{where}.losses")
    if seed < 0:
        raise ConfigError(f"seed must be >= 0, got {seed}")
    return resolve_job(cfg, Job(experiment, dataset, setting, loss or exp["losses"][0], seed))


def _data_dir(cfg: dict[str, Any], args: argparse.Namespace) -> Path:
    return args.data_dir if args.data_dir is not None else Path(cfg["data_dir"])


def recorded_job(folder: Path) -> str:
    """What made the job in ``folder``, by its provenance.json: a reference set's job (or an unreadable record), or the
    workflow's rule."""
    import json

    from fedbalance.jobs.provenance import in_a_set

    try:
        record = json.loads((folder / PROVENANCE).read_text())
        workflow = not in_a_set(record)
    except (OSError, ValueError, AttributeError):
        workflow = False
    return f"a job the workflow made (rule {record.get('rule')})" if workflow else "a job of a reference set"


def _job_out(args: argparse.Namespace) -> tuple[dict[str, Any], JobSpec]:
    """(config, job spec) of ``train`` and ``derive``, after checking ``--out`` (a folder, not a reference job's) and
    setting torch's threads (``--threads``, else the config's); torch is imported after the checks, so that a refusal
    costs no start-up."""
    if args.out.exists() and not args.out.is_dir():
        raise ConfigError(f"--out {args.out} is a file; it must be a folder (new or a job's earlier output)")
    if (args.out / PROVENANCE).exists():
        raise ConfigError(f"--out {args.out} holds {PROVENANCE}: {recorded_job(args.out)}, which nothing writes over; "
                          "name a folder of its own")
    cfg = load_config(args.config)
    spec = job_spec(cfg, args.experiment, args.dataset, args.setting, args.loss, args.seed)
    threads = args.threads if args.threads is not None else int(cfg["threads"])
    check_threads(threads, "--threads")
    import torch

    torch.set_num_threads(threads)
    return cfg, spec


def cmd_train(args: argparse.Namespace) -> int:
    """``fedbalance train``."""
    cfg, spec = _job_out(args)
    from fedbalance.jobs.run import load_partitions, run_job

    parts = load_partitions(args.partition) if args.partition is not None else None
    device = args.device or cfg["device"]
    metrics = run_job(
        spec,
        args.out,
        data_dir=_data_dir(cfg, args),
        device=device,
        deterministic=cfg["deterministic"] if args.deterministic is None else args.deterministic,
        precision=cfg["precision"] if args.precision is None else args.precision,
        capture=cfg["capture"] if args.capture is None else args.capture,
        download=bool(cfg["download"]),
        partitions=parts,
        keep_rounds=args.keep_rounds,
        branch_from=args.branch_from,
    )
    print(f"{args.out}: {final_line(metrics)}")
    return 0


def pack_jobs(cfg: dict[str, Any], names: Sequence[str], results: Path) -> tuple[list[JobSpec], list[Path]]:
    """The specs and output folders of ``fedbalance pack``'s ``--job`` names; ConfigError naming a bad one."""
    specs, outs = [], []
    for name in names:
        try:
            job = Job.from_path(name)
        except ValueError as exc:
            raise ConfigError(f"--job {exc}") from None
        specs.append(job_spec(cfg, job.experiment, job.dataset, job.setting, job.loss, job.seed))
        out = results / job.path
        if out.exists() and not out.is_dir():
            raise ConfigError(f"--job {name}: {out} is a file; a job's output must be a folder")
        if (out / PROVENANCE).exists():
            raise ConfigError(f"--job {name}: {out} holds {PROVENANCE}: {recorded_job(out)}, which nothing writes over")
        outs.append(out)
    return specs, outs


def cmd_pack(args: argparse.Namespace) -> int:
    """``fedbalance pack``: every argument checked before torch is imported."""
    cfg = load_config(args.config)
    results = args.results if args.results is not None else Path(cfg["results_dir"])
    refuse_inside(results, "--results")
    specs, outs = pack_jobs(cfg, args.job, results)
    threads = args.threads if args.threads is not None else int(cfg["threads"])
    check_threads(threads, "--threads")
    import torch

    from fedbalance.jobs.pack import run_pack

    torch.set_num_threads(threads)
    done = run_pack(
        specs,
        outs,
        data_dir=_data_dir(cfg, args),
        device=args.device or cfg["device"],
        deterministic=cfg["deterministic"] if args.deterministic is None else args.deterministic,
        precision=cfg["precision"] if args.precision is None else args.precision,
        capture=cfg["capture"] if args.capture is None else args.capture,
        download=bool(cfg["download"]),
    )
    for i, (out, metrics) in enumerate(zip(outs, done.metrics, strict=True)):
        f = metrics["final"]
        acc_m = "n/a" if f["acc_minority"] is None else f"{f['acc_minority']:.4f}"
        how = "finished before, not trained" if i in done.skipped else f"{metrics['wall_time_s']:.1f} s"
        print(f"{out}: acc {f['acc']:.4f}, Ac.M {acc_m}, {how}")
    print(f"pack of {len(outs)} jobs: {done.calls} training rounds served {done.trained} requests")
    return 0


def cmd_derive(args: argparse.Namespace) -> int:
    """``fedbalance derive``."""
    if not args.source.is_dir():
        raise ConfigError(f"--source {args.source}: not a folder (the trained job's folder)")
    cfg, spec = _job_out(args)
    from fedbalance.jobs.derive import derive_job

    metrics = derive_job(args.source, spec, args.out, data_dir=_data_dir(cfg, args))
    cs = (metrics.get("monitor") or {}).get("mean_cs", {})
    lead = spec.monitor.estimators[0] if spec.monitor.estimators else None
    shown = f", mean CS ({lead}) {cs[lead]:.4f}" if lead in cs and cs[lead] is not None else ""
    print(f"{args.out}: derived from {args.source}{shown}")
    return 0


def cmd_partition(args: argparse.Namespace) -> int:
    """``fedbalance partition``."""
    from fedbalance.data.datasets import load_dataset
    from fedbalance.jobs.run import build_partitions, save_partitions

    if args.out.is_dir():
        raise ConfigError(f"--out {args.out} is a folder; name the partition JSON file to write")
    if args.out.parent.exists() and not args.out.parent.is_dir():
        raise ConfigError(f"--out {args.out}: {args.out.parent} is a file, not a folder")
    cfg = load_config(args.config)
    spec = job_spec(cfg, args.experiment, args.dataset, args.setting, None, args.seed)
    dataset = load_dataset(spec.source, _data_dir(cfg, args), download=bool(cfg["download"]), **dict(spec.options))
    parts = build_partitions(spec, dataset)
    save_partitions(parts, args.out)
    print(f"{args.out}: {', '.join(f'{k} ({p.num_clients} clients)' for k, p in parts.items())}")
    return 0


def cmd_prepare(args: argparse.Namespace) -> int:
    """``fedbalance prepare``: fetch or find the files, then read them all (so a malformed file fails here)."""
    from fedbalance.data.datasets import load_dataset, prepare_dataset

    cfg = load_config(args.config)
    _choose("dataset", args.dataset, list(cfg["datasets"]), "datasets")
    source, options = data_args(dataset_spec(cfg, args.dataset))
    files = prepare_dataset(source, _data_dir(cfg, args), download=bool(cfg["download"]), **options)
    ds = load_dataset(source, _data_dir(cfg, args), **options)  # parses every file: malformed ones fail here
    print(f"{args.dataset} ({source}): {len(files)} file(s) ready, {len(ds.y_train)} training and "
          f"{len(ds.y_test)} test samples")
    return 0


def cmd_plugins(args: argparse.Namespace) -> int:
    """``fedbalance plugins``."""
    from fedbalance.jobs.config import study_plugins
    from fedbalance.presentation.study import plugins_table
    from fedbalance.jobs.reuse import stale_plugins

    cfg = load_config(args.config)
    found = study_plugins(cfg)
    if not found:
        print(f"{args.config}: no plug-in; every loss, estimator and dataset is fedbalance's own")
        return 0
    print(plugins_table(found))
    results = args.results if args.results is not None else Path(cfg["results_dir"])
    stale = stale_plugins(cfg, results) if results.is_dir() else []
    if not stale:
        print(f"\n{results}: no finished job ran a plug-in at another version than the one installed")
        return 0
    print(f"\n{results}: {len(stale)} finished job(s) ran a plug-in at another version than the one installed:")
    for s in stale:
        what = ("trains on it: the workflow plans it again" if s["trains"] else
                f"its monitor's {s['name']} columns are {s['recorded']}'s: rerun it with snakemake --forcerun "
                f"{results / s['job'] / 'metrics.json'}")
        print(f"- {s['job']}: {s['kind']} {s['name']} {s['recorded']} (installed: {s['installed']}); {what}")
    return 0


def cmd_jobs(args: argparse.Namespace) -> int:
    """``fedbalance jobs``."""
    cfg = load_config(args.config)
    if args.experiment:
        for e in args.experiment:
            _choose("experiment", e, list(cfg["experiments"]), "experiments")
    for job in jobs(cfg, args.experiment):
        print(job.path)
    return 0


def cmd_cost(args: argparse.Namespace) -> int:
    """``fedbalance cost``."""
    import json

    from fedbalance.jobs import cost

    cfg = load_config(args.config)
    if args.experiment:
        for e in args.experiment:
            _choose("experiment", e, list(cfg["experiments"]), "experiments")
    spw = cost.SAMPLES_PER_WRITER if args.samples_per_writer is None else args.samples_per_writer
    if spw < 1:
        raise ConfigError(f"--samples-per-writer must be >= 1, got {spw}")
    if args.threads is not None:
        check_threads(args.threads, "--threads")
    if args.calibration is not None:
        if args.calibration.is_dir():
            raise ConfigError(f"--calibration {args.calibration} is a folder; name a JSON file (read if it exists, else written)")
        if not args.calibration.parent.is_dir():
            raise ConfigError(f"--calibration {args.calibration}: its folder {args.calibration.parent} does not exist")
    stored = args.calibration is not None and args.calibration.is_file() and not args.calibrate
    shipped = args.calibration is None and not args.calibrate and (args.device or cfg["device"]) in cost.SHIPPED
    if stored or shipped:
        cal = cost.load_calibration(args.calibration) if stored else cost.shipped_calibration(args.device or cfg["device"])
        device_type = cal.device_type
    else:
        from fedbalance.jobs.run import resolve_device

        device_type = resolve_device(args.device or cfg["device"]).type
    works = cost.study_work(cfg, args.experiment, device_type=device_type, samples_per_writer=spw)
    if not (stored or shipped):
        threads = args.threads if args.threads is not None else (1 if device_type == "cpu" else None)
        t0 = time.perf_counter()
        cal = cost.calibrate({w.shape for w in works}, device_type, threads=threads)
        logger.info(f"calibrated {len(cal.probes)} model shape(s) on {cal.device} in {time.perf_counter() - t0:.1f} s")
        if args.calibration is not None:
            cost.save_calibration(cal, args.calibration)
    if shipped:  # the shapes the shipped figures did not measure: estimated from a measured one (by FLOPs)
        cal = cost.with_estimates(cal, {w.shape for w in works})
    rows, total = cost.estimate(works, cal, list(cfg["experiments"]))
    shapes = cost.shape_rows(works, cal)
    if args.json:
        print(json.dumps({"rows": [vars(r) for r in rows], "total": vars(total), "shapes": [vars(r) for r in shapes],
                          "calibration": cal.to_json()}, indent=1))
    else:
        print(cost.format_table(rows, total, cal, shapes))
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    """``fedbalance compare``."""
    from fedbalance.atomic import atomic_write
    from fedbalance.evidence.reference import (
        CELL, compare, compare_markdown, coverage_text, protocol_differences, protocol_header,
    )

    if args.csv is not None and (args.csv.is_dir() or (args.csv.parent.exists() and not args.csv.parent.is_dir())):
        raise ConfigError(f"--csv {args.csv}: not a file that can be written (a folder, or below a file)")
    for name, d in (("--ours", args.ours), ("--reference", args.reference)):
        if not d.is_dir() or not any(d.glob("**/metrics.json")):
            raise ConfigError(f"{name} {d}: no finished job (metrics.json) below it")
    accepted: list[str] = []
    frame = compare(args.ours, args.reference, args.metric, across_protocols=args.across_protocols,
                    accept_uncommitted=args.accept_uncommitted, notice=accepted.append)
    if args.experiment:
        unknown = sorted(set(args.experiment) - set(frame.experiment))
        if unknown:
            raise ConfigError(f"--experiment {', '.join(unknown)}: neither result set holds a job of it "
                              f"(they hold: {', '.join(sorted(set(frame.experiment)))})")
        frame = frame[frame.experiment.isin(args.experiment)]
    cells = {tuple(r) for r in frame[(frame.n_ours > 0) & (frame.n_ref > 0)][list(CELL)].itertuples(index=False)}
    differences = {c: d for c, d in protocol_differences(args.ours, args.reference).items() if c in cells}
    header = protocol_header(differences, len(cells))
    if args.strict and differences:
        raise ConfigError(f"--strict: {header}")
    if args.csv is not None:
        atomic_write(args.csv, lambda fh: frame.to_csv(fh, index=False))
    for line in accepted:  # --accept-uncommitted: said on stderr and above the table
        print(f"fedbalance compare: warning: {line}", file=sys.stderr)
    print("".join(f"**{line}** (--accept-uncommitted)\n\n" for line in accepted)
          + compare_markdown(frame, header, unmatched=args.unmatched), end="")
    coverage = coverage_text(args.ours)
    print(f"\n{coverage}" if coverage else "", end="")
    return 0


def cmd_reference_collect(args: argparse.Namespace) -> int:
    """``fedbalance reference collect``."""
    from fedbalance.evidence.refset import RefSetError, collect, recover

    if args.recover:
        if args.runs is not None or args.adopt or args.replace:
            raise RefSetError("--recover takes --into SET alone: it finishes or undoes the collect that was interrupted")
        print(recover(args.into))
        return 0
    return collect(args.runs, args.into, config=args.config, replace=args.replace, reason=args.reason,
                   adopt=args.adopt)


def cmd_reference_status(args: argparse.Namespace) -> int:
    """``fedbalance reference status``."""
    from fedbalance.evidence.refset import status

    print(status(args.reference, args.readme), end="")
    return 0


def cmd_reference_missing(args: argparse.Namespace) -> int:
    """``fedbalance reference missing``: the jobs one a line (or their targets); on stderr per step its jobs to run,
    of its jobs in all."""
    from fedbalance.evidence.refset import missing, next_step, set_config, target

    config = args.config if args.config is not None else set_config(args.reference)
    planned: list[int] = []
    steps = missing(config, args.reference, args.plan, args.dataset, planned)
    print(f"{sum(len(j) for _, j in steps)} jobs to run: "
          + ", ".join(f"{step} {len(j)} of {n}" for (step, j), n in zip(steps, planned)), file=sys.stderr)
    runs = args.targets
    finished = None if runs is None else (lambda job: Path(target(runs, job)).is_file())
    if finished is not None:
        done = sum(finished(job) for _, jobs_of_step in steps for job in jobs_of_step)
        if done:
            print(f"{done} of them finished in {runs}, not collected yet: python -m fedbalance reference collect "
                  f"{runs} --into {args.reference}", file=sys.stderr)
    if args.next_step:
        steps = next_step(steps, finished)
        print(f"next step: {steps[0][0] if steps else 'none'}", file=sys.stderr)
    try:
        for _, jobs_of_step in steps:
            for job in jobs_of_step:
                print(target(args.targets, job) if args.targets is not None else job.path)
        sys.stdout.flush()
    except BrokenPipeError:  # `| head -n 40`: the reader took what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def cmd_reference_plan(args: argparse.Namespace) -> int:
    """``fedbalance reference plan``."""
    from fedbalance.evidence.looks import looks_path, read_looks
    from fedbalance.evidence.refset import set_config
    from fedbalance.jobs.aggregate import read_tidy
    from fedbalance.evidence.plan import jobs_to_decide
    from fedbalance.presentation.claims import claims, decision_plan, plan_markdown

    tidy = args.rendered / "aggregate"
    if not (tidy / "final.csv").is_file():
        raise ConfigError(f"--rendered {args.rendered}: no aggregate/final.csv (render the reference set first)")
    cfg = load_config(args.config if args.config is not None else set_config(args.reference))
    final, rounds = read_tidy(tidy)
    made = claims(final, rounds, looks=read_looks(looks_path(args.reference)), sensitivity=False)
    held = {(r.experiment, r.dataset, r.setting, r.loss, int(r.seed)) for r in final.itertuples()}
    from fedbalance.jobs import cost

    if args.calibration is not None and not args.calibration.is_file():
        raise ConfigError(f"--calibration {args.calibration}: not a file (fedbalance cost --calibration writes one)")
    cal = cost.load_calibration(args.calibration) if args.calibration is not None else cost.shipped_calibration("cuda")
    rows = decision_plan(made, lambda cells, n: jobs_to_decide(cells, n, cfg, held, calibration=cal))
    print(plan_markdown(rows, f"{cal.device_type} ({cal.device})"), end="")
    return 0


def cmd_envs(args: argparse.Namespace) -> int:
    """``fedbalance envs``."""
    from fedbalance.jobs.envs import write_envs

    stale = write_envs(args.dir, check=args.check)
    print(f"{len(stale)} file(s) {'differ' if args.check else 'written'}: {', '.join(map(str, stale)) or '-'}")
    return 1 if args.check and stale else 0


def cmd_reference_docs(args: argparse.Namespace) -> int:
    """``fedbalance reference docs``."""
    from fedbalance.presentation.refdocs import splice

    stale = splice(args.rendered, args.reference, args.docs, check=args.check, allow_fewer=args.allow_fewer)
    verb = "differ from" if args.check else "updated from"
    print(f"{len(stale)} doc(s) {verb} the render: {', '.join(map(str, stale)) or '-'}")
    if args.check and stale:
        print("the reference set changed since they were written; render it and splice the render in "
              "(reference/README.md, 'Render and compare'): snakemake --cores all --configfile config/mnist.yaml "
              "--config reference_dir=reference/mnist results_dir=results_reference && "
              "python -m fedbalance reference docs --rendered results_reference")
    return 1 if args.check and stale else 0


def final_line(metrics: dict[str, Any]) -> str:
    """A finished job's last line: accuracy, Ac.M and the AUC the tables print (``FINAL_SOURCE``: ``auc_hard``), with
    its wall time."""
    from fedbalance.presentation.tables import FINAL_SOURCE

    f = metrics["final"]
    acc_m, auc = ("n/a" if f.get(k) is None else f"{f[k]:.4f}" for k in ("acc_minority", FINAL_SOURCE["auc"][0]))
    return f"acc {f['acc']:.4f}, Ac.M {acc_m}, AUC {auc}, {metrics['wall_time_s']:.1f} s"


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status (2 for bad arguments, configuration or data)."""
    args = build_parser().parse_args(argv)
    configure_logging()  # the library's messages (a job's progress lines, warnings) to stderr, from INFO
    try:
        refuse_written_in_sets(args)
        return int(args.func(args))
    except user_errors() as exc:
        print(f"fedbalance {' '.join(filter(None, (args.command, getattr(args, 'action', None))))}: error: {exc}",
              file=sys.stderr)
        return 2
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        print(f"fedbalance {args.command}: error: {exc.strerror}", file=sys.stderr)
        return 1
