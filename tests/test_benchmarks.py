"""benchmarks/gpu_suite.py --smoke: the JSON's structure and values checked against hand counts and each other."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import load_script

ROOT = Path(__file__).resolve().parents[1]
MODELS = ("lenet5", "resnet18", "resnet50")


def _suite():
    return load_script("benchmarks/gpu_suite.py")


@pytest.fixture(scope="module")
def smoke(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("suite") / "suite.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT / "src"), os.environ.get("PYTHONPATH")) if p)}
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_suite.py"), "--smoke", "--mps", "--out", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    printed = json.loads(proc.stdout)
    assert printed == json.loads(out.read_text())
    return printed


@pytest.mark.slow
def test_round_rows_count_the_schedule(smoke):
    assert smoke["smoke"] is True and smoke["device_type"] == "cpu" and smoke["failed_checks"] == []
    s = smoke["round"]["sizes"]
    rows = smoke["round"]["rows"]
    assert {(r["model"], r["loss"], r["path"]) for r in rows} == {
        (m, loss, p) for m in MODELS for loss in ("ce", "ratio") for p in ("sequential", "vectorised")
    }
    for r in rows:
        assert "error" not in r and "skipped" not in r
        # every client: epochs x ceil(samples / batch) steps (counted by an optimiser hook on the sequential path)
        assert r["client_steps"] == s["clients"] * r["epochs"] * math.ceil(s["samples"] / s["batch_size"])
        if r["loss"] == "ratio":
            # the monitor: one copy per class, aux samples each
            assert r["monitor_steps"] == r["classes"] * r["epochs"] * math.ceil(s["aux"] / s["batch_size"])
            assert r["round_s"] == round(r["clients_s"] + r["monitor_s"], 4)
            assert 0 < r["monitor_share"] < 1
        else:
            assert r["monitor_steps"] == 0 and r["monitor_s"] is None and r["round_s"] == r["clients_s"]
        # the CPU trains all copies at once: no budget, no chunks
        assert r["chunks"] == ({} if r["path"] == "vectorised" else None)


@pytest.mark.slow
def test_sequential_and_vectorised_agree(smoke):
    """float64: the two paths agree to TOLERANCE (pass/fail); float32 (information): close for LeNet5 and ResNet18."""
    checks = smoke["round"]["checks"]
    assert {(c["model"], c["loss"]) for c in checks} == {(m, loss) for m in MODELS for loss in ("ce", "ratio")}
    for c in checks:
        assert c["agree"] is True and c["tolerance"] == {"state": 1e-6, "loss": 1e-6, "weights": 1e-6}
        assert c["float64"]["max_abs_diff"] < 1e-7 and c["float64"]["loss_max_diff"] < 1e-6
        assert ("monitor_weights_max_diff" in c["float64"]) == (c["loss"] == "ratio")
        if c["model"] != "resnet50":  # well conditioned: float64 to rounding, float32 close too
            assert c["float64"]["max_abs_diff"] < 1e-12
            assert c["float32"]["max_abs_diff"] < 1e-4 and c["float32"]["loss_max_diff"] < 1e-5
        by_path = {r["path"]: r["round_s"] for r in smoke["round"]["rows"] if (r["model"], r["loss"]) == (c["model"], c["loss"])}
        assert c["speedup"] == pytest.approx(by_path["sequential"] / by_path["vectorised"], rel=1e-2)


@pytest.mark.slow
def test_centralised_epoch_takes_the_pooled_schedule(smoke):
    cen = smoke["centralised"]
    assert [r["model"] for r in cen["rows"]] == list(MODELS)
    for r in cen["rows"]:
        assert "error" not in r
        assert r["steps"] == r["scheduled"] == math.ceil(cen["samples"] / cen["batch_size"])
        assert r["samples_per_s"] == pytest.approx(cen["samples"] / r["epoch_s"], rel=1e-2)
        assert math.isfinite(r["loss"]) and r["loss"] > 0


@pytest.mark.slow
def test_memory_section_chooses_chunks_that_fit(smoke):
    mem = smoke["memory"]
    assert mem["device_budget_gib"] is None and mem["assumed_budget_gib"] == pytest.approx(0.8 * mem["assumed_free_gib"], abs=0.01)
    rows = {r["call"]: r for r in mem["rows"]}
    assert len(rows) == 6 and all("error" not in r for r in rows.values())
    for r in rows.values():
        assert 1 <= r["chunk_assumed"] <= r["copies"] and r["need_assumed_gib"] <= mem["assumed_budget_gib"]
        assert r["all_at_once_gib"] >= r["copies"] * (r["per_copy_gib"] + r["state_gib"]) - 0.01
        if r["all_at_once_gib"] <= mem["assumed_budget_gib"]:
            assert r["chunk_assumed"] == r["copies"]
    # ResNet50 at 28x28, batch 32: at least the saved activations of one copy (695 MiB, counted with autograd's
    # saved-tensor hooks) and its weights, gradients and momenta (5 x 90 MiB); batch 256 scales the activations
    k20 = rows["femnist K=20 (losses, default)"]
    assert (695 + 5 * 89.8) / 1024 < k20["per_copy_gib"] < 4
    assert 6 < rows["femnist batch 256 (batch_size)"]["per_copy_gib"] / k20["per_copy_gib"] < 8.5
    # over an 80 GB H100's budget: K = 80 and batch 256 are trained in chunks
    assert rows["femnist K=80 (clients_femnist)"]["chunk_assumed"] < 80 and rows["femnist batch 256 (batch_size)"]["chunk_assumed"] < 20


@pytest.mark.slow
def test_job_and_throughput(smoke):
    job = smoke["job"]
    assert job["returncode"] == 0 and job["data"] == "embedded"
    assert job["rounds"] == job["rounds_csv_rows"] == 2 and job["precision"] == "fp32"
    assert job["startup_s"] == pytest.approx(job["wall_s"] - job["job_wall_s"], abs=2e-3)
    assert 0 <= job["acc"] <= 1
    tp = smoke["throughput"]
    sliced = [r for r in tp["rows"] if r["sharing"] == "time-slicing"]
    assert [r["jobs"] for r in sliced] == [1, 2] and tp["rounds"] == 1
    # --mps off CUDA: each N's row says why it did not run
    assert [(r["jobs"], r["skipped"]) for r in tp["rows"] if r["sharing"] == "mps"] == \
        [(1, "MPS needs a CUDA device"), (2, "MPS needs a CUDA device")]
    for r in sliced:
        assert r["completed"] == r["jobs"] and r["rounds_each"] == [1] and "errors" not in r
        assert r["jobs_per_hour"] == pytest.approx(r["completed"] / r["wall_s"] * 3600, rel=1e-3)
        # extrapolated to the config's rounds of the job (quick.yaml's losses family: 16)
        assert r["full_rounds"] == 16
        assert r["first_round_s"] == r["round_s"]  # one round each: it is the first
        assert r["full_job_s"] == pytest.approx(r["startup_s"] + r["first_round_s"] + 15 * r["round_s"], abs=0.02)
        assert r["full_jobs_per_hour"] == pytest.approx(r["jobs"] * 3600 / r["full_job_s"], rel=1e-2)
        assert 0 < r["round_s"] <= r["wall_s"]
    assert tp["rows"][0]["speedup_vs_1"] == 1.0


def test_a_failing_measurement_is_recorded_and_the_suite_goes_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One model's centralised epoch fails, the memory section dies: both recorded, the JSON written each time."""
    suite = _suite()
    real = suite.sgd_steps
    saves: list[dict] = []

    def fail_on_resnet(model, opt, x, y, loss_fn, batches):
        if type(model).__name__ == "ResNet":
            raise RuntimeError("CUDA out of memory (simulated)")
        return real(model, opt, x, y, loss_fn, batches)

    def boom(*args, **kwargs):
        raise ValueError("memory estimate failed (simulated)")

    monkeypatch.setattr(suite, "sgd_steps", fail_on_resnet)
    monkeypatch.setattr(suite, "section_memory", boom)
    real_save = suite.Report.save
    monkeypatch.setattr(suite.Report, "save", lambda self: real_save(self) or saves.append(json.loads(json.dumps(self.data))))
    out = tmp_path / "suite.json"
    report = suite.main(["--smoke", "--sections", "memory,centralised", "--out", str(out)])
    assert set(report) >= {"memory", "centralised"} and "round" not in report and "job" not in report
    assert report["memory"]["error"].startswith("ValueError: memory estimate failed")
    rows = report["centralised"]["rows"]
    assert "error" not in rows[0] and rows[0]["steps"] == 4
    assert all(r["error"].startswith("RuntimeError: CUDA out of memory") for r in rows[1:])
    # written after the memory section, after each of the three models, after the section, at the end
    assert len(saves) >= 6 and [len(s.get("centralised", {}).get("rows", [])) for s in saves[1:4]] == [1, 2, 3]
    assert json.loads(out.read_text()) == saves[-1]


def test_checks_beyond_tolerance_fail_the_suite(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    suite = _suite()
    f64 = torch.float64
    seq = {"state": {"w": torch.zeros(3, dtype=f64), "v": torch.full((2,), 1000.0, dtype=f64)}, "losses": torch.zeros(2),
           "weights": torch.ones(4), "clients_s": 2.0, "monitor_s": 0.0}
    vec = {**seq, "state": {"w": torch.tensor([0.0, 5e-10, 0.0], dtype=f64), "v": torch.full((2,), 1000.0 + 4e-7, dtype=f64)},
           "clients_s": 1.0}
    exact = suite._diffs(seq, vec, relative=True)
    assert exact["max_abs_diff"] == pytest.approx(5e-10, rel=1e-3)  # 4e-7 on 1000 is 4e-10 relative
    assert suite._check("m", "ratio", {**exact, "max_abs_diff": 2e-6}, None)["agree"] is False
    assert suite._check("m", "ratio", exact, {"sequential": seq, "vectorised": vec})["agree"] is True
    bad = suite._check("m", "ratio", {**exact, "monitor_weights_max_diff": 2e-6}, {"sequential": seq, "vectorised": vec})
    assert bad["agree"] is False and bad["speedup"] == 2.0 and bad["float32"]["max_abs_diff"] == pytest.approx(4e-7, rel=1e-3)
    assert suite._check("m", "ce", {"max_abs_diff": float("nan"), "loss_max_diff": 0.0}, None)["agree"] is False
    monkeypatch.setattr(suite, "section_round", lambda args, device, report: {"rows": [], "checks": [bad]})
    with pytest.raises(SystemExit) as exit_info:
        suite.main(["--smoke", "--sections", "round"])
    assert exit_info.value.code == 1


@pytest.mark.slow
def test_estimated_section_measures_the_shapes_the_cost_table_estimates(smoke):
    """--smoke: the one CNN7 shape, measured (a probe and a step at its batch), as a calibration ``cost`` reads; first of
    the sections. On a GPU the shapes are those config/config.yaml trains and the shipped calibration lacks."""
    from fedbalance.jobs.cost import Calibration, Shape, shipped_calibration, study_shapes
    from fedbalance.jobs.config import read_yaml, with_defaults

    est = smoke["estimated"]
    assert [k for k in smoke if k in _suite().SECTIONS][0] == "estimated"  # measured before every other section
    assert est["shapes"] == ["cnn7/3x32x32/q10/sequential/b8"] and len(est["rows"]) == 1
    row = est["rows"][0]
    assert "error" not in row and row["step_s"] > 0 and row["probe"]["batch"] == 8
    cal = Calibration.from_json(est["calibration"])
    # the step measured, times the shipped CPU factor of its model shape (calibrations/cpu_factors.json, read here
    # directly): the real-data run's measured / predicted seconds
    shipped = json.loads((ROOT / "src/fedbalance/calibrations/cpu_factors.json").read_text())["factors"]
    factor = shipped["cnn7/3x32x32/q10/sequential"] if smoke["device_type"] == "cpu" else 1.0
    assert cal.step_seconds(Shape("cnn7", 3, 32, 32, 10, 8, "sequential")) == pytest.approx(row["step_s"] * factor)
    # the GPU session's list: the paper's shapes the shipped H200 figures did not measure
    missing = {s.model_key for s in study_shapes(with_defaults(read_yaml(ROOT / "config/config.yaml")), "cuda")
               } - set(shipped_calibration("cuda").probes)
    assert missing == {"cnn7/3x32x32/q10/vectorised", "resnet18/1x48x48/q7/vectorised"}
