"""Training K copies of a model from the same start: the sequential reference or the batched path.

The building blocks live in ``fedbalance.training.sgd`` (re-exported here); ``fedbalance.training.vectorised`` builds
on them too, so this module sits above both and nothing imports it back. ``CopyPlan`` (set for a
job with ``copy_plan``) says how every ``train_copies`` call runs: its precision policy and, on the
vectorised path, the memory budget each call's chunk size is chosen against.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from fedbalance.methods.losses import feed, receives
from fedbalance.training.sgd import (  # noqa: F401  (re-exported: the training API in one place)
    PRECISIONS,
    SGDConfig,
    average_stacked,
    batch_schedule,
    client_counts,
    local_sgd,
    make_optimizer,
    precision,
    sgd_steps,
    stack_states,
    to_float,
)


@dataclass
class CopyPlan:
    """How ``train_copies`` runs: ``precision`` (``sgd.PRECISIONS``) on both paths and, on the
    vectorised one, ``memory_budget`` bytes per call (None: all copies in one vmap call, as on the CPU) and
    ``capture`` (each chunk's step captured once and replayed: ``vectorised.run_captured``).

    ``chunks`` records the chunk size chosen for each call shape ("<copies>x<batch>"), the first
    time that shape is seen; later calls of the shape reuse it, so a job keeps its chunks (a resume
    starts from the checkpoint's). ``estimates`` holds each shape's memory model (GiB).
    """

    precision: str = "fp32"
    memory_budget: int | None = None
    capture: bool = False
    chunks: dict[str, int] = field(default_factory=dict)
    estimates: dict[str, dict[str, float]] = field(default_factory=dict)

    def chunk_size(
        self, model: nn.Module, datasets: list[tuple[torch.Tensor, torch.Tensor]], loss_fn: nn.Module, cfg: SGDConfig
    ) -> int | None:
        """Copies per vmap call for this call: the recorded chunk of its shape, else the largest that fits the budget."""
        if self.memory_budget is None or not datasets:
            return None
        from fedbalance.training.vectorised import data_bytes, estimate_memory

        sizes = [len(y) for _, y in datasets]
        width = max(1, min(cfg.batch_size, max(sizes)))
        key = f"{len(datasets)}x{width}"
        if key not in self.chunks:
            x0, y0 = datasets[0]
            model_mem = estimate_memory(model, loss_fn, cfg, width, x0[0], y0[0])
            data = data_bytes(sizes, x0[0], y0[0], cfg)
            self.chunks[key] = model_mem.chunk_size(self.memory_budget, len(datasets), data)
            gib = 2.0**30
            self.estimates[key] = {
                "per_copy_gib": model_mem.per_copy / gib,
                "fixed_gib": model_mem.need(0, len(datasets), data) / gib,
                "need_gib": model_mem.need(self.chunks[key], len(datasets), data) / gib,
            }
        return self.chunks[key]

    def record(self) -> dict[str, Any]:
        """What metrics.json records: the budget (GiB), the chunks and the estimates (of the shapes chosen in this run)."""
        budget = None if self.memory_budget is None else self.memory_budget / 2.0**30
        return {"memory_budget_gib": budget, "chunks": dict(self.chunks), "estimates": dict(self.estimates)}


_PLAN: list[CopyPlan] = []


@contextlib.contextmanager
def copy_plan(plan: CopyPlan) -> Iterator[CopyPlan]:
    """Every ``train_copies`` call in the block runs by ``plan`` (a job sets its own; nesting restores the outer one)."""
    _PLAN.append(plan)
    try:
        yield plan
    finally:
        _PLAN.pop()


def job_plan(device: torch.device, precision: str = "fp32", capture: bool = False) -> CopyPlan:
    """A job's plan: ``precision``, ``capture`` and, on CUDA, the budget of the memory free now
    (``vectorised.memory_budget``)."""
    if device.type != "cuda":
        return CopyPlan(precision=precision, capture=capture)
    from fedbalance.training.vectorised import memory_budget

    return CopyPlan(precision=precision, memory_budget=memory_budget(device), capture=capture)


_DEFAULT: dict[str, CopyPlan] = {}


def current_plan(device: torch.device) -> CopyPlan:
    """The active ``copy_plan``, else this process's plan for ``device``: fp32 and the budget when first asked
    (None on the CPU), each call shape's chunk chosen once (so timed calls, e.g. ``fedbalance cost``, do not
    pay for the estimate again)."""
    if _PLAN:
        return _PLAN[-1]
    if str(device) not in _DEFAULT:
        _DEFAULT[str(device)] = job_plan(device)
    return _DEFAULT[str(device)]


def train_copies(
    model: nn.Module,
    datasets: list[tuple[torch.Tensor, torch.Tensor]],
    loss_fn: nn.Module,
    cfg: SGDConfig,
    generators: list[torch.Generator],
    *,
    path: str = "sequential",
) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Train one copy of ``model`` per dataset from the same start; return (stacked states, mean losses [K]).

    This is both a FedAvg round's client training and the monitor's per-class auxiliary
    training. ``model`` itself is left unchanged. ``path`` selects the sequential reference or the
    batched implementation (``fedbalance.training.vectorised``); both give the same numbers. A loss with
    ``receives`` "client_counts" (FedLC, FedRS, la_local, bsm_local) is fed each copy's own label counts
    before that copy trains; the counts never leave ``train_copies``. Both paths
    run under the plan's precision (``current_plan``); the vectorised one in the plan's chunks.
    """
    if path not in ("sequential", "vectorised"):
        raise ValueError(f"training.path must be 'sequential' or 'vectorised', got {path!r}")
    device = next(iter(model.state_dict().values())).device
    plan = current_plan(device)
    if path == "vectorised":
        from fedbalance.training.vectorised import VectorisedOptions, train_copies_vectorised

        options = VectorisedOptions(chunk_size=plan.chunk_size(model, datasets, loss_fn, cfg), allow_tf32=plan.precision == "tf32",
                                    capture=plan.capture)
        return train_copies_vectorised(model, datasets, loss_fn, cfg, generators, options)
    start = {k: v.detach().clone() for k, v in model.state_dict().items()}
    states, losses = [], []
    with precision(plan.precision):
        for (x, y), gen in zip(datasets, generators, strict=True):
            model.load_state_dict(start)
            if "client_counts" in receives(loss_fn):
                feed(loss_fn, client_counts=client_counts(loss_fn, y))
            losses.append(local_sgd(model, x, y, loss_fn, cfg, gen))
            states.append({k: v.detach().clone() for k, v in model.state_dict().items()})
    model.load_state_dict(start)
    return stack_states(states), torch.tensor(losses)
