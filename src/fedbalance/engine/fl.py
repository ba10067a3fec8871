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

The loop is written once, ``run_rounds`` over a typed ``RoundState`` (what a checkpoint holds):
it restores the state, hands pi and the prior to the loss, records the row, runs the monitor,
evaluates and calls ``on_round``; a ``RoundStep`` supplies what differs, the round's data and the
training that turns G_t into G_{t+1}: ``FedAvgStep`` (steps 1-3 above, ``run_fedavg``) or
``fedbalance.engine.centralised.PooledStep`` (one epoch of pooled SGD, ``run_centralised``).

With ``save_trajectory`` the state's ``trajectory`` keeps G_t and the selected clients'
totals of every round (the monitor's inputs), so estimators can be replayed offline.

Per-round columns (``ROUND_COLUMNS``): ``weights`` is the pi the monitor derived in round t (used
by the clients of round t+1); ``acknowledged`` is the acknowledger's state after round t, fed with
the estimate of the first configured estimator (``monitor.estimators[0]``); ``emp_cos``/``emp_cv``
(``empirical: true``) are ``empirical_y_stats`` of G_t, the model the clients start from, on the
selected clients' data in local batches of ``batch_size``; ``lo_<e>``/``hi_<e>`` are the ends of estimator e's 95 %
interval of each class's count (``fedbalance.monitor.intervals``, the shipped calibration, for the job's protocol).

Randomness: every random draw of a round comes from a generator seeded by a NumPy ``SeedSequence``
of (job seed, purpose, round[, client id]), so numbers do not depend on the training path, on the
order of the clients or on a resume from a checkpoint.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from fedbalance.common import plugins
from fedbalance.common.jobspec import JobSpec, as_spec
from fedbalance.methods.losses import as_sent, feed, receives
from fedbalance.methods.metrics import empirical_y_stats, evaluate
from fedbalance.monitor import intervals
from fedbalance.monitor.estimators import Observer
from fedbalance.monitor.monitor import PAPER_SIGNED, Acknowledger, Monitor, cosine_similarity, uniform_guess
from fedbalance.data.partition import Partition
from fedbalance.common.records import ROUND_COLUMNS, UNIFORM, cs_column, est_column, high_column, low_column
from fedbalance.training.train import SGDConfig, average_stacked, train_copies

TAG_INIT, TAG_SELECT, TAG_CLIENT, TAG_MONITOR, TAG_AUX, TAG_EPOCH, TAG_EVAL = 1, 2, 3, 4, 5, 6, 7

class FLError(ValueError):
    """The job cannot run as specified (e.g. a missing balanced partition); the message names the key."""


class RoundAborted(RuntimeError):
    """A round stopped for a reason outside its job (another job of a pack failed: ``pack.PackAborted``)."""


def derive_seed(*keys: int) -> int:
    """A 63-bit seed from a NumPy ``SeedSequence`` of ``keys`` (job seed, purpose tag, round, ...)."""
    hi, lo = np.random.SeedSequence([int(k) for k in keys]).generate_state(2, np.uint32)
    return ((int(hi) << 32) | int(lo)) >> 1


def torch_generator(*keys: int) -> torch.Generator:
    """A CPU ``torch.Generator`` seeded with ``derive_seed(*keys)``."""
    return torch.Generator().manual_seed(derive_seed(*keys))


def sgd_config(spec: Mapping[str, Any] | JobSpec, epochs: int | None = None) -> SGDConfig:
    """The job's client optimiser: lr, momentum, weight decay, batch size, local epochs."""
    spec = as_spec(spec)
    return SGDConfig(
        lr=spec.lr,
        momentum=spec.momentum,
        weight_decay=spec.weight_decay,
        batch_size=spec.batch_size,
        epochs=int(spec.required("local_epochs") if epochs is None else epochs),
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


def needs_monitor(spec: Mapping[str, Any] | JobSpec) -> bool:
    """The monitor runs for a loss that receives its output (the Ratio Loss's weights, the prior of ``la`` and
    ``bsm``: ``losses.FEEDS``) and when ``monitor.record`` is set."""
    spec = as_spec(spec)
    return bool(receives(spec.base_loss) & {"weights", "prior"}) or spec.monitor.record


def build_monitor(spec: Mapping[str, Any] | JobSpec, aux_x: Tensor, aux_y: Tensor, num_classes: int, cfg: SGDConfig) -> Monitor:
    """The job's monitor (same optimiser, batch size and epochs as a client)."""
    spec = as_spec(spec)
    m = spec.monitor
    return Monitor(
        aux_x,
        aux_y,
        num_classes,
        cfg,
        t_ra=m.required("t_ra"),
        variant=m.required("variant"),
        alpha=m.required("alpha"),
        beta=m.required("beta"),
        clip=m.ratio_clip,
        aggregation=spec.aggregation,
        path=spec.path,
    )


def build_acknowledger(spec: Mapping[str, Any] | JobSpec) -> Acknowledger:
    """Acknowledger with the job's ``monitor.acknowledge`` threshold and rounds."""
    spec = as_spec(spec)
    return Acknowledger(spec.monitor.required("ack_threshold"), spec.monitor.required("ack_rounds"))


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


def record_monitor(row: dict[str, Any], observed: Mapping[str, Any], true_counts: np.ndarray, totals: Sequence[int],
                   proto: str | None = None) -> None:
    """Fill the monitor columns: each estimate, its CS to the true composition, its 95 % interval (``lo_``/``hi_``,
    the shipped calibration's, for the round's protocol ``proto``; none when None or not calibrated), the uniform
    guess's CS, pi."""
    q = len(true_counts)
    calibration = intervals.shipped() if proto is not None else None
    for method, est in observed["estimates"].items():
        if method != PAPER_SIGNED:
            row[est_column(method)] = _list(est.counts)
            row[cs_column(method)] = cosine_similarity(est.counts, torch.as_tensor(true_counts, dtype=torch.float64))
            ends = None if calibration is None else intervals.count_interval(
                calibration, method, proto, int(row["round"]), row[est_column(method)])
            if ends is not None:
                row[low_column(method)], row[high_column(method)] = ends
    row[cs_column(UNIFORM)] = cosine_similarity(uniform_guess(totals, q), torch.as_tensor(true_counts, dtype=torch.float64))
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


def _snapshot(module: nn.Module) -> dict[str, Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


STATE_KEYS = ("next_round", "model", "loss_state", "pi", "prior", "ack", "ack_round", "rows", "extra")
EXTRA_KEYS = ("optimizer", "trajectory", "wall_time_s", "branched_from")


@dataclass
class RoundState:
    """What a run carries from round to round, and what a checkpoint holds to resume after a round.

    ``model``/``loss_state``: G_t and the loss's state at the start of round ``next_round``; ``pi``
    and ``prior``: the monitor's Ratio-Loss weights and composition estimate for that round;
    ``ack``/``ack_round``: the acknowledger's state and its first imbalanced round; ``rows``: one dict
    per finished round (keys ``ROUND_COLUMNS``); ``optimizer``: the centralised optimiser's state;
    ``trajectory``: G_t and totals per round (``save_trajectory``); ``wall_time_s``: the job's time so far;
    ``branched_from``: the folder and round of another job's kept state this one started from (``jobs.load_branch``).
    """

    model: dict[str, Tensor]
    loss_state: dict[str, Tensor]
    pi: Tensor
    prior: Tensor | None
    next_round: int = 0
    ack: dict[str, Any] | None = None
    ack_round: int | None = None
    rows: list[dict[str, Any]] = field(default_factory=list)
    optimizer: dict[str, Any] | None = None
    trajectory: list[dict[str, Any]] = field(default_factory=list)
    wall_time_s: float = 0.0
    branched_from: dict[str, Any] | None = None
    last_eval: dict[str, Any] | None = field(default=None, compare=False)
    """The test metrics of the model as it stands, when the last round run in this process evaluated it (the final
    metrics read them instead of evaluating the same model again); not checkpointed."""

    @classmethod
    def fresh(cls, model: nn.Module, loss_fn: nn.Module, num_classes: int) -> RoundState:
        """Round-0 state: the initial model and loss, pi = 1, a uniform prior."""
        ones = torch.ones(num_classes, dtype=torch.float64)
        return cls(_snapshot(model), _snapshot(loss_fn), ones, ones.clone())

    def to_dict(self) -> dict[str, Any]:
        """The checkpoint's ``state``: the keys ``STATE_KEYS``, as written before the state was typed
        (the optional parts under ``extra``, present only when set)."""
        extra: dict[str, Any] = {}
        if self.optimizer is not None:
            extra["optimizer"] = self.optimizer
        if self.trajectory:
            extra["trajectory"] = self.trajectory
        if self.wall_time_s:
            extra["wall_time_s"] = self.wall_time_s
        if self.branched_from:
            extra["branched_from"] = self.branched_from
        return {
            "next_round": self.next_round, "model": self.model, "loss_state": self.loss_state, "pi": self.pi,
            "prior": self.prior, "ack": self.ack, "ack_round": self.ack_round, "rows": self.rows, "extra": extra,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RoundState:
        """Inverse of ``to_dict``; also reads a state without ``prior`` (uniform prior). ValueError
        naming the keys when ``d`` has keys this version does not know or lacks required ones."""
        unknown = sorted(set(d) - set(STATE_KEYS)) + sorted(f"extra.{k}" for k in set(d.get("extra") or {}) - set(EXTRA_KEYS))
        missing = sorted(set(STATE_KEYS) - set(d) - {"prior", "extra"})
        if unknown or missing:
            raise ValueError(f"not a round state of this version (unknown keys {unknown}, missing keys {missing})")
        extra = d.get("extra") or {}
        return cls(
            model=d["model"], loss_state=d["loss_state"], pi=d["pi"], prior=d.get("prior"),
            next_round=int(d["next_round"]), ack=d["ack"], ack_round=d["ack_round"], rows=list(d["rows"]),
            optimizer=extra.get("optimizer"), trajectory=list(extra.get("trajectory", [])),
            wall_time_s=float(extra.get("wall_time_s", 0.0)), branched_from=extra.get("branched_from"),
        )


RoundCallback = Callable[[RoundState, dict[str, Any]], None]


def plugin_loss(spec: JobSpec) -> plugins.Plugin | None:
    """The plug-in the job's loss is (from its spec's record), None for a built-in loss."""
    record = spec.plugins.get("loss")
    return None if record is None else plugins.from_record("losses", spec.base_loss, record)


def guarded_training(spec: JobSpec, t: int, train: Callable[[], Trained]) -> Trained:
    """``train()`` (round ``t``'s training); for a plug-in loss, the loss contract on every call of the round
    (docs/extending.md): the round's mean training loss, the sum of every batch's, must be finite, and an exception
    of the training is reported naming the loss. PluginFailure naming the job, the round and the loss's origin. A
    built-in loss is left as it is: a diverging run of the paper's losses is a result (docs/fidelity.md)."""
    loss = plugin_loss(spec)
    if loss is None:
        return train()
    where = f"{spec.name}: round {t}: loss {spec.job.loss!r} ({loss.origin()})"
    try:
        trained = train()
    except (torch.cuda.OutOfMemoryError, RoundAborted, plugins.PluginFailure):
        raise
    except Exception as exc:  # noqa: BLE001 - the plug-in's failure, named
        raise plugins.PluginFailure(f"{where}: training with it raised {plugins.one_line(exc)}") from None
    if not math.isfinite(trained.train_loss):
        raise plugins.PluginFailure(f"{where}: the round's training loss is {trained.train_loss} (a batch's loss was not "
                                    "finite); the job stops")
    return trained


def guarded_observe(spec: JobSpec, t: int, observe: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``observe()`` (round ``t``'s monitor); a plug-in estimator that breaks its contract (``estimators.check_counts``:
    Q finite non-negative counts, no exception) is a PluginFailure naming the job and the round."""
    try:
        return observe()
    except plugins.PluginFailure:
        raise
    except plugins.PluginError as exc:
        raise plugins.PluginFailure(f"{spec.name}: round {t}: {exc}; the job stops") from None


def hand_over(state: RoundState, loss_fn: nn.Module, num_classes: int) -> None:
    """Feed the loss what the monitor made last round: the Ratio-Loss weights pi and the composition estimate as
    the prior (uniform in round 0); a loss takes what it ``receives`` (``losses.feed``)."""
    prior = torch.ones(num_classes, dtype=torch.float64) if state.prior is None else state.prior
    feed(loss_fn, weights=state.pi, prior=prior)


def monitor_round(
    state: RoundState,
    row: dict[str, Any],
    observed: Mapping[str, Any],
    ack: Acknowledger,
    lead: str,
    true_counts: np.ndarray,
    totals: Sequence[int],
    proto: str | None = None,
) -> None:
    """Record round ``row["round"]``'s estimates (with their intervals for protocol ``proto``), update the
    acknowledgment and the next round's weights π and prior (the lead estimator's composition estimate, for
    ``la``/``bsm``)."""
    record_monitor(row, observed, true_counts, totals, proto)
    row["acknowledged"] = ack.update(observed["estimates"][lead].counts)
    if row["acknowledged"] and state.ack_round is None:
        state.ack_round = row["round"]
    state.pi = observed["weights"].detach().cpu().double()
    state.prior = torch.as_tensor(observed["estimates"][lead].counts).detach().cpu().double()
    state.ack = ack.state_dict()


@dataclass
class RoundData:
    """What round t trains on: the ids of its clients (one pseudo-client when centralised), their
    samples' indices into the training set, and their true class counts (for evaluation only)."""

    clients: np.ndarray
    indices: list[Tensor]
    true_counts: np.ndarray

    @property
    def totals(self) -> list[int]:
        """The clients' sample counts, all the monitor learns of the round's data."""
        return [len(i) for i in self.indices]


@dataclass
class Trained:
    """A round's training result: the reported train loss, G_t as a module (for the monitor; None
    without one) and G_{t+1}'s state (None when the step trained the model in place)."""

    train_loss: float
    start: nn.Module | None
    after: dict[str, Tensor] | None


class RoundStep:
    """The part of a round that differs between FedAvg and centralised training: which data the
    round uses and how it turns G_t into G_{t+1}. ``rounds`` is the run's length, ``cfg`` the SGD
    configuration of the monitor and the empirical statistics."""

    rounds: int
    cfg: SGDConfig

    def round_data(self, t: int) -> RoundData:
        """The clients and samples of round ``t``."""
        raise NotImplementedError

    def train(self, t: int, batch: RoundData, state: RoundState) -> Trained:
        """Train round ``t`` from the model's current weights G_t."""
        raise NotImplementedError

    def restore(self, state: RoundState) -> None:
        """Load the step's own part of a (checkpointed) state; nothing by default."""

    def save(self, state: RoundState) -> None:
        """Snapshot the step's own part of the state after a round; nothing by default."""


def check_switch(spec: JobSpec, partitions: Mapping[str, Partition]) -> None:
    """FLError when ``switch_round`` is set but there is no balanced partition to switch to."""
    if spec.switch_round is not None and "balanced" not in partitions:
        raise FLError("switch_round is set but no 'balanced' partition was given")


def partition_of_round(spec: JobSpec, t: int) -> str:
    """"balanced" from ``switch_round`` on (early acknowledgment), else "main"."""
    switch = spec.switch_round
    return "balanced" if switch is not None and t >= switch else "main"


def client_keys(spec: JobSpec, t: int, clients: Sequence[int]) -> list[tuple[str, int]]:
    """The round's selected clients as the monitor's track keys them: (the round's partition, id), so a switch
    of partition (``switch_round``) starts new clients rather than mixing two compositions."""
    return [(partition_of_round(spec, t), int(c)) for c in clients]


def run_rounds(
    spec: JobSpec,
    model: nn.Module,
    loss_fn: nn.Module,
    data: JobData,
    step: RoundStep,
    *,
    state: RoundState | None = None,
    on_round: RoundCallback | None = None,
) -> RoundState:
    """The round loop of both engines: restore, hand over pi and prior, ``step``, monitor, evaluate
    every ``eval_every`` rounds and at the last, record the row, ``on_round(state, row)``."""
    seed, q = spec.seed, data.num_classes
    monitor = build_monitor(spec, data.aux_x, data.aux_y, q, step.cfg) if needs_monitor(spec) else None
    observer = Observer(monitor, spec.monitor.estimators, targets=spec.estimator_targets) if monitor is not None else None
    ack = build_acknowledger(spec) if monitor is not None else None
    lead = spec.monitor.estimators[0] if monitor is not None else None
    state = RoundState.fresh(model, loss_fn, q) if state is None else state
    model.load_state_dict(state.model)
    loss_fn.load_state_dict(state.loss_state)
    if ack is not None and state.ack is not None:
        ack.load_state_dict(state.ack)
    step.restore(state)
    if observer is not None and state.rows:
        done = [step.round_data(tau) for tau in range(state.next_round)]
        observer.restore(state.rows, [client_keys(spec, tau, b.clients) for tau, b in enumerate(done)], [b.totals for b in done])
    eval_every = spec.eval_every
    for t in range(state.next_round, step.rounds):
        start = time.perf_counter()
        row = empty_row(t)
        batch = step.round_data(t)
        row["true_composition"] = [float(c) for c in batch.true_counts]
        if spec.empirical:
            pooled = torch.cat(batch.indices)
            row.update(empirical_y_stats(model, data.x_train[pooled], data.y_train[pooled], step.cfg.batch_size))
        hand_over(state, loss_fn, q)
        sent = as_sent(loss_fn, q) if monitor is not None else None
        trained = guarded_training(spec, t, lambda: step.train(t, batch, state))
        row["train_loss"] = trained.train_loss
        if monitor is not None:
            after = model.state_dict() if trained.after is None else trained.after
            observed = guarded_observe(spec, t, lambda: observer.observe(
                trained.start, after, batch.totals, torch_generator(seed, TAG_MONITOR, t), loss_fn=sent,
                clients=client_keys(spec, t, batch.clients)))
            monitor_round(state, row, observed, ack, lead, batch.true_counts, batch.totals,
                          intervals.protocol(spec.mode, spec.required("selection")))
        if trained.after is not None:
            model.load_state_dict(trained.after)
        state.last_eval = None
        if (t + 1) % eval_every == 0 or t == step.rounds - 1:
            state.last_eval = evaluate_into(row, model, data)
        row["seconds"] = time.perf_counter() - start
        state.rows.append(row)
        state.next_round = t + 1
        state.model, state.loss_state = _snapshot(model), _snapshot(loss_fn)
        step.save(state)
        if on_round is not None:
            on_round(state, row)
    return state


class FedAvgStep(RoundStep):
    """A FedAvg round: the selected clients train copies of G_t, the server averages them."""

    def __init__(self, spec: JobSpec, model: nn.Module, loss_fn: nn.Module, data: JobData, partitions: Mapping[str, Partition]):
        check_switch(spec, partitions)
        device = _device(model)
        self.spec, self.model, self.loss_fn, self.data = spec, model, loss_fn, data
        self.seed, self.rounds, self.cfg = spec.seed, spec.rounds, sgd_config(spec)
        self.num_clients = partitions["main"].num_clients
        labels = data.y_train.cpu().numpy()
        self.parts = {name: (_client_indices(p, device), p.class_counts(labels)) for name, p in partitions.items()}

    def round_data(self, t: int) -> RoundData:
        """The round's selected clients (``select_clients``) of the round's partition."""
        indices, counts = self.parts[partition_of_round(self.spec, t)]
        chosen = select_clients(self.spec.required("selection"), self.num_clients, self.spec.required("clients_per_round"), self.seed, t)
        return RoundData(chosen, [indices[j] for j in chosen], counts[chosen].sum(0))

    def train_clients(self, datasets: list[tuple[Tensor, Tensor]], generators: list[torch.Generator]) -> tuple[dict[str, Tensor], Tensor]:
        """The selected clients' local training from G_t: their stacked states and mean losses (``train_copies``;
        a pack's step hands it to the pack's trainer instead)."""
        return train_copies(self.model, datasets, self.loss_fn, self.cfg, generators, path=self.spec.path)

    def train(self, t: int, batch: RoundData, state: RoundState) -> Trained:
        """Local training of every selected client (``train_clients``), then ``mean``/``weighted`` averaging."""
        model, data, totals = self.model, self.data, batch.totals
        if self.spec.save_trajectory:
            snapshot = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
            state.trajectory.append({"round": t, "model": snapshot, "totals": totals})
        datasets = [(data.x_train[i], data.y_train[i]) for i in batch.indices]
        gens = [torch_generator(self.seed, TAG_CLIENT, t, int(j)) for j in batch.clients]
        stacked, losses = self.train_clients(datasets, gens)
        w = torch.tensor(totals, dtype=torch.float64) if self.spec.aggregation == "weighted" else None
        new_state = average_stacked(stacked, None if w is None else w.to(_device(model)))
        train_loss = float((losses.double() * (w / w.sum() if w is not None else 1 / len(totals))).sum())
        return Trained(train_loss, model, new_state)


def run_fedavg(
    spec: Mapping[str, Any] | JobSpec,
    model: nn.Module,
    loss_fn: nn.Module,
    data: JobData,
    partitions: Mapping[str, Partition],
    *,
    state: RoundState | None = None,
    on_round: RoundCallback | None = None,
) -> RoundState:
    """Run (or resume from ``state``) the job's FedAvg rounds; return the final ``RoundState``.

    ``model`` and ``loss_fn`` are updated in place (``model`` ends as the final global model).
    ``state`` is a previous return value or the ``state`` handed to ``on_round`` (a checkpoint);
    ``on_round(state, row)`` is called after every finished round. ``partitions["balanced"]`` is
    needed when ``switch_round`` is set (early acknowledgment: train on it from that round on). ``spec``:
    a ``JobSpec`` or a configured dict (``jobspec.as_spec``).
    """
    spec = as_spec(spec)
    step = FedAvgStep(spec, model, loss_fn, data, partitions)
    return run_rounds(spec, model, loss_fn, data, step, state=state, on_round=on_round)
