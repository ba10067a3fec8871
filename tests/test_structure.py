"""The library's layering: no import cycle among the modules of src/fedbalance and its subpackages (lazy imports
count), and nothing outside ``presentation`` imports it."""

from __future__ import annotations

import sys
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "src" / "fedbalance"
ROOT = PKG.parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import layout  # noqa: E402


def import_graph() -> dict[str, set[str]]:
    """module -> fedbalance modules it imports anywhere in its body, relative imports too (scripts/layout.py's reader,
    which draws docs/design.md's layout); names below fedbalance, the top package left out."""
    return {m.removeprefix("fedbalance."): {t.removeprefix("fedbalance.") for t in targets if t != "fedbalance"}
            for m, targets in layout.graph(PKG).items() if m != "fedbalance"}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_cycle_finder_sees_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycle() -> None:
    graph = import_graph()
    assert {"training.train", "training.vectorised", "training.sgd", "monitor.monitor", "engine.fl"} <= set(graph)
    assert "training.train" not in graph["training.vectorised"] and "training.sgd" in graph["training.vectorised"]
    assert cycles(graph) == []


def test_the_model_input_sits_below_training() -> None:
    """models (with the input transform ``to_float``) imports nothing of the library; metrics, the monitor and
    the training paths take it from there, and metrics imports no training module."""
    graph = import_graph()
    assert graph["methods.models"] == set()
    assert "methods.models" in graph["methods.metrics"] and not graph["methods.metrics"] & {
        "training.sgd", "training.train", "training.vectorised", "engine.fl"}


def test_presentation_sits_on_top() -> None:
    """presentation imports records/config/aggregate/seedstats and the monitor's intervals (numpy only: the figures'
    bands of rounds recorded before the interval columns); nothing outside it imports it but the command line;
    its ``refdocs`` (which splices a render of a reference set into the docs, on top of the rest of it) is imported by
    the command line alone; seedstats imports nothing of the library (the intervals every comparison states, below both
    presentation and reference)."""
    graph = import_graph()
    assert {"presentation.tables", "presentation.claims", "presentation.figures.common", "presentation.fidelity",
            "presentation.contract", "presentation.refdocs"} <= set(graph)
    above = {"presentation.refdocs", "cli", "__main__"}
    for m, deps in graph.items():
        if not m.startswith("presentation") and m not in above:
            assert not any(d.startswith("presentation") for d in deps), (m, deps)
    importers = {m: {n for n, deps in graph.items() if m in deps} for m in above}
    assert importers["presentation.refdocs"] <= {"cli"} and importers["cli"] <= {"__main__"}
    assert not importers["__main__"]
    below = {d for m, deps in graph.items() if m.startswith("presentation") and m not in above for d in deps}
    assert {d for d in below if not d.startswith("presentation")} <= {
        "common.records", "jobs.config", "jobs.aggregate", "evidence.seedstats", "evidence.looks", "common.lazy",
        "common", "jobs", "evidence", "monitor.intervals", "monitor"}
    assert graph["evidence.seedstats"] == set() and "evidence.seedstats" in graph["evidence.reference"]


def test_the_report_side_imports_no_torch() -> None:
    """records, config, jobfolder, partition, reuse, aggregate, reference, fidelity and presentation run in the report env
    (no torch): the rules partition, reuse, from_reference and the report's."""
    import subprocess
    import sys

    code = ("import sys; import fedbalance.common.records, fedbalance.jobs.config, fedbalance.jobs.jobfolder, fedbalance.data.partition, "
            "fedbalance.jobs.reuse, fedbalance.jobs.aggregate, fedbalance.presentation.contract, "
            "fedbalance.evidence.reference, fedbalance.presentation.fidelity, fedbalance.presentation.tables, fedbalance.presentation.claims, "
            "fedbalance.presentation.figures, fedbalance.presentation.report; "
            "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out


def _rule_blocks() -> dict[str, str]:
    """Each rule's text in workflow/rules/*.smk, by rule name."""
    import re

    out = {}
    for smk in (ROOT / "workflow" / "rules").glob("*.smk"):
        parts = re.split(r"^rule (\w+):\n", smk.read_text(), flags=re.M)
        out.update({name: body for name, body in zip(parts[1::2], parts[2::2])})
    return out


def test_torch_free_rules_run_in_the_report_env() -> None:
    """The rules whose scripts import no torch (partition, reuse, from_reference) do not ask for the torch env."""
    blocks = _rule_blocks()
    for rule in ("partition", "reuse", "from_reference", "aggregate", "table", "figure"):
        assert 'conda:\n        "../envs/report.yaml"' in blocks[rule], rule
    for rule in ("train", "prepare_data"):
        assert "conda:\n        torch_env" in blocks[rule], rule  # torch-cpu or torch-cuda, by device


def test_job_specs_are_read_through_the_typed_spec() -> None:
    """Outside jobspec.py and config.py (which build and validate the configured dict) no module reads a job's
    dict: no ``spec[...]``, ``spec.get(...)`` nor ``job_value(spec, ...)``; they read ``JobSpec``'s fields, so an
    optional key has its one default (``JOB_DEFAULTS``) and a required one its one type."""
    import re

    offenders = []
    for path in sorted(PKG.rglob("*.py")):
        if path.name in ("config.py", "jobspec.py"):
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"\bspec(\.get\(|\[)|\bjob_value\(", line):
                offenders.append(f"{path.relative_to(PKG)}:{n}: {line.strip()}")
    assert offenders == []


def test_shared_names_are_spelled_in_one_place() -> None:
    """The estimator columns are spelled by records.cs_column / est_column only, and a job's partitions are built
    from its spec by partition.spec_partitions only (the engine, the partition rule and cost call it)."""
    import re

    spelled, built = [], []
    for path in sorted([*PKG.rglob("*.py"), *(ROOT / "workflow").rglob("*.py"), *(ROOT / "workflow").rglob("*.smk")]):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            where = f"{path.relative_to(ROOT)}:{n}"
            if path.name != "records.py" and re.search(r"""f["'](cs|est)_\{""", line):
                spelled.append(where)
            if path.name != "partition.py" and re.search(r"\bjob_partitions\(", line):
                built.append(where)
    assert spelled == [] and built == []


# What the Snakefile and rules/*.smk import when they parse (tests/test_catalog.py lints them with Snakemake alone)
PLANNING = ("config", "jobspec", "records", "jobfolder", "provenance", "reuse", "version", "data",
            "presentation.table_specs", "presentation.figures", "presentation.study")


def test_the_workflow_plans_with_the_standard_library_pyyaml_and_jsonschema() -> None:
    """The modules the workflow imports when it parses load, and validate and plan the quick study, with numpy,
    pandas, torch and matplotlib unimportable (the workflow catalog lints with Snakemake alone)."""
    import subprocess
    import sys

    code = (
        "import importlib.abc, sys\n"
        "class Blocked(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.partition('.')[0] in {'numpy', 'pandas', 'torch', 'matplotlib', 'scipy'}:\n"
        "            raise ModuleNotFoundError(name)\n"
        "sys.meta_path.insert(0, Blocked())\n"
        + "".join(f"import fedbalance.{m}\n" for m in PLANNING)
        + "from fedbalance.jobs.config import jobs, load_config, twins\n"
        "from fedbalance.presentation.study import figures_run, tables_run\n"
        "from fedbalance.jobs.reuse import branches, derived\n"
        "cfg = load_config('config/quick.yaml')\n"
        "study = jobs(cfg)\n"
        "print(len(study), len(twins(cfg)), len(derived(cfg)), len(branches(cfg)), len(tables_run(study)[0]))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split() == ["47", "8", "1", "1", "11"]


def test_the_command_lines_parser_imports_no_torch_pandas_or_scipy() -> None:
    """Every ``fedbalance`` call builds the whole parser first: it imports neither torch nor pandas nor scipy (a second
    or two of each call's start-up; docs/performance.md, "Test suite"), and neither does ``seedstats`` until it computes
    an interval."""
    import os
    import subprocess

    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    code = ("import sys; from fedbalance.cli import build_parser; build_parser(); import fedbalance.evidence.seedstats; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'pandas', 'scipy'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env).stdout
    assert out.strip() == "[]", out
    code = ("import sys; from fedbalance.evidence.seedstats import paired_interval; paired_interval([1.0, 2.0, 4.0]); "
            "print('scipy.stats' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env=env).stdout.strip() == "True"
