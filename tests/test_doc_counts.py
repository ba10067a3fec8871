"""The job counts the README and the docs state, recomputed from the configs (jobs, twins, derived jobs)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fedbalance.jobs.config import jobs, load_config, twins
from fedbalance.jobs.reuse import derived

REPO = Path(__file__).resolve().parents[1]


def _counts(name: str) -> tuple[int, int, int, int]:
    """(jobs, trained, twins, derived) of config/<name>.yaml."""
    cfg = load_config(REPO / "config" / f"{name}.yaml")
    n, tw, der = len(jobs(cfg)), len(twins(cfg)), len(derived(cfg))
    return n, n - tw - der, tw, der


def _num(text: str) -> int:
    return int(text.replace(",", ""))


def _flat(rel: str) -> str:
    return " ".join((REPO / rel).read_text().split())


def test_readme_quick_counts() -> None:
    n, trained, tw, der = _counts("quick")
    m = re.search(r"\((\d+) jobs, of which (\d+) train, (\d+) are copied .*? and (\d+) is derived", _flat("README.md"))
    assert m and tuple(map(_num, m.groups())) == (n, trained, tw, der), m and m.groups()


@pytest.mark.parametrize("name", ["quick", "mnist", "config"])
def test_design_counts(name: str) -> None:
    n, trained, tw, der = _counts(name)
    text = _flat("docs/design.md")
    m = re.search(rf"config/{name}\.yaml: ([\d,]+) of ([\d,]+) (?:jobs )?train,? \(?(\d+) (?:twins|are copied),? (\d+) derived",
                  text)
    assert m and tuple(map(_num, m.groups())) == (trained, n, tw, der), m and m.groups()


def test_config_readme_counts() -> None:
    text = _flat("config/README.md")
    n, trained, _, _ = _counts("config")
    m = re.search(r"`config/config\.yaml` is the paper's protocol \(([\d,]+) jobs, of which ([\d,]+) train\)", text)
    assert m and (_num(m[1]), _num(m[2])) == (n, trained)
    m = re.search(r"`config/quick\.yaml` .*?\((\d+) jobs", text)
    assert m and _num(m[1]) == _counts("quick")[0]
