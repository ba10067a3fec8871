"""Reference sets as sealed things: a marker at the root, a manifest of every file, one guard for every writer.

A reference set (``reference/mnist``) is a folder of finished jobs kept as evidence. Its root holds

* ``MARKER`` (``reference-set.json``): what makes the folder a set — ``{"format": 1, "config": <the study config
  the set's jobs were run with, relative to the set's root>, "config_sha256": <its sha256>}`` (sets sealed before the
  hash was recorded name the path alone);
* ``MANIFEST`` (``MANIFEST.sha256``): the sha256 of every other file of the set, in ``sha256sum``'s format (so
  ``cd reference/mnist && sha256sum -c MANIFEST.sha256`` checks it too), written by ``collect`` only
  (``fedbalance reference collect``, ``fedbalance.refset``).

Every route that writes job folders calls ``refuse_inside`` first: a path inside a set (found by walking up to the
marker, after links and ``..`` are resolved) or holding one below it is refused before any work. Every read of a
set calls ``verify``: a file changed, added or removed since the manifest was written is refused, naming the files.
Standard library only (and ``fedbalance.provenance``): the workflow calls it while it parses.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from fedbalance.provenance import PROVENANCE, in_a_set

MARKER = "reference-set.json"
MANIFEST = "MANIFEST.sha256"
FORMAT = 1
SHOWN = 3
"""How many files a broken seal names per kind (changed, extra, missing)."""
BELOW = 3
"""How deep below a folder ``refuse_inside`` looks for a set's marker (results_dir=reference holds sets at depth 1)."""
COLLECT = "fedbalance reference collect"
"""The one command that writes into a set (``fedbalance.refset``)."""
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
    found = []
    for level in range(1, depth + 1):
        found += [p.parent for p in root.glob("/".join(["*"] * level) + f"/{MARKER}") if p.is_file()]
    return sorted(found)


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


def digests(root: str | Path) -> dict[str, str]:
    """Relative path (POSIX) -> sha256 of every file below ``root`` but the manifest, sorted by path."""
    base = Path(root)
    files = (p for p in base.rglob("*") if p.is_file() or p.is_symlink())
    out = {p.relative_to(base).as_posix(): sha256(p) for p in files if p.relative_to(base).as_posix() != MANIFEST}
    return dict(sorted(out.items()))


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
    """The files a collect into the set at ``root`` keeps beside it while it runs (``fedbalance.refset``): its
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


def problems(root: str | Path) -> list[str]:
    """What differs between the set at ``root`` and its manifest: changed, extra and missing files, each named."""
    recorded = read_manifest(root)
    actual = digests(root)
    changed = [p for p in recorded if p in actual and actual[p] != recorded[p]]
    extra = [p for p in actual if p not in recorded]
    missing = [p for p in recorded if p not in actual]
    return [_named(kind, paths) for kind, paths in (("changed", changed), ("extra", extra), ("missing", missing))
            if paths]


def verify(root: str | Path) -> None:
    """SealError naming the files unless every file of the set at ``root`` is the one its manifest records."""
    read_marker(root)
    found = problems(root)
    if found:
        raise SealError(f"reference set {root}: its files differ from {MANIFEST}: {'; '.join(found)}; "
                        + RESTORE.format(root=root) + interrupted(root))


def verify_if_sealed(path: str | Path, what: str) -> Path | None:
    """``verify`` the set ``path`` is or lies in (None when it is in none). A folder of reference jobs (a
    provenance.json of a set's, ``provenance.in_a_set``) without a marker is refused: a set whose seal was removed, or
    one never sealed; a results folder of the workflow's jobs is none."""
    root = set_root(path)
    if root is not None:
        verify(root)
        return root
    folder = Path(path)
    if sets_below(folder):  # the parent of sets (reference/): its caller names the sets below it
        return None
    if folder.is_dir() and any(_a_sets_record(p) for p in folder.glob(f"**/{PROVENANCE}")):
        raise SealError(f"{what} {path} holds reference jobs ({PROVENANCE}) but no {MARKER}: an unsealed reference "
                        f"set; restore its marker and manifest (git checkout), or seal it with `{COLLECT} --into "
                        f"{path} --adopt`" + interrupted(path))
    return None


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
