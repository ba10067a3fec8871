"""benchmarks/gpu_suite.py --smoke: the JSON's structure and values checked against hand counts and each other."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def smoke(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("suite") / "suite.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT / "src"), os.environ.get("PYTHONPATH")) if p)}
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_suite.py"), "--smoke", "--out", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    printed = json.loads(proc.stdout)
    assert printed == json.loads(out.read_text())
    return printed


@pytest.mark.slow
def test_round_rows_count_the_schedule(smoke):
    assert smoke["smoke"] is True and smoke["device_type"] == "cpu"
    s = smoke["round"]["sizes"]
    rows = smoke["round"]["rows"]
    assert {(r["model"], r["loss"], r["path"]) for r in rows} == {
        (m, loss, p) for m in ("lenet5", "resnet18") for loss in ("ce", "ratio") for p in ("sequential", "vectorised")
    }
    for r in rows:
        assert "error" not in r
        # every client: epochs x ceil(samples / batch) steps (counted by an optimiser hook on the sequential path)
        assert r["client_steps"] == s["clients"] * s["epochs"] * math.ceil(s["samples"] / s["batch_size"])
        if r["loss"] == "ratio":
            # the monitor: one copy per class, aux samples each
            assert r["monitor_steps"] == r["classes"] * s["epochs"] * math.ceil(s["aux"] / s["batch_size"])
            assert r["round_s"] == pytest.approx(r["clients_s"] + r["monitor_s"], abs=2e-4)
            assert 0 < r["monitor_share"] < 1
        else:
            assert r["monitor_steps"] == 0 and r["monitor_s"] is None and r["round_s"] == pytest.approx(r["clients_s"], abs=1e-4)


@pytest.mark.slow
def test_sequential_and_vectorised_agree(smoke):
    checks = smoke["round"]["checks"]
    assert {(c["model"], c["loss"]) for c in checks} == {(m, loss) for m in ("lenet5", "resnet18") for loss in ("ce", "ratio")}
    for c in checks:
        assert c["max_abs_diff"] < 1e-4 and c["loss_max_diff"] < 1e-5
        if c["loss"] == "ratio":
            assert c["monitor_weights_max_diff"] < 1e-3
        by_path = {r["path"]: r["round_s"] for r in smoke["round"]["rows"] if (r["model"], r["loss"]) == (c["model"], c["loss"])}
        assert c["speedup"] == pytest.approx(by_path["sequential"] / by_path["vectorised"], rel=1e-2)


@pytest.mark.slow
def test_job_and_throughput(smoke):
    job = smoke["job"]
    assert job["returncode"] == 0 and job["data"] == "embedded"
    assert job["rounds"] == job["rounds_csv_rows"] == 2
    assert job["startup_s"] == pytest.approx(job["wall_s"] - job["job_wall_s"], abs=2e-3)
    assert 0 <= job["acc"] <= 1
    tp = smoke["throughput"]
    assert [r["jobs"] for r in tp["rows"]] == [1, 2] and tp["rounds"] == 1
    for r in tp["rows"]:
        assert r["completed"] == r["jobs"] and r["rounds_each"] == [1] and "errors" not in r
        assert r["jobs_per_hour"] == pytest.approx(r["completed"] / r["wall_s"] * 3600, rel=1e-3)
    assert tp["rows"][0]["speedup_vs_1"] == 1.0
