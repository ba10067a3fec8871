"""Batched ``train_copies``: K copies of one model trained together with ``torch.func.vmap``.

The copies' parameters, buffers and momentum buffers are stacked ([K, ...]); one SGD step of
all copies is ``vmap(grad(loss))`` over the stack followed by a hand-written SGD update equal to
``torch.optim.SGD`` (dampening 0, no Nesterov). Each copy draws its own ``batch_schedule`` from
its own generator, exactly as the sequential path does; a step's batches are padded to the
largest batch with a per-sample mask, losses and batch-norm statistics use the real samples
only, and a copy whose schedule has ended is frozen (no parameter, momentum or buffer change).
``estimate_memory`` measures a step's memory on meta tensors (``MemoryModel``), from which a job on
CUDA chooses its copies per vmap call (``train.CopyPlan``). See ``docs/performance.md``.
"""

from __future__ import annotations

import contextlib
import copy
import math
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, vmap
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from fedbalance.methods import losses
from fedbalance.methods.models import to_float
from fedbalance.training.sgd import SGDConfig, batch_schedule, client_counts, compile_deterministic, precision

MaskedLoss = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class VectorisedOptions:
    """Throughput knobs; the defaults give the sequential path's numbers (up to float rounding).

    ``chunk_size``: copies per vmap call (None = all), bounds activation memory (``MemoryModel``).
    ``channels_last``: feed each copy's batch in channels-last layout (same numbers).
    ``autocast_bf16``: bf16 autocast of the forward pass (changes numbers; CUDA only).
    ``allow_tf32``: the round's precision policy (``sgd.precision``): TF32 matmuls and cuDNN when
    True (changes numbers; CUDA only), strict fp32 (TF32 off) when False.
    ``compile``: ``torch.compile`` the batched step (same maths; compile time on first use).
    ``capture``: run each chunk's steps as one captured step replayed (``run_captured``): a CUDA graph on CUDA,
    the same static-buffer step eagerly elsewhere; the round's schedules and masks stay on the device (same maths:
    batch norm always takes its masked form).
    """

    chunk_size: int | None = None
    channels_last: bool = False
    autocast_bf16: bool = False
    allow_tf32: bool = False
    compile: bool = False
    capture: bool = False


class _Context:
    """Per-call side channel: the sample mask (and whether it is all ones) in, new batch-norm buffers out."""

    def __init__(self) -> None:
        self.mask: torch.Tensor | None = None
        self.full = False
        self.new_buffers: dict[str, torch.Tensor] = {}


class _MaskedBatchNorm(nn.Module):
    """Training-mode batch norm over the real (mask 1) samples, returning its running stats.

    Same parameter and buffer names as ``nn.BatchNorm*d``. The running statistics are updated
    exactly as torch does (momentum, or the cumulative average when momentum is None, with the
    unbiased variance) but written to the context instead of in place, so vmap can batch them.
    """

    def __init__(self, bn: nn.modules.batchnorm._BatchNorm, name: str, ctx: _Context) -> None:
        super().__init__()
        self.eps = bn.eps
        self.momentum = bn.momentum
        self.affine = bn.affine
        self.track_running_stats = bn.track_running_stats
        self.prefix = f"{name}." if name else ""
        self.ctx = ctx
        if bn.affine:
            self.weight = nn.Parameter(torch.empty_like(bn.weight, device="meta"))
            self.bias = nn.Parameter(torch.empty_like(bn.bias, device="meta"))
        if bn.track_running_stats:
            for key in ("running_mean", "running_var", "num_batches_tracked"):
                self.register_buffer(key, torch.empty_like(getattr(bn, key), device="meta"))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalise ``x`` [B, C, ...] with the batch mean and biased variance of the real samples."""
        dims = [0, *range(2, x.dim())]
        cshape = [1, -1] + [1] * (x.dim() - 2)
        xf = x if x.dtype in (torch.float32, torch.float64) else x.float()
        weight, bias = (self.weight, self.bias) if self.affine else (None, None)
        if self.ctx.full:
            out = F.batch_norm(xf, None, None, weight, bias, training=True, momentum=0.0, eps=self.eps)
            var, mean = torch.var_mean(xf.detach(), dims, correction=0)
            count = x.numel() // x.shape[1]
            correction: torch.Tensor | float = count / max(count - 1, 1)
        else:
            w = self.ctx.mask.to(xf.dtype).reshape([-1] + [1] * (x.dim() - 1))
            count = w.sum() * math.prod(x.shape[2:])
            correction = count / (count - 1).clamp(min=1.0)
            denom = count.clamp(min=1.0)
            mean = (xf * w).sum(dims) / denom
            xc = xf - mean.reshape(cshape)
            var = (xc * xc * w).sum(dims) / denom
            out = xc * torch.rsqrt(var + self.eps).reshape(cshape)
            if self.affine:
                out = out * weight.reshape(cshape) + bias.reshape(cshape)
        if self.track_running_stats:
            nbt = self.num_batches_tracked + 1
            factor = self.momentum if self.momentum is not None else 1.0 / nbt
            unbiased = var.detach() * correction
            rm = self.running_mean * (1 - factor) + mean.detach() * factor
            rv = self.running_var * (1 - factor) + unbiased * factor
            self.ctx.new_buffers[self.prefix + "running_mean"] = rm.to(self.running_mean.dtype)
            self.ctx.new_buffers[self.prefix + "running_var"] = rv.to(self.running_var.dtype)
            self.ctx.new_buffers[self.prefix + "num_batches_tracked"] = nbt
        return out.to(x.dtype)


def _functional_twin(model: nn.Module, ctx: _Context) -> nn.Module:
    """A meta-device copy of ``model`` (same names) with every batch norm made masked and functional."""
    memo: dict[int, torch.Tensor] = {id(b): torch.empty_like(b, device="meta") for b in model.buffers()}
    memo.update({id(p): nn.Parameter(torch.empty_like(p, device="meta"), p.requires_grad) for p in model.parameters()})
    twin = copy.deepcopy(model, memo)
    for name, module in list(twin.named_modules()):
        for child_name, child in list(module.named_children()):
            if isinstance(child, nn.modules.batchnorm._BatchNorm):
                full = f"{name}.{child_name}" if name else child_name
                setattr(module, child_name, _MaskedBatchNorm(child, full, ctx))
    return twin.train()


def _torch_cross_entropy(loss_fn: nn.CrossEntropyLoss) -> MaskedLoss:
    """``nn.CrossEntropyLoss`` (the monitor's loss) as ``losses.cross_entropy`` with its class weights."""
    if loss_fn.label_smoothing != 0.0:
        raise NotImplementedError("nn.CrossEntropyLoss with label_smoothing has no masked form (use path 'sequential')")
    return lambda logits, y, mask: losses.cross_entropy(logits, y, loss_fn.reduction, mask, loss_fn.weight)


def takes_client_counts(loss_fn: nn.Module) -> bool:
    """Whether ``make_masked_loss(loss_fn)`` takes a fourth argument, the copy's own label counts [Q]."""
    return "client_counts" in losses.receives(loss_fn)


def make_masked_loss(loss_fn: nn.Module) -> MaskedLoss:
    """``(logits, y, mask) -> loss_fn(logits[mask], y[mask])`` with static shapes (vmap-safe).

    Every loss of ``losses`` (a ``losses.Loss``) does the masking itself (``loss_fn(logits, y, mask)``): padded
    samples (mask 0) influence nothing, neither the reduction nor GHM-C's bin density, MFE's class
    counts or the Ratio Loss's batch mean. GHM-C with momentum > 0 is refused. Losses that
    read each client's own label counts (``takes_client_counts``: FedLC, FedRS, la_local,
    bsm_local) take them as a fourth argument ``counts`` [Q], vmapped over the copies.
    """
    if not getattr(loss_fn, "vectorisable", True):
        raise NotImplementedError(
            f"{type(loss_fn).__name__} is declared sequential-only (vectorisable = False): the vectorised path and packs "
            "cannot run it; set path to 'sequential'"
        )
    reduction = getattr(loss_fn, "reduction", None)
    if reduction not in ("mean", "sum"):
        raise ValueError(f"the vectorised path needs a scalar loss (reduction 'mean' or 'sum'), got {reduction!r}")
    if takes_client_counts(loss_fn):
        if not callable(getattr(loss_fn, "forward_counts", None)):
            raise NotImplementedError(
                f"{type(loss_fn).__name__} receives client_counts but has no forward_counts(logits, y, counts, mask): "
                "the vectorised path hands each copy its own counts through it (losses.CountsLoss)"
            )
        return lambda logits, y, mask, counts: loss_fn.forward_counts(logits, y, counts, mask)
    if isinstance(loss_fn, losses.GHMCLoss) and loss_fn.momentum != 0:
        raise ValueError(
            "GHMCLoss with momentum > 0 keeps state across batches; the vectorised path supports "
            "momentum 0 only (use training path 'sequential')"
        )
    if isinstance(loss_fn, losses.Loss):
        return loss_fn
    if isinstance(loss_fn, nn.CrossEntropyLoss):
        return _torch_cross_entropy(loss_fn)
    raise NotImplementedError(
        f"no masked form of {type(loss_fn).__name__} for the vectorised path: a loss of fedbalance.methods.losses (a subclass "
        "of losses.Loss, whose forward takes a sample mask) or torch's nn.CrossEntropyLoss"
    )


def _schedules(
    sizes: list[int], cfg: SGDConfig, generators: list[torch.Generator]
) -> tuple[torch.Tensor, torch.Tensor, list[int], list[list[bool]]]:
    """Padded batch schedules on the CPU: indices [S, K, B], sample mask [S, K, B], each copy's step
    count and, per step and copy, whether the batch is fully real. The counts and flags are read from
    the batches' lengths, never from a tensor's values."""
    scheds = [batch_schedule(n, cfg, g) for n, g in zip(sizes, generators, strict=True)]
    steps = max((len(s) for s in scheds), default=0)
    width = max((len(b) for s in scheds for b in s), default=1)
    idx = torch.zeros(steps, len(sizes), width, dtype=torch.long)
    mask = torch.zeros(steps, len(sizes), width, dtype=torch.bool)
    for k, sched in enumerate(scheds):
        for s, b in enumerate(sched):
            idx[s, k, : len(b)] = b
            mask[s, k, : len(b)] = True
    full = [[s < len(sched) and len(sched[s]) == width for sched in scheds] for s in range(steps)]
    return idx, mask, [len(s) for s in scheds], full


def _pad_data(datasets: list[tuple[torch.Tensor, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Stack the copies' data, zero-padded to the largest dataset: x [K, N, ...], y [K, N]."""
    n = max(len(y) for _, y in datasets)
    x0, y0 = datasets[0]
    xs = x0.new_zeros((len(datasets), n, *x0.shape[1:]))
    ys = y0.new_zeros((len(datasets), n))
    for k, (x, y) in enumerate(datasets):
        xs[k, : len(y)] = x
        ys[k, : len(y)] = y
    return xs, ys


class _LossHolder(nn.Module):
    """``loss`` as a submodule, so ``functional_call`` can swap its buffers for one copy's; calls the masked loss."""

    def __init__(self, loss: nn.Module, masked: MaskedLoss) -> None:
        super().__init__()
        self.loss = loss
        self.call = lambda *args: masked(*args)

    def forward(self, *args: torch.Tensor) -> torch.Tensor:
        return self.call(*args)


def _make_step(
    twin: nn.Module,
    ctx: _Context,
    loss_fn: MaskedLoss,
    cfg: SGDConfig,
    options: VectorisedOptions,
    device: torch.device,
    with_counts: bool = False,
    loss_module: nn.Module | None = None,
) -> Callable[..., tuple[dict[str, torch.Tensor], ...]]:
    """One batched SGD step: (params, buffers, momenta, x, y, mask, active, counts[, loss_state]) -> updated + step loss.

    ``counts`` [K, Q] are the copies' own label counts, passed to the loss when ``with_counts``. ``loss_state``
    (given only with ``loss_module``, the module behind ``loss_fn``): each copy's own loss buffers [K, ...] (the
    Ratio Loss's pi, the prior of ``la``/``bsm``), swapped into ``loss_module`` for that copy's loss.
    """
    holder = _LossHolder(loss_module, loss_fn) if loss_module is not None else None

    def loss_of(
        params: dict[str, torch.Tensor],
        buffers: dict[str, torch.Tensor],
        x: torch.Tensor,
        y: torch.Tensor,
        mask: torch.Tensor,
        counts: torch.Tensor,
        loss_state: dict[str, torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, dict[str, torch.Tensor]]]:
        ctx.mask, ctx.new_buffers = mask, {}
        x = to_float(x)
        if options.channels_last and x.dim() == 4:
            x = x.contiguous(memory_format=torch.channels_last)
        autocast = torch.autocast(device.type, dtype=torch.bfloat16) if options.autocast_bf16 else contextlib.nullcontext()
        with autocast:
            logits = functional_call(twin, (params, buffers), (x,))
        if logits.dtype not in (torch.float32, torch.float64):
            logits = logits.float()
        if loss_state is not None and holder is not None:
            args = (logits, y, mask, counts) if with_counts else (logits, y, mask)
            loss = functional_call(holder, {f"loss.{k}": v for k, v in loss_state.items()}, args)
        else:
            loss = loss_fn(logits, y, mask, counts) if with_counts else loss_fn(logits, y, mask)
        new = {k: ctx.new_buffers.get(k, v) for k, v in buffers.items()}
        ctx.mask, ctx.new_buffers = None, {}
        return loss, (loss.detach(), new)

    def one(
        params: dict[str, torch.Tensor],
        buffers: dict[str, torch.Tensor],
        momenta: dict[str, torch.Tensor],
        x: torch.Tensor,
        y: torch.Tensor,
        mask: torch.Tensor,
        active: torch.Tensor,
        counts: torch.Tensor,
        loss_state: dict[str, torch.Tensor] | None = None,
    ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor], dict[str, torch.Tensor], torch.Tensor]:
        grads, (loss, new_buffers) = grad(loss_of, has_aux=True)(params, buffers, x, y, mask, counts, loss_state)
        new_params, new_momenta = {}, {}
        for k, p in params.items():
            d = grads[k]
            if cfg.weight_decay != 0:
                d = d.add(p, alpha=cfg.weight_decay)
            if cfg.momentum != 0:
                d = momenta[k].mul(cfg.momentum).add(d)
                new_momenta[k] = torch.where(active, d, momenta[k])
            new_params[k] = torch.where(active, p.add(d, alpha=-cfg.lr), p)
        new_buffers = {k: torch.where(active, v, buffers[k]) for k, v in new_buffers.items()}
        return new_params, new_buffers, new_momenta, torch.where(active, loss, torch.zeros_like(loss))

    step = vmap(one, randomness="error")
    return compile_deterministic(step) if options.compile else step


@dataclass
class _Setup:
    """What every vectorised call of one (model, loss, optimiser) builds before it trains."""

    state: dict[str, torch.Tensor]
    param_names: list[str]
    buffer_names: list[str]
    ctx: _Context
    step: Callable[..., tuple[dict[str, torch.Tensor], ...]]
    with_counts: bool


def _setup(
    model: nn.Module, loss_fn: nn.Module, cfg: SGDConfig, options: VectorisedOptions, device: torch.device,
    per_copy_loss: bool = False,
) -> _Setup:
    """The functional twin, parameter and buffer names and the batched step of ``model`` (``per_copy_loss``: the step
    takes each copy's loss buffers)."""
    masked = make_masked_loss(loss_fn)
    state = model.state_dict()
    ctx = _Context()
    twin = _functional_twin(model, ctx)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    with_counts = takes_client_counts(loss_fn)
    return _Setup(
        state, [k for k in state if k in trainable], [k for k in state if k not in trainable], ctx,
        _make_step(twin, ctx, masked, cfg, options, device, with_counts, loss_fn if per_copy_loss else None), with_counts,
    )


def _stacked(tensors: dict[str, torch.Tensor], names: list[str], copies: int) -> dict[str, torch.Tensor]:
    """``copies`` copies of each named tensor, stacked: [copies, ...]."""
    return {k: tensors[k].detach().unsqueeze(0).repeat(copies, *[1] * tensors[k].dim()) for k in names}


@dataclass
class ChunkInputs:
    """A chunk's round on the device: the padded data xs [K, N, ...], ys [K, N], its schedule idx [S, C, B], sample
    mask [S, C, B] and active flags [S, C], the copies' label counts [C, ...] and their rows in xs ([C, 1]); with
    per-copy loss state, the copies' loss buffers [C, ...]."""

    xs: torch.Tensor
    ys: torch.Tensor
    idx: torch.Tensor
    mask: torch.Tensor
    active: torch.Tensor
    counts: torch.Tensor
    rows: torch.Tensor
    loss_state: dict[str, torch.Tensor] | None = None


def step_counter(device: torch.device) -> torch.Tensor:
    """The captured step's index into the round's schedule: a one-element tensor on the device, advanced in place."""
    return torch.zeros(1, dtype=torch.long, device=device)


CAPTURE_WARMUP = 3
"""Steps run eagerly (on a side stream) before a CUDA graph is captured, as CUDA graph capture asks."""


def run_captured(
    setup: _Setup,
    params: dict[str, torch.Tensor],
    buffers: dict[str, torch.Tensor],
    momenta: dict[str, torch.Tensor],
    total: torch.Tensor,
    chunk: ChunkInputs,
    steps: int,
) -> None:
    """``steps`` batched SGD steps of a chunk, updating ``params``, ``buffers``, ``momenta`` and ``total`` in place.

    One step reads its batch through a step counter on the device (no host work between steps) and writes the
    step's results into the same tensors, so every step is the same launch sequence on the same memory: on CUDA it
    is captured once as a CUDA graph after ``CAPTURE_WARMUP`` eager steps and replayed; elsewhere it runs eagerly.
    Batch norm takes its masked form in every step (the eager loop switches to torch's on full batches).
    """
    device = chunk.xs.device
    counter = step_counter(device)
    setup.ctx.full = False

    def step() -> None:
        sel = chunk.idx.index_select(0, counter)[0]
        new_p, new_b, new_m, loss = setup.step(
            params, buffers, momenta, chunk.xs[chunk.rows, sel], chunk.ys[chunk.rows, sel],
            chunk.mask.index_select(0, counter)[0], chunk.active.index_select(0, counter)[0], chunk.counts,
            *(() if chunk.loss_state is None else (chunk.loss_state,)),
        )
        for held, new in ((params, new_p), (buffers, new_b), (momenta, new_m)):
            for k, v in new.items():
                held[k].copy_(v)
        total.add_(loss)
        counter.add_(1)

    if device.type != "cuda" or steps <= CAPTURE_WARMUP:
        for _ in range(steps):
            step()
        return
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(CAPTURE_WARMUP):
            step()
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    for _ in range(steps - CAPTURE_WARMUP):
        graph.replay()


def train_copies_vectorised(
    model: nn.Module,
    datasets: list[tuple[torch.Tensor, torch.Tensor]],
    loss_fn: nn.Module,
    cfg: SGDConfig,
    generators: list[torch.Generator],
    options: VectorisedOptions | None = None,
    *,
    starts: dict[str, torch.Tensor] | None = None,
    loss_state: dict[str, torch.Tensor] | None = None,
) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """``train_copies`` batched over the copies: same (stacked states, mean losses [K]), ``model`` unchanged.

    Batch schedules are drawn from ``generators`` exactly as ``local_sgd`` draws them. No host
    synchronisation happens inside the training loop; the data move to the model's device once.
    The round runs under the precision ``options.allow_tf32`` says (``sgd.precision``: fp32 by default).

    A pack (``fedbalance.jobs.pack``) trains copies of several jobs in one call: ``starts`` gives each copy its own start
    state (every key of ``model``'s state, stacked [K, ...]; default: ``model``'s for all) and ``loss_state`` each
    copy's own buffers of ``loss_fn`` (stacked [K, ...]; default: ``loss_fn``'s own for all). Without them the call
    runs exactly as before.
    """
    options = options or VectorisedOptions()
    make_masked_loss(loss_fn)
    if len(datasets) != len(generators):
        raise ValueError(f"{len(datasets)} datasets but {len(generators)} generators")
    state = model.state_dict()
    if not datasets:
        return {k: v.new_empty((0, *v.shape)) for k, v in state.items()}, torch.zeros(0)
    device = next(iter(state.values())).device
    setup = _setup(model, loss_fn, cfg, options, device, per_copy_loss=loss_state is not None)
    # each copy's own label counts (losses that read them), else a placeholder column
    counts = (torch.stack([client_counts(loss_fn, y) for _, y in datasets]) if setup.with_counts
              else torch.zeros(len(datasets), 1)).to(device)

    idx, mask, n_steps, full = _schedules([len(y) for _, y in datasets], cfg, generators)
    xs, ys = _pad_data(datasets)
    xs, ys, idx, mask = xs.to(device), ys.to(device), idx.to(device), mask.to(device)
    active = mask.any(-1)
    n_copies = len(datasets)
    chunk = options.chunk_size or n_copies
    out_states: list[dict[str, torch.Tensor]] = []
    totals: list[torch.Tensor] = []
    with precision("tf32" if options.allow_tf32 else "fp32"), torch.no_grad():
        for lo in range(0, n_copies, chunk):
            hi = min(lo + chunk, n_copies)
            c = hi - lo
            if starts is None:
                params = _stacked(state, setup.param_names, c)
                buffers = _stacked(state, setup.buffer_names, c)
            else:
                params = {k: starts[k][lo:hi].to(device, state[k].dtype, copy=True) for k in setup.param_names}
                buffers = {k: starts[k][lo:hi].to(device, state[k].dtype, copy=True) for k in setup.buffer_names}
            own_loss = None if loss_state is None else {k: v[lo:hi].to(device) for k, v in loss_state.items()}
            momenta = {k: torch.zeros_like(v) for k, v in params.items()} if cfg.momentum != 0 else {}
            total = torch.zeros(c, device=device)
            rows = torch.arange(lo, hi, device=device).unsqueeze(1)
            if options.capture:
                chunk_inputs = ChunkInputs(xs, ys, idx[:, lo:hi], mask[:, lo:hi], active[:, lo:hi], counts[lo:hi], rows, own_loss)
                run_captured(setup, params, buffers, momenta, total, chunk_inputs, max(n_steps[lo:hi]))
            for s in range(0 if options.capture else max(n_steps[lo:hi])):
                sel = idx[s, lo:hi]
                setup.ctx.full = all(full[s][lo:hi])
                params, buffers, momenta, loss = setup.step(
                    params, buffers, momenta, xs[rows, sel], ys[rows, sel], mask[s, lo:hi], active[s, lo:hi],
                    counts[lo:hi], *(() if own_loss is None else (own_loss,)),
                )
                total += loss
            out_states.append({k: params[k] if k in params else buffers[k] for k in state})
            totals.append(total)
    stacked = {k: torch.cat([o[k] for o in out_states]).to(state[k].dtype) for k in state}
    steps = torch.tensor(n_steps).clamp(min=1).double()
    losses = (torch.cat(totals).double().cpu() / steps).float()
    return stacked, losses


class MemoryTracker(TorchDispatchMode):
    """Live and peak bytes of the tensor storages created while active (and of those ``track``ed).

    Works on any device, the meta device included (sizes without data): a storage counts from the op
    that creates it until it is freed; views and in-place results count once.
    """

    def __init__(self) -> None:
        super().__init__()
        self.live: dict[int, int] = {}
        self.now = 0
        self.peak = 0

    def track(self, tensors: Iterable[torch.Tensor]) -> None:
        """Count these (already allocated) tensors' storages as live."""
        for t in tensors:
            storage = t.untyped_storage()
            key = storage._cdata
            if key not in self.live:
                self.live[key] = storage.nbytes()
                self.now += self.live[key]
                self.peak = max(self.peak, self.now)
                weakref.finalize(storage, self._free, key)

    def _free(self, key: int) -> None:
        self.now -= self.live.pop(key, 0)

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        out = func(*args, **(kwargs or {}))
        self.track(t for t in tree_leaves(out) if isinstance(t, torch.Tensor))
        return out


@dataclass(frozen=True)
class MemoryModel:
    """Device bytes of one vectorised call against c, the copies trained per vmap call (docs/performance.md, "Memory model").

    ``per_copy``: what one more copy in the vmap call adds to a step's peak (its weights, buffers and
    momenta, old and new, its batch, saved activations, gradients); ``step_fixed``: the rest of a
    step's peak; ``state``: one finished copy's state, kept until the call returns.
    """

    per_copy: int
    step_fixed: int
    state: int

    def need(self, chunk: int, copies: int, data: int) -> int:
        """Peak bytes of ``copies`` copies trained ``chunk`` at a time, with ``data`` bytes of padded data and schedules."""
        return data + max(copies * self.state + self.step_fixed + self.per_copy * chunk, 2 * copies * self.state)

    def chunk_size(self, budget: int, copies: int, data: int) -> int:
        """The largest chunk whose ``need`` fits ``budget`` (at least 1), evened out over the vmap calls it takes."""
        fits = [c for c in range(1, copies + 1) if self.need(c, copies, data) <= budget]
        largest = max(fits, default=1)
        return math.ceil(copies / math.ceil(copies / largest))


def data_bytes(sizes: list[int], sample: torch.Tensor, label: torch.Tensor, cfg: SGDConfig) -> int:
    """Bytes of a call's padded data [K, N, ...] and labels, schedules [S, K, B] and masks (``sample``/``label``: one of each)."""
    copies, n = len(sizes), max(sizes, default=0)
    width = min(cfg.batch_size, n) if n else 1
    steps = cfg.epochs * math.ceil(n / cfg.batch_size) if n else 0
    padded = copies * n * (sample.numel() * sample.element_size() + label.element_size())
    return padded + steps * copies * width * (8 + 1) + steps * copies


def _step_peak(
    setup: _Setup, cfg: SGDConfig, copies: int, width: int, sample: torch.Tensor, label: torch.Tensor, classes: int
) -> int:
    """Peak bytes of one batched step of ``copies`` copies on the meta device, its inputs included."""
    state = setup.state

    def meta(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        return torch.empty(shape, dtype=dtype, device="meta")

    params = {k: meta((copies, *state[k].shape), state[k].dtype) for k in setup.param_names}
    buffers = {k: meta((copies, *state[k].shape), state[k].dtype) for k in setup.buffer_names}
    momenta = {k: torch.empty_like(v) for k, v in params.items()} if cfg.momentum != 0 else {}
    batch = [
        meta((copies, width, *sample.shape), sample.dtype),
        meta((copies, width, *label.shape), label.dtype),
        meta((copies, width), torch.bool),
        meta((copies,), torch.bool),
        meta((copies, classes), torch.float32),
    ]
    setup.ctx.full = False
    with torch.no_grad(), MemoryTracker() as tracker:
        tracker.track([*params.values(), *buffers.values(), *momenta.values(), *batch])
        setup.step(params, buffers, momenta, *batch)
    return tracker.peak


def estimate_memory(
    model: nn.Module,
    loss_fn: nn.Module,
    cfg: SGDConfig,
    width: int,
    sample: torch.Tensor,
    label: torch.Tensor,
    options: VectorisedOptions | None = None,
) -> MemoryModel:
    """``MemoryModel`` of ``model`` trained in batches of ``width`` samples like ``sample``, measured on meta tensors.

    One batched step (with the masked batch norm, the costlier form) runs on the meta device for 1
    and for 2 copies under ``MemoryTracker``; the difference of the two peaks is one copy's cost.
    Nothing is allocated on the model's device.
    """
    options = options or VectorisedOptions()
    state = model.state_dict()
    loss_fn = copy.deepcopy(loss_fn).to("meta")  # its buffers (weights, counts, prior) meet the meta batch
    setup = _setup(model, loss_fn, cfg, options, next(iter(state.values())).device)
    classes = int(getattr(loss_fn, "num_classes", None) or 1) if setup.with_counts else 1
    one, two = (_step_peak(setup, cfg, c, width, sample, label, classes) for c in (1, 2))
    state_bytes = sum(v.numel() * v.element_size() for v in state.values())
    return MemoryModel(per_copy=two - one, step_fixed=max(2 * one - two, 0), state=state_bytes)


def memory_budget(device: torch.device, fraction: float = 0.8) -> int | None:
    """Bytes the copies of one vectorised call may take: ``fraction`` of the device's free memory.

    CUDA: ``torch.cuda.mem_get_info``'s free bytes plus what this process's caching allocator holds
    unused (reserved, not allocated); the rest of the fraction is headroom for the allocator's
    rounding and fragmentation and cuDNN's workspaces, which the meta estimate does not see. The CPU
    gets None: its memory is the machine's, and the copies are trained all at once (no chunking).
    """
    if device.type != "cuda":
        return None
    free, _ = torch.cuda.mem_get_info(device)
    cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    return int(fraction * (free + cached))
