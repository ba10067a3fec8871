"""The output bias's residuals along local runs, of real or simulated clients: what the bias solve needs.

A client that trains E epochs of batch B from G_t moves its output bias by -lr sum_s w_s sum_{i in b_s} dL_s/dz_i
(w_s the momentum weights, z_i sample i's logits: the bias enters every logit once). Over the round's clients,
with ``monitor.update_target``'s scale (mean aggregation),

    t = sum_c N_c r_c,   r_c = (B / (E N_c)) sum_j sum_s w_s sum_{i in b_s, y_i = c} dL_s/dz_i        (4')

which is (4) of docs/monitor.md with the clients' own loss (for plain CE dL/dz_i = (softmax_i - e_c) / |b_s|, the
``rlu`` residual). ``run_residuals`` measures one run's sums, ``residual_matrix`` turns runs into r.
``simulated_clients`` lays a composition out over simulated clients that hold a few classes each (a prior measured
in docs/monitor.md, "The ceiling"); ``weighted_run_residuals`` runs one simulated client smoothly in its shares;
``estimate_drift`` solves the round's bias change with it (docs/monitor.md, "`drift`").
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from fedbalance.methods.losses import CrossEntropyLoss, feed, receives
from fedbalance.methods.models import to_float
from fedbalance.monitor.monitor import (
    Estimate,
    bias_target,
    momentum_weights,
    recovered_counts,
)
from fedbalance.common.records import DRIFT
from fedbalance.training.sgd import FunctionalSGD, SGDConfig, batch_schedule, client_counts

ITERATIONS = 2
"""``drift``'s simulated runs a round (docs/monitor.md, "`drift`": more iterations drift away from the truth)."""

FLOOR = 0.002
"""The least share a simulated client gives a class (a class of share 0 would have no residual)."""


@dataclass(frozen=True)
class RunSums:
    """One or more local runs: ``sums`` [Q, Q] (row c: sum_s w_s sum_{i: y_i = c} dL_s/dz_i) and ``counts`` [Q]."""

    sums: Tensor
    counts: Tensor

    def __add__(self, other: RunSums) -> RunSums:
        return RunSums(self.sums + other.sums, self.counts + other.counts)

    @classmethod
    def zeros(cls, num_classes: int) -> RunSums:
        """No run yet: the start of a sum over runs."""
        return cls(torch.zeros(num_classes, num_classes, dtype=torch.float64), torch.zeros(num_classes, dtype=torch.float64))


def run_residuals(
    model: nn.Module, x: Tensor, y: Tensor, loss_fn: nn.Module, cfg: SGDConfig, batches: Sequence[Tensor], num_classes: int,
) -> RunSums:
    """Train a copy of ``model`` on (x, y) over ``batches`` with ``loss_fn`` (fed the client's own counts when it reads
    them), as a client does; return the momentum-weighted logit-gradient sums per class of (4'). ``model`` is unchanged."""
    sim = copy.deepcopy(model)
    sim.train()
    if "client_counts" in receives(loss_fn):
        feed(loss_fn, client_counts=client_counts(loss_fn, y))
    opt = FunctionalSGD(sim.parameters(), cfg)
    w = momentum_weights(len(batches), cfg.momentum)
    sums = torch.zeros(num_classes, num_classes, dtype=torch.float64)
    for s, idx in enumerate(batches):
        z = sim(to_float(x[idx]))
        z.retain_grad()
        loss = loss_fn(z, y[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        sums.index_add_(0, y[idx].cpu(), float(w[s]) * z.grad.detach().double().cpu())
        opt.step()
    return RunSums(sums, torch.bincount(y.cpu(), minlength=num_classes)[:num_classes].double())


def residual_matrix(runs: RunSums, cfg: SGDConfig) -> Tensor:
    """r [Q, Q] of (4') from the runs' sums: row c = (B / E) sums_c / N_c (0 for a class no run held)."""
    held = runs.counts > 0
    safe = torch.where(held, runs.counts, torch.ones_like(runs.counts))
    return torch.where(held.unsqueeze(1), runs.sums * cfg.batch_size / cfg.epochs / safe.unsqueeze(1), torch.zeros_like(runs.sums))


def weighted_run_residuals(
    model: nn.Module, aux_x: Tensor, aux_y: Tensor, loss_fn: nn.Module, cfg: SGDConfig, shares: Tensor, size: float,
    generator: torch.Generator,
) -> RunSums:
    """A simulated client of ``size`` samples whose classes have ``shares`` [Q], run by importance weights: its E
    ceil(size / B) batches of B are cut from random permutations of the aux samples laid end to end (the same batches
    for any ``shares`` given the same ``generator`` state: common random numbers), and sample i's loss is weighted by
    shares[y_i] / a[y_i] (a: the aux data's class shares), so its expected step is that of a client with those shares.
    Smooth in ``shares``; counts size x shares. ``loss_fn`` must take ``reduction``; a copy with reduction "none" runs."""
    q = int(shares.numel())
    n_aux = len(aux_y)
    a = torch.bincount(aux_y.cpu(), minlength=q)[:q].double() / n_aux
    v = torch.where(a > 0, shares.double().cpu() / a.clamp_min(1e-12), torch.zeros_like(a))
    steps = cfg.epochs * max(1, math.ceil(size / cfg.batch_size))
    order = torch.cat([torch.randperm(n_aux, generator=generator) for _ in range(-(-steps * cfg.batch_size // n_aux))])
    batches = order[: steps * cfg.batch_size].reshape(steps, cfg.batch_size)
    per_sample = copy.deepcopy(loss_fn)
    if not hasattr(per_sample, "reduction"):
        raise ValueError(f"{type(loss_fn).__name__} has no 'reduction': a weighted simulated client needs per-sample losses")
    per_sample.reduction = "none"
    if "client_counts" in receives(per_sample):
        feed(per_sample, client_counts=(shares.double() * float(size)).float())
    sim = copy.deepcopy(model)
    sim.train()
    opt = FunctionalSGD(sim.parameters(), cfg)
    w = momentum_weights(steps, cfg.momentum)
    v_dev = v.to(aux_x.device, torch.float32)
    sums = torch.zeros(q, q, dtype=torch.float64)
    for s, idx in enumerate(batches.to(aux_x.device)):
        yb = aux_y[idx]
        z = sim(to_float(aux_x[idx]))
        z.retain_grad()
        loss = (v_dev[yb] * per_sample(z, yb)).sum() / cfg.batch_size
        opt.zero_grad(set_to_none=True)
        loss.backward()
        sums.index_add_(0, yb.cpu(), float(w[s]) * z.grad.detach().double().cpu())
        opt.step()
    return RunSums(sums, shares.double().cpu() * float(size))


def clients_residuals(
    model: nn.Module, datasets: Sequence[tuple[Tensor, Tensor]], loss_fn: nn.Module, cfg: SGDConfig,
    generators: Sequence[torch.Generator], num_classes: int,
) -> RunSums:
    """The sums of every client's own local run (``batch_schedule`` with its generator: the engine's batches)."""
    total = RunSums.zeros(num_classes)
    for (x, y), gen in zip(datasets, generators, strict=True):
        total = total + run_residuals(model, x, y, copy.deepcopy(loss_fn), cfg, batch_schedule(len(y), cfg, gen), num_classes)
    return total


def aux_client(aux_x: Tensor, aux_y: Tensor, counts: Sequence[int], generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """A simulated client of ``counts[c]`` samples of class c drawn from the auxiliary data: each class's aux
    samples in a fresh random order, repeated as often as the count needs."""
    xs, ys = [], []
    for c, n in enumerate(counts):
        pool = torch.nonzero(aux_y.cpu() == c).flatten()
        if n <= 0:
            continue
        if len(pool) == 0:
            raise ValueError(f"the auxiliary data hold no sample of class {c}, which a simulated client needs")
        reps = torch.cat([pool[torch.randperm(len(pool), generator=generator)] for _ in range(-(-int(n) // len(pool)))])[: int(n)]
        xs.append(aux_x[reps.to(aux_x.device)])
        ys.append(aux_y[reps.to(aux_y.device)])
    return torch.cat(xs), torch.cat(ys)


def simulated_clients(counts: Tensor | Sequence[float], num_clients: int, classes_per_client: int) -> list[list[int]]:
    """Integer counts [K][Q] of ``num_clients`` simulated clients that hold ``classes_per_client`` classes each and
    together hold ``counts``: client j holds classes (j k + i) mod Q, i < k (a cyclic layout, so each class has
    about K k / Q holders), and each class's count is split evenly over its holders (largest remainders)."""
    n = torch.as_tensor(counts, dtype=torch.float64).clamp_min(0)
    q, k = n.numel(), max(1, min(int(classes_per_client), n.numel()))
    if num_clients < 1:
        raise ValueError(f"simulated clients need num_clients >= 1, got {num_clients}")
    holders: list[list[int]] = [[] for _ in range(q)]
    for j in range(num_clients):
        for i in range(k):
            holders[(j * k + i) % q].append(j)
    for c in range(q):  # fewer slots than classes: the classes left over go to the clients in turn
        if not holders[c]:
            holders[c].append(c % num_clients)
    out = [[0] * q for _ in range(num_clients)]
    for c in range(q):
        share = float(n[c]) / len(holders[c])
        base = [math.floor(share)] * len(holders[c])
        left = round(float(n[c])) - sum(base)
        for i in range(max(0, left)):
            base[i % len(base)] += 1
        for j, m in zip(holders[c], base, strict=True):
            out[j][c] += m
    return out


def simulated_residuals(
    model: nn.Module, aux_x: Tensor, aux_y: Tensor, loss_fn: nn.Module, cfg: SGDConfig, clients: Sequence[Sequence[int]],
    generator: torch.Generator,
) -> RunSums:
    """The sums of one simulated local run per row of ``clients`` (its counts per class, ``aux_client``), each with the
    round's loss and the batches a real client of that size gets."""
    q = len(clients[0])
    total = RunSums.zeros(q)
    for counts in clients:
        if sum(counts) <= 0:
            continue
        x, y = aux_client(aux_x, aux_y, counts, generator)
        total = total + run_residuals(model, x, y, copy.deepcopy(loss_fn), cfg, batch_schedule(len(y), cfg, generator), q)
    return total


def estimate_drift(
    model_t: nn.Module,
    state_t1: dict[str, Tensor],
    aux_x: Tensor,
    aux_y: Tensor,
    num_classes: int,
    cfg: SGDConfig,
    client_totals: Sequence[int],
    generator: torch.Generator,
    *,
    loss_fn: nn.Module | None = None,
    initial: Tensor | Sequence[float] | None = None,
    iterations: int = ITERATIONS,
    floor: float = FLOOR,
    aggregation: str = "mean",
) -> Estimate:
    """The ``drift`` estimator: the bias solve (4') with the residuals of a simulated client run with the round's loss.

    The simulated client (``weighted_run_residuals``) has the round's mean client size and the shares of ``initial``
    (counts; uniform when None, each share floored at ``floor``); it starts from G_t and trains with ``loss_fn`` (the
    loss the server sent, π included; plain CE when None). Each further iteration re-runs it with the previous
    solve's shares on the same batches (common random numbers). The map's fixed points are not the truth alone (the
    estimate follows the shares simulated, docs/monitor.md "`drift`"), so few iterations are run. Sees G_t, G_{t+1},
    the aux data, the protocol, the clients' totals and the loss.
    """
    if aggregation != "mean":
        raise ValueError(f"the drift estimator solves (4') for the mean aggregation, got aggregation {aggregation!r}")
    loss = CrossEntropyLoss() if loss_fn is None else loss_fn
    target = bias_target(model_t, state_t1, client_totals, cfg, aggregation).cpu()
    total = float(sum(client_totals))
    seed = int(torch.randint(0, 2**62, (1,), generator=generator))
    shares = torch.ones(num_classes, dtype=torch.float64) if initial is None else torch.as_tensor(initial, dtype=torch.float64).cpu().clamp_min(0)
    if not float(shares.sum()) > 0:
        shares = torch.ones(num_classes, dtype=torch.float64)
    counts = shares / shares.sum() * total
    for _ in range(max(1, iterations)):
        p = (counts / total).clamp_min(floor)
        runs = weighted_run_residuals(model_t, aux_x, aux_y, loss, cfg, p / p.sum(), total / len(client_totals),
                                      torch.Generator().manual_seed(seed))
        counts = recovered_counts(residual_matrix(runs, cfg), target, total).cpu()
    return Estimate(counts=counts, kept=torch.ones(num_classes, dtype=torch.long), method=DRIFT, dropped=0)
