"""Folders and names that become paths: results_dir is never the root or data_dir however it is spelled, and a setting
name is one folder (not '.', '..' or hidden), so no job lands outside its experiment's folder."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from fedbalance.jobs.config import ConfigError, jobs, load_config, read_yaml

QUICK = Path(__file__).resolve().parents[1] / "config" / "quick.yaml"


@pytest.fixture()
def quick() -> dict:
    return copy.deepcopy(read_yaml(QUICK))


@pytest.mark.parametrize("value", ["/tmp/..", "/.", "//.", "/tmp/../", "/./tmp/../.."])
def test_the_root_spelled_otherwise_is_refused(quick: dict, value: str) -> None:
    quick["results_dir"] = value
    with pytest.raises(ConfigError, match="is the filesystem root"):
        load_config(quick)


def test_results_dir_equal_to_data_dir_however_spelled(quick: dict, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "store").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "store")
    for results, data in (("data", str(tmp_path / "data")), (str(tmp_path / "data"), "data/"), ("link", "store"),
                          ("x/../data", "./data")):
        cfg = dict(quick, results_dir=results, data_dir=data)
        with pytest.raises(ConfigError, match="is data_dir too"):
            load_config(cfg)
    assert load_config(dict(quick, results_dir="results", data_dir=str(tmp_path / "data")))["results_dir"] == "results"


@pytest.mark.parametrize("name", [".", "..", ".hidden", "g10\n"])
def test_a_setting_name_is_one_visible_folder(quick: dict, name: str) -> None:
    quick["experiments"]["losses"]["settings"] = {name: {"partition": {"gamma": 10}}}
    quick["experiments"]["losses"].pop("grid", None)
    with pytest.raises(ConfigError, match="setting name .* must match"):
        load_config(quick)


def test_setting_names_with_dots_inside_are_kept(quick: dict) -> None:
    quick["experiments"]["losses"]["settings"] = {"t1.25": {"partition": {"gamma": 10}}}
    quick["experiments"]["losses"].pop("grid", None)
    assert {j.setting for j in jobs(load_config(quick), ["losses"])} == {"t1.25"}
