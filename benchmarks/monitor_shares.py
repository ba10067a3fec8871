"""Every class's share, not only the cosine: TV, share ratios and max/min of each estimator, by group of jobs.

Reads finished job folders (``--recorded``, seconds: the recorded estimates plus the history estimators,
``fedbalance.jobs.replay.recorded``) or replays saved trajectories (``--trajectory``, every estimator named by
``--estimators``, minutes per job). The rounds from ``--from-round`` on (default 1) of the jobs of one
(setting, loss) are pooled into one group; for each estimator (and the uniform guess):

* ``tv_mean`` / ``tv_max``: TV(p_hat, p) = 1/2 sum_c |p_hat_c - p_c| (1 - TV is the label-recovery
  literature's instance accuracy);
* ``minority_share_ratio_median``: the median over rounds and minority classes (the job's
  ``minority_classes``) of p_hat_c / p_c;
* ``imbalance_median`` against ``true_imbalance_median``: the estimated and true max/min class ratio;
* ``worst_share_median`` / ``worst_share_max``: max_c max(r_c, 1/r_c), every class within x f iff <= f;
* ``rounds_at_goal``: rounds with TV <= 0.05 and every class within x 1.5, of ``rounds``;
* ``rounds_below_uniform_cs``: rounds whose CS is below the uniform guess's;
* ``acknowledged_round``: per job, the round the job's acknowledgment rule (threshold, consecutive rounds)
  fires on the estimator's estimates from round 0 on, None when it never does.

``--save-replays DIR`` writes each replay as JSON as it finishes; ``--replayed FILE...`` reads such files instead
of replaying (so replays can run in several processes and be tabulated together).
``--reference DIR`` reads the issue's groups of a reference set: ``losses/mnist/g{10,50,100}/{ce,ratio}``.
Prints one JSON document; ``--markdown`` prints the table instead. ``--oracle-exponents`` prints instead, per job and
estimator, the exponent e of p_c ∝ p_hat_c^e (``estimators.sharpened_counts``) on the grid 1.0, 1.1, ..., 5.0 with the
most rounds at the goal, then the least median worst class factor: read with the truth, a ceiling of that reading,
not an estimator (docs/monitor.md, "sharpened"); the truth is recovered from the estimator's own share ratios.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from fedbalance.atomic import write_json
from fedbalance.monitor.estimators import REGISTRY, named_targets, plan, plugin_origins
from fedbalance.common.jobspec import as_spec
from fedbalance.monitor.monitor import Acknowledger
from fedbalance.monitor.estimators import sharpened_counts
from fedbalance.common.records import (
    ESTIMATORS, TRUE_IMBALANCE, UNIFORM, cs_column, est_column, imbalance_column, shares_column, total_variation,
    tv_column, worst_share_column, worst_share_factor,
)
from fedbalance.jobs.replay import load_trajectory, recorded, replay

GOAL_TV = 0.05
GOAL_FACTOR = 1.5
ACKNOWLEDGE = (3.0, 3)
"""The acknowledgment rule (threshold, consecutive rounds) of a job that sets none: the shipped configs'."""
REFERENCE_GROUPS = tuple((f"g{g}", loss) for g in (10, 50, 100) for loss in ("ce", "ratio"))


def rounds_to_acknowledge(series: Sequence[Sequence[float]], threshold: float, rounds: int) -> int | None:
    """The first round at which ``Acknowledger(threshold, rounds)`` fed ``series`` (round 0 first) acknowledges."""
    ack = Acknowledger(threshold, rounds)
    return next((t for t, counts in enumerate(series) if ack.update(counts)), None)


def group_summary(jobs: Sequence[dict[str, Any]], estimators: Sequence[str], first: int) -> dict[str, Any]:
    """The measures of one group of jobs ({"rows", "minority", "acknowledge"} each), per estimator (module docstring)."""
    out: dict[str, Any] = {"jobs": len(jobs)}
    later = [(job, r) for job in jobs for r in job["rows"] if r["round"] >= first]
    out["rounds"] = len(later)
    out["true_imbalance_median"] = statistics.median(r[TRUE_IMBALANCE] for _, r in later)
    for m in [*estimators, UNIFORM]:
        if not all(tv_column(m) in r for _, r in later):
            continue
        tv = [r[tv_column(m)] for _, r in later]
        worst = [r[worst_share_column(m)] for _, r in later]
        minority = [r[shares_column(m)][c] for job, r in later for c in job["minority"]]
        entry = {
            "tv_mean": statistics.fmean(tv), "tv_max": max(tv),
            "minority_share_ratio_median": statistics.median(minority) if minority else None,
            "imbalance_median": statistics.median(r[imbalance_column(m)] for _, r in later),
            "worst_share_median": statistics.median(worst), "worst_share_max": max(worst),
            "rounds_at_goal": sum(t <= GOAL_TV and w <= GOAL_FACTOR for t, w in zip(tv, worst)),
            "rounds_below_uniform_cs": sum(r[cs_column(m)] < r[cs_column(UNIFORM)] - 1e-12 for _, r in later),
        }
        if m != UNIFORM:
            entry["acknowledged_round"] = [
                rounds_to_acknowledge([r[est_column(m)] for r in job["rows"]], *job["acknowledge"]) for job in jobs]
        out[m] = entry
    return out


def job_entry(rows: list[dict[str, Any]], spec: dict[str, Any]) -> tuple[tuple[str, str], dict[str, Any]]:
    """(group key (setting, loss), {"rows", "minority", "acknowledge"}) of one job."""
    s = as_spec(spec)
    ack = (s.monitor.ack_threshold or ACKNOWLEDGE[0], s.monitor.ack_rounds or ACKNOWLEDGE[1])
    return (s.job.setting, s.job.loss), {"rows": rows, "minority": list(s.minority_classes), "acknowledge": ack}


def markdown(report: dict[str, Any]) -> str:
    """The issue's table: one line per group and estimator."""
    lines = ["| group | estimator | TV mean (max) | minority share ratio (median) | max/min (median) vs true "
             "| worst factor median (max) | rounds at goal | acknowledged round per job |", "|---" * 8 + "|"]
    for key, g in report["groups"].items():
        for m, e in g.items():
            if not isinstance(e, dict):
                continue
            minority = "–" if e["minority_share_ratio_median"] is None else f"x{e['minority_share_ratio_median']:.2f}"
            lines.append(f"| {key} | {m} | {e['tv_mean']:.3f} ({e['tv_max']:.3f}) | {minority} | "
                         f"{e['imbalance_median']:.2f} vs {g['true_imbalance_median']:.0f} | "
                         f"{e['worst_share_median']:.2f} ({e['worst_share_max']:.2f}) | {e['rounds_at_goal']} of {g['rounds']} "
                         f"| {e.get('acknowledged_round', '')} |")
    return "\n".join(lines)


def replay_record(path: Path, estimators: Sequence[str], data_dir: str,
                  targets: dict[str, str] | None = None) -> dict[str, Any]:
    """A replayed trajectory as ``--save-replays`` writes it: {"trajectory", "estimators", "plugins" (the plug-in
    estimators' package, version and origin), "spec", "rows"}."""
    traj = load_trajectory(path)
    rows = replay(traj, estimators, data_dir=data_dir, targets=targets)
    return {"trajectory": str(path), "estimators": list(estimators), "plugins": plugin_origins(estimators, targets),
            "spec": traj["spec"], "rows": rows}


EXPONENTS = tuple(round(1 + 0.1 * i, 1) for i in range(41))


def oracle_exponent(rows: Sequence[dict[str, Any]], name: str, first: int) -> dict[str, Any]:
    """The exponent of ``EXPONENTS`` whose sharpened estimates of ``name`` put the most rounds (from ``first``) at the
    goal, then the least median worst class factor; the truth of a round is its estimate over its share ratios."""
    pairs = []
    for row in rows:
        est, ratios = row.get(est_column(name)), row.get(shares_column(name))
        if row["round"] < first or est is None or ratios is None or not all(r and r > 0 for r in ratios):
            continue
        pairs.append((est, [e / r for e, r in zip(est, ratios, strict=True)]))
    best: dict[str, Any] = {}
    for e in EXPONENTS:
        sharp = [(sharpened_counts(torch.tensor(est, dtype=torch.float64), e).tolist(), truth) for est, truth in pairs]
        tv = [total_variation(s, t) for s, t in sharp]
        worst = [worst_share_factor(s, t) for s, t in sharp]
        at_goal = sum(a <= GOAL_TV and w <= GOAL_FACTOR for a, w in zip(tv, worst, strict=True))
        key = (at_goal, -statistics.median(worst))
        if not best or key > best["key"]:
            best = {"key": key, "exponent": e, "rounds_at_goal": at_goal, "rounds": len(pairs),
                    "tv_mean": statistics.fmean(tv), "worst_share_median": statistics.median(worst)}
    best.pop("key")
    return best


def build_report(folders: Sequence[Path], trajectories: Sequence[Path], estimators: Sequence[str], data_dir: str,
                 first: int = 1, replayed: Sequence[dict[str, Any]] = (), save: Path | None = None,
                 targets: dict[str, str] | None = None) -> dict[str, Any]:
    """The groups' measures (``group_summary``) of recorded job folders, replayed trajectories and earlier replays
    (``replayed``: records of ``replay_record``); each new replay is written to ``save`` as it finishes. ``targets``:
    plug-in estimators by dotted path (``estimators.named_targets``); a recorded folder gets the registered history
    estimators and the listed ones that read the history."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for folder in folders:
        key, entry = job_entry(recorded(folder, targets=targets, plugins=estimators), json.loads((folder / "metrics.json").read_text())["config"])
        groups[key].append(entry)
    records = list(replayed)
    for i, path in enumerate(trajectories):
        records.append(replay_record(path, estimators, data_dir, targets))
        if save is not None:
            save.mkdir(parents=True, exist_ok=True)
            write_json(records[-1], save / f"{i:03d}-{'-'.join(path.parent.parts[-4:])}.json")
    for rec in records:
        missing = [m for m in estimators if est_column(m) not in rec["rows"][0]]
        if missing:
            raise SystemExit(f"{rec['trajectory']}: replayed without {missing}; replay it with them or leave them out")
        key, entry = job_entry(rec["rows"], rec["spec"])
        groups[key].append(entry)
    return {"from_round": first, "goal": {"tv": GOAL_TV, "factor": GOAL_FACTOR},
            "groups": {f"{s}/{loss}": group_summary(jobs, estimators, first) for (s, loss), jobs in groups.items()}}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--recorded", nargs="*", default=[], help="finished job folders")
    ap.add_argument("--reference", default=None, help="a reference set's dataset folder (reads the issue's groups)")
    ap.add_argument("--trajectory", nargs="*", default=[], help="trajectory.pt files to replay")
    ap.add_argument("--save-replays", default=None, help="write each replay here as JSON, as it finishes")
    ap.add_argument("--replayed", nargs="*", default=[], help="replays written by --save-replays, read instead of replaying")
    ap.add_argument("--estimators", nargs="+", default=[e for e in ESTIMATORS if e != "simulated"],
                    help=f"registered ({' '.join(sorted(REGISTRY))}), installed plug-ins, or NAME=module:attribute")
    ap.add_argument("--data-dir", default="data")
    ap.add_argument("--from-round", type=int, default=1)
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads of the replays (default 1, as the jobs)")
    ap.add_argument("--oracle-exponents", action="store_true", help="per job and estimator, the best exponent read with "
                    "the truth (a ceiling of the sharpened reading), instead of the table")
    args = ap.parse_args(argv)
    try:
        args.estimators, targets = named_targets(args.estimators)
        plan(args.estimators, targets)
    except ValueError as exc:
        ap.error(str(exc))
    torch.set_num_threads(args.threads)
    folders = [Path(f) for f in args.recorded]
    if args.reference:
        root = Path(args.reference)
        folders += sorted(p for s, loss in REFERENCE_GROUPS for p in (root / "losses" / "mnist" / s / loss).glob("seed*"))
    if not folders and not args.trajectory and not args.replayed:
        ap.error("give --recorded folders, --reference, --trajectory or --replayed files")
    replayed = [json.loads(Path(p).read_text()) for p in args.replayed]
    if args.oracle_exponents:
        jobs = [(str(f), recorded(f)) for f in folders] + [(r["trajectory"], r["rows"]) for r in replayed]
        print(json.dumps([{"job": j, "estimator": m, **oracle_exponent(rows, m, args.from_round)}
                          for j, rows in jobs for m in args.estimators], indent=1))
        return
    report = build_report(folders, [Path(p) for p in args.trajectory], args.estimators, args.data_dir, args.from_round,
                          replayed, None if args.save_replays is None else Path(args.save_replays), targets)
    print(markdown(report) if args.markdown else json.dumps(report, indent=1, default=float))


if __name__ == "__main__":
    main()
