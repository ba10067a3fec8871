"""The library's release, from its git tag (setuptools-scm), and the check that a workflow runs the release it expects.

setuptools-scm writes ``_version.py`` beside this file whenever the package is built (``pip install .``,
``pip install -e .``, a wheel): the version of the tree this code came from (``0.2.0`` at a tag,
``0.2.1.dev3+g1a2b3c4`` after it, ``0.0`` from a copy without git history, e.g. ``git archive``). That
file, not the installed distribution's metadata, is read first: the workflow puts a checkout's ``src/`` first
on ``sys.path``, and the metadata may then belong to another checkout's install. Without the file (a tree
never built, such as a pinned worktree that the reference set's jobs run from), the metadata counts only when
it describes this very code; else setuptools-scm (the test extra brings it) reads the tree's git history; else
the version is unknown.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path

UNKNOWN = "0+unknown"  # a tree never built: no _version.py, and no installed distribution of this code
ALLOW_MISMATCH_ENV = "FEDBALANCE_ALLOW_VERSION_MISMATCH"


def _installed_version(here: Path) -> str | None:
    """The installed distribution's version when it is this code's (a wheel install or an editable one of this tree)."""
    try:
        dist = metadata.distribution("fedbalance")
    except metadata.PackageNotFoundError:
        return None
    if Path(str(dist.locate_file("fedbalance/__init__.py"))).resolve() == here / "__init__.py":
        return dist.version
    direct = dist.read_text("direct_url.json")
    url = json.loads(direct).get("url", "") if direct else ""
    if url.startswith("file://") and here.is_relative_to(Path(url.removeprefix("file://")).resolve()):
        return dist.version
    return None


def _scm_version(root: Path) -> str | None:
    """What setuptools-scm makes of the git checkout at ``root`` with its pyproject.toml's settings, or None when
    ``root`` is no checkout or setuptools-scm (or tomllib, Python >= 3.11) is missing."""
    if not (root / ".git").exists() or not (root / "pyproject.toml").is_file():
        return None
    try:
        import tomllib

        from setuptools_scm import get_version
    except ImportError:
        return None
    try:
        settings = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools_scm"]
        return str(get_version(root=str(root), fallback_version=settings.get("fallback_version")))
    except (LookupError, OSError, ValueError):
        return None


def _version() -> str:
    """This code's release (module docstring)."""
    try:
        from fedbalance._version import version
    except ImportError:
        here = Path(__file__).resolve().parent
        return _installed_version(here) or _scm_version(here.parent.parent) or UNKNOWN
    return str(version)


__version__ = _version()


def release(version: str) -> str:
    """The release a version string names: ``v0.2.0`` and ``0.2.0`` alike; a local part (``+g1a2b3c4``) kept."""
    return version.strip().removeprefix("v")


def workflow_release_problem(*, src: Path | None, tag: str | None, origin: str) -> str | None:
    """Why the imported library is not the workflow's release, or None when it is (or cannot be told).

    ``src``: the ``src/`` folder of a local workflow's repository, beside its ``workflow/`` (the library there must be
    the one imported);
    ``tag``: the tag a module's Snakefile was fetched at (``github(..., tag=...)``, ``gitfile(..., tag=...)``),
    which must name this release. A module fetched at a branch or commit (or a ref that is no version, such as
    ``main``) names no release and is not checked.
    """
    here = Path(__file__).resolve().parent
    if src is not None and (src / "fedbalance").is_dir():
        if (src / "fedbalance").resolve() == here:
            return None
        return (f"the workflow at {origin} runs the fedbalance library from {here.parent}, not its own {src} "
                f"(fedbalance was imported before the Snakefile put its src/ first)")
    if tag is None or not re.match(r"v?\d", tag) or release(tag) == release(__version__):
        return None
    return (f"the installed fedbalance library is {__version__}, but the workflow ({origin}) is release "
            f'{release(tag)}: pip install "fedbalance @ git+https://github.com/OWNER/fedbalance@{tag}"')


def mismatch_allowed(environ: Mapping[str, str]) -> bool:
    """Whether the environment lets a workflow run another release's library (``FEDBALANCE_ALLOW_VERSION_MISMATCH=1``)."""
    return environ.get(ALLOW_MISMATCH_ENV, "").strip().lower() in {"1", "true", "yes"}
