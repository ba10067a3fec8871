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


@pytest.fixture(scope="module")
def paper_on_h200() -> tuple[dict, list]:
    """``fedbalance cost --config config/config.yaml --device cuda``'s rows and shape rows, from the shipped H200
    calibration (no device is timed: the figures are the same on every machine)."""
    from fedbalance.jobs import cost

    cfg = load_config(REPO / "config" / "config.yaml")
    works = cost.study_work(cfg, device_type="cuda")
    cal = cost.with_estimates(cost.shipped_calibration("cuda"), {w.shape for w in works})
    rows, total = cost.estimate(works, cal, list(cfg["experiments"]))
    return {r.experiment: r for r in [*rows, total]}, cost.shape_rows(works, cal)


def test_the_whole_papers_gpu_hours_in_the_readme_and_performance_page(paper_on_h200) -> None:
    """The README's hardware table and docs/performance.md's answer and cost table say what the cost command prints
    (they said 2,748 jobs and 1,207 hours after the Fer2013 partitions had moved to the real counts: 900.6)."""
    rows, shapes = paper_on_h200
    total = rows["total"]
    readme = _flat("README.md")
    m = re.search(r"\| whole paper \| `config/config\.yaml` \| one NVIDIA H200 \| ([\d,]+) trained jobs, about ([\d,]+) GPU-hours",
                  readme)
    assert m and (_num(m[1]), _num(m[2])) == (total.jobs, round(total.hours)), m and m.groups()
    perf = _flat("docs/performance.md")
    m = re.search(r"The whole paper \(config/config\.yaml, ([\d,]+) trained jobs\) on one H200, one job at a time: about "
                  r"([\d,]+) device-hours, (\d+) % of them from shapes measured .*?, (\d+) % estimated .*?, (\d+) % scaled", perf)
    shares = dict(re.findall(r"(measured|estimated|batch-scaled) (\d+) %", total.basis))
    assert m and tuple(map(_num, m.groups())) == (total.jobs, round(total.hours), int(shares["measured"]),
                                                  int(shares["estimated"]), int(shares["batch-scaled"])), m and m.groups()

    def row(*names: str) -> tuple[int, str]:
        return sum(rows[n].jobs for n in names), f"{sum(rows[n].hours for n in names):,.1f}"

    for label, names in (("total", ("total",)), ("`mismatch_fer2013`, `mfe_fer2013` (ResNet18, 48×48)",
                                                 ("mismatch_fer2013", "mfe_fer2013")),
                         ("`clients_femnist`, `dynamic` (ResNet50)", ("clients_femnist", "dynamic")),
                         ("`losses`", ("losses",))):
        m = re.search(rf"\| {re.escape(label)} \| ([\d,]+) \| ([\d,.]+) \|", perf)
        assert m and (_num(m[1]), m[2]) == row(*names), (label, m and m.groups())
    fer = sum(s.hours for s in shapes if s.experiment.startswith("resnet18/1x48x48/"))
    assert f"at 48×48 (Fer2013) {round(fer)} h estimated" in perf


def test_the_mnist_job_count_in_the_readme() -> None:
    """The README's MNIST row counts the jobs ``fedbalance cost`` prices (the trained ones: it said 929 before the
    readings family's 18)."""
    from fedbalance.jobs import cost

    works = cost.study_work(load_config(REPO / "config" / "mnist.yaml"), device_type="cpu")
    m = re.search(r"\| MNIST part of the paper \| `config/mnist\.yaml` \| CPU, one job a core \| ([\d,]+) trained jobs",
                  _flat("README.md"))
    assert m and _num(m[1]) == len(works) == _counts("mnist")[1], m and m.groups()
