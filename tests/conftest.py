"""Helpers shared by the test modules: synthetic job folders (``write_job``); the checkout the tests run on."""

from __future__ import annotations

import functools
import os
from pathlib import Path

import numpy as np
import pytest

from fedbalance.jobs import jobfolder
from fedbalance.common.records import Job
from fedbalance.common.records import cs_column


REPO_ROOT = Path(__file__).resolve().parents[1]
"""The checkout the tests run on."""


def load_script(relative: str, name: str | None = None):
    """A benchmark or script of the checkout (``benchmarks/readings.py``) imported as a module (they are no package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name or Path(relative).stem, REPO_ROOT / relative)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_job(
    root: Path,
    job: Job,
    *,
    acm: float = 0.5,
    auc: float = 0.9,
    acc_majority: float = 0.95,
    mean_cs: float = 0.7,
    train_loss: list[float] | None = None,
    cs: dict[str, list[float]] | None = None,
    emp: tuple[list[float], list[float]] | None = None,
    class_counts: list[list[int]] | None = None,
    monitor: dict[str, float] | None = None,
    config: dict | None = None,
    spec_of: str | Path | None = None,
) -> Path:
    """Write a synthetic ``metrics.json`` + ``rounds.csv`` for ``job``; return its folder. ``config``: keys set in
    (or over) its metrics.json's ``config``; ``spec_of``: a study config file whose spec of ``job`` is the whole
    ``config`` instead (a job of that study's protocol, as a reference set's ``collect`` checks)."""
    d = root / job.path
    d.mkdir(parents=True, exist_ok=True)
    train_loss = train_loss or [1.0, 0.5]
    n = len(train_loss)
    counts = class_counts or [[5, 5, 1], [5, 0, 1]]
    spec = (_spec(spec_of, job) if spec_of is not None else
            {"partition": {"scheme": "imbalance"}, "minority_classes": [2], "monitor": {}, **(config or {})})
    # each class's accuracy: Ac.M on the minority classes, the majority accuracy on the others (jobfolder.check)
    minority = spec.get("minority_classes", [])
    per_class = [acm if q in minority else acc_majority for q in range(max([len(counts[0]) - 1, *minority]) + 1)]
    metrics = {
        "job": {"experiment": job.experiment, "dataset": job.dataset, "setting": job.setting, "loss": job.loss,
                "seed": job.seed},
        "config": spec,
        "final": {"acc": 0.9, "acc_minority": acm, "acc_majority": acc_majority, "auc_micro": auc,
                  "auc_hard": auc, "auc_macro": auc - 0.01, "per_class_acc": per_class, "train_loss": train_loss[-1]},
        "partition": {"class_counts": counts, "global_counts": list(np.sum(counts, axis=0).tolist()), "gamma": 5.0,
                      "cs": [mean_cs, mean_cs], "mean_cs": mean_cs, "num_samples": int(np.sum(counts))},
        "monitor": {"mean_cs": monitor} if monitor else None,
        "acknowledged_round": None,
        "device": "cpu",
        "versions": {},
        "wall_time_s": 1.5,
        "rounds": n,
    }
    rows = []
    for i in range(n):
        row = dict(round=i + 1, train_loss=train_loss[i], acc=0.9, acc_minority=acm, acc_majority=acc_majority,
                   auc_micro=auc, auc_hard=auc, seconds=0.1, true_composition=[10, 6, 2])
        for k, v in (cs or {}).items():
            row[cs_column(k)] = v[i]
        if emp:
            row["emp_cos"], row["emp_cv"] = emp[0][i], emp[1][i]
        rows.append(row)
    jobfolder.write(d, metrics, jobfolder.rounds_text(rows))
    return d


def _spec(config: str | Path, job: Job) -> dict:
    from fedbalance.jobs.config import resolve_job

    return resolve_job(_study(str(Path(config).resolve())), job).as_dict()


@functools.cache
def _study(config: str) -> dict:
    """A study config, loaded and validated once per test process (``write_job(spec_of=...)`` asks for it per job)."""
    from fedbalance.jobs.config import load_config

    return load_config(config)


def seal_set(root: Path, config: str | Path) -> None:
    """Seal ``root`` as ``collect`` would (``fedbalance.jobs.seal``): a reference set of the study ``config``."""
    from fedbalance.jobs import seal

    seal.seal(root, config)


def needs_ci_tool(missing: str | None) -> None:
    """Skip the test when a tool that CI installs (pdflatex, the catalog's venv) is ``missing`` here, naming it; fail
    instead under CI (FEDBALANCE_CI=1, set by .ci/run), where every such test must run."""
    if missing is None:
        return
    if os.environ.get("FEDBALANCE_CI") == "1":
        pytest.fail(f"{missing} (FEDBALANCE_CI=1: .ci/run installs it, so this test must run)")
    pytest.skip(missing)


@pytest.fixture(scope="module")
def torch_one_thread():
    """One intra-op torch thread for a module: on a small shared CPU, thread contention makes tiny ops 10x slower."""
    import torch

    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


@pytest.fixture(scope="session")
def tiny_job_data():
    """A separable 10-class FL job's data (``fl.JobData``): 30 training images a class, 6 test images a class, the
    first 4 test images of each class as the aux set, minority classes 2, 4, 7."""
    import torch

    from fedbalance.engine.fl import JobData

    q = 10
    g = torch.Generator().manual_seed(0)
    y = torch.arange(q).repeat_interleave(30)
    x = (torch.rand(len(y), 1, 28, 28, generator=g) * 60 + y.reshape(-1, 1, 1, 1) * 19).to(torch.uint8)
    yt = torch.arange(q).repeat_interleave(6)
    xt = (torch.rand(len(yt), 1, 28, 28, generator=g) * 60 + yt.reshape(-1, 1, 1, 1) * 19).to(torch.uint8)
    aux = torch.cat([torch.nonzero(yt == c).flatten()[:4] for c in range(q)])
    return JobData(x, y, xt, yt, xt[aux], yt[aux], q, (2, 4, 7))


SRC = Path(__file__).resolve().parents[1] / "src"
REFERENCE_SETS = Path(__file__).resolve().parents[1] / "reference"


def pytest_configure(config: pytest.Config) -> None:
    """The tests test this checkout: ``fedbalance`` comes from its src/ (pyproject's ``pythonpath``), in the test
    processes and in the ones they start (``PYTHONPATH``), never from another clone installed in the same
    environment. A pytest-xdist worker runs torch on one thread (two workers share the two cores)."""
    import fedbalance

    where = Path(fedbalance.__file__).resolve().parent
    if where != SRC / "fedbalance":
        raise pytest.UsageError(f"the tests import fedbalance from {where}, not this checkout's {SRC}: run pytest "
                                "from the checkout's root (pyproject.toml puts src/ first)")
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and Path(p).resolve() != SRC]
    os.environ["PYTHONPATH"] = os.pathsep.join([str(SRC), *paths])
    if os.environ.get("PYTEST_XDIST_WORKER"):
        import torch

        torch.set_num_threads(1)


def reference_digest() -> dict[str, int]:
    """Every file of the committed reference sets: relative path -> a hash of its bytes."""
    return {str(p.relative_to(REFERENCE_SETS)): hash(p.read_bytes()) for p in sorted(REFERENCE_SETS.rglob("*")) if p.is_file()}


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[_REFERENCE_KEY] = reference_digest()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """The test suite leaves the committed reference sets byte for byte as it found them (tests copy them)."""
    before = session.config.stash.get(_REFERENCE_KEY, None)
    if before is None:
        return
    after = reference_digest()
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    if changed:
        session.config.get_terminal_writer().line(
            f"ERROR: the test run changed {len(changed)} file(s) of {REFERENCE_SETS} (e.g. {changed[0]})", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


_REFERENCE_KEY = pytest.StashKey[dict]()


SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
"""The real datasets beside the checkout (../shared/data: MNIST, Fer2013, a partial LEAF FEMNIST; MANIFEST.md)."""


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """../shared/data; the test is skipped where it is absent, and fails under CI (which has it)."""
    needs_ci_tool(None if (SHARED_DATA / "stage.sh").is_file() else f"the real datasets ({SHARED_DATA}) are not here")
    return SHARED_DATA


@pytest.fixture(scope="session")
def staged_data(shared_data, tmp_path_factory) -> Path:
    """The real datasets unpacked once per session in the README's layout (``../shared/data/stage.sh DEST``)."""
    import subprocess

    dest = tmp_path_factory.mktemp("real-data")
    subprocess.run(["bash", str(shared_data / "stage.sh"), str(dest)], check=True, capture_output=True)
    return dest
