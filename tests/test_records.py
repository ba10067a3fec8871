"""The setting-name grammar of fedbalance.common.records: format/parse round trips, and config.settings' names."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from fedbalance.jobs.config import load_config, settings
from fedbalance.common.records import parse_setting, plus_minus, setting_name, setting_value

CONFIGS = [Path(__file__).resolve().parents[1] / "config" / f for f in ("config.yaml", "quick.yaml")]


@pytest.mark.parametrize("pairs,name", [
    ((("g", 10),), "g10"),
    ((("g", 1),), "g1"),
    ((("c", 5), ("g", 10)), "c5_g10"),
    ((("t", 1.25),), "t1.25"),
    ((("t", 1.0),), "t1"),
    ((("a", 0.1),), "a0.1"),
    ((("b", 0.02),), "b0.02"),
    ((("k", 50),), "k50"),
    ((("bs", 32), ("ep", 4)), "bs32_ep4"),
    ((("lr", 1e-05),), "lr1e-05"),
    ((("x", -2),), "x-2"),
])
def test_format_and_parse_round_trip(pairs: tuple, name: str) -> None:
    assert setting_name(*pairs) == name
    parsed = parse_setting(name)
    assert [p for p, _ in parsed] == [p for p, _ in pairs]
    assert [float(v) for _, v in parsed] == [float(v) for _, v in pairs]
    assert setting_name(*parsed) == name


@pytest.mark.parametrize("name", ["default", "S", "E", "g", "10", "g10_", "g_10", "c5-g10"])
def test_parse_rejects_names_outside_the_grammar(name: str) -> None:
    with pytest.raises(ValueError):
        parse_setting(name)
    assert setting_value(name, "g") is None


def test_setting_value() -> None:
    assert setting_value("c5_g10", "g") == 10 and setting_value("c5_g10", "c") == 5
    assert setting_value("t1.25", "t") == 1.25 and setting_value("g10", "c") is None


def _by_hand(value: object) -> str:
    """A grid value as config.settings wrote it before records held the grammar."""
    return format(value, "g") if isinstance(value, float) else str(value)


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_config_setting_names_unchanged(path: Path) -> None:
    cfg = load_config(path)
    for name, exp in cfg["experiments"].items():
        grid = exp.get("grid", {})
        expected = list(exp.get("settings", {}))
        expected += [] if not grid else ["_".join(f"{p}{_by_hand(v)}" for p, v in combo)
                     for combo in itertools.product(*[[(p, v) for v in ax["values"]] for p, ax in grid.items()])]
        got = list(settings(cfg, name))
        assert got == expected, name
        for s in got:
            if s not in exp.get("settings", {}):
                assert setting_name(*parse_setting(s)) == s


def test_known_names_of_the_full_protocol() -> None:
    cfg = load_config(CONFIGS[0])
    assert "t1.25" in settings(cfg, "t_ra") and "c5_g10" in settings(cfg, "mismatch")
    assert "k50" in settings(cfg, "clients_cifar10") and "g100" in settings(cfg, "losses")


def test_plus_minus_is_the_one_cell_format() -> None:
    import statistics

    values = [0.8312, 0.8101, 0.8523]
    mean, std = statistics.fmean(values) * 100, statistics.stdev(values) * 100
    assert plus_minus(mean, std, 2) == "83.12 ± 2.11"  # 83.1200, 2.1100 by hand
    assert plus_minus(0.97912, float("nan"), 4) == "0.9791"  # one seed: the mean alone
