"""The Ratio Loss as other code reads it: each reading's final Ac.M against the released reading's, paired by seed.

For every reading of ``fedbalance.monitor.readings.READINGS`` and every Γ of the ``readings`` family, the jobs that
train it (the config's loss variant whose ``monitor.variant`` is the reading, in the ``readings`` family; a reading
whose loss equals a loss of the ``losses`` family, such as FedLoGe's and the Flower app's π = 1, which is ``ce``: that
loss's jobs) against the ``losses`` family's ``ratio_rel`` and ``ratio`` at the same Γ and seeds (one seed fixes the
partition, the clients, the initial model and the auxiliary data of every loss): per comparison the seeds both hold,
the mean per-seed difference of the final Ac.M in points with its 95 % Student-t interval
(``fedbalance.evidence.seedstats.paired_interval``) and whether the interval excludes 0. The claims judge these
comparisons by the verdict rule (``fedbalance.presentation.claims``, claims R1, R2, …); this prints them against the
paper reading too.

    PYTHONPATH=src python benchmarks/readings.py --root reference/mnist [--config config/mnist.yaml] [--markdown]

Prints one JSON document (``--markdown``: its table). A comparison with fewer than 2 common seeds is listed with
``n`` and no interval.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from fedbalance.common.jobspec import ConfigError
from fedbalance.common.records import Job
from fedbalance.evidence.seedstats import CONFIDENCE, paired_interval
from fedbalance.jobs.config import jobs, load_config
from fedbalance.jobs.jobfolder import finished, read_metrics
from fedbalance.monitor.readings import READINGS

FAMILY, BASE = "readings", "losses"
AGAINST = ("ratio_rel", "ratio")


def reading_jobs(cfg: dict) -> dict[str, tuple[str, str]]:
    """reading -> (experiment, loss) of the jobs that train it in ``cfg``."""
    variants = {name: ((body.get("params") or {}).get("monitor") or {}).get("variant")
                for name, body in (cfg.get("loss_variants") or {}).items()}
    family = (cfg["experiments"].get(FAMILY) or {}).get("losses", [])
    out = {}
    for name, r in READINGS.items():
        own = [loss for loss in family if variants.get(loss) == name]
        if own:
            out[name] = (FAMILY, own[0])
        elif r.equals:
            out[name] = (BASE, r.equals)
    return out


def final_acm(root: Path, job: Job) -> float | None:
    """The job's final Ac.M in points, or None when ``root`` holds no finished folder of it."""
    folder = root / job.path
    return 100.0 * float(read_metrics(folder)["final"]["acc_minority"]) if finished(folder) else None


def compare(root: Path, config: Path) -> list[dict]:
    """One row per (reading, Γ, rival): the paired final-Ac.M difference reading − rival."""
    cfg = load_config(config)
    settings = sorted({j.setting for j in jobs(cfg, [FAMILY])}, key=lambda s: float(s[1:]))
    seeds = sorted({j.seed for j in jobs(cfg, [FAMILY])})
    rows = []
    for name, (exp, loss) in reading_jobs(cfg).items():
        for setting in settings:
            for rival in AGAINST:
                mine = {s: final_acm(root, Job(exp, "mnist", setting, loss, s)) for s in seeds}
                other = {s: final_acm(root, Job(BASE, "mnist", setting, rival, s)) for s in seeds}
                common = [s for s in seeds if mine[s] is not None and other[s] is not None]
                row = {"reading": name, "experiment": exp, "loss": loss, "setting": setting, "against": rival,
                       "seeds": common, "n": len(common)}
                if len(common) >= 2:
                    ci = paired_interval([mine[s] - other[s] for s in common], CONFIDENCE)
                    row |= {"diff": ci.diff, "low": ci.low, "high": ci.high, "p": ci.p,
                            "clear": bool(ci.low > 0 or ci.high < 0)}
                rows.append(row)
    return rows


def markdown(rows: list[dict]) -> str:
    """The rows as a Markdown table (points of Ac.M; "--" without two common seeds)."""
    out = ["| reading | jobs | Γ | against | seeds | Ac.M difference (95 % interval) | clear |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        cell = f"{r['diff']:+.2f} [{r['low']:+.2f}, {r['high']:+.2f}]" if "diff" in r else "--"
        out.append(f"| {r['reading']} | {r['experiment']}/{r['loss']} | {r['setting'][1:]} | {r['against']} | "
                   f"{r['n']} | {cell} | {'yes' if r.get('clear') else 'no'} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", type=Path, required=True, help="a reference set or results folder")
    ap.add_argument("--config", type=Path, default=Path("config/mnist.yaml"))
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args(argv)
    if not args.root.is_dir():
        sys.exit(f"--root {args.root}: not a folder")
    try:
        rows = compare(args.root, args.config)
    except ConfigError as exc:
        sys.exit(f"--config {args.config}: {exc}")
    print(markdown(rows) if args.markdown else json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
