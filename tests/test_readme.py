"""Every command the README shows, run as a new user would where CI can run it.

``test_every_readme_command_is_covered`` fails when the README gains a command that no test here (or in
test_workflow.py) runs. The quick DAG itself (the README's main command) and its HTML report are run
end to end by ``test_workflow.py::test_quick_dag_end_to_end``; the test command is what CI runs.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import write_job

REPO = Path(__file__).resolve().parents[1]
SNAKEFILE = REPO / "workflow" / "Snakefile"
README = REPO / "README.md"

# prefix of a README command -> where it is tested
COVERED = {
    "pip install -e .": "CI (.ci/run installs the checkout so) + test_workflow::test_quick_dag_end_to_end",
    "snakemake --cores all --configfile config/quick.yaml": "test_workflow::test_quick_dag_end_to_end",
    "pip install -e '.[test]' && python -m pytest -q": "CI (.ci/run runs exactly this, in a fresh venv)",
    "python -m pytest -q -m slow": "CI (.ci/run runs it after the fast tier) + test_the_two_test_tiers",
    "python -m pytest -q": "CI (.ci/run runs this, with --durations, in a fresh venv) + test_the_two_test_tiers",
    "python3 -m venv .venv && . .venv/bin/activate": "CI (.ci/run makes its venv so: python3 -m venv, then activates it)",
    "pip install torch torchvision --index-url https://download.pytorch.org/whl/cpu":
        "not run by a test: PyTorch's index is not reachable from CI; test_cpu_route_keeps_a_cpu_torch checks that "
        "pyproject.toml's torch pin admits a +cpu build, and docs/usage.md ('Install') has the route measured",
    'pip install "fedbalance @ git+https://github.com/OWNER/fedbalance@main" snakedeploy':
        "test_non_editable_install_renders_tables (the package, not editable) + test_module (snakedeploy)",
    "snakedeploy deploy-workflow https://github.com/OWNER/fedbalance my-study --branch main":
        "test_module::test_snakedeploy_from_a_git_host (--branch main, and --tag for a release)",
    "cd my-study && snakemake --cores all --configfile config/quick.yaml": "test_module::test_snakedeploy_from_a_git_host",
    "snakemake --workflow-profile profiles/local --use-conda --configfile config/config.yaml":
        "test_full_protocol_command_plans_every_job",
    "snakemake --workflow-profile profiles/slurm": "test_profiles::test_readme_slurm_commands_plan_the_train_jobs",
    "snakemake --cores all --configfile config/mnist.yaml": "test_mnist_command_plans",
    "python -m fedbalance cost --config config/config.yaml": "test_cost_command_prints_a_table",
    "snakemake --report results/report.html": "test_report_dependency + test_workflow::test_quick_dag_end_to_end",
    "python -m fedbalance train --config config/quick.yaml": "test_train_command",
    "snakemake --cores all --configfile config/mnist.yaml --config reference_dir=reference/mnist":
        "test_reference::test_render_from_the_reference_set",
    "python -m fedbalance compare --ours results --reference reference/mnist": "test_reference::test_compare_cli",
    "snakemake --cores 2 --configfile config/mnist.yaml --config results_dir=RUNS --":
        "test_reference_batch_command_plans + test_profiles::test_the_slurm_profile_plans_a_batch_of_the_sets_missing_jobs",
    "REFERENCE=<checkout>/reference/mnist scripts/evidence_slots.sh 2 RUNS":
        "test_evidence_slots (stand-ins: order, slots, tries, STOP, JOBS) + "
        "test_evidence_slots::test_the_readme_command_trains_the_first_jobs_of_the_order_with_the_workflow",
    "python -m fedbalance reference collect RUNS --into reference/mnist":
        "test_refset (collect RUNS --into SET) + test_refset_workflow (a workflow's jobs collected)",
    "scripts/collect_render.sh RUNS": "test_collect_render (stand-ins: collect, the documented render, docs, check)",
}


USAGE = REPO / "docs" / "usage.md"  # the README's detail: its bash blocks are the README's commands too


def readme_commands() -> list[str]:
    """The commands of the README's bash blocks and of docs/usage.md's (where the README sends the detail):
    continuation lines joined, comments dropped."""
    cmds = []
    for block in re.findall(r"```bash\n(.*?)```", README.read_text() + USAGE.read_text(), re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"\s+#.*$", "", line).strip()
            if line and not line.startswith("#"):
                cmds.append(re.sub(r"\s+", " ", line))
    return cmds


def _command(prefix: str) -> str:
    return next(c for c in readme_commands() if c.startswith(prefix))


def test_every_readme_command_is_covered() -> None:
    cmds = readme_commands()
    assert len(cmds) >= len(COVERED)
    for c in cmds:
        assert any(c.startswith(p) for p in COVERED), f"README command without a test: {c}"
    for p in COVERED:
        assert any(c.startswith(p) for c in cmds), f"COVERED names a command the README no longer shows: {p}"


@pytest.mark.skipif(shutil.which("snakemake") is None, reason="snakemake is not installed")
@pytest.mark.slow
def test_full_protocol_command_plans_every_job(tmp_path: Path) -> None:
    """The full-paper command, as a dry run in a scratch directory (--use-conda only where conda exists): the
    profile it names, profiles/local, is the only one loaded, and it plans every job of config/config.yaml — each
    trained once (a twin copied, a derived job derived from a trained source), each branch source's kept rounds, a
    partition per trained setting and seed, one step per table and figure (one DAG for both checks: it is the tier's
    slowest plan)."""
    from fedbalance.jobs.config import jobs, load_config, twins
    from fedbalance.jobs.reuse import branches, derived
    from test_workflow import assert_one_job_per_table_and_figure, job_stats

    args = shlex.split(_command("snakemake --workflow-profile profiles/local --use-conda"))
    if shutil.which("conda") is None:
        args.remove("--use-conda")
    r = subprocess.run(args + ["-n", "--quiet", "rules", "-s", str(SNAKEFILE), "--directory", str(tmp_path)],
                       cwd=REPO, capture_output=True, text=True, timeout=900)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    assert re.findall(r"^Using workflow specific profile (\S+)", out, re.M) == ["profiles/local"], out[:3000]
    cfg = load_config(REPO / "config" / "config.yaml")
    expected = jobs(cfg)
    counts = job_stats(out)
    twin_of, derived_of = twins(cfg), derived(cfg)
    # a twin is trained nowhere else: its source is trained, not itself a twin; a derived job's source is trained
    assert all(src not in twin_of for src in twin_of.values())
    assert all(src not in twin_of and src not in derived_of for src in derived_of.values())
    # 2565 of the paper (centralised with both readings of the Ratio Loss) + 350 of beyond + 36 of ratio_stability + 18 of
    # readings (docs/deviations.md: RedGrape's and the CLIMB authors' reading, MNIST at 3 Γ, seeds 0-2)
    assert len(expected) == 2969
    assert counts["train"] + counts["reuse"] + counts["derive"] == len(expected)
    assert counts["reuse"] == len(twin_of) > 0 and counts["derive"] == len(derived_of) > 0
    assert len(branches(cfg)) == 40  # early's S and M, 4 datasets x 5 seeds: trained (rule train) after their E
    # each E trains to the round it shares with S, then to M's, in a job of its own (rule keep), then to its end
    assert counts["keep"] == len(set(branches(cfg).values())) == 40
    partitions = {(j.experiment, j.dataset, j.setting, j.seed) for j in expected if j not in twin_of and j not in derived_of}
    assert counts["partition"] == len(partitions)
    assert counts["prepare_data"] == len(cfg["datasets"])
    for rule in ("aggregate", "claims", "paper_tables", "fidelity", "reproduction", "all"):
        assert counts[rule] == 1
    assert_one_job_per_table_and_figure(counts)
    # every experiment family is planned
    assert {j.experiment for j in expected} == set(cfg["experiments"])


@pytest.mark.skipif(shutil.which("snakemake") is None, reason="snakemake is not installed")
@pytest.mark.slow
def test_mnist_command_plans(tmp_path: Path) -> None:
    """The MNIST-only command, as a dry run: every job is an MNIST job, the loss comparison has ratio_rel."""
    from fedbalance.jobs.config import jobs, load_config, twins
    from fedbalance.jobs.reuse import branches, derived

    args = shlex.split(_command("snakemake --cores all --configfile config/mnist.yaml"))
    r = subprocess.run(args + ["-n", "--quiet", "rules", "-s", str(SNAKEFILE), "--directory", str(tmp_path)],
                       cwd=REPO, capture_output=True, text=True, timeout=900)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    cfg = load_config(REPO / "config" / "mnist.yaml")
    planned = jobs(cfg)
    trained = int(re.search(r"^train\s+(\d+)$", out, re.M).group(1))
    copied = int(re.search(r"^reuse\s+(\d+)$", out, re.M).group(1))
    made = int(re.search(r"^derive\s+(\d+)$", out, re.M).group(1))
    tw, der, br = twins(cfg), derived(cfg), branches(cfg)
    assert (trained, copied, made) == (len(planned) - len(tw) - len(der), len(tw), len(der))
    assert len(br) == 10 and {j.experiment for j in br} == {"early"}  # S and M x 5 seeds, trained after their E
    assert {j.experiment for j in der} == {"t_ra"} and len(der) == 50  # 10 of the 11 thresholds x 5 seeds
    assert {j.dataset for j in planned} == {"mnist"} and any(j.loss == "ratio_rel" for j in planned)


@pytest.mark.skipif(shutil.which("snakemake") is None, reason="snakemake is not installed")
@pytest.mark.slow
def test_reference_batch_command_plans(tmp_path: Path) -> None:
    """The README's command that trains the reference set's next batch, as a dry run with RUNS a folder of its own:
    the 40 jobs `reference missing` lists first, each planned (trained, derived from a planned source, or its source's
    kept round first)."""
    command = _command("snakemake --cores 2 --configfile config/mnist.yaml --config results_dir=RUNS --")
    inner = re.search(r"\$\((.*)\)", command).group(1).replace("RUNS", str(tmp_path / "runs"))
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    listed = subprocess.run(inner, shell=True, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    targets = listed.stdout.split()
    assert inner.startswith("python -m fedbalance reference missing --reference reference/mnist") and "--next-step" in inner
    # one step of the evidence order: the first the set lacks a job of, its first 40 jobs
    step = listed.stderr.splitlines()[-1].removeprefix("next step: ")
    whole = subprocess.run(inner.split(" --next-step")[0].split(" | ")[0] + f" --plan '{step}'", shell=True, cwd=REPO,
                           env=env, capture_output=True, text=True, timeout=600).stdout.split()
    assert 0 < len(targets) <= 40 and targets == whole[:40], (step, targets[:3], whole[:3])
    args = shlex.split(command.split(" -- ")[0].replace("RUNS", str(tmp_path / "runs")))
    r = subprocess.run([*args, "-n", "--", *targets], cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    planned = set(re.findall(r"output: (\S+?),", out))
    assert set(targets) <= planned, sorted(set(targets) - planned)[:3]


@pytest.mark.slow
def test_cost_command_prints_a_table(tmp_path: Path) -> None:
    """The README's cost command, with a stored calibration so it takes seconds: one row per experiment and a total."""
    from fedbalance.jobs.config import load_config
    from fedbalance.jobs.cost import Calibration, save_calibration, study_work

    cfg = load_config(REPO / "config" / "config.yaml")
    work = study_work(cfg)
    probes = {w.shape.model_key: {"batch": 32, "step_s": 0.01, "forward_s": 0.0} for w in work}
    cal = tmp_path / "cal.json"
    save_calibration(Calibration(device="test", device_type="cpu", threads=1, copies=1, startup_s=1.0, probes=probes), cal)
    args = shlex.split(_command("python -m fedbalance cost --config config/config.yaml"))
    args[0] = sys.executable
    r = subprocess.run(args + ["--calibration", str(cal)], cwd=REPO, capture_output=True, text=True, timeout=900,
                       env={**os.environ, "PYTHONPATH": str(REPO / "src")})
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    families = r.stdout.split("\n\n")[0]  # the first table: one row per experiment (then one per model and input)
    rows = {line.split()[0] for line in families.splitlines() if line and not line.startswith(("-", "experiment", "device"))}
    # a row per experiment that trains a job (t_ra's are all copied or derived: study_work leaves them out)
    assert rows == {w.job.experiment for w in work} | {"total"}
    assert "t_ra" not in rows and set(cfg["experiments"]) - rows == {"t_ra"}


def test_cpu_route_keeps_a_cpu_torch() -> None:
    """The README's CPU route installs PyTorch's CPU build (a `+cpu` local version) before `pip install -e .`: the
    project's torch and torchvision requirements admit the CPU builds of their versions, so pip keeps them."""
    import tomllib

    from packaging.requirements import Requirement
    from packaging.version import Version

    deps = {Requirement(d).name: Requirement(d) for d in
            tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]}
    upper = {"torch": "2.14.1", "torchvision": "0.29.1"}  # the newest CPU builds the pins allow, as PyTorch names them
    for name, v in upper.items():
        assert deps[name].specifier.contains(Version(f"{v}+cpu")), (name, deps[name])
    assert _command("pip install torch torchvision --index-url").endswith("https://download.pytorch.org/whl/cpu")
    steps = readme_commands()
    assert steps.index(_command("pip install torch torchvision")) < steps.index("pip install -e .")


def test_report_dependency() -> None:
    """`snakemake --report` needs pygments: it is a declared dependency, so the README's install brings it."""
    import tomllib

    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    assert any(re.match(r"pygments\b", d, re.I) for d in deps), deps
    import pygments  # noqa: F401  (the test environment is installed from pyproject.toml)


@pytest.mark.slow
def test_train_command(tmp_path: Path) -> None:
    """The README's one-job command, verbatim but for --out, from the repository root."""
    args = shlex.split(_command("python -m fedbalance train"))
    out = tmp_path / "job"
    args[args.index("--out") + 1] = str(out)
    args[0] = sys.executable
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    r = subprocess.run(args + ["--threads", "1"], cwd=REPO, capture_output=True, text=True, timeout=1800, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    m = json.loads((out / "metrics.json").read_text())
    assert m["job"] == {"experiment": "losses", "dataset": "mnist", "setting": "g10", "loss": "ratio", "seed": 0}
    assert 0.0 <= m["final"]["acc"] <= 1.0 and (out / "rounds.csv").is_file()


@pytest.mark.slow
def test_non_editable_install_renders_tables(tmp_path: Path) -> None:
    """`pip install .` (not editable) of a copy of the tracked files, then tables written from another directory:
    the LaTeX templates travel with the package. The wheel is built without build isolation (no network) by
    this environment's setuptools, which the test extra brings (>= 70.1: bdist_wheel built in), never by
    whatever the base interpreter holds; it is installed into a folder of its own, put first on the path."""
    src = tmp_path / "clone"
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, text=True, check=True)
    for rel in filter(None, tracked.stdout.split("\0")):
        if (REPO / rel).is_file():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, src / rel)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    dist, site = tmp_path / "dist", tmp_path / "site"

    def pip(*args: str) -> None:
        r = subprocess.run([sys.executable, "-m", "pip", "-q", *args], capture_output=True, text=True, timeout=900,
                           env=env, cwd=tmp_path)
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]

    pip("wheel", "--no-deps", "--no-build-isolation", "--wheel-dir", str(dist), str(src))
    (wheel,) = dist.glob("fedbalance-*.whl")
    pip("install", "--no-deps", "--target", str(site), str(wheel))
    shutil.rmtree(src)  # nothing of the source tree is left to fall back on
    env["PYTHONPATH"] = str(site)

    jobs = tmp_path / "res"
    from fedbalance.common.records import Job

    for seed, acm in ((0, 0.4), (1, 0.5)):
        write_job(jobs, Job("losses", "mnist", "g10", "ce", seed), acm=acm)
    work = tmp_path / "elsewhere"
    work.mkdir()
    script = (
        "import fedbalance, fedbalance.presentation.report as t\n"
        "from fedbalance.jobs.aggregate import collect\n"
        f"final, rounds = collect({str(jobs)!r})\n"
        "t.write_report(final, rounds, 'tables', summary_dir='.')\n"
        "print(fedbalance.__file__)\n"
    )
    r = subprocess.run([sys.executable, "-c", script], cwd=work, capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    assert Path(r.stdout.strip()).resolve().is_relative_to(site.resolve()), r.stdout  # the installed copy ran
    tex = (work / "tables" / "Res_3_datasets.tex").read_text()
    assert r"\begin{tabular}" in tex and "45.00" in tex  # CE Ac.M at 10:1: mean of 40 and 50
    assert "| **" in (work / "claims.md").read_text() and (work / "paper_tables.tex").is_file()
