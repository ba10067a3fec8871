"""How sure the monitor is, measured: coverage of the 95 % intervals and minority detection on held-out seeds.

Reads a reference set's jobs that record the composition (``--reference``, default reference/mnist: every recorded
estimator, the history estimators ``replay.recorded`` computes from them, and the uniform guess; about half an hour
on a shared CPU core, so ``--records FILE`` keeps what was read and reads it back the next time), drops jobs that
repeat another job's estimates (``coverage.dedupe_jobs``), and for each split of ``fedbalance.evidence.coverage``
(fixed before the first measurement) fits the intervals on the fit part and measures on the test part:

* ``coverage``: per estimator, protocol and Γ; per estimator, protocol and class; per estimator and family; per
  estimator, protocol and true role (minority: true share below half of 1/Q): class-rounds, covered, the empirical
  coverage with its Clopper–Pearson 95 % interval, the median width (share), and ``below_flag`` (coverage < 90 %);
* ``detection``: per estimator, Γ and experiment (fixed-client protocols), the true minority class-rounds and the
  precision and recall of the classes named minority by the interval (upper end below half of 1/Q), by the point
  estimate alone (p̂ below it) and by the uniform guess (never).

Prints one JSON document; ``--markdown`` prints docs/monitor.md's tables instead. ``--write-calibration`` writes the
primary split's calibration (fitted on seeds 0–2) to the package (``intervals.CALIBRATION_FILE``), which new jobs and
replays use for their ``lo_``/``hi_`` columns.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

import pandas as pd

from fedbalance.atomic import write_json
from fedbalance.evidence.coverage import (
    FIT_SEEDS, FLAG, PRIMARY, SECONDARY_TEST_SEED, SPLITS, TEST_SEEDS, coverage_table, dedupe_jobs,
    detection_table, evaluate, reference_records,
)
from fedbalance.monitor.intervals import ALPHA, CALIBRATION_FILE, FIXED, MINORITY_FRACTION

ORDER = ("pooled", "released", "shrunk", "sharpened", "nnls", "paper", "uniform")


def records_of(reference: Path, cache: Path | None) -> pd.DataFrame:
    """The set's records, from ``cache`` when it exists (written there otherwise)."""
    if cache is not None and cache.exists():
        return pd.read_pickle(cache)
    frame = reference_records(reference, say=lambda line: print(line, file=sys.stderr))
    if cache is not None:
        frame.to_pickle(cache)
    return frame


def _records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    return json.loads(frame.to_json(orient="records"))


def measure(records: pd.DataFrame) -> dict[str, Any]:
    """Both splits' tables (module docstring) and the calibrations they fitted."""
    q = int(records.cls.max()) + 1
    kept, dropped = dedupe_jobs(records)
    out: dict[str, Any] = {
        "split": {"fit_seeds": list(FIT_SEEDS), "test_seeds": list(TEST_SEEDS),
                  "secondary_test_seed": SECONDARY_TEST_SEED, "alpha": ALPHA, "flag": FLAG,
                  "minority_share": MINORITY_FRACTION / q},
        "jobs": int(kept.groupby(["experiment", "dataset", "setting", "loss", "seed"]).ngroups),
        "dropped_repeats": dropped, "splits": {}, "calibrations": {}}
    for split in SPLITS:
        test, cal = evaluate(kept, split, q)
        test = test.assign(role=lambda f: f.true_minority.map({True: "minority", False: "other"}))
        out["calibrations"][split] = cal
        fixed = test[test.protocol == FIXED]
        out["splits"][split] = {
            "test_jobs": int(test.groupby(["family", "seed"]).ngroups),
            "test_families": sorted(test.family.unique()),
            "coverage_by_gamma": _records(coverage_table(test, ["estimator", "protocol", "gamma"])),
            "coverage_by_class": _records(coverage_table(test, ["estimator", "protocol", "cls"])),
            "coverage_by_role": _records(coverage_table(test, ["estimator", "protocol", "gamma", "role"])),
            "coverage_by_family": _records(coverage_table(test, ["estimator", "family"])),
            "coverage_by_estimator": _records(coverage_table(test, ["estimator", "protocol"])),
            "detection": _records(detection_table(fixed, ["estimator", "gamma", "experiment"])),
            "detection_by_gamma": _records(detection_table(fixed, ["estimator", "gamma"])),
        }
    return out


def _pct(x: float) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.1f}"


def _cov(r: dict[str, Any]) -> str:
    flag = " **below 90 %**" if r["below_flag"] else ""
    return f"{_pct(r['coverage'])} [{_pct(r['ci_low'])}, {_pct(r['ci_high'])}]{flag}"


def _sort(rows: list[dict[str, Any]], *keys: str) -> list[dict[str, Any]]:
    rank = {e: i for i, e in enumerate(ORDER)}
    return sorted(rows, key=lambda r: tuple(rank.get(r[k], 99) if k == "estimator" else r[k] for k in keys))


def _cov_n(r: dict[str, Any] | None) -> str:
    if r is None:
        return "–"
    if r["n"] < 40:
        return f"{r['covered']} of {r['n']}"
    return f"{_cov(r)} (n {r['n']})"


def markdown(report: dict[str, Any]) -> str:
    """docs/monitor.md's tables, per split: coverage per estimator, protocol and Γ (all classes, then the true
    minority classes), per class, the estimator × family groups below 90 %, and minority detection per Γ
    (fixed-client protocols)."""
    lines = []
    for split in SPLITS:
        part = report["splits"][split]
        lines += [f"**{split} split** (test: {part['test_jobs']} jobs of {len(part['test_families'])} families)", "",
                  "| estimator | protocol | Γ | class-rounds | coverage % [95 % CI] | median width (share) | "
                  "true minority classes: coverage % [95 % CI] |", "|---|---|---|---|---|---|---|"]
        roles = {(r["estimator"], r["protocol"], r["gamma"], r["role"]): r for r in part["coverage_by_role"]}
        for r in _sort(part["coverage_by_gamma"], "protocol", "gamma", "estimator"):
            mino = roles.get((r["estimator"], r["protocol"], r["gamma"], "minority"))
            lines.append(f"| {r['estimator']} | {r['protocol']} | {r['gamma']:g} | {r['n']} | {_cov(r)} | "
                         f"{r['median_width']:.3f} | {_cov_n(mino)} |")
        by_class: dict[tuple[str, str], dict[int, dict[str, Any]]] = {}
        for r in part["coverage_by_class"]:
            by_class.setdefault((r["estimator"], r["protocol"]), {})[int(r["cls"])] = r
        q = 1 + max(int(r["cls"]) for r in part["coverage_by_class"])
        lines += ["", "Coverage % per class (every Γ of the protocol; below 90 % in bold):", "",
                  "| estimator | protocol | " + " | ".join(f"class {c}" for c in range(q)) + " |",
                  "|---|---|" + "---|" * q]
        for (est, proto), cells in sorted(by_class.items(), key=lambda kv: (kv[0][1], ORDER.index(kv[0][0])
                                                                             if kv[0][0] in ORDER else 99)):
            shown = [("**" + _pct(cells[c]["coverage"]) + "**") if cells[c]["below_flag"] else _pct(cells[c]["coverage"])
                     for c in range(q)]
            lines.append(f"| {est} | {proto} | " + " | ".join(shown) + " |")
        below = [r for r in part["coverage_by_family"] if r["below_flag"]]
        lines += ["", f"Estimator × family below 90 % ({len(below)} of {len(part['coverage_by_family'])}):"
                  + ("" if below else " none."), ""]
        for r in _sort(below, "estimator", "family"):
            lines.append(f"- {r['estimator']}, {r['family']}: {_cov(r)} of {r['n']} class-rounds")
        lines += ["", "Minority detection, fixed-client protocols (a class named minority when its interval's upper "
                  "end, or the point estimate, is below half of 1/Q; the uniform guess names none, recall 0):", "",
                  "| estimator | Γ | true minority class-rounds | interval: precision / recall % (named) | "
                  "point estimate: precision / recall % (named) |", "|---|---|---|---|---|"]
        for r in _sort(part["detection_by_gamma"], "gamma", "estimator"):
            if r["estimator"] == "uniform":
                continue
            lines.append(f"| {r['estimator']} | {r['gamma']:g} | {r['minority']} of {r['class_rounds']} | "
                         f"{_pct(r['interval_precision'])} / {_pct(r['interval_recall'])} ({r['interval_named']}) | "
                         f"{_pct(r['point_precision'])} / {_pct(r['point_recall'])} ({r['point_named']}) |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reference", default="reference/mnist", help="the reference set (or results folder) to read")
    ap.add_argument("--records", default=None, help="a file keeping the records read (read back when it exists)")
    ap.add_argument("--markdown", action="store_true", help="print docs/monitor.md's tables instead of JSON")
    ap.add_argument("--write-calibration", action="store_true",
                    help=f"write the primary split's calibration to src/fedbalance/{CALIBRATION_FILE}")
    args = ap.parse_args(argv)
    reference = Path(args.reference)
    if not reference.is_dir():
        ap.error(f"--reference {reference}: no such folder")
    records = records_of(reference, Path(args.records) if args.records else None)
    if records.empty:
        ap.error(f"--reference {reference}: no job records the composition and an estimate")
    report = measure(records)
    cals = report.pop("calibrations")
    if args.write_calibration:
        target = Path(__file__).resolve().parents[1] / "src" / "fedbalance" / CALIBRATION_FILE
        cal = cals[PRIMARY]
        doc = cal.to_json()
        doc["source"] = {**doc["source"], "reference": reference.as_posix(), "fit_seeds": list(FIT_SEEDS)}
        write_json(doc, target)
        print(f"wrote {target}", file=sys.stderr)
    report["calibration_groups"] = {s: len(c.groups) for s, c in cals.items()}
    print(markdown(report) if args.markdown else json.dumps(report, indent=1, allow_nan=True))


if __name__ == "__main__":
    main()
