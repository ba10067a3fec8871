"""Time one FedAvg round, sequential vs vectorised ``train_copies``; print JSON.

A round is K clients training copies of the global model (CE or Ratio Loss); with Ratio Loss the
monitor also trains Q auxiliary copies (one class each, ``--aux`` samples, CE) of the same model.
Data are synthetic uint8 images of the paper's shapes, resident on the device. Paper sizes:
``python benchmarks/round_speed.py --device cuda --full``; on a CPU pass reduced sizes, e.g.
``--epochs 1 --samples 64 --models lenet5,resnet18``.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from typing import Any

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from fedbalance.methods.losses import get_loss
from fedbalance.methods.models import build_model
from fedbalance.training.train import SGDConfig, to_float, train_copies
from fedbalance.training.vectorised import VectorisedOptions, train_copies_vectorised

# model -> (dataset shape it stands for, in_channels, image size, classes)
SHAPES: dict[str, tuple[str, int, tuple[int, int], int]] = {
    "lenet5": ("MNIST", 1, (28, 28), 10),
    "cnn7": ("CIFAR10", 3, (32, 32), 10),
    "resnet18": ("FEMNIST", 1, (28, 28), 62),
    "resnet50": ("FEMNIST", 1, (28, 28), 62),
}


def _parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--full", action="store_true", help="paper sizes: 20 clients x 10 epochs x 1000 samples, all models")
    p.add_argument("--models", default="lenet5,resnet18", help="comma list of " + ",".join(SHAPES))
    p.add_argument("--losses", default="ce,ratio", help="ce and/or ratio (ratio adds the monitor)")
    p.add_argument("--paths", default="sequential,vectorised")
    p.add_argument("--clients", type=int, default=20)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--samples", type=int, default=64, help="samples per client")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--aux", type=int, default=32, help="monitor: auxiliary samples per class")
    p.add_argument("--lr", type=float, default=0.001)
    p.add_argument(
        "--chunk-size",
        type=int,
        default=0,
        help="copies per vmap call (0 = --clients: the monitor's Q copies then need no more memory than the clients)",
    )
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--bf16", action="store_true", help="bf16 autocast (changes numbers)")
    p.add_argument("--tf32", action="store_true", help="allow TF32 (changes numbers)")
    p.add_argument("--compile", action="store_true", help="torch.compile the batched step")
    p.add_argument("--peak-tflops", type=float, default=0.0, help="device peak for the utilisation figure")
    p.add_argument("--threads", type=int, default=0, help="torch intra-op threads on CPU (0 = torch default)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if args.full:
        args.models, args.clients, args.epochs, args.samples = "lenet5,resnet18,resnet50", 20, 10, 1000
    return args


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _datasets(
    n_sets: int,
    n: int,
    shape: tuple[int, ...],
    classes: int,
    device: torch.device,
    g: torch.Generator,
    one_class: bool = False,
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Synthetic uint8 images and labels on ``device``; ``one_class`` gives set k only class k."""
    out = []
    for k in range(n_sets):
        x = torch.randint(0, 256, (n, *shape), generator=g, dtype=torch.uint8)
        y = torch.full((n,), k % classes) if one_class else torch.randint(0, classes, (n,), generator=g)
        out.append((x.to(device), y.to(device)))
    return out


def _flops_per_sample(
    model: nn.Module, loss_fn: nn.Module, shape: tuple[int, ...], classes: int, batch: int, device: torch.device
) -> float:
    """FLOPs of one forward + backward of a full batch, per sample (FlopCounterMode)."""
    x = to_float(torch.randint(0, 256, (batch, *shape), dtype=torch.uint8, device=device))
    y = torch.randint(0, classes, (batch,), device=device)
    model = model.train()
    with FlopCounterMode(display=False) as counter:
        loss_fn(model(x), y).backward()
    model.zero_grad(set_to_none=True)
    return counter.get_total_flops() / batch


def _run(
    path: str,
    model: nn.Module,
    datasets: list[tuple[torch.Tensor, torch.Tensor]],
    loss_fn: nn.Module,
    cfg: SGDConfig,
    seed: int,
    options: VectorisedOptions,
    device: torch.device,
) -> tuple[tuple[dict[str, torch.Tensor], torch.Tensor], float]:
    """One ``train_copies`` call on ``path`` with fresh generators; (its result, seconds)."""
    gens = [torch.Generator().manual_seed(seed + k) for k in range(len(datasets))]
    _sync(device)
    t0 = time.perf_counter()
    if path == "vectorised":
        out = train_copies_vectorised(model, datasets, loss_fn, cfg, gens, options)
    else:
        out = train_copies(model, datasets, loss_fn, cfg, gens, path=path)
    _sync(device)
    return out, time.perf_counter() - t0


def bench_model(name: str, args: argparse.Namespace, device: torch.device) -> list[dict[str, Any]]:
    """All (loss, path) rows for one model."""
    dataset, c, size, q = SHAPES[name]
    shape = (c, *size)
    torch.manual_seed(args.seed)
    model = build_model(name, c, q, size).to(device)
    if args.channels_last:
        model = model.to(memory_format=torch.channels_last)
    g = torch.Generator().manual_seed(args.seed)
    clients = _datasets(args.clients, args.samples, shape, q, device, g)
    aux = _datasets(q, args.aux, shape, q, device, g, one_class=True)
    cfg = SGDConfig(lr=args.lr, batch_size=args.batch_size, epochs=args.epochs)
    warm_cfg = SGDConfig(lr=args.lr, batch_size=args.batch_size, epochs=1)
    options = VectorisedOptions(
        chunk_size=args.chunk_size or args.clients,
        channels_last=args.channels_last,
        autocast_bf16=args.bf16,
        allow_tf32=args.tf32,
        compile=args.compile,
    )
    per_sample = _flops_per_sample(model, nn.CrossEntropyLoss(), shape, q, args.batch_size, device)
    warm = [(x[: args.batch_size], y[: args.batch_size]) for x, y in clients[:2]]
    rows = []
    for loss_name in args.losses.split(","):
        loss_fn = get_loss(loss_name, q, **({"weight": torch.linspace(1.0, 1.5, q)} if loss_name == "ratio" else {}))
        loss_fn = loss_fn.to(device)
        jobs = [("clients", clients, loss_fn)]
        if loss_name == "ratio":
            jobs.append(("monitor", aux, nn.CrossEntropyLoss()))
        states: dict[str, dict[str, torch.Tensor]] = {}
        for path in args.paths.split(","):
            _run(path, model, warm, loss_fn, warm_cfg, args.seed, options, device)
            row: dict[str, Any] = {"model": name, "shape": dataset, "loss": loss_name, "path": path}
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
            try:
                for part, sets, fn in jobs:
                    (stacked, _), seconds = _run(path, model, sets, fn, cfg, args.seed, options, device)
                    row[f"{part}_s"] = round(seconds, 4)
                    if part == "clients":
                        states[path] = stacked
            except torch.cuda.OutOfMemoryError as err:
                row["error"] = f"out of memory: {str(err).splitlines()[0]}"
                rows.append(row)
                torch.cuda.empty_cache()
                continue
            total = row["clients_s"] + row.get("monitor_s", 0.0)
            row["round_s"] = round(total, 4)
            if "monitor_s" in row:
                row["monitor_share"] = round(row["monitor_s"] / total, 4)
            samples = args.epochs * (args.clients * args.samples + (q * args.aux if "monitor_s" in row else 0))
            row["tflops"] = round(per_sample * samples / total / 1e12, 4)
            if args.peak_tflops:
                row["utilisation"] = round(row["tflops"] / args.peak_tflops, 4)
            if device.type == "cuda":
                row["max_memory_gib"] = round(torch.cuda.max_memory_allocated(device) / 2**30, 3)
            rows.append(row)
        if "sequential" in states and "vectorised" in states:
            seq, vec = states["sequential"], states["vectorised"]
            diff = max(float((seq[k].double() - vec[k].double()).abs().max()) for k in seq)
            t = {r["path"]: r["round_s"] for r in rows if r["loss"] == loss_name and "round_s" in r}
            speedup = round(t["sequential"] / t["vectorised"], 3)
            rows.append({"model": name, "loss": loss_name, "speedup": speedup, "max_abs_diff": diff})
    return rows


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the benchmark and print its JSON."""
    args = _parse(argv)
    device = torch.device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    report: dict[str, Any] = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "full": args.full,
        "config": {k: v for k, v in vars(args).items() if k not in ("device", "full")},
        "flops_note": "FlopCounterMode FLOPs of forward+backward per sample x samples trained / round time",
        "rows": [],
    }
    for name in args.models.split(","):
        report["rows"].extend(bench_model(name, args, device))
    print(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    main()
