"""Where one paper-protocol job's time goes: model forward/backward, the SGD step, the loss, everything else.

Runs one job of ``--config`` (default config/mnist.yaml, ``losses`` at Γ = 10 with the Ratio Loss)
shortened to ``--rounds`` rounds under cProfile, one torch thread, and prints JSON: seconds and share
of the local-SGD loop (``fedbalance.training.sgd.sgd_steps``, clients and the monitor's copies) per part, and
the run's total. Needs the real MNIST under ``--data-dir``.

    python benchmarks/job_profile.py --data-dir DATA --rounds 1
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import tempfile
import time

import torch

from fedbalance.jobs.config import load_config, resolve_job
from fedbalance.common.records import Job
from fedbalance.jobs.run import run_job

def _own(stats: pstats.Stats, name: str) -> float:
    return sum(v[2] for (f, _, fn), v in stats.stats.items() if fn in (name, f"<built-in method torch.{name}>",
                                                                       f"<built-in method torch._C._nn.{name}>",
                                                                       f"<method '{name}' of 'torch._C._EngineBase' objects>"))


def _cum(stats: pstats.Stats, file_suffix: str, name: str) -> float:
    return sum(v[3] for (f, _, fn), v in stats.stats.items() if fn == name and f.endswith(file_suffix))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="config/mnist.yaml")
    ap.add_argument("--experiment", default="losses")
    ap.add_argument("--setting", default="g10")
    ap.add_argument("--loss", default="ratio")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--data-dir", default="data")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    spec = resolve_job(load_config(args.config), Job(args.experiment, "mnist", args.setting, args.loss, 0)).as_dict()
    spec.update(rounds=args.rounds, save_trajectory=False)
    prof = cProfile.Profile()
    with tempfile.TemporaryDirectory() as out:
        t0 = time.perf_counter()
        prof.enable()
        run_job(spec, out, data_dir=args.data_dir, device="cpu", progress=False)
        prof.disable()
        total = time.perf_counter() - t0
    stats = pstats.Stats(prof)
    loop = _cum(stats, "fedbalance/training/sgd.py", "sgd_steps")
    parts = {
        "backward": _own(stats, "run_backward"),
        "forward": sum(_own(stats, n) for n in ("conv2d", "max_pool2d", "relu", "linear", "flatten")),
        "sgd_step": _cum(stats, "fedbalance/training/sgd.py", "step"),
        "loss": sum(_cum(stats, "fedbalance/methods/losses.py", n) for n in ("ratio_loss", "cross_entropy", "focal_loss", "ghmc_loss")),
    }
    parts["everything_else_in_loop"] = loop - sum(parts.values())
    print(json.dumps({
        "job": f"{args.experiment}/{args.setting}/{args.loss}", "rounds": args.rounds, "run_seconds": round(total, 1),
        "sgd_loop_seconds": round(loop, 1),
        "parts": {k: {"seconds": round(v, 1), "share_of_loop": round(v / loop, 3)} for k, v in parts.items()},
        "outside_loop_seconds": round(total - loop, 1),
    }, indent=1))


if __name__ == "__main__":
    main()
