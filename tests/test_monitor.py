"""Tests of the monitor: hand-computed equations, exact recovery, a known FedAvg round, Theorem 2."""

from __future__ import annotations

import inspect
import math

import pytest
import torch
from torch import nn

from fedbalance.monitor.estimators import Observer
from fedbalance.monitor.monitor import (
    Acknowledger,
    Estimate,
    Monitor,
    aux_updates,
    class_ratios,
    cosine_similarity,
    estimate_composition,
    estimate_simulated,
    momentum_weights,
    number_estimates,
    simulated_estimate,
    ratio_weights,
    uniform_guess,
    unit_ratios,
)
from fedbalance.training.train import SGDConfig, average_stacked, local_sgd, train_copies

@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny models: one thread is much faster on a shared CPU."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# dW[q, p, i] for Q = 3 classes, s = 2 units; dG[p, i]; n_a = 2, K = 4, N = 100.
DW = torch.tensor(
    [
        [[2.0, 1.0], [-1.0, -2.0], [-1.0, 0.5]],
        [[-1.0, -0.5], [3.0, 1.0], [-2.0, -1.0]],
        [[-1.0, -1.5], [-1.0, 0.0], [4.0, 2.0]],
    ],
    dtype=torch.float64,
)
DG = torch.tensor([[0.5, 0.2], [0.1, -0.3], [1.0, 0.25]], dtype=torch.float64)
# Worked by hand: o = [[-1, -1], [-1, -1], [-1.5, -0.25]].
RA_HAND = torch.tensor([[2.0, 1.0], [3.0, 1.0], [4 / 1.5, 8.0]], dtype=torch.float64)
N_HAND = torch.tensor([[104 / 3, 50.8], [25.2, 48.8], [158 / 5.5, 12.0]], dtype=torch.float64)


def test_unit_ratios_by_hand() -> None:
    torch.testing.assert_close(unit_ratios(DW), RA_HAND)
    torch.testing.assert_close(unit_ratios(DW, signed=True), -RA_HAND)


def test_number_estimates_by_hand() -> None:
    torch.testing.assert_close(number_estimates(DW, DG, 2, 4, 100), N_HAND)
    # per-class n_a: class 1 with 4 samples halves its per-sample update (the off-diagonal mean changes too)
    n = number_estimates(DW, DG, torch.tensor([2, 4, 2]), 4, 100)
    o00 = (-1.0 / 4 + -1.0 / 2) / 2
    assert n[0, 0].item() == pytest.approx((4 * 0.5 - 100 * o00) / (2 / 2 - o00))


def test_paper_and_released_by_hand() -> None:
    paper = estimate_composition(DW, DG, n_aux=2, client_totals=[25] * 4, method="paper", rescale=False)
    # kept (Ra > 1.25): unit 0 of nodes 0 and 1, both units of node 2
    torch.testing.assert_close(paper.counts, torch.tensor([104 / 3, 25.2, (158 / 5.5 + 12) / 2], dtype=torch.float64))
    assert paper.kept.tolist() == [1, 1, 2] and paper.dropped == 0 and paper.fallback == 0
    # released filter keeps (0,0)->0, (1,0)->1, (2,0)->2, (2,1)->2; all estimates lie in (0, 1.5 N/Q = 50)
    rel = estimate_composition(DW, DG, n_aux=2, client_totals=[25] * 4, method="released", rescale=False)
    torch.testing.assert_close(rel.counts, paper.counts)
    assert rel.kept.tolist() == [1, 1, 2]
    scaled = estimate_composition(DW, DG, n_aux=2, client_totals=[25] * 4, method="paper")
    assert scaled.counts.sum().item() == pytest.approx(100.0)
    torch.testing.assert_close(scaled.counts / scaled.counts.sum(), paper.counts / paper.counts.sum())


def test_class_without_kept_unit_gets_uniform_share() -> None:
    est = estimate_composition(DW, DG, n_aux=2, client_totals=[25] * 4, method="paper", t_ra=3.5, rescale=False)
    # only unit 1 of node 2 (Ra = 8) passes; nodes 0 and 1 fall back to N/Q
    torch.testing.assert_close(est.counts, torch.tensor([100 / 3, 100 / 3, 12.0], dtype=torch.float64))
    assert est.fallback == 2 and est.kept.tolist() == [0, 0, 1]


def test_class_ratios_by_hand() -> None:
    torch.testing.assert_close(class_ratios(DW), torch.tensor([2.0, 3.0, (4 / 1.5 + 8) / 2], dtype=torch.float64))
    torch.testing.assert_close(class_ratios(DW, variant="released"), torch.tensor([2.0, 3.0, 6 / 1.75], dtype=torch.float64))
    assert class_ratios(DW, clip=2.5).max().item() == 2.5


def _structured(q: int, s: int, gen: torch.Generator) -> torch.Tensor:
    """dW whose off-diagonal updates of a node are equal across classes: the paper's equation is exact there."""
    own = torch.rand(q, s, generator=gen, dtype=torch.float64) + 0.5
    other = -(torch.rand(q, s, generator=gen, dtype=torch.float64) * 0.3 + 0.05)
    dw = other.unsqueeze(0).expand(q, q, s).clone()
    idx = torch.arange(q)
    dw[idx, idx] = own
    return dw


@pytest.mark.parametrize("aggregation", ["mean", "weighted"])
def test_exact_recovery(aggregation: str) -> None:
    gen = torch.Generator().manual_seed(0)
    q, s, n_a = 5, 16, 32
    totals = [300, 250, 150, 200]
    n_true = torch.tensor([420.0, 80.0, 300.0, 55.0, 45.0], dtype=torch.float64)
    assert n_true.sum().item() == sum(totals)
    scale = len(totals) if aggregation == "mean" else sum(totals)
    dw = _structured(q, s, gen)
    dg = torch.einsum("q,qps->ps", n_true, dw) / (n_a * scale)
    assert bool((unit_ratios(dw) > 1.25).all())
    for method in ("paper", "nnls"):
        est = estimate_composition(dw, dg, n_aux=n_a, client_totals=totals, method=method, aggregation=aggregation, rescale=False)
        torch.testing.assert_close(est.counts, n_true, rtol=1e-6, atol=1e-6)
        assert est.method == method and est.dropped == 0
    generic = torch.randn(q, q, s, generator=gen, dtype=torch.float64)
    dg = torch.einsum("q,qps->ps", n_true, generic) / (n_a * scale)
    est = estimate_composition(generic, dg, n_aux=n_a, client_totals=totals, method="nnls", aggregation=aggregation)
    torch.testing.assert_close(est.counts, n_true, rtol=1e-6, atol=1e-6)


def test_nnls_drops_non_finite_weights() -> None:
    gen = torch.Generator().manual_seed(1)
    q, s, n_a, totals = 4, 8, 32, [200, 200]
    n_true = torch.tensor([150.0, 100.0, 90.0, 60.0], dtype=torch.float64)
    dw = torch.randn(q, q, s, generator=gen, dtype=torch.float64)
    dg = torch.einsum("q,qps->ps", n_true, dw) / (n_a * len(totals))
    dg[1, 3] = float("nan")
    dw[2, 0, 5] = float("inf")
    est = estimate_composition(dw, dg, n_aux=n_a, client_totals=totals, method="nnls")
    torch.testing.assert_close(est.counts, n_true, rtol=1e-6, atol=1e-6)
    assert est.dropped == 2 and int(est.kept[0]) == q * s - 2
    est = estimate_composition(dw, torch.full_like(dg, float("nan")), n_aux=n_a, client_totals=totals, method="nnls")
    assert bool(torch.isnan(est.counts).all())


def test_released_drops_out_of_range() -> None:
    gen = torch.Generator().manual_seed(1)
    q, s, n_a, totals = 4, 8, 32, [250, 250]
    n_true = torch.tensor([50.0, 120.0, 130.0, 200.0], dtype=torch.float64)  # class 3 = 1.6 N/Q > 1.5 N/Q
    dw = _structured(q, s, gen)
    dg = torch.einsum("q,qps->ps", n_true, dw) / (n_a * len(totals))
    est = estimate_composition(dw, dg, n_aux=n_a, client_totals=totals, method="released", rescale=False)
    torch.testing.assert_close(est.counts[:3], n_true[:3])
    assert est.counts[3].item() == pytest.approx(500 / 4) and est.fallback == 1 and est.dropped == s


def test_estimator_signature_has_no_class_counts() -> None:
    params = set(inspect.signature(estimate_composition).parameters)
    assert params == {"dW", "dG", "n_aux", "client_totals", "method", "t_ra", "aggregation", "rescale"}
    assert set(inspect.signature(Observer.observe).parameters) == {
        "self", "model_t", "state_t1", "totals", "generator", "clients", "dW", "loss_fn"}
    assert set(inspect.signature(estimate_simulated).parameters) == {
        "model_t", "state_t1", "aux_x", "aux_y", "num_classes", "cfg", "client_totals", "generator", "aggregation",
        "iterations", "mix"}
    assert set(inspect.signature(simulated_estimate).parameters) == {"a", "dG", "w_mid", "client_totals", "cfg", "aggregation"}


def test_uniform_cosine_and_weights() -> None:
    torch.testing.assert_close(uniform_guess([100, 50, 50], 4), torch.full((4,), 50.0, dtype=torch.float64))
    assert cosine_similarity([1.0, 0.0], [1.0, 1.0]) == pytest.approx(1 / math.sqrt(2))
    assert cosine_similarity(uniform_guess([90], 3), [10, 20, 60]) == pytest.approx(90 / (math.sqrt(3) * math.sqrt(4100)))
    torch.testing.assert_close(ratio_weights(torch.tensor([0.0, 2.0, 30.0])), torch.tensor([1.0, 1.2, 4.0], dtype=torch.float64))
    torch.testing.assert_close(ratio_weights(torch.tensor([2.0]), alpha=0.5, beta=1.0), torch.tensor([2.5], dtype=torch.float64))


def test_acknowledger_sequence() -> None:
    ack = Acknowledger(threshold=3.0, rounds=2)
    balanced, skewed, zero = [10, 10, 10], [40, 10, 10], [5, 0, 5]
    assert [ack.update(c) for c in (skewed, balanced, skewed)] == [False, False, False]
    state = ack.state_dict()
    assert state == {"threshold": 3.0, "rounds": 2, "streak": 1, "acknowledged": False}
    assert ack.update(zero) is True  # max/min = inf
    assert ack.update(balanced) is True  # latched
    resumed = Acknowledger()
    resumed.load_state_dict(state)
    assert resumed.update(skewed) is True and resumed.streak == 2
    assert Acknowledger.imbalance([30, 10, 10]) == 3.0
    assert Acknowledger(threshold=3.0, rounds=1).update([30, 10, 10]) is False  # strictly greater


class TinyNet(nn.Module):
    """FedModel-like MLP: classifier(features(x)), features non-negative."""

    def __init__(self, d: int, s: int, q: int) -> None:
        super().__init__()
        self.body = nn.Linear(d, s)
        self.classifier = nn.Linear(s, q)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.body(x))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


Q, D = 4, 12


def _blobs(counts: list[int], gen: torch.Generator, centres: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    y = torch.cat([torch.full((n,), c, dtype=torch.long) for c, n in enumerate(counts)])
    x = centres[y] + 0.7 * torch.randn(len(y), D, generator=gen)
    return x, y


def _centres() -> torch.Tensor:
    return 2.0 * torch.randn(Q, D, generator=torch.Generator().manual_seed(7))


def test_aux_updates_shape_and_signs() -> None:
    torch.manual_seed(0)
    model = TinyNet(D, 16, Q)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    x, y = _blobs([32] * Q, torch.Generator().manual_seed(1), _centres())
    cfg = SGDConfig(lr=0.1, momentum=0.0, weight_decay=0.0, batch_size=32, epochs=1)
    dw = aux_updates(model, x, y, Q, cfg, torch.Generator().manual_seed(2))
    assert dw.shape == (Q, Q, 16)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    # one full-batch SGD step on class p alone: node p's weights rise, every other node's fall (Y >= 0)
    eye = torch.eye(Q, dtype=torch.bool)
    assert bool((dw[eye] >= 0).all()) and bool((dw[~eye] <= 0).all())
    copy = TinyNet(D, 16, Q)
    copy.load_state_dict(before)
    local_sgd(copy, x[y == 2], y[y == 2], nn.CrossEntropyLoss(), cfg, torch.Generator().manual_seed(3))
    torch.testing.assert_close(dw[2], copy.classifier.weight.detach() - before["classifier.weight"])


def _fedavg_round(model: nn.Module, compositions: list[list[int]], cfg: SGDConfig, seed: int) -> tuple[dict, list[int]]:
    gen = torch.Generator().manual_seed(seed)
    data = [_blobs(c, gen, _centres()) for c in compositions]
    gens = [torch.Generator().manual_seed(seed + 1 + j) for j in range(len(data))]
    stacked, _ = train_copies(model, data, nn.CrossEntropyLoss(), cfg, gens)
    return average_stacked(stacked), [sum(c) for c in compositions]


def test_monitor_on_a_known_round() -> None:
    torch.manual_seed(0)
    model = TinyNet(D, 32, Q)
    cfg = SGDConfig(lr=0.01, momentum=0.9, weight_decay=5e-4, batch_size=32, epochs=1)
    aux_x, aux_y = _blobs([32] * Q, torch.Generator().manual_seed(11), _centres())
    monitor = Observer(Monitor(aux_x, aux_y, Q, cfg), ("paper", "released", "nnls"))
    right = [[160, 32, 0, 96], [128, 0, 32, 160], [96, 32, 32, 128]]
    wrong = [[0, 160, 128, 32], [32, 128, 160, 0], [32, 96, 96, 32]]
    truth = torch.tensor(right).sum(0).double()
    assert cosine_similarity(truth, torch.tensor(wrong).sum(0).double()) < 0.6
    state_right, totals = _fedavg_round(model, right, cfg, 100)
    state_wrong, _ = _fedavg_round(model, wrong, cfg, 200)
    gen = torch.Generator().manual_seed(5)
    dw = monitor.monitor.updates(model, gen)
    good = monitor.observe(model, state_right, totals, gen, clients=[0, 1, 2], dW=dw)
    bad = monitor.observe(model, state_wrong, totals, gen, clients=[3, 4, 5], dW=dw)
    uniform = cosine_similarity(uniform_guess(totals, Q), truth)
    # released caps each class at 1.5 N/Q (= 336 < 384 here), so it cannot follow the majority classes fully
    for method, drop in (("paper", 0.3), ("released", 0.1), ("nnls", 0.3)):
        est: Estimate = good["estimates"][method]
        assert est.counts.shape == (Q,) and est.counts.sum().item() == pytest.approx(sum(totals))
        cs_good = cosine_similarity(est.counts, truth)
        cs_bad = cosine_similarity(bad["estimates"][method].counts, truth)
        assert cs_good > uniform, method
        assert cs_good - cs_bad > drop, method
    assert cosine_similarity(good["estimates"]["nnls"].counts, truth) > 0.98
    torch.testing.assert_close(good["weights"], 1.0 + 0.1 * good["ratios"])


def test_theorem2_minority_ratios_larger() -> None:
    torch.manual_seed(0)
    model = TinyNet(D, 32, Q)
    gen = torch.Generator().manual_seed(3)
    x, y = _blobs([600, 600, 12, 12], gen, _centres())
    cfg = SGDConfig(lr=0.01, momentum=0.9, weight_decay=5e-4, batch_size=32, epochs=3)
    local_sgd(model, x, y, nn.CrossEntropyLoss(), cfg, gen)
    aux_x, aux_y = _blobs([32] * Q, torch.Generator().manual_seed(4), _centres())
    dw = aux_updates(model, aux_x, aux_y, Q, SGDConfig(lr=0.01), torch.Generator().manual_seed(5))
    for variant in ("paper", "released"):
        ra = class_ratios(dw, variant=variant)
        assert ra[2:].min() > ra[:2].max(), (variant, ra)


def test_momentum_weights_match_torch_sgd() -> None:
    # a constant gradient g for S steps of SGD with momentum mu moves a parameter by -lr g sum_s w_s
    for mu, steps in ((0.9, 37), (0.0, 5), (0.5, 1)):
        p = torch.zeros(1, requires_grad=True, dtype=torch.float64)
        opt = torch.optim.SGD([p], lr=0.1, momentum=mu)
        for _ in range(steps):
            p.grad = torch.full_like(p, 3.0)
            opt.step()
        closed = steps / (1 - mu) - mu * (1 - mu**steps) / (1 - mu) ** 2
        assert float(momentum_weights(steps, mu).sum()) == pytest.approx(closed)
        assert float(p.detach()) == pytest.approx(-0.1 * 3.0 * closed)


@pytest.mark.parametrize("aggregation", ["mean", "weighted"])
def test_simulated_estimate_exact_where_linear(aggregation: str) -> None:
    gen = torch.Generator().manual_seed(3)
    q, s = 4, 6
    a = torch.randn(q, q, s + 1, generator=gen, dtype=torch.float64)
    counts = torch.tensor([300.0, 20.0, 180.0, 500.0], dtype=torch.float64)
    totals = [400, 350, 250]
    cfg = SGDConfig(lr=0.01, momentum=0.9, weight_decay=5e-4, batch_size=32, epochs=3)
    w_mid = torch.randn(q, s + 1, generator=gen, dtype=torch.float64)
    steps = [3 * -(-n // 32) for n in totals]
    decay_per = [n / 0.1 - 0.9 * (1 - 0.9**n) / 0.01 for n in steps]
    if aggregation == "mean":
        scale, decay = len(totals), sum(decay_per) / len(totals)
    else:
        scale, decay = sum(totals), sum(n * d for n, d in zip(totals, decay_per)) / sum(totals)
    dG = -(cfg.lr * cfg.epochs / (cfg.batch_size * scale)) * torch.einsum("q,qps->ps", counts, a)
    dG = dG - cfg.lr * cfg.weight_decay * decay * w_mid
    est = simulated_estimate(a, dG, w_mid=w_mid, client_totals=totals, cfg=cfg, aggregation=aggregation)
    torch.testing.assert_close(est.counts, counts * (sum(totals) / counts.sum()))
    nan = simulated_estimate(a, dG * float("nan"), w_mid=w_mid, client_totals=totals, cfg=cfg)
    assert bool(torch.isnan(nan.counts).all()) and nan.dropped == a[0].numel()


def test_ratio_clip_bounds_the_weights() -> None:
    # class 0's aux update on its own row dwarfs the others' mean -> Ra_0 = |40| / |0.01| = 4000
    dW = torch.full((3, 3, 2), -0.01, dtype=torch.float64)
    dW[0, 0] = 40.0
    dW[1, 1] = 0.02
    dW[2, 2] = 0.02
    cfg = SGDConfig()
    x, y = torch.zeros(3, 4), torch.arange(3)
    ratios = class_ratios(dW, t_ra=1.25)
    assert float(ratios[0]) == pytest.approx(4000.0)
    for clip, top in ((None, 4000.0), (5000.0, 4000.0), (50.0, 50.0)):
        monitor = Monitor(x, y, 3, cfg, clip=clip)
        _, pi = monitor.weights(dW)
        assert float(pi[0]) == pytest.approx(1.0 + 0.1 * top)
        assert float(pi[1]) == pytest.approx(1.0 + 0.1 * 2.0)


def test_pooled_counts_fixed_clients_is_the_mean_of_the_rounds() -> None:
    from fedbalance.monitor.monitor import pooled_counts

    raw = torch.tensor([[50.0, 30.0, 20.0], [40.0, 40.0, 20.0], [60.0, 20.0, 20.0], [46.0, 34.0, 20.0]])
    n = torch.tensor([30.0, 70.0])  # two clients, both every round: N = 100
    got = pooled_counts(raw, [[0, 1]] * 4, n, ridge=1e-9)
    assert torch.allclose(got, torch.tensor([49.0, 31.0, 20.0], dtype=torch.float64), atol=1e-6)
    # a strong ridge pulls every client to the uniform guess n_j / Q
    assert torch.allclose(pooled_counts(raw, [[0, 1]] * 4, n, ridge=1e9), torch.full((3,), 100 / 3, dtype=torch.float64), atol=1e-4)


def test_pooled_counts_recovers_the_composition_of_changing_client_sets() -> None:
    from fedbalance.monitor.monitor import pooled_counts

    gen = torch.Generator().manual_seed(0)
    comp = torch.randint(0, 20, (6, 4), generator=gen).double()  # 6 clients' fixed class counts
    sets = [sorted(torch.randperm(6, generator=gen)[:3].tolist()) for _ in range(14)]
    truth = torch.stack([comp[s].sum(0) for s in sets])
    a = torch.zeros(14, 6)
    for i, s in enumerate(sets):
        a[i, s] = 1
    assert torch.linalg.matrix_rank(a) == 6  # the clients are identifiable from these rounds
    for t in (7, 10, 14):
        got = pooled_counts(truth[:t], sets[:t], comp.sum(1), ridge=1e-9)
        assert torch.allclose(got, truth[t - 1], atol=1e-5), t


def test_pooled_counts_averages_noise_away() -> None:
    from fedbalance.monitor.monitor import cosine_similarity, pooled_counts

    gen = torch.Generator().manual_seed(1)
    truth = torch.tensor([300.0, 300.0, 30.0, 300.0, 30.0], dtype=torch.float64)
    noisy = truth * (1 + 0.3 * torch.randn(20, 5, generator=gen, dtype=torch.float64)).clamp_min(0.05)
    single = sum(cosine_similarity(v, truth) for v in noisy) / 20
    pooled = cosine_similarity(pooled_counts(noisy, [[0, 1, 2]] * 20, torch.tensor([320.0, 320.0, 320.0])), truth)
    assert pooled > single and pooled > 0.99
    with pytest.raises(ValueError, match="one selected set per round"):
        pooled_counts(noisy, [[0]] * 3, torch.ones(3))


def test_stabilised_readings_by_hand() -> None:
    """``median`` and ``sums``: Ra_p from the units above T_Ra, computed here from dW by hand (Q = 3, s = 4)."""
    from fedbalance.monitor.monitor import class_ratios

    q, s = 3, 4
    own = torch.tensor([[2.0, 3.0, 1.0, 5.0], [4.0, 1.0, 2.0, 2.0], [1.0, 1.0, 1.0, 1.0]], dtype=torch.float64)
    other = torch.tensor([[1.0, 1.0, 1.0, 1e-4], [1.0, 2.0, 1.0, 1.0], [2.0, 2.0, 2.0, 2.0]], dtype=torch.float64)
    dW = torch.zeros(q, q, s, dtype=torch.float64)
    for p in range(q):
        dW[p, p] = own[p]
        for j in range(q):
            if j != p:
                dW[j, p] = -other[p]  # every other class lowers node p by |o|: the others' mean is -|o|
    # class 0: unit ratios 2, 3, 1, 50000; above 1.25: units 0, 1, 3
    # class 1: ratios 4, 0.5, 2, 2 -> units 0, 2, 3; class 2: all 0.5 -> none passes, all units count
    want_median = [3.0, 2.0, 0.5]
    want_sums = [(2 + 3 + 5) / (1 + 1 + 1e-4), (4 + 2 + 2) / 3.0, 4.0 / 8.0]
    want_mean = [(2 + 3 + 50000) / 3, (4 + 2 + 2) / 3, 0.5]
    torch.testing.assert_close(class_ratios(dW, t_ra=1.25, variant="median", clip=None), torch.tensor(want_median, dtype=torch.float64))
    torch.testing.assert_close(class_ratios(dW, t_ra=1.25, variant="sums", clip=None), torch.tensor(want_sums, dtype=torch.float64))
    torch.testing.assert_close(class_ratios(dW, t_ra=1.25, variant="paper", clip=None), torch.tensor(want_mean, dtype=torch.float64))
    # the near-zero denominator that makes the paper's mean explode barely moves the stabilised readings
    assert class_ratios(dW, t_ra=1.25, variant="paper", clip=None)[0] > 1000 * class_ratios(dW, t_ra=1.25, variant="sums", clip=None)[0]
