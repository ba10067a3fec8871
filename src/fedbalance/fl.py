"""FedAvg engine of the paper: client selection, local training, averaging, monitor and per-round records.

One round t (0-based) of ``run_fedavg``:

1. select ``clients_per_round`` clients: ``fixed`` = the same clients every round (drawn once from
   the seed; the paper's loss comparison, Γ fixed), ``random`` = a fresh seeded draw each round
   (the monitor experiments);
2. every selected client trains a copy of G_t on its data (``train_copies`` with the job's
   ``path``; SGD with the job's lr, momentum, weight decay, batch size and local epochs; the job's
   loss, Ratio Loss with the weights pi handed over by the previous round's monitor, pi = 1 in
   round 0; ``la``/``bsm`` with the monitor's estimate of the previous round's composition as their
   prior, uniform in round 0; FedLC, FedRS and the ``*_local`` controls with each client's own
   label counts, which never leave the client);
3. the server averages the copies (``aggregation``: ``mean`` = the paper's unweighted FedAvg,
   ``weighted`` = by sample count), batch-norm buffers included, giving G_{t+1};
4. the monitor (Ratio-Loss and ``la``/``bsm`` jobs, and any job with ``monitor.record``) trains per-class copies of
   G_t on its auxiliary data, estimates the round's class counts from (G_t, G_{t+1}, the clients'
   totals only) and derives the Ratio-Loss weights pi for round t+1. The true composition of the
   selected clients is computed here for evaluation only and never reaches the monitor;
5. the test metrics of G_{t+1} are computed every ``eval_every`` rounds and at the last round.

With ``save_trajectory`` the state's ``extra["trajectory"]`` keeps G_t and the selected clients'
totals of every round (the monitor's inputs), so estimators can be replayed offline.

Per-round columns (``ROUND_COLUMNS``): ``weights`` is the pi the monitor derived in round t (used
by the clients of round t+1); ``acknowledged`` is the acknowledger's state after round t, fed with
the estimate of the first configured estimator (``monitor.estimators[0]``); ``emp_cos``/``emp_cv``
(``empirical: true``) are ``empirical_y_stats`` of G_t, the model the clients start from, on the
selected clients' data in local batches of ``batch_size``.

Randomness: every random draw of a round comes from a generator seeded by a NumPy ``SeedSequence``
of (job seed, purpose, round[, client id]), so numbers do not depend on the training path, on the
order of the clients or on a resume from a checkpoint.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from fedbalance.config import base_loss, job_value
from fedbalance.losses import uses_monitor_prior
from fedbalance.metrics import empirical_y_stats, evaluate
from fedbalance.monitor import Acknowledger, Monitor, cosine_similarity, uniform_guess
from fedbalance.partition import Partition
from fedbalance.records import ESTIMATORS, ROUND_COLUMNS, UNIFORM
from fedbalance.train import SGDConfig, average_stacked, train_copies

TAG_INIT, TAG_SELECT, TAG_CLIENT, TAG_MONITOR, TAG_AUX, TAG_EPOCH = 1, 2, 3, 4, 5, 6

RoundCallback = Callable[[dict[str, Any], dict[str, Any]], None]


class FLError(ValueError):
    """The job cannot run as specified (e.g. a missing balanced partition); the message names the key."""


def derive_seed(*keys: int) -> int:
    """A 63-bit seed from a NumPy ``SeedSequence`` of ``keys`` (job seed, purpose tag, round, ...)."""
    hi, lo = np.random.SeedSequence([int(k) for k in keys]).generate_state(2, np.uint32)
    return ((int(hi) << 32) | int(lo)) >> 1


def torch_generator(*keys: int) -> torch.Generator:
    """A CPU ``torch.Generator`` seeded with ``derive_seed(*keys)``."""
    return torch.Generator().manual_seed(derive_seed(*keys))


def sgd_config(spec: Mapping[str, Any], epochs: int | None = None) -> SGDConfig:
    """The job's client optimiser: lr, momentum, weight decay, batch size, local epochs."""
    return SGDConfig(
        lr=float(spec["lr"]),
        momentum=float(spec["momentum"]),
        weight_decay=float(spec["weight_decay"]),
        batch_size=int(spec["batch_size"]),
        epochs=int(spec["local_epochs"] if epochs is None else epochs),
    )


def select_clients(selection: str, num_clients: int, k: int, seed: int, round_index: int) -> np.ndarray:
    """Sorted ids of the round's clients: ``fixed`` draws once per seed, ``random`` once per round."""
    if k > num_clients:
        raise FLError(f"clients_per_round = {k} but the partition has only {num_clients} clients")
    if selection == "fixed":
        rng = np.random.default_rng(derive_seed(seed, TAG_SELECT))
    elif selection == "random":
        rng = np.random.default_rng(derive_seed(seed, TAG_SELECT, round_index))
    else:
        raise FLError(f"selection must be 'fixed' or 'random', got {selection!r}")
    return np.sort(rng.choice(num_clients, size=k, replace=False))


def needs_monitor(spec: Mapping[str, Any]) -> bool:
    """The monitor runs for Ratio-Loss jobs (it makes the weights), for losses that train with its
    composition estimate as their prior (``la``, ``bsm``) and when ``monitor.record`` is set."""
    return (
        base_loss(spec) == "ratio"
        or uses_monitor_prior(base_loss(spec))
        or bool(spec.get("monitor", {}).get("record", False))
    )


def hand_over_prior(state: Mapping[str, Any], loss_fn: nn.Module, num_classes: int) -> None:
    """Install the monitor's estimate of the previous round's class counts as the prior of a loss
    with ``uses_monitor_prior`` (uniform in round 0), as the Ratio-Loss weights are handed over."""
    if getattr(loss_fn, "uses_monitor_prior", False):
        prior = state.get("prior")
        loss_fn.set_prior(torch.ones(num_classes, dtype=torch.float64) if prior is None else prior)


def build_monitor(spec: Mapping[str, Any], aux_x: Tensor, aux_y: Tensor, num_classes: int, cfg: SGDConfig) -> Monitor:
    """The job's monitor (same optimiser, batch size and epochs as a client)."""
    m = spec["monitor"]
    return Monitor(
        aux_x,
        aux_y,
        num_classes,
        cfg,
        t_ra=float(m["t_ra"]),
        variant=m["variant"],
        methods=tuple(m["estimators"]),
        alpha=float(m["alpha"]),
        beta=float(m["beta"]),
        clip=float(job_value(spec, "monitor.ratio_clip")),
        aggregation=spec["aggregation"],
        path=spec["path"],
    )


def build_acknowledger(spec: Mapping[str, Any]) -> Acknowledger:
    """Acknowledger with the job's ``monitor.acknowledge`` threshold and rounds."""
    a = spec["monitor"]["acknowledge"]
    return Acknowledger(float(a["threshold"]), int(a["rounds"]))


@dataclass
class JobData:
    """Everything a run needs, on its device: train/test tensors, auxiliary data, class info."""

    x_train: Tensor
    y_train: Tensor
    x_test: Tensor
    y_test: Tensor
    aux_x: Tensor
    aux_y: Tensor
    num_classes: int
    minority_classes: tuple[int, ...]


def empty_row(round_index: int) -> dict[str, Any]:
    """A rounds.csv row with every column present and nothing recorded."""
    row: dict[str, Any] = dict.fromkeys(ROUND_COLUMNS)
    row["round"] = round_index
    return row


def _list(t: Tensor | Sequence[float]) -> list[float]:
    return [float(v) for v in torch.as_tensor(t, dtype=torch.float64).reshape(-1).tolist()]


def record_monitor(row: dict[str, Any], observed: Mapping[str, Any], true_counts: np.ndarray, totals: Sequence[int]) -> None:
    """Fill the monitor columns: each estimate, its CS to the true composition, the uniform guess's CS, pi."""
    q = len(true_counts)
    for method, est in observed["estimates"].items():
        if method in ESTIMATORS:
            row[f"est_{method}"] = _list(est.counts)
            row[f"cs_{method}"] = cosine_similarity(est.counts, torch.as_tensor(true_counts, dtype=torch.float64))
    row[f"cs_{UNIFORM}"] = cosine_similarity(uniform_guess(totals, q), torch.as_tensor(true_counts, dtype=torch.float64))
    row["weights"] = _list(observed["weights"])


def evaluate_into(row: dict[str, Any], model: nn.Module, data: JobData) -> dict[str, Any]:
    """Evaluate ``model`` on the test set and copy the per-round columns into ``row``."""
    metrics = evaluate(model, data.x_test, data.y_test, data.num_classes, data.minority_classes)
    for k in ("acc", "acc_minority", "acc_majority", "auc_micro", "auc_hard"):
        row[k] = metrics[k]
    return metrics


def _client_indices(partition: Partition, device: torch.device) -> list[Tensor]:
    return [torch.from_numpy(np.array(c, dtype=np.int64)).to(device) for c in partition.clients]


def _device(model: nn.Module) -> torch.device:
    return next(iter(model.state_dict().values())).device


def fresh_state(model: nn.Module, loss_fn: nn.Module, num_classes: int) -> dict[str, Any]:
    """Round-0 engine state (what a checkpoint holds)."""
    return {
        "next_round": 0,
        "model": {k: v.detach().clone() for k, v in model.state_dict().items()},
        "loss_state": {k: v.detach().clone() for k, v in loss_fn.state_dict().items()},
        "pi": torch.ones(num_classes, dtype=torch.float64),
        "prior": torch.ones(num_classes, dtype=torch.float64),
        "ack": None,
        "ack_round": None,
        "rows": [],
        "extra": {},
    }


def restore_state(state: dict[str, Any], model: nn.Module, loss_fn: nn.Module, ack: Acknowledger | None) -> None:
    """Load a (fresh or checkpointed) engine state into the model, the loss and the acknowledger."""
    model.load_state_dict(state["model"])
    loss_fn.load_state_dict(state["loss_state"])
    if ack is not None and state["ack"] is not None:
        ack.load_state_dict(state["ack"])


def monitor_round(
    state: dict[str, Any],
    row: dict[str, Any],
    observed: Mapping[str, Any],
    ack: Acknowledger,
    lead: str,
    true_counts: np.ndarray,
    totals: Sequence[int],
) -> None:
    """Record round ``row["round"]``'s estimates, update the acknowledgment and the next round's weights π
    and prior (the lead estimator's composition estimate, for ``la``/``bsm``)."""
    record_monitor(row, observed, true_counts, totals)
    row["acknowledged"] = ack.update(observed["estimates"][lead].counts)
    if row["acknowledged"] and state["ack_round"] is None:
        state["ack_round"] = row["round"]
    state["pi"] = observed["weights"].detach().cpu().double()
    state["prior"] = torch.as_tensor(observed["estimates"][lead].counts).detach().cpu().double()
    state["ack"] = ack.state_dict()


def close_round(state: dict[str, Any], row: dict[str, Any], model: nn.Module, loss_fn: nn.Module, start: float) -> None:
    """Append the finished round's row and snapshot what a checkpoint needs to resume after it."""
    row["seconds"] = time.perf_counter() - start
    state["rows"].append(row)
    state["next_round"] = row["round"] + 1
    state["model"] = {k: v.detach().clone() for k, v in model.state_dict().items()}
    state["loss_state"] = {k: v.detach().clone() for k, v in loss_fn.state_dict().items()}


def run_fedavg(
    spec: Mapping[str, Any],
    model: nn.Module,
    loss_fn: nn.Module,
    data: JobData,
    partitions: Mapping[str, Partition],
    *,
    state: dict[str, Any] | None = None,
    on_round: RoundCallback | None = None,
) -> dict[str, Any]:
    """Run (or resume from ``state``) the job's FedAvg rounds; return the final engine state.

    ``model`` and ``loss_fn`` are updated in place (``model`` ends as the final global model).
    ``state`` is a previous return value or the ``state`` handed to ``on_round`` (a checkpoint);
    ``on_round(state, row)`` is called after every finished round. ``state["rows"]`` holds one
    dict per round with the keys ``ROUND_COLUMNS``; ``state["ack_round"]`` the first round whose
    estimate was acknowledged as imbalanced (monitor runs only). ``partitions["balanced"]`` is
    needed when ``spec["switch_round"]`` is set (early acknowledgment: train on it from that round on).
    """
    device = _device(model)
    seed, q = int(spec["seed"]), data.num_classes
    switch = spec.get("switch_round")
    if switch is not None and "balanced" not in partitions:
        raise FLError("switch_round is set but no 'balanced' partition was given")
    main = partitions["main"]
    parts = {name: (p, _client_indices(p, device), p.class_counts(data.y_train.cpu().numpy())) for name, p in partitions.items()}
    cfg = sgd_config(spec)
    monitor = build_monitor(spec, data.aux_x, data.aux_y, q, cfg) if needs_monitor(spec) else None
    ack = build_acknowledger(spec) if monitor is not None else None
    state = fresh_state(model, loss_fn, q) if state is None else state
    restore_state(state, model, loss_fn, ack)
    rounds, k = int(spec["rounds"]), int(spec["clients_per_round"])
    eval_every = int(spec.get("eval_every", 1))
    weights_of_clients = spec["aggregation"] == "weighted"
    lead = tuple(spec["monitor"]["estimators"])[0] if monitor is not None else None
    for t in range(int(state["next_round"]), rounds):
        start = time.perf_counter()
        row = empty_row(t)
        _, indices, counts = parts["balanced" if switch is not None and t >= switch else "main"]
        chosen = select_clients(spec["selection"], main.num_clients, k, seed, t)
        datasets = [(data.x_train[indices[j]], data.y_train[indices[j]]) for j in chosen]
        totals = [len(indices[j]) for j in chosen]
        true_counts = counts[chosen].sum(0)
        row["true_composition"] = [float(c) for c in true_counts]
        if spec.get("empirical"):
            pooled = torch.cat([indices[j] for j in chosen])
            row.update(empirical_y_stats(model, data.x_train[pooled], data.y_train[pooled], cfg.batch_size))
        if base_loss(spec) == "ratio":
            loss_fn.set_weight(state["pi"])
        hand_over_prior(state, loss_fn, q)
        if spec.get("save_trajectory"):
            snapshot = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
            state["extra"].setdefault("trajectory", []).append({"round": t, "model": snapshot, "totals": totals})
        gens = [torch_generator(seed, TAG_CLIENT, t, int(j)) for j in chosen]
        stacked, losses = train_copies(model, datasets, loss_fn, cfg, gens, path=spec["path"])
        w = torch.tensor(totals, dtype=torch.float64) if weights_of_clients else None
        new_state = average_stacked(stacked, None if w is None else w.to(device))
        row["train_loss"] = float((losses.double() * (w / w.sum() if w is not None else 1 / len(totals))).sum())
        if monitor is not None:
            observed = monitor.observe(model, new_state, totals, torch_generator(seed, TAG_MONITOR, t))
            monitor_round(state, row, observed, ack, lead, true_counts, totals)
        model.load_state_dict(new_state)
        if (t + 1) % eval_every == 0 or t == rounds - 1:
            evaluate_into(row, model, data)
        close_round(state, row, model, loss_fn, start)
        if on_round is not None:
            on_round(state, row)
    return state
