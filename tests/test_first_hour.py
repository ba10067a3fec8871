"""A newcomer's first hour (issue 77): the workflow's errors for a user's mistake are one line, the report's landing
page fits a screen and links the summary pages first, the claims page opens with its verdicts, one display name per
loss, the figures' ticks, legends and captions, the LaTeX a reader compiles."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
SNAKEFILE = REPO / "workflow" / "Snakefile"
QUICK = REPO / "config" / "quick.yaml"


def _snakemake(tmp: Path, cfg: dict, *args: str) -> subprocess.CompletedProcess:
    path = tmp / "study.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return subprocess.run(["snakemake", "-s", str(SNAKEFILE), "--directory", str(tmp / "run"), "--configfile",
                           str(path), *args], capture_output=True, text=True, timeout=600)


# --- item 3: a user's mistake reaches the console as one line ------------------------------------------------------


@pytest.mark.skipif(shutil.which("snakemake") is None, reason="snakemake is not installed")
def test_a_missing_data_file_is_one_line_without_a_traceback(tmp_path: Path) -> None:
    """Real MNIST named, its files absent and ``download: false``: rule prepare_data stops with the library's line
    naming the missing file on the console; the traceback goes to the rule's log alone."""
    cfg = yaml.safe_load(QUICK.read_text())
    cfg["datasets"]["mnist"]["source"] = "mnist"
    cfg["download"], cfg["data_dir"] = False, str(tmp_path / "nodata")
    r = _snakemake(tmp_path, cfg, "--cores", "1", "--", "results/data/mnist.json")
    out = r.stdout + r.stderr
    assert r.returncode != 0
    lines = [line for line in out.splitlines() if line.startswith("fedbalance: error in rule prepare_data:")]
    missing = str(tmp_path / "nodata" / "MNIST" / "raw" / "train-images-idx3-ubyte")
    assert len(lines) == 1 and missing in lines[0], out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    log = (tmp_path / "run" / "results" / "logs" / "data" / "mnist.log").read_text()
    assert "Traceback" in log and missing in log


@pytest.mark.skipif(shutil.which("snakemake") is None, reason="snakemake is not installed")
def test_a_wrong_typed_command_line_value_says_how_to_write_it(tmp_path: Path) -> None:
    """``--config download=false`` (Snakemake reads it as the string 'false'): the line says to write False."""
    r = _snakemake(tmp_path, yaml.safe_load(QUICK.read_text()), "-n", "--config", "download=false")
    out = r.stdout + r.stderr
    assert r.returncode != 0 and "Building DAG" not in out
    assert "download: 'false' is not of type 'boolean'" in out and "write download=True or download=False" in out, out


def test_command_line_hint_names_the_written_form() -> None:
    from fedbalance.jobs.config import command_line_hint

    assert command_line_hint({"threads": "two"}, "threads: 'two' is not of type 'integer'") == (
        "; given as --config threads=two, write threads=N with N a whole number (e.g. threads=2)")
    # a key from a config file, or an error that is not about a type, gets no hint
    assert command_line_hint({}, "threads: 'two' is not of type 'integer'") == ""
    assert command_line_hint({"threads": 0}, "threads: 0 is less than the minimum of 1") == ""
