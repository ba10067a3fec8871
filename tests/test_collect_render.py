"""scripts/collect_render.sh with stand-ins for Snakemake and fedbalance that record what they are asked: collect,
then a render of the set into an emptied folder with the documented command, then docs and docs --check, in that
order; a failing step stops the rest and says what it left; bad arguments change nothing."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# One stand-in for both commands (Snakemake's calls are those with --cores): it appends "<step> <argv>
# accept=<FEDBALANCE_ACCEPT_UNCOMMITTED>" to CALLS and fails when its step is named in FAIL ("collect", "render",
# "docs", "check"); for the render it also records what its results folder held when it started.
FAKE = r'''
import os, sys
from pathlib import Path
args = sys.argv[1:]
if "--cores" in args:
    step = "render"
    results = Path(next(a.split("=", 1)[1] for a in args if a.startswith("results_dir=")))
    held = sorted(p.name for p in results.iterdir()) if results.exists() else []
    extra = " held=" + ",".join(held)
else:
    step = {"collect": "collect", "docs": "check" if "--check" in args else "docs"}[args[1]]
    extra = ""
extra += " accept=" + os.environ.get("FEDBALANCE_ACCEPT_UNCOMMITTED", "-")
with open(os.environ["CALLS"], "a") as f:
    f.write(step + " " + " ".join(args) + extra + "\n")
if step in os.environ.get("FAIL", "").split():
    sys.exit(f"{step} failed")
if step == "render":
    results.mkdir(parents=True, exist_ok=True)
    (results / "claims.md").write_text("rendered")
'''


def _run(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    fake = tmp_path / "fake.py"
    fake.write_text(FAKE)
    (tmp_path / "runs").mkdir(exist_ok=True)
    (tmp_path / "set").mkdir(exist_ok=True)
    full = {**os.environ, "CALLS": str(tmp_path / "calls.log"),
            "SNAKEMAKE": f"{sys.executable} {fake}", "FEDBALANCE": f"{sys.executable} {fake}",
            "REFERENCE": str(tmp_path / "set"), "RENDER": str(tmp_path / "render"), **env}
    return subprocess.run(["bash", "scripts/collect_render.sh", *args], cwd=REPO, env=full, capture_output=True,
                          text=True, timeout=60)


def _calls(tmp_path: Path) -> list[str]:
    path = tmp_path / "calls.log"
    return path.read_text().splitlines() if path.exists() else []


def _documented_render() -> list[str]:
    """reference/README.md's render command ('Render and compare'), as argv after `snakemake`."""
    text = (REPO / "reference/README.md").read_text()
    line = re.search(r"^ +(snakemake --cores all --configfile \S+ --config reference_dir=\S+ results_dir=\S+)$", text,
                     re.M)
    assert line, "reference/README.md has no render command"
    return shlex.split(line.group(1))[1:]


def test_collect_then_the_documented_render_into_an_emptied_folder_then_docs_and_check(tmp_path: Path) -> None:
    """The render is the documented one with --drop-metadata (Snakemake keeps no records of a folder emptied first)."""
    (tmp_path / "render").mkdir()
    (tmp_path / "render" / "stale.md").write_text("from an older set")
    proc = _run(tmp_path, str(tmp_path / "runs"))
    assert proc.returncode == 0, proc.stderr
    runs, ref, render = (str(tmp_path / n) for n in ("runs", "set", "render"))
    documented = _documented_render()
    expected_render = [a.replace("reference_dir=reference/mnist", f"reference_dir={ref}")
                       .replace("results_dir=results_reference", f"results_dir={render}") for a in documented]
    assert expected_render[expected_render.index("--configfile") + 1] == "config/mnist.yaml"
    assert _calls(tmp_path) == [
        f"collect reference collect {runs} --into {ref} accept=-",
        "render --drop-metadata " + " ".join(expected_render) + " held= accept=1",
        f"docs reference docs --rendered {render} --reference {ref} accept=1",
        f"check reference docs --check --rendered {render} --reference {ref} accept=1",
    ]
    assert (tmp_path / "render" / "claims.md").exists() and not (tmp_path / "render" / "stale.md").exists()


@pytest.mark.parametrize("step, ran", [("collect", ["collect"]), ("render", ["collect", "render"]),
                                       ("docs", ["collect", "render", "docs"]),
                                       ("check", ["collect", "render", "docs", "check"])])
def test_a_failing_step_stops_the_rest_and_says_what_it_left(tmp_path: Path, step: str, ran: list[str]) -> None:
    proc = _run(tmp_path, str(tmp_path / "runs"), FAIL=step)
    assert proc.returncode == 1
    assert [c.split()[0] for c in _calls(tmp_path)] == ran
    assert "FAILED" in proc.stderr and "collected, rendered" not in proc.stdout
    if step in ("render", "docs"):
        assert f"{tmp_path / 'set'} is collected into and the docs are stale" in proc.stderr
        assert f"git checkout -- {tmp_path / 'set'}" in proc.stderr


def test_bad_arguments_change_nothing(tmp_path: Path) -> None:
    assert _run(tmp_path).returncode == 2
    missing = _run(tmp_path, str(tmp_path / "nowhere"))
    assert missing.returncode == 2 and "nowhere" in missing.stderr
    (tmp_path / "link").symlink_to(tmp_path / "set")
    for render in (str(tmp_path / "set"), f"{tmp_path}/./set/", str(tmp_path / "link"), str(tmp_path / "runs"), ".",
                   str(REPO), "/", str(tmp_path / "runs" / "render"), str(tmp_path / "set" / "render"), str(tmp_path),
                   f"{tmp_path}/runs/../"):
        proc = _run(tmp_path, str(tmp_path / "runs"), RENDER=render)
        assert proc.returncode == 2 and "RENDER" in proc.stderr, render
    no_config = _run(tmp_path, str(tmp_path / "runs"), CONFIG=str(tmp_path / "none.yaml"))
    assert no_config.returncode == 2 and "none.yaml" in no_config.stderr
    assert _calls(tmp_path) == []
    assert (tmp_path / "runs").exists() and (tmp_path / "set").exists()


def test_a_set_with_uncommitted_changes_is_refused_before_the_collect(tmp_path: Path) -> None:
    """Every uncommitted file the render reads on purpose must be the collect's: a set in a git work tree with a
    change of its own (an earlier collect not committed, a hand edit) is refused, naming it, and nothing runs."""
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(tmp_path / "set")]
    (tmp_path / "set").mkdir()
    (tmp_path / "set" / "MANIFEST.sha256").write_text("sealed\n")
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "set"], check=True)
    assert _run(tmp_path, str(tmp_path / "runs"), FAIL="check").returncode == 1   # clean: it runs
    calls = len(_calls(tmp_path))
    (tmp_path / "set" / "MANIFEST.sha256").write_text("edited\n")
    proc = _run(tmp_path, str(tmp_path / "runs"))
    assert proc.returncode == 2 and "uncommitted changes" in proc.stderr and "MANIFEST.sha256" in proc.stderr
    assert len(_calls(tmp_path)) == calls
