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

Prints one JSON document; with ``--table`` instead, the Markdown table of docs/ratio-stability.md over the ``--recorded``
folders (any loss: CE rows give the majority-accuracy baseline), one row per (Γ, loss): seeds, final and
last-5 Ac.M, majority accuracy and AUC (mean ± std over seeds), the largest π, the spike rounds and the
drops (evaluated rounds whose test accuracy fell by ``DROP`` or more from the previous one).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import pandas as pd
import torch

from fedbalance.jobs.config import base_loss
from fedbalance.engine.fl import TAG_MONITOR, torch_generator
from fedbalance.jobs.jobfolder import read_metrics, round_records
from fedbalance.monitor.monitor import VARIANTS, _diag, _others_mean, class_ratios, unit_ratios
from fedbalance.common.records import plus_minus
from fedbalance.jobs.replay import load_trajectory, replay_setup

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
    m = spec.monitor
    alpha, beta, t_ra, clip = m.required("alpha"), m.required("beta"), m.required("t_ra"), m.ratio_clip
    per_round, pis = [], {r: [] for r in READINGS}
    for r in traj["rounds"]:
        t = int(r["round"])
        model.load_state_dict(r["model"])
        dW = monitor.updates(model, torch_generator(spec.seed, TAG_MONITOR, t))
        ras = readings(dW, t_ra, clip)
        for name, ra in ras.items():
            pis[name].append([alpha + beta * v for v in ra])
        per_round.append({"round": t, "ra": ras, "units": unit_detail(dW, t_ra)})
    found = {name: spikes(pi, factor) for name, pi in pis.items()}
    return {
        "job": f"{spec.job.experiment}/{spec.job.setting}/{spec.job.loss}/seed{spec.seed}",
        "variant": m.variant,
        "max_pi": {name: max(max(r) for r in pi) for name, pi in pis.items()},
        "spike_rounds": {name: sorted({t for t, *_ in s}) for name, s in found.items()},
        "spikes": {name: [{"round": t, "class": p, "pi": round(v, 2), "median_before": round(med, 2)} for t, p, v, med in s]
                   for name, s in found.items()},
        "rounds": per_round,
    }


LATE = 5
"""A late spike: one from this round on, after the ramp-up (π rises from ≈ 2 on a fresh model as the monitor first
sees the imbalance, rounds 2-4); the table counts late spikes beside all spikes."""

DROP = 0.2
"""A drop: an evaluated round whose test accuracy is this much (or more) below the previous evaluated round's."""


def recorded_job(folder: Path, factor: float) -> dict:
    metrics = read_metrics(folder)
    spec = metrics["config"]
    rows = round_records(folder)
    out = {"job": f"{spec['experiment']}/{spec['setting']}/{spec['loss']}/seed{spec['seed']}",
           "loss": spec["loss"], "setting": spec["setting"], "seed": spec["seed"],
           "final": {k: metrics["final"][k] for k in ("acc", "acc_minority", "acc_majority", "auc_hard")},
           "last5_acc_minority": statistics.fmean([r["acc_minority"] for r in rows if r["acc_minority"] is not None][-5:])}
    accs = [r["acc"] for r in rows if r["acc"] is not None]
    out["drops"] = sum(1 for a, b in zip(accs, accs[1:]) if a - b >= DROP)
    if base_loss(spec) != "ratio" or rows[0].get("weights") is None:  # no Ratio-Loss weights trained with (CE, ...)
        out.update(max_pi=None, spike_rounds=[], spikes=[])
        return out
    # round t trains with the weights the monitor computed in round t - 1 (round 0: π = 1)
    pis = [[1.0] * len(rows[0]["weights"])] + [r["weights"] for r in rows[:-1]]
    found = spikes(pis, factor)
    out.update(max_pi=max(max(p) for p in pis), spike_rounds=sorted({t for t, *_ in found}),
               spikes=[{"round": t, "class": p, "pi": round(v, 2), "median_before": round(med, 2)} for t, p, v, med in found])
    return out


def _pm(values: pd.Series, scale: float, digits: int) -> str:
    return plus_minus(scale * values.mean(), scale * values.std(ddof=1), digits)


def table(jobs: list[dict]) -> str:
    """The Markdown table of the recorded jobs: one row per (Γ, loss), seeds pooled."""
    frame = pd.DataFrame([{**j, **{f"final_{k}": v for k, v in j["final"].items()}} for j in jobs])
    frame["gamma"] = frame["setting"].str.extract(r"g(\d+)", expand=False).astype(float)
    lines = ["| Γ | loss | seeds | Ac.M final (%) | Ac.M last 5 (%) | majority acc. (%) | AUC (hard) | max π | "
             f"spike rounds (jobs with one) | late spike rounds, t ≥ {LATE} | drops ≥ 20 points |", "|" + "---|" * 11]
    for (gamma, loss), g in frame.sort_values(["gamma", "loss", "seed"]).groupby(["gamma", "loss"], sort=True):
        spikes_total = sum(len(s) for s in g["spike_rounds"])
        with_spike = sum(1 for s in g["spike_rounds"] if s)
        late = sum(1 for s in g["spike_rounds"] for t in s if t >= LATE)
        max_pi = "–" if g["max_pi"].isna().all() else f"{g['max_pi'].max():.1f}"
        lines.append(
            f"| {gamma:g} | {loss} | {', '.join(str(s) for s in g['seed'])} | {_pm(g['final_acc_minority'], 100, 2)} | "
            f"{_pm(g['last5_acc_minority'], 100, 2)} | {_pm(g['final_acc_majority'], 100, 2)} | {_pm(g['final_auc_hard'], 1, 4)} | "
            f"{max_pi} | {spikes_total} ({with_spike}) | {late} | {int(g['drops'].sum())} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trajectory", nargs="*", default=[], help="trajectory.pt files to replay")
    ap.add_argument("--recorded", nargs="*", default=[], help="finished Ratio-Loss job folders (π from rounds.csv)")
    ap.add_argument("--data-dir", default="data")
    ap.add_argument("--factor", type=float, default=5.0, help="a spike: π above factor × its median so far")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--brief", action="store_true", help="leave out the per-round detail")
    ap.add_argument("--table", action="store_true", help="print the Markdown table of the --recorded jobs instead")
    args = ap.parse_args(argv)
    if args.table:
        print(table([recorded_job(Path(f), args.factor) for f in args.recorded]), end="")
        return
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
