"""benchmarks/monitor_shares.py: the replay table's measures from a tiny saved trajectory, against its rounds.csv."""

from __future__ import annotations

import csv
import json
import statistics
from pathlib import Path

import pytest
import torch

from fedbalance.jobs.config import configured_job, load_config
from fedbalance.jobs.run import run_job
from fedbalance.common.records import Job
from conftest import load_script

torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parents[1]


def _bench():
    return load_script("benchmarks/monitor_shares.py")


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> Path:
    cfg = load_config(ROOT / "config" / "quick.yaml")
    spec = configured_job(cfg, Job("losses", "mnist", "g10", "ce", 0))
    spec["partition"].update(num_clients=4, majority_samples=12)
    spec["monitor"] = {**spec["monitor"], "record": True, "aux_per_class": 8, "estimators": ["released", "nnls"],
                       "acknowledge": {"threshold": 1.5, "rounds": 2}}
    spec.update(clients_per_round=3, rounds=4, batch_size=16, lr=0.05, local_epochs=2, save_trajectory=True)
    out = tmp_path_factory.mktemp("shares") / "job"
    run_job(spec, out, device="cpu")
    return out


def test_rounds_to_acknowledge_by_hand() -> None:
    ack = _bench().rounds_to_acknowledge
    series = [[1, 1], [4, 1], [1, 1], [4, 1], [4, 1], [4, 1]]
    assert ack(series, 3.0, 3) == 5  # rounds 3, 4, 5 in a row
    assert ack(series, 3.0, 1) == 1
    assert ack(series, 5.0, 1) is None


def test_the_table_of_a_replayed_trajectory_matches_its_rounds_csv(job: Path) -> None:
    bench = _bench()
    report = bench.build_report([], [job / "trajectory.pt"], ["released", "nnls"], "data")
    (group,) = report["groups"].values()
    with open(job / "rounds.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    later = [r for r in rows if int(r["round"]) >= 1]
    assert group["rounds"] == len(later) == 3
    for m in ("released", "nnls"):
        tv, minority, over = [], [], []
        for r in later:
            est, truth = json.loads(r[f"est_{m}"]), json.loads(r["true_composition"])
            p, q = [v / sum(truth) for v in truth], [v / sum(est) for v in est]
            tv.append(sum(abs(a - b) for a, b in zip(p, q)) / 2)
            minority += [q[c] / p[c] for c in (2, 4, 7)]
        assert group[m]["tv_mean"] == pytest.approx(statistics.fmean(tv), rel=1e-9)
        assert group[m]["tv_max"] == pytest.approx(max(tv), rel=1e-9)
        assert group[m]["minority_share_ratio_median"] == pytest.approx(statistics.median(minority), rel=1e-9)
        streak, first = 0, None
        for t, r in enumerate(rows):
            est = json.loads(r[f"est_{m}"])
            ratio = max(est) / min(est) if min(est) > 0 else float("inf")
            streak = streak + 1 if ratio > 1.5 else 0
            first = t if first is None and streak >= 2 else first
        assert group[m]["acknowledged_round"] == [first]
    assert "| g10/ce | released |" in bench.markdown(report)


@pytest.mark.skipif(not (ROOT / "reference" / "mnist" / "losses").is_dir(), reason="no reference set in this checkout")
def test_the_acknowledged_round_is_the_one_the_runs_recorded() -> None:
    """The reference jobs acknowledged on their default estimator (pooled): the table's round is metrics.json's."""
    bench = _bench()
    folders = sorted((ROOT / "reference" / "mnist" / "losses" / "mnist" / "g10").glob("*/seed*"))
    report = bench.build_report(folders, [], ["pooled"], "data")
    for key, group in report["groups"].items():
        want = [json.loads((ROOT / "reference" / "mnist" / "losses" / "mnist" / key / f"seed{k}" / "metrics.json").read_text())
                ["acknowledged_round"] for k in range(group["jobs"])]
        assert group["pooled"]["acknowledged_round"] == want, key


def test_the_bias_solve_with_the_real_clients_residuals_recovers_a_ce_round(tmp_path: Path) -> None:
    """benchmarks/monitor_bias.py on a live CE job: the round's clients retrained from G_t give the residuals under
    which ``recovered_counts`` reads the averaged bias change back as the true composition (sign, scale, momentum
    and weight decay of ``update_target`` checked on real training)."""
    bias = load_script("benchmarks/monitor_bias.py")
    from fedbalance.jobs.replay import load_trajectory, replay_setup

    job = configured_job(load_config(ROOT / "config" / "quick.yaml"), Job("losses", "mnist", "g10", "ce", 0))
    job["partition"].update(num_clients=4, majority_samples=40)
    job["monitor"] = {**job["monitor"], "aux_per_class": 16}
    job.update(clients_per_round=4, rounds=2, batch_size=32, lr=0.005, local_epochs=3, save_trajectory=True)
    run_job(job, tmp_path / "job", device="cpu")
    traj = load_trajectory(tmp_path / "job" / "trajectory.pt")
    row = bias.round_row(replay_setup(traj), traj, 1, [2, 4, 7])
    assert row["tv"]["clients"] < 0.03
    assert row["tv"]["clients"] < row["tv"]["static"]


def test_saved_replays_give_the_table_of_the_replay_and_a_missing_estimator_is_refused(job: Path, tmp_path: Path) -> None:
    bench = _bench()
    direct = bench.build_report([], [job / "trajectory.pt"], ["released", "nnls"], "data", save=tmp_path / "saved")
    (saved,) = sorted((tmp_path / "saved").glob("*.json"))
    record = json.loads(saved.read_text())
    assert record["estimators"] == ["released", "nnls"] and record["trajectory"] == str(job / "trajectory.pt")
    again = bench.build_report([], [], ["released", "nnls"], "data", replayed=[record])
    assert json.dumps(again, default=float) == json.dumps(direct, default=float)
    with pytest.raises(SystemExit, match=r"replayed without \['paper'\]"):
        bench.build_report([], [], ["released", "paper"], "data", replayed=[record])


def test_the_oracle_exponent_undoes_a_known_compression() -> None:
    """Estimates that are the truth's shares to the power 1/3 (renormalised): the oracle reads exponent 3.0 and puts
    every round at the goal; the estimates themselves (exponent 1) are not."""
    from fedbalance.common.records import share_ratios

    bench = _bench()
    rows = []
    for t, truth in enumerate([[50.0, 30, 15, 5], [60.0, 25, 10, 5], [40.0, 40, 15, 5]]):
        root = [v ** (1 / 3) for v in truth]
        est = [v / sum(root) * 100 for v in root]
        rows.append({"round": t + 1, "est_pooled": est, "shares_pooled": share_ratios(est, truth)})
    best = bench.oracle_exponent(rows, "pooled", 1)
    assert best["exponent"] == 3.0 and best["rounds_at_goal"] == best["rounds"] == 3
    assert best["tv_mean"] == pytest.approx(0, abs=1e-9) and best["worst_share_median"] == pytest.approx(1)
    assert bench.oracle_exponent(rows, "pooled", 2)["rounds"] == 2  # from round 2 on
