"""The estimator registry (one function + one line per estimator) and the ``shrunk`` estimator."""

from __future__ import annotations

import io
import json
import math
import sys
from contextlib import redirect_stdout
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from fedbalance.jobs.config import load_config, configured_job
from fedbalance.common.records import Job
from fedbalance.monitor.estimators import REGISTRY, Track, estimator, plan, shrinkage_weight, shrunk_counts, track_estimates
from fedbalance.monitor.monitor import Estimate, pooled_counts
from fedbalance.common.records import ESTIMATORS

REPO = Path(__file__).resolve().parents[1]
QUICK = REPO / "config" / "quick.yaml"
TOY_SHARE = np.array([1.0, 2, 3, 4, 5, 6, 7, 8, 9, 10])


@pytest.fixture()
def toy():
    """A toy per-round estimator, registered for the test only: N split in the fixed proportions 1 : 2 : ... : Q."""

    @estimator("toy")
    def toy_fn(r) -> Estimate:
        counts = torch.as_tensor(TOY_SHARE / TOY_SHARE.sum() * sum(r.totals), dtype=torch.float64)
        return Estimate(counts=counts, kept=torch.ones(10, dtype=torch.long), method="toy", dropped=0)

    yield "toy"
    del REGISTRY["toy"]


def test_registry_holds_the_recorded_names_and_orders_requirements() -> None:
    assert set(ESTIMATORS) <= set(REGISTRY)
    assert [e.name for e in plan(["shrunk", "paper"])] == ["released", "paper", "shrunk"]
    assert [e.name for e in plan(["pooled", "shrunk"])] == ["released", "pooled", "shrunk"]
    with pytest.raises(ValueError, match="unknown composition estimator"):
        plan(["bogus"])
    with pytest.raises(ValueError, match="not registered per-round"):
        estimator("bad", history=True, requires=("pooled",))(lambda t: None)


def _tiny_spec(estimators: list[str], rounds: int = 3) -> dict:
    spec = configured_job(load_config(QUICK), Job("losses", "mnist", "g10", "ratio", 0))
    spec["partition"].update(num_clients=5, majority_samples=8)
    spec["monitor"].update(aux_per_class=4, record=True, estimators=estimators)
    spec.update(clients_per_round=3, rounds=rounds, local_epochs=1, batch_size=16, save_trajectory=True, path="sequential")
    return spec


def _cs(a, b) -> float:
    a, b = np.asarray(a, float), np.asarray(b, float)
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def test_a_toy_estimator_reaches_rounds_csv_and_the_replay_benchmark(tmp_path: Path, toy: str) -> None:
    from fedbalance.jobs.run import run_job

    torch.set_num_threads(1)
    out = tmp_path / "job"
    metrics = run_job(_tiny_spec([toy, "pooled"]), out, device="cpu", progress=False)
    rounds = pd.read_csv(out / "rounds.csv")
    assert {"est_toy", "cs_toy"} <= set(rounds.columns)
    for _, row in rounds.iterrows():
        truth = json.loads(row.true_composition)
        want = TOY_SHARE / TOY_SHARE.sum() * sum(truth)
        np.testing.assert_allclose(json.loads(row.est_toy), want, rtol=1e-12)
        assert row.cs_toy == pytest.approx(_cs(want, truth), abs=1e-12)
    assert metrics["monitor"]["mean_cs"]["toy"] == pytest.approx(rounds.cs_toy.mean())
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import monitor_replay
    finally:
        sys.path.pop(0)
    buf = io.StringIO()
    with redirect_stdout(buf):
        monitor_replay.main(["--trajectory", str(out / "trajectory.pt"), "--estimators", toy, "pooled"])
    job = next(iter(json.loads(buf.getvalue())["jobs"].values()))
    assert job[toy]["per_round"] == [round(c, 4) for c in rounds.cs_toy]
    assert job["pooled"]["per_round"] == [round(c, 4) for c in rounds.cs_pooled]


def test_history_estimators_from_the_record_equal_the_run(tmp_path: Path) -> None:
    from fedbalance.jobs.run import run_job
    from fedbalance.jobs.replay import recorded

    torch.set_num_threads(1)
    run_job(_tiny_spec(["shrunk", "pooled", "paper"], rounds=4), tmp_path, device="cpu", progress=False)
    run = pd.read_csv(tmp_path / "rounds.csv")
    rows = recorded(tmp_path)
    for name in ("pooled", "shrunk"):
        assert [r[f"cs_{name}"] for r in rows] == pytest.approx(run[f"cs_{name}"].tolist(), abs=1e-12)
        for r, est in zip(rows, run[f"est_{name}"], strict=True):
            np.testing.assert_allclose(r[f"est_{name}"], json.loads(est), rtol=1e-12)


def test_shrinkage_weight_by_hand() -> None:
    assert shrinkage_weight(5.0, 1.0) == pytest.approx(0.8)  # past the test: 1 - 1/5
    assert shrinkage_weight(20.0, 2.0) == pytest.approx(0.9)
    assert shrinkage_weight(4.0, 1.0) == 0.0  # not past 4 x noise: the uniform guess
    assert shrinkage_weight(3.0, 1.0) == 0.0 and shrinkage_weight(1.0, 4.0) == 0.0
    assert shrinkage_weight(3.0, 1.0, evidence=1.0) == pytest.approx(2 / 3)  # the plain positive part
    assert shrinkage_weight(0.0, 1.0) == 0.0 and shrinkage_weight(math.nan, 1.0) == 0.0


def test_shrunk_counts_same_clients_by_hand() -> None:
    # two rounds, the same two clients (totals 60 + 40 = 100); released said (70, 30) then (60, 40)
    raw = torch.tensor([[70.0, 30.0], [60.0, 40.0]], dtype=torch.float64)
    selected, totals = [[0, 1], [0, 1]], [60.0, 40.0]
    counts, w = shrunk_counts(raw, selected, totals)
    p = pooled_counts(raw, selected, totals)
    u = torch.tensor([50.0, 50.0], dtype=torch.float64)
    # noise: per class the variance over rounds (ddof 1) of (70, 60) and (30, 40) = 50 each, summed 100, / T = 50
    deviation = float(((p - u) ** 2).sum())
    assert w == pytest.approx(max(0.0, 1 - 50.0 / deviation))
    torch.testing.assert_close(counts, u + w * (p - u))
    # round 0 alone: nothing to measure the noise with -> the uniform guess
    first, w0 = shrunk_counts(raw[:1], selected[:1], totals)
    assert w0 == 0.0 and first.tolist() == [50.0, 50.0]


def test_shrunk_counts_changing_clients_by_hand() -> None:
    # random selection: round compositions scatter around uniform; noise = spread of the deviations
    raw = torch.tensor([[55.0, 45.0], [48.0, 52.0], [51.0, 49.0]], dtype=torch.float64)
    selected, totals = [[0, 1], [2, 3], [1, 2]], [50.0, 50.0, 50.0, 50.0]
    counts, w = shrunk_counts(raw, selected, totals)
    dev = raw - 50.0
    noise = float(dev.var(0, unbiased=True).sum())
    p = pooled_counts(raw, selected, totals)
    assert w == pytest.approx(shrinkage_weight(float(((p - 50.0) ** 2).sum()), noise))
    assert w == 0.0 and counts.tolist() == [50.0, 50.0]  # the pooled deviation is within the noise


def test_shrunk_counts_keeps_the_guess_until_the_evidence_is_strong() -> None:
    """Changing clients whose estimates lean one way by 1-4 x their noise: the plain positive part would move,
    the test keeps the uniform guess; a lean far past the noise is kept, shrunk by 1 - noise / deviation."""
    selected, totals = [[0, 1], [2, 3], [1, 2]], [50.0, 50.0, 50.0, 50.0]
    weak = torch.tensor([[58.0, 42.0], [50.0, 50.0], [56.0, 44.0]], dtype=torch.float64)
    strong = torch.tensor([[80.0, 20.0], [78.0, 22.0], [82.0, 18.0]], dtype=torch.float64)
    for raw, moved in ((weak, False), (strong, True)):
        noise = float((raw - 50.0).var(0, unbiased=True).sum())
        p = pooled_counts(raw, selected, totals)
        deviation = float(((p - 50.0) ** 2).sum())
        counts, w = shrunk_counts(raw, selected, totals)
        assert (deviation > 4 * noise) is moved and (noise < deviation) is True
        assert w == (pytest.approx(1 - noise / deviation) if moved else 0.0)
        torch.testing.assert_close(counts, 50.0 + w * (p - 50.0))


def test_track_estimates_computes_history_only() -> None:
    track = Track()
    track.add([0, 1], [60, 40], {"released": [70.0, 30.0]})
    track.add([0, 1], [60, 40], {"released": [60.0, 40.0]})
    out = track_estimates(track, ["pooled", "shrunk", "released"])
    assert set(out) == {"pooled", "shrunk"}
    torch.testing.assert_close(out["pooled"].counts, pooled_counts(torch.tensor(track.series("released")), [[0, 1]] * 2, [60.0, 40.0]))


def test_observer_groups_share_a_required_estimator_by_hand() -> None:
    from fedbalance.jobs.replay import observer_groups

    assert observer_groups(["released", "pooled", "shrunk", "paper"]) == [("released", "pooled", "shrunk"), ("paper",)]
    assert observer_groups(["rlu_pooled", "rlu", "pooled"]) == [("rlu", "rlu_pooled"), ("pooled",)]
    assert observer_groups(["shrunk"]) == [("shrunk",)]
    with pytest.raises(ValueError, match="unknown composition estimator"):
        observer_groups(["released", "bogus"])


def test_a_replay_runs_a_shared_requirement_once_and_gives_each_estimator_its_run_value(tmp_path: Path) -> None:
    """A per-round estimator counted per call: replaying it with a history estimator that requires it calls it once
    a round, and both columns equal the replay of each alone."""
    from fedbalance.jobs.run import run_job
    from fedbalance.monitor.monitor import pooled_counts
    from fedbalance.jobs.replay import load_trajectory, replay
    from fedbalance.monitor.estimators import _as_estimate, _client_index

    calls = []

    @estimator("counted")
    def counted(r) -> Estimate:
        calls.append(1)
        counts = torch.as_tensor(TOY_SHARE / TOY_SHARE.sum() * sum(r.totals), dtype=torch.float64) + len(calls) % 3
        return Estimate(counts=counts, kept=torch.ones(10, dtype=torch.long), method="counted", dropped=0)

    @estimator("counted_pooled", history=True, requires=("counted",))
    def counted_pooled(track: Track) -> Estimate:
        selected, n = _client_index(track)
        return _as_estimate(pooled_counts(track.series("counted"), selected, n), "counted_pooled")

    try:
        torch.set_num_threads(1)
        run_job(_tiny_spec(["released"], rounds=3), tmp_path, device="cpu", progress=False)
        traj = load_trajectory(tmp_path / "trajectory.pt")
        together = replay(traj, ["counted_pooled", "counted"])
        assert len(calls) == 3
        calls.clear()
        alone = replay(traj, ["counted"])
        calls.clear()
        pooled_alone = replay(traj, ["counted_pooled"])
        for a, b, c in zip(together, alone, pooled_alone, strict=True):
            assert a["est_counted"] == b["est_counted"]
            assert a["est_counted_pooled"] == c["est_counted_pooled"]
            assert a["seconds_counted"] == a["seconds_counted_pooled"]
    finally:
        del REGISTRY["counted"], REGISTRY["counted_pooled"]


def test_sharpened_counts_by_hand() -> None:
    from fedbalance.monitor.estimators import sharpened_counts

    # shares (0.6, 0.3, 0.1) of 200 -> squared 0.36, 0.09, 0.01 (sum 0.46) -> 200 x (36, 9, 1) / 46
    out = sharpened_counts(torch.tensor([120.0, 60.0, 20.0]))
    torch.testing.assert_close(out, torch.tensor([36.0, 9.0, 1.0], dtype=torch.float64) / 46 * 200)
    # a square-root compressed reading of (0.8, 0.2) is given back exactly: sqrt shares (2/3, 1/3)
    torch.testing.assert_close(sharpened_counts(torch.tensor([2.0, 1.0]) * 30), torch.tensor([72.0, 18.0], dtype=torch.float64))
    assert sharpened_counts(torch.full((4,), 25.0)).tolist() == [25.0] * 4  # uniform stays uniform
    assert sharpened_counts(torch.tensor([3.0, 1.0]), 1.0).tolist() == [3.0, 1.0]  # exponent 1: the estimate itself
    assert sharpened_counts(torch.zeros(3)).tolist() == [0.0] * 3


def test_sharpened_is_shrunk_squared_and_uniform_without_evidence() -> None:
    track = Track()
    for raw in ([80.0, 20.0], [78.0, 22.0], [82.0, 18.0]):
        track.add([0, 1], [50, 50], {"released": raw})
    out = track_estimates(track, ["shrunk", "sharpened"])
    s = out["shrunk"].counts
    torch.testing.assert_close(out["sharpened"].counts, s**2 / (s**2).sum() * 100)
    assert float(out["sharpened"].counts[0]) > float(s[0]) > 50  # the majority class moves further from the guess
    weak = Track()
    weak.add([0, 1], [50, 50], {"released": [58.0, 42.0]})  # round 0: shrunk has no noise measure -> the guess
    assert track_estimates(weak, ["sharpened"])["sharpened"].counts.tolist() == [50.0, 50.0]
