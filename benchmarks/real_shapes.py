"""The cost model against the real shapes: each training job of a config/real.yaml run, measured, beside what
``fedbalance cost`` predicts for it; print JSON.

    python benchmarks/real_shapes.py RESULTS [--calibration CAL.json] [--threads 1]

RESULTS is a finished run of config/real.yaml (``snakemake --cores 2 --configfile config/real.yaml``, or the folder
tests/test_real_data.py leaves). For every trained job (its spec from metrics.json) it counts the work as
``fedbalance cost`` does from the config alone (``job_work``; FEMNIST's writers at 50 letters each) and again with the
job's real client sizes (from its partition file and the real labels behind its data manifest), prices both with a CPU
calibration of the shapes (``calibrate``, measured here unless ``--calibration`` names one), and sets them beside the
job's measured seconds: the rounds' (rounds.csv ``seconds``: training, monitor, evaluation) and the whole job's
(metrics.json ``wall_time_s``: data loading too). Per shape: the ratio measured /
predicted, which ``--write-factors`` writes as the shipped CPU factors (``fedbalance.jobs.cost.CPU_FACTORS``, applied by
``calibrate`` on a CPU; docs/performance.md, "Cost against the real shapes").
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import pandas as pd

from fedbalance.common.jobspec import as_spec
from fedbalance.data import structures
from fedbalance.data.partition import load_partitions
from fedbalance.jobs import cost


def _real_sizes(results: Path, spec) -> dict[str, list[int]]:
    job = spec.job
    path = results / "partitions" / job.experiment / job.dataset / job.setting / f"seed{job.seed}.json"
    return {name: [len(c) for c in p.clients] for name, p in load_partitions(path).items()}


def _test_samples(spec) -> int:
    """The test split a real.yaml job evaluates on: the real structure's (FEMNIST: the partial LEAF copy's)."""
    name = "femnist_partial" if spec.source == "femnist" else spec.source
    found = structures.structure(name)
    if spec.source == "femnist" and dict(spec.options).get("letters_only", True):
        found = found.letters()
    return int(sum(found.test))


def measure(results: Path, cal: cost.Calibration) -> dict:
    rows = []
    for metrics_path in sorted(results.glob("*/*/*/*/seed*/metrics.json")):
        if metrics_path.parts[-6] in ("tables", "figures", "aggregate"):
            continue
        metrics = json.loads(metrics_path.read_text())
        folder = metrics_path.parent
        if (folder / "provenance.json").is_file():
            rule = json.loads((folder / "provenance.json").read_text()).get("rule")
            if rule not in (None, "train"):
                continue  # copied or derived: not trained
        spec = as_spec(metrics["config"])
        rounds = pd.read_csv(folder / "rounds.csv")
        work = cost.job_work(spec, device_type="cpu")
        n_test = _test_samples(spec)
        real = cost.job_work(spec, device_type="cpu", sizes=_real_sizes(results, spec), test_samples=n_test)
        rows.append({
            "job": "/".join(map(str, (spec.job.experiment, spec.job.dataset, spec.job.setting, spec.job.loss,
                                      f"seed{spec.job.seed}"))),
            "shape": work.shape.model_key,
            "sgd_steps_config": work.sgd_steps,
            "sgd_steps_real": real.sgd_steps,
            "forward_samples": real.forward_samples,
            "rounds_s_measured": float(rounds["seconds"].sum()),
            "rounds_s_predicted": cost.job_seconds(real, cal) - cal.startup_s,
            "job_s_measured": float(metrics["wall_time_s"]),
            "job_s_predicted_config": cost.job_seconds(work, cal) - cal.startup_s,
            "job_s_predicted_real": cost.job_seconds(real, cal) - cal.startup_s,
        })
    frame = pd.DataFrame(rows)
    shapes = {}
    for shape, group in frame.groupby("shape"):
        shapes[shape] = {
            "jobs": len(group),
            "rounds_s_measured": round(group.rounds_s_measured.sum(), 2),
            "rounds_s_predicted": round(group.rounds_s_predicted.sum(), 2),
            "ratio": round(group.rounds_s_measured.sum() / group.rounds_s_predicted.sum(), 3),
            "job_s_measured": round(group.job_s_measured.sum(), 2),
            "job_s_predicted_config": round(group.job_s_predicted_config.sum(), 2),
            "steps_config_over_real": round(group.sgd_steps_config.sum() / group.sgd_steps_real.sum(), 3),
        }
    return {"calibration": cal.to_json(), "shapes": shapes, "jobs": rows}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("results", type=Path)
    p.add_argument("--calibration", type=Path, help="a stored CPU calibration (default: calibrate here, now)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--write-factors", type=Path,
                   help="write each shape's measured / predicted (src/fedbalance/calibrations/cpu_factors.json)")
    args = p.parse_args(argv)
    if not args.results.is_dir():
        print(f"FAILED: {args.results}: no such folder (a finished run of config/real.yaml)", file=sys.stderr)
        return 2
    specs = [as_spec(json.loads(m.read_text())["config"]) for m in args.results.glob("*/*/*/*/seed*/metrics.json")]
    shapes = {cost.job_shape(s, "cpu") for s in specs}
    cal = (cost.load_calibration(args.calibration) if args.calibration
           else cost.calibrate(shapes, "cpu", threads=args.threads, real_factors=False))
    cal.factors = {}
    out = measure(args.results, cal)
    if args.write_factors:
        factors = {k: v["ratio"] for k, v in out["shapes"].items() if math.isfinite(v["ratio"])}
        args.write_factors.write_text(json.dumps({
            "source": f"benchmarks/real_shapes.py on a config/real.yaml run, {cal.device}, {cal.threads} thread(s), "
                      f"torch {cal.torch}: measured / predicted seconds of the rounds of its jobs",
            "factors": factors}, indent=1, sort_keys=True) + "\n")
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
