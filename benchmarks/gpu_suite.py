"""One GPU suite for issue 13: rounds, one full job, jobs sharing the device; prints one JSON.

Sections (``--sections``, default all three):

* ``round``: one FedAvg round, sequential vs vectorised ``train_copies``, for MNIST/LeNet5 and
  FEMNIST-shape (1x28x28, 62 classes)/ResNet18 at the paper's sizes (20 clients x 1,000 samples,
  10 local epochs, batch 32), CE and Ratio Loss; Ratio Loss adds the monitor (``Monitor.observe``:
  Q per-class copies on 32 auxiliary samples each, then the estimators). Per row: seconds of the
  clients and of the monitor, the monitor's share, peak GPU memory, and the SGD steps (counted by
  an optimiser hook on the sequential path, from the batch schedules on the vectorised one). Per
  (model, loss): the max abs difference of the two paths' client states, mean losses and monitor
  weights, and the speed-up.
* ``job``: ``losses/mnist/g10/ratio`` of ``--config`` end to end through the CLI
  (``python -m fedbalance train``), wall time, the job's own time and its start-up.
* ``throughput``: N = ``--slots`` copies of that job (seeds 0..N-1, ``--throughput-rounds`` rounds)
  started at once on the device; jobs/hour and rounds/hour for each N.

MNIST files missing under the config's ``data_dir`` (a GPU box without network): the job sections
write synthetic MNIST-shaped IDX files (60,000/10,000 random images) into a temporary folder and
run with ``verify: false``; the JSON says ``"data": "synthetic"`` (same shapes, so the same time).

GPU: ``python benchmarks/gpu_suite.py --out gpu_suite.json`` (about 8 minutes on one H100: not
measured yet). CPU check in seconds (reduced sizes, config/quick.yaml's embedded mnist5k):
``python benchmarks/gpu_suite.py --smoke``.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml
from torch import nn
from torch.optim.optimizer import register_optimizer_step_post_hook

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from fedbalance.cost import cpu_name  # noqa: E402
from fedbalance.losses import get_loss  # noqa: E402
from fedbalance.models import build_model  # noqa: E402
from fedbalance.estimators import Observer  # noqa: E402
from fedbalance.monitor import Monitor  # noqa: E402
from fedbalance.train import SGDConfig, average_stacked, batch_schedule, train_copies  # noqa: E402
from fedbalance.sgd import register_step_post_hook  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from round_speed import _datasets as _sets  # noqa: E402  (synthetic client and per-class sets)

JOB = ("losses", "mnist", "g10", "ratio")
METHODS = ("released", "nnls", "paper")  # config/config.yaml's monitor.estimators
# model -> (shape name, channels, image size, classes at paper size, classes in --smoke)
MODELS = {"lenet5": ("MNIST", 1, (28, 28), 10, 10), "resnet18": ("FEMNIST", 1, (28, 28), 62, 4)}
PAPER = {"clients": 20, "samples": 1000, "epochs": 10, "batch_size": 32, "aux": 32}
SMOKE = {"clients": 2, "samples": 16, "epochs": 1, "batch_size": 8, "aux": 4}
MNIST_FILES = {
    "train-images-idx3-ubyte": (60_000, True),
    "train-labels-idx1-ubyte": (60_000, False),
    "t10k-images-idx3-ubyte": (10_000, True),
    "t10k-labels-idx1-ubyte": (10_000, False),
}


def _parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--smoke", action="store_true", help="reduced sizes on the CPU (seconds): config/quick.yaml, 2 rounds, N = 1, 2")
    p.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available; cpu with --smoke)")
    p.add_argument("--sections", default="round,job,throughput", help="comma list of round, job, throughput")
    p.add_argument("--config", type=Path, default=None, help="study config of the job sections (default config/config.yaml; --smoke: config/quick.yaml)")
    p.add_argument("--rounds", type=int, default=None, help="rounds of the job section (default: the config's; --smoke: 2)")
    p.add_argument("--slots", default=None, help="comma list of concurrent jobs N (default 1,2,4,8; --smoke: 1,2)")
    p.add_argument("--throughput-rounds", type=int, default=None, help="rounds of each throughput job (default 3; --smoke: 1)")
    p.add_argument("--out", type=Path, default=None, help="also write the JSON here (after every section, so a timeout keeps the finished ones)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if args.device is None:
        args.device = "cpu" if args.smoke or not torch.cuda.is_available() else "cuda"
    args.config = args.config or ROOT / ("config/quick.yaml" if args.smoke else "config/config.yaml")
    args.rounds = args.rounds or (2 if args.smoke else None)
    args.slots = [int(n) for n in (args.slots or ("1,2" if args.smoke else "1,2,4,8")).split(",")]
    args.throughput_rounds = args.throughput_rounds or (1 if args.smoke else 3)
    args.sizes = dict(SMOKE if args.smoke else PAPER)
    return args


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


def _round(model: nn.Module, loss_fn: nn.Module, clients: list, monitor: Monitor | None, cfg: SGDConfig, path: str, seed: int, device: torch.device) -> dict[str, Any]:
    """One round on ``path``: clients, FedAvg, and the monitor when given; times, steps and results."""
    gens = [torch.Generator().manual_seed(seed + k) for k in range(len(clients))]
    _sync(device)
    with _StepCounter() as steps:
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
        "clients_s": t1 - t0, "monitor_s": t2 - t1, "client_steps": client_steps, "monitor_steps": monitor_steps if monitor is not None else 0,
        "state": {k: v.detach().double().cpu() for k, v in new_state.items()}, "losses": losses.double().cpu(),
        "weights": None if observed is None else observed["weights"].detach().double().cpu(),
    }


def section_round(args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    """(a) one round, sequential vs vectorised, CE and Ratio Loss with the monitor."""
    s = args.sizes
    cfg = SGDConfig(lr=0.001, momentum=0.9, weight_decay=5e-4, batch_size=s["batch_size"], epochs=s["epochs"])
    warm_cfg = SGDConfig(batch_size=s["batch_size"], epochs=1)
    rows, checks = [], []
    for name, (shape_name, c, size, q_paper, q_smoke) in MODELS.items():
        q = q_smoke if args.smoke else q_paper
        shape = (c, *size)
        torch.manual_seed(args.seed)
        model = build_model(name, c, q, size).to(device)
        g = torch.Generator().manual_seed(args.seed)
        clients = _sets(s["clients"], s["samples"], shape, q, device, g)
        aux = _sets(q, s["aux"], shape, q, device, g, one_class=True)
        aux_x, aux_y = torch.cat([x for x, _ in aux]), torch.cat([y for _, y in aux])
        for loss_name in ("ce", "ratio"):
            loss_fn = get_loss(loss_name, q, **({"weight": torch.linspace(1.0, 1.5, q)} if loss_name == "ratio" else {})).to(device)
            results: dict[str, dict[str, Any]] = {}
            for path in ("sequential", "vectorised"):
                monitor = Observer(Monitor(aux_x, aux_y, q, cfg, path=path), METHODS) if loss_name == "ratio" else None
                # warm-up (kernels, lazy imports): a one-batch round, with a one-epoch monitor for Ratio Loss
                warm_monitor = Observer(Monitor(aux_x, aux_y, q, warm_cfg, path=path), METHODS) if monitor is not None else None
                _round(model, loss_fn, [(x[: s["batch_size"]], y[: s["batch_size"]]) for x, y in clients[:2]], warm_monitor, warm_cfg, path, args.seed, device)
                row: dict[str, Any] = {"model": name, "shape": shape_name, "classes": q, "loss": loss_name, "path": path, **s}
                if device.type == "cuda":
                    torch.cuda.reset_peak_memory_stats(device)
                try:
                    res = _round(model, loss_fn, clients, monitor, cfg, path, args.seed, device)
                except torch.cuda.OutOfMemoryError as err:
                    row["error"] = f"out of memory: {str(err).splitlines()[0]}"
                    rows.append(row)
                    torch.cuda.empty_cache()
                    continue
                results[path] = res
                total = res["clients_s"] + res["monitor_s"]
                row.update(
                    client_steps=res["client_steps"], monitor_steps=res["monitor_steps"], clients_s=round(res["clients_s"], 4),
                    monitor_s=round(res["monitor_s"], 4) if monitor is not None else None, round_s=round(total, 4),
                    monitor_share=round(res["monitor_s"] / total, 4) if monitor is not None else None,
                    peak_memory_gib=round(torch.cuda.max_memory_allocated(device) / 2**30, 3) if device.type == "cuda" else None,
                )
                rows.append(row)
            if len(results) == 2:
                seq, vec = results["sequential"], results["vectorised"]
                check = {
                    "model": name, "loss": loss_name,
                    "max_abs_diff": max(float((seq["state"][k] - vec["state"][k]).abs().max()) for k in seq["state"]),
                    "loss_max_diff": float((seq["losses"] - vec["losses"]).abs().max()),
                    "speedup": round((seq["clients_s"] + seq["monitor_s"]) / (vec["clients_s"] + vec["monitor_s"]), 3),
                }
                if seq["weights"] is not None:
                    check["monitor_weights_max_diff"] = float((seq["weights"] - vec["weights"]).abs().max())
                checks.append(check)
    return {"sizes": s, "lr": cfg.lr, "rows": rows, "checks": checks}


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


def _train_cmd(config: Path, out: Path, seed: int, device: str, threads: int) -> list[str]:
    experiment, dataset, setting, loss = JOB
    return [sys.executable, "-m", "fedbalance", "train", "--config", str(config), "--experiment", experiment, "--dataset", dataset,
            "--setting", setting, "--loss", loss, "--seed", str(seed), "--out", str(out), "--device", device, "--threads", str(threads)]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT / "src"), os.environ.get("PYTHONPATH")) if p)}


def _read_job(out: Path) -> dict[str, Any]:
    metrics = json.loads((out / "metrics.json").read_text())
    rows = (out / "rounds.csv").read_text().strip().splitlines()[1:]
    return {"rounds": metrics["rounds"], "rounds_csv_rows": len(rows), "job_wall_s": metrics["wall_time_s"], "acc": metrics["final"]["acc"]}


def section_job(args: argparse.Namespace, device: torch.device, tmp: Path) -> dict[str, Any]:
    """(b) the full-protocol MNIST job through the CLI."""
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


def section_throughput(args: argparse.Namespace, device: torch.device, tmp: Path) -> dict[str, Any]:
    """(c) N copies of the job at once on the device: jobs/hour for each N."""
    config, data = job_config(args, tmp, args.throughput_rounds)
    cores = os.cpu_count() or 1
    rows = []
    for n in args.slots:
        threads = 1 if device.type == "cpu" else max(1, min(4, cores // n))
        outs = [tmp / f"tp{n}" / f"seed{k}" for k in range(n)]
        logs = [tmp / f"tp{n}-seed{k}.log" for k in range(n)]
        t0 = time.perf_counter()
        procs = []
        for k, (o, log) in enumerate(zip(outs, logs)):
            with log.open("w") as fh:
                procs.append(subprocess.Popen(_train_cmd(config, o, k, device.type, threads), env=_env(), cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT))
        codes = [p.wait() for p in procs]
        wall = time.perf_counter() - t0
        errors = [log.read_text()[-500:] for code, log in zip(codes, logs) if code != 0]
        done = [_read_job(o) for o in outs if (o / "metrics.json").is_file()]
        rows.append({
            "jobs": n, "threads_per_job": threads, "wall_s": round(wall, 3), "completed": len(done),
            "rounds_each": sorted({d["rounds"] for d in done}),
            "jobs_per_hour": round(len(done) / wall * 3600, 2), "rounds_per_hour": round(sum(d["rounds"] for d in done) / wall * 3600, 1),
            **({"errors": errors} if errors else {}),
        })
    base = rows[0]["jobs_per_hour"] if rows and rows[0]["jobs"] == 1 else None
    for r in rows:
        r["speedup_vs_1"] = round(r["jobs_per_hour"] / base, 3) if base else None
    return {"job": "/".join(JOB), "rounds": args.throughput_rounds, "data": data, "rows": rows}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the chosen sections; print (and with --out write) one JSON."""
    args = _parse(argv)
    device = torch.device(args.device)
    if device.type == "cpu":
        torch.set_num_threads(1)
    start = time.perf_counter()
    report: dict[str, Any] = {
        "suite": "benchmarks/gpu_suite.py", "smoke": args.smoke,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_name(),
        "device_type": device.type, "torch": torch.__version__, "threads": torch.get_num_threads(),
        "loadavg_start": [round(x, 2) for x in os.getloadavg()],
    }

    def save() -> None:
        report["wall_s"] = round(time.perf_counter() - start, 2)
        report["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
        if args.out is not None:
            args.out.write_text(json.dumps(report, indent=1))

    sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    unknown = set(sections) - {"round", "job", "throughput"}
    if unknown:
        raise SystemExit(f"unknown section(s) {sorted(unknown)}")
    with tempfile.TemporaryDirectory(prefix="gpu_suite-") as tmp_name:
        tmp = Path(tmp_name)
        for name in sections:
            print(f"gpu_suite: {name} ...", file=sys.stderr, flush=True)
            t0 = time.perf_counter()
            if name == "round":
                report["round"] = section_round(args, device)
            elif name == "job":
                report["job"] = section_job(args, device, tmp)
            else:
                report["throughput"] = section_throughput(args, device, tmp)
            report[name]["section_s"] = round(time.perf_counter() - t0, 2)
            save()
    save()
    print(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    main()
