"""What it would take to decide a claim: the jobs a set lacks at a number of seeds, and their cost.

``jobs_to_decide``: every job of a claim's cells at seeds 0 … n − 1 that the set does not hold, in the study's config
with its seeds extended to n (a twin as the job trained in its place, ``jobs.config.twins``; a derived job as itself,
costing nothing, and its source trained: ``jobs.reuse.derived``), and their estimated device-hours by ``fedbalance cost``'s arithmetic
(``jobs.cost.job_work`` and the shipped calibration; a shape it did not measure estimated by FLOPs).
"""

from __future__ import annotations

import copy
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from fedbalance.common.records import Job


def extended(cfg: Mapping[str, Any], seeds: int) -> dict[str, Any]:
    """``cfg`` with the study's seeds, and each experiment's own list, extended to 0 … ``seeds`` − 1."""
    out = copy.deepcopy(dict(cfg))
    out["seeds"] = sorted(set(out.get("seeds", [0])) | set(range(seeds)))
    for exp in out["experiments"].values():
        if "seeds" in exp:
            exp["seeds"] = sorted(set(exp["seeds"]) | set(range(seeds)))
    return out


def jobs_to_decide(cells: Sequence[tuple[str, ...]], seeds: int, cfg: Mapping[str, Any],
                   held: Collection[tuple[str, str, str, str, int]], device_type: str = "cuda",
                   calibration: Any = None) -> tuple[list[str], float]:
    """(job paths to train, their estimated device-hours) for ``cells`` ((experiment, dataset, setting, loss)) at
    seeds 0 … ``seeds`` − 1, leaving out the jobs ``held`` (by (experiment, dataset, setting, loss, seed)) and those
    the study (``cfg``) does not have; hours on ``calibration`` (a ``jobs.cost.Calibration``), else the calibration
    shipped for ``device_type``."""
    from fedbalance.jobs import cost
    from fedbalance.jobs.config import jobs, resolve_jobs, twins
    from fedbalance.jobs.reuse import derived

    ext = extended(cfg, seeds)
    known = set(jobs(ext))
    free = derived(ext)
    source = twins(ext)
    held = set(held)
    wanted: dict[Job, None] = {}
    for e, d, s, loss in cells:
        for seed in range(seeds):
            job = Job(e, d, s, loss, seed)
            if (e, d, s, loss, seed) in held or job not in known:
                continue
            run = source.get(job, job)
            for j in (run, *((source.get(free[run], free[run]),) if run in free else ())):
                if (j.experiment, j.dataset, j.setting, j.loss, j.seed) not in held:
                    wanted[j] = None
    trained = [j for j in wanted if j not in free]
    specs = resolve_jobs(ext, trained) if trained else {}
    cal = calibration if calibration is not None else cost.shipped_calibration(device_type)
    device_type = cal.device_type
    if specs:
        cal = cost.with_estimates(cal, {cost.job_shape(sp, device_type) for sp in specs.values()})
    hours = sum(cost.job_seconds(cost.job_work(sp, device_type=device_type), cal) for sp in specs.values()) / 3600
    return [j.path for j in wanted], hours
