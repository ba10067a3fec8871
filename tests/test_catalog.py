"""The Snakemake workflow catalog's checks (https://github.com/snakemake/snakemake-workflow-catalog,
scripts/generate-catalog.py, and the page that index.html builds from its record), run without network on
the committed tree as a release holds it: `git archive HEAD` extracted into a temporary folder.

The generator skips a repository without `workflow/Snakefile` (or a root `Snakefile` when there is no
`workflow/` folder) or whose `rules/` has no `.smk` file; lists it under "standardized usage" when
`.snakemake-workflow-catalog.yml` parses and `config/README.md` exists; and records as failed QC a
`snakemake --lint` that exits non-zero and a `snakefmt --check` of `workflow/Snakefile` and
`workflow/rules/*.smk` that does. Its page shows `snakedeploy deploy-workflow`, then config/README.md
("configure workflow"), then one command `snakemake --cores all <method flags> <mandatory flags>` per
deployment method set true, then `snakemake --report report.zip`; it does not show mandatory-flags.desc.

Lint and formatting run twice: in the catalog's own environment (FEDBALANCE_CATALOG_VENV, a venv holding only the
generator's current pins of Snakemake and snakefmt, .ci/catalog-requirements.txt, which .ci/run makes), and here
with this project's Snakemake but every dependency of the project that Snakemake does not bring made unimportable
(numpy, pandas, torch, ...): the Snakefile and rules must parse with Snakemake alone, the library's numpy, pandas and
torch code being imported only when the DAG is built or a job runs. The generator's former pins (snakemake 8.25.5,
snakefmt 0.10.2, environment.yml until 2025) would fail both QC columns (Snakemake 8 stops at the Snakefile's
min_version("9.0"); snakefmt 0.10.2 cannot parse the `resource_scopes:` directive of workflow/rules/common.smk).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import needs_ci_tool

REPO = Path(__file__).resolve().parents[1]
# index.html: the flags of each deployment method in the run command the page shows
METHOD_FLAGS = {"conda": "--use-conda", "singularity": "--use-singularity",
                "singularity+conda": "--use-conda --use-singularity"}
INSTALL = 'pip install "fedbalance @ git+https://github.com/OWNER/fedbalance@TAG"'


class Skipped(Exception):
    """The generator would leave the repository out of the catalog, for this reason."""


def catalog_record(root: Path) -> dict:
    """What generate-catalog.py records of the repository extracted at ``root``, before lint and formatting."""
    workflow = root / "workflow"
    if not workflow.exists():
        workflow = root
    rules, snakefile = workflow / "rules", workflow / "Snakefile"
    if not snakefile.exists():
        raise Skipped("of missing Snakefile")
    if rules.is_dir() and not any(f.suffix == ".smk" for f in rules.iterdir() if f.is_file()):
        raise Skipped("rule modules are not using .smk extension")
    settings_file = root / ".snakemake-workflow-catalog.yml"
    settings = yaml.safe_load(settings_file.read_text()) if settings_file.exists() else None
    readme = root / "config" / "README.md"
    config_readme = readme.read_text() if readme.exists() else None
    if settings is None or config_readme is None:
        return {"standardized": False, "snakefiles": [snakefile, *rules.glob("*.smk")]}
    usage = settings.get("usage", {})
    return {"standardized": True, "mandatory_flags": usage.get("mandatory-flags"), "report": usage.get("report", False),
            "software_stack_deployment": usage.get("software-stack-deployment", {}), "config_readme": config_readme,
            "snakefiles": [snakefile, *rules.glob("*.smk")]}


def run_commands(record: dict) -> list[str]:
    """The page's "run workflow" commands (index.html): one per deployment method set true."""
    flags = (record["mandatory_flags"] or {}).get("flags") or ""
    return [f"snakemake --cores all {METHOD_FLAGS[m]} {flags}"
            for m, on in record["software_stack_deployment"].items() if on]


@pytest.fixture(scope="module")
def release(tmp_path_factory) -> Path:
    """The committed tree, HEAD, as `git archive` exports it (a GitHub release tarball holds the same)."""
    tar = subprocess.run(["git", "archive", "--format=tar", "HEAD"], cwd=REPO, capture_output=True, check=True).stdout
    root = tmp_path_factory.mktemp("archive") / "fedbalance"
    root.mkdir()
    subprocess.run(["tar", "-x", "-C", str(root)], input=tar, capture_output=True, check=True)
    return root


def test_the_old_layout_is_skipped(tmp_path: Path) -> None:
    """The check can fail: a root Snakefile beside a workflow/ without one (this project's former layout) is skipped."""
    (tmp_path / "workflow" / "rules").mkdir(parents=True)
    (tmp_path / "workflow" / "rules" / "common.smk").write_text("")
    (tmp_path / "Snakefile").write_text("")
    with pytest.raises(Skipped, match="of missing Snakefile"):
        catalog_record(tmp_path)


def test_the_catalog_lists_the_release_with_its_standardized_usage(release: Path) -> None:
    record = catalog_record(release)
    assert record["standardized"], "config/README.md or .snakemake-workflow-catalog.yml is missing"
    assert run_commands(record) == ["snakemake --cores all --use-conda --configfile config/quick.yaml"]
    assert record["report"] is True
    # the library's install is on the page: in config/README.md ("configure workflow"), before the run
    readme = record["config_readme"]
    assert INSTALL in readme and readme.index(INSTALL) < readme.index("snakemake --cores all --use-conda")
    assert "snakemake --report report.zip --configfile config/quick.yaml" in readme
    # the settings file holds the keys the generator reads, and nothing it would ignore
    settings = yaml.safe_load((release / ".snakemake-workflow-catalog.yml").read_text())
    assert set(settings) == {"usage"} and set(settings["usage"]) == {"mandatory-flags", "software-stack-deployment",
                                                                      "report"}
    assert set(settings["usage"]["software-stack-deployment"]) == set(METHOD_FLAGS)
    assert INSTALL in " ".join(settings["usage"]["mandatory-flags"]["desc"].split())


def test_the_release_has_the_catalogs_layout(release: Path) -> None:
    """workflow/ holds the Snakefile, rules, envs, report, scripts and schemas as real files (no link, which a
    host or an extraction may not keep); nothing at the top level shadows workflow/Snakefile for Snakemake, and
    every conda environment and caption a rule names lies where Snakemake looks (relative to the rule's file)."""
    wf = release / "workflow"
    assert (wf / "Snakefile").is_file()
    for folder in ("rules", "envs", "report", "scripts", "schemas"):
        assert (wf / folder).is_dir() and not (wf / folder).is_symlink(), folder
        links = [str(p.relative_to(release)) for p in (wf / folder).rglob("*") if p.is_symlink()]
        assert links == [], links
    assert (wf / "schemas" / "config.schema.yaml").read_bytes() == (
        release / "src" / "fedbalance" / "config.schema.yaml").read_bytes()
    assert (release / "config" / "README.md").is_file() and (release / "config" / "config.yaml").is_file()
    # Snakemake tries Snakefile and snakefile before workflow/Snakefile
    assert not any((release / name).exists() for name in ("Snakefile", "snakefile", "envs", "report"))
    named = []
    for smk in (wf / "rules").glob("*.smk"):
        text = smk.read_text()
        named += [(smk, p) for p in re.findall(r'conda:\n\s+"([^"]+)"', text)]
        named += [(smk, p) for p in re.findall(r'caption="([^"]+)"', text)]
    assert len(named) > 10
    missing = [f"{smk.name}: {p}" for smk, p in named if not (smk.parent / p).is_file()]
    assert missing == [], missing


PINS = REPO / ".ci" / "catalog-requirements.txt"
LINT_OK = "Congratulations, your workflow is in a good condition!"
# Makes the given top-level modules unimportable and invisible to plug-in discovery (Snakemake finds its plug-ins
# with pkgutil.iter_modules), then runs the command line of the module named after them
BLOCKED_RUN = """
import importlib.abc, pkgutil, runpy, sys
blocked, module = set(sys.argv[1].split(",")), sys.argv[2]

class Blocked(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in blocked:
            raise ModuleNotFoundError(f"No module named {name!r} (blocked by tests/test_catalog.py)", name=name)

_iter_modules = pkgutil.iter_modules
pkgutil.iter_modules = lambda *a, **k: (m for m in _iter_modules(*a, **k) if m.name not in blocked)
sys.meta_path.insert(0, Blocked())
sys.argv = [module, *sys.argv[3:]]
runpy.run_module(module, run_name="__main__")
"""
# Run by a python: the distributions installed there that a project dependency names, and the closure of what
# snakemake and snakefmt require there (distribution names, normalised)
ENV_REPORT = """
import importlib.metadata as md, json, re, sys
norm = lambda n: re.sub(r"[-_.]+", "-", n).lower()
wanted = [norm(n) for n in sys.argv[1].split(",")]
installed = {norm(d.metadata["Name"]): d.version for d in md.distributions()}
closure, todo = set(), ["snakemake", "snakefmt"]
while todo:
    name = todo.pop()
    if name in closure or name not in installed:
        continue
    closure.add(name)
    for req in md.requires(name) or []:
        if "extra ==" not in req:
            todo.append(norm(re.split(r"[ ;<>=!~\\[(]", req, maxsplit=1)[0]))
print(json.dumps({"installed": {n: installed[n] for n in wanted if n in installed}, "closure": sorted(closure),
                  "versions": {n: installed.get(n) for n in ("snakemake", "snakefmt")}}))
"""


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def project_dependencies() -> list[str]:
    """The distribution names of pyproject.toml's [project] dependencies."""
    import tomllib

    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    return [_norm(re.split(r"[ ;<>=!~\[]", d, maxsplit=1)[0]) for d in deps]


def environment_report(python: str | Path) -> dict:
    import json

    r = subprocess.run([str(python), "-c", ENV_REPORT, ",".join(project_dependencies())], capture_output=True,
                       text=True, timeout=120, check=True)
    return json.loads(r.stdout)


def pins() -> dict[str, str]:
    """.ci/catalog-requirements.txt: distribution -> its version specifier."""
    out = {}
    for line in PINS.read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, spec = re.match(r"([A-Za-z0-9_.-]+)\s*(.*)", line).groups()
            out[_norm(name)] = spec
    return out


def blocked_modules() -> list[str]:
    """The top-level modules of every distribution installed here that neither Snakemake nor snakefmt needs (numpy,
    pandas, torch, the SLURM plug-in, pytest, ...): what a venv holding only those two lacks. fedbalance is not among
    them: the release's own src/ is on disk, as in the catalog's checkout."""
    from importlib.metadata import packages_distributions

    closure = set(environment_report(sys.executable)["closure"])
    modules = {m for m, dists in packages_distributions().items() if not {_norm(d) for d in dists} & closure}
    return sorted(m for m in modules if m.isidentifier() and m != "fedbalance" and m not in sys.stdlib_module_names)


def test_the_blocked_modules_are_what_the_catalogs_environment_lacks() -> None:
    """What the lint below hides: numpy, pandas and torch among the project's dependencies, nothing Snakemake needs
    (yaml, jsonschema, jinja2)."""
    blocked = blocked_modules()
    assert {"numpy", "pandas", "torch", "matplotlib", "scipy", "sklearn", "mlxtend"} <= set(blocked), blocked
    assert not {"yaml", "jsonschema", "jinja2", "snakemake", "snakefmt"} & set(blocked), blocked


def test_blocking_a_module_makes_it_unimportable() -> None:
    """The check can fail: a module the blocker names cannot be imported under it."""
    r = subprocess.run([sys.executable, "-c", BLOCKED_RUN, "numpy", "json.tool", "--help"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    code = BLOCKED_RUN.replace("runpy.run_module(module, run_name=\"__main__\")", "import numpy")
    r = subprocess.run([sys.executable, "-c", code, "numpy", "x"], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "blocked by tests/test_catalog.py" in r.stderr, r.stderr


def test_the_catalogs_lint_passes_with_snakemake_alone(release: Path) -> None:
    """`snakemake --lint` in the release's root, as the generator runs it (a non-zero exit fails its QC), with every
    dependency of the project that Snakemake does not bring unimportable: what the catalog's environment holds."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run([sys.executable, "-c", BLOCKED_RUN, ",".join(blocked_modules()), "snakemake", "--lint"],
                       cwd=release, capture_output=True, text=True, timeout=600, env=env)
    out = r.stdout + r.stderr
    assert r.returncode == 0 and "Lints for" not in out, out[-4000:]
    assert LINT_OK in out


def test_the_catalogs_formatting_check_passes(release: Path) -> None:
    """`snakefmt --check -v workflow/Snakefile workflow/rules/*.smk` in the release's root (the generator's files),
    with this project's snakefmt."""
    snakefiles = [str(p.relative_to(release)) for p in catalog_record(release)["snakefiles"]]
    assert snakefiles[0] == "workflow/Snakefile" and len(snakefiles) >= 7
    r = subprocess.run([sys.executable, "-m", "snakefmt", "--check", "-v", *snakefiles], cwd=release,
                       capture_output=True, text=True, timeout=300)
    print(r.stdout + r.stderr)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]


@pytest.fixture(scope="module")
def catalog_python() -> Path:
    """The python of the catalog's environment (FEDBALANCE_CATALOG_VENV; .ci/run makes it from
    .ci/catalog-requirements.txt), checked: Snakemake and snakefmt within the pins, no dependency of the project but
    those they bring."""
    venv = os.environ.get("FEDBALANCE_CATALOG_VENV")
    needs_ci_tool(None if venv else "FEDBALANCE_CATALOG_VENV is not set: make a venv with `pip install -r "
                  ".ci/catalog-requirements.txt` and name it there (.ci/run does)")
    python = Path(venv) / "bin" / "python"
    report = environment_report(python)
    from packaging.specifiers import SpecifierSet

    for name, spec in pins().items():
        version = report["versions"][name]
        assert version is not None and version in SpecifierSet(spec), (name, version, spec)
    extra = sorted(set(report["installed"]) - set(report["closure"]))
    assert extra == [], f"the catalog's environment holds dependencies of the project: {extra}"
    assert "numpy" not in report["installed"] and "torch" not in report["installed"]
    return python


def test_the_pins_are_the_generators_current_ones() -> None:
    """.ci/catalog-requirements.txt pins what the generator's pixi.toml asks (2025): Snakemake 9.17.2 or later
    9.x, snakefmt 0.11.5 or later 0.11.x."""
    assert pins() == {"snakemake": ">=9.17.2,<10", "snakefmt": ">=0.11.5,<0.12"}


def test_the_catalogs_lint_passes_in_its_environment(release: Path, catalog_python: Path) -> None:
    """`snakemake --lint` in the release's root with the catalog environment's Snakemake: no numpy, pandas, torch."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{catalog_python.parent}{os.pathsep}{env.get('PATH', '')}"
    r = subprocess.run([str(catalog_python.parent / "snakemake"), "--lint"], cwd=release, capture_output=True,
                       text=True, timeout=600, env=env)
    out = r.stdout + r.stderr
    assert r.returncode == 0 and "Lints for" not in out, out[-4000:]
    assert LINT_OK in out


def test_the_catalogs_formatting_check_passes_in_its_environment(release: Path, catalog_python: Path) -> None:
    """`snakefmt --check -v workflow/Snakefile workflow/rules/*.smk` with the catalog environment's snakefmt."""
    snakefiles = [str(p.relative_to(release)) for p in catalog_record(release)["snakefiles"]]
    r = subprocess.run([str(catalog_python.parent / "snakefmt"), "--check", "-v", *snakefiles], cwd=release,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]


def test_a_conda_job_of_a_fetched_module_imports_the_installed_library(tmp_path: Path) -> None:
    """Why `conda: true` holds for a module fetched from GitHub (no src/ on disk): a --use-conda job's python
    lacks fedbalance, but Snakemake's script preamble appends Snakemake's own search path
    (snakemake.common.get_snakemake_searchpaths) and the script's folder, so `import _common` then
    `import fedbalance` finds the library installed beside Snakemake. The job's python is stood for by this
    one without its site-packages (-S)."""
    import fedbalance
    from snakemake.common import get_snakemake_searchpaths

    cache = tmp_path / "sourcecache" / "scripts"  # as the source cache holds it: no src/ two folders up
    cache.mkdir(parents=True)
    shutil.copy2(REPO / "workflow" / "scripts" / "_common.py", cache / "_common.py")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}

    def job(searchpaths: list[str]) -> subprocess.CompletedProcess:
        code = f"import sys; sys.path.extend({searchpaths!r}); import _common, fedbalance; print(fedbalance.__file__)"
        return subprocess.run([sys.executable, "-S", "-c", code], cwd=tmp_path, capture_output=True, text=True,
                              env=env, timeout=120)

    bare = job([str(cache)])
    assert bare.returncode != 0 and "No module named 'fedbalance'" in bare.stderr, bare.stdout + bare.stderr
    r = job([*get_snakemake_searchpaths(), str(cache)])
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip() == fedbalance.__file__
