"""The ``drift`` estimator and its parts (fedbalance.monitor.drift): (4') holds exactly for real runs with their own loss,
the simulated-client layout keeps the counts, the weighted simulated client is the real one where it can be, and the
estimator recovers a composition exactly where its simulation reproduces the client."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from fedbalance.monitor.drift import (
    RunSums,
    aux_client,
    clients_residuals,
    estimate_drift,
    residual_matrix,
    run_residuals,
    simulated_clients,
    weighted_run_residuals,
)
from fedbalance.methods.losses import CrossEntropyLoss
from fedbalance.methods.models import build_model
from fedbalance.monitor.monitor import bias_target, class_gradients, recovered_counts
from fedbalance.common.records import total_variation
from fedbalance.training.sgd import SGDConfig, local_sgd

Q = 4


def _client(counts: list[int], seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    y = torch.cat([torch.full((n,), c) for c, n in enumerate(counts)])
    return (torch.rand(len(y), 1, 28, 28, generator=g) * 255).to(torch.uint8), y


def _model() -> nn.Module:
    torch.manual_seed(0)
    return build_model("lenet5", 1, Q, (28, 28))


def _round(model: nn.Module, data: list[tuple[torch.Tensor, torch.Tensor]], loss: nn.Module, cfg: SGDConfig) -> dict:
    """G_{t+1}: the clients' local runs (generator i for client i) averaged."""
    states = []
    for i, (x, y) in enumerate(data):
        m = copy.deepcopy(model)
        local_sgd(m, x, y, copy.deepcopy(loss), cfg, torch.Generator().manual_seed(i))
        states.append(m.state_dict())
    return {k: sum(s[k] for s in states) / len(states) for k in states[0]}


def test_the_clients_own_runs_solve_back_to_their_counts_exactly() -> None:
    """Minibatches, momentum, several epochs, a class-weighted loss: with each client's own run and loss, (4') is an
    identity (no weight decay), so the bias solve returns the round's counts; the same runs read with plain CE do not."""
    model = _model()
    counts = [[12, 3, 0, 9], [0, 5, 14, 2]]
    data = [_client(c, 10 + i) for i, c in enumerate(counts)]
    cfg = SGDConfig(lr=0.05, momentum=0.9, weight_decay=0.0, batch_size=8, epochs=3)
    loss = nn.CrossEntropyLoss(weight=torch.tensor([1.0, 3.0, 0.5, 2.0]))
    target = bias_target(model, _round(model, data, loss, cfg), [len(y) for _, y in data], cfg, "mean")
    truth = [float(sum(c)) for c in zip(*counts, strict=True)]
    runs = clients_residuals(model, data, loss, cfg, [torch.Generator().manual_seed(i) for i in range(2)], Q)
    assert runs.counts.tolist() == truth
    got = recovered_counts(residual_matrix(runs, cfg), target, sum(truth))
    assert got.tolist() == pytest.approx(truth, rel=1e-5, abs=1e-4)
    plain = clients_residuals(model, data, nn.CrossEntropyLoss(), cfg, [torch.Generator().manual_seed(i) for i in range(2)], Q)
    assert total_variation(recovered_counts(residual_matrix(plain, cfg), target, sum(truth)).tolist(), truth) > 0.05


def test_a_single_full_batch_step_reads_the_class_means_of_softmax_minus_onehot() -> None:
    """One full-batch step of plain CE: r_c = mean over class c of softmax - e_c at G_t (``class_gradients``' bias column)."""
    model = _model()
    x, y = _client([5, 2, 7, 3], 3)
    cfg = SGDConfig(lr=0.1, momentum=0.0, weight_decay=0.0, batch_size=len(y), epochs=1)
    runs = run_residuals(model, x, y, nn.CrossEntropyLoss(), cfg, [torch.arange(len(y))], Q)
    want = class_gradients(model, x, y, Q)[:, :, -1]
    assert residual_matrix(runs, cfg) == pytest.approx(want, abs=1e-6)
    assert run_residuals(model, x, y, nn.CrossEntropyLoss(), cfg, [torch.arange(len(y))], Q).sums.tolist() == runs.sums.tolist()


@pytest.mark.parametrize(("counts", "clients", "k"), [([250, 25, 250, 250], 5, 2), ([100.4, 7.6, 0, 52], 3, 3),
                                                      ([9, 9, 9, 9], 1, 4), ([30, 1, 2, 40], 2, 1)])
def test_the_simulated_clients_hold_the_composition_and_a_few_classes_each(counts: list[float], clients: int, k: int) -> None:
    layout = simulated_clients(counts, clients, k)
    assert len(layout) == clients
    per_class = [sum(col) for col in zip(*layout, strict=True)]
    assert per_class == [round(c) for c in counts]
    assert all(all(isinstance(v, int) and v >= 0 for v in row) for row in layout)
    cyclic = [{(j * k + i) % Q for i in range(k)} for j in range(clients)]
    for j, row in enumerate(layout):
        held = {c for c, v in enumerate(row) if v > 0}
        assert held <= cyclic[j] | {c for c in range(Q) if c % clients == j and not any(c in s for s in cyclic)}


def test_a_simulated_client_draws_every_aux_sample_before_repeating_one() -> None:
    x, y = _client([4, 3, 5, 2], 1)
    cx, cy = aux_client(x, y, [4, 6, 0, 1], torch.Generator().manual_seed(0))
    assert torch.bincount(cy, minlength=Q).tolist() == [4, 6, 0, 1]
    own = x[y == 0]
    assert sorted(map(bytes, cx[cy == 0].numpy())) == sorted(map(bytes, own.numpy()))  # the 4 of class 0, once each
    ones = cx[cy == 1]
    assert len({bytes(a.numpy()) for a in ones}) == 3  # 6 drawn from 3: all three, twice
    with pytest.raises(ValueError, match="class 3"):
        aux_client(x[y != 3], y[y != 3], [1, 1, 1, 1], torch.Generator().manual_seed(0))


def test_the_weighted_client_is_the_real_one_where_the_aux_data_are_its_data() -> None:
    """Full batches (B = the aux set): each step's batch is all aux samples, so at the aux data's own shares (weights 1)
    the weighted simulated client takes the real client's steps and reads the same sums; other shares read others."""
    model = _model()
    counts = [20, 4, 9, 15]
    x, y = _client(counts, 5)
    cfg = SGDConfig(lr=0.1, momentum=0.9, weight_decay=0.0, batch_size=len(y), epochs=4)
    real = run_residuals(model, x, y, nn.CrossEntropyLoss(), cfg, [torch.arange(len(y))] * cfg.epochs, Q)
    shares = torch.tensor(counts, dtype=torch.float64) / len(y)
    sim = weighted_run_residuals(model, x, y, CrossEntropyLoss(), cfg, shares, len(y), torch.Generator().manual_seed(3))
    assert sim.counts.tolist() == pytest.approx([float(c) for c in counts])
    assert sim.sums == pytest.approx(real.sums, abs=1e-5)
    again = weighted_run_residuals(model, x, y, CrossEntropyLoss(), cfg, shares, len(y), torch.Generator().manual_seed(3))
    assert torch.equal(again.sums, sim.sums)
    other = weighted_run_residuals(model, x, y, CrossEntropyLoss(), cfg, torch.full((Q,), 0.25, dtype=torch.float64), len(y),
                                   torch.Generator().manual_seed(3))
    assert (residual_matrix(other, cfg) - residual_matrix(real, cfg)).abs().max() > 1e-3


def test_the_estimator_recovers_a_client_its_simulation_reproduces() -> None:
    """Started at the truth, where its simulated client is the real one (the case above), ``drift`` returns the truth;
    from uniform shares it moves towards it; a loss the client did not train with moves it away."""
    model = _model()
    counts = [20, 4, 9, 15]
    x, y = _client(counts, 5)
    cfg = SGDConfig(lr=0.1, momentum=0.9, weight_decay=0.0, batch_size=len(y), epochs=5)
    after = copy.deepcopy(model)
    local_sgd(after, x, y, CrossEntropyLoss(), cfg, torch.Generator().manual_seed(0))
    args = (model, after.state_dict(), x, y, Q, cfg, [len(y)])
    est = estimate_drift(*args, torch.Generator().manual_seed(1), initial=counts, iterations=3)
    assert est.counts.tolist() == pytest.approx([float(c) for c in counts], rel=1e-4)
    uniform = [sum(counts) / Q] * Q
    one = estimate_drift(*args, torch.Generator().manual_seed(1), iterations=1)
    assert total_variation(one.counts.tolist(), counts) < total_variation(uniform, counts) / 2
    wrong = estimate_drift(*args, torch.Generator().manual_seed(1), initial=counts, iterations=1,
                           loss_fn=nn.CrossEntropyLoss(weight=torch.tensor([1.0, 4.0, 2.0, 1.0])))
    assert total_variation(wrong.counts.tolist(), counts) > 0.01
    with pytest.raises(ValueError, match="aggregation 'weighted'"):
        estimate_drift(*args, torch.Generator(), aggregation="weighted")


def test_run_sums_add_per_class() -> None:
    a = RunSums(torch.ones(2, 2, dtype=torch.float64), torch.tensor([1.0, 2.0], dtype=torch.float64))
    b = a + a
    assert b.sums.tolist() == [[2.0, 2.0], [2.0, 2.0]] and b.counts.tolist() == [2.0, 4.0]


def _ceiling_module():
    from conftest import load_script

    return load_script("benchmarks/monitor_ceiling.py")


def test_the_ceiling_benchmark_solves_the_real_clients_exactly(tmp_path) -> None:
    """benchmarks/monitor_ceiling.py on a small Ratio-Loss job: with the round's real clients replayed (their batches,
    their loss with the π the job recorded the round before) the solve returns the truth; the uniform row is the guess."""
    from pathlib import Path

    from fedbalance.jobs.config import configured_job, load_config
    from fedbalance.jobs.run import run_job
    from fedbalance.common.records import Job

    root = Path(__file__).resolve().parents[1]
    spec = configured_job(load_config(root / "config" / "quick.yaml"), Job("losses", "mnist", "g10", "ratio", 0))
    spec["partition"].update(num_clients=4, majority_samples=12)
    spec["monitor"] = {**spec["monitor"], "aux_per_class": 8, "estimators": ["pooled", "released"]}
    spec.update(clients_per_round=3, rounds=3, batch_size=16, lr=0.05, local_epochs=2, save_trajectory=True)
    out = tmp_path / "losses" / "mnist" / "g10" / "ratio" / "seed0"
    run_job(spec, out, device="cpu")
    ceiling = _ceiling_module()
    ceiling.main(["--trajectory", str(out / "trajectory.pt"), "--rounds", "0", "2", "--iterations", "1",
                  "--data-dir", str(tmp_path), "--out", str(tmp_path / "ceiling")])
    import json

    doc = json.loads((tmp_path / "ceiling" / "g10_ratio_seed0.json").read_text())
    assert doc["group"] == "g10/ratio" and [r["round"] for r in doc["rounds"]] == [0, 2]
    for row in doc["rounds"]:
        truth = row["truth"]
        assert row["clients"]["tv"] < 1e-3, row["clients"]
        assert row["uniform"]["tv"] == pytest.approx(total_variation([1.0] * len(truth), truth))
        assert sum(row["drift"]["estimate"]) == pytest.approx(sum(truth))
        assert {"clients_ce", "per_client_true", "one_client_true", "one_client_weighted_true", "released", "pooled"} <= set(row)
    table = ceiling.tabulate([tmp_path / "ceiling" / "g10_ratio_seed0.json"])
    assert "| g10/ratio | clients | 0.000 (0.000) |" in table


SPY = '''
SEEN = []


def spy(r):
    loss = r.loss_fn
    SEEN.append({k: getattr(loss, k).double().tolist() for k in ("counts", "weight") if getattr(loss, k, None) is not None})
    return [float(sum(r.totals)) / r.monitor.num_classes] * r.monitor.num_classes
'''


@pytest.mark.parametrize("loss", ["la_local", "ratio"])
def test_an_estimator_reads_the_loss_the_server_sent_not_a_clients_counts(loss: str, tmp_path, monkeypatch) -> None:
    """A run hands its estimators the round's loss as sent (``losses.as_sent``): the Ratio Loss's π of the round (the
    weights recorded the round before; ones in round 0); a loss that trains on each client's own label counts holds
    none of them (ones), though sequential training installs them on the run's module."""
    import csv
    import importlib
    import json
    from pathlib import Path

    import yaml

    from fedbalance.jobs.config import load_config, resolve_job
    from fedbalance.jobs.run import run_job
    from fedbalance.common.records import Job

    (tmp_path / "spymod.py").write_text(SPY)
    monkeypatch.syspath_prepend(str(tmp_path))
    from fedbalance.common import plugins

    plugins.forget()
    monkeypatch.delitem(__import__("sys").modules, "spymod", raising=False)
    spymod = importlib.import_module("spymod")
    cfg = yaml.safe_load((Path(__file__).resolve().parents[1] / "config" / "quick.yaml").read_text())
    cfg["estimators"] = {"spy": "spymod:spy"}
    cfg["defaults"]["monitor"]["estimators"] = ["pooled", "released", "spy"]
    cfg["experiments"] = {"losses": {"datasets": ["mnist"], "losses": [loss], "seeds": [0], "params": {"monitor": {"record": True}},
                                     "grid": {"g": {"key": "partition.gamma", "values": [10]}}}}
    spec = resolve_job(load_config(cfg), Job("losses", "mnist", "g10", loss, 0)).as_dict()
    spymod.SEEN.clear()  # the estimator contract's one call on a synthetic round, at load (fedbalance.jobs.contracts)
    spec["partition"].update(num_clients=4, majority_samples=12)
    spec["monitor"] = {**spec["monitor"], "aux_per_class": 8}
    spec.update(clients_per_round=3, rounds=3, batch_size=16, lr=0.05, local_epochs=1, path="sequential")
    out = tmp_path / "job"
    run_job(spec, out, device="cpu")
    plugins.forget()
    assert len(spymod.SEEN) == 3
    if loss == "la_local":
        assert all(s["counts"] == [1.0] * len(s["counts"]) for s in spymod.SEEN)
    else:
        with open(out / "rounds.csv", newline="") as fh:
            rows = [json.loads(line["weights"]) for line in csv.DictReader(fh)]
        want = [[1.0] * len(rows[0])] + rows[:-1]
        for seen, w in zip(spymod.SEEN, want, strict=True):
            assert seen["weight"] == pytest.approx(w, rel=1e-6)
