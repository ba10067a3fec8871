"""Where the monitor's intervals are fitted and where their coverage is measured: the split of a reference set.

Fixed before the first measurement (issue 79) and not tuned afterwards:

* **Families**: every (experiment, dataset, setting, loss) of the set whose jobs record the round's true composition
  and at least one estimator's estimate (``monitor.record``).
* **Primary split**: the intervals are fitted on seeds ``FIT_SEEDS`` (0–2) of every family and their coverage is
  measured on seeds ``TEST_SEEDS`` (3–4), which exist only in the families run with five seeds.
* **Families without seeds 3–4** (run with seeds 0–2 only): fitted on with their three seeds in the primary split, so
  the primary split measures nothing on them. Their coverage is measured by the **secondary split**: fitted on the
  primary fit part less seed ``SECONDARY_TEST_SEED`` (2) of these families, measured on that seed.
* The nominal level is ``1 - ALPHA`` (95 %); a group whose empirical coverage is below ``FLAG`` (90 %) is reported as
  such.
"""

from __future__ import annotations

FIT_SEEDS: tuple[int, ...] = (0, 1, 2)
"""Seeds the intervals are fitted on (every family)."""

TEST_SEEDS: tuple[int, ...] = (3, 4)
"""Seeds the primary split measures coverage on (families run with five seeds)."""

SECONDARY_TEST_SEED: int = 2
"""The seed the secondary split measures coverage on, in families that have no ``TEST_SEEDS``."""

ALPHA: float = 0.05
"""1 - the intervals' nominal coverage."""

FLAG: float = 0.90
"""Empirical coverage below this is reported as a failure."""

PRIMARY = "primary"
SECONDARY = "secondary"
SPLITS: tuple[str, ...] = (PRIMARY, SECONDARY)


def split_part(split: str, seed: int, seeds_of_family: frozenset[int] | set[int]) -> str | None:
    """"fit", "test" or None (unused) for one job of ``split``, by its seed and the seeds its family holds."""
    short = not set(TEST_SEEDS) <= set(seeds_of_family)
    if split == PRIMARY:
        return "fit" if seed in FIT_SEEDS else "test" if seed in TEST_SEEDS else None
    if split == SECONDARY:
        if short and seed == SECONDARY_TEST_SEED:
            return "test"
        return "fit" if seed in FIT_SEEDS else None
    raise ValueError(f"split {split!r} is not one of {SPLITS}")
