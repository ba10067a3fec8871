"""Reference sets as sealed things: a marker at the root, a manifest of every file, the commit, one guard for every
writer.

A reference set (``reference/mnist``) is a folder of finished jobs kept as evidence. Its root holds

* ``MARKER`` (``reference-set.json``): what makes the folder a set — ``{"format": 1, "config": <the study config
  the set's jobs were run with, relative to the set's root>, "config_sha256": <its sha256>}`` (sets sealed before the
  hash was recorded name the path alone);
* ``MANIFEST`` (``MANIFEST.sha256``): the sha256 of every other file of the set, in ``sha256sum``'s format (so
  ``cd reference/mnist && sha256sum -c MANIFEST.sha256`` checks it too), written by ``collect`` only
  (``fedbalance reference collect``, ``fedbalance.evidence.refset``).

Every route that writes job folders calls ``refuse_inside`` first: a path inside a set (found by walking up to the
marker, after links and ``..`` are resolved) or holding one below it is refused before any work; the workflow also
calls ``refuse_links_into_sets`` on its results folder while it parses, and ``refuse_removal`` before each removal of an
output while it runs (a link made after the parse); the shipped scripts call ``refuse_written`` (``python -m
fedbalance.jobs.seal written WHAT PATH ...``) on every folder they empty or write, which also keeps them off the
checkout's root, its git folder and its tracked folders.
Every read of a set calls ``verify_committed`` (through ``verify_if_sealed``): a file changed, added or removed since
the manifest was written (``verify``) and since the commit checked out in the work tree that holds it (``HEAD``:
``uncommitted``) is refused, naming the files, unless uncommitted evidence is accepted on purpose, which is said. That
work tree is one of the code's own repository (``locate``, ``checkouts``: the package's checkout's or the working
folder's, every ``git worktree`` of it), never one found above the set: a set outside it, reached through a link on its
path, or below another ``.git`` is refused the same way. A set holds plain files only: a link, a pipe or a device in it
is refused. The manifest is a checksum list beside the files it checks: it finds an accident or a careless edit; git's
commit is what a consistent forgery (files and manifest rewritten together) must get past. Standard library only (and
``fedbalance.jobs.provenance``): the workflow calls it while it parses.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import logging
import os
import stat
import subprocess
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)
from fedbalance.jobs.provenance import PROVENANCE, in_a_set

MARKER = "reference-set.json"
MANIFEST = "MANIFEST.sha256"
FORMAT = 1
SHOWN = 3
"""How many files a broken seal names per kind (changed, extra, missing)."""
BELOW = 3
"""How deep below a folder ``refuse_inside`` looks for a set's marker (results_dir=reference holds sets at depth 1)."""
ACCEPT_ENV = "FEDBALANCE_ACCEPT_UNCOMMITTED"
"""Set to 1 to read a set whose files differ from the commit (``verify_committed``); what is read says so."""
ACCEPT = (f"`fedbalance compare --accept-uncommitted`, the config's `accept_uncommitted: true` or {ACCEPT_ENV}=1 "
          "(the reference commands)")
"""How a read is told to accept uncommitted evidence on purpose, in words (the refusal names them)."""
GIT_LOCATION_ENV = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "GIT_COMMON_DIR",
                    "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_NAMESPACE", "GIT_REPLACE_REF_BASE", "GIT_CEILING_DIRECTORIES")
"""Environment variables that would make git read another repository, index or objects than the set's own: dropped."""
PLANNED_DEPTH = 7
"""How deep below a results folder ``refuse_links_into_sets`` looks: below any output the workflow plans there (a job's
file is 6 below it: ``<experiment>/<dataset>/<setting>/<loss>/seed<k>/metrics.json``)."""
COLLECT = "fedbalance reference collect"
"""The one command that writes into a set (``fedbalance.evidence.refset``)."""
RESTORE = ("restore it (git checkout -- {root}) or change a job on purpose with `" + COLLECT
           + " RUNS --into {root} --replace --reason TEXT`")


class SealError(ValueError):
    """A write into a reference set, or a set whose files differ from its manifest; the message names the files."""


def _resolved(path: str | Path) -> Path:
    return Path(os.path.expanduser(str(path))).resolve()


def set_root(path: str | Path) -> Path | None:
    """The root of the reference set ``path`` is or lies in (its marker found walking up, links resolved), else None."""
    where = _resolved(path)
    for folder in (where, *where.parents):
        if (folder / MARKER).is_file():
            return folder
    return None


def sets_below(path: str | Path, depth: int = BELOW) -> list[Path]:
    """The roots of the reference sets up to ``depth`` folders below ``path`` (itself excluded)."""
    root = _resolved(path)
    if not root.is_dir():
        return []
    found, level = [], [root]
    for _ in range(depth):
        level = [Path(e.path) for folder in level for e in _entries(folder) if _is_dir(e)]
        found += [f for f in level if _is_file(f / MARKER)]
    return sorted(found)


def _entries(folder: Path) -> list[os.DirEntry]:
    """The entries of ``folder``; none when it cannot be listed, or is gone while it is listed (a process's folder in
    /proc, a temporary folder another process removes): nothing of a set is there to find."""
    try:
        with os.scandir(folder) as it:
            return list(it)
    except OSError:
        return []


def _is_file(path: Path) -> bool:
    """``path`` is a file, False when it cannot be told (a folder that cannot be read, such as /proc's)."""
    try:
        return path.is_file()
    except OSError:
        return False


def _is_dir(entry: os.DirEntry) -> bool:
    """``entry`` is a folder or a link to one (as a glob's ``*`` follows), False when it is gone meanwhile."""
    try:
        return entry.is_dir()
    except OSError:
        return False


def refuse_inside(path: str | Path, what: str) -> None:
    """SealError unless writing job folders under ``path`` (named ``what``, e.g. ``--out``) leaves every reference set
    alone: ``path`` neither lies in a set nor holds one below it."""
    root = set_root(path)
    if root is not None:
        raise SealError(f"{what} {path} lies in the reference set {root}: only `{COLLECT}` writes there; write "
                        "into a folder of its own (e.g. results, or /work/refruns)")
    below = sets_below(path)
    if below:
        raise SealError(f"{what} {path} holds the reference set {below[0]}: writing there could change it; "
                        "name a folder of its own (e.g. results)")


def sha256(path: Path) -> str:
    """The file's sha256, hex."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def set_files(root: str | Path) -> list[str]:
    """The relative paths (POSIX, sorted) of every file below ``root``, the manifest included; SealError naming it when
    one is a link (to a file or a folder, dangling or not), a pipe, a socket or a device: a set holds plain files only
    (a link would make a read follow it out of the set, a pipe would make it wait forever)."""
    base = Path(root)
    out = []
    for folder, dirs, files in os.walk(base):
        for name in sorted(dirs + files):
            path = Path(folder) / name
            mode = path.lstat().st_mode
            if stat.S_ISDIR(mode) or (stat.S_ISREG(mode) and name in files):
                if name in files:
                    out.append(path.relative_to(base).as_posix())
                continue
            what = f"a link (to {os.readlink(path)})" if stat.S_ISLNK(mode) else "not a plain file (a pipe, socket or device)"
            raise SealError(f"reference set {root}: {path.relative_to(base).as_posix()} is {what}; a set holds plain "
                            "files only: remove it (only `" + COLLECT + "` writes into a set)")
    return sorted(out)


def digests(root: str | Path) -> dict[str, str]:
    """Relative path (POSIX) -> sha256 of every file below ``root`` but the manifest, sorted by path (``set_files``:
    SealError when one is no plain file)."""
    base = Path(root)
    return {p: sha256(base / p) for p in set_files(base) if p != MANIFEST}


def manifest_text(files: Mapping[str, str]) -> str:
    """``sha256sum``'s format: one ``<hex>  <path>`` line per file, sorted by path."""
    return "".join(f"{h}  {p}\n" for p, h in sorted(files.items()))


def read_manifest(root: str | Path) -> dict[str, str]:
    """The manifest of the set at ``root``: relative path -> sha256; SealError naming the file when missing or malformed."""
    path = Path(root) / MANIFEST
    if not path.is_file():
        raise SealError(f"{path}: missing; the reference set {root} is not sealed: "
                        + RESTORE.format(root=root))
    out = {}
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        digest, sep, name = line.partition("  ")
        if not sep or len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest) or not name:
            raise SealError(f"{path}, line {number}: not '<sha256>  <path>': the manifest was edited; "
                            + RESTORE.format(root=root))
        out[name] = digest
    return out


def read_marker(root: str | Path) -> dict:
    """The set's marker (``MARKER``); SealError naming the file when it is not one."""
    path = Path(root) / MARKER
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SealError(f"{path}: not a reference set's marker ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("config"), str):
        raise SealError(f"{path}: not a reference set's marker (format {FORMAT} with a 'config')")
    return data


def marker_config(root: str | Path) -> Path:
    """The study config the set's jobs were run with: the marker's ``config``, relative to the set's root. SealError
    saying why when it is not there (the set was moved or copied away from where it was sealed) or, where the marker
    records its sha256, when its content is not the one the set was sealed with."""
    marker = read_marker(root)
    path = Path(root) / marker["config"]
    recorded = marker.get("config_sha256")
    if not path.is_file():
        raise SealError(f"{Path(root) / MARKER} names its study config {marker['config']!r} relative to the set, i.e. "
                        f"{_resolved(path)}, which is not a file: the set was moved or copied away from where it was "
                        "sealed; name its config with --config (the set's jobs are checked against it)")
    if recorded is not None and sha256(path) != recorded:
        raise SealError(f"{path}: not the study config the set {root} was sealed with (its sha256 differs from "
                        f"{MARKER}'s config_sha256 {str(recorded)[:12]}...): the config changed since; collect with "
                        "the config the set's jobs were run with (--config), or start a set of its own")
    return path


def config_matches(root: str | Path, config: str | Path) -> bool | None:
    """Whether ``config`` is the study config the set at ``root`` was sealed with, by content: True or False where
    the marker records the config's sha256, None where it does not (a set sealed before the hash was recorded)."""
    recorded = read_marker(root).get("config_sha256")
    return None if recorded is None else sha256(Path(config)) == recorded


def collect_files(root: str | Path) -> dict[str, Path]:
    """The files a collect into the set at ``root`` keeps beside it while it runs (``fedbalance.evidence.refset``): its
    ``lock``, its ``journal`` and the two folders it swaps (``new``: the set being made; ``old``)."""
    base = _resolved(root)
    return {kind: base.with_name(f".{base.name}.collect.{kind}") for kind in ("lock", "journal", "new", "old")}


def interrupted(root: str | Path) -> str:
    """A sentence naming an interrupted collect's journal beside the set at ``root``, or "" when there is none."""
    journal = collect_files(root)["journal"]
    if not journal.exists():
        return ""
    return (f"; a collect into it was interrupted ({journal}): finish or undo it with `{COLLECT} --into {root} "
            "--recover`")


def _named(kind: str, paths: list[str]) -> str:
    more = f" and {len(paths) - SHOWN} more" if len(paths) > SHOWN else ""
    return f"{len(paths)} {kind} ({', '.join(paths[:SHOWN])}{more})"


def differences(root: str | Path) -> dict[str, list[str]]:
    """How the set at ``root`` differs from its manifest: {"changed": [...], "extra": [...], "missing": [...]}."""
    recorded = read_manifest(root)
    actual = digests(root)
    return {"changed": [p for p in recorded if p in actual and actual[p] != recorded[p]],
            "extra": [p for p in actual if p not in recorded], "missing": [p for p in recorded if p not in actual]}


def problems(root: str | Path) -> list[str]:
    """What differs between the set at ``root`` and its manifest: changed, extra and missing files, each named."""
    return [_named(kind, paths) for kind, paths in differences(root).items() if paths]


def verify(root: str | Path) -> None:
    """SealError naming the files unless every file of the set at ``root`` is the one its manifest records (what
    ``collect`` checks before it writes; every read checks the commit too: ``verify_committed``). An extra file is
    named with the command that removes it (one git ignores too, which ``git status`` does not show)."""
    read_marker(root)
    found = differences(root)
    named = [_named(kind, paths) for kind, paths in found.items() if paths]
    if named:
        how = f"{_removal(root, {'extra': found['extra']})}, then " if found["extra"] else ""
        raise SealError(f"reference set {root}: its files differ from {MANIFEST}: {'; '.join(named)}; {how}"
                        + RESTORE.format(root=root) + interrupted(root))


def _git(where: Path, *args: str) -> bytes:
    """git's output of ``args`` run in ``where``, reading that folder's own repository (``GIT_LOCATION_ENV`` dropped,
    replacement objects ignored, pathspecs literal); SealError with git's first line when it fails."""
    env = {k: v for k, v in os.environ.items() if k not in GIT_LOCATION_ENV} | {"GIT_NO_REPLACE_OBJECTS": "1"}
    try:
        proc = subprocess.run(["git", "--no-replace-objects", "--literal-pathspecs", "-C", str(where), *args],
                              capture_output=True, env=env, timeout=300, check=False)
    except FileNotFoundError:
        raise SealError(f"{where} lies in a git work tree but git is not installed: the set cannot be checked against "
                        f"its commit; install git, or accept uncommitted evidence on purpose ({ACCEPT})") from None
    if proc.returncode != 0:
        said = (proc.stderr.decode(errors="replace").strip().splitlines() or ["no message"])[0]
        raise SealError(f"{where}: git {args[0]} failed ({said}): the set cannot be checked against its commit")
    return proc.stdout


def _git_answer(where: Path, *args: str) -> str | None:
    """git's output (text, stripped) of ``args`` run in ``where`` with ``GIT_LOCATION_ENV`` dropped; None when git is
    missing or fails (``where`` in no work tree)."""
    env = {k: v for k, v in os.environ.items() if k not in GIT_LOCATION_ENV}
    try:
        proc = subprocess.run(["git", "-C", str(where), *args], capture_output=True, env=env, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return os.fsdecode(proc.stdout).strip() if proc.returncode == 0 else None


def _repository(where: Path) -> tuple[Path, Path] | None:
    """(the root of the git work tree ``where`` lies in, its repository's common git folder), as git finds them from
    ``where``; None when it lies in none (or git is missing)."""
    found = _git_answer(where, "rev-parse", "--show-toplevel", "--git-common-dir")
    if not found or len(found.splitlines()) != 2:
        return None
    top, common = found.splitlines()
    return Path(top).resolve(), (where / common).resolve()


PACKAGE = Path(__file__).resolve().parent
"""This module's folder: in a clone, ``<checkout>/src/fedbalance/jobs`` (the checkout the code runs in)."""


def checkouts() -> dict[Path, Path]:
    """The work trees reads accept a set in: every work tree (``git worktree list``) of the repository of the code's
    own checkout (this package's folder) and of the working folder's, root -> the repository's common git folder;
    empty when neither lies in a git work tree. The working folder's repository is left out when its work tree lies
    inside another repository's (a ``git init`` below ``reference/``, run from there)."""
    own = _repository(PACKAGE)
    here = _repository(Path(os.getcwd()))
    found = [r for r in (own, here) if r is not None]
    if here is not None and here != own and _nested(*here):
        found = [r for r in found if r != here]
    out: dict[Path, Path] = {}
    for top, common in found:
        listing = _git_answer(top, "worktree", "list", "--porcelain") or f"worktree {top}"
        for line in listing.splitlines():
            if line.startswith("worktree ") and Path(line[9:]).is_dir():
                out.setdefault(Path(line[9:]).resolve(), common)
        out.setdefault(top, common)
    return out


def _nested(top: Path, common: Path) -> bool:
    """The work tree ``top`` (of the repository ``common``) lies inside the work tree of another repository: a ``.git``
    above it belongs to a repository other than its own (a worktree placed inside its main checkout is not nested)."""
    for folder in top.parents:
        if os.path.lexists(folder / ".git"):
            outer = _repository(folder)
            return outer is None or outer[1] != common
    return False


def _inside(path: Path, folder: Path) -> bool:
    """``path`` is ``folder`` or lies below it (both resolved)."""
    return path == folder or folder in path.parents


def _link_on_path(path: str | Path, roots: Collection[Path]) -> tuple[Path, str] | None:
    """The first link on ``path`` as it is spelled (walked from the working folder, each ``..`` taken after the folder
    before it), with its target, unless it leads to one of ``roots`` or a folder above one (the path then enters a
    checkout whole, e.g. through a home folder that is a link); None when there is none."""
    given = Path(os.path.expanduser(str(path)))
    here = Path(given.anchor) if given.is_absolute() else Path(os.getcwd())
    for part in given.parts[1 if given.is_absolute() else 0:]:
        if part in ("", "."):
            continue
        if part == "..":
            here = here.parent
            continue
        step = here / part
        if step.is_symlink():
            target = step.resolve()
            if not any(_inside(root, target) for root in roots):
                return step, os.readlink(step)
            here = target
            continue
        here = step
    return None


def locate(root: str | Path, given: str | Path | None = None) -> Path:
    """The root of the work tree of the code's repository that holds the set at ``root`` (``checkouts``): its real
    path lies in that work tree, no link on its path as ``given`` (default ``root``) leads elsewhere and no other
    repository's ``.git`` (a folder or a file) lies between the set and that root (a work tree's own ``.git`` at its
    root is its own). SealError saying which, naming the path, otherwise: such a set is no committed evidence of this
    repository."""
    trees = checkouts()
    shown = given if given is not None else root
    if not trees:
        raise SealError(f"reference set {shown}: the code runs in no git checkout (neither {PACKAGE} nor the working "
                        f"folder {os.getcwd()} lies in a git work tree), so the set cannot be read as committed")
    link = _link_on_path(shown, trees)
    if link is not None:
        raise SealError(f"reference set {shown} is reached through the link {link[0]} -> {link[1]}: a set is read "
                        "where it lies in the checkout, never through a link (a link can lead to a copy anywhere)")
    real = _resolved(root)
    holders = [t for t in trees if _inside(real, t)]
    if not holders:
        names = ", ".join(str(t) for t in list(trees)[:3]) + (" ..." if len(trees) > 3 else "")
        raise SealError(f"reference set {shown} ({real}) lies outside the checkout the code runs in ({names}): it is "
                        "no committed evidence of this repository")
    tree = max(holders, key=lambda t: len(t.parts))
    for folder in (real, *real.parents):
        if folder == tree:
            break
        if os.path.lexists(folder / ".git"):
            raise SealError(f"reference set {shown}: {folder / '.git'} lies between it and the checkout's root {tree}: "
                            "another repository, whose commits are not this repository's; remove it (rm -rf "
                            f"{folder / '.git'})")
    if _repository(tree) != (tree, trees[tree]):
        raise SealError(f"reference set {shown}: the work tree {tree} is not one of the repository "
                        f"{trees[tree]} any more (its .git names another); the set cannot be read as committed")
    return tree


def last_changes(root: str | Path) -> dict[str, str]:
    """Each file of the set at ``root`` that a commit of its work tree's history changed (relative POSIX path) -> the
    commit that last changed it (``git log``, newest first); empty where the set lies in no checkout (``locate``)."""
    where = _resolved(root)
    try:
        tree = locate(where)
    except SealError:
        return {}
    rel = where.relative_to(tree).as_posix()
    log = _git(tree, "log", "--no-renames", "--format=%x00%H", "--name-only", "--", rel).decode(errors="replace")
    prefix = "" if rel == "." else rel + "/"
    out: dict[str, str] = {}
    for chunk in filter(None, log.split("\0")):
        commit, *names = chunk.split("\n")
        for name in filter(None, names):
            if name.startswith(prefix):
                out.setdefault(name[len(prefix):], commit)
    return out


def unknown_commits(commits: Collection[str], tree: str | Path | None = None) -> list[str]:
    """Those of ``commits`` (object names, full or abbreviated) that name no commit of the repository of the work tree
    ``tree`` (default: of each repository of ``checkouts``; ``git cat-file --batch-check``, one call a repository):
    not hex, empty, forty zeros or a commit of another clone are all unknown. Every one is unknown where git is
    missing or no repository is found."""
    wanted = sorted(set(commits))
    valid = [c for c in wanted if 4 <= len(c) <= 64 and all(ch in "0123456789abcdef" for ch in c)]
    roots = [Path(tree)] if tree is not None else sorted({common: root for root, common in checkouts().items()}.values())
    known: set[str] = set()
    env = {k: v for k, v in os.environ.items() if k not in GIT_LOCATION_ENV} | {"GIT_NO_REPLACE_OBJECTS": "1"}
    for root in roots:
        if not valid:
            break
        try:
            proc = subprocess.run(["git", "--no-replace-objects", "-C", str(root), "cat-file", "--batch-check"],
                                  input="".join(f"{c}^{{commit}}\n" for c in valid).encode(), capture_output=True,
                                  env=env, timeout=300, check=False)
        except (OSError, subprocess.SubprocessError):
            continue
        answers = proc.stdout.decode(errors="replace").splitlines() if proc.returncode == 0 else []
        known.update(c for c, line in zip(valid, answers) if line.split()[1:2] == ["commit"])
    return [c for c in wanted if c not in known]


def _blob(path: Path, algorithm: str) -> str:
    """git's object id of the file's bytes as a blob (``git hash-object --no-filters``)."""
    h = hashlib.new(algorithm)
    h.update(b"blob %d\0" % path.stat().st_size)
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def against_commit(root: str | Path, given: str | Path | None = None) -> dict[str, list[str]]:
    """How the files of the set at ``root`` differ from the commit checked out in the work tree that holds it (its
    git ``HEAD``; ``locate``, which refuses a set outside the code's checkout, reached through a link or under another
    repository): {"changed": [...], "extra": [...], "missing": [...]}, relative POSIX paths, the manifest and the marker
    included. Each file's bytes are hashed as git hashes them and compared with HEAD's tree, so git's index and its
    stat cache (``update-index --assume-unchanged``, ``--skip-worktree``) cannot hide a change; SealError when git
    cannot answer."""
    where = _resolved(root)
    top = locate(where, given)
    rel = where.relative_to(top).as_posix()
    try:
        algorithm = _git(top, "rev-parse", "--show-object-format").decode().strip() or "sha1"
    except SealError:  # a git before 2.28: SHA-1 repositories only
        algorithm = "sha1"
    head: dict[str, tuple[str, str]] = {}
    try:
        _git(top, "rev-parse", "--verify", "--quiet", "HEAD^{commit}")
        listing = _git(top, "ls-tree", "-r", "-z", "--full-tree", "HEAD", *(["--", rel] if rel != "." else []))
    except SealError:  # no commit yet: every file is uncommitted
        listing = b""
    prefix = "" if rel == "." else rel + "/"
    for record in filter(None, listing.split(b"\0")):
        meta, _, name = record.partition(b"\t")
        mode, _, obj = meta.decode().split(" ")
        head[os.fsdecode(name)[len(prefix):]] = (mode, obj)
    disk = set_files(where)
    changed = [p for p in disk if p in head and (head[p][0] not in ("100644", "100755")
                                                  or head[p][1] != _blob(where / p, algorithm))]
    return {"changed": changed, "extra": [p for p in disk if p not in head],
            "missing": sorted(set(head) - set(disk))}


def uncommitted(root: str | Path, given: str | Path | None = None) -> list[str]:
    """The files of the set at ``root`` that differ from the commit checked out — changed, extra (not committed) or
    missing (committed, deleted since) — as relative POSIX paths, sorted; empty when the set is the commit's
    (``against_commit``; SealError where it cannot be compared). What ``collect`` says it leaves uncommitted."""
    found = against_commit(root, given)
    return sorted(p for paths in found.values() for p in paths)


def accepted_by_env(environ: Mapping[str, str] | None = None) -> bool:
    """``ACCEPT_ENV`` is set (1, true, yes): uncommitted evidence is read on purpose."""
    value = (os.environ if environ is None else environ).get(ACCEPT_ENV, "")
    return value.strip().lower() in ("1", "true", "yes")


def _removal(root: str | Path, found: Mapping[str, list[str]]) -> str:
    """The commands that make the set at ``root`` its commit again, naming the files: ``git checkout`` for changed and
    missing files, ``rm`` for extra ones (also those git ignores, which ``git status`` and ``git clean -fd`` pass by)."""
    steps = []
    if found.get("changed") or found.get("missing"):
        steps.append(f"git checkout -- {root}")
    extra = found.get("extra") or []
    if extra:
        shown = " ".join(f"{root}/{p}" for p in extra[:SHOWN]) + (" ..." if len(extra) > SHOWN else "")
        steps.append(f"rm -- {shown} (the extra files; git clean -fdx -- {root} removes every one, ignored ones too)")
    return ", then ".join(steps)


def verify_committed(root: str | Path, *, accept_uncommitted: bool = False,
                     notice: Callable[[str], None] | None = None, given: str | Path | None = None) -> list[str]:
    """What every read of a set calls: ``verify`` (the manifest), then SealError naming the files unless they are the
    commit's (``against_commit``), or naming why the set cannot be compared with a commit of the code's repository
    (``locate``: outside its checkout, reached through a link on its path as ``given``, under another repository).
    With ``accept_uncommitted`` (or ``ACCEPT_ENV``) such a set is read anyway and ``notice`` (default: a warning logged)
    is told so in one line; return the files read that are not the commit's (every file of a set that has none)."""
    verify(root)
    accept = accept_uncommitted or accepted_by_env()
    try:
        found = against_commit(root, given)
    except SealError as exc:
        if not accept:
            raise SealError(f"{exc}; evidence is read as committed: read the set in this checkout, or accept "
                            f"uncommitted evidence on purpose ({ACCEPT})") from None
        (notice or logger.warning)(f"accepting uncommitted evidence: {exc}; the numbers read are checked against no "
                                   "commit")
        return set_files(root)
    named = [_named(kind, paths) for kind, paths in found.items() if paths]
    if not named:
        return []
    what = f"reference set {given if given is not None else root} differs from its commit (git HEAD): {'; '.join(named)}"
    if not accept:
        raise SealError(f"{what}; evidence is read as committed: commit collected jobs (git add {root} && git commit), "
                        f"restore the set ({_removal(root, found)}), or accept uncommitted evidence on purpose "
                        f"({ACCEPT})")
    (notice or logger.warning)(f"accepting uncommitted evidence: {what}; the numbers read are not all committed")
    return sorted(p for paths in found.values() for p in paths)


def verify_if_sealed(path: str | Path, what: str, *, accept_uncommitted: bool = False,
                     notice: Callable[[str], None] | None = None) -> Path | None:
    """``verify_committed`` the set ``path`` is or lies in (None when it is in none). A folder of reference jobs (a
    provenance.json of a set's, ``provenance.in_a_set``) without a marker is refused: a set whose seal was removed, or
    one never sealed; a results folder of the workflow's jobs is none."""
    root = set_root(path)
    if root is not None:
        verify_committed(root, accept_uncommitted=accept_uncommitted, notice=notice, given=path)
        return root
    folder = Path(path)
    if sets_below(folder):  # the parent of sets (reference/): its caller names the sets below it
        return None
    if folder.is_dir() and any(_a_sets_record(Path(here) / PROVENANCE) for here, _, files in os.walk(folder)
                               if PROVENANCE in files):  # os.walk: a folder gone meanwhile is skipped, links not followed
        raise SealError(f"{what} {path} holds reference jobs ({PROVENANCE}) but no {MARKER}: an unsealed reference "
                        f"set; restore its marker and manifest (git checkout), or seal it with `{COLLECT} --into "
                        f"{path} --adopt`" + interrupted(path))
    return None


def refuse_links_into_sets(folder: str | Path, what: str) -> None:
    """SealError unless no output planned below ``folder`` (a results folder the workflow is about to write) can reach
    a reference set: ``folder`` itself (``refuse_inside``), a set's marker at any depth below it, and every link below it
    (to a folder or a file, dangling or not, at any depth to ``PLANNED_DEPTH``, followed into its target) whose target
    lies in a set. Walks only what exists, each real folder once."""
    refuse_inside(folder, what)
    seen: set[tuple[int, int]] = set()
    pending = [(Path(folder), 0)]
    while pending:
        here, depth = pending.pop()
        try:
            info = here.stat()
            entries = sorted(os.scandir(here), key=lambda e: e.name)
        except OSError:
            continue
        if (info.st_dev, info.st_ino) in seen:
            continue
        seen.add((info.st_dev, info.st_ino))
        for entry in entries:
            path = Path(entry.path)
            if entry.name == MARKER and _is_file(path):
                raise SealError(f"{what} {folder} holds the reference set {_resolved(here)} (its {MARKER} at {path}): "
                                "the workflow's outputs could be written into it; choose a results folder of its own")
            if entry.is_symlink():
                try:
                    target = path.resolve()
                except (OSError, RuntimeError):
                    raise SealError(f"{what} {folder}: {path} is a link that never ends (a loop); remove it") from None
                root = set_root(target)
                if root is not None:
                    raise SealError(f"{what} {folder}: {path} is a link to {target}, in the reference set {root}: "
                                    "Snakemake would delete or write the set's files through it before any job runs; "
                                    "remove the link (a render copies a set, it never links to it)")
            if depth + 1 < PLANNED_DEPTH and _is_dir(entry):
                pending.append((path, depth + 1))


def refuse_removal(path: str | Path, what: str = "removing") -> None:
    """SealError unless removing ``path`` as Snakemake removes an output (a link itself when it is one, else the file,
    or the folder with what it holds) leaves every reference set alone: the entry lies in no set however the folders
    above it are reached (a link made into a set after the workflow parsed), and a folder removed holds none. What
    the workflow checks before each removal while it runs (workflow/Snakefile)."""
    given = Path(os.path.expanduser(str(path)))
    try:
        where = given.parent.resolve() / given.name
    except (OSError, RuntimeError):
        raise SealError(f"{what} {path}: a link on its path never ends (a loop); remove it") from None
    for folder in (where.parent, *where.parent.parents) if where.is_symlink() else (where, *where.parents):
        if (folder / MARKER).is_file() and not folder.is_symlink():
            raise SealError(f"{what} {path} would remove {where}, in the reference set {folder}: a link into the set "
                            "was made after the workflow parsed; nothing of the set is removed: remove the link")
    if where.is_dir() and not where.is_symlink():
        below = sets_below(where, PLANNED_DEPTH)
        if below:
            raise SealError(f"{what} {path} would remove the reference set {below[0]} it holds; remove it from there")


def guarded_removal(remove: Callable[..., Any], error: type[Exception]) -> Callable[..., Any]:
    """``remove`` (Snakemake's ``snakemake.io.remove(file, ...)``, a coroutine function or not) calling
    ``refuse_removal(file)`` first, a refusal raised as ``error`` (Snakemake's ``WorkflowError``: the run stops); the
    workflow puts it in place of Snakemake's own (rules/common.smk). Given a guarded one, the same."""
    if getattr(remove, "guarded_by_seal", False):
        return remove

    def check(file: Any) -> None:
        try:
            refuse_removal(file, "Snakemake, removing the output")
        except SealError as exc:
            raise error(f"stopped: {exc}") from None

    if inspect.iscoroutinefunction(remove):
        @functools.wraps(remove)
        async def guarded(file: Any, *args: Any, **kwargs: Any) -> Any:
            check(file)
            return await remove(file, *args, **kwargs)
    else:
        @functools.wraps(remove)
        def guarded(file: Any, *args: Any, **kwargs: Any) -> Any:
            check(file)
            return remove(file, *args, **kwargs)
    guarded.guarded_by_seal = True  # type: ignore[attr-defined]
    return guarded


def _tracked(tree: Path, rel: str) -> str | None:
    """One file git tracks at or below ``rel`` (a path relative to the work tree ``tree``), or None."""
    listing = _git_answer(tree, "ls-files", "-z", "--full-name", "--", f":(top,literal){rel}")
    return listing.split("\0", 1)[0] if listing else None


def refuse_written(path: str | Path, what: str) -> None:
    """SealError (one line naming ``what`` and ``path``) unless a shipped script (scripts/*.sh) may empty, delete or
    write the folder ``path``: it names a folder (not "" nor a file); it neither is, lies in, holds nor links into a
    reference set (``refuse_links_into_sets``); it is not the root of a work tree of the code's or of its own
    repository (``checkouts``; every ``git worktree`` of them), nor a folder above one, nor their git folder; and it
    neither holds a file git tracks nor lies in a tracked folder (``docs/``, ``src/``, ``reference/``, ...): in a
    checkout a script writes only into an untracked folder of its own below the root (``results_reference``)."""
    if not str(path).strip():
        raise SealError(f"{what} is empty: name a folder of its own (e.g. results_reference, or /work/refruns)")
    real = _resolved(path)
    if real.exists() and not real.is_dir():
        raise SealError(f"{what} {path} is a file ({real}), not a folder: name a folder of its own")
    refuse_inside(path, what)
    trees = dict(checkouts())
    existing = next((f for f in (real, *real.parents) if f.is_dir()), Path("/"))
    own = _repository(existing)
    if own is not None:
        trees.setdefault(own[0], own[1])
    copy = PACKAGE.parents[2]
    if not trees and (copy / "workflow" / "Snakefile").is_file():  # a copy of the checkout without git
        if _inside(real, copy) or _inside(copy, real):
            raise SealError(f"{what} {path} ({real}) lies in the checkout {copy}, which has no git to tell its "
                            "tracked folders: name a folder outside it")
    for tree, common in sorted(trees.items()):
        if _inside(tree, real):
            raise SealError(f"{what} {path} ({real}) is or holds the repository's work tree {tree}: name a folder of "
                            "its own (e.g. results_reference)")
        if _inside(real, common) or _inside(common, real):
            raise SealError(f"{what} {path} ({real}) is, holds or lies in the repository's git folder {common}")
        if not _inside(real, tree):
            continue
        top = real.relative_to(tree).parts[0]
        if top == ".git":
            raise SealError(f"{what} {path} ({real}) lies in the git folder of {tree}")
        tracked = _tracked(tree, top)
        if tracked is not None:
            how = "is" if real == tree / top else "lies in"
            raise SealError(f"{what} {path} ({real}) {how} {tree / top}, a folder git tracks (e.g. {tracked}): a "
                            "script writes only into an untracked folder of its own (e.g. results_reference)")
    refuse_links_into_sets(path, what)  # last: it walks the folder


def main(argv: list[str] | None = None) -> int:
    """``python -m fedbalance.jobs.seal written WHAT PATH [WHAT PATH ...]``: ``refuse_written`` for each pair, the
    shipped scripts' one guard before they delete or write anything; exit status 2 and one line on stderr when one is
    refused."""
    import sys

    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 3 or args[0] != "written" or len(args) % 2 == 0:
        print("usage: python -m fedbalance.jobs.seal written WHAT PATH [WHAT PATH ...]", file=sys.stderr)
        return 2
    try:
        for what, path in zip(args[1::2], args[2::2]):
            refuse_written(path, what)
    except SealError as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        return 2
    return 0


def _a_sets_record(path: Path) -> bool:
    """``path`` is a provenance record of a reference set's job (one that is no record counts: it is not the
    workflow's)."""
    try:
        return in_a_set(json.loads(path.read_text()))
    except (OSError, UnicodeDecodeError, ValueError, AttributeError):
        return True


def seal(root: str | Path, config: str | Path | None = None) -> None:
    """Write the set's marker (when ``config`` is given: the study config, as a path relative to ``root``) and its
    manifest of every file. Only ``collect`` calls this."""
    base = Path(root)
    base.mkdir(parents=True, exist_ok=True)
    if config is not None:
        rel = os.path.relpath(_resolved(config), _resolved(base))
        marker = {"format": FORMAT, "config": Path(rel).as_posix(), "config_sha256": sha256(Path(config))}
        _write(base / MARKER, json.dumps(marker, indent=1) + "\n")
    _write(base / MANIFEST, manifest_text(digests(base)))


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


if __name__ == "__main__":
    raise SystemExit(main())
