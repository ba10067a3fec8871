"""The ``rlu`` estimator: label recovery from the output bias's change (monitor.recovered_counts,
monitor.estimate_label_recovery), exact where its linear model holds and wrong when the update is misread."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from fedbalance.monitor.estimators import REGISTRY
from fedbalance.methods.models import build_model
from fedbalance.monitor.monitor import estimate_label_recovery, recovered_counts, update_target
from fedbalance.common.records import total_variation
from fedbalance.training.sgd import SGDConfig

N_TRUE = [120.0, 6.0, 40.0, 250.0, 25.0]


def _synthetic(lr: float = 0.01, epochs: int = 3, batch: int = 32, k: int = 4) -> tuple[torch.Tensor, torch.Tensor, SGDConfig, list[int]]:
    """Residuals r_c = p_c - e_c of a random confident model and the round's bias change by the RLU model:
    dG_b = -(lr E / (B K)) sum_c N_c r_c (no momentum, no weight decay)."""
    g = torch.Generator().manual_seed(7)
    q = len(N_TRUE)
    p = torch.softmax(torch.randn(q, q, generator=g, dtype=torch.float64) + 2.0 * torch.eye(q, dtype=torch.float64), 1)
    r = p - torch.eye(q, dtype=torch.float64)
    db = -(lr * epochs / (batch * k)) * (torch.tensor(N_TRUE, dtype=torch.float64) @ r)
    totals = [100, 141, 100, 100]  # K = 4 clients, N = 441 = sum N_TRUE
    return r, db, SGDConfig(lr=lr, momentum=0.0, weight_decay=0.0, batch_size=batch, epochs=epochs), totals


def _bias_target(db: torch.Tensor, cfg: SGDConfig, totals: list[int]) -> torch.Tensor:
    dG = torch.cat([torch.zeros(db.numel(), 3, dtype=torch.float64), db.unsqueeze(1)], 1)  # [W | b], W unchanged
    return update_target(dG, w_mid=torch.zeros_like(dG), client_totals=totals, cfg=cfg)[:, -1]


def test_recovers_the_composition_exactly_where_the_model_holds() -> None:
    r, db, cfg, totals = _synthetic()
    assert sum(N_TRUE) == sum(totals)
    counts = recovered_counts(r, _bias_target(db, cfg, totals), float(sum(totals)))
    assert counts.tolist() == pytest.approx(N_TRUE, rel=1e-6)


@pytest.mark.parametrize("misread", [-1.0, 2.0, 0.5])
def test_a_bias_change_read_with_the_wrong_sign_or_scale_does_not_recover_it(misread: float) -> None:
    r, db, cfg, totals = _synthetic()
    counts = recovered_counts(r, _bias_target(misread * db, cfg, totals), float(sum(totals)))
    assert total_variation(counts.tolist(), N_TRUE) > 0.05


def test_the_weight_decay_and_the_aggregation_enter_the_scale() -> None:
    """update_target by hand: -K B (dG + lr wd S w_mid) / (lr E) with S = sum of the momentum weights (mu = 0: steps)."""
    cfg = SGDConfig(lr=0.1, momentum=0.0, weight_decay=0.01, batch_size=10, epochs=2)
    dG = torch.tensor([[1.0, 2.0]], dtype=torch.float64)
    w_mid = torch.tensor([[3.0, -1.0]], dtype=torch.float64)
    totals = [20, 40]  # steps 2 * 2 = 4 and 2 * 4 = 8: mean 6
    want = -2 * 10 * (dG + 0.1 * 0.01 * 6 * w_mid) / (0.1 * 2)
    assert update_target(dG, w_mid=w_mid, client_totals=totals, cfg=cfg) == pytest.approx(want)
    weighted = -60 * 10 * (dG + 0.1 * 0.01 * (20 * 4 + 40 * 8) / 60 * w_mid) / (0.1 * 2)
    assert update_target(dG, w_mid=w_mid, client_totals=totals, cfg=cfg, aggregation="weighted") == pytest.approx(weighted)


def test_live_on_a_model_one_full_batch_step_is_recovered_exactly() -> None:
    """One client, one full-batch SGD step from G_t on data whose per-class samples are the aux data: the bias
    moves by -lr mean_i (softmax_i - e_{y_i}) exactly, and the simulated trajectory is G_t alone."""
    torch.manual_seed(0)
    model = build_model("lenet5", 1, 4, (28, 28))
    counts = [9, 2, 5, 16]
    y = torch.cat([torch.full((n,), c) for c, n in enumerate(counts)])
    x = (torch.rand(len(y), 1, 28, 28) * 255).to(torch.uint8)
    cfg = SGDConfig(lr=0.5, momentum=0.0, weight_decay=0.0, batch_size=len(y), epochs=1)
    client = build_model("lenet5", 1, 4, (28, 28))
    client.load_state_dict(model.state_dict())
    opt = torch.optim.SGD(client.parameters(), lr=cfg.lr)
    nn.functional.cross_entropy(client(x.float() / 255), y).backward()
    opt.step()
    est = estimate_label_recovery(model, client.state_dict(), x, y, 4, cfg, [len(y)], torch.Generator().manual_seed(1),
                                  iterations=1)
    assert est.counts.tolist() == pytest.approx([float(c) for c in counts], rel=1e-4)


def test_registered_as_a_per_round_estimator() -> None:
    assert "rlu" in REGISTRY and not REGISTRY["rlu"].history


def test_rlu_pooled_is_the_ridge_mean_of_the_rounds_for_fixed_clients() -> None:
    """Same K clients every round: sum_j c_j = (K sum_t v_t + ridge N / Q) / (T K + ridge) (the normal equations
    summed over the clients), then rescaled to N."""
    from fedbalance.monitor.estimators import Track
    from fedbalance.monitor.monitor import POOLED_RIDGE

    track = Track()
    rounds = [[50.0, 30.0, 20.0], [70.0, 20.0, 10.0], [40.0, 40.0, 20.0]]
    for v in rounds:
        track.add(["a", "b"], [60, 40], {"rlu": v})
    got = REGISTRY["rlu_pooled"].fn(track).counts.tolist()
    t, k, n, q = 3, 2, 100.0, 3
    s = [(k * sum(v[c] for v in rounds) + POOLED_RIDGE * n / q) / (t * k + POOLED_RIDGE) for c in range(q)]
    assert got == pytest.approx([x * n / sum(s) for x in s], rel=1e-9)
    assert REGISTRY["rlu_pooled"].history and REGISTRY["rlu_pooled"].requires == ("rlu",)


def test_rlu_and_rlu_pooled_run_live_through_the_observer() -> None:
    """What the run calls every round: both estimators from a model pair, summing to the round's total."""
    from fedbalance.monitor.estimators import Observer
    from fedbalance.monitor.monitor import Monitor, pooled_counts

    torch.manual_seed(0)
    model = build_model("lenet5", 1, 3, (28, 28))
    aux_y = torch.arange(3).repeat_interleave(4)
    aux_x = (torch.rand(len(aux_y), 1, 28, 28) * 255).to(torch.uint8)
    cfg = SGDConfig(lr=0.05, momentum=0.9, weight_decay=5e-4, batch_size=4, epochs=1)
    obs = Observer(Monitor(aux_x, aux_y, 3, cfg), ["rlu_pooled"])
    state = {k: v + 0.01 * torch.randn_like(v) for k, v in model.state_dict().items()}
    rlu = []
    for t in range(2):
        out = obs.observe(model, state, [10, 14], torch.Generator().manual_seed(t), clients=["a", "b"])["estimates"]
        assert set(out) == {"rlu", "rlu_pooled"} and out["rlu"].counts.sum().item() == pytest.approx(24.0)
        rlu.append(out["rlu"].counts.tolist())
    assert out["rlu_pooled"].counts.tolist() == pytest.approx(pooled_counts(rlu, [[0, 1], [0, 1]], [10, 14]).tolist())
