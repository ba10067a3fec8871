"""Several training jobs per GPU: train jobs ask one `gpu_slots` each, profiles/local (opt-in) offers the slots."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
SNAKEFILE = REPO / "workflow" / "Snakefile"

pytestmark = pytest.mark.skipif(shutil.which("snakemake") is None, reason="snakemake is not installed")


def train_resources(tmp: Path, device: str) -> list[dict[str, str]]:
    """The resources of every planned train job (dry run of the quick protocol)."""
    r = subprocess.run(
        ["snakemake", "-s", str(SNAKEFILE), "--directory", str(tmp), "-n",
         "--configfile", str(REPO / "config" / "quick.yaml"), "--config", f"device={device}"],
        cwd=REPO, capture_output=True, text=True, timeout=900,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    # a job's block: the indented lines below its "rule train:" (what follows it depends on printshellcmds)
    blocks = re.findall(r"^rule train:\n((?:[ \t]+.*\n?)*)", r.stdout + r.stderr, re.M)
    return [dict(kv.split("=", 1) for kv in re.search(r"resources: (.*)", b).group(1).split(", ")) for b in blocks]


@pytest.mark.parametrize("device, wanted", [("cuda", "1"), ("cpu", "0")])
def test_train_jobs_ask_a_gpu_and_a_slot(tmp_path, device, wanted):
    from fedbalance.jobs.config import jobs, load_config, twins
    from fedbalance.jobs.reuse import derived

    res = train_resources(tmp_path, device)
    quick = load_config(REPO / "config" / "quick.yaml")
    # the twins are copied by rule reuse, the derived jobs written by rule derive
    assert len(res) == len(jobs(quick)) - len(twins(quick)) - len(derived(quick))
    assert all(r["gpu_slots"] == wanted and r["gpu"] == wanted for r in res)


def test_profiles_offer_slots_locally_and_leave_the_gpu_to_the_rule():
    local = yaml.safe_load((REPO / "profiles" / "local" / "config.yaml").read_text())
    assert "gpu_slots=2" in local["resources"]
    assert not any(r.startswith("gpu=") for r in local["resources"])  # no global cap of one GPU job
    slurm = yaml.safe_load((REPO / "profiles" / "slurm" / "config.yaml").read_text())
    assert "gpu" not in str(slurm.get("set-resources", {}))  # the train rule asks gpu=1 under device: cuda
