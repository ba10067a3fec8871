"""What a study costs before it runs: every job's SGD steps and forward passes, times a calibration.

Work of one job (``job_work``), counted from the configuration alone (no data files needed):

* **client SGD steps**: every round, every selected client j trains ``local_epochs * ceil(n_j / B)``
  steps (B = ``batch_size``); a centralised job trains ``epochs * ceil(n / B)`` on the pooled data.
  The sizes n_j come from the job's own partition code run on synthetic labels with enough samples
  of every class: the schemes ``monitor``, ``imbalance`` and ``mismatch`` choose the classes a client
  holds before they look at labels, so these sizes are the real ones. The ``writers`` scheme
  (FEMNIST) needs the writers' data; it is estimated as ``writers_per_client`` x
  ``samples_per_writer`` with the minority classes' share thinned to 1/gamma (an assumption).
  Clients are selected as ``run_fedavg`` selects them (``select_clients``), round by round;
* **monitor SGD steps** (Ratio-Loss jobs and ``monitor.record``): every round Q per-class copies,
  each ``local_epochs * ceil(aux_per_class / B)`` steps (centralised jobs: one epoch);
* **forward samples**: the test set at every evaluation (every ``eval_every`` rounds and the last
  round, whose evaluation ``run_job``'s final metrics read) and, with ``empirical``, the selected clients' data.

``calibrate`` times a few SGD steps and forward passes of every model/input shape the study uses,
on synthetic data of that shape on the present device and training path, plus the start-up of a
job process. On a GPU it times every batch size the study uses, with ``copies`` copies trained
together on the vectorised path; on a CPU it times a small probe batch and scales linearly to B.
``estimate`` multiplies work by the calibration. Not counted: partial last batches (counted as
full), the monitor's estimators, checkpoints and data loading.
"""

from __future__ import annotations

import functools
import json
import math
import os
import platform
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fedbalance.jobs.config import jobs, partition_key, resolve_jobs, twins
from fedbalance.data.partition import partition_args
from fedbalance.common.jobspec import JobSpec, as_spec
from fedbalance.common.records import Job

CALIBRATION_VERSION = 1
# FEMNIST letters per writer: the authors' FEMNIST-shape client, 20 writers x ~50 samples = ~1,000
# samples (the timing of the released loop, docs/performance.md); real LEAF writers vary widely.
SAMPLES_PER_WRITER = 50

def _test_sizes() -> dict[str, int]:
    """Test-set sizes of the registered sources: the real structures' (``fedbalance.data.structures``); femnist: the
    EMNIST-letters test split of the authors' setting (LEAF's test split depends on how its writers were sampled)."""
    from fedbalance.data.structures import structure

    sizes = {name: sum(structure(name).test) for name in ("mnist", "mnist5k", "cifar10", "fer2013")}
    return {**sizes, "femnist": 20_800}


TEST_SAMPLES = _test_sizes()


class CostError(ValueError):
    """The cost cannot be computed (unknown source, a calibration missing a shape); the message says why."""


@dataclass(frozen=True, order=True)
class Shape:
    """What one SGD step costs depends on: model, input shape, classes, batch size and training path."""

    model: str
    channels: int
    height: int
    width: int
    classes: int
    batch_size: int
    path: str

    @property
    def model_key(self) -> str:
        """Model, input and path, without the batch size (forward passes and CPU probes)."""
        return f"{self.model}/{self.channels}x{self.height}x{self.width}/q{self.classes}/{self.path}"

    @property
    def key(self) -> str:
        """``model_key`` plus the batch size."""
        return f"{self.model_key}/b{self.batch_size}"


@dataclass(frozen=True)
class JobWork:
    """Counted work of one job."""

    job: Job
    shape: Shape
    client_steps: int
    monitor_steps: int
    forward_samples: int

    @property
    def sgd_steps(self) -> int:
        """Client plus monitor SGD steps."""
        return self.client_steps + self.monitor_steps


def resolve_path(path: str, device_type: str) -> str:
    """The training path a job runs: ``auto`` is vectorised on CUDA, sequential on the CPU (as ``fedbalance.jobs.run``)."""
    if path == "auto":
        return "vectorised" if device_type == "cuda" else "sequential"
    return path


def _synthetic_labels(num_classes: int, per_class: int) -> np.ndarray:
    return np.repeat(np.arange(num_classes, dtype=np.int64), per_class)


def client_sizes(spec: Mapping[str, Any] | JobSpec, num_classes: int, samples_per_writer: int = SAMPLES_PER_WRITER) -> dict[str, list[int]]:
    """Sample count of every client of the job's partitions ("main", and "balanced" with ``switch_round``)."""
    from fedbalance.data.partition import spec_partitions

    spec = as_spec(spec)
    scheme, kwargs = partition_args(spec)
    balanced = spec.switch_round is not None
    if scheme == "writers":
        q, minority = num_classes, len(kwargs.get("minority_classes", ()))
        full = int(kwargs["writers_per_client"]) * samples_per_writer

        def size(gamma: float) -> int:
            return max(1, round(full * (1 - minority / q * (1 - 1 / float(gamma)))))

        out = {"main": [size(kwargs.get("gamma", 1))] * int(kwargs["num_clients"])}
        if balanced:
            out["balanced"] = [size(1)] * int(kwargs["num_clients"])
        return out
    per_class = int(kwargs["samples_per_class"] if scheme == "monitor" else kwargs["majority_samples"])
    labels = _synthetic_labels(num_classes, per_class * int(kwargs["num_clients"]))
    parts = spec_partitions(spec, labels, None, num_classes=num_classes)
    return {name: [len(c) for c in p.clients] for name, p in parts.items()}


def _evaluations(rounds: int, eval_every: int, start: int = 0) -> int:
    """Evaluations of a run from round ``start``: every ``eval_every`` rounds and the last round (run_job's final
    metrics read the last round's)."""
    return sum(1 for t in range(start, rounds) if (t + 1) % eval_every == 0 or t == rounds - 1)


@functools.lru_cache(maxsize=65536)
def _chosen(selection: str, num_clients: int, k: int, seed: int, round_index: int) -> tuple[int, ...]:
    """``select_clients`` (cached: jobs that differ only in loss or setting share their selections)."""
    from fedbalance.engine.fl import select_clients

    return tuple(int(j) for j in select_clients(selection, num_clients, k, seed, round_index))


def job_shape(spec: Mapping[str, Any] | JobSpec, device_type: str = "cpu") -> Shape:
    """The model, input, classes, batch size and training path of one job on ``device_type`` (no data needed)."""
    from fedbalance.data.datasets import dataset_info

    spec = as_spec(spec)
    info = dataset_info(spec.source, **dict(spec.options))
    h, w = info["image_size"]
    return Shape(spec.model, int(info["in_channels"]), int(h), int(w), int(info["num_classes"]), spec.batch_size,
                 resolve_path(spec.path, device_type))


def study_shapes(cfg: Mapping[str, Any], device_type: str = "cpu") -> set[Shape]:
    """The shapes of every job of the study (``job_shape``), without counting its work: one job per experiment,
    dataset and setting (the losses of a setting share its shape)."""
    seen: dict[tuple[str, str, str], Job] = {}
    for job in jobs(cfg):
        seen.setdefault((job.experiment, job.dataset, job.setting), job)
    return {job_shape(spec, device_type) for spec in resolve_jobs(cfg, list(seen.values())).values()}


def job_work(
    spec: Mapping[str, Any] | JobSpec,
    *,
    device_type: str = "cpu",
    samples_per_writer: int = SAMPLES_PER_WRITER,
    sizes: Mapping[str, Sequence[int]] | None = None,
    start_round: int = 0,
    test_samples: int | None = None,
) -> JobWork:
    """Count the SGD steps and forward samples of one job (its ``resolve_job`` spec; ``sizes``: its ``client_sizes``)
    from round ``start_round`` on (a branched job's first rounds are its source's: ``reuse.branches``);
    ``test_samples``: the test split's size where it is known (default ``TEST_SAMPLES`` of the source); a job with
    ``eval_samples`` evaluates on at most that many."""
    from fedbalance.engine.centralised import num_epochs
    from fedbalance.engine.fl import needs_monitor

    spec = as_spec(spec)
    job, source = spec.job, spec.source
    if test_samples is None and source not in TEST_SAMPLES:
        raise CostError(f"no test-set size known for source {source!r}; known: {sorted(TEST_SAMPLES)}")
    n_test = test_samples if test_samples is not None else TEST_SAMPLES[source]
    if spec.eval_samples is not None:  # about eval_samples (a class's rounding adds at most one a class)
        n_test = min(n_test, spec.eval_samples)
    shape = job_shape(spec, device_type)
    q, b = shape.classes, shape.batch_size
    sizes = sizes if sizes is not None else client_sizes(spec, q, samples_per_writer)
    switch = spec.switch_round
    monitor = needs_monitor(spec)
    aux_steps = math.ceil(spec.monitor.required("aux_per_class") / b) if monitor else 0
    empirical = spec.empirical
    eval_every = spec.eval_every
    client = mon = fwd = 0
    if spec.mode == "centralised":
        epochs = num_epochs(spec)
        for t in range(epochs):
            n = sum(sizes["balanced" if switch is not None and t >= switch else "main"])
            client += math.ceil(n / b)
            mon += q * aux_steps if monitor else 0
            fwd += n if empirical else 0
        fwd += _evaluations(epochs, eval_every) * n_test
    else:
        rounds, k, e = spec.rounds, spec.required("clients_per_round"), spec.required("local_epochs")
        for t in range(start_round, rounds):
            part = sizes["balanced" if switch is not None and t >= switch else "main"]
            chosen = _chosen(spec.required("selection"), len(sizes["main"]), k, spec.seed, 0 if spec.selection == "fixed" else t)
            client += sum(e * math.ceil(part[j] / b) for j in chosen)
            mon += q * e * aux_steps if monitor else 0
            fwd += sum(part[j] for j in chosen) if empirical else 0
        fwd += _evaluations(rounds, eval_every, start_round) * n_test
    return JobWork(job, shape, client, mon, fwd)


def study_work(
    cfg: Mapping[str, Any],
    experiments: Sequence[str] | None = None,
    *,
    device_type: str = "cpu",
    samples_per_writer: int = SAMPLES_PER_WRITER,
) -> list[JobWork]:
    """``job_work`` of every job the study trains (or of ``experiments``); partitions are counted once each.

    A twin job (``fedbalance.jobs.config.twins``) is written from its source, not trained: it costs nothing. A derived
    job (``fedbalance.jobs.reuse.derived``) runs only its monitor on its source's trajectory: not counted either. A
    branched job (``fedbalance.jobs.reuse.branches``) counts the rounds after those it shares with its source.
    """
    from fedbalance.data.datasets import dataset_info
    from fedbalance.jobs.reuse import branches, derived

    chosen = list(experiments) if experiments is not None else None
    twin_of = {**twins(cfg, chosen), **derived(cfg, chosen)}
    cache: dict[str, dict[str, list[int]]] = {}
    out = []
    trained = [j for j in jobs(cfg, chosen) if j not in twin_of]
    branched = branches(cfg, chosen, skip=twin_of)
    for job, spec in resolve_jobs(cfg, trained).items():
        q = int(dataset_info(spec.source, **dict(spec.options))["num_classes"])
        key = partition_key(spec) + f"/seed{spec.seed}"
        if key not in cache:
            cache[key] = client_sizes(spec, q, samples_per_writer)
        start = branched[job][1] if job in branched else 0
        out.append(job_work(spec, device_type=device_type, samples_per_writer=samples_per_writer, sizes=cache[key],
                            start_round=start))
    return out


@dataclass
class Calibration:
    """Seconds per SGD step and per forward sample on one device; JSON-serialisable.

    ``steps[shape.key]``: seconds per SGD step of one copy at that batch size (GPU calibration);
    ``probes[shape.model_key]``: {"batch": b, "step_s": seconds per step at b, "forward_s": seconds
    per forward sample} (every calibration); a step at batch B without an exact entry costs
    ``step_s * B / b``. ``startup_s``: start-up of one job process (imports), added per job. ``estimated``: the probes
    not measured on the device but estimated from a measured one (``with_estimates``): model_key -> how.
    """

    device: str
    device_type: str
    threads: int
    copies: int
    startup_s: float
    probes: dict[str, dict[str, float]] = field(default_factory=dict)
    steps: dict[str, float] = field(default_factory=dict)
    torch: str = ""
    version: int = CALIBRATION_VERSION
    source: str = ""  # where the figures come from, when not measured by ``calibrate`` here and now
    estimated: dict[str, str] = field(default_factory=dict)
    factors: dict[str, float] = field(default_factory=dict)

    def factor(self, shape: Shape) -> float:
        """The correction of ``shape``'s model from real runs (``factors``: measured / predicted seconds of the
        real-data jobs, ``benchmarks/real_shapes.py``); 1 where none was measured."""
        return float(self.factors.get(shape.model_key, 1.0))

    def step_seconds(self, shape: Shape) -> float:
        """Seconds per SGD step of one copy of ``shape`` (times its real-run ``factor``)."""
        if shape.key in self.steps:
            return self.steps[shape.key] * self.factor(shape)
        probe = self._probe(shape)
        return probe["step_s"] * shape.batch_size / probe["batch"] * self.factor(shape)

    def forward_seconds(self, shape: Shape) -> float:
        """Seconds per forward sample (evaluation) of ``shape``'s model (times its real-run ``factor``)."""
        return self._probe(shape)["forward_s"] * self.factor(shape)

    def _probe(self, shape: Shape) -> dict[str, float]:
        if shape.model_key not in self.probes:
            raise CostError(
                f"the calibration has no entry for {shape.model_key} (it has {sorted(self.probes)}); "
                "run 'fedbalance cost --calibrate' on the device that will train"
            )
        return self.probes[shape.model_key]

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict; ``from_json`` inverts it."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Calibration:
        """Read a dict written by ``to_json`` (CostError when it is not one)."""
        if not isinstance(data, Mapping):
            raise CostError("not a calibration: the top level must be an object")
        if data.get("version") != CALIBRATION_VERSION:
            raise CostError(f"calibration version {data.get('version')!r}, expected {CALIBRATION_VERSION}")
        try:
            cal = cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})
        except TypeError as exc:
            raise CostError(f"not a calibration: {exc}") from exc
        cal.check()
        return cal

    def check(self) -> None:
        """CostError naming the key unless every field has its shape and every time is a finite number >= 0."""
        def seconds(value: Any, key: str, positive: bool = False) -> None:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0 \
                    or (positive and value <= 0):
                raise CostError(f"calibration {key}: {value!r} is not a number of seconds {'> 0' if positive else '>= 0'}")

        for key in ("device", "device_type", "torch", "source"):
            if not isinstance(getattr(self, key), str):
                raise CostError(f"calibration {key}: {getattr(self, key)!r} is not a string")
        for key in ("threads", "copies"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise CostError(f"calibration {key}: {value!r} is not a whole number >= 1")
        seconds(self.startup_s, "startup_s")
        if not isinstance(self.probes, dict) or not isinstance(self.steps, dict):
            raise CostError("calibration probes and steps: must be objects")
        for name, probe in self.probes.items():
            if not isinstance(probe, dict) or set(probe) != {"batch", "step_s", "forward_s"}:
                raise CostError(f"calibration probes.{name}: must hold batch, step_s and forward_s, got {probe!r}")
            if isinstance(probe["batch"], bool) or not isinstance(probe["batch"], int) or probe["batch"] < 1:
                raise CostError(f"calibration probes.{name}.batch: {probe['batch']!r} is not a whole number >= 1")
            seconds(probe["step_s"], f"probes.{name}.step_s", positive=True)
            seconds(probe["forward_s"], f"probes.{name}.forward_s")
        for name, value in self.steps.items():
            seconds(value, f"steps.{name}", positive=True)
        if not isinstance(self.estimated, dict) or not all(isinstance(v, str) for v in self.estimated.values()):
            raise CostError("calibration estimated: must be an object of model shape -> how it was estimated")
        for name in self.estimated:
            if name not in self.probes:
                raise CostError(f"calibration estimated.{name}: no probe of that shape")
        if not isinstance(self.factors, dict):
            raise CostError("calibration factors: must be an object of model shape -> measured / predicted")
        for name, value in self.factors.items():
            seconds(value, f"factors.{name}", positive=True)

    def basis(self, shape: Shape) -> str:
        """Where the seconds of ``shape`` come from: "measured" (at its batch size), "measured at batch b" (scaled
        linearly to its own), or "estimated: ..." (``estimated``)."""
        corrected = (f", x{self.factor(shape):.3g} from real runs (benchmarks/real_shapes.py)"
                     if shape.model_key in self.factors else "")
        if shape.model_key in self.estimated:
            return f"estimated ({self.estimated[shape.model_key]}){corrected}"
        if shape.key in self.steps:
            return f"measured{corrected}"
        self._probe(shape)
        return f"measured at batch {self.probes[shape.model_key]['batch']}, scaled linearly{corrected}"


@functools.lru_cache(maxsize=None)
def model_flops(model: str, channels: int, height: int, width: int, classes: int) -> int:
    """Floating-point operations of one sample's forward pass of ``model`` (eval mode), counted by
    ``torch.utils.flop_counter.FlopCounterMode`` (its matrix products and convolutions, 2 per multiply-add) on the
    meta device (shapes only: nothing is allocated or computed)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from fedbalance.methods.models import build_model

    counter = FlopCounterMode(display=False)
    with torch.device("meta"):
        net = build_model(model, channels, classes, (height, width)).eval()
        with torch.no_grad(), counter:
            net(torch.zeros(1, channels, height, width))
    return int(counter.get_total_flops())


def _flops(model_key: str) -> int:
    """``model_flops`` of a probe's model key ("resnet18/1x28x28/q26/vectorised")."""
    model, size, q, _ = model_key.split("/")
    c, h, w = (int(x) for x in size.split("x"))
    return model_flops(model, c, h, w, int(q[1:]))


def with_estimates(cal: Calibration, shapes: Iterable[Shape]) -> Calibration:
    """``cal`` with a probe for every model and input of ``shapes`` it has not measured, estimated from a measured
    probe on the same training path: the same model where it has one, else the one nearest in forward FLOPs
    (``model_flops``), its step and forward seconds scaled by the two models' FLOPs ratio (an assumption: time in
    proportion to arithmetic, which holds for a device kept busy and overstates small models on a large GPU).
    ``estimated`` records each, with its source and factor; CostError when no probe of that path was measured."""
    import math as _math

    out = Calibration(**{**cal.to_json(), "probes": dict(cal.probes), "steps": dict(cal.steps),
                         "estimated": dict(cal.estimated)})
    for key in sorted({s.model_key for s in shapes} - set(cal.probes)):
        model, *_, path = key.split("/")
        measured = [k for k in cal.probes if k.endswith(f"/{path}") and k not in cal.estimated]
        if not measured:
            raise CostError(f"the calibration has no measured shape on the {path} path to estimate {key} from "
                            f"(it has {sorted(cal.probes)}); run 'fedbalance cost --calibrate' on the device that will train")
        target = _flops(key)
        same = [k for k in measured if k.split("/")[0] == model]
        ref = min(same or measured, key=lambda k: abs(_math.log(_flops(k) / target)))
        ratio = target / _flops(ref)
        probe = cal.probes[ref]
        out.probes[key] = {"batch": probe["batch"], "step_s": probe["step_s"] * ratio,
                           "forward_s": probe["forward_s"] * ratio}
        out.estimated[key] = (f"FLOPs-scaled from {ref}: {target / 1e6:.1f} vs {_flops(ref) / 1e6:.1f} MFLOPs a "
                              f"sample, x{ratio:.3g}")
    out.check()
    return out


def load_calibration(path: str | Path) -> Calibration:
    """Read a calibration JSON file."""
    path = Path(path)
    try:
        return Calibration.from_json(json.loads(path.read_text()))
    except CostError as exc:
        raise CostError(f"{path}: {exc}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CostError(f"cannot read calibration {path}: {exc}") from exc


SHIPPED = {"cuda": "calibrations/h200.json"}
CPU_FACTORS = "calibrations/cpu_factors.json"
"""Per model shape, a CPU calibration's seconds against the real-data jobs' (measured / predicted,
``benchmarks/real_shapes.py --write-factors``): ``calibrate`` on a CPU applies them to the shapes it measures."""


def cpu_factors() -> dict[str, float]:
    """The shipped CPU factors (``CPU_FACTORS``), model shape -> measured / predicted."""
    from importlib import resources

    return dict(json.loads(resources.files("fedbalance").joinpath(CPU_FACTORS).read_text())["factors"])
"""Device type -> the calibration shipped with the package (``shipped_calibration``) for a machine without one."""
FORWARD_SHARE = 1 / 3
"""A forward sample's share of a training step's per-sample time, where only steps were measured (an assumption:
forward is one of a step's three passes; evaluation is a few per cent of a paper job either way)."""


def shipped_calibration(device_type: str) -> Calibration:
    """The calibration shipped for ``device_type`` (built by ``calibration_from_suite`` from measured figures)."""
    from importlib import resources

    if device_type not in SHIPPED:
        raise CostError(f"no calibration ships for device {device_type!r} (only {sorted(SHIPPED)}); calibrate on it")
    return Calibration.from_json(json.loads(resources.files("fedbalance").joinpath(SHIPPED[device_type]).read_text()))


def calibration_from_suite(suite: Mapping[str, Any], startup_s: float, source: str) -> Calibration:
    """A calibration from ``benchmarks/gpu_suite.py``'s ``round`` section: per (model, input, path) the seconds per
    copy-step (``clients_s / client_steps``, the K clients trained at once on the vectorised path), forward samples
    at ``FORWARD_SHARE`` of a step's per-sample time; ``startup_s`` measured apart (jobs' provenance)."""
    rnd = suite["round"]
    sizes = rnd["sizes"]
    probes: dict[str, dict[str, float]] = {}
    steps: dict[str, float] = {}
    for row in rnd["rows"]:
        if "skipped" in row or row["loss"] != "ce":
            continue
        shape = Shape(row["model"], 1, *row["image"], row["classes"], row["batch_size"], row["path"])
        step_s = round(row["clients_s"] / row["client_steps"], 8)
        steps[shape.key] = step_s
        probes[shape.model_key] = {"batch": row["batch_size"], "step_s": step_s,
                                   "forward_s": round(step_s / row["batch_size"] * FORWARD_SHARE, 10)}
    cal = Calibration(device=suite["device"], device_type=suite["device_type"], threads=1, copies=sizes["clients"],
                      startup_s=startup_s, probes=probes, steps=steps, torch=suite["torch"], source=source)
    cal.check()
    return cal


def save_calibration(cal: Calibration, path: str | Path) -> None:
    """Write a calibration JSON file atomically."""
    from fedbalance.atomic import atomic_write

    atomic_write(path, lambda fh: json.dump(cal.to_json(), fh, indent=1, sort_keys=True))


def measure_startup(repeats: int = 1) -> float:
    """Seconds for a fresh Python to import what a training job imports, best of ``repeats``.

    ``fedbalance.jobs.run`` before the first round, and scikit-learn's metrics at the first evaluation (AUC).
    """
    best = math.inf
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(Path(__file__).parents[2]), os.environ.get("PYTHONPATH")) if p)}
    for _ in range(repeats):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import fedbalance.jobs.run, sklearn.metrics"], check=True, env=env)
        best = min(best, time.perf_counter() - t0)
    return best


def _time_copies(model: Any, shape: Shape, batch: int, copies: int, steps: int, device: Any) -> float:
    """Seconds per copy-step of ``train_copies`` (``copies`` copies, ``steps`` steps each) on synthetic data."""
    import torch
    from torch import nn

    from fedbalance.training.train import SGDConfig, train_copies

    g = torch.Generator().manual_seed(0)

    def run(n_steps: int) -> float:
        n = n_steps * batch
        sets = [
            (
                torch.randint(0, 256, (n, shape.channels, shape.height, shape.width), generator=g, dtype=torch.uint8).to(device),
                torch.randint(0, shape.classes, (n,), generator=g).to(device),
            )
            for _ in range(copies)
        ]
        gens = [torch.Generator().manual_seed(k) for k in range(copies)]
        cfg = SGDConfig(batch_size=batch, epochs=1)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        train_copies(model, sets, nn.CrossEntropyLoss(), cfg, gens, path=shape.path)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return time.perf_counter() - t0

    run(1)
    return run(steps) / (copies * steps)


def _time_forward(model: Any, shape: Shape, batch: int, device: Any) -> float:
    """Seconds per sample of an eval-mode forward pass (as ``evaluate``), on synthetic data."""
    import torch

    from fedbalance.training.train import to_float

    x = torch.randint(0, 256, (batch, shape.channels, shape.height, shape.width), dtype=torch.uint8, device=device)
    model.eval()
    with torch.no_grad():
        model(to_float(x[:2]))
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        model(to_float(x))
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    model.train()
    return (time.perf_counter() - t0) / batch


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo``) and core count."""
    name = platform.processor() or platform.machine() or "cpu"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{name}, {os.cpu_count()} cores"


def calibrate(
    shapes: Iterable[Shape],
    device: str = "cpu",
    *,
    threads: int | None = None,
    probe_batch: int = 4,
    steps: int | None = None,
    copies: int = 20,
    startup: bool = True,
    exact_below_s: float = 1.0,
    real_factors: bool = True,
) -> Calibration:
    """Time the study's shapes on ``device`` (synthetic data; a few steps each); see the module docstring.

    CPU: one probe per model/input (``probe_batch`` samples per step, ``steps`` (default 1) timed steps
    after a warm-up step, one copy: the sequential path's cost is linear in copies), and the study's own batch
    sizes where the probe predicts a step under ``exact_below_s`` (small models, where a step's fixed
    cost makes linear scaling wrong). CUDA: every batch size (``steps`` default 3), ``copies`` copies
    at once on the vectorised path (one on the sequential path). On a CPU the shapes with a shipped real-run
    factor (``CPU_FACTORS``) carry it, unless ``real_factors`` is false (``benchmarks/real_shapes.py`` measures them).
    """
    import torch

    from fedbalance.methods.models import build_model, device_layout

    dev = torch.device(device)
    steps = steps if steps is not None else (3 if dev.type == "cuda" else 1)
    if threads is not None:
        torch.set_num_threads(threads)
    shapes = sorted(set(shapes))
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else cpu_name()
    cal = Calibration(
        device=name, device_type=dev.type, threads=torch.get_num_threads(), copies=copies if dev.type == "cuda" else 1,
        startup_s=round(measure_startup(), 4) if startup else 0.0, torch=torch.__version__,
    )
    for shape in shapes:
        n_copies = copies if dev.type == "cuda" and shape.path == "vectorised" else 1
        torch.manual_seed(0)
        model = device_layout(build_model(shape.model, shape.channels, shape.classes, (shape.height, shape.width)).to(dev), dev)
        if shape.model_key not in cal.probes:
            b = min(probe_batch, shape.batch_size) if dev.type == "cpu" else shape.batch_size
            cal.probes[shape.model_key] = {
                "batch": b,
                "step_s": _time_copies(model, shape, b, n_copies, steps, dev),
                "forward_s": _time_forward(model, shape, 2 * b if dev.type == "cpu" else 1024, dev),
            }
        probe = cal.probes[shape.model_key]
        if dev.type == "cuda" or probe["step_s"] * shape.batch_size / probe["batch"] < exact_below_s:
            cal.steps[shape.key] = _time_copies(model, shape, shape.batch_size, n_copies, steps, dev)
    if dev.type == "cpu" and real_factors:
        shipped = cpu_factors()
        cal.factors = {k: shipped[k] for k in cal.probes if k in shipped}
    return cal


@dataclass(frozen=True)
class CostRow:
    """One experiment family (or one model shape, or the total): jobs, work, estimated device-hours and where the
    seconds come from (``basis``: "measured", "measured at batch b, scaled linearly", "estimated (...)", or for a row
    of several shapes each basis with its share of the hours)."""

    experiment: str
    jobs: int
    sgd_steps: int
    forward_samples: int
    hours: float
    basis: str = ""


def job_seconds(work: JobWork, cal: Calibration) -> float:
    """Estimated device seconds of one job."""
    return work.sgd_steps * cal.step_seconds(work.shape) + work.forward_samples * cal.forward_seconds(work.shape) + cal.startup_s


def _kind(basis: str) -> str:
    """A basis in one word: "measured", "batch-scaled" or "estimated"."""
    return "estimated" if basis.startswith("estimated") else "measured" if basis == "measured" else "batch-scaled"


def _row(name: str, ws: Sequence[JobWork], cal: Calibration, basis: str | None = None) -> CostRow:
    seconds = [job_seconds(w, cal) for w in ws]
    if basis is None:  # each kind of basis with its share of the row's hours
        share: dict[str, float] = {}
        for w, sec in zip(ws, seconds):
            share[_kind(cal.basis(w.shape))] = share.get(_kind(cal.basis(w.shape)), 0.0) + sec
        total = sum(share.values()) or 1.0
        basis = next(iter(share)) if len(share) == 1 else ", ".join(
            f"{k} {100 * v / total:.0f} %" if v / total >= 0.005 else f"{k} <1 %"
            for k, v in sorted(share.items(), key=lambda kv: -kv[1]))
    return CostRow(name, len(ws), sum(w.sgd_steps for w in ws), sum(w.forward_samples for w in ws), sum(seconds) / 3600,
                   basis)


def estimate(works: Sequence[JobWork], cal: Calibration, order: Sequence[str] = ()) -> tuple[list[CostRow], CostRow]:
    """Rows per experiment (those in ``order`` first, in that order) and their total (the sum of the rows)."""
    groups: dict[str, list[JobWork]] = {name: [] for name in order}
    for w in works:
        groups.setdefault(w.job.experiment, []).append(w)
    rows = [_row(name, ws, cal) for name, ws in groups.items() if ws]
    return rows, _row("total", list(works), cal)


def shape_rows(works: Sequence[JobWork], cal: Calibration) -> list[CostRow]:
    """One row per model shape the study trains (model, input, classes, path, batch): its jobs, work, hours and
    ``Calibration.basis``."""
    groups: dict[Shape, list[JobWork]] = {}
    for w in works:
        groups.setdefault(w.shape, []).append(w)
    return [_row(shape.key, groups[shape], cal, cal.basis(shape)) for shape in sorted(groups)]


def _table(head: Sequence[str], body: Sequence[Sequence[str]], total: int | None = None) -> list[str]:
    """Columns padded to their widest cell (the first left, the last left, the others right); a rule under the head
    and before the last ``total`` line."""
    widths = [max(len(x[i]) for x in [head, *body]) for i in range(len(head))]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.ljust(widths[i]) if i in (0, len(cells) - 1) else c.rjust(widths[i])
                         for i, c in enumerate(cells)).rstrip()

    rule = "  ".join("-" * wd for wd in widths)
    lines = [line(head), rule, *(line(b) for b in body)]
    if total is not None:
        lines.insert(len(lines) - total, rule)
    return lines


def format_table(rows: Sequence[CostRow], total: CostRow, cal: Calibration,
                 shapes: Sequence[CostRow] = ()) -> str:
    """The cost table as printed by ``fedbalance cost``: a row per experiment family and the total, each saying where
    its seconds come from (``CostRow.basis``), then a row per model shape with its basis (``shape_rows``)."""
    head = ("experiment", "jobs", "SGD steps", "forward samples", "device-hours", "seconds from")
    body = [(r.experiment, f"{r.jobs:,}", f"{r.sgd_steps:,}", f"{r.forward_samples:,}", f"{r.hours:.3f}", r.basis)
            for r in [*rows, total]]
    out = _table(head, body, total=1)
    if shapes:
        out += ["", *_table(("model/input/classes/path/batch", "jobs", "SGD steps", "forward samples", "device-hours",
                             "seconds from"),
                            [(r.experiment, f"{r.jobs:,}", f"{r.sgd_steps:,}", f"{r.forward_samples:,}",
                              f"{r.hours:.3f}", r.basis) for r in shapes])]
    paths = sorted({k.split("/")[3] for k in cal.probes})
    out.append(
        f"device: {cal.device} ({cal.device_type}, {cal.threads} thread(s), path {', '.join(paths)}"
        f"{f', {cal.copies} copies at once' if cal.copies > 1 else ''}); start-up {cal.startup_s:.2f} s per job; "
        "one job at a time (N jobs sharing the device divide wall time by at most N)"
        + (f"\ncalibration: {cal.source}" if cal.source else "")
        + ("\nestimated: a shape the calibration did not measure takes a measured one's seconds scaled by the ratio of "
           "their forward FLOPs (torch.utils.flop_counter; fedbalance.jobs.cost.with_estimates); measure it with "
           "'fedbalance cost --calibrate' on the device, or benchmarks/gpu_suite.py's estimated section"
           if cal.estimated else "")
    )
    return "\n".join(out)
