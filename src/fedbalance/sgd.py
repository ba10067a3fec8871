"""Local SGD: the optimiser, batch schedules and the loop that clients, the monitor and centralised runs share."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class SGDConfig:
    """Optimiser and schedule of one local training run (paper: batch 32, lr 0.001)."""

    lr: float = 0.001
    momentum: float = 0.9
    weight_decay: float = 5e-4
    batch_size: int = 32
    epochs: int = 1


def to_float(x: torch.Tensor) -> torch.Tensor:
    """uint8 images [N, C, H, W] -> float32 in [0, 1]."""
    return x.float().div_(255.0) if x.dtype == torch.uint8 else x.float()


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
    return sgd_steps(model, make_optimizer(model, cfg), x, y, loss_fn, batch_schedule(len(y), cfg, generator))


def sgd_steps(
    model: nn.Module,
    opt: torch.optim.Optimizer,
    x: torch.Tensor,
    y: torch.Tensor,
    loss_fn: nn.Module,
    batches: list[torch.Tensor],
) -> float:
    """One optimiser step per index batch (in train mode); return the mean batch loss."""
    model.train()
    total = torch.zeros((), device=x.device)
    for idx in batches:
        idx = idx.to(x.device)
        loss = loss_fn(model(to_float(x[idx])), y[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        total += loss.detach()
    return float(total) / max(len(batches), 1)


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
    """A client's own label counts [Q] (float) for a loss with ``uses_client_counts`` and ``num_classes`` set."""
    q = getattr(loss_fn, "num_classes", None)
    if q is None:
        raise ValueError(f"{type(loss_fn).__name__} reads local label counts: build it with num_classes (get_loss does)")
    return torch.bincount(y.long().reshape(-1), minlength=q)[:q].float()
