"""cost: step counts against hand counts and against the engine, the table's arithmetic, stored calibrations."""

from __future__ import annotations

import copy
import json
import math
import re
from pathlib import Path

import pytest
import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

from fedbalance.cli import main
from fedbalance.training.sgd import register_step_post_hook
from fedbalance.jobs.config import jobs, load_config, configured_job, twins
from fedbalance.common.records import Job
from fedbalance.jobs.reuse import derived
from fedbalance.jobs.cost import (
    TEST_SAMPLES,
    Calibration,
    Shape,
    calibrate,
    client_sizes,
    estimate,
    format_table,
    job_seconds,
    job_work,
    save_calibration,
    study_work,
)
from fedbalance.data.datasets import load_dataset
from fedbalance.jobs.run import build_partitions, run_job

torch.set_num_threads(1)
LENET = "lenet5/1x28x28/q10/sequential"


@pytest.fixture(scope="module")
def quick() -> dict:
    return load_config("config/quick.yaml")


def small_study(quick: dict, mode: str, gamma: float) -> dict:
    """One experiment: mismatch partition, 10 clients x 5 classes x 40 samples (minority 40/gamma)."""
    cfg = copy.deepcopy(quick)
    cfg["seeds"] = [0]
    cfg["experiments"] = {
        "small": {
            "datasets": ["mnist"],
            "losses": ["ce", "ratio"],
            "params": {
                "mode": mode,
                "rounds": 3,
                "eval_every": 1,
                "local_epochs": 2,
                "batch_size": 32,
                "clients_per_round": 10,
                "partition": {"scheme": "mismatch", "num_clients": 10, "classes_per_client": 5, "majority_samples": 40, "gamma": gamma},
                "monitor": {"aux_per_class": 32},
            },
            "settings": {"only": {}},
        }
    }
    return load_config(cfg)


def test_fl_step_count_by_hand(quick):
    cfg = small_study(quick, "fl", 1)
    ce, ratio = (job_work(configured_job(cfg, Job("small", "mnist", "only", loss, 0))) for loss in ("ce", "ratio"))
    # every client: 5 classes x 40 = 200 samples = ceil(200/32) = 7 steps per epoch
    assert ce.client_steps == ratio.client_steps == 3 * 10 * 2 * 7
    assert ce.monitor_steps == 0
    # Ratio Loss: 10 per-class copies x 2 epochs x ceil(32/32) steps, every round
    assert ratio.monitor_steps == 3 * 10 * 2 * 1
    # 3 per-round evaluations (run_job's final metrics read the last), of mnist5k's 1,000 test samples
    assert ce.forward_samples == ratio.forward_samples == 3 * 1000
    assert ratio.shape == Shape("lenet5", 1, 28, 28, 10, 32, "sequential")


def test_eval_samples_caps_the_forward_samples_of_each_evaluation(quick):
    """``eval_samples``: each of the 3 evaluations reads at most that many test samples (mnist5k has 1,000)."""
    cfg = small_study(quick, "fl", 1)
    spec = configured_job(cfg, Job("small", "mnist", "only", "ce", 0))
    assert job_work({**spec, "eval_samples": 250}).forward_samples == 3 * 250
    assert job_work({**spec, "eval_samples": 5000}).forward_samples == 3 * 1000  # not above the split
    assert job_work(spec).forward_samples == 3 * 1000


def test_centralised_step_count_by_hand(quick):
    cfg = small_study(quick, "centralised", 10)
    w = job_work(configured_job(cfg, Job("small", "mnist", "only", "ratio", 0)))
    # 5 holders per class (10 clients x 5 classes / 10): 5 x (7 x 40 + 3 x round(40/10)) = 1460 pooled samples,
    # ceil(1460/32) = 46 steps per epoch, rounds x local_epochs = 6 epochs; the monitor trains one epoch per epoch
    assert w.client_steps == 6 * 46
    assert w.monitor_steps == 6 * 10 * 1
    assert w.forward_samples == 6 * 1000


def test_writers_sizes_and_femnist_early_by_hand():
    cfg = load_config("config/config.yaml")
    spec = configured_job(cfg, Job("early", "femnist", "S", "ce", 0))
    spec.update(partition={"scheme": "writers", "num_clients": 3, "writers_per_client": 20, "gamma": 10}, minority_classes=list(range(7)), switch_round=None)
    # 20 writers x 50 samples, the 7 minority classes of 26 thinned to 1/10
    assert client_sizes(spec, 26) == {"main": [round(1000 * (1 - 7 / 26 * 0.9))] * 3}
    assert round(1000 * (1 - 7 / 26 * 0.9)) == 758
    w = job_work(configured_job(cfg, Job("early", "femnist", "S", "ce", 0)))
    # gamma 100 until round 10: ceil(733/32) = 23 steps; balanced afterwards: ceil(1000/32) = 32; 20 clients x 10 epochs
    assert round(1000 * (1 - 7 / 26 * 0.99)) == 733
    assert w.client_steps == 20 * 10 * (10 * 23 + 40 * 32)
    assert w.monitor_steps == 0
    assert w.forward_samples == 50 * TEST_SAMPLES["femnist"]
    assert w.shape == Shape("resnet50", 1, 28, 28, 26, 32, "sequential")


def tiny(quick: dict, **over) -> dict:
    spec = configured_job(quick, Job("losses", "mnist", "g10", "ratio", 0))
    spec["partition"].update(num_clients=4, majority_samples=12)
    spec["monitor"]["aux_per_class"] = 8
    spec.update(clients_per_round=3, rounds=2, local_epochs=1, batch_size=16, selection="random", path="sequential")
    spec.update(over)
    return spec


@pytest.mark.parametrize(
    "over",
    [{}, {"loss": "ce", "base_loss": "ce", "switch_round": 1}, {"mode": "centralised", "centralised_epochs": 2}],
    ids=["fl-ratio-random", "fl-ce-switch", "centralised-ratio"],
)
def test_counts_equal_the_engine(quick, tmp_path, monkeypatch, over):
    """The counted SGD steps and evaluated samples equal what run_job does on the real mnist5k labels."""
    import fedbalance.engine.fl
    import fedbalance.jobs.run

    spec = tiny(quick, **over)
    data = load_dataset("mnist5k")
    assert len(data.y_test) == TEST_SAMPLES["mnist5k"]
    real = {k: [len(c) for c in p.clients] for k, p in build_partitions(spec, data).items()}
    assert client_sizes(spec, 10) == real
    steps = []
    handles = [register_optimizer_step_post_hook(lambda *a: steps.append(1)), register_step_post_hook(lambda *a: steps.append(1))]
    evaluated = []
    original = fedbalance.engine.fl.evaluate

    def counting(model, x, *args, **kwargs):
        evaluated.append(len(x))
        return original(model, x, *args, **kwargs)

    monkeypatch.setattr(fedbalance.engine.fl, "evaluate", counting)
    monkeypatch.setattr(fedbalance.jobs.run, "evaluate", counting)
    try:
        run_job(spec, tmp_path, device="cpu", progress=False)
    finally:
        for handle in handles:
            handle.remove()
    w = job_work(spec)
    assert w.sgd_steps == len(steps) > 0
    assert w.forward_samples == sum(evaluated)


def fixed_calibration(step_s: float = 0.4, forward_s: float = 1e-4, startup_s: float = 2.0, exact: dict | None = None) -> Calibration:
    return Calibration(
        device="test", device_type="cpu", threads=1, copies=1, startup_s=startup_s,
        probes={LENET: {"batch": 8, "step_s": step_s, "forward_s": forward_s}}, steps=dict(exact or {}),
    )


def test_table_total_is_the_sum_of_its_rows(quick):
    works = study_work(quick)
    cal = fixed_calibration(exact={f"{LENET}/b64": 1.5})
    rows, total = estimate(works, cal, list(quick["experiments"]))
    # a row per experiment that trains a job: quick's t_ra trains none (t1.25 is copied, t2 derived)
    assert [r.experiment for r in rows] == [e for e in quick["experiments"] if e != "t_ra"]
    assert not any(w.job.experiment == "t_ra" for w in works)
    assert total.jobs == len(works) == sum(r.jobs for r in rows)
    assert total.sgd_steps == sum(r.sgd_steps for r in rows) == sum(w.sgd_steps for w in works)
    assert total.hours == pytest.approx(math.fsum(r.hours for r in rows), rel=1e-12)
    # one row by hand: b32 scales the probe (0.4 s at batch 8 -> 1.6 s), b64 has its own entry
    bs = [w for w in works if w.job.experiment == "batch_size"]
    by_hand = sum(w.sgd_steps * (1.6 if w.shape.batch_size == 32 else 1.5) + w.forward_samples * 1e-4 + 2.0 for w in bs) / 3600
    assert next(r.hours for r in rows if r.experiment == "batch_size") == pytest.approx(by_hand, rel=1e-12)
    b32 = next(w for w in works if w.shape.batch_size == 32)
    assert job_seconds(b32, cal) == pytest.approx(b32.sgd_steps * 1.6 + b32.forward_samples * 1e-4 + 2.0)
    assert job_seconds(bs[0], cal) == pytest.approx(bs[0].sgd_steps * 1.5 + bs[0].forward_samples * 1e-4 + 2.0)
    text = format_table(rows, total, cal)
    printed = [float(line.split()[4]) for line in text.splitlines() if re.match(r"^[a-z_0-9]+ +[\d,]+ ", line)]
    assert printed[-1] == pytest.approx(sum(printed[:-1]), abs=0.0005 * len(rows))


def test_stored_calibration_gives_deterministic_output(tmp_path, capsys):
    path = tmp_path / "cal.json"
    save_calibration(fixed_calibration(step_s=0.25, forward_s=0.0, startup_s=0.0, exact={f"{LENET}/b32": 1.0, f"{LENET}/b64": 1.0}), path)
    outs = []
    for _ in range(2):
        assert main(["cost", "--config", "config/quick.yaml", "--calibration", str(path), "--json"]) == 0
        outs.append(capsys.readouterr().out)
    assert outs[0] == outs[1]
    got = json.loads(outs[0])
    # one second per step, nothing else: hours = steps / 3600
    assert got["total"]["hours"] == pytest.approx(got["total"]["sgd_steps"] / 3600, rel=1e-12)
    assert got["total"]["sgd_steps"] == sum(w.sgd_steps for w in study_work(load_config("config/quick.yaml")))
    assert main(["cost", "--config", "config/quick.yaml", "--calibration", str(path)]) == 0
    table = capsys.readouterr().out
    quick = load_config("config/quick.yaml")
    n_jobs = len(jobs(quick)) - len(twins(quick)) - len(derived(quick))  # twins and derived jobs are not trained
    assert re.search(rf"^total +{n_jobs} ", table, re.M) and f"{got['total']['hours']:.3f}" in table


def test_calibration_missing_a_shape_is_a_user_error(tmp_path, capsys):
    path = tmp_path / "cal.json"
    cal = fixed_calibration()
    cal.probes = {"cnn7/3x32x32/q10/sequential": cal.probes[LENET]}
    save_calibration(cal, path)
    assert main(["cost", "--config", "config/quick.yaml", "--calibration", str(path)]) == 2
    assert "no entry for lenet5/1x28x28/q10/sequential" in capsys.readouterr().err


def test_calibrate_on_cpu_measures_every_shape():
    shapes = {Shape("lenet5", 1, 28, 28, 10, b, "sequential") for b in (16, 32)}
    cal = calibrate(shapes, "cpu", threads=1, steps=1, startup=False, exact_below_s=math.inf)
    assert set(cal.probes) == {LENET} and set(cal.steps) == {f"{LENET}/b16", f"{LENET}/b32"}
    assert cal.probes[LENET]["batch"] == 4 and cal.probes[LENET]["step_s"] > 0 and cal.probes[LENET]["forward_s"] > 0
    back = Calibration.from_json(json.loads(json.dumps(cal.to_json())))
    assert back == cal


def test_shipped_gpu_calibration_is_the_measured_figures():
    """The shipped H200 calibration: the suite's round section per copy-step, the reference jobs' median start-up."""
    import statistics
    from pathlib import Path

    from fedbalance.jobs.cost import calibration_from_suite, shipped_calibration

    repo = Path(__file__).resolve().parents[1]
    cal = shipped_calibration("cuda")
    cal.check()
    suite = json.loads((repo / "benchmarks/measured/gpu_suite-h200-2026-11-27.json").read_text())
    # the start-ups it was made from are kept apart from the reference set, which later replaces jobs
    measured = json.loads((repo / "benchmarks/measured/h200-startups-2026-11-27.json").read_text())["startup_s"]
    assert len(measured) == 22 and cal.startup_s == pytest.approx(statistics.median(measured.values()), abs=0.005)
    still_held = 0
    for job, startup in measured.items():
        prov = json.loads((repo / "reference/mnist" / job / "provenance.json").read_text())
        if "H200" in str((prov.get("runtime") or {}).get("device")):
            assert prov["wall_s_this_process"] - prov["wall_s_job"] == pytest.approx(startup, abs=1e-5), job
            still_held += 1
    # the set replaces a CUDA job now and then (the monitor seeds, retrained on CPU with their trajectories): most remain
    assert still_held > len(measured) // 2
    assert cal.to_json() == calibration_from_suite(suite, cal.startup_s, cal.source).to_json()
    # LeNet5 vectorised: 20 clients x 10 epochs x 32 steps took 2.1768 s
    assert cal.steps["lenet5/1x28x28/q10/vectorised/b32"] == pytest.approx(2.1768 / 6400, rel=1e-4)
    assert cal.device == "NVIDIA H200" and "2026-11-27" in cal.source and "91f7867" in cal.source


def test_cost_on_cuda_without_a_gpu_uses_the_shipped_calibration(capsys):
    from fedbalance.jobs.cost import shipped_calibration

    quick = load_config("config/quick.yaml")
    assert main(["cost", "--config", "config/quick.yaml", "--device", "cuda", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    cal = shipped_calibration("cuda")
    works = study_work(quick, device_type="cuda")
    assert got["total"]["hours"] == pytest.approx(math.fsum(job_seconds(w, cal) for w in works) / 3600, rel=1e-9)
    assert got["calibration"]["device"] == "NVIDIA H200"
    assert main(["cost", "--config", "config/quick.yaml", "--device", "cuda"]) == 0
    assert "calibration: NVIDIA H200, measured 2026-11-27 at commit 91f7867" in capsys.readouterr().out


# ---------------------------------------------------------------- shapes the calibration did not measure


def lenet_flops(h: int, w: int, q: int) -> int:
    """LeNet5's forward FLOPs by hand (2 per multiply-add): conv5x5(6, pad 2), pool, conv5x5(16), pool, fc120, fc84, Q."""
    h2, w2 = (h // 2 - 4), (w // 2 - 4)
    macs = 6 * h * w * 25 + 16 * h2 * w2 * 6 * 25 + 16 * (h2 // 2) * (w2 // 2) * 120 + 120 * 84 + 84 * q
    return 2 * macs


def test_model_flops_by_hand():
    """LeNet5 at 28x28 and 32x32, CNN7 at 32x32 (4 conv 3x3 of 32, 32, 64, 64 channels, fc 512, 128, 10)."""
    from fedbalance.jobs.cost import model_flops

    assert model_flops("lenet5", 1, 28, 28, 10) == lenet_flops(28, 28, 10) == 833_040
    assert model_flops("lenet5", 1, 32, 32, 10) == lenet_flops(32, 32, 10)
    cnn7 = 2 * (32 * 32 * 32 * 27 + 32 * 32 * 32 * 288 + 64 * 16 * 16 * 288 + 64 * 16 * 16 * 576
                + 4096 * 512 + 512 * 128 + 128 * 10)
    assert model_flops("cnn7", 3, 32, 32, 10) == cnn7


def test_a_shape_not_measured_is_estimated_by_flops_and_says_so():
    """LeNet5 at 32x32 from the measured 28x28 probe (the same model): seconds times the FLOPs ratio, by hand; the basis
    says estimated and from which; a measured shape stays measured; a path with no measured probe is an error."""
    from fedbalance.jobs.cost import CostError, with_estimates

    cal = fixed_calibration(step_s=0.4, forward_s=1e-4, exact={f"{LENET}/b32": 1.2})
    shapes = {Shape("lenet5", 1, 28, 28, 10, 32, "sequential"), Shape("lenet5", 1, 32, 32, 10, 32, "sequential")}
    est = with_estimates(cal, shapes)
    ratio = lenet_flops(32, 32, 10) / lenet_flops(28, 28, 10)
    big = Shape("lenet5", 1, 32, 32, 10, 32, "sequential")
    assert est.step_seconds(big) == pytest.approx(0.4 * ratio * 32 / 8, rel=1e-12)
    assert est.forward_seconds(big) == pytest.approx(1e-4 * ratio, rel=1e-12)
    assert est.basis(big).startswith(f"estimated (FLOPs-scaled from {LENET}") and f"x{ratio:.3g}" in est.basis(big)
    assert est.basis(Shape("lenet5", 1, 28, 28, 10, 32, "sequential")) == "measured"
    assert est.basis(Shape("lenet5", 1, 28, 28, 10, 64, "sequential")) == "measured at batch 8, scaled linearly"
    assert Calibration.from_json(json.loads(json.dumps(est.to_json()))) == est and cal.estimated == {}
    with pytest.raises(CostError, match="no measured shape on the vectorised path"):
        with_estimates(cal, {Shape("cnn7", 3, 32, 32, 10, 32, "vectorised")})


FAMILIES = {"mnist": ("mnist", "lenet5"), "cifar10": ("cifar10", "cnn7"), "fer2013": ("fer2013", "resnet18"),
            "femnist": ("femnist", "resnet50")}


def test_cost_on_cuda_covers_every_model_and_input(tmp_path, capsys):
    """A study of every dataset's model (one small family each): every family and every model shape is a row, the
    shipped H200 figures where they measured the shape, FLOPs estimates (said so) where not."""
    import yaml

    cfg = yaml.safe_load(open("config/quick.yaml"))
    cfg["datasets"] = {d: {"source": src, "model": model, "minority_classes": [0, 1]} for d, (src, model) in FAMILIES.items()}
    cfg["defaults"].update(rounds=2, path="auto")  # auto: vectorised on CUDA, as config/config.yaml
    cfg["experiments"] = {f"fam_{d}": {"datasets": [d], "seeds": [0], "losses": ["ce"], "settings": {"default": {}}}
                          for d in FAMILIES}
    path = tmp_path / "every.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert main(["cost", "--config", str(path), "--device", "cuda"]) == 0
    out = capsys.readouterr().out
    for d in FAMILIES:
        assert re.search(rf"^fam_{d} +1 ", out, re.M), d
    shapes = {line.split()[0]: line for line in out.splitlines() if re.match(r"^\w+/\d+x\d+x\d+/q\d+/", line)}
    assert set(shapes) == {"lenet5/1x28x28/q10/vectorised/b32", "cnn7/3x32x32/q10/vectorised/b32",
                           "resnet18/1x48x48/q7/vectorised/b32", "resnet50/1x28x28/q26/vectorised/b32"}
    assert shapes["lenet5/1x28x28/q10/vectorised/b32"].endswith("measured")
    assert shapes["resnet50/1x28x28/q26/vectorised/b32"].endswith("measured")
    assert "estimated (FLOPs-scaled from resnet18/1x28x28/q26/vectorised" in shapes["resnet18/1x48x48/q7/vectorised/b32"]
    assert "estimated (FLOPs-scaled from" in shapes["cnn7/3x32x32/q10/vectorised/b32"]
    assert re.search(r"^fam_fer2013 .* estimated$", out, re.M) and "torch.utils.flop_counter" in out


@pytest.mark.slow
def test_cost_of_the_whole_paper_on_cuda_prints_every_family(capsys):
    """The README's cost question for a GPU: every family of config/config.yaml and every model shape it trains, each
    saying where its seconds come from (no shape missing from the calibration)."""
    cfg = load_config("config/config.yaml")
    assert main(["cost", "--config", "config/config.yaml", "--device", "cuda"]) == 0
    out = capsys.readouterr().out
    trained = {w.job.experiment for w in study_work(cfg)}  # every family that trains a job (t_ra's are all derived)
    assert set(cfg["experiments"]) - trained == {"t_ra"}
    for family in trained:
        assert re.search(rf"^{family} +[\d,]+ +[\d,]+ +[\d,]+ +[\d.]+ +(measured|estimated|batch-scaled)", out, re.M), family
    # 2,748 before the readings family's 18 (ratio_redgrape, ratio_climb x Γ 10, 50, 100 x seeds 0-2)
    readings = cfg["experiments"]["readings"]
    assert len(readings["losses"]) * len(readings["grid"]["g"]["values"]) * len(readings["seeds"]) == 18
    assert re.search(r"^readings +18 ", out, re.M) and re.search(r"^total +2,766 ", out, re.M)
    for model in ("lenet5/1x28x28/q10", "cnn7/3x32x32/q10", "resnet18/1x48x48/q7", "resnet50/1x28x28/q26"):
        assert re.search(rf"^{model}/vectorised/b\d+ .*(measured|estimated)", out, re.M), model


def test_a_real_run_factor_scales_a_shapes_seconds_and_is_said():
    """``factors`` (measured / predicted on real runs) multiply a shape's step and forward seconds, by hand."""
    from fedbalance.jobs.cost import Calibration, CostError, Shape

    shape = Shape("lenet5", 1, 28, 28, 10, 32, "sequential")
    plain = fixed_calibration(step_s=0.4, forward_s=1e-4, exact={shape.key: 1.2})
    scaled = Calibration(**{**plain.to_json(), "factors": {shape.model_key: 1.5}})
    assert scaled.step_seconds(shape) == pytest.approx(1.2 * 1.5)
    assert scaled.forward_seconds(shape) == pytest.approx(1e-4 * 1.5)
    other = Shape("lenet5", 1, 28, 28, 10, 64, "sequential")
    assert scaled.step_seconds(other) == pytest.approx(0.4 * 64 / 8 * 1.5)
    assert "x1.5 from real runs" in scaled.basis(shape) and "real runs" not in plain.basis(shape)
    assert Calibration.from_json(scaled.to_json()).factors == {shape.model_key: 1.5}
    with pytest.raises(CostError, match="factors"):
        Calibration.from_json({**scaled.to_json(), "factors": {shape.model_key: 0.0}})


def test_a_cpu_calibration_carries_the_shipped_real_run_factors(monkeypatch):
    """calibrate on a CPU attaches the shipped factor of each shape it measured (and none with real_factors=False)."""
    from fedbalance.jobs import cost

    shape = cost.Shape("lenet5", 1, 28, 28, 10, 32, "sequential")
    monkeypatch.setattr(cost, "cpu_factors", lambda: {shape.model_key: 1.77, "cnn7/3x32x32/q10/sequential": 2.0})
    cal = cost.calibrate([shape], "cpu", threads=1, startup=False)
    assert cal.factors == {shape.model_key: 1.77}
    assert cost.calibrate([shape], "cpu", threads=1, startup=False, real_factors=False).factors == {}
    shipped = json.loads((Path(__file__).resolve().parents[1] / "src" / "fedbalance" / "calibrations" /
                          "cpu_factors.json").read_text())
    assert set(shipped) == {"factors", "source"} and all(v > 0 for v in shipped["factors"].values())
