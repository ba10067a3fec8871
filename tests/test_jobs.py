"""jobs: partitions, auxiliary data, outputs schema, determinism and resume after an interruption."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
import torch

from fedbalance.jobs.config import load_config, configured_job
from fedbalance.common.records import Job
from fedbalance.data.datasets import Dataset, load_dataset
from fedbalance.engine.fl import ROUND_COLUMNS
from fedbalance.jobs.run import (
    CHECKPOINT,
    JobError,
    auxiliary_data,
    build_partitions,
    load_partitions,
    run_job,
    save_partitions,
)
from fedbalance.data.partition import PartitionError, make_partition

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def quick() -> dict:
    return load_config("config/quick.yaml")


def tiny(quick: dict, loss: str = "ratio", seed: int = 0, **over) -> dict:
    spec = configured_job(quick, Job("losses", "mnist", "g10", loss, seed))
    spec["partition"].update(num_clients=4, majority_samples=12)
    spec["monitor"]["aux_per_class"] = 8
    spec.update(clients_per_round=3, rounds=3, batch_size=16, lr=0.05, selection="random")
    spec.update(over)
    return spec


@pytest.fixture(scope="module")
def mnist5k() -> Dataset:
    return load_dataset("mnist5k")


def test_build_save_load_partitions(quick, mnist5k, tmp_path):
    spec = tiny(quick, switch_round=1)
    parts = build_partitions(spec, mnist5k)
    assert set(parts) == {"main", "balanced"}
    y = mnist5k.y_train.numpy()
    assert parts["main"].stats(y)["gamma"] == pytest.approx(12 / round(12 / 10))
    assert parts["balanced"].stats(y)["gamma"] == 1.0
    assert parts["main"].params["seed"] == 0 and parts["balanced"].params["gamma"] == 1
    save_partitions(parts, tmp_path / "p.json")
    back = load_partitions(tmp_path / "p.json")
    assert back == parts
    with pytest.raises(PartitionError, match="does not exist"):
        load_partitions(tmp_path / "missing.json")


def test_auxiliary_data_from_test_split(quick, mnist5k):
    spec = tiny(quick)
    parts = build_partitions(spec, mnist5k)
    ax, ay = auxiliary_data(spec, mnist5k, parts)
    assert torch.bincount(ay, minlength=10).tolist() == [8] * 10
    test_rows = {bytes(r.numpy().tobytes()): int(c) for r, c in zip(mnist5k.x_test, mnist5k.y_test)}
    assert all(test_rows[bytes(r.numpy().tobytes())] == int(c) for r, c in zip(ax, ay))
    assert torch.equal(auxiliary_data(spec, mnist5k, parts)[0], ax)
    assert not torch.equal(auxiliary_data({**spec, "seed": 1}, mnist5k, parts)[0], ax)
    big = {**spec, "monitor": {**spec["monitor"], "aux_per_class": 101}}
    with pytest.raises(JobError, match="aux_per_class"):
        auxiliary_data(big, mnist5k, parts)


def test_auxiliary_data_from_unused_writers(quick):
    writers = torch.arange(12).repeat_interleave(6)
    y = torch.arange(3).repeat(24)
    x = (torch.arange(len(y)) % 256).to(torch.uint8).reshape(-1, 1, 1, 1).expand(-1, 1, 8, 8).contiguous()
    ds = Dataset("syn", x, y, x[:6], y[:6], 3, writers, None)
    part = make_partition("writers", y.numpy(), writers.numpy(), num_classes=3, num_clients=2, writers_per_client=3, gamma=1, minority_classes=(0,), seed=0)
    spec = tiny(quick, seed=0)
    spec["monitor"]["aux_per_class"] = 4
    ax, ay = auxiliary_data(spec, ds, {"main": part})
    idx = ax[:, 0, 0, 0].long()  # pixel value = sample index
    used = set(writers[part.pooled()].tolist())
    assert torch.bincount(ay, minlength=3).tolist() == [4, 4, 4]
    assert not used & set(writers[idx].tolist())
    assert torch.equal(y[idx], ay)
    with pytest.raises(JobError, match="writers no client uses"):
        auxiliary_data({**spec, "monitor": {**spec["monitor"], "aux_per_class": 13}}, ds, {"main": part})


def _rows(path) -> list[dict]:
    with open(path / "rounds.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    return [{k: v for k, v in r.items() if k != "seconds"} for r in rows]


def test_run_job_outputs_determinism_and_resume(quick, tmp_path):
    spec = tiny(quick)
    a = run_job(spec, tmp_path / "a", device="cpu", progress=False)
    on_disk = json.loads((tmp_path / "a" / "metrics.json").read_text())
    assert set(on_disk) == {"job", "config", "final", "partition", "monitor", "acknowledged_round", "device", "path", "versions", "threads", "deterministic", "precision", "chunking", "wall_time_s", "rounds"}
    assert on_disk["path"] == "sequential" and on_disk["config"]["path"] == spec.get("path", "auto")
    assert on_disk["job"] == {"experiment": "losses", "dataset": "mnist", "setting": "g10", "loss": "ratio", "seed": 0}
    assert on_disk["rounds"] == 3 and on_disk["device"] == "cpu" and on_disk["config"]["rounds"] == 3
    assert on_disk["threads"] == torch.get_num_threads() == 1 and on_disk["deterministic"] is False
    assert set(on_disk["final"]) >= {"per_class_acc", "acc", "acc_minority", "acc_majority", "auc_micro", "auc_macro", "train_loss"}
    assert set(on_disk["partition"]) == {"class_counts", "global_counts", "gamma", "cs", "mean_cs", "num_samples"}
    assert set(on_disk["monitor"]["mean_cs"]) == {*spec["monitor"]["estimators"], "released", "uniform"}  # pooled runs released
    assert set(on_disk["versions"]) == {"python", "torch", "fedbalance"}
    header = (tmp_path / "a" / "rounds.csv").read_text().splitlines()[0]
    assert header.split(",") == list(ROUND_COLUMNS)
    rows = _rows(tmp_path / "a")
    assert [r["round"] for r in rows] == ["0", "1", "2"]
    assert len(json.loads(rows[0]["est_nnls"])) == 10 and rows[0]["emp_cos"] == ""
    mean_cs = np.mean([float(r["cs_nnls"]) for r in rows])
    assert on_disk["monitor"]["mean_cs"]["nnls"] == pytest.approx(mean_cs)
    assert on_disk["final"]["train_loss"] == pytest.approx(float(rows[-1]["train_loss"]))
    assert not (tmp_path / "a" / CHECKPOINT).exists()

    class Killed(Exception):
        pass

    def kill(state, row):
        if row["round"] == 1:
            raise Killed

    with pytest.raises(Killed):
        run_job(spec, tmp_path / "b", device="cpu", progress=False, on_round=kill)
    assert (tmp_path / "b" / CHECKPOINT).exists() and not (tmp_path / "b" / "metrics.json").exists()
    b = run_job(spec, tmp_path / "b", device="cpu", progress=False)
    assert b["final"] == a["final"] and b["monitor"] == a["monitor"] and b["acknowledged_round"] == a["acknowledged_round"]
    assert _rows(tmp_path / "b") == rows
    assert not (tmp_path / "b" / CHECKPOINT).exists()

    save_partitions(build_partitions(spec, load_dataset("mnist5k")), tmp_path / "p.json")
    again = run_job(spec, tmp_path / "c", device="cpu", progress=False, partitions=load_partitions(tmp_path / "p.json"))
    assert again["final"] == a["final"] and _rows(tmp_path / "c") == rows
    other = run_job(tiny(quick, seed=1), tmp_path / "d", device="cpu", progress=False)
    assert other["final"] != a["final"]


def test_run_job_centralised_and_bad_partition(quick, tmp_path):
    spec = tiny(quick, loss="ce", mode="centralised", rounds=1, local_epochs=2)
    m = run_job(spec, tmp_path / "c", device="cpu", progress=False)
    assert m["rounds"] == 2 and m["monitor"] is None and m["acknowledged_round"] is None
    rows = _rows(tmp_path / "c")
    assert rows[0]["cs_uniform"] == "" and rows[1]["acc"] != ""
    other = make_partition("monitor", load_dataset("mnist5k").y_train.numpy(), num_classes=10, num_clients=4, samples_per_class=5, seed=0)
    with pytest.raises(JobError, match="scheme"):
        run_job(spec, tmp_path / "e", device="cpu", progress=False, partitions={"main": other})
    assert not (tmp_path / "e" / "metrics.json").exists()


def test_auto_path_is_vectorised_on_cuda_only() -> None:
    from fedbalance.jobs.run import resolve_path

    assert resolve_path("auto", torch.device("cuda")) == "vectorised"
    assert resolve_path("auto", torch.device("cpu")) == "sequential"
    assert resolve_path("sequential", torch.device("cuda")) == "sequential"


def test_auxiliary_data_first_training_samples_as_released(quick, mnist5k):
    spec = tiny(quick)
    spec["monitor"] = {**spec["monitor"], "aux_source": "train", "aux_selection": "first", "aux_per_class": 5}
    parts = build_partitions(spec, mnist5k)
    ax, ay = auxiliary_data(spec, mnist5k, parts)
    y = mnist5k.y_train.numpy()
    # the released ratio_loss_data: np.where(label_train == c)[0][0:k] for every class c
    expected = np.concatenate([np.where(y == c)[0][:5] for c in range(10)])
    assert torch.equal(ay, mnist5k.y_train[expected]) and torch.equal(ax, mnist5k.x_train[expected])
    assert torch.equal(auxiliary_data({**spec, "seed": 3}, mnist5k, parts)[0], ax)  # no randomness
    random_train = {**spec, "monitor": {**spec["monitor"], "aux_selection": "random"}}
    rx, ry = auxiliary_data(random_train, mnist5k, parts)
    assert torch.bincount(ry, minlength=10).tolist() == [5] * 10 and not torch.equal(rx, ax)


def test_trajectory_replays_the_monitor_inputs(quick, tmp_path):
    spec = tiny(quick, save_trajectory=True)
    metrics = run_job(spec, tmp_path / "job")
    traj = torch.load(tmp_path / "job" / "trajectory.pt", weights_only=False)
    assert [r["round"] for r in traj["rounds"]] == list(range(spec["rounds"]))
    assert all(sum(r["totals"]) > 0 and len(r["totals"]) == spec["clients_per_round"] for r in traj["rounds"])
    rows = list(csv.DictReader(open(tmp_path / "job" / "rounds.csv")))
    assert traj["true_composition"] == [json.loads(r["true_composition"]) for r in rows]
    assert sum(traj["true_composition"][0]) == sum(traj["rounds"][0]["totals"])
    # G_{t+1} of round t is G of round t+1; the last one is the final model
    key = next(iter(traj["final"]))
    assert not torch.equal(traj["rounds"][0]["model"][key], traj["rounds"][1]["model"][key])
    assert metrics["rounds"] == spec["rounds"]


def test_a_captured_job_is_the_eager_job_and_says_so(quick, tmp_path):
    """``capture=True`` on the vectorised path: the same rows and final numbers (the CPU runs the same kernels),
    ``"capture": true`` in metrics.json; without it metrics.json has no such key. A bad value is refused first."""
    spec = tiny(quick, path="vectorised")
    eager = run_job(spec, tmp_path / "eager", device="cpu", progress=False)
    captured = run_job(spec, tmp_path / "captured", device="cpu", progress=False, capture=True)
    assert "capture" not in eager and captured["capture"] is True
    assert captured["final"] == eager["final"] and captured["monitor"] == eager["monitor"]
    strip = lambda rows: [{k: v for k, v in r.items() if k != "seconds"} for r in rows]  # noqa: E731
    assert strip(_rows(tmp_path / "captured")) == strip(_rows(tmp_path / "eager"))
    with pytest.raises(JobError, match="capture must be true or false"):
        run_job(spec, tmp_path / "bad", device="cpu", progress=False, capture="yes")
    assert not [p for p in (tmp_path / "bad").iterdir() if p.name != ".lock"]  # nothing written but the lock
