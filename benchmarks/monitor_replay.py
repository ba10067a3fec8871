"""Per-round CS of every composition estimator at the paper's protocol, from saved trajectories.

Three ways in:

* ``--trajectory A/trajectory.pt B/trajectory.pt ...``: replay saved jobs (``save_trajectory:
  true``, e.g. the loss-comparison jobs of config/mnist.yaml);
* ``--recorded A/ B/ ...``: finished job folders with ``monitor.record``: the recorded estimators'
  CS as written in rounds.csv, plus every history estimator (``pooled``, ``shrunk``: computed from the
  recorded per-round estimates as the run computes them, ``fedbalance.jobs.replay.recorded``);
  seconds, no model replayed (no ``simulated``, whose estimates a job records only when it runs it);
* ``--run --seed S``: first train the five jobs of the paper's protocol on real MNIST
  (``losses`` at Γ = 10 and 50 with CE and the Ratio Loss; the ``monitor`` experiment with random
  selection) from ``--config`` with ``save_trajectory``, into ``--out``, then replay them
  (``--rounds`` shortens them for a smoke run).

Prints one JSON document: for each job and estimator (and the uniform guess) the CS per round,
its minimum and mean (all rounds, and from round 1 on), the rounds at CS >= 0.97, the rounds below
the uniform guess, and the estimator's mean seconds per round. ``--estimators`` takes any name of
``fedbalance.monitor.estimators.REGISTRY``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from fedbalance.jobs.config import load_config, resolve_job
from fedbalance.common.records import Job
from fedbalance.jobs.run import run_job
from fedbalance.monitor.estimators import REGISTRY, named_targets, plan, plugin_origins
from fedbalance.common.records import ESTIMATORS, UNIFORM, cs_column
from fedbalance.jobs.replay import load_trajectory, recorded, replay

PAPER_JOBS = (
    Job("losses", "mnist", "g10", "ce", 0),
    Job("losses", "mnist", "g10", "ratio", 0),
    Job("losses", "mnist", "g50", "ce", 0),
    Job("losses", "mnist", "g50", "ratio", 0),
    Job("monitor", "mnist", "default", "ce", 0),
)


GOOD = 0.97  # the bar for a round's CS in the imbalanced protocols


def summarise(rows: list[dict], estimators: list[str]) -> dict:
    """Per estimator (that the rows hold) and the uniform guess: CS per round, min and mean (all rounds and from
    round 1 on), rounds with CS >= 0.97, and rounds below the uniform guess."""
    out = {}
    uniform = [r[cs_column(UNIFORM)] for r in rows]
    for m in [*(e for e in estimators if cs_column(e) in rows[0]), UNIFORM]:
        cs = [r[cs_column(m)] for r in rows]
        later = cs[1:] or cs
        entry = {"per_round": [round(c, 4) for c in cs], "min": round(min(cs), 4), "mean": round(sum(cs) / len(cs), 4),
                 "min_from_round_1": round(min(later), 4), "rounds_at_least_0.97": sum(c >= GOOD for c in cs),
                 "rounds_below_uniform": sum(c < u - 1e-12 for c, u in zip(cs, uniform))}
        if m != UNIFORM and f"seconds_{m}" in rows[0]:
            entry["seconds_per_round"] = round(sum(r[f"seconds_{m}"] for r in rows) / len(rows), 3)
        out[m] = entry
    return out


def train(config: str, data_dir: str, out: Path, seed: int, rounds: int | None) -> list[Path]:
    """Train the paper-protocol jobs with save_trajectory; return their trajectory files."""
    cfg = load_config(config)
    paths = []
    for job in PAPER_JOBS:
        job = Job(job.experiment, job.dataset, job.setting, job.loss, seed)
        spec = resolve_job(cfg, job).as_dict()
        spec["save_trajectory"] = True
        spec["monitor"] = {**spec["monitor"], "record": True}
        if rounds is not None:
            spec["rounds"] = rounds
        folder = out / job.path
        if not (folder / "trajectory.pt").is_file():
            run_job(spec, folder, data_dir=data_dir, device="cpu", progress=False)
        paths.append(folder / "trajectory.pt")
    return paths


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trajectory", nargs="*", default=[], help="trajectory.pt files to replay")
    ap.add_argument("--recorded", nargs="*", default=[], help="finished job folders (monitor.record) to read")
    ap.add_argument("--run", action="store_true", help="train the paper-protocol jobs first")
    ap.add_argument("--config", default="config/mnist.yaml")
    ap.add_argument("--data-dir", default="data")
    ap.add_argument("--out", default="benchmarks/out/monitor_replay")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=None, help="shorten the trained jobs (smoke runs)")
    ap.add_argument("--estimators", nargs="+", default=list(ESTIMATORS),
                    help=f"estimators to score: registered ({' '.join(sorted(REGISTRY))}), installed plug-ins or "
                         f"NAME=module:attribute (default: {' '.join(ESTIMATORS)})")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    try:
        args.estimators, targets = named_targets(args.estimators)
        plan(args.estimators, targets)
    except ValueError as exc:
        ap.error(str(exc))
    torch.set_num_threads(args.threads)
    paths = [Path(p) for p in args.trajectory]
    if args.run:
        paths += train(args.config, args.data_dir, Path(args.out), args.seed, args.rounds)
    if not paths and not args.recorded:
        ap.error("give --trajectory files, --recorded folders or --run")
    start = time.perf_counter()
    report = {"estimators": args.estimators, "plugins": plugin_origins(args.estimators, targets), "jobs": {}}
    for folder in args.recorded:
        rows = recorded(folder, targets=targets, plugins=args.estimators)
        spec = json.loads((Path(folder) / "metrics.json").read_text())["config"]
        name = f"{spec['experiment']}/{spec['dataset']}/{spec['setting']}/{spec['loss']}/seed{spec['seed']}"
        report["jobs"][name] = {"rounds": len(rows), "selection": spec["selection"], "source": "recorded",
                                **summarise(rows, args.estimators)}
    for p in paths:
        traj = load_trajectory(p)
        spec = traj["spec"]
        name = f"{spec['experiment']}/{spec['dataset']}/{spec['setting']}/{spec['loss']}/seed{spec['seed']}"
        rows = replay(traj, args.estimators, data_dir=args.data_dir, targets=targets)
        report["jobs"][name] = {"rounds": len(rows), "selection": spec["selection"], **summarise(rows, args.estimators)}
    report["replay_seconds"] = round(time.perf_counter() - start, 1)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
