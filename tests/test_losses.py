"""Losses against numpy / hand-computed values, reductions, stability, get_loss and vmap."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fedbalance.methods.losses import (
    LOSSES,
    RATIO_WEIGHTING,
    GHMCLoss,
    RatioLoss,
    cross_entropy,
    focal_loss,
    get_loss,
    ghmc_loss,
    ghmc_weights,
    mfe_loss,
    mse_loss,
    ratio_loss,
    balanced_softmax_loss,
    fedlc_loss,
    fedrs_loss,
    logit_adjusted_loss,
    feed,
    receives,
)
from fedbalance.training.vectorised import make_masked_loss, takes_client_counts

LOGITS = np.array(
    [[2.0, -1.0, 0.5, 0.0], [0.1, 0.2, 3.0, -2.0], [-1.5, 4.0, 0.3, 1.0], [0.0, 0.0, 0.0, 0.0], [1.0, 2.0, -3.0, 0.5]]
)
TARGET = np.array([0, 2, 3, 1, 0])


def _np_log_softmax(z: np.ndarray) -> np.ndarray:
    m = z.max(axis=1, keepdims=True)
    return z - (m + np.log(np.exp(z - m).sum(axis=1, keepdims=True)))


def _np_ce(z: np.ndarray, y: np.ndarray) -> np.ndarray:
    return -_np_log_softmax(z)[np.arange(len(y)), y]


def _np_sq_err(z: np.ndarray, y: np.ndarray) -> np.ndarray:
    p = np.exp(_np_log_softmax(z))
    onehot = np.eye(z.shape[1])[y]
    return ((p - onehot) ** 2).sum(axis=1)


def _t(z: np.ndarray, y: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.tensor(z, dtype=torch.float64), torch.tensor(y)


def _close(actual: torch.Tensor, expected: np.ndarray | float) -> None:
    np.testing.assert_allclose(actual.detach().numpy(), expected, rtol=1e-10, atol=1e-12)


def test_cross_entropy_matches_numpy() -> None:
    z, y = _t(LOGITS, TARGET)
    ce = _np_ce(LOGITS, TARGET)
    _close(cross_entropy(z, y, "none"), ce)
    _close(cross_entropy(z, y), ce.mean())
    _close(cross_entropy(z, y), F.cross_entropy(z, y).numpy())


def test_focal_matches_numpy_and_gamma0_is_ce() -> None:
    z, y = _t(LOGITS, TARGET)
    pt = np.exp(-_np_ce(LOGITS, TARGET))
    expected = -0.25 * (1 - pt) ** 2 * np.log(pt)
    _close(focal_loss(z, y, gamma=2.0, alpha=0.25, reduction="none"), expected)
    _close(focal_loss(z, y), (-((1 - pt) ** 2) * np.log(pt)).mean())
    _close(focal_loss(z, y, gamma=0.0), _np_ce(LOGITS, TARGET).mean())
    _close(get_loss("focal", 4, gamma=0.0)(z, y), _np_ce(LOGITS, TARGET).mean())


def test_ratio_loss_weighting() -> None:
    z, y = _t(LOGITS, TARGET)
    ce = _np_ce(LOGITS, TARGET)
    _close(ratio_loss(z, y, torch.ones(4)), ce.mean())
    pi = np.array([2.0, 1.0, 1.0, 1.0])
    hand = (2 * ce[0] + ce[1] + ce[2] + ce[3] + 2 * ce[4]) / 5
    _close(ratio_loss(z, y, torch.tensor(pi)), hand)
    _close(ratio_loss(z, y, torch.tensor(pi), "sum"), hand * 5)
    torch_weighted = F.cross_entropy(z, y, weight=torch.tensor(pi)).item()
    assert abs(torch_weighted - hand) > 1e-3
    np.testing.assert_allclose(torch_weighted, hand * 5 / 7)
    pi2 = np.array([0.5, 3.0, 1.5, 1.2])
    _close(ratio_loss(z, y, torch.tensor(pi2), "none"), pi2[TARGET] * ce)


def test_ratio_loss_is_alpha_times_ce_plus_beta_times_the_ratio_weighted_ce() -> None:
    """pi_p = alpha + beta Ra_p (Eq. L_RL) enters the per-sample loss linearly: L = alpha CE + beta mean_i(Ra_{y_i} CE_i),
    so at one learning rate alpha scales the step (alpha = 5 steps about 5 times as far as alpha = 1) while the
    minority's weight relative to the majority's, (alpha + beta Ra_min) / (alpha + beta Ra_maj), shrinks towards 1
    (docs/fidelity.md, "The alpha and beta sweeps")."""
    from fedbalance.monitor.monitor import ratio_weights

    z, y = _t(LOGITS, TARGET)
    ce = _np_ce(LOGITS, TARGET)
    ra = np.array([8.0, 0.5, 1.0, 2.0])
    for alpha, beta in ((1.0, 0.1), (5.0, 0.1), (1.0, 0.3), (0.25, 0.02)):
        hand = alpha * ce.mean() + beta * (ra[TARGET] * ce).mean()
        _close(ratio_loss(z, y, ratio_weights(torch.tensor(ra), alpha=alpha, beta=beta)), hand)
    pis = {a: ratio_weights(torch.tensor(ra), alpha=a, beta=0.1) for a in (1.0, 5.0)}
    boost = {a: float(pi[0] / pi[1]) for a, pi in pis.items()}  # class 0 (Ra 8, a minority) against class 1 (Ra 0.5)
    assert boost[1.0] == pytest.approx(1.8 / 1.05) and boost[5.0] == pytest.approx(5.8 / 5.05) and boost[5.0] < boost[1.0]


def test_ratio_module_weight_buffer() -> None:
    z, y = _t(LOGITS, TARGET)
    ce = _np_ce(LOGITS, TARGET)
    _close(RatioLoss()(z, y), ce.mean())
    loss = RatioLoss(num_classes=4).double()
    assert torch.equal(loss.state_dict()["weight"], torch.ones(4, dtype=torch.float64))
    _close(loss(z, y), ce.mean())
    loss.set_weight(torch.tensor([2.0, 1.0, 1.0, 1.0]))
    assert "weight" in loss.state_dict()
    _close(loss(z, y), (2 * ce[0] + ce[1] + ce[2] + ce[3] + 2 * ce[4]) / 5)
    with pytest.raises(ValueError):
        loss.set_weight(torch.ones(3))


def _ghmc_batch() -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
    """Two-class batch with g = 1 - p_target placed in bins 0, 5 and 9 (g = 1 included)."""
    g = np.array([0.05, 0.07, 0.55, 0.92, 0.95, 0.99])
    pt = 1 - g
    target_logit = np.log(pt / (1 - pt))
    z = np.stack([target_logit, np.zeros_like(g)], axis=1)
    z = np.concatenate([z, [[-1e4, 0.0]]])
    return torch.tensor(z), torch.zeros(7, dtype=torch.long), z


def test_ghmc_weights_hand_counted() -> None:
    z, y, znp = _ghmc_batch()
    bins = 1 - np.exp(-_np_ce(znp, np.zeros(7, dtype=int)))
    np.testing.assert_allclose(bins[:6], [0.05, 0.07, 0.55, 0.92, 0.95, 0.99])
    assert bins[6] == 1.0
    # bin 0: 2 samples, bin 5: 1, bin 9: 4 (0.92, 0.95, 0.99, 1.0); N = 7, 3 non-empty bins
    w = np.array([7 / 6, 7 / 6, 7 / 3, 7 / 12, 7 / 12, 7 / 12, 7 / 12])
    _close(ghmc_weights(z, y, bins=10), w)
    ce = _np_ce(znp, np.zeros(7, dtype=int))
    _close(ghmc_loss(z, y, bins=10, reduction="none"), w * ce)
    _close(ghmc_loss(z, y, bins=10), (w * ce).sum() / 7)
    # with 2 bins: g < 0.5 -> 2 samples, g >= 0.5 -> 5
    w2 = np.array([7 / 4, 7 / 4] + [7 / 10] * 5)
    _close(ghmc_weights(z, y, bins=2), w2)


def test_ghmc_weights_are_detached() -> None:
    z, y, znp = _ghmc_batch()
    z = z.clone().requires_grad_(True)
    ghmc_loss(z, y, reduction="sum").backward()
    w = np.array([7 / 6, 7 / 6, 7 / 3, 7 / 12, 7 / 12, 7 / 12, 7 / 12])
    p = np.exp(_np_log_softmax(znp))
    _close(z.grad, w[:, None] * (p - np.eye(2)[np.zeros(7, dtype=int)]))


def test_ghmc_momentum_buffer() -> None:
    z, y, znp = _ghmc_batch()
    ce = _np_ce(znp, np.zeros(7, dtype=int))
    counts = np.zeros(10)
    counts[[0, 5, 9]] = [2, 1, 4]
    loss = GHMCLoss(bins=10, momentum=0.5, reduction="none").double()
    first = loss(z, y)
    _close(loss.acc_sum, 0.5 * counts)
    w1 = 7 / (0.5 * np.array([2, 2, 1, 4, 4, 4, 4]) * 3)
    _close(first, w1 * ce)
    # second batch: only bin 0 occupied -> the other bins keep their accumulated counts
    loss(z[:2], y[:2])
    expected = 0.5 * counts
    expected[0] = 0.5 * expected[0] + 0.5 * 2
    _close(loss.acc_sum, expected)
    third = loss(z, y)
    acc = 0.5 * expected + 0.5 * counts
    acc[counts == 0] = expected[counts == 0]
    _close(third, 7 / (acc[[0, 0, 5, 9, 9, 9, 9]] * 3) * ce)
    stateless = GHMCLoss(bins=10).double()
    _close(stateless(z, y), ghmc_loss(z, y).numpy())
    assert torch.equal(stateless.acc_sum, torch.zeros(10, dtype=torch.float64))


def test_mse_matches_numpy() -> None:
    z, y = _t(LOGITS, TARGET)
    e = _np_sq_err(LOGITS, TARGET)
    _close(mse_loss(z, y, "none"), e)
    _close(mse_loss(z, y), e.mean())
    _close(mse_loss(z, y), ((F.softmax(z, -1) - F.one_hot(y, 4)) ** 2).sum(1).mean().numpy())


def test_mfe_is_the_classes_present_times_mse_on_a_balanced_batch() -> None:
    """With C classes present n times each, MFE = sum_c (1/n) sum_{y_i = c} e_i = C * mean_i e_i = C * MSE: at one
    learning rate MFE steps C times as far (docs/fidelity.md, "MFE against MSE")."""
    g = torch.Generator().manual_seed(0)
    for c, n in ((5, 6), (2, 16)):
        z = torch.randn(c * n, 10, generator=g, dtype=torch.float64)
        y = torch.arange(c).repeat(n)
        assert float(mfe_loss(z, y)) == pytest.approx(c * float(mse_loss(z, y)), rel=1e-12)
    z, y = torch.randn(6, 10, generator=g, dtype=torch.float64), torch.tensor([0, 0, 0, 0, 0, 1])  # unbalanced: not C * MSE
    assert float(mfe_loss(z, y)) != pytest.approx(2 * float(mse_loss(z, y)), rel=1e-3)


def test_mfe_hand_value() -> None:
    z = np.array([[1.0, 0.0, -1.0], [2.0, 1.0, 0.0], [0.0, 0.5, 0.2], [0.3, -0.4, 1.1]])
    y = np.array([0, 0, 0, 1])
    e = _np_sq_err(z, y)
    mfe = (e[0] + e[1] + e[2]) / 3 + e[3]
    zt, yt = _t(z, y)
    _close(mfe_loss(zt, yt), mfe)
    _close(mfe_loss(zt, yt, num_classes=3, reduction="sum"), mfe)
    _close(mfe_loss(zt, yt, reduction="mean"), mfe / 2)
    _close(mfe_loss(zt, yt, reduction="none"), np.array([e[0] / 3, e[1] / 3, e[2] / 3, e[3]]))
    assert abs(mfe - e.sum()) > 1e-3 and abs(mfe - e.mean()) > 1e-3
    with pytest.raises(ValueError, match="num_classes"):
        mfe_loss(zt, yt, num_classes=5)


ALL = {
    "ce": {},
    "focal": {},
    "ghmc": {},
    "ratio": {"weight": [1.3, 0.7, 2.0, 1.1]},
    "mse": {},
    "mfe": {},
    **{name: {"counts": [40.0, 3.0, 0.0, 12.0]} for name in ("la", "la_local", "bsm", "bsm_local", "fedlc", "fedrs")},
}


@pytest.mark.parametrize("name", list(ALL))
def test_finite_gradients_for_huge_logits(name: str) -> None:
    torch.manual_seed(0)
    z = (torch.randn(8, 4).sign() * 1e4).requires_grad_(True)
    y = torch.tensor([0, 1, 2, 3, 0, 1, 2, 3])
    with torch.no_grad():
        z[0, 0], z[1] = 1e4, torch.tensor([-1e4, -1e4, 1e4, 1e4])
    loss = get_loss(name, 4, **ALL[name])(z, y)
    loss.backward()
    assert torch.isfinite(loss) and bool(torch.isfinite(z.grad).all())
    if name in ("ce", "ratio", "focal"):
        assert loss.item() > 1e3


@pytest.mark.parametrize("name", list(ALL))
def test_reduction_semantics(name: str) -> None:
    z, y = _t(LOGITS, TARGET)
    none = get_loss(name, 4, **ALL[name], reduction="none")(z, y)
    total = get_loss(name, 4, **ALL[name], reduction="sum")(z, y)
    mean = get_loss(name, 4, **ALL[name], reduction="mean")(z, y)
    assert none.shape == (5,)
    _close(total, none.sum().numpy())
    divisor = 4 if name == "mfe" else 5
    _close(mean, none.sum().numpy() / divisor)
    with pytest.raises(ValueError, match="avg"):
        get_loss(name, 4, **ALL[name], reduction="avg")


def test_get_loss_errors_and_defaults() -> None:
    assert set(LOSSES) == {"ce", "focal", "ghmc", "ratio", "mse", "mfe", "la", "la_local", "bsm", "bsm_local", "fedlc", "fedrs"}
    with pytest.raises(ValueError, match="hinge"):
        get_loss("hinge", 10)
    with pytest.raises(ValueError, match="gama"):
        get_loss("focal", 10, gama=2.0)
    with pytest.raises(ValueError, match="bins"):
        get_loss("ce", 10, bins=3)
    focal = get_loss("focal", 10)
    assert (focal.gamma, focal.alpha, focal.reduction) == (2.0, 1.0, "mean")
    assert get_loss("ghmc", 10).bins == 10
    assert torch.equal(get_loss("ratio", 7).weight, torch.ones(7))
    assert get_loss("mfe", 7).reduction == "sum"


@pytest.mark.parametrize("name", list(ALL))
def test_vmap_over_clients(name: str) -> None:
    gen = torch.Generator().manual_seed(3)
    z = torch.randn(2, 6, 4, generator=gen, dtype=torch.float64) * 3
    y = torch.tensor([[0, 0, 1, 2, 0, 3], [1, 1, 1, 2, 2, 0]])
    loss = get_loss(name, 4, **ALL[name], reduction="none").double()
    batched = torch.func.vmap(loss)(z, y)
    torch.testing.assert_close(batched, torch.stack([loss(z[0], y[0]), loss(z[1], y[1])]))
    assert not torch.allclose(batched[0], batched[1])


def test_vmap_ratio_with_per_client_weights() -> None:
    z = torch.randn(2, 5, 3, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    y = torch.tensor([[0, 1, 2, 0, 1], [2, 2, 1, 0, 0]])
    w = torch.tensor([[1.0, 2.0, 3.0], [0.5, 1.0, 1.5]], dtype=torch.float64)
    batched = torch.func.vmap(ratio_loss)(z, y, w)
    torch.testing.assert_close(batched, torch.stack([ratio_loss(z[i], y[i], w[i]) for i in range(2)]))


def _released_ghmc(pred: torch.Tensor, label: torch.Tensor, bins: int = 30) -> torch.Tensor:
    """The authors' GHMC.forward (FEMNIST-4-Losses/models/Update.py, momentum 0), written out on the CPU."""
    edges = torch.arange(bins + 1).float() / bins
    edges[-1] += 1e-6
    n, c = pred.shape
    p = F.softmax(pred, dim=1)
    class_mask = torch.zeros(n, c, dtype=pred.dtype)
    class_mask.scatter_(1, label.view(-1, 1), 1.0)
    target = class_mask.clone()  # label_binarize of the labels
    g = torch.abs(pred.sigmoid().detach() - target)
    g = (g * class_mask).sum(1).view(-1, 1)
    weights = torch.zeros_like(g)
    tot = pred.size(0)
    valid = 0
    for i in range(bins):
        inds = (g >= edges[i]) & (g < edges[i + 1])
        num = inds.sum().item()
        if num > 0:
            weights[inds] = tot / num
            valid += 1
    if valid > 0:
        weights = weights / valid
    probs = (p * class_mask).sum(1).view(-1, 1)
    return (-probs.log() * weights / tot).sum()


def test_ghmc_sigmoid_30_bins_equals_released_formula() -> None:
    gen = torch.Generator().manual_seed(11)
    for trial in range(5):
        z = torch.randn(64, 26, generator=gen) * (1 + 2 * trial)
        y = torch.randint(0, 26, (64,), generator=gen)
        ours = ghmc_loss(z, y, bins=30, g="sigmoid")
        torch.testing.assert_close(ours, _released_ghmc(z, y), rtol=1e-5, atol=1e-6)
        module = GHMCLoss(bins=30, g="sigmoid")
        torch.testing.assert_close(module(z, y), ours)
    # the softmax reading bins differently on the same logits (the 57 of 64 samples)
    assert not torch.allclose(ghmc_loss(z, y, bins=30, g="softmax"), ours)


def test_ghmc_sigmoid_hand_binned() -> None:
    # target logits 0, 2, -2, 0 -> g = 0.5, 0.1192, 0.8808, 0.5; 2 bins: [0, .5) and [.5, 1]
    z = torch.tensor([[0.0, 1.0], [2.0, 0.0], [-2.0, 0.0], [0.0, -1.0]], dtype=torch.float64)
    y = torch.tensor([0, 0, 0, 0])
    w = ghmc_weights(z, y, bins=2, g="sigmoid")
    # bin 1 holds g = 0.5, 0.8808, 0.5 (3 samples), bin 0 holds 0.1192 (1); N = 4, 2 non-empty bins
    torch.testing.assert_close(w, torch.tensor([4 / 6, 4 / 2, 4 / 6, 4 / 6], dtype=torch.float64))
    with pytest.raises(ValueError, match="g must be one of"):
        ghmc_loss(z, y, g="tanh")


def test_ratio_batch_mean_equals_released_broadcast() -> None:
    z, y = _t(LOGITS, TARGET)
    pi = torch.tensor([1.3, 0.7, 2.0, 1.1], dtype=torch.float64)
    # released Ratio_Cross_Entropy: alpha[ids] [N] times log p [N, 1] broadcasts to [N, N]; mean
    log_p = F.log_softmax(z, dim=1).gather(1, y.view(-1, 1))
    released = (-pi[y] * log_p).mean()
    assert (-pi[y] * log_p).shape == (5, 5)
    _close(ratio_loss(z, y, pi, weighting="batch_mean"), released.numpy())
    by_hand = pi[y].mean() * _np_ce(LOGITS, TARGET).mean()
    # the module stores pi in the default dtype (float32)
    np.testing.assert_allclose(RatioLoss(pi, weighting="batch_mean")(z, y).numpy(), by_hand.numpy(), rtol=1e-6)
    # the paper's per-sample reading differs whenever the batch's classes have different pi
    assert not torch.allclose(ratio_loss(z, y, pi), released)
    with pytest.raises(ValueError, match="weighting"):
        RatioLoss(pi, weighting="per_class")


# ---------------------------------------------------------------- per-sample masks

REAL = np.array([0, 2, 3, 5, 7])  # LOGITS/TARGET sit at these rows of an 8-row padded batch


def _padded_batch(seed: int = 7) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """LOGITS/TARGET interleaved with 3 padded rows (large random logits, classes 2, 2, 1): z [8, 4], y [8], mask [8]."""
    z = torch.randn(8, 4, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * 9
    y = torch.tensor([2, 0, 2, 2, 1, 2, 1, 1])
    z[REAL], y[REAL] = _t(LOGITS, TARGET)
    mask = torch.zeros(8, dtype=torch.bool)
    mask[REAL] = True
    return z, y, mask


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("name", list(ALL))
def test_mask_equals_loss_on_real_samples(name: str, reduction: str) -> None:
    """loss(z, y, mask) == loss(z[mask], y[mask]); 'none' gives 0 on padding; padded logits get no gradient."""
    z, y, mask = _padded_batch()
    z.requires_grad_(True)
    loss = get_loss(name, 4, **ALL[name], reduction=reduction).double()
    masked = loss(z, y, mask)
    real = loss(z[mask], y[mask])
    if reduction == "none":
        torch.testing.assert_close(masked[mask], real)
        assert torch.equal(masked[~mask], torch.zeros(3, dtype=z.dtype))
    else:
        torch.testing.assert_close(masked, real)
    torch.testing.assert_close(loss(z, y, mask.double()), masked)
    (grad,) = torch.autograd.grad(masked.sum(), z)
    assert torch.equal(grad[~mask], torch.zeros(3, 4, dtype=z.dtype))


def test_masked_paper_losses_by_hand() -> None:
    """CE, focal, MSE and MFE over the real rows of a padded batch against numpy on LOGITS/TARGET alone."""
    z, y, mask = _padded_batch()
    ce, e = _np_ce(LOGITS, TARGET), _np_sq_err(LOGITS, TARGET)
    pt = np.exp(-ce)
    focal = -((1 - pt) ** 2) * np.log(pt)
    # TARGET = [0, 2, 3, 1, 0]: class 0 twice, classes 1-3 once
    mfe = (e[0] + e[4]) / 2 + e[1] + e[2] + e[3]
    for reduce in ("mean", "sum"):
        _close(cross_entropy(z, y, reduce, mask), getattr(ce, reduce)())
        _close(focal_loss(z, y, reduction=reduce, mask=mask), getattr(focal, reduce)())
        _close(mse_loss(z, y, reduce, mask), getattr(e, reduce)())
    _close(mfe_loss(z, y, reduction="sum", mask=mask), mfe)
    _close(mfe_loss(z, y, reduction="mean", mask=mask), mfe / 4)
    _close(mfe_loss(z, y, reduction="none", mask=mask)[mask], np.array([e[0] / 2, e[1], e[2], e[3], e[4] / 2]))


def test_mfe_mask_removes_a_class_and_its_counts() -> None:
    """Padding out sample 3 (class 1's only sample) and sample 4 (one of class 0's two) leaves classes {0, 2, 3}
    with one sample each: padded samples count in neither n_c nor the classes present."""
    z, y = _t(LOGITS, TARGET)
    e = _np_sq_err(LOGITS, TARGET)
    mask = torch.tensor([1, 1, 1, 0, 0])
    _close(mfe_loss(z, y, reduction="sum", mask=mask), e[0] + e[1] + e[2])
    _close(mfe_loss(z, y, reduction="mean", mask=mask), (e[0] + e[1] + e[2]) / 3)
    _close(mfe_loss(z, y, reduction="none", mask=mask), np.array([e[0], e[1], e[2], 0.0, 0.0]))
    torch.testing.assert_close(mfe_loss(z, y, reduction="mean", mask=mask), mfe_loss(z[:3], y[:3], reduction="mean"))


@pytest.mark.parametrize("name", list(ALL))
def test_all_padding_mask_gives_zero(name: str) -> None:
    z, y, _ = _padded_batch()
    z.requires_grad_(True)
    none = torch.zeros(8, dtype=torch.bool)
    for reduction in ("mean", "sum"):
        value = get_loss(name, 4, **ALL[name], reduction=reduction).double()(z, y, none)
        (grad,) = torch.autograd.grad(value, z)
        assert value.item() == 0.0 and torch.equal(grad, torch.zeros_like(z))
    w = torch.tensor([1.3, 0.7, 2.0, 1.1], dtype=torch.float64)
    assert cross_entropy(z, y, "mean", none, w).item() == 0.0


def test_cross_entropy_class_weights_are_torchs() -> None:
    """``weight``: as F.cross_entropy(weight=...), whose 'mean' divides by the samples' weight sum; masked too."""
    z, y, mask = _padded_batch()
    w = torch.tensor([1.3, 0.7, 2.0, 1.1], dtype=torch.float64)
    for reduction in ("mean", "sum", "none"):
        torch.testing.assert_close(cross_entropy(z, y, reduction, weight=w), F.cross_entropy(z, y, w, reduction=reduction))
        masked = cross_entropy(z, y, reduction, mask, w)
        expected = F.cross_entropy(z[mask], y[mask], w, reduction=reduction)
        torch.testing.assert_close(masked[mask] if reduction == "none" else masked, expected)


@pytest.mark.parametrize("name", ["ce", "focal", "mse", "mfe"])
def test_vmap_masked_over_clients(name: str) -> None:
    """Each copy its own mask under vmap, as the vectorised path calls the losses."""
    z = torch.randn(2, 6, 4, generator=torch.Generator().manual_seed(8), dtype=torch.float64) * 3
    y = torch.tensor([[0, 0, 1, 2, 0, 3], [1, 1, 1, 2, 2, 0]])
    m = torch.tensor([[1, 1, 1, 0, 1, 0], [0, 1, 1, 1, 1, 1]], dtype=torch.bool)
    for reduction in ("mean", "sum"):
        loss = get_loss(name, 4, reduction=reduction).double()
        batched = torch.func.vmap(loss)(z, y, m)
        torch.testing.assert_close(batched, torch.stack([loss(z[i][m[i]], y[i][m[i]]) for i in range(2)]))


def test_vectorised_masked_loss_is_the_losses_own() -> None:
    """vectorised.make_masked_loss gives exactly the loss's own masked form (nn.CrossEntropyLoss: cross_entropy)."""
    z, y, mask = _padded_batch()
    c = torch.tensor(COUNTS)
    for name in ALL:
        for reduction in ("mean", "sum"):
            loss = get_loss(name, 4, **ALL[name], reduction=reduction).double()
            if takes_client_counts(loss):
                assert torch.equal(make_masked_loss(loss)(z, y, mask, c), loss.forward_counts(z, y, c, mask))
            else:
                assert torch.equal(make_masked_loss(loss)(z, y, mask), loss(z, y, mask))
    w = torch.tensor([1.3, 0.7, 2.0, 1.1], dtype=torch.float64)
    for weight in (None, w):
        for reduction in ("mean", "sum"):
            torch_ce = torch.nn.CrossEntropyLoss(weight=weight, reduction=reduction)
            own = cross_entropy(z, y, reduction, mask, weight)
            assert torch.equal(make_masked_loss(torch_ce)(z, y, mask), own)
            torch.testing.assert_close(own, torch_ce(z[mask], y[mask]))
    with pytest.raises(NotImplementedError, match="label_smoothing"):
        make_masked_loss(torch.nn.CrossEntropyLoss(label_smoothing=0.1))


def test_masks_ignore_padding() -> None:
    z, y = _t(LOGITS, TARGET)
    pad_z = torch.cat([z, torch.randn(3, 4, dtype=z.dtype) * 9])
    pad_y = torch.cat([y, torch.tensor([2, 2, 1])])
    mask = torch.tensor([1] * 5 + [0] * 3, dtype=torch.bool)
    pi = torch.tensor([1.3, 0.7, 2.0, 1.1], dtype=torch.float64)
    for weighting in RATIO_WEIGHTING:
        torch.testing.assert_close(ratio_loss(pad_z, pad_y, pi, weighting=weighting, mask=mask), ratio_loss(z, y, pi, weighting=weighting))
    for g in ("softmax", "sigmoid"):
        torch.testing.assert_close(ghmc_loss(pad_z, pad_y, bins=3, g=g, mask=mask), ghmc_loss(z, y, bins=3, g=g))


# ---------------------------------------------------------------- beyond the paper (docs/baselines.md)

COUNTS = np.array([40.0, 3.0, 0.0, 12.0])  # a client (or the monitor's estimate) without class 2


def _np_adjusted_ce(z: np.ndarray, y: np.ndarray, shift: np.ndarray) -> np.ndarray:
    """-log softmax(z + shift)_y written out with exp/log in numpy."""
    a = z + shift
    return -(a[np.arange(len(y)), y] - np.log(np.exp(a).sum(axis=1)))


def test_logit_adjusted_matches_numpy() -> None:
    z, y = _t(LOGITS, TARGET)
    n = np.maximum(COUNTS, 1.0)  # min_count 1: class 2 counts as seen once
    for tau in (1.0, 0.5, 2.0):
        expected = _np_adjusted_ce(LOGITS, TARGET, tau * np.log(n / n.sum()))
        _close(logit_adjusted_loss(z, y, torch.tensor(COUNTS), tau=tau, reduction="none"), expected)
        _close(logit_adjusted_loss(z, y, torch.tensor(COUNTS), tau=tau), expected.mean())
    # a uniform prior (round 0) is plain CE, whatever its scale
    _close(logit_adjusted_loss(z, y, torch.full((4,), 7.0)), _np_ce(LOGITS, TARGET).mean())
    # the floor: min_count 0.01 gives class 2 a prior of 0.01 / 55.01
    n2 = np.where(COUNTS > 0, COUNTS, 0.01)
    _close(logit_adjusted_loss(z, y, torch.tensor(COUNTS), min_count=0.01, reduction="sum"),
           _np_adjusted_ce(LOGITS, TARGET, np.log(n2 / n2.sum())).sum())
    # non-finite or negative estimates count as min_count
    bad = torch.tensor([40.0, 3.0, float("nan"), 12.0], dtype=torch.float64)
    _close(logit_adjusted_loss(z, y, bad), logit_adjusted_loss(z, y, torch.tensor(COUNTS)).numpy())


def test_balanced_softmax_matches_numpy_and_equals_la_tau1() -> None:
    z, y = _t(LOGITS, TARGET)
    n = np.maximum(COUNTS, 1.0)
    # Ren et al.: -log(n_y e^{z_y} / sum_j n_j e^{z_j})
    expected = -np.log(n[TARGET] * np.exp(LOGITS[np.arange(5), TARGET]) / (n * np.exp(LOGITS)).sum(axis=1))
    _close(balanced_softmax_loss(z, y, torch.tensor(COUNTS), reduction="none"), expected)
    _close(get_loss("bsm", 4, counts=torch.tensor(COUNTS)).double()(z, y), expected.mean())
    torch.testing.assert_close(balanced_softmax_loss(z, y, torch.tensor(COUNTS)),
                               logit_adjusted_loss(z, y, torch.tensor(COUNTS), tau=1.0))


def test_fedlc_matches_numpy() -> None:
    z, y = _t(LOGITS, TARGET)
    n = np.where(COUNTS > 0, COUNTS, 1e-8)  # the reference implementations' floor for absent classes
    for tau in (1.0, 0.1):
        expected = _np_adjusted_ce(LOGITS, TARGET, -tau * n ** -0.25)
        _close(fedlc_loss(z, y, torch.tensor(COUNTS), tau=tau, reduction="none"), expected)
    # class 2 (absent, margin 100) gets almost no probability: sample 1 (target 2) has a huge loss
    assert fedlc_loss(z, y, torch.tensor(COUNTS), reduction="none")[1] > 90
    # tau = 0 is CE
    _close(fedlc_loss(z, y, torch.tensor(COUNTS), tau=0.0), _np_ce(LOGITS, TARGET).mean())


def test_fedrs_matches_numpy() -> None:
    z, y = _t(LOGITS, TARGET)
    hard = np.array([1.0, 1.0, 0.5, 1.0])  # class 2 absent -> alpha 0.5
    _close(fedrs_loss(z, y, torch.tensor(COUNTS), reduction="none"), _np_ce(LOGITS * hard, TARGET))
    prop = 0.3 + 0.7 * COUNTS / COUNTS.max()  # the released code's soft form, alpha 0.3
    _close(fedrs_loss(z, y, torch.tensor(COUNTS), alpha=0.3, scaling="proportional", reduction="none"),
           _np_ce(LOGITS * prop, TARGET))
    # every class present, or alpha 1: CE
    _close(fedrs_loss(z, y, torch.ones(4)), _np_ce(LOGITS, TARGET).mean())
    _close(fedrs_loss(z, y, torch.tensor(COUNTS), alpha=1.0), _np_ce(LOGITS, TARGET).mean())
    with pytest.raises(ValueError, match="scaling"):
        fedrs_loss(z, y, torch.tensor(COUNTS), scaling="soft")
    with pytest.raises(ValueError, match="alpha"):
        get_loss("fedrs", 4, alpha=1.5)


COUNT_LOSSES = ("la", "la_local", "bsm", "bsm_local", "fedlc", "fedrs")


def test_counts_modules_setters_and_sources() -> None:
    prior = {"la": True, "bsm": True, "la_local": False, "bsm_local": False, "fedlc": False, "fedrs": False}
    z, y = _t(LOGITS, TARGET)
    for name in COUNT_LOSSES:
        loss = get_loss(name, 4)
        assert torch.equal(loss.counts, torch.ones(4)) and loss.num_classes == 4
        assert receives(name) == receives(loss) == {"prior" if prior[name] else "client_counts"}
        good, bad = (loss.set_prior, loss.set_client_counts) if prior[name] else (loss.set_client_counts, loss.set_prior)
        good(torch.tensor(COUNTS))
        assert torch.equal(loss.counts, torch.tensor(COUNTS, dtype=torch.float32))
        with pytest.raises(ValueError, match="does not take"):
            bad(torch.tensor(COUNTS))
        with pytest.raises(ValueError, match="shape"):
            good(torch.ones(5))
        # the module reads its buffer; forward_counts takes explicit counts
        torch.testing.assert_close(loss.double()(z, y), loss.forward_counts(z, y, torch.tensor(COUNTS)))
        assert "counts" in loss.state_dict()
    assert receives("ratio") == {"weights"} and receives("ce") == frozenset()


def test_feed_hands_each_loss_what_it_receives() -> None:
    """One call hands every loss the same inputs; each takes what it declares, by its own setter."""
    pi, prior, local = torch.tensor([2.0, 1.0, 1.0, 3.0]), torch.tensor([9.0, 1.0, 1.0, 1.0]), torch.tensor([0.0, 4.0, 4.0, 1.0])
    for name in ("ce", "focal", "ghmc", "ratio", "mse", "mfe", *COUNT_LOSSES):
        loss = get_loss(name, 4)
        before = {k: v.clone() for k, v in loss.state_dict().items()}
        feed(loss, weights=pi, prior=prior)
        feed(loss, client_counts=local)
        after = loss.state_dict()
        if name == "ratio":
            assert torch.equal(after["weight"], pi)
        elif name in ("la", "bsm"):
            assert torch.equal(after["counts"], prior)
        elif name in COUNT_LOSSES:
            assert torch.equal(after["counts"], local)
        else:
            assert all(torch.equal(before[k], after[k]) for k in before), name
    with pytest.raises(ValueError, match="unknown loss input"):
        feed(get_loss("ce", 4), pi=pi)


@pytest.mark.parametrize("name", COUNT_LOSSES)
def test_counts_losses_mask_and_vmap_per_client_counts(name: str) -> None:
    z, y = _t(LOGITS, TARGET)
    loss = get_loss(name, 4).double()
    pad_z = torch.cat([z, torch.randn(3, 4, dtype=z.dtype) * 9])
    pad_y = torch.cat([y, torch.tensor([2, 2, 1])])
    mask = torch.tensor([1] * 5 + [0] * 3, dtype=torch.bool)
    c = torch.tensor(COUNTS)
    torch.testing.assert_close(loss.forward_counts(pad_z, pad_y, c, mask), loss.forward_counts(z, y, c))
    # per-client counts under vmap (the vectorised path's form)
    zz = torch.randn(2, 6, 4, generator=torch.Generator().manual_seed(5), dtype=torch.float64) * 3
    yy = torch.tensor([[0, 0, 1, 3, 0, 3], [1, 1, 1, 2, 2, 0]])
    cc = torch.tensor([[5.0, 1.0, 0.0, 2.0], [1.0, 7.0, 3.0, 0.0]], dtype=torch.float64)
    batched = torch.func.vmap(lambda a, b, n: loss.forward_counts(a, b, n))(zz, yy, cc)
    torch.testing.assert_close(batched, torch.stack([loss.forward_counts(zz[i], yy[i], cc[i]) for i in range(2)]))
    assert not torch.allclose(batched[0], batched[1])



@pytest.mark.parametrize("name", list(ALL))
def test_bad_targets_are_refused_naming_the_class(name: str) -> None:
    """A class index outside [0, Q), a float or one-hot target, or rows that do not match: a ValueError saying which,
    from every loss (MSE used to turn class 4 of 4 into a row of zeros and return a number)."""
    loss = get_loss(name, 4, **ALL[name])
    z = torch.randn(5, 4, generator=torch.Generator().manual_seed(11))
    for bad, cls in ((torch.tensor([0, 1, 4, 2, 0]), 4), (torch.tensor([0, -1, 2, 2, 0]), -1)):
        with pytest.raises(ValueError, match=rf"target holds class {cls}, outside \[0, 4\)"):
            loss(z, bad)
    with pytest.raises(ValueError, match="integer class indices, got dtype torch.float32"):
        loss(z, torch.tensor([0.0, 1.0, 2.0, 3.0, 0.0]))
    with pytest.raises(ValueError, match=r"target must be class indices \[N\] with N = 5"):
        loss(z, F.one_hot(torch.tensor([0, 1, 2, 3, 0]), 4))
    with pytest.raises(ValueError, match=r"N = 5 \(the logits' rows\), got a torch.int64 tensor of shape \[4\]"):
        loss(z, torch.tensor([0, 1, 2, 3]))
    with pytest.raises(ValueError, match=r"mask must be \[N\] = \[5\]"):
        loss(z, torch.tensor([0, 1, 2, 3, 0]), torch.ones(4, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"logits must be a floating tensor \[N, Q\]"):
        loss(z[0], torch.tensor([0]))
    good = torch.tensor([0, 1, 2, 3, 0])
    assert torch.equal(loss(z, good), loss(z, good.to(torch.int32)))


def test_per_class_inputs_must_match_the_logits_columns() -> None:
    """The Ratio Loss's pi, torch's class weights and the counts losses' counts are [Q] of the logits, not of a config."""
    z, y = torch.randn(3, 5, generator=torch.Generator().manual_seed(12)), torch.tensor([0, 4, 2])
    with pytest.raises(ValueError, match=r"weight must be one value a class, \[Q\] = \[5\]"):
        ratio_loss(z, y, torch.ones(4))
    with pytest.raises(ValueError, match=r"weight must be one value a class, \[Q\] = \[5\]"):
        cross_entropy(z, y, weight=torch.ones(6))
    for fn in (logit_adjusted_loss, balanced_softmax_loss, fedlc_loss, fedrs_loss):
        with pytest.raises(ValueError, match=r"counts must be one value a class, \[Q\] = \[5\]"):
            fn(z, y, torch.ones(4))
    pi = torch.tensor([1.0, 2.0, 0.5, 1.5, 3.0])
    expected = -(pi[y] * F.log_softmax(z, -1)[torch.arange(3), y]).mean()
    torch.testing.assert_close(ratio_loss(z, y, pi), expected)


def test_range_is_not_read_under_vmap() -> None:
    """Under vmap only the shapes are checked (a value cannot be read there); the per-copy result is the loss's own."""
    z = torch.randn(2, 4, 3, generator=torch.Generator().manual_seed(13), dtype=torch.float64)
    y = torch.tensor([[0, 1, 2, 1], [2, 2, 0, 1]])
    batched = torch.func.vmap(mse_loss)(z, y)
    torch.testing.assert_close(batched, torch.stack([mse_loss(z[i], y[i]) for i in range(2)]))
    with pytest.raises(ValueError, match=r"mask must be \[N\] = \[4\]"):
        torch.func.vmap(lambda a, b, m: mse_loss(a, b, mask=m))(z, y, torch.ones(2, 3))
