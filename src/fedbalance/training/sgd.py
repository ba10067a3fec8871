"""Local SGD: the optimiser, batch schedules and the loop that clients, the monitor and centralised runs share."""

from __future__ import annotations

import sys
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn
from torch.optim.sgd import sgd
from torch.utils.hooks import RemovableHandle

from fedbalance.methods.models import to_float


@dataclass(frozen=True)
class SGDConfig:
    """Optimiser and schedule of one local training run (paper: batch 32, lr 0.001)."""

    lr: float = 0.001
    momentum: float = 0.9
    weight_decay: float = 5e-4
    batch_size: int = 32
    epochs: int = 1


PRECISIONS = ("fp32", "tf32")
"""The float32 precision policies of a job (config key ``precision``; docs/performance.md, "Precision policy")."""


def use_deterministic_algorithms(mode: bool, *, warn_only: bool = False) -> None:
    """``torch.use_deterministic_algorithms``, without importing ``torch._inductor`` when nothing has.

    torch's function imports ``torch._inductor.config`` (1.2 s of CPU, a fifth of a short job's start-up)
    only to pass the flag on to ``torch.compile``; the kernels read ``torch._C``'s flag, set here alike.
    A caller that compiles afterwards passes the flag on with ``compile_deterministic``.
    """
    if "torch._inductor.config" in sys.modules:
        torch.use_deterministic_algorithms(mode, warn_only=warn_only)
    else:
        torch._C._set_deterministic_algorithms(mode, warn_only=warn_only)


def compile_deterministic(fn: Callable) -> Callable:
    """``torch.compile(fn)`` under the process's deterministic-algorithms setting (which
    ``use_deterministic_algorithms`` may not have passed on to inductor)."""
    torch.use_deterministic_algorithms(torch.are_deterministic_algorithms_enabled(),
                                       warn_only=torch.is_deterministic_algorithms_warn_only_enabled())
    return torch.compile(fn)


@contextmanager
def precision(name: str) -> Iterator[None]:
    """Run the block under a precision policy, restoring torch's previous flags afterwards.

    ``fp32``: TF32 off for CUDA matmuls and cuDNN (convolutions, RNNs), strict float32 (torch's own
    default turns TF32 on for cuDNN convolutions). ``tf32``: TF32 on for both. The legacy
    ``allow_tf32`` flags and the ``fp32_precision`` ones are set together, so either reads consistently.
    CPU kernels (oneDNN) are not touched.
    """
    if name not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {name!r}")
    b = torch.backends
    flags = (b.cuda.matmul, b.cudnn.conv, b.cudnn.rnn)
    before = [f.fp32_precision for f in flags]
    try:
        legacy: tuple[bool, bool] | None = (b.cuda.matmul.allow_tf32, b.cudnn.allow_tf32)
    except RuntimeError:  # flags mixed by earlier code: only the new-style ones can be read and restored
        legacy = None
    tf32 = name == "tf32"
    b.cuda.matmul.allow_tf32 = b.cudnn.allow_tf32 = tf32
    for f in flags:
        f.fp32_precision = "tf32" if tf32 else "ieee"
    try:
        yield
    finally:
        if legacy is not None:
            b.cuda.matmul.allow_tf32, b.cudnn.allow_tf32 = legacy
        for f, value in zip(flags, before, strict=True):
            f.fp32_precision = value


def batch_schedule(n: int, cfg: SGDConfig, generator: torch.Generator) -> list[torch.Tensor]:
    """Index batches of E epochs: a fresh permutation per epoch, last batch partial, drawn on the CPU."""
    batches: list[torch.Tensor] = []
    for _ in range(cfg.epochs):
        perm = torch.randperm(n, generator=generator)
        batches.extend(perm.split(cfg.batch_size))
    return batches


def make_optimizer(model: nn.Module, cfg: SGDConfig) -> torch.optim.SGD:
    """SGD with the paper's learning rate and the authors' momentum and weight decay."""
    return torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)


_STEP_POST_HOOKS: OrderedDict[int, Callable[[FunctionalSGD], None]] = OrderedDict()  # weakref-able, for RemovableHandle


def register_step_post_hook(hook: Callable[[FunctionalSGD], None]) -> RemovableHandle:
    """Call ``hook(opt)`` after every ``FunctionalSGD.step`` (as ``torch.optim``'s global step post-hooks do for its optimisers)."""
    handle = RemovableHandle(_STEP_POST_HOOKS)
    _STEP_POST_HOOKS[handle.id] = hook
    return handle


class FunctionalSGD:
    """``torch.optim.SGD``'s step, by the functional ``torch.optim.sgd.sgd`` that ``SGD.step`` itself calls.

    The same updates bit for bit (tests/test_sgd.py), without an ``Optimizer`` object: building
    the first one in a process imports ``torch._dynamo`` (about a second of CPU), which every
    short training job would pay. Momentum buffers start empty, as in a fresh ``SGD``.
    """

    def __init__(self, params: Iterable[torch.Tensor], cfg: SGDConfig) -> None:
        self.params = list(params)
        self.cfg = cfg
        self.buffers: list[torch.Tensor | None] = [None] * len(self.params)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Drop the gradients (``set_to_none`` is accepted for ``Optimizer`` compatibility; always None)."""
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        """One SGD step on every parameter that has a gradient (``SGD.step`` with dampening 0, no Nesterov)."""
        live = [i for i, p in enumerate(self.params) if p.grad is not None]
        params = [self.params[i] for i in live]
        buffers = [self.buffers[i] for i in live]
        sgd(
            params,
            [p.grad for p in params],
            buffers,
            weight_decay=self.cfg.weight_decay,
            momentum=self.cfg.momentum,
            lr=self.cfg.lr,
            dampening=0.0,
            nesterov=False,
            maximize=False,
            has_sparse_grad=False,
            foreach=None,
            fused=None,
            grad_scale=None,
            found_inf=None,
        )
        if self.cfg.momentum != 0:
            for i, buf in zip(live, buffers, strict=True):
                self.buffers[i] = buf
        for hook in list(_STEP_POST_HOOKS.values()):
            hook(self)


def local_sgd(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    loss_fn: nn.Module,
    cfg: SGDConfig,
    generator: torch.Generator,
) -> float:
    """Train ``model`` in place on (x, y) with a fresh SGD optimiser; return the mean batch loss.

    ``x`` may be uint8 (converted per batch); the batch order is ``batch_schedule``'s, so any
    other path that uses the same generator state sees exactly the same batches.
    """
    return sgd_steps(model, FunctionalSGD(model.parameters(), cfg), x, y, loss_fn, batch_schedule(len(y), cfg, generator))


def sgd_steps(
    model: nn.Module,
    opt: torch.optim.Optimizer | FunctionalSGD,
    x: torch.Tensor,
    y: torch.Tensor,
    loss_fn: nn.Module,
    batches: list[torch.Tensor],
) -> float:
    """One optimiser step per index batch (in train mode); return the mean batch loss.

    The whole schedule moves to the data's device once (one host-to-device copy, not one per step),
    and the loss stays there until the end: no host synchronisation inside the loop.
    """
    model.train()
    total = torch.zeros((), device=x.device)
    for idx in device_schedule(batches, x.device):
        loss = loss_fn(model(to_float(x[idx])), y[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        total += loss.detach()
    return float(total) / max(len(batches), 1)


def device_schedule(batches: list[torch.Tensor], device: torch.device) -> tuple[torch.Tensor, ...]:
    """The index batches as views of one tensor on ``device``, moved there in one copy."""
    if not batches:
        return ()
    return torch.cat(batches).to(device).split([len(b) for b in batches])


def stack_states(states: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Stack K state dicts into one dict of [K, ...] tensors."""
    return {k: torch.stack([s[k] for s in states]) for k in states[0]}


def average_stacked(stacked: dict[str, torch.Tensor], weights: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """FedAvg (paper Eq. FedAvg): the unweighted mean over clients, or weighted by ``weights``.

    Batch-norm buffers are averaged like parameters; integer buffers (``num_batches_tracked``)
    are averaged in float and rounded back.
    """
    out: dict[str, torch.Tensor] = {}
    for k, v in stacked.items():
        vf = v.double() if not v.is_floating_point() else v
        if weights is None:
            m = vf.mean(0)
        else:
            w = (weights / weights.sum()).to(vf.dtype).reshape(-1, *([1] * (vf.dim() - 1)))
            m = (vf * w).sum(0)
        out[k] = m.round().to(v.dtype) if not v.is_floating_point() else m
    return out


def client_counts(loss_fn: nn.Module, y: torch.Tensor) -> torch.Tensor:
    """A client's own label counts [Q] (float) for a loss that receives ``client_counts`` and ``num_classes`` set."""
    q = getattr(loss_fn, "num_classes", None)
    if q is None:
        raise ValueError(f"{type(loss_fn).__name__} reads local label counts: build it with num_classes (get_loss does)")
    return torch.bincount(y.long().reshape(-1), minlength=q)[:q].float()
