"""How a job folder was made: its ``provenance.json``, written beside metrics.json and rounds.csv (standard library).

Every job the workflow makes (rules ``train``, ``derive``, ``reuse``, ``from_reference``) records, when it ends:
``job`` (its path), ``runner`` (``"snakemake"``) and ``runner_version``, ``commit`` (the commit of the code that ran,
the checkout's HEAD, or ``COMMIT_ENV`` for a copy without git; with ``clone``, the URL of ``CLONE_ENV``, when it is a
commit of another clone) and ``checkout_dirty`` (tracked files changed: True;
unknown: None), ``command`` (the Snakemake invocation, the results folder written ``RUNS`` and the checkout
``REPO``), ``rule`` and ``wildcards``, ``config`` (the config file, relative to the checkout), ``host`` (machine,
cpus, python), ``started``, ``runtime`` (device, threads, deterministic kernels, versions and training path, from
metrics.json), ``wall_s_this_process`` (this rule's own seconds), ``cpu_s_this_process`` (the CPU seconds its process
used, user and system, all its threads: beside the wall seconds and the threads, how much of a core the job had, i.e.
what else shared the machine) and ``load_average`` (the machine's 1-, 5- and 15-minute load averages when it ended),
``wall_s_job`` (the training's: metrics.json's ``wall_time_s``, a derived job's own seconds, None for a copy) and
``finished``; a derived job adds
``derived_from``, a branched one ``branched_from``, a twin ``reused_from`` (job paths) and a copy from a reference set
``copied_from`` with that job's record (``reference_provenance``).

The jobs of the committed reference sets were made by ``scripts/reference_jobs.py`` (removed since): their records
hold the same fields but ``runner``, ``rule`` and ``wildcards`` (their ``command`` is the ``fedbalance train`` or
``derive`` command line) and read as ``OLD_RUNNER`` (``runner``). ``fedbalance reference collect`` adds
``collected`` when it copies a job into a set: a folder of such records without a set's marker is an unsealed set.
"""

from __future__ import annotations

import json
import math
import os
import platform
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fedbalance.atomic import atomic_write

PROVENANCE = "provenance.json"
"""A job's record of how it was made: beside metrics.json and rounds.csv, written last."""
PENDING = "provenance.pending.json"
"""What ``OLD_RUNNER`` knew when it started a job (commit, command, host); its ``PROVENANCE`` replaced it at the end."""
RUN_ENV = "FEDBALANCE_RUN"
"""The run's context (``run_context``: command and config), set by the Snakefile for the jobs it starts."""
COMMIT_ENV = "FEDBALANCE_COMMIT"
"""The commit of a checkout copied without git (e.g. onto a GPU machine); on a git checkout it must be its HEAD."""
OLD_RUNNER = "scripts/reference_jobs.py"
"""The runner of a record that names none: the reference sets' jobs made before the workflow made them."""
SNAKEMAKE = "snakemake"
RUNNERS = (SNAKEMAKE, OLD_RUNNER)
"""The runners a set's job may have been made by (``runner``): the workflow, or the one before it."""
CLONE_ENV = "FEDBALANCE_CLONE"
"""The URL of the clone whose commit ran the jobs, when it is not a commit of the repository the jobs are collected
into (another fork): recorded as ``clone``, which ``collect`` then names instead of finding the commit."""
CLONE = re.compile(r"(?:[a-z][a-z0-9+.-]*://\S+|[\w.-]+@[\w.-]+:\S+)")
"""A clone's URL as ``CLONE_ENV`` takes it: ``scheme://...`` or git's ``user@host:path``."""
COLLECT_KEYS = ("collected", "replaced", "migrated")
"""The keys of a record only ``collect`` writes (when it copies, replaces or migrates a job of a set)."""
COMMIT = re.compile(r"[0-9a-f]{7,40}")
"""A commit as ``COMMIT_ENV`` takes it: 7 to 40 lower-case hex digits."""


class ProvenanceError(ValueError):
    """A provenance record that cannot be read or made; the message names the file or the setting."""


def now(seconds: float | None = None) -> str:
    """A record's time stamp: UTC, to the second (ISO 8601)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def runner(record: Mapping[str, Any]) -> str:
    """What made the job of ``record``: its ``runner``, or ``OLD_RUNNER`` for a record that names none."""
    return str(record.get("runner") or OLD_RUNNER)


def in_a_set(record: Mapping[str, Any]) -> bool:
    """``record`` is a reference set's: collected into one (``collected``), or made by ``OLD_RUNNER`` (every job of the
    committed sets)."""
    return "collected" in record or runner(record) == OLD_RUNNER


def trained(record: Mapping[str, Any]) -> bool:
    """``record``'s job was trained or derived, not copied (a twin, ``reused_from``; a render's copy, ``copied_from``)."""
    return "reused_from" not in record and "copied_from" not in record


SECONDS = ("wall_s_this_process", "cpu_s_this_process", "wall_s_job")
"""The keys of a record that hold seconds: each a non-negative number or null."""


def read(path: str | Path) -> dict[str, Any]:
    """A provenance record (``PROVENANCE`` or ``PENDING``); ProvenanceError naming the file when it is not one (not JSON,
    not an object, no ``commit`` string, seconds (``SECONDS``) that are not a non-negative number or null)."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ProvenanceError(f"{path}: not a provenance record ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("commit"), str):
        why = (f"its commit is null: the run was in no git checkout and {COMMIT_ENV} was unset"
               if isinstance(data, dict) and "commit" in data and data["commit"] is None else "no 'commit'")
        raise ProvenanceError(f"{path}: not a provenance record ({why})")
    for key in SECONDS:
        value = data.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not math.isfinite(value) or value < 0):
            raise ProvenanceError(f"{path}: {key} {value!r} is not a number of seconds")
    return data


def text(record: Mapping[str, Any]) -> str:
    """A record as written: JSON, indented, one trailing newline."""
    return json.dumps(record, indent=2) + "\n"


def _git(folder: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True, check=True,
                          timeout=60).stdout.strip()


def code_state(code: str | Path | None, env: Mapping[str, str] = os.environ) -> tuple[str | None, bool | None]:
    """(the commit of the code in ``code``, whether its tracked files differ from it): the git checkout's HEAD and
    status, else ``COMMIT_ENV`` (its state unknown: None), else (None, None). ProvenanceError when ``COMMIT_ENV`` is
    not a commit, or on a git checkout is not its HEAD."""
    given = env.get(COMMIT_ENV) or None
    if given is not None and not COMMIT.fullmatch(given):
        raise ProvenanceError(f"{COMMIT_ENV}={given!r}: not a commit (7 to 40 hex digits, e.g. the output of "
                              "git rev-parse HEAD)")
    try:
        if code is None:
            raise OSError("no checkout")
        commit = _git(Path(code), "rev-parse", "HEAD")
        dirty = bool(_git(Path(code), "status", "--porcelain", "--untracked-files=no"))
    except (OSError, subprocess.SubprocessError):
        return given, None
    if given is not None and not commit.startswith(given):
        raise ProvenanceError(f"{COMMIT_ENV}={given}: the checkout {code} is at {commit[:12]}; unset it on a git "
                              "checkout (its HEAD is recorded)")
    return commit, dirty


def _machine_free(value: str, places: Mapping[str, str]) -> str:
    """``value`` with each of ``places`` (a path -> its token, e.g. the results folder -> RUNS) written as its token."""
    for path, token in sorted(places.items(), key=lambda kv: -len(kv[0])):
        if path and path != ".":
            value = value.replace(path, token)
    return value


def run_context(argv: Sequence[str], configfiles: Sequence[str | Path], results: str | Path,
                checkout: str | Path | None, env: Mapping[str, str] = os.environ) -> str:
    """``RUN_ENV``'s value for the jobs of one Snakemake run (JSON): its ``command`` (``argv``, the results folder
    written ``RUNS`` and ``checkout`` ``REPO``, however spelled) and its ``config`` (``configfiles``, relative to
    ``checkout``). Checks ``COMMIT_ENV``, when set, first (``code_state``): a bad one stops the run before any job."""
    if env.get(COMMIT_ENV):
        code_state(checkout, env)
    places = {str(results): "RUNS", str(Path(results).resolve()): "RUNS", str(Path(results).absolute()): "RUNS"}
    if checkout is not None:
        places[str(Path(checkout).resolve())] = "REPO"
    program = SNAKEMAKE if not argv or Path(argv[0]).name in ("__main__.py", "-c", "-m") else Path(argv[0]).name
    command = _machine_free(shlex.join([program, *argv[1:]]), places)
    configs = []
    for f in configfiles:
        path = Path(f)
        if checkout is not None and path.is_absolute() and Path(checkout).resolve() in path.resolve().parents:
            configs.append(path.resolve().relative_to(Path(checkout).resolve()).as_posix())
        else:
            configs.append(_machine_free(str(f), places))
    return json.dumps({"command": command, "config": configs[0] if len(configs) == 1 else configs})


def host() -> dict[str, Any]:
    """The machine a job ran on, as records name it (no host name): with its CPU's model and, where torch is loaded, the
    instruction set torch's CPU kernels use (``torch.backends.cpu.get_cpu_capability``): the same job on another CPU
    drifts in the last bits from its first round (docs/deviations.md, "Determinism")."""
    out = {"machine": platform.machine(), "cpus": os.cpu_count(), "python": platform.python_version(), "cpu": cpu_model()}
    torch = sys.modules.get("torch")
    if torch is not None:
        out["cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    return out


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU's model name (Linux's /proc/cpuinfo), else ``platform.processor()``, else ``"unknown"``."""
    try:
        for line in cpuinfo.read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and value.strip():
                return value.strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def cpu_seconds() -> float | None:
    """The CPU seconds this process has used, user and system, all its threads (``resource.getrusage``); None where
    the platform has no ``resource`` module (Windows)."""
    try:
        import resource
    except ImportError:
        return None
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return round(usage.ru_utime + usage.ru_stime, 1)


def load_average() -> list[float] | None:
    """The machine's 1-, 5- and 15-minute load averages (``os.getloadavg``), None where the platform has none."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def runtime_of(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """What decides the numbers besides the spec: device, torch threads, kernels, versions, path (from metrics.json)."""
    out = {k: metrics.get(k) for k in ("device", "threads", "deterministic", "versions", "path")}
    out["path"] = out["path"] or (metrics.get("config") or {}).get("path")  # older metrics.json: path in config
    return out


def job_path(metrics: Mapping[str, Any]) -> str:
    """The job path metrics.json's ``job`` names (``experiment/dataset/setting/loss/seed<k>``)."""
    job = metrics["job"]
    return f"{job['experiment']}/{job['dataset']}/{job['setting']}/{job['loss']}/seed{job['seed']}"


def job_record(metrics: Mapping[str, Any], *, how: Mapping[str, Any], code: str | Path | None, started: float,
               trained: bool = True, extra: Mapping[str, Any] | None = None,
               env: Mapping[str, str] = os.environ) -> dict[str, Any]:
    """The provenance record of a job the workflow just made (module docstring): ``how`` holds ``runner``,
    ``runner_version``, ``rule`` and ``wildcards``; ``code`` is the folder of the code that ran (``code_state``);
    ``started`` when the rule began (``time.time()``); ``trained``: False for a copy (no training time of its own);
    ``extra``: keys the rule adds (a twin's ``reused_from``, a copy's ``copied_from``). A trained job's source, when it
    was derived or branched, comes from metrics.json."""
    commit, dirty = code_state(code, env)
    clone = env.get(CLONE_ENV) or None
    if clone is not None and not CLONE.fullmatch(clone):
        raise ProvenanceError(f"{CLONE_ENV}={clone!r}: not a clone's URL (scheme://host/path or user@host:path)")
    try:
        run = json.loads(env.get(RUN_ENV) or "{}")
    except json.JSONDecodeError:
        run = {}
    wall = round(time.time() - started, 1)
    sources = {}
    if trained and metrics.get("derived_from"):
        sources["derived_from"] = metrics["derived_from"]
    if trained and isinstance(metrics.get("branched_from"), Mapping):
        sources["branched_from"] = metrics["branched_from"].get("folder")
    job_wall = wall if "derived_from" in sources else metrics.get("wall_time_s") if trained else None
    return {
        "job": job_path(metrics),
        "runner": how["runner"],
        "runner_version": how.get("runner_version"),
        "commit": commit,
        **({"clone": clone} if clone is not None else {}),
        "checkout_dirty": dirty,
        "command": run.get("command"),
        "rule": how.get("rule"),
        "wildcards": dict(how.get("wildcards") or {}),
        "config": run.get("config"),
        "host": host(),
        "started": now(started),
        **sources,
        **dict(extra or {}),
        "runtime": runtime_of(metrics),
        "wall_s_this_process": wall,
        "cpu_s_this_process": cpu_seconds(),
        "load_average": load_average(),
        "wall_s_job": job_wall,
        "finished": now(),
    }


def write(folder: str | Path, record: Mapping[str, Any]) -> None:
    """Write ``folder``'s ``PROVENANCE`` atomically (a kill leaves the old file or the new one)."""
    atomic_write(Path(folder) / PROVENANCE, lambda fh: fh.write(text(record)))
