"""The measures beside CS: TV, share ratios, the worst class's factor and max/min, against values computed by hand."""

from __future__ import annotations

import csv
import json
import math
import random
from pathlib import Path

import pytest

from fedbalance.common.records import (
    TRUE_IMBALANCE, composition_measures, imbalance_ratio, share_ratios, total_variation, worst_share_factor,
)

ROOT = Path(__file__).resolve().parents[1]
REFERENCE_JOB = ROOT / "reference" / "mnist" / "losses" / "mnist" / "g10" / "ce" / "seed0"


def test_measures_of_a_three_class_case_by_hand() -> None:
    est, truth = [1, 1, 2], [10, 20, 10]  # shares 1/4 1/4 1/2 against 1/4 1/2 1/4
    assert total_variation(est, truth) == pytest.approx(0.25)
    assert share_ratios(est, truth) == pytest.approx([1.0, 0.5, 2.0])
    assert worst_share_factor(est, truth) == pytest.approx(2.0)
    assert imbalance_ratio(est) == pytest.approx(2.0) and imbalance_ratio(truth) == pytest.approx(2.0)
    m = composition_measures("x", est, truth)
    assert m == {"tv_x": pytest.approx(0.25), "shares_x": pytest.approx([1.0, 0.5, 2.0]),
                 "worst_share_x": pytest.approx(2.0), "imbalance_x": pytest.approx(2.0)}


def test_cosine_is_blind_where_the_share_ratio_is_not() -> None:
    """A class of true share 1 % estimated at 5 %: CS stays near 1, the class is off x5."""
    truth = [11.0] * 9 + [1.0]  # the last class 1 % of 100
    est = [95.0 / 9] * 9 + [5.0]
    cs = sum(a * b for a, b in zip(est, truth)) / math.hypot(*est) / math.hypot(*truth)
    assert cs > 0.99
    assert share_ratios(est, truth)[-1] == pytest.approx(5.0)
    assert worst_share_factor(est, truth) == pytest.approx(5.0)
    assert total_variation(est, truth) == pytest.approx(0.04)


def test_one_minus_tv_is_the_instance_accuracy_when_totals_agree() -> None:
    rng = random.Random(3)
    for _ in range(20):
        truth = [rng.randint(0, 50) for _ in range(7)]
        truth[0] += 1
        raw = [rng.random() for _ in range(7)]
        est = [r * sum(truth) / sum(raw) for r in raw]
        accuracy = sum(min(a, b) for a, b in zip(est, truth)) / sum(truth)
        assert 1 - total_variation(est, truth) == pytest.approx(accuracy)


def test_a_class_estimated_at_zero_is_infinitely_off_and_an_absent_class_is_skipped() -> None:
    assert worst_share_factor([0, 5, 5], [2, 4, 4]) == math.inf
    assert imbalance_ratio([0, 5, 5]) == math.inf
    ratios = share_ratios([1, 1, 2], [0, 2, 2])
    assert math.isnan(ratios[0]) and ratios[1:] == pytest.approx([0.5, 1.0])
    assert worst_share_factor([1, 1, 2], [0, 2, 2]) == pytest.approx(2.0)


@pytest.mark.skipif(not REFERENCE_JOB.is_dir(), reason="no reference set in this checkout")
def test_a_rounds_csv_without_the_measures_gets_them_at_read_time() -> None:
    from fedbalance.jobs.replay import recorded

    rows = recorded(REFERENCE_JOB)
    with open(REFERENCE_JOB / "rounds.csv", newline="") as fh:
        raw = list(csv.DictReader(fh))
    assert not any(c.startswith("tv_") for c in raw[0])
    for row, rec in zip(rows, raw, strict=True):
        truth = json.loads(rec["true_composition"])
        est = json.loads(rec["est_released"])
        p, q = [v / sum(truth) for v in truth], [v / sum(est) for v in est]
        assert row["tv_released"] == pytest.approx(sum(abs(a - b) for a, b in zip(p, q)) / 2)
        assert row["imbalance_released"] == pytest.approx(max(est) / min(est))
        assert row["shares_released"] == pytest.approx([b / a for a, b in zip(p, q)])
        assert row[TRUE_IMBALANCE] == pytest.approx(max(truth) / min(truth))
        assert row["tv_uniform"] == pytest.approx(sum(abs(a - 0.1) for a in p) / 2)
        assert "tv_pooled" in row  # a history estimator computed at read time gets them too
