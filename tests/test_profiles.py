"""The SLURM profile as the README uses it: what Snakemake makes of the README's two commands
(CPU-only and GPU cluster), and what the training jobs then request.

The commands are read from the README's "Running on SLURM" section, so the README cannot drift
from what is tested. `snakemake.cli.parse_args` gives the settings Snakemake will run with, after
merging the profile(s) and the command line.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fedbalance.jobs.config import jobs, load_config, twins
from fedbalance.jobs.reuse import derived

REPO = Path(__file__).resolve().parents[1]
SNAKEFILE = REPO / "workflow" / "Snakefile"
QUICK = REPO / "config" / "quick.yaml"

pytest.importorskip("snakemake_executor_plugin_slurm", reason="the test extra brings snakemake-executor-plugin-slurm")


def readme_commands() -> dict[str, list[str]]:
    """The README's SLURM commands: {"cpu": argv, "gpu": argv}, without the leading `snakemake`."""
    text = (REPO / "README.md").read_text()
    section = text[text.index("## Running on SLURM"):]
    section = section[: section.index("\n## ", 3)]
    out = {}
    for kind, marker in (("cpu", "# CPU-only cluster"), ("gpu", "# GPU cluster")):
        block = section[section.index(marker):]
        line = next(ln for ln in block.splitlines() if ln.startswith("snakemake "))
        out[kind] = shlex.split(line)[1:]
    return out


def parse(argv: list[str], monkeypatch) -> object:
    from snakemake.cli import parse_args

    monkeypatch.chdir(REPO)
    return parse_args(argv)[1]


def filled(argv: list[str]) -> list[str]:
    return [a.replace("ACCOUNT", "acc").replace("GPU_PARTITION", "gpupart").replace("PARTITION", "part") for a in argv]


@pytest.mark.parametrize("kind", ["cpu", "gpu"])
def test_readme_slurm_commands_use_only_profiles_slurm(kind, monkeypatch):
    argv = filled(readme_commands()[kind]) + ["results/aggregate/final.csv"]
    args = parse(argv, monkeypatch)
    assert args.executor == "slurm"
    # no other profile is loaded: profiles/slurm's latency-wait, and no resources
    assert args.latency_wait == 60
    assert not args.resources, args.resources
    assert args.slurm_status_command == "squeue"
    assert args.jobs == 100 and args.retries == 2
    # --default-resources on the command line keeps Snakemake's defaults and adds account/partition
    assert {"slurm_account", "slurm_partition", "mem_mb", "tmpdir"} <= set(args.default_resources)
    # the target after `--` stays a target (not swallowed by --default-resources)
    assert args.targets == ["results/aggregate/final.csv"]
    # neither the profile nor the command forces a GPU or a thread count on the train rule
    assert not args.set_threads
    assert all("gpu" not in res for res in args.set_resources.values()), args.set_resources
    if kind == "gpu":
        assert set(args.set_resources) == {"train"} and set(args.set_resources["train"]) == {"slurm_partition"}
    device = [c for c in args.config if c.startswith("device=")]
    assert device == ["device=cpu" if kind == "cpu" else "device=cuda"]


def test_no_profile_is_loaded_unless_named(monkeypatch):
    """Snakemake loads profiles/default by itself, as the workflow profile whose keys win over --profile's: the
    repository has none, so a plain command gets Snakemake's defaults and `--profile profiles/slurm` gets exactly
    profiles/slurm's settings (with a profiles/default: its latency-wait 5, cores and gpu_slots)."""
    assert not (REPO / "profiles" / "default").exists() and not (REPO / "workflow" / "profiles").exists()
    plain = parse(["-n"], monkeypatch)
    assert plain.latency_wait == 5 and not plain.resources and plain.cores is None and not plain.keep_going
    args = parse(["--profile", "profiles/slurm", "-n"], monkeypatch)
    slurm = yaml.safe_load((REPO / "profiles" / "slurm" / "config.yaml").read_text())
    assert args.latency_wait == slurm["latency-wait"] == 60
    assert args.executor == "slurm" and args.jobs == 100 and args.retries == 2
    assert not args.resources and args.cores is None


def test_profiles_local_is_opt_in(monkeypatch):
    """`--workflow-profile profiles/local`: all cores, two GPU slots, keep going."""
    args = parse(["--workflow-profile", "profiles/local", "-n"], monkeypatch)
    assert args.cores == os.cpu_count() or args.cores == len(os.sched_getaffinity(0))
    assert set(args.resources) == {"gpu_slots"} and args.keep_going and args.latency_wait == 5


def test_a_deployed_study_loads_no_profile(tmp_path, monkeypatch):
    """snakedeploy copies profiles/ into the user's folder, where Snakemake looks for profiles/default from the
    working directory: nothing is loaded there either, and `--profile profiles/slurm` keeps its latency-wait."""
    study = tmp_path / "my-study"
    shutil.copytree(REPO / "profiles", study / "profiles")
    shutil.copytree(REPO / "config", study / "config")
    (study / "workflow").mkdir()
    (study / "workflow" / "Snakefile").write_text(
        f'configfile: "config/config.yaml"\n\n\nmodule fedbalance:\n    snakefile:\n        "{REPO}/workflow/Snakefile"\n'
        "    config:\n        config\n\n\nuse rule * from fedbalance\n")
    from snakemake.cli import parse_args

    monkeypatch.chdir(study)
    plain = parse_args(["-n"])[1]
    assert not plain.resources and plain.latency_wait == 5 and plain.cores is None
    args = parse_args(["--profile", "profiles/slurm", "-n"])[1]
    assert args.latency_wait == 60 and not args.resources


SMOKE = REPO / "tests" / "slurm_smoke.sh"


def _smoke(tmp_path: Path, env: dict[str, str]) -> tuple[subprocess.CompletedProcess, Path]:
    """tests/slurm_smoke.sh with every SLURM and package tool it could call replaced by one that logs the call."""
    fake, calls = tmp_path / "bin", tmp_path / "calls"
    fake.mkdir()
    for tool in ("apt-get", "munged", "mungekey", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "scontrol",
                 "sinfo", "mknod"):
        (fake / tool).write_text(f'#!/bin/sh\necho "{tool} $*" >>"{calls}"\n')
        (fake / tool).chmod(0o755)
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}", "SMOKE_DIR": str(tmp_path / "smoke"), **env}
    return subprocess.run(["bash", str(SMOKE)], env=env, capture_output=True, text=True, timeout=120), calls


def test_smoke_test_refuses_beside_a_running_slurmctld(tmp_path):
    """On a machine whose slurmctld runs (someone's cluster), the smoke test exits 2 before anything:
    no package, daemon, folder, and not one squeue or scancel (it once cancelled every job)."""
    daemon = tmp_path / "slurmctld"  # a process named slurmctld
    shutil.copy(shutil.which("sleep"), daemon)
    proc = subprocess.Popen([str(daemon), "120"])
    try:
        r, calls = _smoke(tmp_path, {})
    finally:
        proc.kill()
        proc.wait()
    assert r.returncode == 2, r.stdout + r.stderr
    reason = "/etc/slurm/slurm.conf exists" if Path("/etc/slurm/slurm.conf").exists() else "slurmctld is running"
    assert f"REFUSED: {reason}" in r.stdout and "Nothing was installed, started or cancelled." in r.stdout
    assert not calls.exists(), calls.read_text()
    assert not (tmp_path / "smoke").exists()


@pytest.mark.skipif(Path("/etc/slurm/slurm.conf").exists(), reason="this machine has SLURM: the smoke test refuses first")
def test_smoke_test_names_the_slurm_extra_and_the_venv_form(tmp_path):
    """A python without the SLURM plugin (sudo's, when the venv drops out of PATH): the error names
    `.[slurm]`, as the README does, and the `sudo env PATH="$PATH"` form, before anything is done."""
    python = tmp_path / "python-without-plugin"
    python.write_text("#!/bin/sh\nexit 1\n")
    python.chmod(0o755)
    r, calls = _smoke(tmp_path, {"PYTHON": str(python)})
    assert r.returncode == 1, r.stdout + r.stderr
    assert "has no snakemake-executor-plugin-slurm: pip install -e '.[slurm]'" in r.stdout
    assert 'sudo env PATH="$PATH" tests/slurm_smoke.sh' in r.stdout
    assert not calls.exists(), calls.read_text()
    section = (REPO / "README.md").read_text().split("## Running on SLURM")[1].split("\n## ")[0]
    assert 'sudo env PATH="$PATH" tests/slurm_smoke.sh' in section and "pip install -e '.[slurm]'" in section
    assert ".[test]" not in SMOKE.read_text()


def _train_resources(out: str) -> list[str]:
    blocks = re.findall(r"^rule train:\n((?:[ \t]+.*\n?)*)", out, flags=re.M)  # the job's indented lines
    return [re.search(r"resources: (.*)", b).group(1) for b in blocks]


@pytest.mark.skipif(shutil.which("snakemake") is None, reason="snakemake is not installed")
@pytest.mark.parametrize("kind", ["cpu", "gpu"])
def test_readme_slurm_commands_plan_the_train_jobs(kind, tmp_path):
    """Dry run of the README command on the quick config: a GPU only for device=cuda, the partition's
    memory request is the rule's, every training job is planned."""
    argv = filled(readme_commands()[kind])
    cmd = [sys.executable, "-m", "snakemake", "-s", str(SNAKEFILE), "--directory", str(tmp_path), "-n"]
    cmd += argv[:-1] if argv[-1] == "--" else argv
    cmd += ["--configfile", str(QUICK)]  # quick.yaml says device: cpu; the command's --config wins
    r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    assert "Using workflow specific profile profiles/slurm" in out and out.count("Using workflow specific profile") == 1
    res = _train_resources(out)
    quick = load_config(QUICK)
    # twins are copied by the local rule reuse, derived jobs written by rule derive
    assert len(res) == len(jobs(quick)) - len(twins(quick)) - len(derived(quick))
    gpu = "gpu=1" if kind == "gpu" else "gpu=0"
    assert all(gpu in r and "slurm_account=acc" in r for r in res), res[:2]
    if kind == "gpu":
        assert all("slurm_partition=gpupart" in r for r in res), res[:2]


@pytest.mark.skipif(shutil.which("snakemake") is None, reason="snakemake is not installed")
def test_the_slurm_profile_plans_a_batch_of_the_sets_missing_jobs(tmp_path):
    """reference/README.md's cluster command, dry: the first 40 jobs `reference missing` lists for the committed set
    are planned through profiles/slurm, each a training job (or the rule keep of a branch source, a derive) of the
    paper's protocol on the queue, each target once."""
    runs = tmp_path / "runs"
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    listed = subprocess.run([sys.executable, "-m", "fedbalance", "reference", "missing", "--reference",
                             "reference/mnist", "--targets", str(runs)], cwd=REPO, env=env, capture_output=True,
                            text=True, timeout=600)
    assert listed.returncode == 0, listed.stderr
    targets = listed.stdout.splitlines()[:40]
    assert len(targets) == 40 and all(t.startswith(f"{runs}/") and t.endswith("/metrics.json") for t in targets)
    argv = filled(readme_commands()["cpu"])
    cmd = [sys.executable, "-m", "snakemake", "-n", *argv[:-1], "--configfile", "config/mnist.yaml", "--config",
           "device=cpu", f"results_dir={runs}", "--", *targets]
    r = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    assert "Using workflow specific profile profiles/slurm" in out
    planned = re.findall(r"^rule (train|derive|keep):\n((?:[ \t]+.*\n?)*)", out, flags=re.M)
    outputs = {line.split("output: ")[1].split(",")[0] for _, block in planned for line in block.splitlines()
               if "output: " in line}
    assert set(targets) <= outputs
    assert all("slurm_account=acc" in block for rule, block in planned if rule != "derive")
    assert not (runs / "aggregate").exists() and not runs.exists()
