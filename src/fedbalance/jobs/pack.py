"""Packs: several FedAvg jobs of one shape trained in one process, their clients' copies in shared vmap calls.

A pack's jobs share the model, batch size, local epochs and client optimiser (``PACK_KEYS``); seeds, losses, Γ,
partitions, client counts, rounds and datasets of the same image shape may differ. Every job runs its own,
unchanged round loop (``fl.run_rounds``) with its own generators, partitions, monitor, acknowledger, loss state,
checkpoint and outputs; only its clients' local training is handed to the pack's trainer (``PackTrainer``), which
waits until every running job of the pack has asked for its round, then trains all their copies on the vectorised
path: one ``train_copies_vectorised`` call per loss (type and constructor parameters; each copy gets its job's start
model and loss buffers, e.g. the Ratio Loss's pi), chunked by the copy plan's memory model, and hands every job
its own slice. A job that finishes, or resumed at another round, simply asks with its own round: the trainer
groups requests, not rounds.

The jobs' loops run in threads that take turns (one condition's lock, released only while a job waits for the
pack's training), so no two jobs compute at once and every job's numbers are the ones it gets alone on the
vectorised path (float rounding aside: the vmap calls hold more copies). An error in any job stops the pack: the
jobs waiting for training raise ``PackAborted``, the error propagates, and every job keeps its last checkpoint and
no half-written outputs (each file is written atomically). A rerun resumes every job from its checkpoint and
skips a job whose folder holds a finished job of the same spec.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from fedbalance.data.datasets import Dataset, load_dataset
from fedbalance.common.plugins import PluginFailure
from fedbalance.engine.fl import FedAvgStep, JobData, RoundAborted, RoundCallback, RoundState, run_rounds, sgd_config
from fedbalance.jobs.jobfolder import LOCK, JobFolderError, clean, finished, read_metrics
from fedbalance.jobs.run import (
    JobError,
    PreparedJob,
    build_partitions,
    check_run_options,
    deterministic_kernels,
    job_lock,
    prepare_job,
    resolve_device,
    runtime,
)
from fedbalance.common.jobspec import JobSpec, as_spec
from fedbalance.data.partition import Partition
from fedbalance.training.train import CopyPlan, SGDConfig, copy_plan, job_plan, precision as precision_policy
from fedbalance.training.vectorised import VectorisedOptions, train_copies_vectorised

PACK_KEYS = ("model", "batch_size", "local_epochs", "lr", "momentum", "weight_decay")
"""The keys every job of a pack shares: one vmap call trains one model with one optimiser."""


class PackError(JobError):
    """The jobs cannot run as one pack (a key differs, a folder repeats); the message names the key or folder."""


class PackAborted(RoundAborted):
    """Another job of the pack failed while this one waited for the pack's training."""


def check_pack(specs: Sequence[JobSpec], out_dirs: Sequence[Path]) -> None:
    """PackError naming the problem when ``specs`` (with their ``out_dirs``) cannot run as one pack."""
    if not specs:
        raise PackError("a pack needs at least one job")
    if len(specs) != len(out_dirs):
        raise PackError(f"{len(specs)} jobs but {len(out_dirs)} output folders")
    seen: dict[Path, int] = {}
    for i, out in enumerate(out_dirs):
        key = Path(out).resolve()
        if key in seen:
            raise PackError(f"jobs {seen[key]} and {i} of the pack write to the same folder {out}")
        seen[key] = i
    first = specs[0]
    for i, spec in enumerate(specs):
        if spec.mode != "fl":
            raise PackError(f"job {i} ({spec.name}) has mode = {spec.mode!r}: a pack runs FedAvg jobs (mode 'fl') only")
        if spec.path == "sequential":
            raise PackError(f"job {i} ({spec.name}) has path = 'sequential': a pack trains on the vectorised path "
                            "(set path to 'vectorised' or 'auto')")
        if (spec.plugins.get("loss") or {}).get("vectorisable") is False:
            raise PackError(f"job {i} ({spec.name}): its loss {spec.base_loss!r} is declared sequential-only "
                            "(vectorisable = False); a pack trains on the vectorised path: run the job alone")
        for key in PACK_KEYS:
            if getattr(spec, key) != getattr(first, key):
                raise PackError(f"the jobs of a pack share {key}: job 0 ({first.name}) has {getattr(first, key)!r}, "
                                f"job {i} ({spec.name}) has {getattr(spec, key)!r}")


def _check_models(models: Sequence[nn.Module], names: Sequence[str]) -> None:
    """PackError naming the first tensor whose shape or dtype differs from job 0's (e.g. another number of classes)."""
    ref = models[0].state_dict()
    for i, m in enumerate(models[1:], start=1):
        state = m.state_dict()
        for k, v in ref.items():
            if k not in state or state[k].shape != v.shape or state[k].dtype != v.dtype:
                got = "missing" if k not in state else f"{tuple(state[k].shape)} {state[k].dtype}"
                raise PackError(f"job {i} ({names[i]})'s model differs from job 0 ({names[0]})'s at {k}: {got}, "
                                f"not {tuple(v.shape)} {v.dtype} (another dataset's image size or classes?)")


def loss_signature(loss_fn: nn.Module) -> tuple[Any, ...]:
    """What one vmap call's loss fixes: the loss's type, its constructor parameters and its buffers' shapes (their
    values may differ per copy)."""
    attrs = tuple(sorted((k, repr(v)) for k, v in vars(loss_fn).items() if not k.startswith("_") and k != "training"))
    buffers = tuple((k, tuple(b.shape), str(b.dtype)) for k, b in loss_fn.named_buffers())
    return type(loss_fn), attrs, buffers


@dataclass
class ClientWork:
    """One job's request for a round: the clients' data and generators, trained from ``model`` with ``loss_fn``."""

    model: nn.Module
    loss_fn: nn.Module
    datasets: list[tuple[Tensor, Tensor]]
    generators: list[torch.Generator]


def _repeat(t: Tensor, n: int) -> Tensor:
    return t.detach().unsqueeze(0).expand(n, *t.shape)


def train_together(works: Sequence[ClientWork], cfg: SGDConfig, plan: CopyPlan) -> list[tuple[dict[str, Tensor], Tensor]]:
    """Every request's (stacked states, mean losses), trained together: one ``train_copies_vectorised`` call per
    ``loss_signature``, each copy from its job's model and with its job's loss buffers, in ``plan``'s chunks."""
    groups: dict[tuple[Any, ...], list[int]] = {}
    for i, w in enumerate(works):
        groups.setdefault(loss_signature(w.loss_fn), []).append(i)
    out: list[tuple[dict[str, Tensor], Tensor] | None] = [None] * len(works)
    for members in groups.values():
        head = works[members[0]]
        sizes = [len(works[i].datasets) for i in members]
        datasets = [d for i in members for d in works[i].datasets]
        gens = [g for i in members for g in works[i].generators]
        states = [works[i].model.state_dict() for i in members]
        starts = {k: torch.cat([_repeat(s[k], n) for s, n in zip(states, sizes, strict=True)]) for k in states[0]}
        buffers = [dict(works[i].loss_fn.named_buffers()) for i in members]
        loss_state = {k: torch.cat([_repeat(b[k], n) for b, n in zip(buffers, sizes, strict=True)])
                      for k in buffers[0]} or None
        options = VectorisedOptions(chunk_size=plan.chunk_size(head.model, datasets, head.loss_fn, cfg),
                                    allow_tf32=plan.precision == "tf32", capture=plan.capture)
        stacked, losses = train_copies_vectorised(head.model, datasets, head.loss_fn, cfg, gens, options,
                                                  starts=starts, loss_state=loss_state)
        lo = 0
        for i, n in zip(members, sizes, strict=True):
            out[i] = ({k: v[lo:lo + n] for k, v in stacked.items()}, losses[lo:lo + n])
            lo += n
    return [o for o in out if o is not None]


class PackTrainer:
    """The pack's barrier: each running job ``submit``s its round's ``ClientWork`` and waits; when every running job
    has, the last one trains them all (``train_together``). Jobs run inside ``turn`` (one lock: one job computes at a
    time). ``calls`` counts the pack's training rounds, ``trained`` the requests they served."""

    def __init__(self, jobs: int, cfg: SGDConfig, plan: CopyPlan) -> None:
        self.cond = threading.Condition()
        self.cfg, self.plan = cfg, plan
        self.live = set(range(jobs))
        self.pending: dict[int, ClientWork] = {}
        self.done: dict[int, tuple[dict[str, Tensor], Tensor]] = {}
        self.failed: BaseException | None = None
        self.calls = 0
        self.trained = 0

    def turn(self, index: int, body: Callable[[], Any]) -> Any:
        """Run job ``index``'s ``body`` in its turn; when it ends (returning or raising) the job leaves the pack."""
        with self.cond:
            try:
                return body()
            except BaseException as exc:
                if self.failed is None and not isinstance(exc, PackAborted):
                    self.failed = exc
                raise
            finally:
                self.live.discard(index)
                self.pending.pop(index, None)
                self._train_when_ready()
                self.cond.notify_all()

    def abort(self, exc: BaseException) -> None:
        """Stop the pack: every job waiting for training raises ``PackAborted``."""
        with self.cond:
            if self.failed is None:
                self.failed = exc
            self.cond.notify_all()

    def submit(self, index: int, work: ClientWork) -> tuple[dict[str, Tensor], Tensor]:
        """Job ``index``'s clients trained with every running job's (call it in the job's ``turn``)."""
        with self.cond:
            self.pending[index] = work
            self._train_when_ready()
            while index not in self.done and self.failed is None:
                self.cond.wait()
            if self.failed is not None:
                raise PackAborted(f"another job of the pack failed: {self.failed!r}")
            return self.done.pop(index)

    def _train_when_ready(self) -> None:
        if self.failed is not None or not self.pending or set(self.pending) != self.live:
            return
        order = sorted(self.pending)
        results = train_together([self.pending[i] for i in order], self.cfg, self.plan)
        self.calls += 1
        self.trained += len(order)
        self.done.update(zip(order, results, strict=True))
        self.pending.clear()
        self.cond.notify_all()


class PackedStep(FedAvgStep):
    """A FedAvg round whose clients train in the pack (``PackTrainer.submit``), everything else the job's own."""

    def __init__(self, spec: JobSpec, model: nn.Module, loss_fn: nn.Module, data: JobData,
                 partitions: Mapping[str, Partition], trainer: PackTrainer, index: int) -> None:
        super().__init__(spec, model, loss_fn, data, partitions)
        self.trainer, self.index = trainer, index

    def train_clients(self, datasets: list[tuple[Tensor, Tensor]], generators: list[torch.Generator]) -> tuple[dict[str, Tensor], Tensor]:
        """The clients' copies, trained in the pack's next training round."""
        return self.trainer.submit(self.index, ClientWork(self.model, self.loss_fn, datasets, generators))


@dataclass
class PackMember:
    """One job of ``run_together``: what ``fl.run_fedavg`` takes, and what runs when it has finished (``finish(state)``,
    in its turn: a job's outputs) or when a plug-in of its stopped it (``fail(exc)``: the folder marked failed)."""

    spec: JobSpec
    model: nn.Module
    loss_fn: nn.Module
    data: JobData
    partitions: Mapping[str, Partition]
    state: RoundState | None = None
    on_round: RoundCallback | None = None
    finish: Callable[[RoundState], Any] | None = None
    fail: Callable[[BaseException], None] | None = None
    result: Any = field(default=None, init=False)


def run_together(members: Sequence[PackMember], plan: CopyPlan | None = None) -> PackTrainer:
    """Run the members' round loops as one pack (each from its ``state``, calling its ``on_round`` and, at the end,
    its ``finish``, whose return value lands in ``result``, else the final state). Returns the trainer (its counts);
    the first job error is raised once every job has stopped."""
    if not members:
        raise PackError("a pack needs at least one job")
    cfgs = {i: sgd_config(m.spec) for i, m in enumerate(members)}
    for i, cfg in cfgs.items():
        if cfg != cfgs[0]:
            raise PackError(f"job {i} ({members[i].spec.name}) trains with {cfg}, job 0 with {cfgs[0]}: a pack shares "
                            f"{', '.join(PACK_KEYS[1:])}")
    _check_models([m.model for m in members], [m.spec.name for m in members])
    plan = plan if plan is not None else job_plan(next(iter(members[0].model.state_dict().values())).device)
    trainer = PackTrainer(len(members), cfgs[0], plan)

    def body(i: int, m: PackMember) -> None:
        step = PackedStep(m.spec, m.model, m.loss_fn, m.data, m.partitions, trainer, i)
        try:
            state = run_rounds(m.spec, m.model, m.loss_fn, m.data, step, state=m.state, on_round=m.on_round)
        except PluginFailure as exc:
            if m.fail is not None:
                m.fail(exc)
            raise
        m.result = m.finish(state) if m.finish is not None else state

    errors: list[BaseException | None] = [None] * len(members)

    def thread(i: int, m: PackMember) -> None:
        try:
            trainer.turn(i, lambda: body(i, m))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller below
            errors[i] = exc

    threads = [threading.Thread(target=thread, args=(i, m), name=f"pack-{i}", daemon=True) for i, m in enumerate(members)]
    with copy_plan(plan):
        try:
            for t in threads:
                t.start()
            for t in threads:
                while t.is_alive():
                    t.join(0.5)
        except BaseException as exc:
            trainer.abort(exc)
            for t in threads:
                t.join()
            raise
    if trainer.failed is not None:
        raise trainer.failed
    first = next((e for e in errors if e is not None), None)
    if first is not None:
        raise first
    return trainer


@dataclass
class PackResult:
    """What ``run_pack`` did: each job's metrics.json content, which jobs it skipped (finished before) and the
    pack's training rounds (``calls``) and the requests they served (``trained``)."""

    metrics: list[dict[str, Any]]
    skipped: list[int]
    calls: int
    trained: int


def finished_metrics(spec: JobSpec, out: Path) -> dict[str, Any] | None:
    """The metrics.json of a finished job of ``spec`` in ``out``; None when there is none (or of another spec)."""
    if not finished(out):
        return None
    try:
        metrics = read_metrics(out)
    except JobFolderError:
        return None
    if metrics.get("config") != clean(spec.as_dict()):
        return None
    ran = metrics.get("path")
    if ran is not None and ran != spec.path:
        raise PackError(f"{out} holds this job finished on the {ran} path; a pack trains on the {spec.path} path, whose "
                        "numbers differ (float rounding over 30 rounds, docs/performance.md): leave the job out of the "
                        "pack, or move its folder away to train it again here")
    return metrics


def run_pack(
    specs: Sequence[Mapping[str, Any] | JobSpec],
    out_dirs: Sequence[str | Path],
    *,
    data_dir: str | Path = "data",
    device: str = "auto",
    deterministic: bool = False,
    precision: str = "fp32",
    capture: bool = False,
    download: bool = False,
    partitions: Sequence[Mapping[str, Partition] | None] | None = None,
    progress: bool | None = None,
    on_round: Callable[[int, RoundState, dict[str, Any]], None] | None = None,
) -> PackResult:
    """Run the jobs ``specs`` as one pack, job i writing ``out_dirs[i]`` as ``jobs.run_job`` does (checkpoint every round,
    rounds.csv and metrics.json at its end, each atomically); return their metrics.

    The jobs are checked first (``check_pack``: PackError naming the key or folder, before any file is touched); each
    folder is locked for the pack's run. A job whose folder holds a finished job of the same spec is skipped (its
    metrics read back); the others resume from their checkpoints. ``path: auto`` runs vectorised here (metrics.json's
    ``path`` says so). ``on_round(i, state, row)`` runs after job i's checkpoint of each round (tests interrupt there).
    The other arguments are ``run_job``'s, for every job of the pack.
    """
    start = time.perf_counter()
    dev = resolve_device(device)
    check_run_options(precision, capture)
    typed = [as_spec(s) for s in specs]
    outs = [Path(o) for o in out_dirs]
    given = list(partitions) if partitions is not None else [None] * len(typed)
    if len(given) != len(typed):
        raise PackError(f"{len(typed)} jobs but {len(given)} partition sets")
    check_pack(typed, outs)
    typed = [s.with_path("vectorised") for s in typed]
    rt = runtime(dev, deterministic, precision)
    metrics: list[dict[str, Any] | None] = [None] * len(typed)
    new_folders = [out for out in outs if not out.exists()]
    with ExitStack() as locks, deterministic_kernels(dev, deterministic), precision_policy(precision):
        try:  # refused before any training (a folder in use, a job finished otherwise): leave no folder of ours
            for out in outs:
                locks.enter_context(job_lock(out))
            done = [finished_metrics(s, o) for s, o in zip(typed, outs, strict=True)]
        except JobError:
            locks.close()
            _remove_empty(new_folders)
            raise
        skipped = [i for i, m in enumerate(done) if m is not None]
        for i in skipped:
            metrics[i] = done[i]
        todo = [i for i in range(len(typed)) if i not in skipped]
        datasets: dict[str, Dataset] = {}
        plan = job_plan(dev, precision, capture)
        members, prepared = [], []
        for i in todo:
            spec = typed[i]
            key = repr((spec.source, dict(spec.options)))
            if key not in datasets:
                datasets[key] = load_dataset(spec.source, data_dir, download=download, **dict(spec.options))
            dataset = datasets[key]
            parts = dict(given[i]) if given[i] is not None else build_partitions(spec, dataset)
            hook = None if on_round is None else _indexed(on_round, i)
            job = prepare_job(spec, outs[i], dataset, parts, dev, rt, plan=plan, progress=progress, on_round=hook, start=start)
            prepared.append(job)
            members.append(PackMember(spec, job.model, job.loss_fn, job.data, parts, job.state, job.checkpoint,
                                      _finisher(job), job.fail))
        calls = trained = 0
        try:
            if members:
                trainer = run_together(members, plan)
                calls, trained = trainer.calls, trainer.trained
        finally:
            for job in prepared:
                job.checkpoint.bar.close()
        for i, m in zip(todo, members, strict=True):
            metrics[i] = m.result
    return PackResult([m for m in metrics if m is not None], skipped, calls, trained)


def _remove_empty(folders: Sequence[Path]) -> None:
    """Remove the folders a refused pack made: each only when it holds nothing but its lock file."""
    for out in folders:
        if out.is_dir() and {p.name for p in out.iterdir()} <= {LOCK}:
            (out / LOCK).unlink(missing_ok=True)
            out.rmdir()


def _indexed(on_round: Callable[[int, RoundState, dict[str, Any]], None], i: int) -> RoundCallback:
    return lambda state, row: on_round(i, state, row)


def _finisher(job: PreparedJob) -> Callable[[RoundState], dict[str, Any]]:
    """A job's end in the pack: its metrics, then its outputs (each atomically), in its turn."""

    def finish(state: RoundState) -> dict[str, Any]:
        metrics = job.metrics(state)
        job.write(state, metrics)
        return metrics

    return finish
