"""Where the Ratio Loss's weights spike: per-unit ratios of the spiking rounds, replayed from saved trajectories.

For every round of each ``--trajectory`` (``save_trajectory: true``, e.g. config/mnist.yaml's ``losses``
jobs) the monitor's per-class copies are rebuilt exactly as the run built them (same aux data, seeds
and generator), and for every class p:

* the paper reading's Ra_p (mean of |dW^p_{p,i}| / |o_{p,i}| over the units above T_Ra) as recorded;
* how many units passed T_Ra, the largest unit ratio, its denominator |o_{p,i}| against the median
  denominator, and the share of the kept units' ratio sum that the top unit carries;
* the same dW read the other ways ``monitor.class_ratios`` offers (``READINGS``): the median of the
  kept units' ratios, their ratio of sums, and the released code's ratio of sums over its filter.

A round is a *spike* for class p when its π_p exceeds ``--factor`` (5) times the median of π_p over the
earlier rounds (from round 3 on). ``--recorded`` folders count spikes from rounds.csv's ``weights``
(the π each job used), with no replay.

Prints one JSON document.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
from pathlib import Path

import torch

from fedbalance.fl import TAG_MONITOR, torch_generator
from fedbalance.monitor import VARIANTS, _diag, _others_mean, class_ratios, unit_ratios
from fedbalance.replay import load_trajectory, replay_setup

READINGS = VARIANTS


def spikes(pis: list[list[float]], factor: float, warmup: int = 3) -> list[tuple[int, int, float, float]]:
    """(round, class, π, median of the earlier rounds' π) where π > factor × that median, from round ``warmup`` on."""
    out = []
    for t in range(warmup, len(pis)):
        for p, v in enumerate(pis[t]):
            med = statistics.median(r[p] for r in pis[:t])
            if v > factor * med:
                out.append((t, p, v, med))
    return out


def readings(dW: torch.Tensor, t_ra: float, clip: float) -> dict[str, list[float]]:
    """Ra_p of every class under each of ``READINGS`` (``monitor.class_ratios``' variants) from one round's dW."""
    return {name: class_ratios(dW, t_ra=t_ra, variant=name, clip=clip).tolist() for name in READINGS}


def unit_detail(dW: torch.Tensor, t_ra: float) -> list[dict[str, float]]:
    """Per class: units kept, the top unit's ratio, its denominator over the median one, its share of the sum."""
    d = dW.double()
    ra = unit_ratios(d)
    other = _diag(_others_mean(d)).abs()
    out = []
    for p in range(d.shape[0]):
        keep = (ra[p] > t_ra) & torch.isfinite(ra[p])
        if not keep.any():
            out.append({"kept": 0})
            continue
        vals = ra[p][keep]
        i = int(torch.argmax(torch.where(keep, ra[p], torch.zeros_like(ra[p]))))
        out.append({"kept": int(keep.sum()), "top_ratio": float(ra[p, i]), "top_unit": i,
                    "top_denominator_over_median": float(other[p, i] / other[p].median()),
                    "top_share": float(ra[p, i] / vals.sum())})
    return out


def replay_job(path: Path, data_dir: str, factor: float) -> dict:
    traj = load_trajectory(path)
    spec, _, _, model, monitor = replay_setup(traj, data_dir=data_dir)
    m = spec["monitor"]
    alpha, beta, t_ra, clip = float(m["alpha"]), float(m["beta"]), float(m["t_ra"]), float(m.get("ratio_clip", 5000.0))
    per_round, pis = [], {r: [] for r in READINGS}
    for r in traj["rounds"]:
        t = int(r["round"])
        model.load_state_dict(r["model"])
        dW = monitor.updates(model, torch_generator(int(spec["seed"]), TAG_MONITOR, t))
        ras = readings(dW, t_ra, clip)
        for name, ra in ras.items():
            pis[name].append([alpha + beta * v for v in ra])
        per_round.append({"round": t, "ra": ras, "units": unit_detail(dW, t_ra)})
    found = {name: spikes(pi, factor) for name, pi in pis.items()}
    return {
        "job": f"{spec['experiment']}/{spec['setting']}/{spec['loss']}/seed{spec['seed']}",
        "variant": m["variant"],
        "max_pi": {name: max(max(r) for r in pi) for name, pi in pis.items()},
        "spike_rounds": {name: sorted({t for t, *_ in s}) for name, s in found.items()},
        "spikes": {name: [{"round": t, "class": p, "pi": round(v, 2), "median_before": round(med, 2)} for t, p, v, med in s]
                   for name, s in found.items()},
        "rounds": per_round,
    }


def recorded_job(folder: Path, factor: float) -> dict:
    spec = json.loads((folder / "metrics.json").read_text())["config"]
    with open(folder / "rounds.csv", newline="") as fh:
        rows = [r for r in csv.DictReader(fh)]
    # round t trains with the weights the monitor computed in round t - 1 (round 0: π = 1)
    pis = [[1.0] * len(json.loads(rows[0]["weights"]))] + [json.loads(r["weights"]) for r in rows[:-1]]
    found = spikes(pis, factor)
    return {"job": f"{spec['experiment']}/{spec['setting']}/{spec['loss']}/seed{spec['seed']}",
            "max_pi": max(max(p) for p in pis), "spike_rounds": sorted({t for t, *_ in found}),
            "spikes": [{"round": t, "class": p, "pi": round(v, 2), "median_before": round(med, 2)} for t, p, v, med in found]}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trajectory", nargs="*", default=[], help="trajectory.pt files to replay")
    ap.add_argument("--recorded", nargs="*", default=[], help="finished Ratio-Loss job folders (π from rounds.csv)")
    ap.add_argument("--data-dir", default="data")
    ap.add_argument("--factor", type=float, default=5.0, help="a spike: π above factor × its median so far")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--brief", action="store_true", help="leave out the per-round detail")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    out = {"factor": args.factor, "replayed": [], "recorded": []}
    for p in args.trajectory:
        job = replay_job(Path(p), args.data_dir, args.factor)
        if args.brief:
            job.pop("rounds")
        out["replayed"].append(job)
    out["recorded"] = [recorded_job(Path(f), args.factor) for f in args.recorded]
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
