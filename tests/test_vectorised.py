"""Vectorised ``train_copies`` equals the sequential reference (max abs diff < 1e-5 in float32)."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torchvision.models.resnet import BasicBlock

import fedbalance.training.sgd as sgd_mod
import fedbalance.methods.losses as losses_mod
import fedbalance.training.vectorised as vec_mod
from fedbalance.methods.losses import feed, get_loss
from fedbalance.methods.models import build_model
from fedbalance.training.train import SGDConfig, average_stacked, train_copies
from fedbalance.training.vectorised import VectorisedOptions, make_masked_loss, train_copies_vectorised

TOL = 1e-5
Q = 10
SIZES = (37, 64, 5)
CFG = SGDConfig(lr=0.01, batch_size=16, epochs=2)


class TinyResNet(nn.Module):
    """A ResNet in miniature: conv-BN stem, a strided BasicBlock with BN downsample, BatchNorm1d head."""

    def __init__(self, num_classes: int = Q) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1, bias=False), nn.BatchNorm2d(4), nn.ReLU(inplace=True))
        down = nn.Sequential(nn.Conv2d(4, 8, 1, stride=2, bias=False), nn.BatchNorm2d(8))
        self.block = BasicBlock(4, 8, stride=2, downsample=down)
        self.norm = nn.BatchNorm1d(8, momentum=None)
        self.classifier = nn.Linear(8, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.relu(self.norm(self.block(self.stem(x)).mean((2, 3)))))


@pytest.fixture(autouse=True, scope="module")
def _one_thread(torch_one_thread):
    """Every test of this module runs with one torch thread (conftest.torch_one_thread)."""


def _data(
    sizes: tuple[int, ...], shape: tuple[int, ...], seed: int = 0, classes: list[int] | None = None
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for k, n in enumerate(sizes):
        x = torch.randint(0, 256, (n, *shape), generator=g, dtype=torch.uint8)
        y = torch.full((n,), classes[k]) if classes else torch.randint(0, Q, (n,), generator=g)
        out.append((x, y))
    return out


def _gens(n: int) -> list[torch.Generator]:
    return [torch.Generator().manual_seed(1000 + k) for k in range(n)]


def _max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    return max(float((a[k].double() - b[k].double()).abs().max()) for k in a)


def _compare(model: nn.Module, datasets, loss_fn: nn.Module, cfg: SGDConfig = CFG, **opts) -> float:
    """Run both paths from the same generators; check states, FedAvg model, losses, generators; return max diff."""
    start = {k: v.clone() for k, v in model.state_dict().items()}
    gs, gv = _gens(len(datasets)), _gens(len(datasets))
    seq, seq_loss = train_copies(model, datasets, loss_fn, cfg, gs, path="sequential")
    if opts:
        vec, vec_loss = train_copies_vectorised(model, datasets, loss_fn, cfg, gv, VectorisedOptions(**opts))
    else:
        vec, vec_loss = train_copies(model, datasets, loss_fn, cfg, gv, path="vectorised")
    assert list(vec) == list(seq)
    assert all(vec[k].dtype == seq[k].dtype and vec[k].shape == seq[k].shape for k in seq)
    assert vec_loss.dtype == seq_loss.dtype and vec_loss.shape == (len(datasets),)
    diff = max(_max_diff(seq, vec), _max_diff(average_stacked(seq), average_stacked(vec)))
    assert diff < TOL, diff
    print(f"max abs diff {diff:.3g}")
    torch.testing.assert_close(vec_loss, seq_loss, atol=TOL, rtol=0)
    assert all(torch.equal(model.state_dict()[k], v) for k, v in start.items()), "model was changed"
    floats = [k for k in start if start[k].is_floating_point()]
    moved = max(float((seq[k][0].double() - start[k].double()).abs().max()) for k in floats)
    assert moved > 100 * TOL, "training did not move the weights: the comparison would be vacuous"
    for a, b in zip(gs, gv, strict=True):
        assert torch.equal(torch.randperm(50, generator=a), torch.randperm(50, generator=b))
    return diff


@pytest.fixture(scope="module")
def lenet() -> nn.Module:
    torch.manual_seed(0)
    return build_model("lenet5", 1, Q, (16, 16))


@pytest.fixture(scope="module")
def client_data():
    return _data(SIZES, (1, 16, 16))


@pytest.mark.parametrize("name", ["ce", "focal", "ghmc", "ratio", "mse", "mfe"])
def test_lenet5_every_loss_unequal_clients(lenet: nn.Module, client_data, name: str) -> None:
    params = {"weight": torch.linspace(0.5, 2.0, Q)} if name == "ratio" else {}
    _compare(lenet, client_data, get_loss(name, Q, **params))


@pytest.mark.parametrize("weighting", ["batch_mean", "normalised"])
def test_lenet5_ratio_weightings(lenet: nn.Module, client_data, weighting: str) -> None:
    """The released code's and the CLIMB authors' weightings (docs/deviations.md) on padded batches."""
    _compare(lenet, client_data, get_loss("ratio", Q, weight=torch.linspace(0.5, 2.0, Q), weighting=weighting))


def test_lenet5_torch_cross_entropy_with_class_weights(lenet: nn.Module, client_data) -> None:
    _compare(lenet, client_data, nn.CrossEntropyLoss(weight=torch.linspace(0.5, 2.0, Q)))


def test_monitor_aux_copies(lenet: nn.Module) -> None:
    """The monitor: Q copies, each on 8 samples of one class, batch 32 (one partial batch per epoch)."""
    aux = _data((8,) * Q, (1, 16, 16), seed=3, classes=list(range(Q)))
    _compare(lenet, aux, get_loss("ce", Q), SGDConfig(lr=0.01, batch_size=32, epochs=3))


@pytest.mark.parametrize("name", ["ce", "ghmc", "mfe"])
def test_batchnorm_resnet_unequal_clients(name: str) -> None:
    torch.manual_seed(1)
    model = TinyResNet()
    _compare(model, _data(SIZES, (1, 8, 8), seed=2), get_loss(name, Q))


def test_batchnorm_full_batches_use_fused_kernel() -> None:
    """Equal clients, whole batches only: every step takes the fused ``F.batch_norm`` branch."""
    torch.manual_seed(1)
    _compare(TinyResNet(), _data((32, 48), (1, 8, 8), seed=6), get_loss("focal", Q))


def test_resnet18_float64_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    """The real ResNet18, in float64: on tiny maps its BN over a few values per channel is so ill-conditioned
    that even reordering a batch changes float32 results beyond the tolerance (docs/performance.md)."""
    for mod in (sgd_mod, vec_mod):
        monkeypatch.setattr(mod, "to_float", lambda x: x.double())
    torch.manual_seed(0)
    model = build_model("resnet18", 1, Q, (8, 8)).double()
    data = _data((12, 6), (1, 8, 8), seed=4)
    assert _compare(model, data, get_loss("ce", Q), SGDConfig(lr=0.01, batch_size=8, epochs=1)) < 1e-10


def test_options_chunks_and_channels_last(client_data) -> None:
    torch.manual_seed(1)
    _compare(TinyResNet(), _data(SIZES, (1, 8, 8), seed=2), get_loss("ratio", Q), chunk_size=2, channels_last=True)


def test_no_momentum_no_weight_decay(lenet: nn.Module, client_data) -> None:
    _compare(lenet, client_data, get_loss("ce", Q), SGDConfig(lr=0.05, momentum=0.0, weight_decay=0.0, batch_size=16))


def test_masked_losses_ignore_padding() -> None:
    g = torch.Generator().manual_seed(5)
    logits, y = torch.randn(12, Q, generator=g), torch.randint(0, 3, (12,), generator=g)
    mask = torch.arange(12) < 7
    for name in ["ce", "focal", "ghmc", "ratio", "mse", "mfe"]:
        for reduction in ["mean", "sum"]:
            fn = get_loss(name, Q, reduction=reduction)
            padded = torch.cat([logits[:7], torch.randn(5, Q, generator=g)]), torch.cat([y[:7], y[:5] * 0 + 9])
            torch.testing.assert_close(make_masked_loss(fn)(*padded, mask), fn(logits[:7], y[:7]))


def test_refuses_what_it_cannot_batch(lenet: nn.Module, client_data) -> None:
    with pytest.raises(ValueError, match="momentum"):
        train_copies(lenet, client_data, get_loss("ghmc", Q, momentum=0.5), CFG, _gens(3), path="vectorised")
    with pytest.raises(ValueError, match="reduction"):
        make_masked_loss(get_loss("ce", Q, reduction="none"))
    with pytest.raises(NotImplementedError, match="NLLLoss"):
        make_masked_loss(nn.NLLLoss())
    with pytest.raises(ValueError, match="generators"):
        train_copies_vectorised(lenet, client_data, get_loss("ce", Q), CFG, _gens(2))


COUNT_LOSSES = ["la", "la_local", "bsm", "bsm_local", "fedlc", "fedrs"]


@pytest.mark.parametrize("name", COUNT_LOSSES)
def test_lenet5_counts_losses_label_skewed_clients(lenet: nn.Module, name: str) -> None:
    """Each copy trains with its own label counts (local losses) or the shared monitor prior (la, bsm)."""
    datasets = _data(SIZES, (1, 16, 16), seed=2)
    # skew the labels: client 0 holds classes 0-3 only, client 2 class 7 only
    datasets[0] = (datasets[0][0], datasets[0][1] % 4)
    datasets[2] = (datasets[2][0], torch.full_like(datasets[2][1], 7))
    loss = get_loss(name, Q)
    feed(loss, prior=torch.linspace(1.0, 50.0, Q))
    _compare(lenet, datasets, loss)


def test_vectorised_hands_each_copy_its_own_counts(lenet: nn.Module) -> None:
    """Counts are per copy: FedRS on a one-class client differs from FedRS with the pooled counts."""
    datasets = _data((20, 20), (1, 16, 16), seed=3, classes=[1, 8])
    loss = get_loss("fedrs", Q, alpha=0.1)
    seq, _ = train_copies(lenet, datasets, loss, CFG, _gens(2), path="sequential")
    vec, _ = train_copies(lenet, datasets, loss, CFG, _gens(2), path="vectorised")
    assert _max_diff(seq, vec) < TOL
    # the loss's buffer holds the last client's counts after the sequential path: its own, class 8 only
    assert loss.counts.tolist() == [0.0] * 8 + [20.0, 0.0]
    ce, _ = train_copies(lenet, datasets, get_loss("ce", Q), CFG, _gens(2), path="vectorised")
    assert _max_diff(ce, vec) > 100 * TOL


def test_masked_counts_losses_ignore_padding() -> None:
    g = torch.Generator().manual_seed(6)
    logits, y = torch.randn(12, Q, generator=g), torch.randint(0, 3, (12,), generator=g)
    mask = torch.arange(12) < 7
    counts = torch.arange(Q, dtype=torch.float32)
    for name in COUNT_LOSSES:
        fn = get_loss(name, Q, counts=counts)
        padded = torch.cat([logits[:7], torch.randn(5, Q, generator=g)]), torch.cat([y[:7], y[:5] * 0 + 9])
        args = (counts,) if vec_mod.takes_client_counts(fn) else ()
        torch.testing.assert_close(make_masked_loss(fn)(*padded, mask, *args), fn(logits[:7], y[:7]))


# --- memory-aware chunking ----------------------------------------------------------------------


def test_memory_tracker_counts_live_storages_once() -> None:
    """Peak and live bytes on the meta device, by hand: views and in-place results count once."""
    with vec_mod.MemoryTracker() as tracker:
        a = torch.empty(1000, device="meta")  # 4000 live
        b = a * 2  # 8000
        del a  # 4000
        c = b * 2  # 8000 (peak)
        c.view(10, 100).add_(1)
        del b, c  # 0
        d = torch.empty(500, device="meta")  # 2000
    assert (tracker.peak, tracker.now) == (8000, 2000)
    del d


def test_memory_model_by_hand() -> None:
    """need(c) = data + max(K state + fixed + c per_copy, 2 K state); the chunk is the largest that fits, evened out."""
    model = vec_mod.MemoryModel(per_copy=10, step_fixed=5, state=1)
    assert model.need(4, copies=8, data=3) == 3 + 8 + 5 + 40
    assert model.need(0, copies=8, data=3) == 3 + 16
    assert model.chunk_size(56, copies=8, data=3) == 4  # 56 fits 4 copies: two calls of 4
    assert model.chunk_size(50, copies=8, data=3) == 3  # 3 fit: three calls, 3 + 3 + 2
    assert model.chunk_size(45, copies=8, data=3) == 2  # 2 fit (36), 3 do not (46): four calls of 2
    assert model.chunk_size(10, copies=8, data=3) == 1  # nothing fits: one copy at a time
    assert model.chunk_size(10**6, copies=8, data=3) == 8
    assert model.chunk_size(46, copies=5, data=3) == 3  # 3 fit (3 + 5 + 5 + 30 = 43): 3 + 2, not 3 + 3


def test_estimate_is_linear_in_the_copies_and_counts_the_weights() -> None:
    """The meta estimate from 1 and 2 copies predicts a measured step of 4 copies exactly, and one copy costs
    at least its weights, new weights, momenta (old and new) and gradients, plus its float batch."""
    torch.manual_seed(0)
    model = TinyResNet()
    loss = get_loss("ratio", Q, weight=torch.linspace(0.5, 2.0, Q))
    x, y = _data((1,), (1, 8, 8))[0]
    est = vec_mod.estimate_memory(model, loss, CFG, 16, x[0], y[0])
    setup = vec_mod._setup(model, loss.to("meta"), CFG, VectorisedOptions(), torch.device("cpu"))
    assert vec_mod._step_peak(setup, CFG, 4, 16, x[0], y[0], 1) == est.step_fixed + 4 * est.per_copy
    params = sum(p.numel() * 4 for p in model.parameters())
    assert est.state == sum(v.numel() * v.element_size() for v in model.state_dict().values())
    assert est.per_copy >= 5 * params + 16 * 8 * 8 * 4
    assert est.per_copy < 100 * (params + 16 * 8 * 8 * 4 * 8)  # same order: the activations of 16 samples


def test_chunks_from_a_memory_budget_give_the_unchunked_numbers(lenet: nn.Module) -> None:
    """A budget that fits 2 of 5 copies trains them 2 + 2 + 1 (recorded), with the numbers of one vmap call."""
    from fedbalance.training.train import CopyPlan, copy_plan

    datasets = _data((37, 64, 5, 20, 33), (1, 16, 16), seed=8)
    loss = get_loss("focal", Q)
    est = vec_mod.estimate_memory(lenet, loss, CFG, 16, datasets[0][0][0], datasets[0][1][0])
    data = vec_mod.data_bytes([len(y) for _, y in datasets], datasets[0][0][0], datasets[0][1][0], CFG)
    budget = est.need(2, 5, data)
    assert est.need(3, 5, data) > budget
    calls: list[int] = []
    step = vec_mod._make_step

    def counting(*args, **kwargs):
        fn = step(*args, **kwargs)
        return lambda params, *rest: calls.append(next(iter(params.values())).shape[0]) or fn(params, *rest)

    whole, whole_loss = train_copies(lenet, datasets, loss, CFG, _gens(5), path="vectorised")
    plan = CopyPlan(memory_budget=budget)
    with copy_plan(plan), pytest.MonkeyPatch.context() as mp:
        mp.setattr(vec_mod, "_make_step", counting)
        chunked, chunked_loss = train_copies(lenet, datasets, loss, CFG, _gens(5), path="vectorised")
    assert plan.chunks == {"5x16": 2} and plan.record()["estimates"]["5x16"]["need_gib"] * 2**30 == pytest.approx(budget)
    # the estimate's two meta steps (1 and 2 copies), then chunks (37, 64), (5, 20), (33) for 2 epochs of batches of 16
    assert calls == [1, 2] + [2] * 8 + [2] * 4 + [1] * 6
    assert _max_diff(whole, chunked) < TOL
    torch.testing.assert_close(chunked_loss, whole_loss, atol=TOL, rtol=0)
    with copy_plan(CopyPlan()):  # no budget (the CPU): one vmap call of all 5
        calls.clear()
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(vec_mod, "_make_step", counting)
            train_copies(lenet, datasets, loss, CFG, _gens(5), path="vectorised")
        assert set(calls) == {5}


class _ToyPrior(losses_mod.Loss):
    """A loss written with nothing but losses.py's base: CE weighted by the inverse of the monitor's prior."""

    receives = frozenset({"prior"})

    def __init__(self, num_classes: int | None = None, reduction: str = "mean") -> None:
        super().__init__(reduction)
        self.register_buffer("prior", torch.ones(num_classes or Q))

    def set_prior(self, counts: torch.Tensor) -> None:
        self.prior = torch.as_tensor(counts, dtype=torch.float32).clone()

    def forward(self, logits, target, mask=None):
        weight = self.prior.mean() / self.prior
        return losses_mod.cross_entropy(logits, target, self.reduction, mask, weight)


class _ToyLocal(losses_mod.CountsLoss):
    """A loss of the client's own counts: CE plus the log of the sample's class share in the client's data."""

    receives = frozenset({"client_counts"})

    def forward_counts(self, logits, target, counts, mask=None):
        shift = torch.log(counts.clamp_min(1.0) / counts.clamp_min(1.0).sum()).to(logits.dtype)
        return losses_mod.cross_entropy(logits + shift, target, self.reduction, mask)


@pytest.mark.parametrize("toy", [_ToyPrior, _ToyLocal], ids=["prior", "client_counts"])
def test_a_toy_loss_from_losses_py_alone_runs_on_both_paths(lenet, toy, monkeypatch):
    """A new loss needs its class in losses.py (and its name in the schema): the engine feeds it what it declares
    (``losses.feed``), the monitor runs for a loss that receives its prior, and both paths give the same numbers."""
    from fedbalance.engine.fl import needs_monitor

    monkeypatch.setitem(losses_mod.LOSSES, "toy", toy)
    loss = losses_mod.get_loss("toy", Q)
    feed(loss, weights=torch.full((Q,), 7.0), prior=torch.linspace(1.0, 30.0, Q))
    if toy is _ToyPrior:
        assert torch.equal(loss.prior, torch.linspace(1.0, 30.0, Q))
    else:
        assert torch.equal(loss.counts, torch.ones(Q))  # it takes client counts only
    from fedbalance.jobs.config import configured_job, load_config
    from fedbalance.common.records import Job

    spec = configured_job(load_config("config/quick.yaml"), Job("losses", "mnist", "g10", "ce", 0))
    spec.update(loss="toy", base_loss="toy")
    spec["monitor"]["record"] = False
    assert needs_monitor(spec) is (toy is _ToyPrior)
    datasets = _data(SIZES, (1, 16, 16), seed=5)
    datasets[0] = (datasets[0][0], datasets[0][1] % 3)  # client 0 holds classes 0-2 only: its own counts differ
    _compare(lenet, datasets, loss)


def test_a_loss_without_a_mask_or_counts_form_is_refused_by_name():
    class NoCounts(losses_mod.Loss):
        receives = frozenset({"client_counts"})

        def forward(self, logits, target, mask=None):
            return logits.sum()

    with pytest.raises(NotImplementedError, match="NoCounts receives client_counts but has no forward_counts"):
        make_masked_loss(NoCounts())
    with pytest.raises(NotImplementedError, match="no masked form of L1Loss"):
        make_masked_loss(nn.L1Loss())


def _captured_against_eager(model: nn.Module, datasets, loss_fn: nn.Module, cfg: SGDConfig, **opts) -> float:
    """Max abs difference of the states and losses of the eager and the captured step, same generators."""
    eager, eager_loss = train_copies_vectorised(model, datasets, loss_fn, cfg, _gens(len(datasets)), VectorisedOptions(**opts))
    capt, capt_loss = train_copies_vectorised(model, datasets, loss_fn, cfg, _gens(len(datasets)),
                                              VectorisedOptions(capture=True, **opts))
    assert list(capt) == list(eager) and all(capt[k].dtype == eager[k].dtype for k in eager)
    return max(_max_diff(eager, capt), float((eager_loss.double() - capt_loss.double()).abs().max()))


@pytest.mark.parametrize("name", ["ce", "ratio", "fedlc"])
def test_the_captured_step_is_the_eager_step_float64(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """Unequal clients (padded batches, copies that finish early), momentum and weight decay, batch norm, a loss fed
    weights (ratio) and one fed each copy's counts (fedlc): the captured step's states equal the eager ones to
    1e-10 in float64 (batch norm takes its masked form on full batches too), chunked or not; and the data are such
    that a step that skipped the mask could not."""
    for mod in (sgd_mod, vec_mod):
        monkeypatch.setattr(mod, "to_float", lambda x: x.double())
    torch.manual_seed(3)
    model = TinyResNet().double()
    data = _data((21, 40, 3), (1, 8, 8), seed=8)
    loss_fn = get_loss(name, Q)
    if name == "ratio":
        feed(loss_fn, weights=torch.linspace(0.5, 2.0, Q, dtype=torch.float64))
    cfg = SGDConfig(lr=0.05, batch_size=8, epochs=2, momentum=0.9, weight_decay=5e-4)
    assert _captured_against_eager(model, data, loss_fn, cfg) < 1e-10
    assert _captured_against_eager(model, data, loss_fn, cfg, chunk_size=2) < 1e-10
    unmasked = [(x, y) for x, y in data]
    width = max(len(y) for _, y in data)
    padded = [(torch.cat([x, x.new_zeros(width - len(y), *x.shape[1:])]), torch.cat([y, y.new_zeros(width - len(y))]))
              for x, y in unmasked]
    eager, _ = train_copies_vectorised(model, data, loss_fn, cfg, _gens(3))
    no_mask, _ = train_copies_vectorised(model, padded, loss_fn, cfg, _gens(3))
    assert _max_diff(eager, no_mask) > 1e-3  # the padding's samples, were they trained on, move the copies


def test_the_captured_step_reads_each_steps_own_batch(lenet: nn.Module, client_data, monkeypatch) -> None:
    """A captured step that read step 0's batch (or mask) in every step would give other states: checked by making
    the step counter stand still."""
    cfg = SGDConfig(lr=0.05, batch_size=8, epochs=1, momentum=0.9)
    eager, _ = train_copies_vectorised(lenet, client_data, get_loss("ce", Q), cfg, _gens(len(client_data)))
    def frozen_counter(device):
        t = torch.zeros(1, dtype=torch.long, device=device)
        t.add_ = lambda *a, **k: t  # the counter never advances
        return t

    monkeypatch.setattr(vec_mod, "step_counter", frozen_counter)
    stuck, _ = train_copies_vectorised(lenet, client_data, get_loss("ce", Q), cfg, _gens(len(client_data)),
                                       VectorisedOptions(capture=True))
    monkeypatch.undo()
    capt, _ = train_copies_vectorised(lenet, client_data, get_loss("ce", Q), cfg, _gens(len(client_data)),
                                      VectorisedOptions(capture=True))
    assert _max_diff(eager, capt) == 0.0  # float32 on the CPU: the same kernels in the same order
    assert _max_diff(eager, stuck) > 1e-4
