"""The monitor's intervals (``fedbalance.monitor.intervals``): split-conformal coverage on cases built by hand."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from scipy.stats import beta, norm

from fedbalance.evidence.coverage import PRIMARY, SECONDARY, coverage_table, detection_table, split_part
from fedbalance.monitor.intervals import (
    FIXED, Calibration, binomial_interval, conformal_bounds, count_interval, fit, log_share_ratio, named_minority,
    protocol,
)

Q = 10


def noisy_rounds(rng: np.random.Generator, rounds: int, sigma: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(round index, true share, estimated share) of ``rounds`` rounds of Q classes: true shares between 0.05 and
    0.15, the estimate the truth plus Gaussian noise of spread ``sigma`` (kept positive)."""
    truth = rng.uniform(0.05, 0.15, size=(rounds, Q))
    est = np.clip(truth + rng.normal(0.0, sigma, size=truth.shape), 1e-4, None)
    idx = np.repeat(np.arange(5, 5 + rounds), Q)  # one round group (rounds 5 on)
    return idx, truth.ravel(), est.ravel()


def covered_fraction(cal: Calibration, idx: np.ndarray, truth: np.ndarray, est: np.ndarray) -> tuple[int, int, float]:
    hits, widths = 0, []
    for r in range(len(idx) // Q):
        sl = slice(r * Q, (r + 1) * Q)
        low, high = cal.interval("toy", FIXED, int(idx[sl][0]), est[sl])
        hits += int(((truth[sl] >= low) & (truth[sl] <= high)).sum())
        widths.extend(high - low)
    return hits, len(idx), float(np.median(widths))


def test_gaussian_noise_of_known_spread_is_covered_95_percent():
    """Calibrated and tested on exchangeable rounds (same noise), the 95 % intervals cover 95 % of the true shares:
    within 4 standard deviations of a binomial proportion whose spread also counts the calibration's own randomness
    (the coverage given a calibration set of n scores is Beta(n + 1 − l, l), l = n + 1 − k_hi + k_lo)."""
    rng = np.random.default_rng(7)
    sigma = 0.01
    idx, truth, est = noisy_rounds(rng, 300, sigma)
    cal = fit(["toy"] * len(idx), [FIXED] * len(idx), idx, est, truth, Q)
    t_idx, t_truth, t_est = noisy_rounds(rng, 600, sigma)
    hits, n, width = covered_fraction(cal, t_idx, t_truth, t_est)
    n_cal = max(g[2] for g in cal.groups.values())  # the middle share groups hold most scores
    sd = math.sqrt(0.95 * 0.05 * (1 / n + 1 / n_cal))
    assert abs(hits / n - 0.95) < 4 * sd, (hits / n, sd)
    # the width is the known-noise interval's: ±1.96 σ in share terms, within 15 %
    assert width == pytest.approx(2 * norm.ppf(0.975) * sigma, rel=0.15)


def test_coverage_drops_where_exchangeability_fails():
    """Calibrated on noise of spread σ and tested on 3σ, the intervals cover roughly P(|Z| < 1.96 / 3) ≈ 0.49 of the
    true shares (a little more: the score is a log ratio and the estimate is kept positive): the measurement fails
    the interval, as it must."""
    rng = np.random.default_rng(8)
    idx, truth, est = noisy_rounds(rng, 300, 0.01)
    cal = fit(["toy"] * len(idx), [FIXED] * len(idx), idx, est, truth, Q)
    t_idx, t_truth, t_est = noisy_rounds(rng, 600, 0.03)
    hits, n, _ = covered_fraction(cal, t_idx, t_truth, t_est)
    low, high = binomial_interval(hits, n)
    assert high < 0.90
    expected = 2 * norm.cdf(norm.ppf(0.975) / 3) - 1
    assert expected - 0.02 < hits / n < expected + 0.12


def test_conformal_bounds_are_the_order_statistics():
    """n = 39 scores 1..39: the ⌊0.025·40⌋ = 1st and ⌈0.975·40⌉ = 39th smallest; n = 38: orders 0 and 39, neither
    among the scores, so both tails are unbounded; n = 200: the ⌊5.025⌋ = 5th and ⌈195.975⌉ = 196th."""
    scores = np.arange(39, 0, -1, dtype=float)
    assert conformal_bounds(scores) == (1.0, 39.0)
    assert conformal_bounds(scores[1:]) == (-math.inf, math.inf)
    assert conformal_bounds(np.arange(1, 201, dtype=float)) == (5.0, 196.0)


def test_each_tail_misses_at_most_alpha_over_two_by_simulation():
    """The lower bound's miss rate over many calibration draws is ⌊α/2 (n+1)⌋ / (n+1) ≤ α/2 (exact for
    exchangeable scores), here n = 79: 2 / 80 = 0.025."""
    rng = np.random.default_rng(3)
    misses_lo = misses_hi = 0
    trials = 4000
    for _ in range(trials):
        s = rng.standard_normal(80)
        lo, hi = conformal_bounds(s[:79])
        misses_lo += s[79] < lo
        misses_hi += s[79] > hi
    for m in (misses_lo, misses_hi):
        low, high = binomial_interval(m, trials, 0.999)
        assert low <= 2 / 80 <= high


def test_score_and_interval_invert():
    """The interval's ends are the shares whose scores are the bounds: log((low + ε)/(p̂ + ε)) = lo."""
    cal = Calibration({f"toy|{FIXED}|2|{b}": (-0.5, 0.25, 100) for b in range(7)})
    est = np.full(Q, 0.1)
    low, high = cal.interval("toy", FIXED, 9, est)
    assert np.allclose(log_share_ratio(low, est), -0.5)
    assert np.allclose(log_share_ratio(high, est), 0.25)
    # an unfitted group (round 0) gives the whole [0, 1]
    low0, high0 = cal.interval("toy", FIXED, 0, est)
    assert np.all(low0 == 0.0) and np.all(high0 == 1.0)


def test_count_interval_scales_by_the_round_total_and_refuses_unknown_estimators():
    cal = Calibration({f"toy|{FIXED}|2|{b}": (-math.log(2), math.log(2), 100) for b in range(7)}, floor=0.0)
    counts = [100.0] * Q
    low, high = count_interval(cal, "toy", FIXED, 7, counts)
    assert low == pytest.approx([50.0] * Q) and high == pytest.approx([200.0] * Q)
    assert count_interval(cal, "other", FIXED, 7, counts) is None


def test_calibration_json_round_trip_keeps_infinite_bounds():
    cal = Calibration({"a|fixed|0|3": (-math.inf, 0.3, 12), "a|fixed|1|3": (-0.2, math.inf, 20)},
                      source={"split": "primary"})
    back = Calibration.from_json(cal.to_json())
    assert back.groups == cal.groups and back.source == cal.source
    doc = cal.to_json()
    doc["share_edges"] = [0.5]
    with pytest.raises(ValueError, match="SHARE_EDGES"):
        Calibration.from_json(doc)


def test_clopper_pearson_matches_the_beta_quantiles():
    """The exact interval of k of n is (Beta(α/2; k, n−k+1), Beta(1−α/2; k+1, n−k)); 0 of n: upper 1 − (α/2)^(1/n)."""
    low, high = binomial_interval(37, 40)
    assert low == pytest.approx(beta.ppf(0.025, 37, 4)) and high == pytest.approx(beta.ppf(0.975, 38, 3))
    assert binomial_interval(0, 20) == pytest.approx((0.0, 1 - 0.025 ** (1 / 20)))


def test_minority_rule_and_protocols():
    assert named_minority([0.049, 0.05, 0.2], Q).tolist() == [True, False, False]
    assert (protocol("centralised", "fixed"), protocol("fl", "random"), protocol("fl", "fixed")) == (
        "centralised", "random", "fixed")


def test_split_is_the_documented_one():
    five, three = frozenset(range(5)), frozenset(range(3))
    assert [split_part(PRIMARY, s, five) for s in range(5)] == ["fit", "fit", "fit", "test", "test"]
    assert [split_part(PRIMARY, s, three) for s in range(3)] == ["fit", "fit", "fit"]
    assert [split_part(SECONDARY, s, three) for s in range(3)] == ["fit", "fit", "test"]
    assert [split_part(SECONDARY, s, five) for s in range(5)] == ["fit", "fit", "fit", None, None]


def test_tables_count_by_hand():
    """Coverage and detection tables on six class-rounds counted by hand."""
    frame = pd.DataFrame({
        "g": ["a"] * 4 + ["b"] * 2,
        "covered": [True, True, False, True, True, True],
        "width": [0.1, 0.2, 0.3, 0.4, 0.5, 0.5],
        "true_minority": [True, True, False, False, True, False],
        "named": [True, False, True, False, False, False],
        "point_named": [True, True, True, True, False, False],
    })
    cov = coverage_table(frame, ["g"]).set_index("g")
    assert cov.loc["a", "coverage"] == 0.75 and cov.loc["a", "median_width"] == pytest.approx(0.25)
    assert bool(cov.loc["a", "below_flag"]) and not bool(cov.loc["b", "below_flag"])
    det = detection_table(frame, ["g"]).set_index("g")
    assert det.loc["a", "interval_precision"] == 0.5 and det.loc["a", "interval_recall"] == 0.5
    assert det.loc["a", "point_precision"] == 0.5 and det.loc["a", "point_recall"] == 1.0
    assert det.loc["b", "interval_recall"] == 0.0 and math.isnan(det.loc["b", "interval_precision"])
    assert det.loc["a", "uniform_named"] == 0 and det.loc["a", "uniform_recall"] == 0.0


def _rounds(experiment: str, setting: str, with_ends: bool) -> pd.DataFrame:
    """Two seeds × two rounds of a 4-class job (class 3 the minority), the pooled estimate and its interval ends."""
    rows = []
    for seed in (0, 1):
        for r in (0, 1):
            truth = [300.0, 300.0, 300.0, 20.0]
            est = [280.0, 290.0, 260.0, 90.0 + 10 * seed + r]
            row = {"experiment": experiment, "dataset": "mnist", "setting": setting, "loss": "ratio", "seed": seed,
                   "round": r, "cs_pooled": 0.9, "true_composition": json.dumps(truth), "est_pooled": json.dumps(est)}
            if with_ends:
                row["lo_pooled"] = json.dumps([e / 2 for e in est])
                row["hi_pooled"] = json.dumps([e * 2 for e in est])
            rows.append(row)
    return pd.DataFrame(rows)


def test_monitor_under_imbalance_draws_the_recorded_bands():
    """The band panel's minority points are the means over seeds of each seed's mean over its rounds of the share,
    its recorded interval ends and the true share, computed here by hand."""
    from fedbalance.presentation.figures.monitor_imbalance import make_Monitor_under_imbalance

    fig, points = make_Monitor_under_imbalance(rounds=_rounds("losses", "g10", True))
    band = points[points.panel == "mnist · shares"]
    minority = band[band.series == "minority classes: pooled, 95 % interval"].iloc[0]
    est = np.mean([(90 + 10 * s + r) / 920 for s in (0, 1) for r in (0, 1)])
    assert minority["mean"] == pytest.approx(est)
    assert minority["low"] == pytest.approx(est / 2) and minority["high"] == pytest.approx(est * 2)
    truth = band[band.series == "minority classes: true share"].iloc[0]
    assert truth["mean"] == pytest.approx(20 / 920) and math.isnan(truth["low"])
    others = band[band.series == "other classes: pooled, 95 % interval"].iloc[0]
    assert others["mean"] == pytest.approx((280 + 290 + 260) / 3 / 920)
    ax = fig.axes[1]
    assert ax.get_yscale() == "log" and len(ax.collections) == 2  # one shaded band per group
    ys = np.concatenate([c.get_paths()[0].vertices[:, 1] for c in ax.collections])
    assert ys.min() == pytest.approx(est / 2) and ys.max() == pytest.approx(2 * (280 + 290 + 260) / 3 / 920)


def test_fig_monitoring_bands_fall_back_to_the_shipped_calibration(monkeypatch):
    """Rounds without interval columns get the shipped calibration's interval, read through the protocol of the
    monitor experiment (random selection): here a hand-made calibration of score bounds ±log 2 and no floor."""
    from fedbalance.monitor import intervals
    from fedbalance.presentation.figures.monitoring import make_fig_monitoring

    cal = Calibration({f"pooled|random|{rb}|{sb}": (-math.log(2), math.log(2), 100) for rb in range(3) for sb in range(7)},
                      floor=0.0)
    monkeypatch.setattr(intervals, "shipped", lambda: cal)
    fig, points = make_fig_monitoring(rounds=_rounds("monitor", "default", False))
    band = points[(points.panel == "mnist · shares") & (points.series == "minority classes: pooled, 95 % interval")]
    assert len(band) == 2  # rounds 0 and 1
    for _, row in band.iterrows():
        est = np.mean([(90 + 10 * s + row.x) / 920 for s in (0, 1)])
        assert row["mean"] == pytest.approx(est) and row["low"] == pytest.approx(est / 2)
        assert row["high"] == pytest.approx(2 * est)
    monkeypatch.setattr(intervals, "shipped", lambda: Calibration({f"pooled|fixed|{rb}|{sb}": (-1.0, 1.0, 100)
                                                                   for rb in range(3) for sb in range(7)}))
    _, points = make_fig_monitoring(rounds=_rounds("monitor", "default", False))
    assert not points.panel.str.endswith("shares").any()  # no random-selection calibration: no band drawn


def test_compare_reports_the_coverage_of_ours_counted_by_hand(tmp_path, monkeypatch):
    """``compare``'s coverage line: the shipped calibration's intervals (here [p̂/2, 2p̂]) on ours' recorded
    estimates, covered where the true share is within them: 3 of 4 classes in each of 2 rounds."""
    from conftest import write_job

    from fedbalance.common.records import Job
    from fedbalance.evidence.reference import coverage_text
    from fedbalance.jobs import jobfolder
    from fedbalance.monitor import intervals

    cal = Calibration({f"pooled|fixed|{rb}|{sb}": (-math.log(2), math.log(2), 100) for rb in range(3) for sb in range(7)},
                      floor=0.0)
    monkeypatch.setattr(intervals, "shipped", lambda: cal)
    folder = write_job(tmp_path, Job("losses", "mnist", "g10", "ratio", 0), train_loss=[1.0, 0.5],
                       config={"mode": "fl", "selection": "fixed", "partition": {"scheme": "imbalance", "gamma": 10}})
    metrics = jobfolder.read_metrics(folder)
    rows = [r for r in jobfolder.round_records(folder)]
    for r in rows:
        r["true_composition"] = [100.0, 100.0, 100.0, 10.0]
        r["est_pooled"] = [100.0, 60.0, 120.0, 30.0]  # shares ×1, ×0.6, ×1.2, ×3: the last one missed
        r["cs_pooled"] = 0.9
    jobfolder.write(folder, metrics, jobfolder.rounds_text(rows))
    text = coverage_text(tmp_path)
    low, high = binomial_interval(6, 8)
    assert f"- pooled: 75.0 % [{100 * low:.1f}, {100 * high:.1f}] of 8 class-rounds" in text and "(1 jobs" in text
    assert max(map(len, text.splitlines())) < 200  # compare's rows
    monkeypatch.setattr(intervals, "shipped", lambda: None)
    assert coverage_text(tmp_path) == ""


def test_evaluate_fits_on_seeds_0_2_only_and_decides_minority_by_the_upper_end():
    """Seeds 0–2 estimate every share exactly, seeds 3–4 at twice it (but class 3's): fitted on seeds 0–2 alone the
    intervals are the estimate itself, so no test class-round but class 3's is covered (had a test seed leaked into the fit, the upper bound
    would reach log 1 and cover). The minority decisions follow the shares by hand (cut 1/(2Q) = 0.05)."""
    from fedbalance.evidence.coverage import RECORD_COLUMNS, evaluate

    truth = [0.02, 0.02, 0.03, 0.07] + [0.86 / 6] * 6
    rows = []
    for seed in range(5):
        for r in range(45):
            for c, p in enumerate(truth):
                est = p if seed < 3 or c == 3 else 2 * p  # class 3: exact everywhere
                rows.append(("losses", "mnist", "g10", "ce", seed, FIXED, 10.0, r, "toy", c, 1000.0, est, p))
    test, cal = evaluate(pd.DataFrame(rows, columns=list(RECORD_COLUMNS)), PRIMARY, Q)
    assert sorted(test.seed.unique()) == [3, 4] and cal.source["fit_jobs"] == 3
    fitted = test[test.fitted_group]
    assert len(fitted) and not fitted[fitted.cls != 3].covered.any() and fitted[fitted.cls == 3].covered.all()
    assert np.allclose(fitted.high, fitted.est_share)
    assert (test.true_minority == (test.true_share < 0.05)).all()
    assert (test.named == (test.high < 0.05)).all() and (test.point_named == (test.est_share < 0.05)).all()
    # from round 5 on (3 × 40 calibration scores a group; rounds 0–4 have too few to bound a tail: [0, 1]) classes 0
    # and 1 read 0.04 (Q·p̂ = 0.4, the group fitted on class 2's 0.03): upper end 0.04, named; class 2 reads 0.06
    # (Q·p̂ = 0.6, the group of class 3's 0.07): upper end 0.06, not named though a true minority
    late = test[test["round"] >= 5]
    assert late[late.cls < 2].named.all() and not test[test.cls == 2].named.any()
    assert not test[test["round"] < 5].named.any()
    # class 3 reads 0.07 exactly, upper end 0.07: above the cut 0.05, not named
    assert np.allclose(late[late.cls == 3].high, 0.07) and not late[late.cls == 3].named.any()
    assert test[test.cls == 2].true_minority.all() and np.allclose(late[late.cls == 2].high, 0.06)


def test_a_run_records_the_shipped_intervals_beside_each_estimate():
    """``fl.record_monitor`` writes lo_/hi_ for every calibrated estimator, equal to the shipped calibration's interval
    of its estimate for the job's protocol; none without a protocol. The shipped calibration covers the recorded
    estimators under both FL protocols."""
    import torch

    from fedbalance.engine.fl import empty_row, record_monitor
    from fedbalance.monitor import intervals
    from fedbalance.monitor.monitor import Estimate

    cal = intervals.shipped()
    assert cal is not None and all(cal.covers(e, p) for e in ("pooled", "released", "nnls", "paper")
                                   for p in (intervals.FIXED, intervals.RANDOM))
    counts = [2000.0, 2000.0, 300.0, 2000.0, 300.0, 2000.0, 2000.0, 300.0, 2000.0, 2000.0]
    observed = {"estimates": {"pooled": Estimate(torch.tensor(counts, dtype=torch.float64), torch.ones(10), "pooled", 0)},
                "weights": torch.ones(10)}
    row = empty_row(7)
    record_monitor(row, observed, np.array(counts), [100] * 20, intervals.FIXED)
    total = sum(counts)
    low, high = cal.interval("pooled", intervals.FIXED, 7, [c / total for c in counts])
    assert row["lo_pooled"] == pytest.approx(list(low * total)) and row["hi_pooled"] == pytest.approx(list(high * total))
    assert row["lo_released"] is None
    bare = empty_row(7)
    record_monitor(bare, observed, np.array(counts), [100] * 20)
    assert bare["lo_pooled"] is None and bare["est_pooled"] == counts


def _benchmark():
    from conftest import load_script

    return load_script("benchmarks/monitor_intervals.py")


def test_benchmark_prints_the_split_and_counts_the_test_rounds(tmp_path, capsys):
    """benchmarks/monitor_intervals.py on records kept in a file: the JSON's test part is seeds 3–4 (2 seeds × 40
    rounds × Q classes of one family), the secondary split seed 2 of a three-seed family; a missing --reference is
    one line naming it, before any work."""
    from fedbalance.evidence.coverage import RECORD_COLUMNS

    rng = np.random.default_rng(1)
    rows = []
    for setting, seeds in (("g10", 5), ("g50", 3)):
        for seed in range(seeds):
            for r in range(40):
                truth = np.array([0.13] * 7 + [0.03] * 3)
                est = truth * np.exp(rng.normal(0, 0.2, Q))
                est /= est.sum()
                for c in range(Q):
                    rows.append(("losses", "mnist", setting, "ce", seed, FIXED, float(setting[1:]), r, "pooled", c,
                                 1000.0, est[c], truth[c]))
    cache = tmp_path / "records.pkl"
    pd.DataFrame(rows, columns=list(RECORD_COLUMNS)).to_pickle(cache)
    bench = _benchmark()
    bench.main(["--reference", str(tmp_path), "--records", str(cache)])
    report = json.loads(capsys.readouterr().out)
    assert report["split"]["fit_seeds"] == [0, 1, 2] and report["split"]["test_seeds"] == [3, 4]
    (primary,) = report["splits"]["primary"]["coverage_by_estimator"]
    assert primary["n"] == 2 * 40 * Q and report["splits"]["primary"]["test_families"] == ["losses/mnist/g10/ce"]
    (secondary,) = report["splits"]["secondary"]["coverage_by_estimator"]
    assert secondary["n"] == 40 * Q and report["splits"]["secondary"]["test_families"] == ["losses/mnist/g50/ce"]
    with pytest.raises(SystemExit):
        bench.main(["--reference", str(tmp_path / "nowhere")])
    assert "--reference" in capsys.readouterr().err
