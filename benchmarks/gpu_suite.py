"""One GPU suite: rounds, the centralised path, memory, one full job, jobs sharing the device.

Prints one JSON and, with ``--out``, writes it after every measurement, so a device call cut short keeps
what it measured. A section (or one measurement of it) that fails records ``"error"`` and the suite
goes on; ``--budget-s`` skips what would start after that many seconds (``"skipped"``). The exit status
is 1 when a check between the two training paths is beyond its tolerance (``TOLERANCE``), else 0.

Sections (``--sections``, default all, in this order):

* ``estimated``: the model shapes of ``--config`` (default config/config.yaml) that the shipped GPU calibration
  (``src/fedbalance/calibrations/``) did not measure, and so ``fedbalance cost`` estimates by FLOPs
  (``fedbalance.jobs.cost.with_estimates``: CNN7 at 3x32x32, ResNet18 at Fer2013's 48x48), measured with
  ``fedbalance.jobs.cost.calibrate`` (every batch size the study trains them at, K copies at once): a calibration to
  merge into the shipped one. On a CUDA device it runs first even when ``--sections`` does not name it (a short
  session measures what the cost table only estimates before anything else; ``--sections`` naming it places it).
  ``--smoke``: one CNN7 shape at batch 8 on the CPU.
* ``memory``: the memory model (``fedbalance.training.vectorised.estimate_memory``, on meta tensors, no device
  needed) of the grid's largest vectorised calls, and the copies per vmap call chosen for this device's
  budget (CUDA) and for an 80 GB H100 (``--assume-free-gib`` free).
* ``round``: one FedAvg round, sequential vs vectorised ``train_copies`` under the job's plan
  (``--precision``, memory-aware chunks), at the default K = 20 clients x 1,000 samples, batch 32,
  lr 0.001, momentum 0.9, weight decay 5e-4: MNIST/LeNet5 with the paper's 10 local epochs,
  FEMNIST-shape (1x28x28, 26 letters)/ResNet18 and ResNet50 with 1 (a round's time is about linear in
  the epochs). CE and Ratio Loss; Ratio Loss adds the monitor (``Observer.observe``: Q per-class copies
  on 32 auxiliary samples each, then the estimators). Per row: seconds of the clients and of the
  monitor, the monitor's share, the SGD steps (an optimiser hook on the sequential path, the batch
  schedules on the vectorised one), peak GPU memory, and on the vectorised path the chunks and the
  memory model's estimate. Per (model, loss): the max abs differences of the two paths' averaged
  states, mean losses and monitor weights against ``TOLERANCE`` (``agree``), and the speed-up.
* ``centralised``: one epoch of pooled SGD (``sgd_steps`` with one optimiser, as ``run_centralised``)
  on the 20 clients' pooled samples, per model: steps, seconds, samples per second.
* ``job``: ``losses/mnist/g10/ratio`` of ``--config`` end to end through the CLI
  (``python -m fedbalance train``), wall time, the job's own time and its start-up.
* ``throughput``: N = ``--slots`` copies of that job (seeds 0..N-1, ``--throughput-rounds`` rounds)
  started at once on the device; jobs/hour and rounds/hour for each N.

MNIST files missing under the config's ``data_dir`` (a GPU box without network): the job sections
write synthetic MNIST-shaped IDX files (60,000/10,000 random images) into a temporary folder and
run with ``verify: false``; the JSON says ``"data": "synthetic"`` (same shapes, so the same time).

GPU: ``python benchmarks/gpu_suite.py --out gpu_suite.json`` (about 5 minutes on one H100, an estimate:
docs/performance.md). CPU check of every code path (reduced sizes, 8x8 images for the ResNets,
config/quick.yaml's embedded mnist5k): ``python benchmarks/gpu_suite.py --smoke``.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml
from torch import nn
from torch.optim.optimizer import register_optimizer_step_post_hook

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import fedbalance.training.sgd  # noqa: E402
from fedbalance.jobs import jobfolder  # noqa: E402
from fedbalance.jobs.config import load_config, resolve_job  # noqa: E402
from fedbalance.common.records import Job  # noqa: E402
import fedbalance.training.vectorised  # noqa: E402
from fedbalance.jobs.cost import cpu_name  # noqa: E402
from fedbalance.monitor.estimators import Observer  # noqa: E402
from fedbalance.methods.losses import get_loss  # noqa: E402
from fedbalance.methods.models import build_model  # noqa: E402
from fedbalance.monitor.monitor import Monitor  # noqa: E402
from fedbalance.training.sgd import make_optimizer, precision, register_step_post_hook, sgd_steps  # noqa: E402
from fedbalance.training.train import CopyPlan, SGDConfig, average_stacked, batch_schedule, copy_plan, job_plan, train_copies  # noqa: E402
from fedbalance.training.vectorised import data_bytes, estimate_memory  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from round_speed import _datasets as _sets  # noqa: E402  (synthetic client and per-class sets)

JOB = ("losses", "mnist", "g10", "ratio")
METHODS = ("released", "nnls", "paper")  # config/config.yaml's monitor.estimators
# model -> (shape name, channels, image size, classes, local epochs of the round section)
MODELS = {
    "lenet5": ("MNIST", 1, (28, 28), 10, 10),
    "resnet18": ("FEMNIST", 1, (28, 28), 26, 1),
    "resnet50": ("FEMNIST", 1, (28, 28), 26, 1),
}
SMOKE_MODELS = {"lenet5": ((28, 28), 10), "resnet18": ((8, 8), 4), "resnet50": ((8, 8), 4)}
PAPER = {"clients": 20, "samples": 1000, "batch_size": 32, "aux": 32}
SMOKE = {"clients": 2, "samples": 16, "batch_size": 8, "aux": 4}
TOLERANCE = {"state": 1e-6, "loss": 1e-6, "weights": 1e-6}
"""Largest differences allowed between the sequential and the vectorised path in float64 (states relative to
max(1, |value|); losses come back in float32). A fresh ResNet50 amplifies rounding ~1e7-fold within a few
SGD steps on either path (a 1e-7 relative change of one float32 weight becomes 2e-2 after two steps), so float32
cannot separate a bug from rounding; in float64 the paths agree to 1.6e-9 (ResNet50, --smoke) and 1e-15 (the
others), while a difference in the algorithm shows at 1e-3 or more (docs/performance.md)."""


# the grid's largest vectorised calls: (name, model, image, classes, copies, batch, samples per copy)
GRID = [
    ("femnist K=20 (losses, default)", "resnet50", (28, 28), 26, 20, 32, 1000),
    ("femnist K=80 (clients_femnist)", "resnet50", (28, 28), 26, 80, 32, 1000),
    ("femnist batch 256 (batch_size)", "resnet50", (28, 28), 26, 20, 256, 1000),
    ("femnist monitor, Q=26", "resnet50", (28, 28), 26, 26, 32, 32),
    ("fer2013 K=20 (losses)", "resnet18", (48, 48), 7, 20, 32, 1000),
    ("cifar10 K=200 (clients_cifar10)", "cnn7", (32, 32), 10, 200, 32, 80),
]
MNIST_FILES = {
    "train-images-idx3-ubyte": (60_000, True),
    "train-labels-idx1-ubyte": (60_000, False),
    "t10k-images-idx3-ubyte": (10_000, True),
    "t10k-labels-idx1-ubyte": (10_000, False),
}
SECTIONS = ("estimated", "memory", "round", "centralised", "job", "throughput")


def _parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--smoke", action="store_true", help="reduced sizes on the CPU: config/quick.yaml, 2 rounds, N = 1, 2")
    p.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available; cpu with --smoke)")
    p.add_argument("--sections", default=",".join(SECTIONS), help=f"comma list of {', '.join(SECTIONS)}")
    p.add_argument("--precision", choices=("fp32", "tf32"), default="fp32", help="precision policy of the round and centralised sections")
    p.add_argument("--config", type=Path, default=None, help="study config of the job sections (default config/config.yaml; --smoke: config/quick.yaml)")
    p.add_argument("--rounds", type=int, default=None, help="rounds of the job section (default: the config's; --smoke: 2)")
    p.add_argument("--slots", default=None, help="comma list of concurrent jobs N (default 1,2,4,8; --smoke: 1,2)")
    p.add_argument("--throughput-rounds", type=int, default=None, help="rounds of each throughput job (default 3; --smoke: 1)")
    p.add_argument("--mps", action="store_true", help="throughput again under NVIDIA MPS (the control daemon started for it, "
                   "then quit)")
    p.add_argument("--capture", action="store_true", help="the round section also times the captured step (vectorised.run_captured) "
                   "and checks it against the eager one; the throughput section's jobs run with --capture")
    p.add_argument("--assume-free-gib", type=float, default=78.0, help="free memory of the assumed 80 GB H100 in the memory section")
    p.add_argument("--budget-s", type=float, default=None, help="start nothing after this many seconds (default 420; --smoke: none)")
    p.add_argument("--out", type=Path, default=None, help="also write the JSON here, after every measurement")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if args.device is None:
        args.device = "cpu" if args.smoke or not torch.cuda.is_available() else "cuda"
    args.config = args.config or ROOT / ("config/quick.yaml" if args.smoke else "config/config.yaml")
    args.rounds = args.rounds or (2 if args.smoke else None)
    args.slots = [int(n) for n in (args.slots or ("1,2" if args.smoke else "1,2,4,8")).split(",")]
    args.throughput_rounds = args.throughput_rounds or (1 if args.smoke else 3)
    args.budget_s = args.budget_s if args.budget_s is not None else (math.inf if args.smoke else 420.0)
    args.sizes = dict(SMOKE if args.smoke else PAPER)
    return args


class Report:
    """The suite's JSON: ``save()`` rewrites ``--out`` (after every measurement); ``time_left()`` keeps the budget."""

    def __init__(self, args: argparse.Namespace, data: dict[str, Any]) -> None:
        self.args, self.data, self.start = args, data, time.perf_counter()

    def save(self) -> None:
        """Stamp the wall time and load, and write the JSON to ``--out``."""
        self.data["wall_s"] = round(time.perf_counter() - self.start, 2)
        self.data["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
        if self.args.out is not None:
            self.args.out.write_text(json.dumps(self.data, indent=1))

    def time_left(self) -> bool:
        """Whether a new measurement may start (``--budget-s``)."""
        return time.perf_counter() - self.start < self.args.budget_s


def _error(err: BaseException) -> str:
    """One line naming the exception, and the innermost frames."""
    tail = "".join(traceback.format_exception(err)[-3:])
    return f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''} | {tail[-600:]}"


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class _StepCounter:
    """Counts SGD steps while active (``torch.optim``'s and ``FunctionalSGD``'s: the sequential path's)."""

    def __init__(self) -> None:
        self.count = 0

    def __enter__(self) -> _StepCounter:
        self._handles = [register_optimizer_step_post_hook(self._hook), register_step_post_hook(self._hook)]
        return self

    def _hook(self, *_: Any) -> None:
        self.count += 1

    def __exit__(self, *_: Any) -> None:
        for handle in self._handles:
            handle.remove()


def _scheduled(sets: list[tuple[torch.Tensor, torch.Tensor]], cfg: SGDConfig, seed: int) -> int:
    """Steps the vectorised path takes: the lengths of the copies' batch schedules."""
    return sum(len(batch_schedule(len(y), cfg, torch.Generator().manual_seed(seed + k))) for k, (_, y) in enumerate(sets))


def _round(model: nn.Module, loss_fn: nn.Module, clients: list, monitor: Observer | None, cfg: SGDConfig, path: str, seed: int,
           device: torch.device, plan: CopyPlan) -> dict[str, Any]:
    """One round on ``path`` under ``plan``: clients, FedAvg, and the monitor when given; times, steps and results."""
    gens = [torch.Generator().manual_seed(seed + k) for k in range(len(clients))]
    _sync(device)
    with _StepCounter() as steps, copy_plan(plan), precision(plan.precision):
        t0 = time.perf_counter()
        stacked, losses = train_copies(model, clients, loss_fn, cfg, gens, path=path)
        new_state = average_stacked(stacked)
        _sync(device)
        t1 = time.perf_counter()
        client_steps = steps.count
        observed = None
        if monitor is not None:
            observed = monitor.observe(model, new_state, [len(y) for _, y in clients], torch.Generator().manual_seed(seed + 10_000),
                                       clients=list(range(len(clients))))
            _sync(device)
        t2 = time.perf_counter()
    monitor_steps = steps.count - client_steps
    if path == "vectorised":
        client_steps = _scheduled(clients, cfg, seed)
        if monitor is not None:
            mon = monitor.monitor
            q = mon.num_classes
            aux = [(mon.aux_x[mon.aux_y == p], mon.aux_y[mon.aux_y == p]) for p in range(q)]
            seeds = torch.randint(0, 2**62, (q,), generator=torch.Generator().manual_seed(seed + 10_000)).tolist()
            monitor_steps = sum(len(batch_schedule(len(y), cfg, torch.Generator().manual_seed(int(s)))) for (_, y), s in zip(aux, seeds))
    return {
        "clients_s": t1 - t0, "monitor_s": t2 - t1 if monitor is not None else 0.0, "client_steps": client_steps, "monitor_steps": monitor_steps if monitor is not None else 0,
        "state": {k: v.detach().double().cpu() for k, v in new_state.items()}, "losses": losses.double().cpu(),
        "weights": None if observed is None else observed["weights"].detach().double().cpu(),
    }


def _model_setup(args: argparse.Namespace, name: str, device: torch.device) -> tuple[str, int, tuple[int, int], int, int]:
    """(shape name, channels, image size, classes, local epochs) of ``name`` at the run's sizes."""
    shape_name, c, size, q, epochs = MODELS[name]
    if args.smoke:
        size, q = SMOKE_MODELS[name]
        epochs = 1
    return shape_name, c, size, q, epochs


def _diffs(seq: dict[str, Any], vec: dict[str, Any], relative: bool) -> dict[str, float]:
    """Max differences of the two paths' averaged states (relative to max(1, |value|) when ``relative``), losses, weights."""
    def state_diff(k: str) -> float:
        d = float((seq["state"][k] - vec["state"][k]).abs().max())
        return d / max(1.0, float(seq["state"][k].abs().max())) if relative else d

    out = {"max_abs_diff": max(state_diff(k) for k in seq["state"]), "loss_max_diff": float((seq["losses"] - vec["losses"]).abs().max())}
    if seq["weights"] is not None:
        out["monitor_weights_max_diff"] = float((seq["weights"] - vec["weights"]).abs().max())
    return out


def _check(name: str, loss_name: str, exact: dict[str, float], timed: dict[str, dict[str, Any]] | None) -> dict[str, Any]:
    """``agree``: the float64 differences ``exact`` within ``TOLERANCE`` (and finite); the timed float32 run's
    differences and the speed-up as information."""
    limits = {"max_abs_diff": TOLERANCE["state"], "loss_max_diff": TOLERANCE["loss"], "monitor_weights_max_diff": TOLERANCE["weights"]}
    check: dict[str, Any] = {"model": name, "loss": loss_name, "float64": exact, "tolerance": TOLERANCE,
                             "agree": all(math.isfinite(v) and v <= limits[k] for k, v in exact.items())}
    if timed is not None:
        seq, vec = timed["sequential"], timed["vectorised"]
        check["float32"] = _diffs(seq, vec, relative=False)
        check["speedup"] = round((seq["clients_s"] + seq["monitor_s"]) / (vec["clients_s"] + vec["monitor_s"]), 3)
    return check


@contextlib.contextmanager
def _float64() -> Iterator[None]:
    """Images to float64 instead of float32 on both paths (``sgd.to_float``, ``vectorised.to_float``)."""
    modules = (fedbalance.training.sgd, fedbalance.training.vectorised)
    before = [m.to_float for m in modules]
    for m in modules:
        m.to_float = lambda x: x.double().div_(255.0) if x.dtype == torch.uint8 else x.double()
    try:
        yield
    finally:
        for m, f in zip(modules, before):
            m.to_float = f


def _exact(name: str, model: nn.Module, loss_fn: nn.Module, clients: list, aux: tuple[torch.Tensor, torch.Tensor] | None,
           q: int, batch: int, seed: int, device: torch.device) -> dict[str, float]:
    """Both paths in float64 on 2 clients of 2 batches and 2 epochs (and the monitor on 4 samples per class),
    in the chunks the memory model chooses for float64."""
    cfg = SGDConfig(lr=0.001, momentum=0.9, weight_decay=5e-4, batch_size=batch, epochs=2)
    model64, loss64 = copy.deepcopy(model).double(), copy.deepcopy(loss_fn).double()
    small = [(x[: 2 * batch], y[: 2 * batch]) for x, y in clients[:2]]
    if aux is not None:
        aux_x, aux_y = aux
        keep = torch.cat([torch.nonzero(aux_y == k).flatten()[:4] for k in range(q)])
        aux = (aux_x[keep], aux_y[keep])
    res = {}
    with _float64():
        for path in ("sequential", "vectorised"):
            monitor = Observer(Monitor(*aux, q, cfg, path=path), METHODS) if aux is not None else None
            res[path] = _round(model64, loss64, small, monitor, cfg, path, seed, device, job_plan(device, "fp32"))
    return _diffs(res["sequential"], res["vectorised"], relative=True)


def section_round(args: argparse.Namespace, device: torch.device, report: Report) -> dict[str, Any]:
    """One round, sequential vs vectorised, CE and Ratio Loss with the monitor; a row per measurement."""
    s = args.sizes
    out: dict[str, Any] = {"sizes": s, "lr": 0.001, "precision": args.precision, "rows": [], "checks": []}
    report.data["round"] = out
    for name in MODELS:
        shape_name, c, size, q, epochs = _model_setup(args, name, device)
        cfg = SGDConfig(lr=0.001, momentum=0.9, weight_decay=5e-4, batch_size=s["batch_size"], epochs=epochs)
        warm_cfg = SGDConfig(batch_size=s["batch_size"], epochs=1)
        torch.manual_seed(args.seed)
        model = build_model(name, c, q, size).to(device)
        g = torch.Generator().manual_seed(args.seed)
        clients = _sets(s["clients"], s["samples"], (c, *size), q, device, g)
        aux = _sets(q, s["aux"], (c, *size), q, device, g, one_class=True)
        aux_x, aux_y = torch.cat([x for x, _ in aux]), torch.cat([y for _, y in aux])
        for loss_name in ("ce", "ratio"):
            loss_fn = get_loss(loss_name, q, **({"weight": torch.linspace(1.0, 1.5, q)} if loss_name == "ratio" else {})).to(device)
            results: dict[str, dict[str, Any]] = {}
            for variant in ("sequential", "vectorised", *(["captured"] if args.capture else [])):
                path = "sequential" if variant == "sequential" else "vectorised"
                row: dict[str, Any] = {"model": name, "shape": shape_name, "classes": q, "image": list(size), "loss": loss_name,
                                       "path": path, "capture": variant == "captured", "epochs": epochs, **s}
                out["rows"].append(row)
                if not report.time_left():
                    row["skipped"] = "time budget"
                    continue
                try:
                    plan = job_plan(device, args.precision, variant == "captured")
                    monitor = Observer(Monitor(aux_x, aux_y, q, cfg, path=path), METHODS) if loss_name == "ratio" else None
                    # warm-up (kernels, lazy imports): a one-batch round, with a one-epoch monitor for Ratio Loss
                    warm_monitor = Observer(Monitor(aux_x, aux_y, q, warm_cfg, path=path), METHODS) if monitor is not None else None
                    warm = [(x[: s["batch_size"]], y[: s["batch_size"]]) for x, y in clients[:2]]
                    _round(model, loss_fn, warm, warm_monitor, warm_cfg, path, args.seed, device,
                           job_plan(device, args.precision, variant == "captured"))
                    t_est = time.perf_counter()
                    if path == "vectorised":  # the chunks (a job chooses them once, at its first round), outside the timing
                        plan.chunk_size(model, clients, loss_fn, cfg)
                        if monitor is not None:
                            plan.chunk_size(model, [(aux_x[aux_y == p], aux_y[aux_y == p]) for p in range(q)], nn.CrossEntropyLoss(), cfg)
                    row["estimate_s"] = round(time.perf_counter() - t_est, 3)
                    if device.type == "cuda":
                        torch.cuda.reset_peak_memory_stats(device)
                    res = _round(model, loss_fn, clients, monitor, cfg, path, args.seed, device, plan)
                except Exception as err:  # noqa: BLE001 - recorded, the suite goes on
                    row["error"] = _error(err)
                    if device.type == "cuda":
                        torch.cuda.empty_cache()
                    report.save()
                    continue
                results[variant] = res
                total = res["clients_s"] + res["monitor_s"]
                clients_s, monitor_s = round(res["clients_s"], 4), round(res["monitor_s"], 4)
                row.update(
                    client_steps=res["client_steps"], monitor_steps=res["monitor_steps"], clients_s=clients_s,
                    monitor_s=monitor_s if monitor is not None else None, round_s=round(clients_s + monitor_s, 4),
                    monitor_share=round(res["monitor_s"] / total, 4) if monitor is not None else None,
                    peak_memory_gib=round(torch.cuda.max_memory_allocated(device) / 2**30, 3) if device.type == "cuda" else None,
                    chunks=dict(plan.chunks) if path == "vectorised" else None,
                    estimate=dict(plan.estimates) if path == "vectorised" else None,
                )
                report.save()
            check: dict[str, Any] = {"model": name, "loss": loss_name}
            out["checks"].append(check)
            if not report.time_left():
                check["skipped"] = "time budget"
                continue
            try:
                aux_one = (aux_x, aux_y) if loss_name == "ratio" else None
                exact = _exact(name, model, loss_fn, clients, aux_one, q, s["batch_size"], args.seed, device)
                paths = ("sequential", "vectorised")
                check.update(_check(name, loss_name, exact, {p: results[p] for p in paths} if set(paths) <= set(results) else None))
                if {"vectorised", "captured"} <= set(results):
                    check["captured_vs_eager"] = _diffs(results["vectorised"], results["captured"], relative=True)
            except Exception as err:  # noqa: BLE001 - recorded, the suite goes on
                check.update(error=_error(err), agree=False)
            report.save()
    return out


def section_estimated(args: argparse.Namespace, device: torch.device, report: Report) -> dict[str, Any]:
    """The study's model shapes the shipped calibration lacks, measured (``cost.calibrate``); a row per shape and the
    calibration of those measured (``calibration``, ``fedbalance.jobs.cost.Calibration``'s JSON)."""
    from fedbalance.jobs import cost
    from fedbalance.jobs.config import read_yaml, with_defaults

    if args.smoke:
        missing = [cost.Shape("cnn7", 3, 32, 32, 10, 8, "sequential")]
    else:  # the config unvalidated: validating config/config.yaml's every job takes minutes
        shipped = cost.shipped_calibration("cuda")
        shapes = cost.study_shapes(with_defaults(read_yaml(args.config)), device.type)
        missing = sorted(s for s in shapes if s.model_key not in shipped.probes)
    out: dict[str, Any] = {"config": str(args.config), "shapes": [s.key for s in missing], "rows": [], "calibration": None}
    report.data["estimated"] = out
    measured: cost.Calibration | None = None
    for shape in missing:
        row: dict[str, Any] = {"shape": shape.key}
        out["rows"].append(row)
        if not report.time_left():
            row["skipped"] = "time budget"
            continue
        try:
            t0 = time.perf_counter()
            cal = cost.calibrate([shape], str(device), steps=1 if args.smoke else None, copies=args.sizes["clients"],
                                 startup=False, probe_batch=shape.batch_size)
            row.update(probe=cal.probes[shape.model_key], step_s=cal.steps.get(shape.key),
                       measure_s=round(time.perf_counter() - t0, 2))
            if measured is None:
                measured = cal
            else:
                measured.probes.update(cal.probes)
                measured.steps.update(cal.steps)
            out["calibration"] = measured.to_json()
        except Exception as err:  # noqa: BLE001 - recorded, the suite goes on
            row["error"] = _error(err)
            if device.type == "cuda":
                torch.cuda.empty_cache()
        report.save()
    return out


def section_centralised(args: argparse.Namespace, device: torch.device, report: Report) -> dict[str, Any]:
    """One epoch of pooled SGD per model (the centralised path: ``sgd_steps`` with one optimiser for the run)."""
    s = args.sizes
    out: dict[str, Any] = {"samples": s["clients"] * s["samples"], "batch_size": s["batch_size"], "precision": args.precision, "rows": []}
    report.data["centralised"] = out
    for name in MODELS:
        shape_name, c, size, q, _ = _model_setup(args, name, device)
        row: dict[str, Any] = {"model": name, "shape": shape_name, "classes": q, "image": list(size)}
        out["rows"].append(row)
        if not report.time_left():
            row["skipped"] = "time budget"
            continue
        try:
            torch.manual_seed(args.seed)
            model = build_model(name, c, q, size).to(device)
            g = torch.Generator().manual_seed(args.seed)
            (x, y), = _sets(1, s["clients"] * s["samples"], (c, *size), q, device, g)
            cfg = SGDConfig(lr=0.001, momentum=0.9, weight_decay=5e-4, batch_size=s["batch_size"], epochs=1)
            loss_fn = get_loss("ce", q).to(device)
            opt = make_optimizer(model, cfg)
            with precision(args.precision):
                sgd_steps(model, opt, x[: s["batch_size"]], y[: s["batch_size"]], loss_fn, [torch.arange(s["batch_size"])])
                batches = batch_schedule(len(y), cfg, torch.Generator().manual_seed(args.seed))
                if device.type == "cuda":
                    torch.cuda.reset_peak_memory_stats(device)
                _sync(device)
                with _StepCounter() as steps:
                    t0 = time.perf_counter()
                    loss = sgd_steps(model, opt, x, y, loss_fn, batches)
                    _sync(device)
                    seconds = time.perf_counter() - t0
            row.update(steps=steps.count, scheduled=len(batches), epoch_s=round(seconds, 4), samples_per_s=round(len(y) / seconds, 1),
                       loss=loss, peak_memory_gib=round(torch.cuda.max_memory_allocated(device) / 2**30, 3) if device.type == "cuda" else None)
        except Exception as err:  # noqa: BLE001 - recorded, the suite goes on
            row["error"] = _error(err)
        report.save()
    return out


def section_memory(args: argparse.Namespace, device: torch.device, report: Report) -> dict[str, Any]:
    """The memory model of the grid's largest vectorised calls and the chunk sizes it chooses."""
    assumed = int(0.8 * args.assume_free_gib * 2**30)
    here = job_plan(device).memory_budget
    out: dict[str, Any] = {"assumed_free_gib": args.assume_free_gib, "assumed_budget_gib": round(assumed / 2**30, 2),
                           "device_budget_gib": None if here is None else round(here / 2**30, 2), "rows": []}
    report.data["memory"] = out
    sample_y = torch.zeros((), dtype=torch.long)
    for label, name, size, q, copies, batch, samples in GRID:
        row: dict[str, Any] = {"call": label, "model": name, "image": list(size), "classes": q, "copies": copies, "batch_size": batch}
        out["rows"].append(row)
        if not report.time_left():
            row["skipped"] = "time budget"
            continue
        try:
            torch.manual_seed(0)
            model = build_model(name, 1 if name != "cnn7" else 3, q, size)
            sample_x = torch.zeros(1 if name != "cnn7" else 3, *size, dtype=torch.uint8)
            cfg = SGDConfig(batch_size=batch, epochs=10)
            width = min(batch, samples)
            t0 = time.perf_counter()
            est = estimate_memory(model, get_loss("ce", q), cfg, width, sample_x, sample_y)
            data = data_bytes([samples] * copies, sample_x, sample_y, cfg)
            gib = 2**30
            row.update(
                estimate_s=round(time.perf_counter() - t0, 2), per_copy_gib=round(est.per_copy / gib, 3),
                state_gib=round(est.state / gib, 4), data_gib=round(data / gib, 3),
                all_at_once_gib=round(est.need(copies, copies, data) / gib, 2),
                chunk_assumed=est.chunk_size(assumed, copies, data),
                chunk_device=None if here is None else est.chunk_size(here, copies, data),
            )
            row["need_assumed_gib"] = round(est.need(row["chunk_assumed"], copies, data) / gib, 2)
        except Exception as err:  # noqa: BLE001 - recorded, the suite goes on
            row["error"] = _error(err)
        report.save()
    return out


def _write_idx(path: Path, data: np.ndarray) -> None:
    """An IDX file (MNIST's format) of uint8 ``data``."""
    with path.open("wb") as fh:
        fh.write(struct.pack(">BBBB", 0, 0, 0x08, data.ndim))
        fh.write(struct.pack(f">{data.ndim}I", *data.shape))
        fh.write(np.ascontiguousarray(data, dtype=np.uint8).tobytes())


def synthetic_mnist(root: Path, seed: int = 0) -> None:
    """Random MNIST-shaped IDX files (60,000/10,000, balanced labels) under ``root/MNIST/raw``."""
    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for name, (n, images) in MNIST_FILES.items():
        data = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8) if images else rng.permutation(np.arange(n) % 10).astype(np.uint8)
        _write_idx(raw / name, data)


def job_config(args: argparse.Namespace, tmp: Path, rounds: int | None) -> tuple[Path, str]:
    """A copy of ``--config`` for the job sections: ``rounds`` for the job's experiment, synthetic MNIST if needed."""
    cfg = yaml.safe_load(args.config.read_text())
    cfg = copy.deepcopy(cfg)
    data = "embedded"
    source = cfg["datasets"][JOB[1]].get("source", JOB[1])
    if source == "mnist":
        data_dir = Path(cfg["data_dir"])
        data_dir = data_dir if data_dir.is_absolute() else ROOT / data_dir
        if all((data_dir / "MNIST" / "raw" / f).is_file() for f in MNIST_FILES):
            data = "real"
            cfg["data_dir"] = str(data_dir)
        else:
            data = "synthetic"
            synthetic_mnist(tmp / "data")
            cfg["data_dir"] = str(tmp / "data")
            cfg["datasets"][JOB[1]]["options"] = {**cfg["datasets"][JOB[1]].get("options", {}), "verify": False}
        cfg["download"] = False
    if rounds is not None:
        params = cfg["experiments"][JOB[0]].setdefault("params", {})
        params["rounds"] = rounds
    cfg["results_dir"] = str(tmp / "results")
    path = tmp / f"config-{rounds}.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path, data


def _train_cmd(config: Path, out: Path, seed: int, device: str, threads: int, capture: bool = False) -> list[str]:
    experiment, dataset, setting, loss = JOB
    return [sys.executable, "-m", "fedbalance", "train", "--config", str(config), "--experiment", experiment, "--dataset", dataset,
            "--setting", setting, "--loss", loss, "--seed", str(seed), "--out", str(out), "--device", device, "--threads", str(threads),
            *(["--capture"] if capture else [])]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT / "src"), os.environ.get("PYTHONPATH")) if p)}


def _read_job(out: Path) -> dict[str, Any]:
    metrics = json.loads((out / "metrics.json").read_text())
    rows = (out / "rounds.csv").read_text().strip().splitlines()[1:]
    return {"rounds": metrics["rounds"], "rounds_csv_rows": len(rows), "job_wall_s": metrics["wall_time_s"], "acc": metrics["final"]["acc"],
            "path": metrics.get("path"), "precision": metrics.get("precision"), "chunking": metrics.get("chunking")}


def section_job(args: argparse.Namespace, device: torch.device, report: Report, tmp: Path) -> dict[str, Any]:
    """The full-protocol MNIST job through the CLI."""
    config, data = job_config(args, tmp, args.rounds)
    out = tmp / "job"
    threads = 1 if device.type == "cpu" else min(4, os.cpu_count() or 1)
    cmd = _train_cmd(config, out, args.seed, device.type, threads)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=_env(), cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    res: dict[str, Any] = {"job": "/".join(JOB) + f"/seed{args.seed}", "config": str(args.config.relative_to(ROOT) if args.config.is_relative_to(ROOT) else args.config),
                           "data": data, "threads": threads, "wall_s": round(wall, 3), "returncode": proc.returncode}
    if proc.returncode != 0:
        res["error"] = proc.stderr[-2000:]
        return res
    res.update(_read_job(out))
    res["startup_s"] = round(wall - res["job_wall_s"], 3)
    res["round_s"] = round(res["job_wall_s"] / res["rounds"], 4)
    return res


@contextlib.contextmanager
def mps_daemon(tmp: Path) -> Iterator[dict[str, str] | str]:
    """NVIDIA's Multi-Process Service for the block: yields the environment its clients need, or why it is not
    available. The control daemon is started in ``tmp`` and quit afterwards; the GPU's compute mode is left as it is."""
    control = shutil.which("nvidia-cuda-mps-control")
    if control is None:
        yield "nvidia-cuda-mps-control not found"
        return
    env = {"CUDA_MPS_PIPE_DIRECTORY": str(tmp / "mps-pipe"), "CUDA_MPS_LOG_DIRECTORY": str(tmp / "mps-log")}
    for d in env.values():
        Path(d).mkdir(parents=True, exist_ok=True)
    full = {**os.environ, **env}
    started = subprocess.run([control, "-d"], env=full, capture_output=True, text=True)
    if started.returncode != 0:
        yield f"nvidia-cuda-mps-control -d failed: {started.stderr.strip()[-300:]}"
        return
    try:
        yield env
    finally:
        subprocess.run([control], input="quit\n", env=full, capture_output=True, text=True)


def _round_seconds(out: Path) -> list[float]:
    """Each round's seconds of a finished job (rounds.csv's ``seconds``): summed, its time less start-up."""
    return [float(r["seconds"] or 0.0) for r in jobfolder.round_records(out)]


def _throughput_row(n: int, threads: int, wall: float, outs: list[Path], errors: list[str], full_rounds: int) -> dict[str, Any]:
    """One row: jobs/hour of the shortened jobs, and extrapolated to ``full_rounds``: start-up + the first round + the
    other rounds x the mean seconds of a later round (of round 0 when the jobs ran one), every job of the N sharing
    the device. Round 0 is apart because it pays for first calls (kernels chosen, caches filled)."""
    done = [o for o in outs if (o / "metrics.json").is_file()]
    info = [_read_job(o) for o in done]
    row: dict[str, Any] = {
        "jobs": n, "threads_per_job": threads, "wall_s": round(wall, 3), "completed": len(done),
        "rounds_each": sorted({d["rounds"] for d in info}),
        "jobs_per_hour": round(len(done) / wall * 3600, 2),
        "rounds_per_hour": round(sum(d["rounds"] for d in info) / wall * 3600, 1),
        **({"errors": errors} if errors else {}),
    }
    if done:
        seconds = [_round_seconds(o) for o in done]
        first_s = sum(s[0] for s in seconds) / len(seconds)
        round_s = sum(sum(s[1:]) / (len(s) - 1) if len(s) > 1 else s[0] for s in seconds) / len(seconds)
        startup_s = max(0.0, wall - max(sum(s) for s in seconds))
        full_job_s = startup_s + first_s + (full_rounds - 1) * round_s
        row.update(first_round_s=round(first_s, 4), round_s=round(round_s, 4), startup_s=round(startup_s, 3),
                   full_rounds=full_rounds, full_job_s=round(full_job_s, 2),
                   full_jobs_per_hour=round(len(done) * 3600 / full_job_s, 1))
    return row


def section_throughput(args: argparse.Namespace, device: torch.device, report: Report, tmp: Path) -> dict[str, Any]:
    """N copies of the job at once on the device: jobs/hour for each N (a row per N, saved as it comes), shortened to
    ``--throughput-rounds`` and extrapolated to the config's rounds; with ``--mps`` each N again under NVIDIA's
    Multi-Process Service (kernels of the N processes run at once instead of in turns)."""
    config, data = job_config(args, tmp, args.throughput_rounds)
    full_rounds = resolve_job(load_config(job_config(args, tmp, None)[0]), Job(*JOB, 0)).rounds
    cores = os.cpu_count() or 1
    out: dict[str, Any] = {"job": "/".join(JOB), "rounds": args.throughput_rounds, "data": data, "rows": []}
    report.data["throughput"] = out
    rows = out["rows"]
    modes = ["time-slicing"] + (["mps"] if args.mps else [])
    for mode in modes:
        with (mps_daemon(tmp / "mps") if mode == "mps" and device.type == "cuda" else contextlib.nullcontext(
                {} if mode != "mps" else "MPS needs a CUDA device")) as mps_env:
            for n in args.slots:
                if isinstance(mps_env, str):
                    rows.append({"jobs": n, "sharing": mode, "skipped": mps_env})
                    continue
                if not report.time_left():
                    rows.append({"jobs": n, "sharing": mode, "skipped": "time budget"})
                    continue
                threads = 1 if device.type == "cpu" else max(1, min(4, cores // n))
                outs = [tmp / f"tp-{mode}-{n}" / Job(*JOB, k).path for k in range(n)]  # job folders as laid out
                logs = [tmp / f"tp-{mode}-{n}-seed{k}.log" for k in range(n)]
                t0 = time.perf_counter()
                procs = []
                for k, (o, log) in enumerate(zip(outs, logs)):
                    with log.open("w") as fh:
                        procs.append(subprocess.Popen(_train_cmd(config, o, k, device.type, threads, args.capture), env={**_env(), **mps_env},
                                                      cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT))
                codes = [p.wait() for p in procs]
                wall = time.perf_counter() - t0
                errors = [log.read_text()[-500:] for code, log in zip(codes, logs) if code != 0]
                rows.append({"sharing": mode, "capture": args.capture, **_throughput_row(n, threads, wall, outs, errors, full_rounds)})
                base = next((r.get("jobs_per_hour") for r in rows if r["jobs"] == 1 and r["sharing"] == mode), None)
                for r in rows:
                    if "jobs_per_hour" in r and r["sharing"] == mode:
                        r["speedup_vs_1"] = round(r["jobs_per_hour"] / base, 3) if base else None
                report.save()
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the chosen sections; print (and with --out write, after every measurement) one JSON; exit 1 on a failed check."""
    args = _parse(argv)
    device = torch.device(args.device)
    if device.type == "cpu":
        torch.set_num_threads(1)
    report = Report(args, {
        "suite": "benchmarks/gpu_suite.py", "smoke": args.smoke,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_name(),
        "device_type": device.type, "torch": torch.__version__, "threads": torch.get_num_threads(),
        "precision": args.precision, "budget_s": None if math.isinf(args.budget_s) else args.budget_s,
        "loadavg_start": [round(x, 2) for x in os.getloadavg()],
    })
    sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    unknown = set(sections) - set(SECTIONS)
    if unknown:
        raise SystemExit(f"unknown section(s) {sorted(unknown)}; known: {', '.join(SECTIONS)}")
    if device.type == "cuda" and "estimated" not in sections:  # what the cost table only estimates, measured first
        sections.insert(0, "estimated")
    runners: dict[str, Callable[[Path], dict[str, Any]]] = {
        "estimated": lambda tmp: section_estimated(args, device, report),
        "memory": lambda tmp: section_memory(args, device, report),
        "round": lambda tmp: section_round(args, device, report),
        "centralised": lambda tmp: section_centralised(args, device, report),
        "job": lambda tmp: section_job(args, device, report, tmp),
        "throughput": lambda tmp: section_throughput(args, device, report, tmp),
    }
    with tempfile.TemporaryDirectory(prefix="gpu_suite-") as tmp_name:
        for name in sections:
            if not report.time_left():
                report.data[name] = {"skipped": "time budget"}
                report.save()
                continue
            print(f"gpu_suite: {name} ...", file=sys.stderr, flush=True)
            t0 = time.perf_counter()
            try:
                report.data[name] = runners[name](Path(tmp_name))
            except Exception as err:  # noqa: BLE001 - one section's failure is recorded, the others still run
                report.data[name] = {**report.data.get(name, {}), "error": _error(err)}
            report.data[name]["section_s"] = round(time.perf_counter() - t0, 2)
            report.save()
    failed = [c for c in report.data.get("round", {}).get("checks", []) if c.get("agree") is False]
    report.data["failed_checks"] = [f"{c['model']}/{c['loss']}" for c in failed]
    report.save()
    print(json.dumps(report.data, indent=1))
    if failed:
        raise SystemExit(1)
    return report.data


if __name__ == "__main__":
    main()
