"""The workflow's conda environments (``workflow/envs/*.yaml``), every package pinned, written from one place.

``fedbalance envs`` writes them from the versions installed where it runs (a venv made by the README's install, whose
packages come from PyPI), and ``pins.txt`` beside them: each package at its PyPI name and version, the lock the
environments were written from. The training rules run in ``torch-cpu`` or ``torch-cuda``, chosen by the config's
``device`` (``env_for``); the other rules in ``report``. conda-forge names two packages otherwise (``CONDA_NAME``) and
builds PyTorch once per accelerator: the build string selects the CPU or the CUDA build (``BUILD``).
"""

from __future__ import annotations

import sys
from importlib import metadata
from pathlib import Path

ENVS: dict[str, tuple[str, ...]] = {
    "report": ("numpy", "scipy", "pandas", "scikit-learn", "pyyaml", "jsonschema", "matplotlib", "jinja2", "markdown",
               "tabulate"),
    "torch-cpu": ("torch", "torchvision", "numpy", "scipy", "pandas", "scikit-learn", "mlxtend", "tqdm", "pyyaml",
                  "jsonschema", "matplotlib", "jinja2", "filelock"),
    "torch-cuda": ("torch", "torchvision", "numpy", "scipy", "pandas", "scikit-learn", "mlxtend", "tqdm", "pyyaml",
                   "jsonschema", "matplotlib", "jinja2", "filelock"),
}
"""Each environment's packages, by their PyPI names (the project's dependencies each rule imports)."""

CONDA_NAME = {"torch": "pytorch", "matplotlib": "matplotlib-base"}
"""conda-forge's name of a package where it is not the PyPI name."""

BUILD = {"torch-cpu": {"torch": "cpu*", "torchvision": "cpu*"},
         "torch-cuda": {"torch": "*cuda*", "torchvision": "*cuda*"}}
"""The build string each environment asks of a package: PyTorch's CPU or CUDA build."""

PINS = "pins.txt"
"""The lock beside the environments: ``name==version`` per line, PyPI names."""

HEADER = {
    "report": "the torch-free rules (partitions, twins, reference copies, tidy CSVs, tables, figures, pages)",
    "torch-cpu": "the data and training rules on a machine without a GPU (config device: cpu)",
    "torch-cuda": ("the data and training rules on a GPU (config device: cuda, or auto on a machine that sees CUDA); "
                   "conda picks the CUDA runtime that matches the driver through the __cuda virtual package: on a "
                   "cluster whose login node has no GPU, set CONDA_OVERRIDE_CUDA (your driver's CUDA version) before "
                   "the first run"),
}


def installed(names: tuple[str, ...]) -> dict[str, str]:
    """The installed version of each of ``names`` (a CPU build's local label dropped: "2.14.1+cpu" -> "2.14.1")."""
    return {n: metadata.version(n).split("+")[0] for n in names}


def env_text(name: str, pins: dict[str, str], python: str) -> str:
    """Environment ``name`` as conda YAML: conda-forge alone, ``python`` pinned, each package at its pin."""
    lines = [f"# Environment of {HEADER[name]}.", "# Written by `python -m fedbalance envs` (its pins: pins.txt beside it); do not edit by hand.",
             "channels:", "  - conda-forge", "  - nodefaults", "dependencies:", f"  - python={python}"]
    for pkg in ENVS[name]:
        build = BUILD.get(name, {}).get(pkg)
        lines.append(f"  - {CONDA_NAME.get(pkg, pkg)}={pins[pkg]}" + (f"={build}" if build else ""))
    return "\n".join(lines) + "\n"


def pins_text(pins: dict[str, str], python: str) -> str:
    """The lock: the Python version, then ``name==version`` per package, sorted."""
    return f"python=={python}\n" + "".join(f"{n}=={v}\n" for n, v in sorted(pins.items()))


def read_pins(path: str | Path) -> tuple[str, dict[str, str]]:
    """(python, {name: version}) of a lock written by ``pins_text``."""
    rows = dict(line.split("==") for line in Path(path).read_text().split() if line)
    return rows.pop("python"), rows


def write_envs(envs_dir: str | Path, *, check: bool = False, python: str | None = None) -> list[Path]:
    """Write ``pins.txt`` and each environment of ``ENVS`` into ``envs_dir`` from the installed versions (``python``:
    default, this interpreter's major.minor); the files that differed (``check``: compare only, write nothing)."""
    out = Path(envs_dir)
    python = python or f"{sys.version_info.major}.{sys.version_info.minor}"
    pins = installed(tuple(dict.fromkeys(p for pkgs in ENVS.values() for p in pkgs)))
    texts = {out / PINS: pins_text(pins, python), **{out / f"{n}.yaml": env_text(n, pins, python) for n in ENVS}}
    stale = [p for p, t in texts.items() if not p.is_file() or p.read_text() != t]
    if not check:
        for p in stale:
            p.write_text(texts[p])
    return stale


def env_for(uses_gpu: bool) -> str:
    """The training rules' environment file, relative to workflow/rules/: CUDA's on a GPU, else the CPU one."""
    return f"../envs/{'torch-cuda' if uses_gpu else 'torch-cpu'}.yaml"
