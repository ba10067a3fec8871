"""Non-FL baseline (table Res_without_mismatch): the same clients' data pooled and trained centrally.

Same model, loss and optimiser as the FL job (SGD with the job's lr, momentum, weight decay and
batch size), one optimiser for the whole run, ``centralised_epochs`` epochs (default
``rounds * local_epochs``, the number of passes a client makes over its data). Each epoch is one
"round" of rounds.csv and of the checkpoint; test metrics every ``eval_every`` epochs and at the end.

Ratio Loss without FL (the paper does not say how it got the weights there): the monitor runs every
epoch as for FedAvg with a single client holding the pooled data. Its per-class auxiliary copies are
trained for one epoch from the model at the start of the epoch, it compares them with the model at
the end of the epoch (client total = the pooled size, K = 1), and its weights pi are used in the next
epoch; epoch 0 uses pi = 1. The optimiser's momentum carries over between epochs, which the
monitor's one-step-from-G_t picture ignores; this only affects the estimates, not the method.
``la``/``bsm`` take the monitor's estimate as their prior the same way (uniform in epoch 0); the
losses that read local label counts (FedLC, FedRS, ``*_local``) get the pooled data's counts.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch import nn

from fedbalance.fl import (
    TAG_EPOCH,
    TAG_MONITOR,
    FLError,
    JobData,
    RoundCallback,
    build_acknowledger,
    build_monitor,
    close_round,
    empty_row,
    evaluate_into,
    fresh_state,
    hand_over_prior,
    monitor_round,
    needs_monitor,
    restore_state,
    sgd_config,
    torch_generator,
)
from fedbalance.config import base_loss
from fedbalance.metrics import empirical_y_stats
from fedbalance.partition import Partition
from fedbalance.sgd import batch_schedule, make_optimizer, sgd_steps


def num_epochs(spec: Mapping[str, Any]) -> int:
    """``centralised_epochs``, or ``rounds * local_epochs`` when it is null."""
    e = spec.get("centralised_epochs")
    return int(e) if e is not None else int(spec["rounds"]) * int(spec["local_epochs"])


def run_centralised(
    spec: Mapping[str, Any],
    model: nn.Module,
    loss_fn: nn.Module,
    data: JobData,
    partitions: Mapping[str, Partition],
    *,
    state: dict[str, Any] | None = None,
    on_round: RoundCallback | None = None,
) -> dict[str, Any]:
    """Train on the pooled data of ``partitions["main"]`` (from ``switch_round`` on: "balanced").

    Same contract as ``fedbalance.fl.run_fedavg``: returns the final engine state, calls
    ``on_round(state, row)`` after every epoch, resumes from ``state`` (optimiser included).
    """
    device = next(iter(model.state_dict().values())).device
    seed, q = int(spec["seed"]), data.num_classes
    switch = spec.get("switch_round")
    if switch is not None and "balanced" not in partitions:
        raise FLError("switch_round is set but no 'balanced' partition was given")
    labels = data.y_train.cpu().numpy()
    pools = {
        name: (torch.from_numpy(np.array(p.pooled(), dtype=np.int64)).to(device), p.class_counts(labels).sum(0))
        for name, p in partitions.items()
    }
    cfg = sgd_config(spec, epochs=1)
    opt = make_optimizer(model, cfg)
    monitor = build_monitor(spec, data.aux_x, data.aux_y, q, cfg) if needs_monitor(spec) else None
    ack = build_acknowledger(spec) if monitor is not None else None
    shadow = copy.deepcopy(model) if monitor is not None else None
    state = fresh_state(model, loss_fn, q) if state is None else state
    restore_state(state, model, loss_fn, ack)
    if "optimizer" in state["extra"]:
        opt.load_state_dict(state["extra"]["optimizer"])
    epochs, eval_every = num_epochs(spec), int(spec.get("eval_every", 1))
    lead = tuple(spec["monitor"]["estimators"])[0] if monitor is not None else None
    for t in range(int(state["next_round"]), epochs):
        start = time.perf_counter()
        row = empty_row(t)
        pool, true_counts = pools["balanced" if switch is not None and t >= switch else "main"]
        x, y = data.x_train[pool], data.y_train[pool]
        row["true_composition"] = [float(c) for c in true_counts]
        if spec.get("empirical"):
            row.update(empirical_y_stats(model, x, y, cfg.batch_size))
        if base_loss(spec) == "ratio":
            loss_fn.set_weight(state["pi"])
        hand_over_prior(state, loss_fn, q)
        if getattr(loss_fn, "uses_client_counts", False):
            loss_fn.set_client_counts(torch.as_tensor(true_counts, dtype=torch.float32))
        if shadow is not None:
            shadow.load_state_dict(model.state_dict())
        batches = batch_schedule(len(y), cfg, torch_generator(seed, TAG_EPOCH, t))
        row["train_loss"] = sgd_steps(model, opt, x, y, loss_fn, batches)
        if monitor is not None:
            totals = [len(y)]
            observed = monitor.observe(shadow, model.state_dict(), totals, torch_generator(seed, TAG_MONITOR, t))
            monitor_round(state, row, observed, ack, lead, true_counts, totals)
        if (t + 1) % eval_every == 0 or t == epochs - 1:
            evaluate_into(row, model, data)
        close_round(state, row, model, loss_fn, start)
        state["extra"]["optimizer"] = copy.deepcopy(opt.state_dict())
        if on_round is not None:
            on_round(state, row)
    return state
