"""Replaying the monitor on a saved trajectory reproduces the estimates the job recorded."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch

from fedbalance.jobs.config import load_config, configured_job
from fedbalance.common.records import Job
from fedbalance.jobs.run import run_job
from fedbalance.jobs.replay import load_trajectory, replay

torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> Path:
    cfg = load_config(ROOT / "config" / "quick.yaml")
    spec = configured_job(cfg, Job("losses", "mnist", "g10", "ratio", 0))
    spec["partition"].update(num_clients=4, majority_samples=12)
    spec["monitor"] = {**spec["monitor"], "aux_per_class": 8, "estimators": ["released", "nnls", "paper"]}
    spec.update(clients_per_round=3, rounds=3, batch_size=16, lr=0.05, local_epochs=2, save_trajectory=True)
    out = tmp_path_factory.mktemp("replay") / "job"
    run_job(spec, out, device="cpu")
    return out


def test_replay_reproduces_recorded_estimates(job: Path) -> None:
    rows = list(csv.DictReader(open(job / "rounds.csv", newline="")))
    replayed = replay(load_trajectory(job / "trajectory.pt"), ["released", "nnls", "paper", "simulated"])
    assert [r["round"] for r in replayed] == [int(r["round"]) for r in rows]
    for rec, rep in zip(rows, replayed):
        for m in ("released", "nnls", "paper"):
            assert json.loads(rec[f"est_{m}"]) == pytest.approx(rep[f"est_{m}"], rel=1e-12), (rec["round"], m)
            assert float(rec[f"cs_{m}"]) == pytest.approx(rep[f"cs_{m}"], rel=1e-12)
        assert float(rec["cs_uniform"]) == pytest.approx(rep["cs_uniform"], rel=1e-12)
        truth = json.loads(rec["true_composition"])
        assert sum(rep["est_simulated"]) == pytest.approx(sum(truth))
        assert min(rep["est_simulated"]) >= 0.0


def test_replay_pools_the_released_estimates_through_the_selected_clients(job: Path) -> None:
    from fedbalance.engine.fl import select_clients
    from fedbalance.monitor.monitor import cosine_similarity, pooled_counts

    traj = load_trajectory(job / "trajectory.pt")
    spec = traj["spec"]
    replayed = replay(traj, ["pooled"])
    rows = list(csv.DictReader(open(job / "rounds.csv", newline="")))
    raw = [json.loads(r["est_released"]) for r in rows]  # what the job recorded, not the replay
    sets = [select_clients("fixed", 4, 3, 0, t).tolist() for t in range(len(rows))]
    sizes = json.loads((job / "metrics.json").read_text())["partition"]["class_counts"]
    sizes = [sum(c) for c in sizes]
    for t, rep in enumerate(replayed):
        want = pooled_counts(raw[: t + 1], sets[: t + 1], sizes)
        assert rep["est_pooled"] == pytest.approx(want.tolist(), rel=1e-9)
        assert rep["cs_pooled"] == pytest.approx(cosine_similarity(want, json.loads(rows[t]["true_composition"])), rel=1e-9)
    assert spec["selection"] == "fixed"


def test_recorded_rows_match_the_replay(job: Path) -> None:
    from fedbalance.jobs.replay import recorded

    fast = recorded(job)
    slow = replay(load_trajectory(job / "trajectory.pt"), ["released", "nnls", "paper", "pooled"])
    for a, b in zip(fast, slow, strict=True):
        for m in ("released", "nnls", "paper", "pooled"):
            assert a[f"est_{m}"] == pytest.approx(b[f"est_{m}"], rel=1e-9) and a[f"cs_{m}"] == pytest.approx(b[f"cs_{m}"], rel=1e-9)


def test_monitor_replay_benchmark_reads_recorded_jobs(job: Path) -> None:
    import subprocess
    import sys

    from fedbalance.jobs.replay import recorded

    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "monitor_replay.py"), "--recorded", str(job)],
                         capture_output=True, text=True, check=True, env={"PYTHONPATH": str(ROOT / "src")}, cwd=ROOT)
    report = json.loads(out.stdout)
    (entry,) = report["jobs"].values()
    rows = recorded(job)
    for m in ("released", "pooled", "uniform"):
        cs = [r[f"cs_{m}"] for r in rows]
        assert entry[m]["per_round"] == [round(c, 4) for c in cs]
        assert entry[m]["min"] == round(min(cs), 4) and entry[m]["mean"] == round(sum(cs) / len(cs), 4)
    assert "simulated" not in entry  # a job records simulated only when it ran it


@pytest.mark.parametrize("selection, switch", [("random", None), ("fixed", 2)])
def test_a_job_records_pooled_from_its_own_released_estimates(tmp_path: Path, selection: str, switch: int | None) -> None:
    from fedbalance.engine.fl import select_clients
    from fedbalance.monitor.monitor import pooled_counts

    cfg = load_config(ROOT / "config" / "quick.yaml")
    spec = configured_job(cfg, Job("losses", "mnist", "g10", "ce", 0))
    spec["partition"].update(num_clients=5, majority_samples=12)
    spec["monitor"] = {**spec["monitor"], "aux_per_class": 8, "record": True, "estimators": ["pooled", "nnls"]}
    spec.update(clients_per_round=3, rounds=4, batch_size=16, lr=0.05, local_epochs=1, selection=selection,
                switch_round=switch, eval_every=1)
    metrics = run_job(spec, tmp_path / "job", device="cpu")
    rows = list(csv.DictReader(open(tmp_path / "job" / "rounds.csv", newline="")))
    raw = [json.loads(r["est_released"]) for r in rows]  # released runs as pooled's base
    sets = [select_clients(selection, 5, 3, 0, t).tolist() for t in range(4)]
    if switch is not None:  # after the switch the same ids are other clients (the balanced partition)
        sets = [s if t < switch else [5 + c for c in s] for t, s in enumerate(sets)]
    from fedbalance.data.datasets import load_dataset
    from fedbalance.jobs.run import build_partitions

    parts = build_partitions(spec, load_dataset("mnist5k"))
    sizes = [len(c) for c in parts["main"].clients] + ([len(c) for c in parts["balanced"].clients] if switch else [])
    assert sizes[:5] == [sum(c) for c in metrics["partition"]["class_counts"]]
    for t in range(4):
        want = pooled_counts(raw[: t + 1], sets[: t + 1], [float(x) for x in sizes])
        assert json.loads(rows[t]["est_pooled"]) == pytest.approx(want.tolist(), rel=1e-9), t
    assert sum(json.loads(rows[-1]["est_pooled"])) == pytest.approx(sum(json.loads(rows[-1]["true_composition"])))


def test_a_replay_hands_the_estimators_the_loss_the_clients_trained_with(job: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Ratio-Loss job's π of round t is the weights it recorded in round t - 1 (all ones in round 0); a replay feeds
    its loss the same before round t's estimators run, and ``drift`` gets it."""
    import fedbalance.monitor.estimators as est

    seen: list[list[float]] = []
    real = est.estimate_drift

    def spy(*args, loss_fn=None, **kwargs):
        seen.append(loss_fn.weight.double().tolist())
        return real(*args, loss_fn=loss_fn, **kwargs)

    monkeypatch.setattr(est, "estimate_drift", spy)
    replayed = replay(load_trajectory(job / "trajectory.pt"), ["drift", "drift_pooled"])
    rows = list(csv.DictReader(open(job / "rounds.csv", newline="")))
    want = [[1.0] * len(seen[0])] + [json.loads(r["weights"]) for r in rows[:-1]]
    assert len(seen) == len(rows)
    for got, w in zip(seen, want, strict=True):
        assert got == pytest.approx(w, rel=1e-6)
    assert any(w != want[0] for w in want[1:])  # the job's π did move off 1
    for rep, rec in zip(replayed, rows, strict=True):
        assert sum(rep["est_drift"]) == pytest.approx(sum(json.loads(rec["true_composition"])))
        assert min(rep["est_drift_pooled"]) >= 0.0


PLUGIN = '''
from fedbalance.monitor.estimators import Estimator
from fedbalance.monitor.monitor import estimate_composition


def same_as_released(r):
    m = r.monitor
    return estimate_composition(r.dW, r.dG, n_aux=m.n_aux, client_totals=r.totals, method="released", t_ra=m.t_ra,
                                aggregation=m.aggregation)


last_released = Estimator("last_released", lambda track: [2 * v for v in track.series("released")[-1]], history=True,
                          requires=("released",))
'''


def test_a_replay_runs_plugin_estimators_named_by_dotted_path(job: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A per-round plug-in that reads the copies as ``released`` does gives ``released``'s numbers; a history plug-in
    that doubles the round's ``released`` estimate gives twice them; the command line's NAME=module:attribute names them."""
    from fedbalance.monitor.estimators import named_targets

    (tmp_path / "myestimators.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    names, targets = named_targets(["released", "mine=myestimators:same_as_released", "twice=myestimators:last_released"])
    assert names == ["released", "mine", "twice"] and targets == {"mine": "myestimators:same_as_released",
                                                                   "twice": "myestimators:last_released"}
    rows = replay(load_trajectory(job / "trajectory.pt"), names, targets=targets)
    for row in rows:
        assert row["est_mine"] == pytest.approx(row["est_released"], rel=1e-12)
        assert row["est_twice"] == pytest.approx([2 * v for v in row["est_released"]], rel=1e-12)
    with pytest.raises(ValueError, match="NAME=module:attribute"):
        named_targets(["mine=notapath"])
