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
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch import nn

from fedbalance.common.jobspec import JobSpec, as_spec
from fedbalance.engine.fl import (
    TAG_EPOCH,
    JobData,
    RoundCallback,
    RoundData,
    RoundState,
    RoundStep,
    Trained,
    check_switch,
    needs_monitor,
    partition_of_round,
    run_rounds,
    sgd_config,
    torch_generator,
)
from fedbalance.methods.losses import feed
from fedbalance.data.partition import Partition
from fedbalance.training.sgd import batch_schedule, make_optimizer, sgd_steps


def num_epochs(spec: Mapping[str, Any] | JobSpec) -> int:
    """``centralised_epochs``, or ``rounds * local_epochs`` when it is null."""
    spec = as_spec(spec)
    return spec.centralised_epochs if spec.centralised_epochs is not None else spec.rounds * spec.required("local_epochs")


class PooledStep(RoundStep):
    """One epoch of SGD on the pooled data, one optimiser for the whole run (its state is checkpointed)."""

    def __init__(self, spec: JobSpec, model: nn.Module, loss_fn: nn.Module, data: JobData, partitions: Mapping[str, Partition]):
        check_switch(spec, partitions)
        device = next(iter(model.state_dict().values())).device
        self.spec, self.model, self.loss_fn, self.data = spec, model, loss_fn, data
        self.seed, self.rounds, self.cfg = spec.seed, num_epochs(spec), sgd_config(spec, epochs=1)
        labels = data.y_train.cpu().numpy()
        self.pools = {
            name: (torch.from_numpy(np.array(p.pooled(), dtype=np.int64)).to(device), p.class_counts(labels).sum(0))
            for name, p in partitions.items()
        }
        self.opt = make_optimizer(model, self.cfg)
        self.shadow = copy.deepcopy(model) if needs_monitor(spec) else None

    def round_data(self, t: int) -> RoundData:
        """The pooled samples of the epoch's partition, as one client."""
        pool, true_counts = self.pools[partition_of_round(self.spec, t)]
        return RoundData(np.zeros(1, dtype=np.int64), [pool], true_counts)

    def train(self, t: int, batch: RoundData, state: RoundState) -> Trained:
        """One epoch of seeded mini-batches; the model is trained in place, ``shadow`` keeps G_t for the monitor."""
        (pool,) = batch.indices
        x, y = self.data.x_train[pool], self.data.y_train[pool]
        feed(self.loss_fn, client_counts=torch.as_tensor(batch.true_counts, dtype=torch.float32))
        if self.shadow is not None:
            self.shadow.load_state_dict(self.model.state_dict())
        batches = batch_schedule(len(y), self.cfg, torch_generator(self.seed, TAG_EPOCH, t))
        return Trained(sgd_steps(self.model, self.opt, x, y, self.loss_fn, batches), self.shadow, None)

    def restore(self, state: RoundState) -> None:
        """Resume the optimiser (momentum buffers) of a checkpointed run."""
        if state.optimizer is not None:
            self.opt.load_state_dict(state.optimizer)

    def save(self, state: RoundState) -> None:
        """Snapshot the optimiser after the epoch."""
        state.optimizer = copy.deepcopy(self.opt.state_dict())


def run_centralised(
    spec: Mapping[str, Any] | JobSpec,
    model: nn.Module,
    loss_fn: nn.Module,
    data: JobData,
    partitions: Mapping[str, Partition],
    *,
    state: RoundState | None = None,
    on_round: RoundCallback | None = None,
) -> RoundState:
    """Train on the pooled data of ``partitions["main"]`` (from ``switch_round`` on: "balanced").

    Same contract as ``fedbalance.engine.fl.run_fedavg``: returns the final ``RoundState``, calls
    ``on_round(state, row)`` after every epoch, resumes from ``state`` (optimiser included).
    """
    spec = as_spec(spec)
    step = PooledStep(spec, model, loss_fn, data, partitions)
    return run_rounds(spec, model, loss_fn, data, step, state=state, on_round=on_round)
