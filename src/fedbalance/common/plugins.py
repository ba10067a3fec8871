"""Plug-ins: a loss, a composition estimator or a dataset from another package, found without forking (torch-free).

Two ways in, both checked by ``config.validate`` before any job runs:

* an **entry point** of a installed package in the group ``fedbalance.losses``, ``fedbalance.estimators`` or
  ``fedbalance.datasets``: its name is a name the config can use like a built-in one;
* a **dotted path** ``module:attribute`` in the config (``loss_variants.<v>.loss``, the top-level ``estimators.<name>``,
  ``datasets.<d>.source``).

``Plugin`` says where one comes from: its target, its package (distribution) and version. A job records in its spec
(``record``: the configured dict's ``plugins``) each plug-in it uses, with the version of those that act on its
training (its loss, its dataset, the estimator whose estimate a prior-fed loss trains on: ``jobspec.training_key``), so
a job whose such plug-in changed version compares unequal to the old one (no twin, reference copy or checkpoint is
reused across versions) and ``check_installed`` refuses to run it under another version than the one it was planned
with; every version a job ran with, estimators' included, is in its metrics.json (``plugins``). A module that no
installed distribution provides is versioned by the SHA-256 of its source file.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.metadata as metadata
import importlib.util
import re
import sys
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

KINDS = ("losses", "estimators", "datasets")
"""The plug-in points; each has the entry-point group ``fedbalance.<kind>``."""

SINGULAR = {"losses": "loss", "estimators": "estimator", "datasets": "dataset"}
_DOTTED = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


class PluginError(ValueError):
    """A plug-in cannot be found, loaded or used as named; the message names it and where it comes from."""


class PluginFailure(PluginError):
    """A plug-in broke its contract while a job ran (a non-finite loss or estimate, a wrong shape, an exception): the
    message names the job, the round, the plug-in and its origin; the job is marked failed, never finished."""


def release(package: str | None, version: str | None) -> str:
    """A plug-in's package and version in words: "fedbalance-cb 0.1.0", "no installed package, sha256:<12 hex>"."""
    text = f"{package} {version}" if package else f"no installed package, {version}"
    return text.removesuffix(" None").removesuffix(", None")


def one_line(exc: BaseException) -> str:
    """An exception as one line: its type and its message's words."""
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"


def group(kind: str) -> str:
    """The entry-point group of plug-in point ``kind``."""
    if kind not in KINDS:
        raise ValueError(f"unknown plug-in kind {kind!r}; one of {KINDS}")
    return f"fedbalance.{kind}"


def is_dotted(name: str) -> bool:
    """Whether ``name`` is a dotted path ``module:attribute`` (not a registered or entry-point name)."""
    return isinstance(name, str) and _DOTTED.fullmatch(name) is not None


@dataclass(frozen=True)
class Plugin:
    """Where one plug-in comes from: ``how`` ("entry point" or "dotted path"), ``target`` ``module:attribute``, and
    the package that provides it with its version (``package`` None: a module on the path that no installed package
    provides; ``version`` is then ``sha256:<12 hex>`` of its source file)."""

    kind: str
    name: str
    target: str
    how: str
    package: str | None
    version: str | None

    def origin(self) -> str:
        """One phrase naming it: "entry point 'cb' (fedbalance.losses) of fedbalance-cb 0.1.0"."""
        where = release(self.package, self.version)
        if self.how == "entry point":
            return f"entry point {self.name!r} ({group(self.kind)}) of {where}, {self.target}"
        return f"dotted path {self.target} ({where})"

    def record(self, version: bool = True) -> dict[str, Any]:
        """What a job's spec records of it (``version`` False: without the version, for a plug-in that does not act on
        the job's training)."""
        out = {"target": self.target, "how": self.how, "package": self.package, "version": self.version}
        if not version:
            del out["version"]
        return out

    def ran(self) -> dict[str, Any]:
        """What metrics.json's ``plugins`` records of a plug-in a job ran with: ``record`` and its ``origin``."""
        return {**self.record(), "origin": self.origin()}

    def load(self) -> Any:
        """Import the module and return the attribute; PluginError naming the target when that fails."""
        module, _, attr = self.target.partition(":")
        try:
            obj: Any = importlib.import_module(module)
        except Exception as exc:  # noqa: BLE001 - any import failure of user code is reported as one line
            raise PluginError(f"{SINGULAR[self.kind]} {self.name!r} ({self.origin()}): cannot import {module!r} "
                              f"({one_line(exc)})") from None
        for part in attr.split("."):
            if not hasattr(obj, part):
                raise PluginError(f"{SINGULAR[self.kind]} {self.name!r} ({self.origin()}): module {module!r} has no "
                                  f"attribute {attr!r}")
            obj = getattr(obj, part)
        return obj


def _path_key() -> tuple[str, ...]:
    return tuple(sys.path)


@functools.lru_cache(maxsize=16)
def _entry_points(kind: str, path: tuple[str, ...]) -> dict[str, Plugin]:
    found: dict[str, Plugin] = {}
    for ep in metadata.entry_points(group=group(kind)):
        dist = getattr(ep, "dist", None)
        package = dist.metadata["Name"] if dist is not None else None
        plugin = Plugin(kind, ep.name, ep.value.replace(" ", ""), "entry point", package,
                        dist.version if dist is not None else None)
        other = found.get(ep.name)
        if other is not None and other.target != plugin.target:
            raise PluginError(f"{SINGULAR[kind]} {ep.name!r}: declared twice, as {other.origin()} and as "
                              f"{plugin.origin()}; uninstall one of the packages")
        found[ep.name] = plugin
    return found


def entry_points(kind: str) -> dict[str, Plugin]:
    """Name -> plug-in of every entry point in ``kind``'s group (nothing imported); PluginError when two packages
    declare one name."""
    return dict(_entry_points(kind, _path_key()))


@functools.lru_cache(maxsize=256)
def _dotted(kind: str, target: str, path: tuple[str, ...]) -> Plugin:
    module = target.partition(":")[0]
    top = module.split(".")[0]
    packages = metadata.packages_distributions().get(top, [])
    if packages:
        name = packages[0]
        return Plugin(kind, target, target, "dotted path", metadata.metadata(name)["Name"], metadata.version(name))
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        raise PluginError(f"no module {module!r} on the Python path (install its package, or add its folder to "
                          "PYTHONPATH)")
    try:
        with open(spec.origin or "", "rb") as fh:
            digest = hashlib.sha256(fh.read()).hexdigest()[:12]
    except OSError:
        digest = "unknown"
    return Plugin(kind, target, target, "dotted path", None, f"sha256:{digest}")


def resolve(kind: str, name: str, builtin: Collection[str], where: str) -> Plugin | None:
    """The plug-in a config's ``name`` denotes, None for a built-in name; PluginError (its message starts with
    ``where``, the config key) for a name that is neither, or a built-in name an entry point declares too."""
    try:
        eps = entry_points(kind)
    except PluginError as exc:
        raise PluginError(f"{where}: {exc}") from None
    if name in builtin:
        if name in eps:
            raise PluginError(f"{where}: {SINGULAR[kind]} {name!r} is both fedbalance's own and {eps[name].origin()}; "
                              "rename the entry point or uninstall its package")
        return None
    if is_dotted(name):
        try:
            return _dotted(kind, name, _path_key())
        except PluginError as exc:
            raise PluginError(f"{where}: {SINGULAR[kind]} {name!r}: {exc}") from None
    if name in eps:
        return eps[name]
    shown = sorted(builtin) + sorted(eps)
    raise PluginError(f"{where}: unknown {SINGULAR[kind]} {name!r}; fedbalance's and installed plug-ins': {shown}, "
                      "or a dotted path module:attribute")


def clashes(kind: str, builtin: Collection[str], named: Mapping[str, str] | None = None,
            used: Collection[str] | None = None) -> str | None:
    """A line naming the first clash between built-in names, entry-point names and the config's own names
    (``named``: name -> the config key that names it), or None. ``used``: the names the study uses; an entry point
    that shares a built-in's name clashes only when the study names it (another study in the same environment runs)."""
    try:
        eps = entry_points(kind)
    except PluginError as exc:
        return str(exc)
    for name in sorted(eps):
        if name in builtin and (used is None or name in used):
            return (f"{SINGULAR[kind]} {name!r} is both fedbalance's own and {eps[name].origin()}; rename the entry "
                    "point or uninstall its package")
    for name, key in (named or {}).items():
        if name in builtin:
            return f"{key}: {name!r} is the name of fedbalance's own {SINGULAR[kind]} {name!r}; choose another name"
        if name in eps:
            return f"{key}: {name!r} is also the name of {eps[name].origin()}; choose another name"
    return None


def from_record(kind: str, name: str, record: Mapping[str, Any]) -> Plugin:
    """The ``Plugin`` a job spec's ``record`` describes (its ``origin`` for messages; version None when unrecorded)."""
    return Plugin(kind, name, str(record["target"]), str(record.get("how") or "dotted path"), record.get("package"),
                  record.get("version"))


def check_installed(kind: str, name: str, record: Mapping[str, Any]) -> Plugin:
    """The plug-in ``record`` (a job spec's) names, as installed now; PluginError when its package, or its version where
    the record has one, is not the recorded one (the job was planned with another release of the plug-in). A record
    without a version (a plug-in that does not act on the job's training) takes the installed version."""
    target = str(record["target"])
    planned = release(record.get("package"), record.get("version"))
    if record.get("how") == "entry point":
        now = entry_points(kind).get(name)
        if now is None:
            raise PluginError(f"{SINGULAR[kind]} {name!r}: the job was planned with {planned}, whose entry point is not "
                              "installed here")
    else:
        now = _dotted(kind, target, _path_key())
    if now.package != record.get("package") or ("version" in record and now.version != record.get("version")):
        raise PluginError(f"{SINGULAR[kind]} {name!r}: the job was planned with {planned}, {release(now.package, now.version)} "
                          "is installed; plan the job again (rerun the workflow) so that its spec records the plug-in it "
                          "runs")
    return now


_GENERATION = [0]


def generation() -> int:
    """How many times ``forget`` has run in this process: a cache of what plug-ins resolve to keys on it."""
    return _GENERATION[0]


def forget() -> None:
    """Drop the cached entry points and dotted paths, and every cache keyed on ``generation`` (after installing or
    editing a plug-in in this process)."""
    _GENERATION[0] += 1
    _entry_points.cache_clear()
    _dotted.cache_clear()
    importlib.invalidate_caches()
