# fedbalance: regenerate every experiment, table and figure of Wang et al., "Addressing Class
# Imbalance in Federated Learning" (AAAI 2021). See README.md and /docs.
#
#   full paper:   snakemake --cores all --use-conda                      (config/config.yaml)
#   quick check:  snakemake --cores 2 --configfile config/quick.yaml     (embedded mnist5k, CPU)
#   SLURM:        snakemake --workflow-profile profiles/slurm --use-conda ...   (README, "Running on SLURM")
#   report:       snakemake --report results/report.html  [same --configfile as the run]
#
# How the rules import the library: the Snakefile puts the src/ beside itself first on sys.path (so
# planning works with or without `pip install -e .`), and every script under workflow/scripts/ starts
# with `import _common`, which does the same from its own location. Both go by this workflow's files,
# not the working directory, so the workflow also runs as a module of a user's own workflow
# (.snakemake-workflow-catalog.yml). That keeps the conda environments (envs/*.yaml) free of the
# project itself: they only hold its dependencies, `--use-conda` needs no pip install of the repo,
# and an edit under src/ takes effect without rebuilding an environment.

import copy
import os
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.utils import min_version, validate

min_version("9.0")

# This Snakefile's folder: the clone, or, when the workflow is a module, wherever the module's Snakefile
# lies (workflow.basedir is then the user's folder). From a git host (github(...)) it is no folder on
# disk: the library comes from `pip install`, and _common.py is fetched beside the scripts.
WORKFLOW_DIR = workflow.current_basedir
if WORKFLOW_DIR.is_local:
    sys.path.insert(0, str(Path(WORKFLOW_DIR.get_path_or_uri(secret_free=True)) / "src"))
else:
    workflow.sourcecache.get_path(WORKFLOW_DIR.join("workflow/scripts/_common.py"))

from fedbalance.config import ConfigError, read_yaml  # noqa: E402
from fedbalance.config import validate as validate_study  # noqa: E402
from fedbalance.version import ALLOW_MISMATCH_ENV, mismatch_allowed, workflow_release_problem  # noqa: E402

# The library must be this workflow's release: a clone's own src/, or, for a module fetched at a tag, the
# installed release of that tag (README, "As a Snakemake module"). FEDBALANCE_ALLOW_VERSION_MISMATCH=1 runs anyway.
_release_problem = workflow_release_problem(
    src=Path(WORKFLOW_DIR.get_path_or_uri(secret_free=True)) / "src" if WORKFLOW_DIR.is_local else None,
    tag=getattr(WORKFLOW_DIR, "tag", None) or getattr(WORKFLOW_DIR, "ref", None),
    origin=WORKFLOW_DIR.get_path_or_uri(secret_free=True),
)
if _release_problem and not mismatch_allowed(os.environ):
    raise WorkflowError(f"{_release_problem}; or set {ALLOW_MISMATCH_ENV}=1 to run anyway")


# `--profile profiles/slurm` (or `--executor slurm` with no profile) also loads profiles/default as the
# workflow profile, and its keys win over profiles/slurm's. Say so, and what it does, before any job
# is submitted (onstart runs only when this Snakefile is the main one, not a module's).
onstart:
    _default = Path(workflow.basedir) / "profiles" / "default" / "config.yaml"
    _local = read_yaml(_default) if _default.is_file() else {}
    _given = workflow.resource_settings.resources
    _slots = [r for r in _local.get("resources", []) if r.split("=")[0] in _given]
    _wait = workflow.execution_settings.latency_wait
    if workflow.executor_plugin.name == "slurm" and (_slots or _wait == _local.get("latency-wait")):
        _cores = workflow.resource_settings.cores
        logger.warning(
            f"WARNING: profiles/default is in effect beside the SLURM executor (latency-wait {_wait}, resources "
            f"{' '.join(_slots) or 'none'}, cores {_cores}): `--profile profiles/slurm` does this, because Snakemake "
            f"then also loads profiles/default as the workflow profile and its keys win. So each job's outputs get "
            f"{_wait} s, not profiles/slurm's 60 s, to appear on the shared file system before the job counts as "
            f"failed, and no job gets more threads than {_cores} (this host's cores; --set-threads above it is "
            f"cut); gpu_slots caps nothing on SLURM. Run `snakemake --workflow-profile profiles/slurm ...` "
            f'instead (README, "Running on SLURM").'
        )


configfile: "config/config.yaml"


# A --configfile names a whole study (config/quick.yaml is complete on its own): it replaces
# config/config.yaml instead of being deep-merged into it (Snakemake's default, which would keep
# the full protocol's extra datasets, experiments and settings). --config KEY=VALUE still
# overrides single keys of whichever file is in use.
if workflow.config_settings.configfiles:
    config.clear()
    config.update(copy.deepcopy(workflow.config_settings.overwrite_config))

# Snakemake's YAML loader keeps the last of two equal keys: re-read each config file strictly, so a
# key given twice stops here with the file and line.
for _configfile in workflow.config_settings.configfiles or workflow.configfiles:
    try:
        read_yaml(_configfile)
    except ConfigError as exc:
        raise WorkflowError(f"invalid configuration: {exc}") from None

# `--config reference_dir=` reaches the config as null, which is the training run: refuse it (a render was meant)
# rather than plan the whole study's training. To train, leave reference_dir out.
if "reference_dir" in workflow.config_settings.config and workflow.config_settings.config["reference_dir"] is None:
    raise WorkflowError(
        "invalid configuration: reference_dir: empty (--config reference_dir=); name a reference set to render "
        "(e.g. reference_dir=reference/mnist), or leave reference_dir out to train the study"
    )

# The library's validation (names and folders, the JSON schema, then cross-key checks such as
# clients_per_round <= num_clients), then Snakemake's own pass over the same schema. Either failure
# stops here, before any DAG is built, with a message naming the key.
try:
    config.update(validate_study(config))
except ConfigError as exc:
    raise WorkflowError(f"invalid configuration: {exc}") from None
validate(config, "src/fedbalance/config.schema.yaml")

RESULTS = config["results_dir"].rstrip("/")
DATA_DIR = config["data_dir"]


report: "report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/partition.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/derive.smk"
include: "workflow/rules/aggregate.smk"
include: "workflow/rules/report.smk"


localrules:
    all,


rule all:
    default_target: True
    input:
        TABLE_FILES,
        FIGURE_FILES,
        SUMMARY_FILES,
        FIDELITY_FILES,
        f"{RESULTS}/aggregate/final.csv",
        f"{RESULTS}/aggregate/rounds.csv",
        f"{RESULTS}/aggregate/clients.csv",


# `snakemake --report` packs finished outputs only: on a partial results folder say what is missing
# and how to make it, instead of Snakemake's flood of warnings and an error naming one file. With targets
# after `--` (`--report R -- TARGETS`) only those of them that are tables, figures or summaries must exist
# (the targets are read from the command line: Snakemake hands them to the workflow after parsing this file).
if any(arg == "--report" or arg.startswith("--report=") for arg in sys.argv):
    _targets = set(sys.argv[sys.argv.index("--") + 1 :]) if "--" in sys.argv else set()
    _wanted = [*TABLE_FILES, *FIGURE_FILES, *SUMMARY_FILES, *FIDELITY_FILES]
    _wanted = [f for f in _wanted if f in _targets] if _targets else _wanted
    _missing = [f for f in _wanted if not Path(f).exists()]
    if _missing:
        _cf = " ".join(f"--configfile {f}" for f in workflow.config_settings.configfiles)
        raise WorkflowError(
            f"--report needs the finished run: {len(_missing)} of {len(_wanted)} tables, figures and summaries "
            f"are missing under {RESULTS}/ (e.g. {_missing[0]}); make them first with "
            f"`snakemake --cores all {_cf}`, then rerun the --report command"
        )
