"""One training job end to end: data, partitions, auxiliary data, model, FL or centralised run, outputs.

``run_job`` writes into ``out_dir`` (each file atomically: a temporary file, then ``os.replace``)
``rounds.csv`` and ``metrics.json`` in the format of ``fedbalance.jobs.jobfolder``, and while it runs:

* ``checkpoint.pt`` after every round (engine state: global model, round, loss state, Ratio-Loss
  weights, acknowledger, rows so far, optimiser for centralised runs); a re-run of the same job
  resumes from it and it is deleted once metrics.json is written. It records the run's ``runtime``
  (torch threads, device, deterministic kernels, precision, torch and fedbalance versions): a resume under a
  different runtime is refused (JobError), as the numbers depend on it; and the chunk sizes chosen so far,
  which a resume keeps. It is read onto the CPU (``map_location="cpu"``): the model, loss and
  optimiser states are copied onto the device when loaded, pi, the prior and the trajectory stay there.
* ``.lock``: held (``filelock``) while a job runs in the folder, with the holder's pid and host, and removed when
  it ends; a second job in the same folder is refused instead of deleting the first one's temporary files.
* ``failed.json`` instead of metrics.json when a plug-in broke its contract during the run (a non-finite loss or
  estimate: ``plugins.PluginFailure``, JobError naming the plug-in and round; the checkpoint is dropped), so the job
  never counts as finished; the next run of the job removes it.
* ``trajectory.pt`` with ``save_trajectory: true``: {"spec", "rounds": [{"round", "model": G_t,
  "totals": selected clients' sample counts}], "final": the last global model, "true_composition"
  per round} -- the monitor's inputs of every round, to replay estimators offline
  (benchmarks/monitor_accuracy.py --trajectory). All other randomness is derived
  from (seed, round, client), so a resumed run gives the same numbers as an uninterrupted one.
"""

from __future__ import annotations

import errno
import functools
import hashlib
import json
import logging
import math
import os
import platform
import socket
import time
import warnings
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import torch

import fedbalance
from fedbalance.engine.centralised import num_epochs, run_centralised
from fedbalance.common.jobspec import BRANCH_KEYS, JobSpec, as_spec, plugin_items, shared_rounds, training_differences
from fedbalance.data.datasets import Dataset, load_dataset
from fedbalance.common.records import JOB_KEYS, cs_column
from fedbalance.engine.fl import (
    TAG_AUX,
    TAG_EVAL,
    TAG_INIT,
    JobData,
    RoundCallback,
    RoundState,
    derive_seed,
    needs_monitor,
    run_fedavg,
)
from fedbalance.common import plugins
from fedbalance.methods.losses import get_loss, loss_class
from fedbalance.methods.metrics import evaluate
from fedbalance.methods.models import build_model, device_layout
from fedbalance.atomic import atomic_write, held
from fedbalance.jobs.seal import SealError, refuse_inside
from fedbalance.training.sgd import use_deterministic_algorithms
from fedbalance.jobs.jobfolder import (
    CHECKPOINT, FAILED, LOCK, METRICS, ROUNDS, TRAJECTORY, branch_file, branch_files, clean, folder_job, monitor_summary,
    rounds_text, write_failed,
)
from fedbalance.jobs.jobfolder import write as write_folder
from fedbalance.data.partition import (  # noqa: F401  (save/load re-exported for callers of the job API)
    Partition,
    partition_args,
    spec_partitions,
    load_partitions,
    save_partitions,
    unused_writers,
)
from fedbalance.training.train import PRECISIONS, CopyPlan, copy_plan, job_plan, precision as precision_policy

# cuBLAS reads its workspace setting once, when this process first uses it: set it before any job runs
# (deterministic kernels need it; every job gets the same, so deterministic or not they use one setting).
_CUBLAS_LATE = torch.cuda.is_initialized() and "CUBLAS_WORKSPACE_CONFIG" not in os.environ
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

logger = logging.getLogger(__name__)



class JobError(ValueError):
    """The job cannot run with this data/partition/spec; the message names the problem."""


def build_partitions(spec: Mapping[str, Any] | JobSpec, dataset: Dataset) -> dict[str, Partition]:
    """The job's partitions ("main", and "balanced" when ``switch_round`` is set) on ``dataset``."""
    writers = None if dataset.writers_train is None else dataset.writers_train.numpy()
    return spec_partitions(spec, dataset.y_train.numpy(), writers, num_classes=dataset.num_classes)


def _check_partitions(spec: JobSpec, partitions: Mapping[str, Partition], dataset: Dataset) -> None:
    if "main" not in partitions:
        raise JobError("the partitions have no 'main' entry")
    if spec.switch_round is not None and "balanced" not in partitions:
        raise JobError("switch_round is set but the partitions have no 'balanced' entry")
    n = len(dataset.y_train)
    scheme, kwargs = partition_args(spec)
    expected = {**kwargs, "seed": spec.seed, "num_classes": dataset.num_classes}
    for name, p in partitions.items():
        want = {**expected, "gamma": 1} if name == "balanced" and "gamma" in expected else expected
        for key, value in want.items() if p.scheme == scheme else ():
            if key not in p.params or clean(value) != p.params[key]:
                label = f"partition.{key}" if key in kwargs and key != "minority_classes" else key
                raise JobError(
                    f"partition {name!r} was made with {key} = {p.params.get(key, 'unrecorded')!r} but the job has "
                    f"{label} = {clean(value)!r}: a partition of another setting or seed?"
                )
        if p.num_classes != dataset.num_classes:
            raise JobError(f"partition {name!r} has {p.num_classes} classes, {spec.source} has {dataset.num_classes}")
        if p.scheme != spec.scheme:
            raise JobError(f"partition {name!r} has scheme {p.scheme!r}, the job wants {spec.scheme!r}")
        pooled = p.pooled()
        if pooled.size and pooled.max() >= n:
            raise JobError(f"partition {name!r} indexes sample {pooled.max()} but {spec.source} has {n} training samples")
        if spec.is_fl and p.num_clients < spec.required("clients_per_round"):
            raise JobError(f"partition {name!r} has {p.num_clients} clients < clients_per_round = {spec.clients_per_round}")


def _draw_per_class(
    labels: np.ndarray, candidates: np.ndarray, num_classes: int, k: int, rng: np.random.Generator, where: str, first: bool
) -> np.ndarray:
    picked = []
    for c in range(num_classes):
        pool = candidates[labels[candidates] == c]
        if pool.size < k:
            raise JobError(f"monitor.aux_per_class = {k} but {where} has only {pool.size} samples of class {c}")
        picked.append(np.sort(pool)[:k] if first else np.sort(rng.choice(pool, size=k, replace=False)))
    return np.concatenate(picked)


def auxiliary_data(spec: Mapping[str, Any] | JobSpec, dataset: Dataset, partitions: Mapping[str, Partition]) -> tuple[torch.Tensor, torch.Tensor]:
    """The monitor's auxiliary data: ``monitor.aux_per_class`` samples of every class.

    ``monitor.aux_source``: ``test`` (default, ``fedbalance.jobs.config.JOB_DEFAULTS``; the paper, Supplementary "Auxiliary Data") takes them
    from the test split, where they stay, or, for datasets with writer ids (FEMNIST), from the
    training samples of writers no client uses; ``train`` from the whole training split, as the
    released code (``ratio_loss_data``: the first 63 or ``local_bs`` training samples of each
    class, which clients may also hold). ``monitor.aux_selection``: ``random`` (default; the
    paper) is a seeded draw, ``first`` the lowest indices of each class (the released code).
    """
    spec = as_spec(spec)
    k = spec.monitor.required("aux_per_class")
    source, first = spec.monitor.aux_source, spec.monitor.aux_selection == "first"
    rng = np.random.default_rng(derive_seed(spec.seed, TAG_AUX))
    q = dataset.num_classes
    if source == "train":
        labels = dataset.y_train.numpy()
        idx = _draw_per_class(labels, np.arange(len(labels)), q, k, rng, "the training split", first)
        return dataset.x_train[idx], dataset.y_train[idx]
    if dataset.writers_train is None:
        labels = dataset.y_test.numpy()
        idx = _draw_per_class(labels, np.arange(len(labels)), q, k, rng, "the test split", first)
        return dataset.x_test[idx], dataset.y_test[idx]
    writers = dataset.writers_train.numpy()
    free = np.asarray(unused_writers(partitions["main"], writers))
    for p in partitions.values():
        free = np.intersect1d(free, unused_writers(p, writers))
    candidates = np.flatnonzero(np.isin(writers, free))
    where = f"the {free.size} writers no client uses"
    idx = _draw_per_class(dataset.y_train.numpy(), candidates, q, k, rng, where, first)
    return dataset.x_train[idx], dataset.y_train[idx]


def evaluation_subset(labels: np.ndarray, n: int | None, seed: int) -> np.ndarray | None:
    """The test samples a job evaluates on when ``eval_samples`` is ``n``: None (the whole split) when ``n`` is None or
    not below the split's size; else a draw seeded by the job seed (the same for every loss and setting of a seed) of
    round(n × share) samples of each class, at least one of every class the split holds, as sorted indices."""
    if n is None or n >= len(labels):
        return None
    rng = np.random.default_rng(derive_seed(seed, TAG_EVAL))
    counts = np.bincount(labels)
    picked = []
    for c in np.flatnonzero(counts):
        k = min(int(counts[c]), max(1, round(n * counts[c] / len(labels))))
        picked.append(rng.choice(np.flatnonzero(labels == c), size=k, replace=False))
    return np.sort(np.concatenate(picked))


def resolve_device(device: str = "auto") -> torch.device:
    """"auto" = cuda when available, else cpu."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise JobError("device 'cuda' requested but CUDA is not available")
    if device not in ("cpu", "cuda"):
        raise JobError(f"device must be auto, cpu or cuda, got {device!r}")
    return torch.device(device)


def _describe(device: torch.device) -> str:
    return f"cuda ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else "cpu"


@contextmanager
def deterministic_kernels(device: torch.device, enabled: bool) -> Iterator[None]:
    """Deterministic kernels on or off for the block (cuDNN benchmarking off when on); the previous
    settings come back afterwards, so a later job in the same process starts from them."""
    before = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
              torch.backends.cudnn.benchmark)
    if enabled and device.type == "cuda":
        if _CUBLAS_LATE:
            warnings.warn("CUDA was initialised before fedbalance.jobs.run set CUBLAS_WORKSPACE_CONFIG: cuBLAS may "
                          "not be deterministic; set CUBLAS_WORKSPACE_CONFIG=:4096:8 before starting Python", stacklevel=3)
        torch.backends.cudnn.benchmark = False
    use_deterministic_algorithms(enabled)
    try:
        yield
    finally:
        use_deterministic_algorithms(before[0], warn_only=before[1])
        torch.backends.cudnn.benchmark = before[2]


def runtime(device: torch.device, deterministic: bool, precision: str = "fp32") -> dict[str, Any]:
    """What decides a job's numbers besides its spec and partitions: torch threads, device, kernels,
    precision policy, versions."""
    return {
        "threads": torch.get_num_threads(),
        "device": _describe(device),
        "deterministic": bool(deterministic),
        "precision": precision,
        "torch": torch.__version__,
        "fedbalance": fedbalance.__version__,
    }


@contextmanager
def job_lock(out: Path) -> Iterator[None]:
    """Hold the job's lock, ``out/.lock`` (``filelock``: flock on POSIX, msvcrt on Windows), creating ``out``, with the
    holder's pid and host in it; JobError naming the holder if taken, or when ``out`` lies in a reference set
    (``seal.refuse_inside``), before anything is created. The lock file is removed when the job lets go, while it still
    holds it (a process that opened it meanwhile finds an unlinked file and opens a new one: filelock checks), so a
    finished or failed job leaves none."""
    from filelock import FileLock, Timeout

    if out.exists() and not out.is_dir():
        raise JobError(f"output folder {out} is a file, not a folder")
    path = out / LOCK
    holder = f"pid {os.getpid()} on {socket.gethostname()}\n".encode()

    def stamp(fd: int) -> None:
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, holder)

    lock = FileLock(path, timeout=0, on_acquired=stamp, fallback_to_soft=False)
    try:
        refuse_inside(out, "output folder")
    except SealError as exc:
        raise JobError(str(exc)) from None
    try:
        out.mkdir(parents=True, exist_ok=True)
        if path.is_dir():
            raise IsADirectoryError(errno.EISDIR, "is a folder", str(path))
        lock.acquire()
    except Timeout:
        try:
            holder_now = path.read_text().strip()
        except OSError:
            holder_now = ""
        raise JobError(f"{out} is in use by {holder_now or 'another process'} (lock file {path}); wait for that job "
                       "or stop it") from None
    except OSError as exc:
        what = {errno.ENOTDIR: "a part of the path is a file", errno.EEXIST: "a part of the path is a file",
                errno.EACCES: "no permission to write there", errno.EROFS: "a read-only file system",
                errno.EISDIR: f"{path} is a folder, not the job's lock file"}.get(exc.errno, exc.strerror)
        raise JobError(f"cannot use {out} as the job's output folder: {what} ({exc.filename})") from None
    with held(lock, path):
        yield


def lock_holder(folder: str | Path) -> str | None:
    """Who holds ``folder``'s job lock (``job_lock``: the holder's pid and host) while a running job holds it, else
    None; creates and changes nothing (the lock file, when there is one, is opened read-only and probed with a shared
    flock, as filelock takes an exclusive one on POSIX). Always None where flock is missing (Windows)."""
    try:
        import fcntl
    except ImportError:
        return None
    path = Path(folder) / LOCK
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return os.read(fd, 200).decode(errors="replace").strip() or "another process"
    except OSError:
        return None
    finally:
        os.close(fd)
    return None


def _locked(run: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
    """Run ``run(spec, out, ...)`` holding ``job_lock(out)``, ``out`` being ``out_dir`` resolved once (links and ``..``):
    the job writes under that folder, and refuses to write once a folder on its path has become a link
    (``check_unmoved``)."""

    @functools.wraps(run)
    def locked(spec: Mapping[str, Any] | JobSpec, out_dir: str | Path, *args: Any, **kwargs: Any) -> dict[str, Any]:
        try:
            out = Path(out_dir).resolve()
        except (OSError, RuntimeError) as exc:
            raise JobError(f"output folder {out_dir}: a link on its path never ends ({exc})") from None
        with job_lock(out):
            return run(spec, out, *args, **kwargs)

    return locked


def fingerprint(spec: JobSpec, partitions: Mapping[str, Partition]) -> str:
    """Hash of the job spec (configured, with the resolved path), its partitions and, for a job with plug-ins, their
    versions (as the spec records them; an estimator's, which its spec does not record, as installed); a checkpoint
    resumes only the job that wrote it."""
    body: dict[str, Any] = {"spec": clean(spec.resolved_dict()), "partitions": {k: p.to_json() for k, p in partitions.items()}}
    versions = [[what, name, rec.get("target"), rec["version"] if "version" in rec else
                 plugins.check_installed(kind, name, rec).version]
                for what, kind, name, rec in plugin_items(spec) if what != "estimators" or needs_monitor(spec)]
    if versions:
        body["plugins"] = versions
    payload = json.dumps(body, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()


def _load_checkpoint(path: Path, fp: str, rt: Mapping[str, Any]) -> tuple[RoundState | None, dict[str, int]]:
    """The checkpoint's round state (on the CPU) and the chunk sizes its run chose; (None, {}) to start over."""
    if not path.is_file():
        return None, {}
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as exc:  # noqa: BLE001 - a torn or foreign file: start over
        logger.warning(f"ignoring unreadable checkpoint {path}: {exc}")
        return None, {}
    if ckpt.get("fingerprint") != fp:
        logger.warning(f"ignoring checkpoint {path}: written by a different job spec or partition")
        return None, {}
    was = ckpt.get("runtime")
    if was is None:
        logger.warning(f"resuming {path}, which does not record its threads, device and versions: "
                       f"the numbers may differ from an uninterrupted run")
    elif dict(was) != dict(rt):
        diff = ", ".join(f"{k} {was.get(k)!r} -> {rt.get(k)!r}" for k in rt if was.get(k) != rt.get(k))
        raise JobError(
            f"{path} was written under another runtime ({diff}), which changes the numbers: resume with the "
            f"checkpoint's settings (e.g. --threads {was.get('threads')}), or delete it to start the job over"
        )
    try:
        return RoundState.from_dict(ckpt["state"]), dict(ckpt.get("chunks") or {})
    except (KeyError, TypeError, ValueError) as exc:
        logger.warning(f"ignoring checkpoint {path}, whose round state this version cannot read ({exc}): "
                       f"starting the job over")
        return None, {}


def _partitions_json(partitions: Mapping[str, Partition]) -> str:
    """The partitions as one canonical JSON text (a kept round state records the ones it was run on)."""
    return json.dumps({k: p.to_json() for k, p in partitions.items()}, sort_keys=True)


def load_branch(
    source: Path, spec: JobSpec, partitions: Mapping[str, Partition], rt: Mapping[str, Any]
) -> tuple[RoundState, dict[str, int], int]:
    """The latest round state kept in ``source`` (``keep_rounds``) that ``spec``'s job shares with it
    (``jobspec.shared_rounds``), with its chunk sizes and rounds done; JobError naming ``source`` when none is, or
    when it was run on other partitions or under another runtime (both change the numbers)."""
    kept = branch_files(source)
    if not kept:
        raise JobError(f"--branch-from {source}: no kept round state (branch-rNNN.pt) there; run that job with keep_rounds")
    shared, kept_spec = None, None
    for done in sorted(kept, reverse=True):
        try:
            ckpt = torch.load(kept[done], map_location="cpu", weights_only=False)
            kept_spec = as_spec(ckpt["spec"])
            shared = shared_rounds(kept_spec, spec)
        except Exception as exc:  # noqa: BLE001 - a torn or foreign file is named, not used
            raise JobError(f"{kept[done]}: not a kept round state this version reads ({exc})") from None
        if done > shared:
            continue
        if ckpt["partitions"] != _partitions_json(partitions):
            raise JobError(f"{kept[done]} was run on other partitions than {spec.name}'s")
        if ckpt["path"] != spec.path:
            raise JobError(f"{kept[done]} was trained on the {ckpt['path']} path, {spec.name} runs on the {spec.path} path")
        if dict(ckpt["runtime"]) != dict(rt):
            diff = ", ".join(f"{k} {ckpt['runtime'].get(k)!r} -> {rt.get(k)!r}" for k in rt if ckpt["runtime"].get(k) != rt.get(k))
            raise JobError(f"{kept[done]} was run under another runtime ({diff}), which changes the numbers")
        return RoundState.from_dict(ckpt["state"]), dict(ckpt.get("chunks") or {}), done
    differ = {} if kept_spec is None else {
        k: v for k, v in training_differences(kept_spec, spec).items() if k.split(".")[0] not in BRANCH_KEYS}
    if not shared and differ:
        shown = ", ".join(f"{k} {a} there, {b} here" for k, (a, b) in list(differ.items())[:4])
        raise JobError(f"--branch-from {source}: {spec.name} trains otherwise from round 0 ({shown}), so it shares no "
                       "round with that job")
    raise JobError(f"--branch-from {source}: {spec.name} shares its first {shared} rounds with that job, and it kept "
                   f"no round state at or before them (kept: {', '.join(map(str, sorted(kept)))})")


def check_keep_rounds(spec: JobSpec, keep_rounds: Collection[int]) -> frozenset[int]:
    """``keep_rounds`` as a set; JobError unless each is a round count 1 .. rounds - 1 of a FedAvg job."""
    keep = frozenset(keep_rounds)
    bad = [r for r in keep if isinstance(r, bool) or not isinstance(r, int) or not 1 <= r < spec.rounds]
    if keep and (bad or not spec.is_fl):
        raise JobError(f"keep_rounds {sorted(map(str, keep))}: each must be a number of rounds 1 to {spec.rounds - 1} "
                       "of a FedAvg job")
    return keep


def resolve_path(path: str, device: torch.device, vectorisable: bool = True) -> str:
    """The training path: ``auto`` is the batched path on CUDA and the sequential one on the CPU, or for a loss
    declared sequential-only (``vectorisable`` False, ``losses.Loss``).

    The two compute the same steps (tests/test_vectorised.py: equal in float64, within float32 rounding per step), but
    not bit for bit in float32: over a whole job the rounding drifts apart like another seed's would, so a finished
    job records the path it ran (metrics.json ``path``) and ``fedbalance pack``, which trains on the vectorised path,
    refuses a job finished on the sequential one (``pack.finished_metrics``). On the CPU the sequential path is the
    faster (docs/performance.md).
    """
    if path == "auto":
        return "vectorised" if device.type == "cuda" and vectorisable else "sequential"
    return path


def _job_data(
    spec: JobSpec, dataset: Dataset, parts: Mapping[str, Partition], dev: torch.device
) -> JobData:
    """The job's tensors on ``dev``: train/test splits (the test split's ``evaluation_subset`` where ``eval_samples`` is
    set), the monitor's auxiliary data (empty without monitor; drawn from the whole split)."""
    aux_x, aux_y = auxiliary_data(spec, dataset, parts) if needs_monitor(spec) else (dataset.x_test[:0], dataset.y_test[:0])
    keep = evaluation_subset(dataset.y_test.numpy(), spec.eval_samples, spec.seed)
    x_test, y_test = (dataset.x_test, dataset.y_test) if keep is None else (dataset.x_test[keep], dataset.y_test[keep])
    return JobData(
        dataset.x_train.to(dev),
        dataset.y_train.to(dev),
        x_test.to(dev),
        y_test.to(dev),
        aux_x.to(dev),
        aux_y.to(dev),
        dataset.num_classes,
        spec.minority_classes,
    )


def _model_and_loss(spec: JobSpec, dataset: Dataset, dev: torch.device) -> tuple[torch.nn.Module, torch.nn.Module]:
    """The initial global model (seeded from the job seed) and the job's loss, on ``dev``."""
    q = dataset.num_classes
    torch.manual_seed(derive_seed(spec.seed, TAG_INIT))
    model = device_layout(build_model(spec.model, dataset.in_channels, q, dataset.image_size).to(dev), dev)
    loss_fn = get_loss(spec.base_loss, q, **spec.loss_kwargs()).to(dev)
    return model, loss_fn


def installed_plugins(spec: JobSpec) -> dict[str, Any]:
    """The plug-ins the job runs, as installed here: the spec's ``plugins`` with each one's version and origin
    (``plugins.Plugin.ran``), metrics.json's ``plugins``; {} for a job of built-ins. JobError when one is not installed
    at the package, or the version, its spec was planned with (``plugins.check_installed``): a job runs the plug-ins its
    spec, hence its outputs, name. An estimator counts only for a job that runs the monitor."""
    out: dict[str, Any] = {}
    for what, kind, name, record in plugin_items(spec):
        if what == "estimators" and not needs_monitor(spec):
            continue
        try:
            ran = plugins.check_installed(kind, name, record).ran()
        except plugins.PluginError as exc:
            raise JobError(f"{spec.name}: {exc}") from None
        if what == "estimators":
            out.setdefault(what, {})[name] = ran
        else:
            out[what] = ran
    return out


def check_plugins(spec: JobSpec) -> None:
    """JobError when a plug-in the job was planned with is not installed here at the recorded package and version
    (``installed_plugins``)."""
    installed_plugins(spec)


def plugin_versions(spec: JobSpec) -> dict[str, str]:
    """metrics.json's ``versions`` of the job's plug-ins: package (or module, for one no package provides) -> version."""
    return {str(rec.get("package") or str(rec["target"]).partition(":")[0]): str(rec.get("version"))
            for _, rec in _ran(installed_plugins(spec))}


def _ran(installed: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """(key, record) of each plug-in of ``installed_plugins``, estimators one by one."""
    return [(what, r) for what, rec in installed.items() for r in (rec.values() if what == "estimators" else [rec])]


def _remove_stale_temporaries(out: Path) -> None:
    """Delete the temporary files an interrupted ``atomic_write`` left in ``out``."""
    for name in (CHECKPOINT, TRAJECTORY, METRICS, ROUNDS):
        for stale in out.glob(f".{name}.*.tmp"):
            stale.unlink(missing_ok=True)


def check_unmoved(out: Path) -> None:
    """JobError when the job's folder ``out`` (resolved once, when the job took its lock) resolves elsewhere now: a
    folder on its path was replaced by a link while the job ran (into a reference set, say); nothing more is written."""
    now = out.resolve()
    if now != out:
        raise JobError(f"output folder {out} resolves to {now} now: a folder on its path became a link while the job "
                       "ran; nothing more is written (its checkpoint stays where the job started)")


class _Checkpointer:
    """The engines' ``on_round``: write the checkpoint, advance the progress bar or log a line, then
    call the caller's ``on_round``."""

    def __init__(
        self, spec: JobSpec, path: Path, fp: str, rt: Mapping[str, Any], state: RoundState | None,
        progress: bool | None, on_round: RoundCallback | None, start: float, plan: CopyPlan,
        keep: Collection[int] = (), partitions: Mapping[str, Partition] | None = None,
    ):
        from tqdm.auto import tqdm

        self.start = start
        self.spec, self.path, self.fp, self.rt, self.on_round, self.plan = spec, path, fp, rt, on_round, plan
        self.keep, self.partitions = frozenset(keep), partitions
        if state is not None and state.next_round in self.keep and not branch_file(path.parent, state.next_round).exists():
            self.keep_state(state)  # killed between the checkpoint and the kept state of that round
        self.elapsed0 = state.wall_time_s if state is not None else 0.0
        self.total = num_epochs(spec) if spec.mode == "centralised" else spec.rounds
        self.done0 = len(state.rows) if state is not None else 0
        disable = None if progress is None else not progress
        self.bar = tqdm(total=self.total, initial=self.done0, desc=spec.name, disable=disable, leave=False)
        self.log_lines = progress is None and self.bar.disable  # no terminal (a Snakemake log, a SLURM job): plain lines
        self.loop_start = time.perf_counter()

    def keep_state(self, state: RoundState) -> None:
        """Keep ``state`` (after ``state.next_round`` rounds) for the jobs that branch from this one (``load_branch``)."""
        kept = {"fingerprint": self.fp, "runtime": self.rt, "state": state.to_dict(), "chunks": dict(self.plan.chunks),
                "spec": clean(self.spec.as_dict()), "path": self.spec.path, "partitions": _partitions_json(self.partitions or {})}
        check_unmoved(self.path.parent)
        atomic_write(branch_file(self.path.parent, state.next_round), lambda fh: torch.save(kept, fh), mode="wb")

    def wall_time(self) -> float:
        """The job's seconds so far, those before a resume included."""
        return self.elapsed0 + time.perf_counter() - self.start

    def __call__(self, state: RoundState, row: dict[str, Any]) -> None:
        state.wall_time_s = self.wall_time()
        ckpt = {"fingerprint": self.fp, "runtime": self.rt, "state": state.to_dict(), "chunks": dict(self.plan.chunks)}
        check_unmoved(self.path.parent)
        atomic_write(self.path, lambda fh: torch.save(ckpt, fh), mode="wb")
        if state.next_round in self.keep:
            self.keep_state(state)
        cs = next((row[cs_column(m)] for m in self.spec.monitor.estimators if row.get(cs_column(m)) is not None), None)
        shown = {"loss": row["train_loss"], "acc": row["acc"], "cs": cs}
        self.bar.set_postfix({k: f"{v:.3f}" for k, v in shown.items() if v is not None}, refresh=False)
        self.bar.update(1)
        if self.log_lines:
            done = len(state.rows)
            per_round = (time.perf_counter() - self.loop_start) / max(done - self.done0, 1)
            logger.info(progress_line(self.spec.name, done, self.total, row, cs, per_round))
        if self.on_round is not None:
            self.on_round(state, row)


def _job_metrics(
    spec: JobSpec, state: RoundState, model: torch.nn.Module, data: JobData, dataset: Dataset,
    parts: Mapping[str, Partition], dev: torch.device, rt: Mapping[str, Any], wall_time: Callable[[], float],
    plan: CopyPlan, branched_from: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """metrics.json's content (JSON-safe) for the finished run: ``config`` is the job spec as configured
    (``path: auto`` stays ``auto``, so a twin's spec compares equal), ``path`` the training path it resolved to;
    ``branched_from`` (folder, round) only for a job started from another's kept round state."""
    path = spec.path
    ran = installed_plugins(spec)
    final = (dict(state.last_eval) if state.last_eval is not None
             else evaluate(model, data.x_test, data.y_test, data.num_classes, data.minority_classes))
    final["train_loss"] = state.rows[-1]["train_loss"] if state.rows else None
    metrics = {
        "job": {k: getattr(spec.job, k) for k in JOB_KEYS},
        "config": spec.as_dict(),
        "final": final,
        "partition": {k: v for k, v in parts["main"].stats(dataset.y_train.numpy()).items() if k != "local_gamma"},
        "monitor": monitor_summary(state.rows),
        "acknowledged_round": state.ack_round,
        "device": _describe(dev),
        "path": path,
        "versions": {"python": platform.python_version(), "torch": torch.__version__, "fedbalance": fedbalance.__version__,
                     **plugin_versions(spec)},
        "threads": rt["threads"],
        "deterministic": rt["deterministic"],
        "precision": rt["precision"],
        "chunking": plan.record() if plan.memory_budget is not None and path == "vectorised" else None,
        **({"capture": True} if plan.capture and path == "vectorised" else {}),
        **({"branched_from": dict(branched_from)} if branched_from else {}),
        **({"plugins": ran} if ran else {}),
        "wall_time_s": wall_time(),
        "rounds": len(state.rows),
    }
    return clean(metrics)


def _write_outputs(out: Path, spec: JobSpec, state: RoundState, metrics: Mapping[str, Any]) -> None:
    """trajectory.pt (``save_trajectory``), rounds.csv, then metrics.json; the checkpoint goes last. Nothing when ``out``
    resolves elsewhere than when the job began (``check_unmoved``)."""
    check_unmoved(out)
    if spec.save_trajectory:
        final = {k: v.detach().cpu() for k, v in state.model.items()}
        trajectory = {"spec": clean(spec.resolved_dict()), "rounds": state.trajectory, "final": final,
                      "true_composition": [r["true_composition"] for r in state.rows]}
        atomic_write(out / TRAJECTORY, lambda fh: torch.save(trajectory, fh), mode="wb")
    write_folder(out, metrics, rounds_text(state.rows))
    (out / CHECKPOINT).unlink(missing_ok=True)
    (out / FAILED).unlink(missing_ok=True)


@_locked
def run_job(
    spec: Mapping[str, Any] | JobSpec,
    out_dir: str | Path,
    *,
    data_dir: str | Path = "data",
    device: str = "auto",
    deterministic: bool = False,
    precision: str = "fp32",
    capture: bool = False,
    download: bool = False,
    partitions: Mapping[str, Partition] | None = None,
    progress: bool | None = None,
    on_round: RoundCallback | None = None,
    keep_rounds: Collection[int] = (),
    branch_from: str | Path | None = None,
    until: int | None = None,
) -> dict[str, Any] | None:
    """Run one job (resuming from ``out_dir/checkpoint.pt`` if present); return metrics.json's content.

    The job holds ``out_dir/.lock`` while it runs (JobError if another job holds it). It runs under
    its ``deterministic`` setting and ``precision`` policy (``sgd.precision``: fp32 = TF32 off), both
    restored afterwards; on CUDA the vectorised path trains in chunks that fit the free memory
    (``train.CopyPlan``). ``capture``: the vectorised path's step captured once per chunk and replayed (a CUDA
    graph on CUDA; ``vectorised.run_captured``), recorded as ``"capture": true`` in metrics.json.

    ``partitions``: as loaded from a partition file written by the workflow, else built from the
    spec. ``progress``: a tqdm bar over rounds; None: the bar when stderr is a terminal, else one
    plain line per round on stderr (``progress_line``: what ``tail -f`` of a job's log shows).
    ``on_round(state, row)`` runs after each round's checkpoint is written (tests interrupt there).

    Branches: ``keep_rounds`` keeps the round state after each of those numbers of rounds in ``out_dir``
    (``jobfolder.branch_file``); a job that shares its first rounds with that one (``jobspec.shared_rounds``: e.g. the
    same job with another ``switch_round``) starts from it with ``branch_from`` (the latest kept state it shares; its
    rounds, their seconds included, are the source's and ``wall_time_s`` counts the source's time to there) and
    records ``branched_from`` in metrics.json. Its outputs are those of the job run from round 0.

    ``until``: stop after that many rounds (1 .. rounds - 1 of a FedAvg job), keeping the checkpoint (and the states
    of ``keep_rounds``) for a later run of the job to resume, and return None; nothing is trained when the checkpoint
    holds them already (the workflow keeps a branch source's round state this way, rule ``keep``).
    """
    start = time.perf_counter()
    out = Path(out_dir)
    dev = resolve_device(device)
    check_run_options(precision, capture)
    spec = as_spec(spec)
    check_plugins(spec)
    if until is not None:
        check_keep_rounds(spec, [until])
        on_round = _stop_after(until, on_round)
    spec = spec.with_path(resolve_path(spec.path, dev, getattr(loss_class(spec.base_loss), "vectorisable", True)))
    with deterministic_kernels(dev, deterministic), precision_policy(precision):
        dataset = load_dataset(spec.source, data_dir, download=download, **dict(spec.options))
        parts = dict(partitions) if partitions is not None else build_partitions(spec, dataset)
        job = prepare_job(spec, out, dataset, parts, dev, runtime(dev, deterministic, precision), capture=capture,
                          progress=progress, on_round=on_round, start=start, keep_rounds=keep_rounds,
                          branch_from=None if branch_from is None else Path(branch_from))
        runner = run_centralised if spec.mode == "centralised" else run_fedavg
        try:
            if until is not None and job.state is not None and job.state.next_round >= until:
                return None
            with copy_plan(job.plan):
                state = runner(spec, job.model, job.loss_fn, job.data, parts, state=job.state, on_round=job.checkpoint)
        except _Stopped:
            return None
        except plugins.PluginFailure as exc:
            job.fail(exc)
            raise JobError(str(exc)) from None
        finally:
            job.checkpoint.bar.close()
        metrics = job.metrics(state)
    job.write(state, metrics)
    return metrics


class _Stopped(Exception):
    """Raised after the round ``run_job(until=...)`` stops at, once its checkpoint is written."""


def _stop_after(until: int, on_round: RoundCallback | None) -> RoundCallback:
    """``on_round`` (if any), then stop the run (``_Stopped``) once ``until`` rounds are done."""

    def stop(state: RoundState, row: dict[str, Any]) -> None:
        if on_round is not None:
            on_round(state, row)
        if state.next_round >= until:
            raise _Stopped

    return stop


def check_run_options(precision: str, capture: Any) -> None:
    """JobError naming ``precision`` or ``capture`` when it is not a value a run takes."""
    if precision not in PRECISIONS:
        raise JobError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    if not isinstance(capture, bool):
        raise JobError(f"capture must be true or false, got {capture!r}")


@dataclass
class PreparedJob:
    """A job ready to run in ``out``: its data, initial model and loss on the device, the round state of its checkpoint
    (None: from round 0), the ``on_round`` that writes the checkpoint and the copy plan it runs by."""

    spec: JobSpec
    out: Path
    dataset: Dataset
    parts: dict[str, Partition]
    dev: torch.device
    rt: dict[str, Any]
    data: JobData
    model: torch.nn.Module
    loss_fn: torch.nn.Module
    state: RoundState | None
    checkpoint: _Checkpointer
    plan: CopyPlan
    branched_from: dict[str, Any] | None = None

    def metrics(self, state: RoundState) -> dict[str, Any]:
        """metrics.json's content for the finished run ``state`` (the model holds its final weights)."""
        return _job_metrics(self.spec, state, self.model, self.data, self.dataset, self.parts, self.dev, self.rt,
                            self.checkpoint.wall_time, self.plan, self.branched_from)

    def write(self, state: RoundState, metrics: Mapping[str, Any]) -> None:
        """The job's outputs, each atomically; the checkpoint goes last."""
        _write_outputs(self.out, self.spec, state, metrics)

    def fail(self, exc: BaseException) -> None:
        """Mark the job failed (``jobfolder.write_failed``: a plug-in broke its contract) and drop its checkpoint, whose
        rounds led there: the folder holds no metrics.json, so the job never counts as finished."""
        write_failed(self.out, self.spec.name, str(exc))
        (self.out / CHECKPOINT).unlink(missing_ok=True)


def prepare_job(
    spec: JobSpec, out: Path, dataset: Dataset, parts: dict[str, Partition], dev: torch.device, rt: dict[str, Any], *,
    capture: bool = False, plan: CopyPlan | None = None, progress: bool | None = None,
    on_round: RoundCallback | None = None, start: float | None = None, keep_rounds: Collection[int] = (),
    branch_from: Path | None = None,
) -> PreparedJob:
    """Check the partitions, build the job's data, model and loss on ``dev``, clear stale temporaries in ``out``, read
    its checkpoint and make its checkpointer (``spec``: its path resolved; ``rt``: ``runtime``). The job runs by
    ``plan`` (a pack's, shared) or, by default, its own ``job_plan`` made once its tensors are on ``dev`` (the free
    memory it budgets is what they leave); the chunks its checkpoint recorded join the plan's. Without a checkpoint
    of its own, a job with ``branch_from`` starts from that folder's kept round state (``load_branch``)."""
    start = time.perf_counter() if start is None else start
    check_plugins(spec)
    keep = check_keep_rounds(spec, keep_rounds)
    _check_partitions(spec, parts, dataset)
    data = _job_data(spec, dataset, parts, dev)
    model, loss_fn = _model_and_loss(spec, dataset, dev)
    fp = fingerprint(spec, parts)
    _remove_stale_temporaries(out)
    (out / FAILED).unlink(missing_ok=True)  # a failed earlier run's mark: this run decides anew
    state, chunks = _load_checkpoint(out / CHECKPOINT, fp, rt)
    if state is None and branch_from is not None:
        state, chunks, done = load_branch(branch_from, spec, parts, rt)
        state.branched_from = {"folder": folder_job(branch_from) or str(branch_from), "round": done}
    branched = None if state is None else state.branched_from
    plan = job_plan(dev, rt["precision"], capture) if plan is None else plan
    plan.chunks.update(chunks)
    checkpoint = _Checkpointer(spec, out / CHECKPOINT, fp, rt, state, progress, on_round, start, plan, keep, parts)
    return PreparedJob(spec, out, dataset, parts, dev, rt, data, model, loss_fn, state, checkpoint, plan, branched)


def progress_line(
    name: str, done: int, total: int, row: Mapping[str, Any], cs: float | None, seconds_per_round: float,
    now: datetime | None = None,
) -> str:
    """One round of a job as one log line: the local time (ISO 8601, with its UTC offset; default now), rounds
    done/total, accuracy, Ac.M, the monitor's CS (when recorded), mean seconds per round and the estimated time
    left (H:MM:SS, hours past 24 kept as hours, not ``timedelta``'s days)."""

    def num(v: Any) -> str:
        return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.4f}"

    eta = int(round(seconds_per_round * max(total - done, 0)))
    stamp = (now or datetime.now().astimezone()).isoformat(timespec="seconds")
    parts = [f"{stamp} {name} round {done}/{total}", f"acc {num(row.get('acc'))}",
             f"Ac.M {num(row.get('acc_minority'))}"]
    if cs is not None:
        parts.append(f"CS {num(cs)}")
    parts += [f"{seconds_per_round:.2f} s/round", f"ETA {eta // 3600}:{eta // 60 % 60:02d}:{eta % 60:02d}"]
    return "  ".join(parts)
