"""The test suite's two tiers (README, "Tests") and the checkout the tests run on."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src"
# the end-to-end tests the issue that made the tiers names (quick DAG, shrunk shipped configs, module deployment,
# non-editable install, reference render)
END_TO_END = (
    "test_workflow.py::test_quick_dag_end_to_end",
    "test_shipped_configs.py::test_shipped_config_runs_to_the_end[config]",
    "test_shipped_configs.py::test_shipped_config_runs_to_the_end[mnist]",
    "test_module.py::test_module_from_a_local_path",
    "test_module.py::test_snakedeploy_from_a_git_host[branch]",
    "test_module.py::test_snakedeploy_from_a_git_host[tag]",
    "test_readme.py::test_non_editable_install_renders_tables",
    "test_reference.py::test_render_from_the_reference_set",
)


def _pytest_options() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]


def test_the_two_test_tiers() -> None:
    """The default run deselects the end-to-end tier and uses both cores; CI runs both tiers; `-m slow` collects
    exactly the slow-marked tests, among them every end-to-end one."""
    opts = _pytest_options()
    addopts = shlex.split(opts["addopts"])
    assert addopts[addopts.index("-m") + 1] == "not slow" and addopts[addopts.index("-n") + 1] == "auto"
    assert opts["pythonpath"] == ["src"]
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["test"]
    assert any(re.match(r"pytest-xdist\b", d) for d in extras)
    ci = (REPO / ".ci" / "run").read_text()
    assert re.search(r'for args in "" "-m slow"; do', ci) and "python -m pytest -q --durations=20 $args" in ci

    # pytest collects the files that name the mark (no other can hold a slow test: conftest.py marks nothing)
    naming = sorted(str(p.relative_to(REPO)) for p in (REPO / "tests").glob("test_*.py") if "slow" in p.read_text())
    conftest = (REPO / "tests" / "conftest.py").read_text()
    assert "pytest.mark" not in conftest and "add_marker" not in conftest
    r = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-n", "0", "-p", "no:cacheprovider",
                        "-m", "slow", *naming], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    slow = {line.removeprefix("tests/") for line in r.stdout.splitlines() if line.startswith("tests/")}
    assert set(END_TO_END) <= slow, set(END_TO_END) - slow
    marked = set()
    for path in (REPO / "tests").glob("test_*.py"):
        text = path.read_text()
        marked |= {f"{path.name}::{name}" for name in re.findall(r"^@pytest\.mark\.slow\n(?:(?!def ).*\n)*?def (test_\w+)", text, re.M)}
    assert {s.split("[")[0] for s in slow} == marked


def test_the_fast_tier_names_every_module() -> None:
    """Each module of the library is imported by a test file that runs in the fast tier."""
    fast_text = ""
    for path in (REPO / "tests").glob("test_*.py"):
        text = path.read_text()
        if "pytestmark = pytest.mark.slow" not in text and re.search(r"^def test_", text, re.M):
            fast_text += text
    modules = sorted(
        ".".join(p.relative_to(SRC).with_suffix("").parts)
        for p in (SRC / "fedbalance").rglob("*.py")
        if not p.name.startswith("_") and "__pycache__" not in p.parts
    )
    unnamed = []
    for module in modules:
        # a module its package's registry names (presentation.figures: a module per figure) counts as named with it
        package, _, name = module.rpartition(".")
        if not re.search(rf"\b{re.escape(module)}\b|from {re.escape(package)} import [^\n]*\b{name}\b", fast_text):
            init = SRC.joinpath(*package.split("."), "__init__.py")
            if not (package != "fedbalance" and re.search(rf"\b{name}\b", init.read_text())
                    and re.search(rf"\b{re.escape(package)}\b", fast_text)):
                unnamed.append(module)
    assert not unnamed, unnamed


def test_the_tests_run_on_this_checkout(tmp_path: Path) -> None:
    """The test processes import this checkout's src/ and so do the processes they start; a session that would
    import another copy of fedbalance (a second clone installed in the same venv) stops before any test."""
    import fedbalance

    assert Path(fedbalance.__file__).resolve().parent == SRC / "fedbalance"
    assert os.environ["PYTHONPATH"].split(os.pathsep)[0] == str(SRC)

    other = tmp_path / "other"
    shutil.copytree(SRC / "fedbalance", other / "fedbalance", ignore=shutil.ignore_patterns("__pycache__"))
    env = {**os.environ, "PYTHONPATH": str(other)}
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", "-o", "pythonpath=",
                        "tests/test_records.py"], cwd=REPO, capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 4, r.stdout[-2000:] + r.stderr[-2000:]
    assert f"the tests import fedbalance from {other / 'fedbalance'}, not this checkout's {SRC}" in r.stderr
