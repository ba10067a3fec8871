"""The package's folders are its layers (docs/design.md, "Layout"): no module but the CLI and its helpers at the top,
imports pointing down the layers only, each subpackage's docstring and public API, the names before the layout still
importing (with a warning), and the picture in docs/design.md drawn from the imports as they are."""

from __future__ import annotations

import importlib
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import fedbalance

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
import layout  # noqa: E402

ALLOWED_TOP = {"__init__", "__main__", "_version", "cli", "logs", "atomic", "version"}


def test_no_module_but_the_cli_and_its_helpers_sits_at_the_top() -> None:
    top = {p.stem for p in layout.PACKAGE.glob("*.py")}
    assert top <= ALLOWED_TOP, sorted(top - ALLOWED_TOP)
    folders = {p.name for p in layout.PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert folders == set(fedbalance.LAYERS) - {"cli"}


def test_imports_point_down_the_layers_only() -> None:
    """Every import between two layers goes from a later layer of ``fedbalance.LAYERS`` to an earlier one; the
    top-level helpers (atomic, logs, version) import no layer. Each breach is named with the two modules."""
    rank = {name: i for i, name in enumerate(fedbalance.LAYERS)}
    up = [f"{m} imports {t}" for (a, b), pairs in layout.edges().items() for m, t in pairs
          if a in rank and b in rank and rank[b] > rank[a]]
    assert not up, up
    helpers = [f"{m} imports {t}" for (a, b), pairs in layout.edges().items() for m, t in pairs
               if a in layout.TOP and b in rank]
    assert not helpers, helpers


def test_the_direction_check_finds_an_import_that_points_up(tmp_path: Path) -> None:
    """The check reads imports inside functions and relative ones too: a copy of two layers where the lower imports the
    higher, one way each, is caught."""
    pkg = tmp_path / "fedbalance"
    for sub in ("common", "jobs"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "common" / "a.py").write_text("def f():\n    from fedbalance.jobs import run\n")
    (pkg / "common" / "b.py").write_text("from ..jobs.run import x\n")
    (pkg / "jobs" / "run.py").write_text("x = 1\n")
    found = layout.edges(pkg)
    assert sorted(found) == [("common", "jobs")]
    assert set(found[("common", "jobs")]) == {("fedbalance.common.a", "fedbalance.jobs"),
                                              ("fedbalance.common.a", "fedbalance.jobs.run"),
                                              ("fedbalance.common.b", "fedbalance.jobs.run")}


def test_every_subpackage_says_what_it_is_for_and_its_api_resolves() -> None:
    for name in set(fedbalance.LAYERS) - {"cli"}:
        pkg = importlib.import_module(f"fedbalance.{name}")
        assert pkg.__doc__ and len(pkg.__doc__.split()) > 15, name
        if name != "presentation":
            assert "May import" in pkg.__doc__, name
        for api in getattr(pkg, "__all__", []):
            assert getattr(pkg, api) is not None, (name, api)


def test_the_names_before_the_layout_import_the_same_module_with_a_warning() -> None:
    """``fedbalance.losses`` (a plug-in's import before the layout) is ``fedbalance.methods.losses`` itself, so a
    subclass registers where the library looks; the warning names the new module. ``fedbalance.data.Source`` and
    ``fedbalance.jobs.run_job`` (modules then, packages now) still answer without one."""
    from fedbalance.methods import losses as new

    for old, new_name in fedbalance.MOVED.items():
        sys.modules.pop(f"fedbalance.{old}", None)
        with pytest.warns(DeprecationWarning, match=rf"fedbalance\.{old} moved to fedbalance\.{new_name}"):
            module = importlib.import_module(f"fedbalance.{old}")
        assert module is importlib.import_module(f"fedbalance.{new_name}"), old
    assert importlib.import_module("fedbalance.losses") is new
    sys.modules.pop("fedbalance.estimators", None)
    if "estimators" in vars(fedbalance):  # an import above set it on the package; read it anew through __getattr__
        delattr(fedbalance, "estimators")
    with pytest.warns(DeprecationWarning, match="moved to fedbalance.monitor.estimators"):
        from fedbalance import estimators
    assert estimators.Track is importlib.import_module("fedbalance.monitor.estimators").Track
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        from fedbalance.data import Source
        from fedbalance.jobs import run_job

        assert Source is importlib.import_module("fedbalance.data.datasets").Source
        assert run_job is importlib.import_module("fedbalance.jobs.run").run_job
        assert importlib.import_module("fedbalance.data").partition is importlib.import_module("fedbalance.data.partition")


def test_a_plugin_written_against_the_old_names_still_registers(tmp_path: Path) -> None:
    """The example plug-in's loss as it was written before the layout (``from fedbalance.losses import CountsLoss``)
    loads by dotted path and is the library's own class, in a process of its own."""
    (tmp_path / "oldplugin.py").write_text(
        "from fedbalance.losses import CountsLoss\n"
        "class Mine(CountsLoss):\n"
        "    def forward_counts(self, logits, target, counts, mask=None):\n"
        "        return logits.sum() * 0\n")
    code = ("import warnings; warnings.simplefilter('default')\n"
            "from fedbalance.common import plugins\n"
            "from fedbalance.methods.losses import CountsLoss, loss_class\n"
            "cls = loss_class('oldplugin:Mine')\n"
            "print(issubclass(cls, CountsLoss))\n")
    env = {"PYTHONPATH": f"{tmp_path}:{REPO / 'src'}", "PATH": "/usr/bin:/bin"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "True", r.stderr[-2000:]
    assert "fedbalance.losses moved to fedbalance.methods.losses" in r.stderr


def test_the_layout_picture_in_the_design_doc_is_current() -> None:
    text = layout.DESIGN.read_text()
    assert layout.spliced(text, layout.mermaid()) == text, "run: python scripts/layout.py --write"
