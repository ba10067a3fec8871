"""benchmarks/throughput.py: the arithmetic of a job counted by hand, and a CPU run's rows against each other."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]


def _bench():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        spec = importlib.util.spec_from_file_location("throughput", ROOT / "benchmarks" / "throughput.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return module


def test_forward_backward_flops_of_a_linear_model_by_hand() -> None:
    """Linear 784 -> 10: 2 x 784 x 10 FLOPs forward per sample; backward only the weight gradient (the input needs
    none), as many again."""
    model = nn.Sequential(nn.Flatten(), nn.Linear(784, 10))
    fwd, both = _bench().forward_backward_flops(model, (1, 28, 28), 10, 8)
    assert fwd == 2 * 784 * 10 and both == 2 * fwd


def test_job_flops_adds_clients_monitor_and_evaluation(monkeypatch: pytest.MonkeyPatch) -> None:
    bench = _bench()
    monkeypatch.setattr(bench, "forward_backward_flops", lambda model, shape, classes, batch: (1.0, 3.0))
    from fedbalance.jobs.config import configured_job, load_config
    from fedbalance.common.records import Job

    spec = configured_job(load_config(ROOT / "config" / "quick.yaml"), Job("losses", "mnist", "g10", "ratio", 0))
    spec.update(clients_per_round=2, local_epochs=3)
    spec["monitor"].update(aux_per_class=4, record=True)
    metrics = {"config": spec, "partition": {"class_counts": [[5, 5], [10, 0], [20, 10], [0, 30]]}}
    got = bench.job_flops(metrics, (1, 28, 28), 10, 100, rounds=7)
    # 2 of 4 clients a round: the mean client (80 / 4) twice, 3 epochs; the monitor: 10 classes x 4 aux x 3 epochs
    assert got["samples_per_round"] == 2 * 20 * 3 and got["monitor_samples_per_round"] == 10 * 4 * 3
    assert got["job_tflop"] == pytest.approx(7 * ((120 + 120) * 3.0 + 100 * 1.0) / 1e12)
    ce = configured_job(load_config(ROOT / "config" / "quick.yaml"), Job("losses", "mnist", "g10", "ce", 0))
    ce.update(clients_per_round=2, local_epochs=3)
    ce["monitor"]["record"] = False  # CE takes nothing from the monitor: it does not run
    assert bench.job_flops({**metrics, "config": ce}, (1, 28, 28), 10, 100, rounds=7)["monitor_samples_per_round"] == 0


@pytest.mark.slow
def test_a_cpu_run_extrapolates_and_checks_against_a_full_job(tmp_path: Path) -> None:
    out = tmp_path / "tp.json"
    report = _bench().main(["--device", "cpu", "--processes", "1,2", "--rounds", "2", "--config", "config/quick.yaml",
                            "--job", "losses:mnist:g10:ratio", "--check-full", "--peak-tflops", "0.05", "--out", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(report))
    assert report["fp32_tflops"] == 0.05 and report["full_rounds"] == 16 and report["data"] == "embedded"
    for r in report["rows"]:
        assert r["completed"] == r["processes"] and r["rounds_each"] == [2]
        assert r["full_job_s"] == pytest.approx(r["startup_s"] + r["first_round_s"] + 15 * r["round_s"], abs=0.02)
        # four significant digits each
        assert r["tflops"] == pytest.approx(r["job_tflop"] * r["processes"] / r["full_job_s"], rel=2e-3)
        assert r["share_of_fp32_limit"] == pytest.approx(r["tflops"] / 0.05, rel=2e-3)
    check = report["full_check"]
    assert check["returncode"] == 0 and check["predicted_s"] == report["rows"][0]["full_job_s"]
    assert check["extrapolation_error"] == pytest.approx(check["predicted_s"] / check["wall_s"] - 1, abs=1e-3)
