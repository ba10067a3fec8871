"""Training K copies of a model from the same start: the sequential reference or the batched path.

The building blocks live in ``fedbalance.sgd`` (re-exported here); ``fedbalance.vectorised`` builds
on them too, so this module sits above both and nothing imports it back.
"""

from __future__ import annotations

import torch
from torch import nn

from fedbalance.sgd import (  # noqa: F401  (re-exported: the training API in one place)
    SGDConfig,
    average_stacked,
    batch_schedule,
    client_counts,
    local_sgd,
    make_optimizer,
    sgd_steps,
    stack_states,
    to_float,
)


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
    batched implementation (``fedbalance.vectorised``); both give the same numbers. A loss with
    ``uses_client_counts`` (FedLC, FedRS, la_local, bsm_local) gets each copy's own label counts
    (``client_counts``) before that copy trains; the counts never leave ``train_copies``.
    """
    if path == "vectorised":
        from fedbalance.vectorised import train_copies_vectorised

        return train_copies_vectorised(model, datasets, loss_fn, cfg, generators)
    if path != "sequential":
        raise ValueError(f"training.path must be 'sequential' or 'vectorised', got {path!r}")
    start = {k: v.detach().clone() for k, v in model.state_dict().items()}
    states, losses = [], []
    for (x, y), gen in zip(datasets, generators, strict=True):
        model.load_state_dict(start)
        if getattr(loss_fn, "uses_client_counts", False):
            loss_fn.set_client_counts(client_counts(loss_fn, y))
        losses.append(local_sgd(model, x, y, loss_fn, cfg, gen))
        states.append({k: v.detach().clone() for k, v in model.state_dict().items()})
    model.load_state_dict(start)
    return stack_states(states), torch.tensor(losses)
