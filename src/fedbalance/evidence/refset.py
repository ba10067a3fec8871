"""A reference set grown and read: ``collect`` (the one writer of a set), ``status`` and ``missing`` (torch-free).

A set (``reference/mnist``, ``fedbalance.jobs.seal``) grows through the workflow: ``missing`` prints the jobs the set
lacks, in the order the evidence issue fixed (``EVIDENCE_PLAN``), as Snakemake targets under a folder of runs, so that
``snakemake ... -- $(fedbalance reference missing --targets RUNS | head -n 40)`` trains the next of them (locally, or
on SLURM with ``--workflow-profile profiles/slurm``); every job the workflow makes writes its provenance.json
(``fedbalance.jobs.provenance``). ``collect RUNS --into SET`` then takes every finished job of RUNS, each checked before
anything is written (whole: ``jobfolder.check``; of the set's protocol; a record naming its commit), copies its
metrics.json, rounds.csv and provenance.json (``collected`` added) and seals the set again.

A collect holds a lock beside the set (``seal.collect_files``: ``.<set>.collect.lock``; a second collect waits for
it) and never writes into the set itself: it makes the new set in ``.<set>.collect.new`` (the old one's files linked,
each new file written beside them), seals it, records in a journal that it is complete, and swaps the two folders in
one rename (``RENAME_EXCHANGE``; two renames where the file system has none). A kill leaves the old set or the new one,
and ``collect --recover`` finishes the swap of a complete new set or removes an incomplete one, inside git or not.
"""

from __future__ import annotations

import ctypes
import errno
import hashlib
import fnmatch
import itertools
import json
import os
import shutil
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from fedbalance.jobs import provenance
from fedbalance.jobs import seal
from fedbalance.atomic import atomic_write, held
from fedbalance.jobs.config import ConfigError, jobs, resolve_job
from fedbalance.common.jobspec import flat_keys
from fedbalance.jobs.jobfolder import CHECKPOINT, FILES, METRICS, JobFolderError, check, folder_job, job_folders
from fedbalance.jobs.provenance import PENDING, PROVENANCE, ProvenanceError
from fedbalance.common.records import Job
from fedbalance.jobs.reuse import twin_config

DEFAULT_CONFIG = Path("config/mnist.yaml")
"""The study config of a new set when ``--config`` names none (a sealed set's is in its marker)."""
CRASH_ENV = "FEDBALANCE_TEST_CRASH_AT"
"""Tests: a collect ends its process (exit status 137, as a kill) at this write of its transaction (1, 2, ...)."""
PAUSE_ENV = "FEDBALANCE_TEST_PAUSE_AT"
"""Tests: ``N:FILE``: a collect waits at its N-th write until FILE exists (``FILE.reached`` says it got there)."""
KILLED = 137


class RefSetError(ValueError):
    """A reference set, a folder of runs or an argument that ``collect``, ``status``, ``missing`` or ``docs`` refuses;
    the message names the file or argument, in one line."""


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# --- the transaction: a lock, a journal, the new set beside the old one, one rename -------------------------------

_WRITES = itertools.count(1)


def _step() -> None:
    """One write of a collect's transaction done: the tests' kill (``CRASH_ENV``) or pause (``PAUSE_ENV``) point."""
    n = next(_WRITES)
    if os.environ.get(CRASH_ENV) == str(n):
        os._exit(KILLED)
    at, _, flag = os.environ.get(PAUSE_ENV, "").partition(":")
    if at == str(n):
        Path(flag + ".reached").write_text("")
        while not Path(flag).exists():
            time.sleep(0.02)


@contextmanager
def _locked(root: Path, say: Callable[[str], None]) -> Iterator[None]:
    """Hold the set's collect lock (``filelock``); a second collect waits for the first, saying so."""
    from filelock import FileLock, Timeout

    path = seal.collect_files(root)["lock"]
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(path, fallback_to_soft=False)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        say(f"waiting for the collect into {root} that holds {path}")
        lock.acquire()
    with held(lock, path):
        yield


AT_FDCWD, RENAME_EXCHANGE = -100, 2


def _exchange(a: Path, b: Path) -> bool:
    """Swap the paths ``a`` and ``b`` in one rename (Linux's ``renameat2`` with ``RENAME_EXCHANGE``); False where the
    system or the file system has no such call."""
    try:
        call = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    call.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if call(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), str(a), None, str(b))


def _linked_copy(source: Path, target: Path) -> None:
    """``target`` made as a copy of ``source``'s tree whose files are hard links (copies where links fail): every later
    write into ``target`` replaces a file (``atomic_write``), never changes one the set shares."""
    def link(src: str, dst: str) -> None:
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)

    shutil.copytree(source, target, copy_function=link, symlinks=True)


def _manifest_sha(root: Path) -> str | None:
    path = root / seal.MANIFEST
    return seal.sha256(path) if path.is_file() else None


@dataclass
class _Swap:
    """One collect's writes into the new set beside ``root``, then the swap (module docstring)."""

    root: Path
    files: dict[str, Path] = field(init=False)

    def __post_init__(self) -> None:
        self.root = self.root.resolve()
        self.files = seal.collect_files(self.root)

    def _journal(self, **state: Any) -> None:
        atomic_write(self.files["journal"], lambda fh: fh.write(json.dumps({"set": str(self.root), **state}) + "\n"))
        _step()

    def begin(self) -> None:
        """Journal the collect, then make the new set: a linked copy of the set (an empty folder for a new one)."""
        self._journal(state="staging", started=provenance.now())
        if self.root.is_dir():
            _linked_copy(self.root, self.files["new"])
        else:
            self.files["new"].mkdir(parents=True)
        _step()

    def write(self, rel: str, data: bytes) -> None:
        """The new set's file ``rel`` (a path relative to the set) is ``data``, written beside the linked old one."""
        atomic_write(self.files["new"] / rel, lambda fh: fh.write(data), mode="wb")
        _step()

    def seal(self, config: Path | None) -> None:
        """Seal the new set (its marker too, naming ``config``, when given)."""
        seal.seal(self.files["new"], config)
        _step()

    def commit(self) -> None:
        """Journal the new set as complete (its manifest's sha256), swap it in, remove the old one and the journal."""
        self._journal(state="ready", manifest_sha256=_manifest_sha(self.files["new"]))
        _swap_in(self.files, self.root)
        _finish(self.files)


def _swap_in(files: Mapping[str, Path], root: Path) -> None:
    """The complete new set in place of ``root``: one exchange, or (a new set, or no exchange here) renames."""
    if not root.exists():
        os.rename(files["new"], root)
    elif not _exchange(files["new"], root):
        os.rename(root, files["old"])
        _step()
        os.rename(files["new"], root)
    _step()


def _finish(files: Mapping[str, Path]) -> None:
    """Remove what the swap left (the old set, under ``new`` or ``old``), then the journal."""
    for kind in ("new", "old"):
        if files[kind].exists():
            shutil.rmtree(files[kind])
    _step()
    files["journal"].unlink()
    _step()


def _leftovers(root: Path) -> list[Path]:
    return [p for kind, p in seal.collect_files(root).items() if kind != "lock" and p.exists()]


def _outside_other_sets(into: Path) -> None:
    """RefSetError unless ``into`` can be a set's root: not a file, not inside another set (its lock and the new set
    are made beside it, so never in a set)."""
    if into.exists() and not into.is_dir():
        raise RefSetError(f"--into {into} is a file; name the reference set's folder (e.g. reference/mnist)")
    root = seal.set_root(into)
    if root is not None and root != into.resolve():
        raise RefSetError(f"--into {into} lies inside the reference set {root}: name the set's root")


def _check_staged(new: Path, say: Callable[[str], None]) -> None:
    """What ``collect`` checks, on the staged set ``new`` that ``--recover`` is about to install: its manifest, every job
    whole (``jobfolder.check``) and of the set's protocol (its marker's config), every record one a set holds (a known
    runner, a known commit or its clone's URL). RefSetError naming the file otherwise: nothing is installed."""
    from fedbalance.jobs.config import load_config

    try:
        seal.verify(new)
        config = seal.marker_config(new)
    except seal.SealError as exc:
        raise RefSetError(f"--recover: the staged set: {exc}; nothing was installed (move {new} away by hand)") from None
    try:
        cfg = load_config(config)
    except ConfigError as exc:
        raise RefSetError(f"--recover: the staged set's config {config}: {exc}; nothing was installed") from None
    records = []
    for folder in job_folders(new):
        try:
            _check_protocol(cfg, folder, _checked(folder))
            record = _record(folder / PROVENANCE)
        except RefSetError as exc:
            raise RefSetError(f"--recover: the staged set: {exc}".replace("nothing was collected",
                                                                           "nothing was installed")) from None
        if provenance.runner(record) not in provenance.RUNNERS:
            raise RefSetError(f"--recover: {folder / PROVENANCE}: runner {provenance.runner(record)!r} is none of "
                              f"{', '.join(provenance.RUNNERS)}; nothing was installed")
        records.append((folder, folder.relative_to(new).as_posix(), record))
    try:
        _check_commits(records, _work_tree(new), say)
    except RefSetError as exc:
        raise RefSetError(f"--recover: the staged set: {exc}".replace("nothing was collected",
                                                                       "nothing was installed")) from None


def recover(into: Path, say: Callable[[str], None] = _stderr) -> str:
    """Finish or undo the collect into ``into`` that was interrupted (its journal): a new set journalled complete is
    swapped in (or, swapped already, what is left is removed), an incomplete one is removed; one line saying which."""
    _outside_other_sets(into)
    root = into.resolve()
    with _locked(root, say):
        files = seal.collect_files(root)
        if not files["journal"].exists():
            stray = [p for p in _leftovers(root)]
            if stray:
                raise RefSetError(f"--recover: {', '.join(map(str, stray))} lie beside {into} without a collect's "
                                  "journal: no collect of this version left them; move them away by hand")
            return f"nothing to recover: no collect into {into} was interrupted"
        try:
            journal = json.loads(files["journal"].read_text())
            state = journal["state"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise RefSetError(f"--recover: {files['journal']}: not a collect's journal ({exc}); move it away by "
                              "hand") from None
        if state == "staging":
            if files["new"].exists():
                shutil.rmtree(files["new"])
            files["journal"].unlink()
            return f"undone: the interrupted collect had not finished its new set; {into} is as it was before it"
        want = journal.get("manifest_sha256")
        if root.is_dir() and _manifest_sha(root) == want:
            _finish(files)
            return f"finished: {into} is the new set already; removed what the interrupted collect left"
        if not (files["new"].is_dir() and _manifest_sha(files["new"]) == want):
            raise RefSetError(f"--recover: {files['journal']} records a complete new set, but neither {into} nor "
                              f"{files['new']} holds it: move them away by hand")
        _check_staged(files["new"], say)
        _swap_in(files, root)
        _finish(files)
        return f"finished: the interrupted collect's new set is {into} now"


# --- collect -------------------------------------------------------------------------------------------------------


def spec_differences(cfg: Mapping[str, Any], job: Job, metrics: Mapping[str, Any]) -> dict[str, tuple[str, str]]:
    """The configured keys whose values differ between the job ``cfg`` gives ``job`` and the one ``metrics`` (its
    metrics.json) was run with: dotted key -> (config's, the job's), as JSON; empty when the job is the config's (a
    resolved ``path`` where the config says ``auto`` is the config's). ConfigError when ``cfg`` has no such job."""
    cell = (job.experiment, job.dataset, job.setting, job.loss)
    if cell not in {(j.experiment, j.dataset, j.setting, j.loss) for j in jobs(cfg)}:
        raise ConfigError(f"{job.path}: the set's config defines no such job (experiment/dataset/setting/loss)")
    spec = resolve_job(cfg, job)
    try:
        twin_config(metrics, spec, job.path)
        return {}
    except ConfigError:
        pass
    want, got = flat_keys(spec.as_dict()), flat_keys(dict(metrics["config"]))
    if want.get("path") == '"auto"':
        got.pop("path", None)
        want.pop("path", None)
    return {k: (want.get(k, "unset"), got.get(k, "unset")) for k in sorted(set(want) | set(got))
            if want.get(k) != got.get(k)}


SOURCE_KEYS = (("derived_from",), ("branched_from", "folder"))
"""Where metrics.json names another job's folder (``jobfolder``): named by its job path, relative to the results root."""


def relative_sources(metrics: Mapping[str, Any]) -> tuple[dict[str, Any], list[dict[str, str]]]:
    """``metrics`` with every source folder (``SOURCE_KEYS``) given as a machine's path rewritten as its job path (the
    folder's last five parts, relative to the results root: ``jobfolder.folder_job``), and the list of changes (key, to):
    the machine's path is not kept anywhere."""
    out = json.loads(json.dumps(metrics))
    changes = []
    for keys in SOURCE_KEYS:
        node = out
        for k in keys[:-1]:
            node = node.get(k) if isinstance(node, dict) else None
        value = node.get(keys[-1]) if isinstance(node, dict) else None
        new = folder_job(value) if isinstance(value, str) and Path(value).is_absolute() else None
        if new is not None:
            node[keys[-1]] = new
            changes.append({"key": ".".join(keys), "to": new})
    return out, changes



def _overlap(a: Path, b: Path) -> bool:
    a, b = a.resolve(), b.resolve()
    return a == b or a in b.parents or b in a.parents


@dataclass
class _Target:
    """The set collected into: its root, whether it is sealed, its study config, and whether the marker is written
    anew (a new set, an adopted one, or a moved one given its config)."""

    root: Path
    sealed: bool
    config: Path
    new_marker: bool
    check_held: bool = False


def _target(into: Path, config: Path | None, adopt: bool, note: Callable[[str], None] = _stderr) -> _Target:
    """The set ``into`` checked (a sealed set read as committed, like every read: ``seal.verify_committed``; an
    unsealed folder of jobs taken only with ``adopt``) with the study config its jobs must be jobs of."""
    if config is not None and not config.is_file():
        raise RefSetError(f"--config {config}: not a file (the study config the set's jobs are jobs of)")
    root = seal.set_root(into)
    if root is not None:
        if adopt:
            raise RefSetError(f"--adopt: {into} is sealed already ({seal.MARKER}); collect into it without --adopt")
        try:
            seal.verify_committed(root, notice=lambda line: note(f"warning: {line}"), given=into)
        except seal.SealError as exc:
            raise RefSetError(f"{exc}; nothing was collected") from None
        try:
            held = seal.marker_config(root)
        except seal.SealError as exc:
            if config is None:
                raise RefSetError(f"{exc}; nothing was collected") from None
            if seal.config_matches(root, config) is False:
                raise RefSetError(f"--config {config}: not the study config {into} was sealed with (its sha256 "
                                  f"differs from {seal.MARKER}'s config_sha256); nothing was collected") from None
            return _Target(root, True, config, True, check_held=seal.config_matches(root, config) is None)
        if config is not None and seal.sha256(config) != seal.sha256(held):
            raise RefSetError(f"--config {config}: the set {into} holds jobs of {held} ({seal.MARKER}), whose content "
                              "differs; collect jobs of that study, or start a set of its own")
        return _Target(root, True, held, False)
    if job_folders(into) and not adopt:
        raise RefSetError(f"--into {into} holds jobs but no {seal.MARKER}: an unsealed set; restore its marker and "
                          "manifest (git checkout), or seal it as it is with --adopt")
    config = config if config is not None else DEFAULT_CONFIG
    if not config.is_file():
        raise RefSetError(f"--config {config}: not a file (the study config the set's jobs are jobs of)")
    return _Target(into.resolve(), False, config, True)


def _check_protocol(cfg: Mapping[str, Any], folder: Path, metrics: Mapping[str, Any]) -> None:
    """Refuse a job of another protocol than the set's config gives it, naming the keys that differ."""
    job = Job.from_path(folder_job(folder))  # the folder's job: jobfolder.check found metrics.json names it
    try:
        differ = spec_differences(cfg, job, metrics)
    except ConfigError as exc:
        raise RefSetError(f"{folder}: {exc}; nothing was collected") from None
    if differ:
        shown = ", ".join(f"{k} {theirs} (the set's config: {ours})" for k, (ours, theirs) in list(differ.items())[:5])
        rest = list(differ)[5:]
        more = f"; also {', '.join(rest[:20])}" + (f" and {len(rest) - 20} more" if len(rest) > 20 else "") if rest else ""
        raise RefSetError(f"{folder} was run with another protocol than the set's config gives {job.path}: {shown}{more};"
                          " a set holds one protocol: collect it into a set of its own; nothing was collected")


def _checked(folder: Path) -> dict[str, Any]:
    """``folder``'s metrics.json after ``jobfolder.check``; RefSetError naming the file otherwise."""
    try:
        return check(folder)
    except JobFolderError as exc:
        raise RefSetError(f"{exc}; nothing was collected") from None


def _record(path: Path) -> dict[str, Any]:
    try:
        return provenance.read(path)
    except ProvenanceError as exc:
        raise RefSetError(f"{exc}; nothing was collected") from None


def recover_record(out: Path) -> tuple[str, dict[str, Any] | None]:
    """The provenance record of a finished job of ``provenance.OLD_RUNNER`` whose runner died before it (an orphan that
    finished), made from the start record that runner wrote and metrics.json, and one line saying what happened
    (``FAILED``, with no record, when there is no start record: nothing records which code ran the job). Nothing is
    written: the folder of runs is read only; the record goes into the set with the job."""
    if not (out / PENDING).is_file():
        return (f"FAILED {out}: a finished job without {PROVENANCE} or {PENDING}: nothing records which code ran it; "
                "make it again with the workflow, which records it"), None
    start = _record(out / PENDING)
    try:
        metrics = check(out)
    except JobFolderError as exc:
        return f"FAILED {exc}", None
    own = None
    job_wall = own if "derived_from" in start else metrics.get("wall_time_s")
    record = {**start, "runtime": provenance.runtime_of(metrics), "wall_s_this_process": own, "wall_s_job": job_wall,
              "finished": provenance.now((out / METRICS).stat().st_mtime),
              "recovered": f"its runner ended before the job; written from {PENDING} and {METRICS}"}
    return f"recovered {out} (its runner had died; provenance from the start record)", record


def _what_changes(old: Mapping[str, bytes], new: Mapping[str, bytes]) -> str:
    """One line: what replacing a job's files ``old`` by ``new`` changes (final metrics, configured keys, other keys of
    metrics.json, files)."""
    a, b = json.loads(old[METRICS]), json.loads(new[METRICS])
    parts = [f"final.{k} {a['final'].get(k)} -> {b['final'].get(k)}" for k in ("acc", "acc_minority", "auc_hard")
             if a["final"].get(k) != b["final"].get(k)]
    fa, fb = flat_keys(a["config"]), flat_keys(b["config"])
    parts += [f"config.{k} {fa.get(k, 'unset')} -> {fb.get(k, 'unset')}" for k in sorted(set(fa) | set(fb))
              if fa.get(k) != fb.get(k)][:5]
    parts += [f"{k} {json.dumps(a.get(k, 'unset'))} -> {json.dumps(b.get(k, 'unset'))}" for k in sorted(set(a) | set(b))
              if k not in ("final", "config", "trajectory", "wall_time_s") and a.get(k) != b.get(k)][:3]
    files = [f for f in FILES if old.get(f) != new[f]]
    return f"{', '.join(files)} differ" + (f": {'; '.join(parts)}" if parts else "")


def _relative_metrics(metrics_text: str, previous_sha: str) -> tuple[bytes | None, dict | None]:
    """(metrics.json with every source named by a machine's path rewritten as its job path
    (``relative_sources``), the provenance entry that records the change); (None, None) when nothing
    changes."""
    fixed, changes = relative_sources(json.loads(metrics_text))
    if not changes:
        return None, None
    return json.dumps(fixed, indent=1).encode(), {
        "file": METRICS, "changed": changes, "previous_sha256": previous_sha,
        "why": "a source named by its job path relative to the results root, not by a machine's absolute path"}


@dataclass
class _Plan:
    """What one collect writes into the new set: file (relative to the set) -> bytes, in order."""

    root: Path
    writes: dict[str, bytes] = field(default_factory=dict)

    def current(self, rel: str) -> bytes | None:
        """The file's bytes in the new set as planned so far (None: it has none)."""
        if rel in self.writes:
            return self.writes[rel]
        path = self.root / rel
        return path.read_bytes() if path.is_file() else None


def _adopt(plan: _Plan, cfg: Mapping[str, Any]) -> int:
    """Plan the sealing of an unsealed set as it is, after checking every job (whole, of the config's protocol, with
    provenance) and that it holds nothing but its jobs' files (a lone rounds.csv of a half-copied job is refused); a
    source named by a machine's path is rewritten as its job path, the change recorded in the job's provenance."""
    root = plan.root
    folders = job_folders(root)
    allowed = {seal.MARKER, seal.MANIFEST} | {(f.relative_to(root) / n).as_posix() for f in folders
                                               for n in (*FILES, PROVENANCE)}
    stray = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if not p.is_dir()
                   and p.relative_to(root).as_posix() not in allowed)
    if stray:
        raise RefSetError(f"--adopt: {root / stray[0]} is no file of a finished job with its {PROVENANCE} (e.g. a "
                          f"lone {FILES[0]} of a half-copied job){f', nor are {len(stray) - 1} more' if stray[1:] else ''}"
                          "; move it away or finish the job, then adopt; nothing was sealed")
    for folder in folders:
        metrics = _checked(folder)
        if not (folder / PROVENANCE).is_file():
            raise RefSetError(f"{folder}: no {PROVENANCE}; a set holds jobs with provenance only; nothing was sealed")
        _record(folder / PROVENANCE)
        _check_protocol(cfg, folder, metrics)
    migrated = 0
    for folder in folders:
        rel = folder.relative_to(root).as_posix()
        text, entry = _relative_metrics((folder / METRICS).read_text(), seal.sha256(folder / METRICS))
        if entry is None:
            continue
        record = _record(folder / PROVENANCE)
        record.setdefault("migrated", []).append({**entry, "when": provenance.now()})
        plan.writes[f"{rel}/{METRICS}"] = text
        plan.writes[f"{rel}/{PROVENANCE}"] = provenance.text(record).encode()
        migrated += 1
    return migrated


def _check_record(path: Path, record: Mapping[str, Any], config: Path) -> None:
    """Refuse a job's record (``path``) that a set cannot hold: a runner other than the workflow or the one before it
    (``provenance.RUNNERS``), a ``config`` that is not the set's study config (by content, read relative to the checkout
    the job ran in, i.e. this one), or a key only ``collect`` writes (``provenance.COLLECT_KEYS``: a replacement
    history it did not record). Its commit is checked with the others' (``_check_commits``)."""
    who = provenance.runner(record)
    if who not in provenance.RUNNERS:
        raise RefSetError(f"{path}: runner {who!r} is none of {', '.join(provenance.RUNNERS)}: a set holds jobs the "
                          "workflow made; nothing was collected")
    written = [k for k in provenance.COLLECT_KEYS if k in record]
    if written:
        raise RefSetError(f"{path}: holds {written[0]!r}, which only `{seal.COLLECT}` writes into a set's record: a job "
                          "of a folder of runs has none; nothing was collected")
    named = record.get("config")
    if named is None and who == provenance.OLD_RUNNER:
        return
    if not isinstance(named, str) or not _same_config(named, config):
        raise RefSetError(f"{path}: config {named!r} is not the set's study config {config} (by content, relative to "
                          "the checkout): a set holds one protocol; collect it into a set of its own; nothing was "
                          "collected")


def _same_config(named: str, config: Path) -> bool:
    """``named`` (a record's ``config``, relative to the checkout it ran in) is a file with ``config``'s content, read
    relative to each checkout the code runs in (``seal.checkouts``) or the working folder."""
    if Path(named).is_absolute():
        return False
    want = seal.sha256(config)
    for base in (*seal.checkouts(), Path.cwd()):
        candidate = base / named
        if candidate.is_file() and seal.sha256(candidate) == want:
            return True
    return False


def _check_commits(jobs: Sequence[tuple[Path, str, Mapping[str, Any]]], tree: Path | None,
                   note: Callable[[str], None]) -> None:
    """Refuse a job whose record's ``commit`` names no commit of the repository (``seal.unknown_commits``: "", a
    word, forty zeros, a commit of another clone) unless its record names that clone's URL (``clone``,
    ``provenance.CLONE_ENV``), which is then said."""
    unknown = set(seal.unknown_commits([str(r.get("commit")) for _, _, r in jobs], tree))
    foreign = [(src, r) for src, _, r in jobs if str(r.get("commit")) in unknown]
    cloned = [(src, r) for src, r in foreign if isinstance(r.get("clone"), str) and provenance.CLONE.fullmatch(r["clone"])]
    bad = [(src, r) for src, r in foreign if (src, r) not in cloned]
    if bad:
        src, record = bad[0]
        raise RefSetError(f"{src / PROVENANCE}: commit {record.get('commit')!r} is no commit of this repository (git "
                          f"cat-file{'' if tree is None else ' in ' + str(tree)}){f', nor are those of {len(bad) - 1} more jobs' if bad[1:] else ''}: "
                          "fetch the commit that ran it, or run it with the URL of the clone it ran from in "
                          f"{provenance.CLONE_ENV}; nothing was collected")
    if cloned:
        note(f"note: {len(cloned)} job(s) ran from a commit of another clone, e.g. {cloned[0][1]['commit'][:12]} of "
             f"{cloned[0][1]['clone']} ({cloned[0][0]})")


def _runs_jobs(runs: Path, cfg: Mapping[str, Any], config: Path,
               say: Callable[[str], None]) -> tuple[list, list[Path]]:
    """(every finished job of ``runs`` to collect: (folder, its path in the set, its record), the finished jobs
    without provenance), each checked first (whole, of the set's protocol, its record: ``_check_record``); twins and a
    render's copies are left out, saying so. Nothing in ``runs`` is written."""
    jobs, missing, copies = [], [], []
    for src in job_folders(runs):
        recovered = None
        if not (src / PROVENANCE).is_file():
            msg, recovered = recover_record(src)
            say(msg)
            if recovered is None:
                missing.append(src)
                continue
        metrics = _checked(src)
        record = recovered if recovered is not None else _record(src / PROVENANCE)
        if "reused_from" in metrics or not provenance.trained(record):
            copies.append(src)
            continue
        _check_protocol(cfg, src, metrics)
        _check_record(src / PROVENANCE, record, config)
        if not record.get("runtime"):  # a record of an earlier version of the old runner
            record["runtime"] = provenance.runtime_of(metrics)
        record.setdefault("job", src.relative_to(runs).as_posix())
        jobs.append((src, src.relative_to(runs).as_posix(), record))
    if copies:
        say(f"{len(copies)} twin(s) or copies of another job not collected (a set holds the job trained in their place;"
            f" a render copies them): e.g. {copies[0]}")
    unfinished = [p.parent for p in runs.glob(f"*/*/*/*/seed*/{CHECKPOINT}") if not (p.parent / METRICS).exists()]
    if unfinished:
        say(f"{len(unfinished)} unfinished job(s) in {runs} (a checkpoint, no {METRICS}) not collected: e.g. "
            f"{sorted(unfinished)[0]}")
    return jobs, missing


def collect(runs: Path | None, into: Path, *, config: Path | None = None, replace: bool = False,
            reason: str | None = None, adopt: bool = False, say: Callable[[str], None] = print,
            note: Callable[[str], None] = _stderr) -> int:
    """Copy the finished jobs of ``runs`` into the reference set ``into``, each checked before anything is written, and
    seal it again, in one swap (module docstring); ``adopt`` seals an unsealed set as it is first. Returns the exit
    status: 0, or 1 when finished jobs without provenance were left out. RefSetError for everything refused."""
    from fedbalance.jobs.config import load_config

    if replace and not (reason or "").strip():
        raise RefSetError("--replace needs --reason TEXT: why jobs of the set are replaced (recorded in their "
                          f"{PROVENANCE})")
    if runs is None and not adopt:
        raise RefSetError("RUNS: name the folder the workflow ran the jobs in (or --adopt to seal an existing set as "
                          "it is)")
    if runs is not None:
        if not runs.is_dir():
            raise RefSetError(f"RUNS {runs}: not a folder (the results_dir the workflow ran the jobs in)")
        if _overlap(runs, into):
            raise RefSetError(f"RUNS {runs} and --into {into} are the same folder or one lies in the other")
    _outside_other_sets(into)
    with _locked(into.resolve(), note):
        left = _leftovers(into.resolve())
        if left:
            raise RefSetError(f"a collect into {into} was interrupted ({left[0]}): finish or undo it first with "
                              f"`{seal.COLLECT} --into {into} --recover`; nothing was collected")
        target = _target(into, config, adopt, note)
        try:
            cfg = load_config(target.config)
        except ConfigError as exc:
            raise RefSetError(f"--config {target.config}: {exc}") from None
        if target.check_held:
            for folder in job_folders(target.root):
                _check_protocol(cfg, folder, _checked(folder))
        plan = _Plan(target.root)
        migrated = _adopt(plan, cfg) if adopt else 0
        jobs, missing = _runs_jobs(runs, cfg, target.config, note) if runs is not None else ([], [])
        if runs is not None and not jobs and not missing:
            raise RefSetError(f"RUNS {runs} holds no finished job to collect "
                              f"(<experiment>/<dataset>/<setting>/<loss>/seed<k>/{METRICS} with its {PROVENANCE})")
        _check_commits(jobs, _work_tree(target.root), note)
        new = sum(1 for _, rel, _ in jobs if plan.current(f"{rel}/{PROVENANCE}") is None)
        replaced = _plan_jobs(plan, runs, jobs, replace, reason, say)
        dirty = sum(1 for _, _, record in jobs if record.get("checkout_dirty"))
        if dirty:
            note(f"note: {dirty} job(s) ran from a checkout with uncommitted changes (checkout_dirty): their commit "
                 "alone does not give their code")
        if plan.writes or target.new_marker:
            _install(target, plan)
        held = len(job_folders(target.root))
        if adopt:
            say(f"sealed {into} ({held} jobs, {seal.MANIFEST}); {migrated} job(s) migrated to relative source paths")
        if runs is not None:
            say(f"{len(jobs)} finished jobs of {runs} in {into} ({new} added, {len(replaced)} replaced, "
                f"{len(jobs) - new - len(replaced)} held already)" + (f"; sealed ({seal.MANIFEST})" if jobs else ""))
    if missing:
        note(f"error: {len(missing)} finished job(s) without provenance not collected: "
             f"{', '.join(str(m) for m in missing)}")
        return 1
    return 0


def _install(target: _Target, plan: _Plan) -> None:
    """Write ``plan`` into the new set beside ``target``'s, seal it and swap it in (``_Swap``); a full disk says the
    next steps: space, then ``--recover``, then the collect again."""
    swap = _Swap(target.root)
    try:
        swap.begin()
        for rel, data in plan.writes.items():
            swap.write(rel, data)
        swap.seal(target.config if target.new_marker else None)
        swap.commit()
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        where = exc.filename or exc.strerror
        raise OSError(exc.errno, f"no space left on the device while collecting into {target.root} ({where}): free "
                      f"some space, then finish or undo the interrupted collect with `{seal.COLLECT} --into "
                      f"{target.root} --recover`, and collect again") from exc


def _work_tree(root: Path) -> Path | None:
    """The work tree of the code's repository holding the set at ``root`` (or, for a new set, its folder), None where
    there is none (a set read on purpose outside the checkout)."""
    where = root if root.exists() else next((f for f in root.parents if f.exists()), root)
    try:
        return seal.locate(where)
    except seal.SealError:
        return None


def _plan_jobs(plan: _Plan, runs: Path | None, jobs: list, replace: bool, reason: str | None,
               say: Callable[[str], None]) -> set[str]:
    """Plan the copy of ``jobs`` (``_runs_jobs``) into the new set; RefSetError when one would replace a held job that
    differs without ``replace``. Returns the jobs replaced."""
    incoming: dict[str, dict[str, bytes]] = {}
    for src, rel, record in jobs:
        data = {name: (src / name).read_bytes() for name in FILES}
        text, entry = _relative_metrics(data[METRICS].decode(), seal.sha256(src / METRICS))
        if entry is not None:
            record["migrated"] = [*(m for m in record.get("migrated", []) if m.get("file") != METRICS), entry]
            data[METRICS] = text
        incoming[rel] = data
    held = {rel: {f: plan.current(f"{rel}/{f}") for f in FILES} for _, rel, _ in jobs}
    changed = [rel for _, rel, _ in jobs if any(held[rel][f] is not None and held[rel][f] != incoming[rel][f]
                                                 for f in FILES)]
    if changed and not replace:
        first = changed[0]
        raise RefSetError(f"{len(changed)} job(s) of {plan.root} differ from those in {runs} (e.g. {plan.root / first}: "
                          f"{_what_changes(held[first], incoming[first])}): collecting would replace them; pass "
                          "--replace --reason TEXT to do so on purpose")
    for rel in changed:
        say(f"replace {plan.root / rel}: {_what_changes(held[rel], incoming[rel])}")
    for src, rel, record in jobs:
        previous_text = plan.current(f"{rel}/{PROVENANCE}")
        if rel not in changed and previous_text is not None and all(held[rel][f] == incoming[rel][f] for f in FILES):
            continue  # held already: its provenance (a replacement's or migration's record among it) stays as it is
        if rel in changed:
            previous = json.loads(previous_text) if previous_text is not None else {}
            record["replaced"] = [*previous.get("replaced", []), {
                "reason": reason, "when": provenance.now(), "previous_commit": previous.get("commit"),
                "previous_sha256": {f: hashlib.sha256(held[rel][f]).hexdigest() for f in FILES
                                    if held[rel][f] is not None}}]
        record["collected"] = provenance.now()
        for name in FILES:
            if held[rel][name] != incoming[rel][name]:
                plan.writes[f"{rel}/{name}"] = incoming[rel][name]
        plan.writes[f"{rel}/{PROVENANCE}"] = provenance.text(record).encode()
    return set(changed)


# --- status --------------------------------------------------------------------------------------------------------


class SetJob(NamedTuple):
    """One job of a set as ``provenances`` reads it."""

    parts: tuple[str, ...]
    """Its folder's parts below the set (experiment, dataset, setting, loss, seed<k>)."""
    record: dict
    """Its provenance.json."""
    device: str
    """Its device: the record's, else an older job's metrics.json's."""
    metrics: dict
    """Its metrics.json, as ``jobfolder.check`` read it."""


def provenances(reference: Path) -> Iterator[SetJob]:
    """Each job of the set (``SetJob``); the set's seal verified first (``fedbalance.jobs.seal``) and every job folder
    checked (``jobfolder.check``)."""
    if not reference.is_dir():
        raise RefSetError(f"--reference {reference}: not a folder (name a reference set, e.g. reference/mnist)"
                          + seal.interrupted(reference))
    try:
        seal.verify_if_sealed(reference, "--reference", notice=lambda line: print(f"warning: {line}", file=sys.stderr))
    except seal.SealError as exc:
        raise RefSetError(str(exc)) from None
    for prov_path in sorted(reference.glob(f"**/{PROVENANCE}")):
        parts = prov_path.parent.relative_to(reference).parts
        try:
            Job.from_path("/".join(parts))
            metrics = check(prov_path.parent)
        except (ValueError, JobFolderError) as exc:
            raise RefSetError(f"{prov_path}: not a job of the set ({exc})") from None
        try:
            record = provenance.read(prov_path)
        except ProvenanceError as exc:
            raise RefSetError(str(exc)) from None
        device = (record.get("runtime") or {}).get("device") or metrics.get("device")
        yield SetJob(parts, record, device, metrics)


def _gamma(setting: str) -> float:
    try:
        return float(setting.lstrip("g"))
    except ValueError:
        return float("inf")


def status_text(reference: Path) -> str:
    """Markdown: per (experiment, setting, loss) the seeds the set holds; how far the evidence order is (``_progress``);
    then its commits, the runners that made its jobs (``provenance.runner``) and per device its jobs, the derived ones
    among them (``derived_from``: a few seconds of their own, their source's training) and the minutes a trained job
    took (``wall_s_job``; one pass over the provenance records)."""
    held: dict[tuple[str, str, str, str], list[int]] = {}
    commits: dict[str, int] = {}
    runners: dict[str, int] = {}
    minutes: dict[str, list[float]] = {}
    on_device: dict[str, int] = {}
    derived: dict[str, int] = {}
    job_paths = []
    for (exp, ds, setting, loss, seed), record, device, _ in provenances(reference):
        job_paths.append(f"{exp}/{ds}/{setting}/{loss}/{seed}")
        held.setdefault((exp, ds, setting, loss), []).append(int(seed[4:]))
        commits[record["commit"][:7]] = commits.get(record["commit"][:7], 0) + 1
        runners[provenance.runner(record)] = runners.get(provenance.runner(record), 0) + 1
        minutes.setdefault(device, [])
        on_device[device] = on_device.get(device, 0) + 1
        derived[device] = derived.get(device, 0) + ("derived_from" in record)
        wall = record.get("wall_s_job")  # a number or None (``provenance.read``)
        if wall and "derived_from" not in record:
            minutes[device].append(wall / 60)
    lines = ["| experiment | dataset | setting | loss | seeds |", "|---|---|---|---|---|"]
    for (exp, ds, setting, loss), seeds in sorted(held.items(), key=lambda kv: (kv[0][0], kv[0][1], _gamma(kv[0][2]),
                                                                                 kv[0][3])):
        lines.append(f"| {exp} | {ds} | {setting} | {loss} | {', '.join(map(str, sorted(seeds)))} |")
    lines += _progress(reference, {ds for _, ds, _, _ in held})
    n = sum(len(v) for v in held.values())
    lines += ["", f"{n} jobs, made by {_counted(sorted(runners.items()))}; at commits {_counted(commits.items())}.", "",
              "| device | jobs | derived | minutes per trained job: least–most (median) |", "|---|---|---|---|"]
    for d, m in sorted(minutes.items()):
        spread = f"{min(m):.1f}–{max(m):.1f} ({statistics.median(m):.1f})" if m else "–"
        lines.append(f"| {d} | {on_device[d]} | {derived[d]} | {spread} |")
    lines += [f"changed after it was collected: {line}" for line in changed_after_collect(reference, job_paths)]
    return "\n".join(lines) + "\n"


def _progress(reference: Path, datasets: set[str]) -> list[str]:
    """How far the evidence order is (``missing``): per step its jobs in all, those the set holds or renders, those to
    run; for a set of one dataset whose study config (``set_config``) is found and reads, none otherwise (a set moved
    away from its config is still read: reading needs no config)."""
    planned: list[int] = []
    try:
        config = set_config(reference)
        if len(datasets) != 1 or not config.is_file():
            return []
        steps = missing(config, reference, dataset=next(iter(datasets)), planned=planned)
    except RefSetError:
        return []
    lines = ["", "How far the evidence order is (`fedbalance reference missing`: each job counted at its first step):", "",
             "| step | jobs in all | in the set | to run |", "|---|---|---|---|"]
    return lines + [f"| `{step}` | {n} | {n - len(lacking)} | {len(lacking)} |" for (step, lacking), n in zip(steps, planned)]


def changed_after_collect(reference: Path, jobs: Sequence[str]) -> list[str]:
    """One line per job of the set (``jobs``: paths relative to it) whose metrics.json or rounds.csv a later commit
    changed than the one that last changed its provenance.json (the commit that collected it: ``collect`` rewrites
    the record with every change it makes, a replacement or a migration too), naming both commits; none where the set
    lies in no checkout."""
    last = seal.last_changes(reference)
    if not last:
        return []
    order = {c: i for i, c in enumerate(dict.fromkeys(last.values()))}  # newest first (git log's order)
    out = []
    for job in jobs:
        record = last.get(f"{job}/{PROVENANCE}")
        files = [(f, last[f"{job}/{f}"]) for f in FILES if f"{job}/{f}" in last]
        later = [(f, c) for f, c in files if record is None or order[c] < order[record]]
        if later:
            out.append(f"{job}: {', '.join(f for f, _ in later)} last changed by {later[0][1][:7]}, its {PROVENANCE} "
                       f"by {record[:7] if record else 'no commit'}")
    return out


def _counted(items: Iterable[tuple[str, int]]) -> str:
    """"a (3 jobs), b (1 job)"."""
    return ", ".join(f"{k} ({v} job{'' if v == 1 else 's'})" for k, v in items)


STATUS_SOURCE = "fedbalance reference status --readme"
"""The mark of the status table in the sets' README (``status --readme`` writes it; ``docs`` keeps it current)."""


def spliced(text: str, name: str, body: str, *, source: str) -> str:
    """``text`` with ``body`` between its marks ``<!-- name: source -->`` and ``<!-- /name -->``."""
    begin, end = f"<!-- {name}: {source} -->", f"<!-- /{name} -->"
    if text.count(begin) != 1 or text.count(end) != 1 or text.index(begin) > text.index(end):
        raise RefSetError(f"expected one '{begin}' followed by one '{end}'")
    head, rest = text.split(begin, 1)
    return f"{head}{begin}\n{body.rstrip()}\n{end}{rest.split(end, 1)[1]}"


def status(reference: Path, readme: Path | None = None) -> str:
    """The set's status (``status_text``), or, with ``readme``, written between that README's status marks ("")."""
    text = status_text(reference)
    if "\n0 jobs," in text:
        raise RefSetError(f"--reference {reference} holds no job ({PROVENANCE} below it): name a reference set, e.g. "
                          "reference/mnist")
    if readme is None:
        return text
    if not readme.is_file():
        raise RefSetError(f"--readme {readme}: not a file")
    readme.write_text(spliced(readme.read_text(), "status", text, source=STATUS_SOURCE))
    return ""


# --- missing -------------------------------------------------------------------------------------------------------

EVIDENCE_PLAN = (
    "early::0,1,2", "t_ra::0,1,2", "mfe::0,1,2", "mismatch:*_g10:0,1,2", "alpha::0,1,2", "beta::0,1,2", "early::3,4",
    "losses:g1,g20:3,4", "t_ra::3,4", "centralised::0,1,2", "alpha::3,4", "beta::3,4", "beyond:g10,g50:0,1,2",
    "mismatch::0,1,2", "readings::0,1,2", "*::",
)
"""The order in which the set is filled (the evidence issue), fixed before the results: per step
``experiment:settings:seeds``, the experiment and the settings as globs (settings comma-separated, empty: all), seeds
empty for all. The paper's tables in claim order at seeds 0-2 first (done), ``early`` at seeds 3-4 (claim 26, done);
then where a fifth seed can decide a claim that three leave not distinguishable: ``losses`` at Γ = 1 and 20 seeds 3-4
(claims 1, 2, 15), ``t_ra`` seeds 3-4 (27, 28); ``centralised`` at seeds 0-2 with both readings of the Ratio Loss
(5, 6); ``alpha`` and ``beta`` seeds 3-4 (29, 30); then ``beyond`` and the rest of ``mismatch`` (9, 10) at seeds 0-2;
then ``readings`` at seeds 0-2 (issue 78: the Ratio Loss as other code reads it, paired with ``losses``' ratio_rel);
then every other job. Every cell goes to exactly the seeds its step lists, whatever the first of them show."""


def plan_step(step: str) -> tuple[str, list[str], list[int] | None]:
    """``experiment:settings:seeds`` -> (experiment glob, setting globs, seeds or None for all); RefSetError when
    malformed."""
    try:
        exp, settings, seeds = step.split(":")
        seed_list = [int(x) for x in seeds.split(",")] if seeds else None
    except ValueError:
        raise RefSetError(f"--plan {step!r} is not experiment:settings:seeds (settings: comma-separated globs, empty "
                          "for all; seeds: integers, empty for all), e.g. mismatch:*_g10:0,1,2") from None
    if not exp or (seed_list is not None and min(seed_list) < 0):
        raise RefSetError(f"--plan {step!r} has no experiment or a negative seed")
    return exp, [g for g in settings.split(",") if g] or ["*"], seed_list


def _batches(jobs: Sequence[Job]) -> list[list[Job]]:
    """``jobs`` (of one step, in the config's order) in batches of one (experiment, setting) and one list of seeds,
    each batch seeds outermost, so that a setting's cells complete together (the order the set has been filled in)."""
    groups: dict[tuple[str, str], dict[str, list[int]]] = {}
    for j in jobs:
        groups.setdefault((j.experiment, j.setting), {}).setdefault(j.loss, []).append(j.seed)
    dataset = {(j.experiment, j.setting): j.dataset for j in jobs}
    out = []
    for (exp, setting), losses in groups.items():
        by_seeds: dict[tuple[int, ...], list[str]] = {}
        for loss, seeds in losses.items():
            by_seeds.setdefault(tuple(sorted(seeds)), []).append(loss)
        for seeds, names in by_seeds.items():
            out.append([Job(exp, dataset[(exp, setting)], setting, loss, seed)
                        for seed, loss in itertools.product(seeds, names)])
    return out


def _by_step(plan: Sequence[str], steps: Sequence[tuple[str, list[str], list[int] | None]], matched: Sequence[bool],
             jobs: Sequence[Job]) -> list[tuple[str, list[Job]]]:
    """``jobs`` shared out over the plan's steps (``plan_step``; a step whose experiment the config lacks left out),
    each job to the first step that names it, in the plan's then the jobs' order."""
    taken: set[Job] = set()
    out = []
    for step, (exp, globs, seeds), ok in zip(plan, steps, matched):
        if not ok:
            continue
        mine = [j for j in jobs if fnmatch.fnmatchcase(j.experiment, exp) and (seeds is None or j.seed in seeds)
                and j not in taken and any(fnmatch.fnmatchcase(j.setting, g) for g in globs)]
        taken.update(mine)
        out.append((step, mine))
    return out


def missing(config: Path, reference: Path, plan: Sequence[str] | None = None, dataset: str = "mnist",
            planned: list[int] | None = None) -> list[tuple[str, list[Job]]]:
    """Per step of ``plan`` (default ``EVIDENCE_PLAN``): the jobs of ``config`` that ``reference`` lacks
    (``fedbalance.evidence.reference.missing_jobs``: a twin replaced by the job trained in its place), each once, in the plan's
    then the config's order, in ``_batches``. A step of an experiment the config lacks is refused, or skipped in the
    default plan. ``planned``, when given, gets each returned step's number of jobs in all, held or not, in the same
    order (``reference.study_jobs``, shared out the same way)."""
    from fedbalance.jobs.config import jobs as config_jobs
    from fedbalance.jobs.config import load_config
    from fedbalance.evidence.reference import missing_jobs, study_jobs

    if not config.is_file():
        raise RefSetError(f"--config {config}: not a file")
    if not reference.is_dir():
        raise RefSetError(f"--reference {reference}: not a folder (name a reference set, e.g. reference/mnist)"
                          + seal.interrupted(reference))
    default = plan is None
    plan = list(EVIDENCE_PLAN if plan is None else plan)
    steps = [plan_step(s) for s in plan]
    try:
        seal.verify_if_sealed(reference, "--reference", notice=lambda line: print(f"warning: {line}", file=sys.stderr))
        cfg = load_config(config)
        known = {j.experiment for j in config_jobs(cfg)}
        todo = [j for j in missing_jobs(cfg, reference) if j.dataset == dataset]
    except (ConfigError, JobFolderError, seal.SealError) as exc:
        raise RefSetError(str(exc)) from None
    matched = [any(fnmatch.fnmatchcase(k, st[0]) for k in known) for st in steps]
    for (exp, _, _), ok in zip(steps, matched):
        if not ok and not default:
            raise RefSetError(f"--plan: {config} has no experiment {exp!r} (it has {', '.join(sorted(known))})")
    if planned is not None:
        every = [j for j in study_jobs(cfg) if j.dataset == dataset]
        planned.extend(len(mine) for _, mine in _by_step(plan, steps, matched, every))
    return [(step, [j for batch in _batches(mine) for j in batch]) for step, mine in _by_step(plan, steps, matched, todo)]


def next_step(steps: Sequence[tuple[str, list[Job]]],
              finished: Callable[[Job], bool] | None = None) -> list[tuple[str, list[Job]]]:
    """The first of ``missing``'s steps that holds a job not ``finished`` (e.g. its metrics.json present in the runs
    folder, not yet collected), alone, or none: a batch that never mixes the evidence order's steps."""
    for step, of_step in steps:
        if any(finished is None or not finished(job) for job in of_step):
            return [(step, list(of_step))]
    return []


def set_config(reference: Path) -> Path:
    """The study config of the set ``reference``: its marker's when it is sealed, else ``DEFAULT_CONFIG``."""
    root = seal.set_root(reference)
    if root is None:
        return DEFAULT_CONFIG
    try:
        return seal.marker_config(root)
    except seal.SealError as exc:
        raise RefSetError(f"{exc}") from None


def target(runs: Path, job: Job) -> str:
    """The Snakemake target that makes ``job`` under the results folder ``runs`` (its metrics.json)."""
    return f"{runs.as_posix().rstrip('/')}/{job.path}/{METRICS}"
