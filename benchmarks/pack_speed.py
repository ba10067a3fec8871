"""Seconds per round of S jobs run one after another against the same S jobs as one pack (``fedbalance.jobs.pack``).

The jobs are ``--job``'s experiment/dataset/setting of ``--config`` with the losses of ``--losses`` and seeds 0, 1, ...
(S = ``--jobs``; loss i mod len(losses), seed i), every job's rounds cut to ``--rounds`` and its path set to
``vectorised`` (a pack's path; the one-after-another jobs run it too, so the two differ in packing only). Both runs
are timed end to end (data, partitions and model set-up included) and divided by the rounds of all S jobs;
``max_acc_diff`` is the largest difference between a job's final accuracy in the two runs (float rounding: the
vmap calls hold different copies). ``--alone-path sequential`` runs the one-after-another jobs on the sequential path
instead (what the reference runner runs on a CPU: one job a process), so the speed-up is a pack's against the runner's
way. Prints one JSON.

    python benchmarks/pack_speed.py --device cpu --jobs 4 --rounds 2 --threads 1
    python benchmarks/pack_speed.py --device cuda --config config/mnist.yaml --jobs 10 --rounds 3
    python benchmarks/pack_speed.py --config config/mnist.yaml --job alpha/mnist/a0.5 --losses ratio --jobs 2 \
        --rounds 2 --alone-path sequential
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from fedbalance.jobs.config import load_config, resolve_job  # noqa: E402
from fedbalance.jobs.cost import cpu_name  # noqa: E402
from fedbalance.jobs.run import run_job  # noqa: E402
from fedbalance.jobs.pack import run_pack  # noqa: E402
from fedbalance.common.records import Job  # noqa: E402


def job_specs(config: Path, job: str, losses: list[str], jobs: int, rounds: int, path: str = "vectorised") -> list[dict]:
    """The S shortened job dicts on ``path``."""
    cfg = load_config(config)
    experiment, dataset, setting = job.split("/")
    specs = []
    for i in range(jobs):
        spec = resolve_job(cfg, Job(experiment, dataset, setting, losses[i % len(losses)], i)).as_dict()
        spec.update(rounds=rounds, path=path)
        specs.append(spec)
    return specs


def main(argv: list[str] | None = None) -> dict:
    """Run both, print and return the JSON."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", type=Path, default=ROOT / "config" / "quick.yaml")
    p.add_argument("--job", default="losses/mnist/g10", help="experiment/dataset/setting of the jobs")
    p.add_argument("--losses", default="ce,ratio,focal,ghmc", help="comma-separated losses of the experiment")
    p.add_argument("--jobs", type=int, default=4, help="S, jobs in the pack")
    p.add_argument("--rounds", type=int, default=2, help="rounds of every job")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    p.add_argument("--data-dir", type=Path, default=ROOT / "data")
    p.add_argument("--alone-path", default="vectorised", choices=("vectorised", "sequential"),
                   help="the path of the one-after-another jobs (the pack always runs vectorised)")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    specs = job_specs(args.config, args.job, args.losses.split(","), args.jobs, args.rounds)
    alone_specs = job_specs(args.config, args.job, args.losses.split(","), args.jobs, args.rounds, args.alone_path)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        alone = [run_job(s, Path(tmp) / "alone" / str(i), data_dir=args.data_dir, device=args.device, progress=False)
                 for i, s in enumerate(alone_specs)]
        t1 = time.perf_counter()
        packed = run_pack(specs, [Path(tmp) / "pack" / str(i) for i in range(len(specs))], data_dir=args.data_dir,
                          device=args.device, progress=False)
        t2 = time.perf_counter()
    rounds = args.rounds * len(specs)
    device = torch.cuda.get_device_name() if args.device == "cuda" else cpu_name()
    out = {
        "device": device, "threads": args.threads, "config": str(args.config), "job": args.job,
        "losses": [s["loss"] for s in specs], "jobs": len(specs), "rounds_per_job": args.rounds,
        "alone_path": args.alone_path,
        "seconds_alone": t1 - t0, "seconds_pack": t2 - t1,
        "seconds_per_round_alone": (t1 - t0) / rounds, "seconds_per_round_pack": (t2 - t1) / rounds,
        "speedup": (t1 - t0) / (t2 - t1), "pack_training_calls": packed.calls,
        "max_acc_diff": max(abs(a["final"]["acc"] - b["final"]["acc"]) for a, b in zip(alone, packed.metrics, strict=True)),
    }
    print(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main()
