"""The workflow as a Snakemake module of a user's own workflow (the workflow catalog's standard usage,
.snakemake-workflow-catalog.yml): deployed into an empty folder that holds only the user's config and a
`workflow/Snakefile` with `module` + `use rule * from`, run from that folder to the tables, without
cloning or editing the workflow. Once from a local path, once with the README's `snakedeploy` command
from a git host at a tag (github.com redirected, through git's `insteadOf`, to a repository of this
tree, so that nothing leaves the machine).
"""

from __future__ import annotations

import re

import csv
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
TAG = "v0.0.0-test"
TARGETS = ["results/tables/Res_3_datasets.tex", "results/claims.md"]
# snakedeploy's template (snakedeploy/templates/use_module.smk.jinja), for a local path
MODULE_SNAKEFILE = """configfile: "config/config.yaml"


module fedbalance:
    snakefile:
        "{snakefile}"
    config:
        config


use rule * from fedbalance
"""


def write_shrunk_quick(path: Path) -> None:
    """config/quick.yaml cut to the loss comparison's CE and Ratio jobs at Γ = 10: 1 round, 4 small clients, 1 seed."""
    cfg = yaml.safe_load((REPO / "config" / "quick.yaml").read_text())
    cfg["seeds"] = [0]
    cfg["defaults"]["rounds"] = 1
    cfg["defaults"]["clients_per_round"] = 4
    cfg["defaults"]["partition"].update(num_clients=4, majority_samples=10)
    cfg["experiments"] = {"losses": {"datasets": ["mnist"], "losses": ["ce", "ratio"],
                                     "grid": {"g": {"key": "partition.gamma", "values": [10]}}}}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))


@pytest.fixture(scope="module")
def release(tmp_path_factory) -> Path:
    """A git repository of this tree's tracked files (as they are now), tagged TAG: what a release holds."""
    src = tmp_path_factory.mktemp("release") / "fedbalance"
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, text=True, check=True)
    for rel in filter(None, tracked.stdout.split("\0")):
        if (REPO / rel).is_symlink() or (REPO / rel).is_file():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, src / rel, follow_symlinks=False)
    git = ["git", "-c", "user.name=test", "-c", "user.email=test@example.org"]
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-qm", "release"], ["tag", TAG]):
        subprocess.run(git + args, cwd=src, check=True, capture_output=True)
    return src


def files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if ".git" not in p.parts}


def run_snakemake(study: Path, args: list[str], env: dict[str, str]) -> str:
    r = subprocess.run([sys.executable, "-m", "snakemake", *args, "--", *TARGETS], cwd=study, capture_output=True,
                       text=True, timeout=900, env=env)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    return out


def check_results(study: Path) -> None:
    """Both jobs ran with the user's config, and the table's cells are their numbers."""
    finals = {}
    for loss in ("ce", "ratio"):
        m = json.loads((study / "results" / "losses" / "mnist" / "g10" / loss / "seed0" / "metrics.json").read_text())
        assert m["config"]["rounds"] == 1 and m["config"]["partition"]["num_clients"] == 4  # quick.yaml: 16, 10
        finals[loss] = m["final"]
    with open(study / "results" / "tables" / "Res_3_datasets_vs_paper.csv", newline="") as fh:
        ours = {(r["metric"], r["row"]): r for r in csv.DictReader(fh) if r["n_seeds"] == "1"}
    assert set(ours) == {(metric, loss) for metric in ("acm", "auc") for loss in ("ce", "ratio")}
    for loss, final in finals.items():
        assert ours["acm", loss]["column"] == "10:1" and ours["acm", loss]["dataset"] == "mnist"
        assert float(ours["acm", loss]["ours_mean"]) == pytest.approx(100 * final["acc_minority"])
        assert float(ours["auc", loss]["ours_mean"]) == pytest.approx(final["auc_hard"])
    assert r"\begin{tabular}" in (study / "results" / "tables" / "Res_3_datasets.tex").read_text()
    claims = (study / "results" / "claims.md").read_text()
    assert ("| 1 | Ratio Loss has the best Ac.M in almost all cells of Res_3_datasets | paper reading | 1 | **too few seeds** "
            "| – | Ratio ahead of every other loss in 0/1 cells; mnist 10:1: Ratio - ce ") in claims


@pytest.mark.slow
def test_module_from_a_local_path(release, tmp_path):
    """`module ... snakefile: "<clone>/workflow/Snakefile"` from an empty folder with the user's own config: the
    clone's src/ and report captions are found from the module's own files, and nothing is written into it."""
    before = files(release)
    study = tmp_path / "my-study"
    write_shrunk_quick(study / "config" / "config.yaml")
    (study / "workflow").mkdir()
    (study / "workflow" / "Snakefile").write_text(MODULE_SNAKEFILE.format(snakefile=release / "workflow" / "Snakefile"))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = run_snakemake(study, ["--cores", "2"], env)
    check_results(study)
    assert f"{release}/src/fedbalance/presentation/tables.py" in out  # the module's own library planned the jobs
    assert files(release) == before


def readme_module_commands() -> list[str]:
    """The README's three module-deployment commands (Quick start): pip install, snakedeploy, snakemake."""
    block = README.read_text().split("**As a Snakemake module**")[1].split("```bash\n")[1].split("```")[0]
    return [line.strip() for line in block.splitlines() if line.strip()]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("snakedeploy", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
                    is None, reason="snakedeploy comes with the test extra on Python 3.11-3.12")
@pytest.mark.parametrize("ref", ["branch", "tag"])
def test_snakedeploy_from_a_git_host(release, tmp_path, ref):
    """The README's commands: `snakedeploy deploy-workflow https://github.com/OWNER/fedbalance my-study --branch main`
    (a repository without a release), or the same at a release's tag (`--tag TAG`, as the README says), writes
    `module ... github(..., path="workflow/Snakefile", branch="main")` (``tag=TAG``) and copies config/ and profiles/;
    then `cd my-study && snakemake ...`, the workflow fetched by Snakemake (no src/ on disk: the installed library;
    _common.py from the source cache), with no profile loaded behind the user's back (none is named)."""
    install, deploy, run = readme_module_commands()
    assert install.startswith('pip install "fedbalance @ git+https://github.com/OWNER/fedbalance@main"')
    assert deploy.endswith(" --branch main") and "`--tag vX.Y.Z`" in README.read_text()
    if ref == "tag":
        deploy = deploy.replace("--branch main", f"--tag {TAG}")
    home = tmp_path / "home"
    home.mkdir()
    gitconfig = home / "gitconfig"
    gitconfig.write_text(f'[url "{release}"]\n\tinsteadOf = https://github.com/owner/fedbalance\n')
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(GIT_CONFIG_GLOBAL=str(gitconfig), GIT_CONFIG_NOSYSTEM="1", XDG_CACHE_HOME=str(home / "cache"))
    # the installed library is this tree's build, not a release of TAG (tests/test_version.py checks the refusal)
    env["FEDBALANCE_ALLOW_VERSION_MISMATCH"] = "1"

    args = shlex.split(deploy.replace("OWNER", "owner"))
    assert args[:2] == ["snakedeploy", "deploy-workflow"] and args[3] == "my-study"
    args[0] = shutil.which("snakedeploy", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    r = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    study = tmp_path / "my-study"
    snakefile = (study / "workflow" / "Snakefile").read_text()
    pinned = 'branch="main"' if ref == "branch" else f'tag="{TAG}"'
    assert f'github("owner/fedbalance", path="workflow/Snakefile", {pinned})' in snakefile, snakefile
    assert "use rule * from fedbalance" in snakefile
    assert {"config.yaml", "quick.yaml", "mnist.yaml"} <= {p.name for p in (study / "config").iterdir()}
    assert {p.name for p in (study / "profiles").iterdir()} == {"local", "slurm"}

    cd, _, command = run.partition(" && ")
    assert cd == "cd my-study"
    argv = shlex.split(command)
    assert argv[:2] == ["snakemake", "--cores"] and argv[-2:] == ["--configfile", "config/quick.yaml"]
    write_shrunk_quick(study / "config" / "quick.yaml")  # the user's edit of their copy
    out = run_snakemake(study, argv[1:], env)
    assert "Cloning github.com/owner/fedbalance" in out
    assert "Using workflow specific profile" not in out  # a copied profiles/default would be loaded here
    import fedbalance

    assert f"{Path(fedbalance.__file__).parent}/presentation/tables.py" in out  # the installed library
    assert not (study / "src").exists() and not (study / "Snakefile").exists()
    check_results(study)


@pytest.mark.slow
def test_module_with_the_example_plugin_from_config_alone(release, tmp_path):
    """The same deployment with the example plug-in (examples/fedbalance-cb) installed beside the library and added by
    the user's config alone (`losses: [ce, ratio, cb]`, `ema` among the estimators): its jobs run, record the plug-in's
    package and version, and are rows of the tables, the claims and `compare`."""
    from test_plugins import install_example

    site = install_example(tmp_path / "site")
    study = tmp_path / "my-study"
    config = study / "config" / "config.yaml"
    write_shrunk_quick(config)
    cfg = yaml.safe_load(config.read_text())
    cfg["experiments"]["losses"]["losses"].append("cb")
    cfg["defaults"]["monitor"]["estimators"].append("ema")
    config.write_text(yaml.safe_dump(cfg, sort_keys=False))
    (study / "workflow").mkdir()
    (study / "workflow" / "Snakefile").write_text(MODULE_SNAKEFILE.format(snakefile=release / "workflow" / "Snakefile"))
    env = {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, "PYTHONPATH": str(site)}
    run_snakemake(study, ["--cores", "2"], env)
    m = json.loads((study / "results" / "losses" / "mnist" / "g10" / "cb" / "seed0" / "metrics.json").read_text())
    assert m["config"]["plugins"]["loss"]["package"] == "fedbalance-cb" and m["versions"]["fedbalance-cb"] == "0.1.0"
    with open(study / "results" / "tables" / "Res_3_datasets_vs_paper.csv", newline="") as fh:
        ours = {(r["metric"], r["row"]): r for r in csv.DictReader(fh) if r["n_seeds"] == "1"}
    assert set(ours) == {(metric, loss) for metric in ("acm", "auc") for loss in ("ce", "ratio", "cb")}
    assert float(ours["acm", "cb"]["ours_mean"]) == pytest.approx(100 * m["final"]["acc_minority"])
    assert r"\texttt{cb}" in (study / "results" / "tables" / "Res_3_datasets.tex").read_text()
    rounds = (study / "results" / "losses" / "mnist" / "g10" / "ratio" / "seed0" / "rounds.csv").read_text()
    assert "cs_ema" in rounds.splitlines()[0]
    claims = (study / "results" / "claims.md").read_text()
    assert "| 1 | Ratio Loss has the best Ac.M in almost all cells of Res_3_datasets |" in claims
    r = subprocess.run([sys.executable, "-m", "fedbalance", "compare", "--ours", "results", "--reference", "results",
                        "--experiment", "losses"], cwd=study, capture_output=True, text=True, timeout=300,
                       env={**env, "PYTHONPATH": f"{site}{os.pathsep}{REPO / 'src'}"})
    assert r.returncode == 0 and re.search(r"\|\s*losses\s*\|\s*mnist\s*\|\s*g10\s*\|\s*cb\s*\|\s*acc_minority\s*\|", r.stdout), r.stdout + r.stderr
