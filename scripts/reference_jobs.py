"""Run reference jobs (config/mnist.yaml's protocol) in the background from a pinned checkout.

Each job is ``python -m fedbalance train`` run from ``--checkout`` (a ``git worktree`` pinned at one
commit, so that edits in the working tree never change the code under a running job), with that
checkout's ``src`` first on ``PYTHONPATH``, one torch thread, on the CPU unless ``--device`` says
otherwise. A job's folder gets ``provenance.pending.json`` when it starts (commit, command, host) and
``provenance.json`` when it ends (that, plus device, torch, threads, wall time); a job with both metrics.json and
provenance.json is skipped, an interrupted one resumes from its checkpoint, and one that finished after its runner
died is recorded from its start record (never reported done without one). ``collect`` checks every finished job,
then copies it into the repository's reference set (``reference/<study>/<experiment>/<dataset>/<setting>/<loss>/
seed<k>/``: metrics.json, rounds.csv, provenance.json; nothing else); only ``collect`` writes there. A bad argument
is one line on stderr and exit status 2.

    python scripts/reference_jobs.py run --checkout /work/ref-wt --out /work/refruns \\
        --jobs losses:g10,g50:ce,ratio,ratio_rel:0,1,2 --workers 2
    python scripts/reference_jobs.py collect --out /work/refruns --reference reference/mnist
    python scripts/reference_jobs.py status --reference reference/mnist     # what the set holds (Markdown)
    python scripts/reference_jobs.py docs --rendered results_reference      # the render into docs/ (--check: compare)
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import platform
import re
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any, NamedTuple, NoReturn

from fedbalance.aggregate import read_frame, read_tidy
from fedbalance.atomic import atomic_write
from fedbalance.cli import path_argument
from fedbalance.config import MAX_CPUS_ENV, ConfigError, max_cpus
from fedbalance.jobfolder import (
    FILES, METRICS, PENDING, PROVENANCE, JobFolderError, branch_file, folder_job, job_folders, read_metrics,
)
from fedbalance.records import Job
from fedbalance.seal import SealError, refuse_inside

REPO = Path(__file__).resolve().parents[1]
REFERENCE_SETS = REPO / "reference"
"""Where the repository keeps its reference sets: read-only to every command but ``collect``."""


def fail(message: str) -> NoReturn:
    """End the command with one line on stderr and exit status 2 (``main``'s caller prints it)."""
    raise SystemExit(f"error: {message}")
from fedbalance.presentation.headline import install_figures, tally_text
from fedbalance.presentation.prose import blocks as prose_blocks


def parse_jobs(specs: list[str], dataset: str) -> list[tuple[str, str, str, str, int]]:
    """``experiment:settings:losses:seeds`` (comma lists) → jobs, seeds outermost, in the order given."""
    out: list[tuple[str, str, str, str, int]] = []
    for spec in specs:
        parts = spec.split(":")
        try:
            exp, settings, losses, seeds = parts
            seed_list = [int(s) for s in seeds.split(",")]
        except ValueError:
            raise SystemExit(f"error: --jobs {spec!r} is not experiment:settings:losses:seeds "
                             "(comma lists; seeds are integers), e.g. losses:g10,g50:ce,ratio:0,1,2") from None
        setting_list, loss_list = settings.split(","), losses.split(",")
        if not exp or "" in setting_list + loss_list or min(seed_list) < 0:
            raise SystemExit(f"error: --jobs {spec!r} has an empty name or a negative seed")
        for seed, setting, loss in itertools.product(seed_list, setting_list, loss_list):
            job = (exp, dataset, setting, loss, seed)
            if job not in out:
                out.append(job)
    return out


def unknown_jobs(config: Path, jobs: list[tuple[str, str, str, str, int]]) -> list[str]:
    """The jobs whose (experiment, dataset, setting, loss) the config does not define (any seed is allowed)."""
    from fedbalance.config import ConfigError, load_config, jobs as config_jobs

    if not config.is_file():
        raise SystemExit(f"error: --config {config} is not a file")
    try:
        cfg = load_config(config)
    except ConfigError as exc:
        raise SystemExit(f"error: --config {config}: {exc}") from None
    defined = {(j.experiment, j.dataset, j.setting, j.loss) for j in config_jobs(cfg)}
    return ["/".join(map(str, j[:4])) for j in jobs if j[:4] not in defined]


def job_dir(root: Path, job: tuple[str, str, str, str, int]) -> Path:
    exp, ds, setting, loss, seed = job
    return root / exp / ds / setting / loss / f"seed{seed}"


def runtime_of(metrics: dict) -> dict:
    """What decides the numbers besides the spec: device, torch threads, kernels, versions (from metrics.json)."""
    out = {k: metrics.get(k) for k in ("device", "threads", "deterministic", "versions", "path")}
    out["path"] = out["path"] or metrics["config"].get("path")  # older metrics.json: the resolved path in config
    return out


COMMIT = re.compile(r"[0-9a-f]{7,40}")
"""A commit as ``--commit`` takes it: 7 to 40 lower-case hex digits."""


def _git(checkout: Path, *cmd: str) -> str:
    return subprocess.run(["git", "-C", str(checkout), *cmd], capture_output=True, text=True, check=True).stdout.strip()


def checkout_commit(args: argparse.Namespace) -> tuple[str, bool | None]:
    """The commit of ``--checkout`` and whether its tracked files differ from it. ``--commit`` names the commit of a copy
    without git (its state then unknown: None); on a git checkout it must be the checkout's HEAD."""
    checkout = args.checkout.resolve()
    if args.commit is not None and not COMMIT.fullmatch(args.commit):
        fail(f"--commit {args.commit!r}: not a commit (7 to 40 hex digits, e.g. the output of git rev-parse HEAD)")
    try:
        commit = _git(checkout, "rev-parse", "HEAD")
        dirty = bool(_git(checkout, "status", "--porcelain", "--untracked-files=no"))
    except (OSError, subprocess.CalledProcessError) as exc:
        if args.commit is not None:
            return args.commit, None
        detail = (getattr(exc, "stderr", None) or str(exc)).strip().splitlines()
        fail(f"--checkout {args.checkout}: no commit to record ({detail[0] if detail else exc}); "
             "pass --commit <sha> for a copy without git")
    if args.commit is not None and not commit.startswith(args.commit):
        fail(f"--commit {args.commit}: the checkout {args.checkout} is at {commit[:12]}; leave --commit out for a git "
             "checkout (its HEAD is recorded)")
    return commit, dirty


class Window:
    """``--deadline-s``: no job starts unless the median finished job would end before the deadline; at the
    deadline running jobs are stopped (their checkpoints stay, a later run resumes them)."""

    def __init__(self, seconds: float | None) -> None:
        self.end = None if seconds is None else time.time() + seconds
        self.walls: list[float] = []

    def admits(self) -> bool:
        if self.end is None:
            return True
        expected = sorted(self.walls)[len(self.walls) // 2] if self.walls else 0.0
        return time.time() + expected < self.end

    def left(self) -> float | None:
        return None if self.end is None else max(0.0, self.end - time.time())


STOP = threading.Event()
"""Set when the runner is told to stop (SIGTERM, SIGINT): no further job starts."""
_LIVE: set[subprocess.Popen] = set()
_LIVE_LOCK = threading.Lock()


def _now(seconds: float | None = None) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def write_record(path: Path, record: dict) -> None:
    """A provenance record, written atomically (a kill leaves the old file or the new one)."""
    atomic_write(path, lambda fh: fh.write(json.dumps(record, indent=2) + "\n"))


def read_record(path: Path) -> dict[str, Any]:
    """A provenance record (provenance.json or its start record); one line naming the file when it is not one."""
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        fail(f"{path}: not a provenance record ({exc})")
    if not isinstance(data, dict) or not isinstance(data.get("commit"), str):
        fail(f"{path}: not a provenance record (no 'commit')")
    return data


def finished_record(start: dict, metrics: dict, wall: float | None, finished: str) -> dict:
    """provenance.json: the start record with the runtime metrics.json records, the wall times and the end."""
    own = None if wall is None else round(wall, 1)
    # a derived job's metrics.json keeps its source's training time; its own is the derivation's
    job_wall = own if "derived_from" in start else metrics.get("wall_time_s")
    return {**start, "runtime": runtime_of(metrics), "wall_s_this_process": own, "wall_s_job": job_wall, "finished": finished}


def recover(out: Path) -> str:
    """provenance.json of a finished job whose runner died before it (an orphan that finished), from the start record
    the runner wrote and metrics.json; a finished job without a start record is reported, never taken as done."""
    if not (out / PENDING).is_file():
        return (f"FAILED {out}: a finished job without {PROVENANCE} or {PENDING}: nothing records which code ran it; "
                "move the folder away to run the job again")
    start = read_record(out / PENDING)
    try:
        metrics = read_metrics(out)
    except JobFolderError as exc:
        return f"FAILED {exc}"
    record = finished_record(start, metrics, None, _now((out / METRICS).stat().st_mtime))
    record["recovered"] = f"its runner ended before the job; written from {PENDING} and {METRICS}"
    write_record(out / PROVENANCE, record)
    (out / PENDING).unlink()
    return f"recovered {out} (its runner had died; provenance from the start record)"


def reused_jobs(config: Path, jobs: list[tuple[str, str, str, str, int]]) -> tuple[dict, dict, dict, dict]:
    """(twins among ``jobs`` -> the job copied in their place, derived jobs among ``jobs`` -> their source, branched
    jobs among ``jobs`` -> (their source, rounds shared), each such source -> the rounds whose states it keeps), from
    the config (``fedbalance.config.twins``, ``fedbalance.reuse.derived``, ``fedbalance.reuse.branches``): twins and
    derived jobs are not trained, a branched job trains from its source's state after the shared rounds."""
    from fedbalance.config import load_config, twins
    from fedbalance.records import Job
    from fedbalance.reuse import branch_rounds, branches, derived

    cfg = load_config(config)
    wanted = {Job(*j) for j in jobs}
    key = lambda j: (j.experiment, j.dataset, j.setting, j.loss, j.seed)  # noqa: E731
    tw = {key(j): key(s) for j, s in twins(cfg).items() if j in wanted}
    der = {key(j): key(s) for j, s in derived(cfg).items() if j in wanted}
    plan = {j: b for j, b in branches(cfg).items() if j in wanted}
    br = {key(j): (key(s), r) for j, (s, r) in plan.items()}
    return tw, der, br, {key(s): r for s, r in branch_rounds(plan).items()}


def run_one(args: argparse.Namespace, job: tuple[str, str, str, str, int], window: Window | None = None,
            source: tuple[str, str, str, str, int] | None = None, keep: list[int] | None = None,
            branch: tuple[tuple[str, str, str, str, int], int] | None = None) -> str:
    """Run one job (or skip, or recover it), or derive it from ``source``'s trajectory; one line saying what
    happened. ``keep``: the rounds whose states it keeps for the jobs that branch from it; ``branch``: (the job it
    branches from, the rounds they share), used when that job kept the state (else it trains from round 0)."""
    window = window or Window(None)
    out = job_dir(args.out, job)
    if (out / METRICS).exists():
        return f"skip {out}" if (out / PROVENANCE).exists() else recover(out)
    if STOP.is_set():
        return f"not started (stopping) {out}"
    if not window.admits():
        return f"not started (deadline) {out}"
    out.mkdir(parents=True, exist_ok=True)
    checkout = args.checkout.resolve()
    commit, dirty = checkout_commit(args)
    exp, ds, setting, loss, seed = job
    verb = "train" if source is None else "derive"
    cmd = [
        sys.executable, "-m", "fedbalance", verb, "--config", args.config, "--experiment", exp,
        "--dataset", ds, "--setting", setting, "--loss", loss, "--seed", str(seed),
        "--out", str(out.resolve()), "--threads", "1",
    ]
    branched = None
    if source is None:
        cmd += ["--device", args.device, *(["--capture"] if args.capture else [])]
        if keep:
            cmd += ["--keep-rounds", ",".join(map(str, keep))]
        if branch is not None and branch_file(job_dir(args.out, branch[0]), branch[1]).is_file():
            branched = job_dir(args.out, branch[0])
            cmd += ["--branch-from", str(branched.resolve())]
    else:
        src = job_dir(args.out, source)
        if not (src / METRICS).is_file():
            return f"FAILED {out}: its source {src} has not finished"
        cmd += ["--source", str(src.resolve())]
    start_record = {
        "job": out.relative_to(args.out).as_posix(),
        "commit": commit,
        "checkout_dirty": dirty,
        "command": f"python -m fedbalance {verb} " + " ".join(cmd[4:]).replace(str(out.resolve()), "OUT")
        .replace(str(args.out.resolve()), "RUNS"),
        **({"branched_from": branched.relative_to(args.out).as_posix()} if branched is not None else {}),
        "config": args.config,
        "host": {"machine": platform.machine(), "cpus": os.cpu_count(), "python": platform.python_version()},
        "started": _now(),
    }
    if source is not None:
        start_record["derived_from"] = job_dir(Path(), source).as_posix()
    elif args.device != "cpu":
        start_record["concurrent_jobs"] = args.workers
    write_record(out / PENDING, start_record)
    paths = [str(checkout / "src"), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    start = time.time()
    with open(out / "train.log", "a") as log:
        proc = subprocess.Popen(cmd, cwd=checkout, env=env, stdout=log, stderr=subprocess.STDOUT)
        with _LIVE_LOCK:
            _LIVE.add(proc)
        try:
            rc = proc.wait(timeout=window.left())
        except subprocess.TimeoutExpired:
            proc.terminate()
            proc.wait()
            return f"stopped at the deadline after {(time.time() - start) / 60:.1f} min (checkpoint kept) {out}"
        finally:
            with _LIVE_LOCK:
                _LIVE.discard(proc)
    wall = time.time() - start
    if rc != 0:
        return f"FAILED rc={rc} {out}" + (" (stopped with the runner; checkpoint kept)" if STOP.is_set() else "")
    window.walls.append(wall)
    try:
        metrics = read_metrics(out)
    except JobFolderError as exc:
        return f"FAILED {exc}"
    write_record(out / PROVENANCE, finished_record(start_record, metrics, wall, _now()))
    (out / PENDING).unlink()
    return f"done {out} {wall / 60:.1f} min"


def _stop(signum: int, frame: Any) -> None:
    """SIGTERM/SIGINT: start no further job and stop the running ones (their checkpoints stay), then exit."""
    STOP.set()
    with _LIVE_LOCK:
        for proc in _LIVE:
            proc.terminate()
    raise SystemExit(f"error: stopped by signal {signum}: running jobs stopped, their checkpoints kept; run the same "
                     "command again to resume them")


def check_workers(workers: int) -> None:
    """1 to the machine's CPUs (``fedbalance.config.max_cpus``): each job is a process with one torch thread."""
    ceiling = max_cpus()
    if not 1 <= workers <= ceiling:
        fail(f"--workers {workers}: must be 1 to {ceiling} (this machine's CPUs; set {MAX_CPUS_ENV} to allow more)")


def outside_reference_sets(path: Path, flag: str) -> None:
    """Refuse a folder that is or lies in the repository's reference sets, or in any sealed set
    (``fedbalance.seal.refuse_inside``): written by ``collect`` only."""
    where = path.resolve()
    if where == REFERENCE_SETS or REFERENCE_SETS in where.parents:
        fail(f"{flag} {path} lies in {REFERENCE_SETS}, the reference sets: only `collect` writes there; "
             "run jobs into a folder of their own (e.g. /work/refruns)")
    try:
        refuse_inside(path, flag)
    except SealError as exc:
        fail(str(exc))


class Task(NamedTuple):
    """One job of a run: the call that runs it (returns the line to print), and the job it waits for, if any."""

    job: tuple[str, str, str, str, int]
    call: Callable[[], str]
    after: tuple[str, str, str, str, int] | None = None


def run_tasks(tasks: list[Task], workers: int, report: Callable[[str], None]) -> list[str]:
    """Run ``tasks`` on ``workers`` threads: those that wait for nothing in the given order, each other as soon as the
    job it waits for has ended (finished, skipped or failed: its call decides what to do then), ahead of the ones
    still queued, so that a seed's branched and derived jobs do not wait for the rest of the run. ``report`` gets
    each task's line as it ends; returns the lines in that order."""
    scheduled = {t.job for t in tasks}
    queued = deque(t for t in tasks if t.after is None or t.after not in scheduled)
    waiting: dict[tuple, list[Task]] = {}
    for t in tasks:
        if t.after is not None and t.after in scheduled:
            waiting.setdefault(t.after, []).append(t)
    ready: deque[Task] = deque()
    lines: list[str] = []
    with ThreadPoolExecutor(workers) as pool:
        running: dict[Future, Task] = {}
        while queued or ready or running:
            while len(running) < workers and (ready or queued):
                task = (ready or queued).popleft()
                running[pool.submit(task.call)] = task
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                task = running.pop(future)
                lines.append(future.result())
                report(lines[-1])
                ready.extend(waiting.pop(task.job, []))
    return lines


def _training_order(jobs: list, twin_of: dict, source_of: dict, branch_of: dict) -> list:
    """The jobs to train, in the order given: a derived or branched job's source (asked for or not) trains where that
    job or the source stands first, so that the jobs it feeds run early too (``run_tasks``); twins are not trained."""
    trained: list = []
    for j in jobs:
        source = source_of.get(j) or (branch_of[j][0] if j in branch_of else None)
        take = j if source is None and j not in twin_of else source
        if take is not None and take not in trained:
            trained.append(take)
    return trained


def cmd_run(args: argparse.Namespace) -> int:
    """Check every argument and job, then run the jobs; exit 1 when one failed."""
    check_workers(args.workers)
    if args.deadline_s is not None and not (math.isfinite(args.deadline_s) and args.deadline_s >= 0):
        fail(f"--deadline-s {args.deadline_s}: must be a number of seconds >= 0")
    if not (args.checkout / "src" / "fedbalance").is_dir():
        fail(f"--checkout {args.checkout}: no src/fedbalance in it (name a checkout of this project, e.g. a git worktree)")
    if args.out.exists() and not args.out.is_dir():
        fail(f"--out {args.out} is a file; name the folder the jobs run in")
    outside_reference_sets(args.out, "--out")
    jobs = parse_jobs(args.jobs, args.dataset)
    unknown = unknown_jobs(args.checkout / args.config, jobs)
    if unknown:
        raise SystemExit(f"error: {args.checkout / args.config} defines no such job: {', '.join(unknown)} "
                         "(experiment/dataset/setting/loss); nothing was started")
    twin_of, source_of, branch_of, keep = reused_jobs(args.checkout / args.config, jobs)
    for job, src in twin_of.items():
        print(f"twin {'/'.join(map(str, job))} of {'/'.join(map(str, src))}: not run (the render copies it)", flush=True)
    trained = _training_order(jobs, twin_of, source_of, branch_of)
    branched_jobs = [j for j in jobs if j in branch_of]
    derived_jobs = [j for j in jobs if j in source_of]
    checkout_commit(args)
    window = Window(args.deadline_s)
    print(f"{len(trained)} jobs to train, {len(branched_jobs)} to branch from another's rounds, {len(derived_jobs)} to "
          f"derive from their trajectories, {args.workers} workers", flush=True)
    main_thread = threading.current_thread() is threading.main_thread()
    old = {s: signal.signal(s, _stop) for s in (signal.SIGTERM, signal.SIGINT)} if main_thread else {}
    tasks = [Task(j, lambda j=j: run_one(args, j, window, keep=keep.get(j))) for j in trained]
    tasks += [Task(j, lambda j=j: run_one(args, j, window, branch=branch_of[j]), branch_of[j][0]) for j in branched_jobs]
    tasks += [Task(j, lambda j=j: run_one(args, j, window, source_of[j]), source_of[j]) for j in derived_jobs]
    try:
        messages = run_tasks(tasks, args.workers, lambda msg: print(time.strftime("%H:%M:%S"), msg, flush=True))
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
    return 1 if any(msg.startswith("FAILED") for msg in messages) else 0


def _overlap(a: Path, b: Path) -> bool:
    a, b = a.resolve(), b.resolve()
    return a == b or a in b.parents or b in a.parents


def _set_config(args: argparse.Namespace) -> tuple[Path | None, Path]:
    """(the set's root when it is sealed, else None; the study config its jobs must be jobs of), after checking the
    set: sealed sets verified, an unsealed folder holding jobs taken only with ``--adopt``."""
    from fedbalance import seal

    if args.reference.exists() and not args.reference.is_dir():
        fail(f"--reference {args.reference} is a file; name the reference set's folder (e.g. reference/mnist)")
    root = seal.set_root(args.reference)
    if root is not None:
        if root != args.reference.resolve():
            fail(f"--reference {args.reference} lies inside the reference set {root}: name the set's root")
        if args.adopt:
            fail(f"--adopt: {args.reference} is sealed already ({seal.MARKER}); collect into it without --adopt")
        try:
            seal.verify(root)
            config = seal.marker_config(root)
        except seal.SealError as exc:
            fail(f"{exc}; nothing was collected")
        if args.config is not None and args.config.resolve() != config.resolve():
            fail(f"--config {args.config}: the set {args.reference} holds jobs of {config} ({seal.MARKER}); "
                 "collect jobs of that study, or start a set of its own")
        return root, config
    if job_folders(args.reference) and not args.adopt:
        fail(f"--reference {args.reference} holds jobs but no {seal.MARKER}: an unsealed set; restore its marker and "
             "manifest (git checkout), or seal it as it is with --adopt")
    config = args.config if args.config is not None else Path("config/mnist.yaml")
    if not config.is_file():
        fail(f"--config {config}: not a file (the study config the set's jobs are jobs of)")
    return None, config


def _check_protocol(cfg: dict, folder: Path, metrics: dict) -> None:
    """Refuse a job of another protocol than the set's config gives it, naming the keys that differ."""
    from fedbalance.reference import spec_differences

    job = Job.from_path(folder_job(folder))  # the folder's job: read_metrics checked that metrics.json names it
    try:
        differ = spec_differences(cfg, job, metrics)
    except ConfigError as exc:
        fail(f"{folder}: {exc}; nothing was collected")
    if differ:
        shown = ", ".join(f"{k} {theirs} (the set's config: {ours})" for k, (ours, theirs) in list(differ.items())[:5])
        rest = list(differ)[5:]
        more = f"; also {', '.join(rest[:20])}" + (f" and {len(rest) - 20} more" if len(rest) > 20 else "") if rest else ""
        fail(f"{folder} was run with another protocol than the set's config gives {job.path}: {shown}{more}; a set "
             "holds one protocol: collect it into a set of its own; nothing was collected")


def _what_changes(old: Path, new: dict[str, bytes]) -> str:
    """One line: what replacing the job in ``old`` by the files ``new`` (as collected: ``_collected_files``) changes
    (final metrics, configured keys, other keys of metrics.json, files)."""
    from fedbalance.jobspec import flat_keys

    a, b = json.loads((old / METRICS).read_text()), json.loads(new[METRICS])
    parts = [f"final.{k} {a['final'].get(k)} -> {b['final'].get(k)}" for k in ("acc", "acc_minority", "auc_hard")
             if a["final"].get(k) != b["final"].get(k)]
    fa, fb = flat_keys(a["config"]), flat_keys(b["config"])
    parts += [f"config.{k} {fa.get(k, 'unset')} -> {fb.get(k, 'unset')}" for k in sorted(set(fa) | set(fb))
              if fa.get(k) != fb.get(k)][:5]
    parts += [f"{k} {json.dumps(a.get(k, 'unset'))} -> {json.dumps(b.get(k, 'unset'))}" for k in sorted(set(a) | set(b))
              if k not in ("final", "config", "trajectory", "wall_time_s") and a.get(k) != b.get(k)][:3]
    files = [f for f in FILES if (old / f).read_bytes() != new[f]]
    return f"{', '.join(files)} differ" + (f": {'; '.join(parts)}" if parts else "")


def _adopt(reference: Path, cfg: dict) -> int:
    """Seal an existing set as it is, after checking every job: whole, of the config's protocol, with provenance; a
    source named by a machine's path is rewritten as its job path, the change recorded in the job's provenance."""
    migrated = 0
    for folder in job_folders(reference):
        try:
            metrics = read_metrics(folder)
        except JobFolderError as exc:
            fail(f"{exc}; nothing was sealed")
        if not (folder / PROVENANCE).is_file():
            fail(f"{folder}: no {PROVENANCE}; a set holds jobs with provenance only; nothing was sealed")
        read_record(folder / PROVENANCE)
        _check_protocol(cfg, folder, metrics)
    for folder in job_folders(reference):
        text, entry = _relative_metrics(folder)
        if entry is None:
            continue
        record = read_record(folder / PROVENANCE)
        record.setdefault("migrated", []).append({**entry, "when": _now()})
        atomic_write(folder / METRICS, lambda fh, text=text: fh.write(text))
        write_record(folder / PROVENANCE, record)
        migrated += 1
    return migrated


def _relative_metrics(folder: Path) -> tuple[str, dict | None]:
    """(``folder``'s metrics.json with every source named by a machine's path rewritten as its job path
    (``reference.relative_sources``), the provenance entry that records the change; None when nothing changes)."""
    from fedbalance.reference import relative_sources
    from fedbalance.seal import sha256

    fixed, changes = relative_sources(json.loads((folder / METRICS).read_text()))
    if not changes:
        return "", None
    return json.dumps(fixed, indent=1), {
        "file": METRICS, "changed": changes, "previous_sha256": sha256(folder / METRICS),
        "why": "a source named by its job path relative to the results root, not by a machine's absolute path"}


def _collected_files(src: Path, record: dict) -> dict[str, bytes]:
    """The bytes a job of ``src`` is collected as (``FILES``): metrics.json with a source named by a machine's path
    rewritten as its job path (``reference.relative_sources``), the change recorded in ``record`` (its provenance)."""
    data = {name: (src / name).read_bytes() for name in FILES}
    text, entry = _relative_metrics(src)
    if entry is not None:
        record["migrated"] = [*(m for m in record.get("migrated", []) if m.get("file") != METRICS), entry]
        data[METRICS] = text.encode()
    return data


def _uncommitted(reference: Path) -> int:
    """How many paths of ``reference`` git reports changed or untracked (0 outside a git repository)."""
    if not reference.is_dir():
        return 0
    try:
        out = _git(reference.resolve(), "status", "--porcelain", "--", ".")
    except (OSError, subprocess.CalledProcessError):
        return 0
    return len([line for line in out.splitlines() if line.strip()])


def cmd_collect(args: argparse.Namespace) -> int:
    """Copy the finished jobs of ``--out`` into ``--reference``, each checked before anything is copied, then seal the
    set (``fedbalance.seal``); ``--adopt`` seals an unsealed set as it is."""
    from fedbalance import seal
    from fedbalance.config import load_config

    if args.replace and not (args.reason or "").strip():
        fail("--replace needs --reason TEXT: why jobs of the set are replaced (recorded in their provenance.json)")
    if args.out is None and not args.adopt:
        fail("--out: name the folder `run` ran the jobs in (or --adopt to seal an existing set as it is)")
    if args.out is not None:
        if not args.out.is_dir():
            fail(f"--out {args.out}: not a folder (the folder `run` ran the jobs in)")
        if _overlap(args.out, args.reference):
            fail(f"--out {args.out} and --reference {args.reference} are the same folder or one lies in the other")
    root, config = _set_config(args)
    cfg = load_config(config)
    pending = _uncommitted(args.reference)
    if pending:
        print(f"note: {args.reference} has {pending} uncommitted change(s) (git status): earlier collected jobs not yet "
              "committed; commit them with the jobs they belong to", file=sys.stderr)
    if args.adopt:
        migrated = _adopt(args.reference, cfg)
        seal.seal(args.reference, config)
        print(f"sealed {args.reference} ({len(job_folders(args.reference))} jobs, {seal.MANIFEST}); "
              f"{migrated} job(s) migrated to relative source paths")
        if args.out is None:
            return 0
        root = args.reference.resolve()
    jobs, missing = [], []
    for src in job_folders(args.out):
        if not (src / PROVENANCE).is_file():
            msg = recover(src)
            print(msg)
            if msg.startswith("FAILED"):
                missing.append(src)
                continue
        try:
            metrics = read_metrics(src)
        except JobFolderError as exc:
            fail(f"{exc}; nothing was collected")
        record = read_record(src / PROVENANCE)
        _check_protocol(cfg, src, metrics)
        if not record.get("runtime"):  # written by an earlier version of this script
            record["runtime"] = runtime_of(metrics)
        record.setdefault("job", src.relative_to(args.out).as_posix())
        jobs.append((src, args.reference / src.relative_to(args.out), record))
    if not jobs and not missing:
        fail(f"--out {args.out} holds no finished job (<experiment>/<dataset>/<setting>/<loss>/seed<k>/{METRICS})")
    incoming = {src: _collected_files(src, record) for src, _, record in jobs}
    changed = [(src, dst) for src, dst, _ in jobs
               if any((dst / f).is_file() and (dst / f).read_bytes() != incoming[src][f] for f in FILES)]
    if changed and not args.replace:
        fail(f"{len(changed)} job(s) of {args.reference} differ from those in {args.out} (e.g. {changed[0][1]}: "
             f"{_what_changes(changed[0][1], incoming[changed[0][0]])}): collecting would replace them; pass --replace --reason "
             "TEXT to do so on purpose")
    for src, dst in changed:
        print(f"replace {dst}: {_what_changes(dst, incoming[src])}")
    replaced = {dst for _, dst in changed}
    for src, dst, record in jobs:
        if dst not in replaced and (dst / PROVENANCE).is_file() and all(
                (dst / f).is_file() and (dst / f).read_bytes() == incoming[src][f] for f in FILES):
            continue  # held already: its provenance (a replacement's or migration's record among it) stays as it is
        if dst in replaced:
            previous = read_record(dst / PROVENANCE) if (dst / PROVENANCE).is_file() else {}
            record["replaced"] = [*previous.get("replaced", []), {
                "reason": args.reason, "when": _now(), "previous_commit": previous.get("commit"),
                "previous_sha256": {f: seal.sha256(dst / f) for f in FILES}}]
        for name in FILES:
            data = incoming[src][name]
            if not (dst / name).is_file() or (dst / name).read_bytes() != data:
                atomic_write(dst / name, lambda fh, data=data: fh.write(data), mode="wb")
        text = json.dumps(record, indent=2) + "\n"
        if not (dst / PROVENANCE).is_file() or (dst / PROVENANCE).read_text() != text:
            atomic_write(dst / PROVENANCE, lambda fh, text=text: fh.write(text))
    if jobs:
        seal.seal(args.reference, None if root is not None else config)
    print(f"{len(jobs)} finished jobs in {args.reference} ({len(replaced)} replaced)"
          + (f"; sealed ({seal.MANIFEST})" if jobs else ""))
    if missing:
        print(f"error: {len(missing)} finished job(s) without provenance not collected: "
              f"{', '.join(str(m) for m in missing)}", file=sys.stderr)
        return 1
    return 0


def spliced(text: str, name: str, body: str, *, source: str) -> str:
    """``text`` with ``body`` between its marks ``<!-- name: source -->`` and ``<!-- /name -->``."""
    begin, end = f"<!-- {name}: {source} -->", f"<!-- /{name} -->"
    if text.count(begin) != 1 or text.count(end) != 1 or text.index(begin) > text.index(end):
        raise SystemExit(f"error: expected one '{begin}' followed by one '{end}'")
    head, rest = text.split(begin, 1)
    return f"{head}{begin}\n{body.rstrip()}\n{end}{rest.split(end, 1)[1]}"


def provenances(reference: Path) -> Iterator[tuple[tuple[str, ...], dict, str]]:
    """Each job of the set: its folder's parts below ``reference``, its provenance.json and its device (from the
    provenance, else from an older job's metrics.json); the set's seal verified first (``fedbalance.seal``) and every
    job folder checked (``jobfolder.check``)."""
    from fedbalance import seal

    if not reference.is_dir():
        fail(f"--reference {reference}: not a folder (name a reference set, e.g. reference/mnist)")
    try:
        seal.verify_if_sealed(reference, "--reference")
    except seal.SealError as exc:
        fail(str(exc))
    for prov_path in sorted(reference.glob(f"**/{PROVENANCE}")):
        parts = prov_path.parent.relative_to(reference).parts
        try:
            Job.from_path("/".join(parts))
            metrics = read_metrics(prov_path.parent)
        except (ValueError, JobFolderError) as exc:
            fail(f"{prov_path}: not a job of the set ({exc})")
        prov = read_record(prov_path)
        device = (prov.get("runtime") or {}).get("device") or metrics.get("device")
        yield parts, prov, device


STATUS_SOURCE = "scripts/reference_jobs.py status --readme"
"""The mark of the status table in the sets' README (``status --readme`` writes it; ``docs`` keeps it current)."""


def status_text(reference: Path) -> str:
    """Markdown: per (experiment, setting, loss) the seeds the set holds; then its commits, devices and minutes a job
    per device (one pass over the provenance files)."""
    held: dict[tuple[str, str, str, str], list[int]] = {}
    commits: dict[str, int] = {}
    minutes: dict[str, list[float]] = {}
    for (exp, ds, setting, loss, seed), prov, device in provenances(reference):
        held.setdefault((exp, ds, setting, loss), []).append(int(seed[4:]))
        commits[prov["commit"][:7]] = commits.get(prov["commit"][:7], 0) + 1
        minutes.setdefault(device, [])
        wall = prov.get("wall_s_job")
        if wall is not None and (isinstance(wall, bool) or not isinstance(wall, (int, float)) or not math.isfinite(wall)):
            fail(f"{reference.joinpath(exp, ds, setting, loss, seed, PROVENANCE)}: wall_s_job {wall!r} is not a number of seconds")
        if wall:
            minutes[device].append(wall / 60)
    lines = ["| experiment | dataset | setting | loss | seeds |", "|---|---|---|---|---|"]
    for (exp, ds, setting, loss), seeds in sorted(held.items(), key=lambda kv: (kv[0][0], kv[0][1], _gamma(kv[0][2]), kv[0][3])):
        lines.append(f"| {exp} | {ds} | {setting} | {loss} | {', '.join(map(str, sorted(seeds)))} |")
    devices = {d: len(m) for d, m in minutes.items()}
    per_device = "; ".join(
        f"{d} {min(m):.1f}–{max(m):.1f} (median {sorted(m)[len(m) // 2]:.1f})" for d, m in sorted(minutes.items()) if m
    )
    n = sum(len(v) for v in held.values())
    lines += ["", f"{n} jobs; commits {commits}; devices {devices}" + (f"; minutes per job: {per_device}" if per_device else "")]
    return "\n".join(lines) + "\n"


def cmd_status(args: argparse.Namespace) -> int:
    """Print the set's status (``status_text``); ``--readme`` writes it between the status marks of that README."""
    text = status_text(args.reference)
    if text.rstrip().splitlines()[-1].startswith("0 jobs"):
        fail(f"--reference {args.reference} holds no job ({PROVENANCE} below it): name a reference set, e.g. reference/mnist")
    if args.readme is not None:
        if not args.readme.is_file():
            fail(f"--readme {args.readme}: not a file")
        args.readme.write_text(spliced(args.readme.read_text(), "status", text, source=STATUS_SOURCE))
        return 0
    print(text, end="")
    return 0


EVIDENCE_PLAN = (
    "early::0,1,2", "t_ra::0,1,2", "mfe::0,1,2", "mismatch:*_g10:0,1,2", "alpha::0,1,2", "beta::0,1,2", "early::3,4",
    "losses:g1,g20:3,4", "t_ra::3,4", "centralised::0,1,2", "alpha::3,4", "beta::3,4", "beyond:g10,g50:0,1,2",
    "mismatch::0,1,2", "*::",
)
"""The order in which the set is filled (the evidence issue), fixed before the results: per step
``experiment:settings:seeds``, the experiment and the settings as globs (settings comma-separated, empty: all), seeds
empty for all. The paper's tables in claim order at seeds 0-2 first (done), ``early`` at seeds 3-4 (claim 26, done);
then where a fifth seed can decide a claim that three leave not distinguishable: ``losses`` at Γ = 1 and 20 seeds 3-4
(claims 1, 2, 15), ``t_ra`` seeds 3-4 (27, 28); ``centralised`` at seeds 0-2 with both readings of the Ratio Loss
(5, 6); ``alpha`` and ``beta`` seeds 3-4 (29, 30); then ``beyond`` and the rest of ``mismatch`` (9, 10) at seeds 0-2;
then every other job. Every cell goes to exactly the seeds its step lists, whatever the first of them show."""


def plan_step(step: str) -> tuple[str, list[str], list[int] | None]:
    """``experiment:settings:seeds`` -> (experiment glob, setting globs, seeds or None for all); a clear error when
    malformed."""
    try:
        exp, settings, seeds = step.split(":")
        seed_list = [int(x) for x in seeds.split(",")] if seeds else None
    except ValueError:
        raise SystemExit(f"error: --plan {step!r} is not experiment:settings:seeds (settings: comma-separated globs, "
                         "empty for all; seeds: integers, empty for all), e.g. mismatch:*_g10:0,1,2") from None
    if not exp or (seed_list is not None and min(seed_list) < 0):
        raise SystemExit(f"error: --plan {step!r} has no experiment or a negative seed")
    return exp, [g for g in settings.split(",") if g] or ["*"], seed_list


def missing_specs(config: Path, reference: Path, plan: list[str], dataset: str,
                  default_plan: bool = False) -> list[tuple[str, list[str], int]]:
    """Per step of ``plan``: the ``run --jobs`` specs of the jobs of ``config`` that ``reference`` lacks
    (``fedbalance.reference.missing_jobs``), one spec per (experiment, setting) with its losses and seeds (seeds
    outermost, so a setting's cells complete together), each job once, in the plan's then the config's order. A step
    of an experiment the config lacks is refused, or skipped with ``default_plan``."""
    import fnmatch

    from fedbalance.config import jobs as config_jobs
    from fedbalance.config import load_config
    from fedbalance.reference import missing_jobs

    steps = [plan_step(s) for s in plan]
    cfg = load_config(config)
    known = {j.experiment for j in config_jobs(cfg)}
    matched = [any(fnmatch.fnmatchcase(k, st[0]) for k in known) for st in steps]
    for (exp, _, _), ok in zip(steps, matched):
        if not ok and not default_plan:
            fail(f"--plan: {config} has no experiment {exp!r} (it has {', '.join(sorted(known))})")
    plan, steps = [p for p, ok in zip(plan, matched) if ok], [st for st, ok in zip(steps, matched) if ok]
    todo = [j for j in missing_jobs(cfg, reference) if j.dataset == dataset]
    taken: set = set()
    out = []
    for step, (exp, globs, seeds) in zip(plan, steps):
        jobs = [j for j in todo if fnmatch.fnmatchcase(j.experiment, exp) and (seeds is None or j.seed in seeds)
                and j not in taken and any(fnmatch.fnmatchcase(j.setting, g) for g in globs)]
        taken.update(jobs)
        groups: dict[tuple[str, str], dict[str, list[int]]] = {}
        for j in jobs:
            groups.setdefault((j.experiment, j.setting), {}).setdefault(j.loss, []).append(j.seed)
        specs = []
        for (e, setting), losses in groups.items():
            by_seeds: dict[tuple[int, ...], list[str]] = {}
            for loss, ss in losses.items():
                by_seeds.setdefault(tuple(sorted(ss)), []).append(loss)
            specs += [f"{e}:{setting}:{','.join(ls)}:{','.join(map(str, ss))}" for ss, ls in by_seeds.items()]
        out.append((step, specs, len(jobs)))
    return out


def cmd_missing(args: argparse.Namespace) -> int:
    """Print the ``run --jobs`` specs of the jobs the set lacks, in the plan's order; a count per step on stderr."""
    if not args.config.is_file():
        fail(f"--config {args.config}: not a file")
    if not args.reference.is_dir():
        fail(f"--reference {args.reference}: not a folder (name a reference set, e.g. reference/mnist)")
    steps = missing_specs(args.config, args.reference, args.plan or list(EVIDENCE_PLAN), args.dataset,
                          default_plan=args.plan is None)
    for _, specs, _ in steps:
        for spec in specs:
            print(spec)
    total = sum(n for _, _, n in steps)
    print(f"{total} jobs to run: " + ", ".join(f"{step} {n}" for step, _, n in steps), file=sys.stderr)
    return 0


DOCS_SOURCE = "scripts/reference_jobs.py docs"


def provenance_counts(reference: Path, experiment: str | None = None) -> tuple[dict[str, int], dict[str, int]]:
    """Jobs per commit (7 hex digits) and per device among the set's jobs (of ``experiment``, or all)."""
    commits: dict[str, int] = {}
    devices: dict[str, int] = {}
    for parts, prov, device in provenances(reference):
        if experiment is not None and parts[0] != experiment:
            continue
        commits[prov["commit"][:7]] = commits.get(prov["commit"][:7], 0) + 1
        devices[device] = devices.get(device, 0) + 1
    return commits, devices


def held_summary(reference: Path, experiment: str | None = None) -> str:
    """One line: how many jobs (of ``experiment``, or all) the set holds, from which commits and devices."""
    commits, devices = provenance_counts(reference, experiment)
    what = f"`{experiment}` jobs" if experiment else "jobs"
    return (f"{sum(commits.values())} {what} of {reference.as_posix()} "
            f"(commits {', '.join(f'{c}: {n}' for c, n in sorted(commits.items()))}; "
            f"devices {', '.join(f'{d}: {n}' for d, n in sorted(devices.items()))})")


RENDERED_DOCS = ("tables/Fidelity.md", "tables/Reproduction.md", "claims.md")
"""The files of a render that ``docs`` splices into docs/."""


def docs_texts(rendered: Path, reference: Path, docs: Path) -> dict[Path, str]:
    """docs/fidelity.md and docs/claims-mnist.md with the render of ``reference`` (in ``rendered``) spliced in, and every
    generated prose block (``fedbalance.presentation.prose``, computed from ``reference``'s job folders) in its page."""
    fidelity = (rendered / "tables" / "Fidelity.md").read_text()
    claims = (rendered / "claims.md").read_text().split("\n", 1)[1].lstrip("\n")
    reproduction = (rendered / "tables" / "Reproduction.md").read_text()
    every = held_summary(reference)
    blocks = [
        (docs / "claims-mnist.md", "rule-change", f"Every claim under the rule used until 2026-11-29 and the rule now, "
                                                  f"from the render of the {every}:\n\n{rule_change_text(rendered)}"),
        (docs / "fidelity.md", "reproduction", f"`tables/Reproduction.md` of the render of the {every}:\n\n{reproduction}"),
        (docs / "fidelity.md", "fidelity", f"`tables/Fidelity.md` of the render of the {held_summary(reference, 'losses')}:"
                                           f"\n\n{fidelity}"),
        (docs / "claims-mnist.md", "claims", f"`claims.md` of the render of the {every}:\n\n{claims}"),
        *((docs / page, name, body) for name, (page, body) in prose_blocks(reference).items()),
    ]
    final, rounds = read_tidy(rendered / "aggregate")  # the README's first screen: the claims' verdicts counted
    held = sum(provenance_counts(reference, None)[0].values())
    blocks.append((docs.parent / "README.md", "findings", tally_text(final, rounds, f"the {held} jobs of {reference.as_posix()}")))
    texts: dict[Path, str] = {}
    for path, name, body in blocks:
        texts[path] = spliced(texts.get(path, path.read_text()), name, body, source=DOCS_SOURCE)
    readme = reference.parent / "README.md"  # the sets' README: its status table of what the set holds
    text = readme.read_text() if readme.is_file() else ""
    if f"<!-- status: {STATUS_SOURCE} -->" in text:
        texts[readme] = spliced(text, "status", status_text(reference), source=STATUS_SOURCE)
    return texts


def rule_change_text(rendered: Path) -> str:
    """The before/after table of the claims' verdicts (``fedbalance.presentation.claims.write_rule_changes``) of a render,
    from its tidy frames."""
    import tempfile

    from fedbalance.aggregate import read_tidy
    from fedbalance.presentation.claims import write_rule_changes

    final, rounds = read_tidy(rendered / "aggregate")
    with tempfile.TemporaryDirectory() as tmp:
        return write_rule_changes(final, rounds, Path(tmp) / "rule.md").read_text()


RENDERED_FROM = re.compile(r"of the render of the (\d+) (?:`[\w-]+` )?jobs of ")
"""How a doc says how many jobs its block was rendered from (``held_summary``)."""


def check_render(rendered: Path, reference: Path, docs: Path, allow_fewer: bool) -> None:
    """The render to splice is one of ``reference`` (it holds every job of the set), and the set holds no fewer jobs
    than the docs were last rendered from (unless ``allow_fewer``)."""
    held = {"/".join(parts) for parts, _, _ in provenances(reference)}
    if not held:
        fail(f"--reference {reference} holds no job ({PROVENANCE} below it): name a reference set, e.g. reference/mnist")
    try:
        final = read_frame(rendered / "aggregate" / "final.csv")
        done = {Job(r.experiment, r.dataset, r.setting, r.loss, int(r.seed)).path for r in final.itertuples()}
    except (JobFolderError, AttributeError, ValueError) as exc:
        fail(f"{rendered / 'aggregate' / 'final.csv'}: not a render's job table ({exc}); render the reference set first")
    lacking = sorted(held - done)
    if lacking:
        fail(f"the render in {rendered} lacks {len(lacking)} of the {len(held)} jobs of {reference} (e.g. {lacking[0]}): "
             f"it is not a render of this set as it is; render {reference} again (reference/README.md)")
    for name in ("fidelity.md", "claims-mnist.md"):
        path = docs / name
        text = path.read_text() if path.is_file() else ""
        for match in RENDERED_FROM.finditer(text):
            experiment = match.group(0).split("`")[1] if "`" in match.group(0) else None
            now = sum(experiment is None or job.split("/")[0] == experiment for job in held)
            if now < int(match.group(1)) and not allow_fewer:
                fail(f"{reference} holds {now} {f'`{experiment}` ' if experiment else ''}jobs, but {path} was rendered "
                     f"from {match.group(1)}: the set lost jobs since (restore them, e.g. git checkout -- {reference}); "
                     "--allow-fewer splices a smaller set on purpose")


def cmd_docs(args: argparse.Namespace) -> int:
    """Splice the render of the reference set (``RENDERED_DOCS``) into the docs and the set's status into the sets' README
    (reference/README.md); ``--check``: only compare."""
    for name in RENDERED_DOCS:
        if not (args.rendered / name).is_file():
            fail(f"{args.rendered / name} is missing: render the reference set first (reference/README.md)")
    check_render(args.rendered, args.reference, args.docs, args.allow_fewer)
    stale = []
    for path, text in docs_texts(args.rendered, args.reference, args.docs).items():
        if path.read_text() != text:
            stale.append(path)
            if not args.check:
                path.write_text(text)
    stale += install_figures(args.rendered / "figures", args.docs / "figures", check=args.check)  # the README's
    verb = "differ from" if args.check else "updated from"
    print(f"{len(stale)} doc(s) {verb} the render: {', '.join(map(str, stale)) or '-'}")
    if args.check and stale:
        print("the reference set changed since they were written; render it and splice the render in "
              "(reference/README.md, 'Render and compare'): snakemake --cores all --configfile config/mnist.yaml "
              "--config reference_dir=reference/mnist results_dir=results_reference && "
              "python scripts/reference_jobs.py docs --rendered results_reference")
    return 1 if args.check and stale else 0


def _gamma(setting: str) -> float:
    try:
        return float(setting.lstrip("g"))
    except ValueError:
        return float("inf")


def main() -> int:
    path = path_argument
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run")
    run.add_argument("--checkout", type=path, required=True)
    run.add_argument("--out", type=path, required=True)
    run.add_argument("--config", default="config/mnist.yaml")
    run.add_argument("--dataset", default="mnist")
    run.add_argument("--jobs", action="extend", nargs="+", required=True,
                     help="experiment:settings:losses:seeds (comma lists), one or more, e.g. losses:g10:ce,ratio:0,1 monitor:default:ce:0")
    run.add_argument("--workers", type=int, default=2, help=f"jobs at once, 1 to this machine's CPUs ({MAX_CPUS_ENV} raises it)")
    run.add_argument("--device", choices=("cpu", "cuda", "auto"), default="cpu")
    run.add_argument("--deadline-s", type=float, default=None, help="start no job that would not end within this many "
                     "seconds (the median finished job's time); stop running ones then, keeping their checkpoints")
    run.add_argument("--commit", default=None, help="the commit of --checkout when it is a copy without git")
    run.add_argument("--capture", action="store_true", help="train with the captured step (fedbalance train --capture)")
    run.set_defaults(func=cmd_run)
    col = sub.add_parser("collect")
    col.add_argument("--out", type=path, default=None, help="the folder `run` ran the jobs in")
    col.add_argument("--reference", type=path, required=True)
    col.add_argument("--config", type=path, default=None, help="the study config of a new set (default "
                     "config/mnist.yaml); a sealed set's is in its marker")
    col.add_argument("--replace", action="store_true", help="replace jobs of the set that differ from the runs'")
    col.add_argument("--reason", default=None, help="why (with --replace): recorded in the replaced jobs' provenance")
    col.add_argument("--adopt", action="store_true", help="seal an existing set that has no marker, as it is")
    col.set_defaults(func=cmd_collect)
    st = sub.add_parser("status")
    st.add_argument("--reference", type=path, required=True)
    st.add_argument("--readme", type=path, default=None, help="write the table into this README's status block")
    st.set_defaults(func=cmd_status)
    mi = sub.add_parser("missing", help="print the --jobs specs of the jobs the set lacks, in the evidence order")
    mi.add_argument("--reference", type=path, default=Path("reference/mnist"))
    mi.add_argument("--config", type=path, default=Path("config/mnist.yaml"))
    mi.add_argument("--dataset", default="mnist")
    mi.add_argument("--plan", nargs="+", default=None, help="steps experiment:settings:seeds (settings: globs, empty "
                    f"for all) in order; default: {' '.join(EVIDENCE_PLAN)}")
    mi.set_defaults(func=cmd_missing)
    dc = sub.add_parser("docs", help="splice the rendered Fidelity.md, Reproduction.md and claims.md into docs/ (between their marks)")
    dc.add_argument("--rendered", type=path, default=Path("results_reference"), help="results_dir of the render")
    dc.add_argument("--reference", type=path, default=Path("reference/mnist"))
    dc.add_argument("--docs", type=path, default=Path("docs"))
    dc.add_argument("--check", action="store_true", help="change nothing; exit 1 when a doc differs from the render")
    dc.add_argument("--allow-fewer", action="store_true", help="splice a render of fewer jobs than the docs were rendered from")
    dc.set_defaults(func=cmd_docs)
    args = p.parse_args()
    try:
        return args.func(args)
    except (ConfigError, JobFolderError, OSError) as exc:
        fail(str(exc))


if __name__ == "__main__":
    try:
        sys.exit(main())
    except SystemExit as exc:
        if isinstance(exc.code, str):  # fail(): one line, exit status 2 (argparse's own errors exit 2 already)
            print(f"reference_jobs.py: {exc.code}", file=sys.stderr)
            sys.exit(2)
        raise
