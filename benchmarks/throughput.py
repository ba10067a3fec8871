"""Jobs an hour on one device: real paper-protocol jobs shortened to R rounds, extrapolated, and their share of the limit.

For each process count N of ``--processes`` the benchmark starts N processes at once on ``--device``, each training
one job of ``--config`` (``--job``, seeds 0..N-1, every job's rounds cut to ``--rounds``) through the CLI
(``python -m fedbalance train``, ``--capture`` passed on when given), and reports per N:

* ``jobs_per_hour`` of the shortened jobs and ``full_jobs_per_hour``: start-up plus the config's rounds x the
  mean seconds of a round (``gpu_suite._throughput_row``, every job of the N sharing the device);
* ``gpu_memory_max_mib`` and ``gpu_util_mean`` (``nvidia-smi`` sampled every second; CUDA only);
* ``tflops`` achieved: the arithmetic the N full jobs do (``job_flops``: every local SGD step's forward and backward,
  the monitor's per-class copies, each round's evaluation on the test split) divided by the time they take, and
  ``share_of_fp32_limit``: that over the device's fp32 rate measured here by a large matmul
  (``measured_fp32_tflops``; ``--peak-tflops`` overrides it).

``--check-full`` also trains one job at the config's full rounds alone and compares its wall time with the
extrapolation of N = 1 (``extrapolation_error``). ``--mps`` repeats each N under NVIDIA's Multi-Process Service.
MNIST missing under the config's data_dir: synthetic MNIST-shaped files, as the GPU suite (same shapes, same time).
Prints one JSON; ``--out`` writes it after every measurement.

    python benchmarks/throughput.py --device cuda --processes 1,10,20 --rounds 3 --check-full --out tp.json
    python benchmarks/throughput.py --device cpu --processes 1,2 --rounds 1 --config config/quick.yaml
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "src"))

import gpu_suite  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from fedbalance.jobs.config import load_config, resolve_job  # noqa: E402
from fedbalance.jobs.cost import cpu_name  # noqa: E402
from fedbalance.data.datasets import load_dataset  # noqa: E402
from fedbalance.engine.fl import needs_monitor  # noqa: E402
from fedbalance.common.jobspec import as_spec  # noqa: E402
from fedbalance.methods.models import build_model, to_float  # noqa: E402
from fedbalance.common.records import Job  # noqa: E402


def forward_backward_flops(model: torch.nn.Module, shape: tuple[int, ...], classes: int, batch: int) -> tuple[float, float]:
    """(forward, forward + backward) FLOPs per sample of ``model`` on a batch (``FlopCounterMode``, on the CPU)."""
    x = to_float(torch.zeros((batch, *shape), dtype=torch.uint8))
    y = torch.arange(batch) % classes
    model = model.train()
    with FlopCounterMode(display=False) as fwd:
        out = model(x)
    with FlopCounterMode(display=False) as both:
        torch.nn.functional.cross_entropy(model(x), y).backward()
    model.zero_grad(set_to_none=True)
    return fwd.get_total_flops() / batch, both.get_total_flops() / batch


def job_flops(metrics: dict[str, Any], shape: tuple[int, ...], classes: int, test_samples: int, rounds: int) -> dict[str, float]:
    """The arithmetic of one job of ``rounds`` rounds, from its metrics.json: each round's clients train every sample
    E times (forward + backward), the monitor's Q copies their aux samples E times, the global model is evaluated on the
    ``test_samples`` once. The selected clients' sizes are those of the job's partition (the mean client when fewer
    than all are selected)."""
    spec = as_spec(metrics["config"])
    model = build_model(spec.model, shape[0], classes, tuple(shape[1:]))
    fwd, step = forward_backward_flops(model, shape, classes, spec.batch_size)
    sizes = [sum(c) for c in metrics["partition"]["class_counts"]]
    k = int(spec.required("clients_per_round"))
    epochs = int(spec.local_epochs)
    samples = (sum(sizes) if k >= len(sizes) else k * sum(sizes) / len(sizes)) * epochs
    aux = classes * int(spec.monitor.aux_per_class) * epochs if needs_monitor(spec) else 0
    per_round = (samples + aux) * step + test_samples * fwd
    return {"flops_per_sample_step": step, "flops_per_sample_forward": fwd, "samples_per_round": samples,
            "monitor_samples_per_round": aux, "job_tflop": per_round * rounds / 1e12}


def measured_fp32_tflops(device: torch.device, n: int = 4096, repeat: int = 10) -> float:
    """The device's fp32 matmul rate (TF32 off), TFLOP/s: the best of ``repeat`` n x n products."""
    a = torch.randn(n, n, device=device)
    b = torch.randn(n, n, device=device)
    best = math.inf
    with gpu_suite.precision("fp32"):
        for _ in range(repeat + 1):
            gpu_suite._sync(device)
            t0 = time.perf_counter()
            a @ b
            gpu_suite._sync(device)
            best = min(best, time.perf_counter() - t0)
    return 2 * n**3 / best / 1e12


class GpuSampler:
    """``nvidia-smi`` every second in a thread: the max memory used (MiB) and the mean utilisation (%)."""

    def __init__(self) -> None:
        self.memory: list[float] = []
        self.util: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            try:
                out = subprocess.run(["nvidia-smi", "--query-gpu=utilization.gpu,memory.used", "--format=csv,noheader,nounits"],
                                     capture_output=True, text=True, timeout=5).stdout.split("\n")[0]
                util, mem = (float(v) for v in out.split(","))
            except (OSError, ValueError, subprocess.SubprocessError):
                continue
            self.util.append(util)
            self.memory.append(mem)

    def __enter__(self) -> GpuSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self._stop.set()
        self._thread.join()

    def summary(self) -> dict[str, float | None]:
        return {"gpu_memory_max_mib": max(self.memory, default=None),
                "gpu_util_mean": round(sum(self.util) / len(self.util), 1) if self.util else None}


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", type=Path, default=ROOT / "config" / "mnist.yaml")
    p.add_argument("--job", default=":".join(gpu_suite.JOB), help="experiment:dataset:setting:loss (default %(default)s)")
    p.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    p.add_argument("--processes", default="1", help="comma list of jobs started at once (default 1)")
    p.add_argument("--rounds", type=int, default=3, help="rounds of each timed job (default 3)")
    p.add_argument("--capture", action="store_true", help="train with the captured step (fedbalance train --capture)")
    p.add_argument("--mps", action="store_true", help="each N again under NVIDIA MPS")
    p.add_argument("--check-full", action="store_true", help="also one job at the config's rounds, against the extrapolation")
    p.add_argument("--peak-tflops", type=float, default=None, help="the device's fp32 rate (default: measured)")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    parts = args.job.split(":")
    if len(parts) != 4:
        p.error(f"--job must be experiment:dataset:setting:loss, got {args.job!r}")
    try:
        args.processes = [int(n) for n in args.processes.split(",")]
    except ValueError:
        p.error(f"--processes must be a comma list of integers, got {args.processes!r}")
    if not args.processes or min(args.processes) < 1 or args.rounds < 1:
        p.error("--processes and --rounds must be at least 1")
    args.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    args.job = tuple(parts)
    return args


def _launch(args: argparse.Namespace, config: Path, outs: list[Path], logs: list[Path], env: dict[str, str],
            threads: int) -> list[int]:
    procs = []
    experiment, dataset, setting, loss = args.job
    for k, (o, log) in enumerate(zip(outs, logs, strict=True)):
        cmd = [sys.executable, "-m", "fedbalance", "train", "--config", str(config), "--experiment", experiment,
               "--dataset", dataset, "--setting", setting, "--loss", loss, "--seed", str(k), "--out", str(o),
               "--device", args.device, "--threads", str(threads), *(["--capture"] if args.capture else [])]
        with log.open("w") as fh:
            procs.append(subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT))
    return [p.wait() for p in procs]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = _parse(argv)
    device = torch.device(args.device)
    gpu_suite.JOB = args.job  # the suite's job config helpers read it
    report: dict[str, Any] = {
        "benchmark": "benchmarks/throughput.py", "device": torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_name(),
        "device_type": device.type, "torch": torch.__version__, "job": "/".join(args.job), "rounds": args.rounds,
        "capture": args.capture, "loadavg_start": [round(x, 2) for x in os.getloadavg()], "rows": [],
    }

    def save() -> None:
        if args.out is not None:
            args.out.write_text(json.dumps(report, indent=1))

    peak = args.peak_tflops if args.peak_tflops is not None else measured_fp32_tflops(device)
    report["fp32_tflops"] = round(peak, 3)
    report["fp32_tflops_source"] = "given" if args.peak_tflops is not None else "measured (4096^2 matmul, TF32 off)"
    cores = os.cpu_count() or 1
    with tempfile.TemporaryDirectory(prefix="throughput-") as tmp_name:
        tmp = Path(tmp_name)
        config, data = gpu_suite.job_config(args, tmp, args.rounds)
        full_config, _ = gpu_suite.job_config(args, tmp, None)
        full = resolve_job(load_config(full_config), Job(*args.job, 0))
        report["data"], report["full_rounds"] = data, full.rounds
        ds = load_dataset(full.source, load_config(full_config)["data_dir"], **dict(full.options))
        shape = (ds.in_channels, *ds.image_size)
        for mode in ["time-slicing"] + (["mps"] if args.mps else []):
            mps = gpu_suite.mps_daemon(tmp / "mps") if mode == "mps" and device.type == "cuda" else contextlib.nullcontext(
                {} if mode != "mps" else "MPS needs a CUDA device")
            with mps as mps_env:
                for n in args.processes:
                    if isinstance(mps_env, str):
                        report["rows"].append({"processes": n, "sharing": mode, "skipped": mps_env})
                        continue
                    threads = 1 if device.type == "cpu" else max(1, min(4, cores // n))
                    outs = [tmp / f"{mode}-{n}" / Job(*args.job, k).path for k in range(n)]  # job folders as laid out
                    logs = [tmp / f"{mode}-{n}-seed{k}.log" for k in range(n)]
                    sampler = GpuSampler() if device.type == "cuda" else contextlib.nullcontext()
                    t0 = time.perf_counter()
                    with sampler:
                        codes = _launch(args, config, outs, logs, {**gpu_suite._env(), **mps_env}, threads)
                    wall = time.perf_counter() - t0
                    errors = [log.read_text()[-500:] for code, log in zip(codes, logs) if code != 0]
                    row = {"processes": n, "sharing": mode, **gpu_suite._throughput_row(n, threads, wall, outs, errors, full.rounds)}
                    row.pop("jobs", None)
                    if device.type == "cuda":
                        row.update(sampler.summary())
                    done = [o for o in outs if (o / "metrics.json").is_file()]
                    if done and "full_job_s" in row:
                        metrics = json.loads((done[0] / "metrics.json").read_text())
                        flops = job_flops(metrics, shape, ds.num_classes, len(ds.y_test), full.rounds)
                        achieved = flops["job_tflop"] * len(done) / row["full_job_s"]
                        row.update(job_tflop=float(f"{flops['job_tflop']:.4g}"), tflops=float(f"{achieved:.4g}"),
                                   share_of_fp32_limit=float(f"{achieved / peak:.4g}"),
                                   device_seconds_per_job=round(3600 / row["full_jobs_per_hour"], 2))
                    report["rows"].append(row)
                    save()
        if args.check_full:
            out, log = tmp / "full" / Job(*args.job, 0).path, tmp / "full-seed0.log"
            t0 = time.perf_counter()
            codes = _launch(args, full_config, [out], [log], gpu_suite._env(), 1 if device.type == "cpu" else min(4, cores))
            wall = time.perf_counter() - t0
            predicted = next((r["full_job_s"] for r in report["rows"] if r.get("processes") == 1 and "full_job_s" in r), None)
            report["full_check"] = {"wall_s": round(wall, 2), "returncode": codes[0], "predicted_s": predicted,
                                    "extrapolation_error": round(predicted / wall - 1, 4) if predicted and codes[0] == 0 else None}
            save()
    print(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    main()
