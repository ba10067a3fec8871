"""How long the claims and the tables' cells take to compute from a reference set's frames.

Reads ``--reference`` (default reference/mnist) once (``prose.reference_frames``), then times, ``--repeat`` times each
(the median printed): ``claims()`` on the whole set, ``claims()`` on one cell's jobs (``losses`` Γ = 10, CE and the Ratio
Loss, seeds 0–2: 6 jobs, the size of the claims tests' frames), and ``cell_values`` over every table spec. Prints one JSON
document::

    python benchmarks/claims_speed.py --reference reference/mnist --repeat 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from fedbalance.presentation import prose
from fedbalance.presentation.claims import claims
from fedbalance.presentation.table_specs import TABLES
from fedbalance.presentation.tables import cell_values


def _median_s(call, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return round(statistics.median(times), 4)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reference", type=Path, default=Path("reference/mnist"))
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    final, rounds = prose.reference_frames(args.reference)

    def one_cell(frame):
        return frame[(frame.experiment == "losses") & (frame.setting == "g10") & frame.loss.isin(["ce", "ratio"])
                     & (frame.seed < 3)]

    small_final, small_rounds = one_cell(final), one_cell(rounds)
    out = {
        "reference": str(args.reference),
        "jobs": int(len(final)),
        "repeat": args.repeat,
        "claims_whole_set_s": _median_s(lambda: claims(final, rounds), args.repeat),
        "claims_one_cell_s": _median_s(lambda: claims(small_final, small_rounds), args.repeat),
        "one_cell_jobs": int(len(small_final)),
        "cell_values_every_table_s": _median_s(lambda: [cell_values(s, final, rounds) for s in TABLES.values()],
                                               args.repeat),
        "tables": len(TABLES),
    }
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
