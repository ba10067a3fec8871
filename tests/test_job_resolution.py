"""Reliability: the workflow and the CLI resolve a job alike, and the remaining hostile cases.

N1 a job's data is its dataset's; N2 twins under ``path: auto``; N3 a loss variant cannot change the
shared partition; N4 ``cost --calibration`` on a folder; N5 ``results_dir`` empty or the root; N6 names
with '/'; D10 an unusable ``--out``; a full disk; ``--report`` on a partial results folder.
docs/reliability.md lists each guarantee with its test.
"""

from __future__ import annotations

import copy
import errno
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from fedbalance.jobs.config import ConfigError, dataset_spec, load_config, configured_job
from fedbalance.common.records import Job

ROOT = Path(__file__).resolve().parents[1]
SNAKEFILE = ROOT / "workflow" / "Snakefile"
QUICK = ROOT / "config" / "quick.yaml"


@pytest.fixture()
def quick() -> dict:
    return yaml.safe_load(QUICK.read_text())


def _variant(cfg: dict, params: dict, name: str = "rv") -> dict:
    cfg = copy.deepcopy(cfg)
    cfg.setdefault("loss_variants", {})[name] = {"loss": "ratio", "params": params}
    cfg["experiments"]["losses"]["losses"].append(name)
    return cfg


# --- N1: a job trains on its dataset's data, the one prepared and partitioned --------------------------


@pytest.mark.parametrize(
    "where",
    [
        lambda c: c["experiments"]["losses"].setdefault("params", {}),
        lambda c: c["experiments"]["losses"].setdefault("dataset_params", {}).setdefault("mnist", {}),
        lambda c: c["experiments"]["early"]["settings"]["S"],
    ],
    ids=["params", "dataset_params", "setting"],
)
def test_source_below_the_dataset_is_refused(quick: dict, where) -> None:
    where(quick)["source"] = "mnist"
    with pytest.raises(ConfigError, match=r"sets source = 'mnist', but datasets\.mnist has 'mnist5k'"):
        load_config(quick)


def test_options_in_a_variant_are_refused_naming_it(quick: dict) -> None:
    with pytest.raises(ConfigError, match=r"loss_variants\.rv\.params sets options"):
        load_config(_variant(quick, {"options": {"letters_only": True}}))


def test_data_preparation_reads_the_defaults_options(quick: dict) -> None:
    quick["defaults"]["source"] = quick["datasets"]["mnist"].pop("source")
    quick["defaults"]["options"] = {}
    cfg = load_config(quick)
    assert dataset_spec(cfg, "mnist")["source"] == "mnist5k"
    job = configured_job(cfg, Job("losses", "mnist", "g10", "ce", 0))
    assert (job["source"], job["options"]) == (dataset_spec(cfg, "mnist")["source"], dataset_spec(cfg, "mnist")["options"])


# --- N3: every loss of a setting shares its partition file ---------------------------------------------


@pytest.mark.parametrize(
    "params, key",
    [({"partition": {"gamma": 5}}, "partition.gamma"), ({"switch_round": 2}, "switch_round"),
     ({"minority_classes": [1]}, "minority_classes")],
)
def test_variant_that_changes_the_partition_is_refused(quick: dict, params: dict, key: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(_variant(quick, params))
    msg = str(err.value)
    assert "loss_variants.rv.params" in msg and f"changes {key}" in msg and "in a setting of experiments.losses" in msg


def test_first_loss_as_the_variant_is_named(quick: dict) -> None:
    cfg = _variant(quick, {"partition": {"gamma": 5}})
    cfg["experiments"]["losses"]["losses"] = ["rv", "ce"]
    with pytest.raises(ConfigError, match=r"loss_variants\.rv\.params changes partition\.gamma"):
        load_config(cfg)


def test_variant_that_keeps_the_partition_is_accepted(quick: dict) -> None:
    load_config(_variant(quick, {"monitor": {"variant": "released"}}))


# --- N5, N6: output folder and names ----------------------------------------------------------------


@pytest.mark.parametrize("value, words", [("", "empty"), ("  ", "empty"), ("/", "filesystem root"),
                                          ("//", "filesystem root"), ("data", "is data_dir too"),
                                          ("./data/", "is data_dir too")])
def test_results_dir_must_be_a_folder_of_its_own(quick: dict, value: str, words: str) -> None:
    quick["results_dir"] = value
    with pytest.raises(ConfigError, match=words):
        load_config(quick)


@pytest.mark.parametrize("level", ["experiments", "datasets", "loss_variants"])
@pytest.mark.parametrize("name", ["a/b", "..", "x.y", ""])
def test_names_that_are_not_one_folder_are_refused(quick: dict, level: str, name: str) -> None:
    quick.setdefault("loss_variants", {})["rv"] = {"loss": "ratio"}
    first = next(iter(quick[level]))
    quick[level][name] = quick[level][first]
    with pytest.raises(ConfigError, match=rf"^{level}: name '{name}' is not allowed"):
        load_config(quick)


# --- N2: a twin of a job trained under path: auto -------------------------------------------------


def _tiny(loss: str = "ce", setting: str = "g10", experiment: str = "losses") -> dict:
    cfg = load_config(QUICK)
    spec = configured_job(cfg, Job(experiment, "mnist", setting, loss, 0))
    spec["partition"].update(num_clients=4, majority_samples=6)
    spec.update(clients_per_round=2, rounds=1, local_epochs=1, batch_size=16, path="auto")
    return spec


def test_twin_of_a_job_trained_under_path_auto(tmp_path: Path) -> None:
    import torch

    from fedbalance.jobs.run import run_job
    from fedbalance.jobs.reuse import write_twin

    torch.set_num_threads(1)
    spec = _tiny()
    metrics = run_job(spec, tmp_path / "src", device="cpu", progress=False)
    assert metrics["config"]["path"] == "auto" and metrics["path"] == "sequential"
    twin = {**spec, "experiment": "beyond", "setting": "g10"}
    out = write_twin(tmp_path / "src", tmp_path / "twin", twin)
    assert out["final"] == metrics["final"] and out["config"]["experiment"] == "beyond"
    assert out["reused_from"] == str(tmp_path / "src")


def test_twin_of_an_older_metrics_file_with_the_resolved_path() -> None:
    from fedbalance.jobs.reuse import twin_metrics

    spec = _tiny()
    old = {"config": {**spec, "path": "sequential"}, "final": {"acc": 0.5}}
    twin = {**spec, "experiment": "beyond"}
    assert twin_metrics(old, twin, "x")["config"] == twin
    no_key = {k: v for k, v in twin.items() if k != "path"}
    assert twin_metrics(old, no_key, "x")["config"] == no_key
    with pytest.raises(ConfigError, match="other parameters"):
        twin_metrics(old, {**twin, "path": "vectorised"}, "x")
    with pytest.raises(ConfigError, match="other parameters"):
        twin_metrics(old, {**twin, "lr": 0.5}, "x")


# --- N4: cost --calibration naming a folder ----------------------------------------------------------


def test_cost_calibration_folder_fails_before_measuring(tmp_path: Path, capsys, monkeypatch) -> None:
    import fedbalance.jobs.cost
    from fedbalance.cli import main

    def no_measuring(*args, **kwargs):
        raise AssertionError("calibration started")

    monkeypatch.setattr(fedbalance.jobs.cost, "calibrate", no_measuring)
    (tmp_path / "cal").mkdir()
    before = set(tmp_path.iterdir())
    assert main(["cost", "--config", str(QUICK), "--calibration", str(tmp_path / "cal")]) == 2
    err = capsys.readouterr().err
    assert err == f"fedbalance cost: error: --calibration {tmp_path / 'cal'} is a folder; name a JSON file (read if it exists, else written)\n"
    assert set(tmp_path.iterdir()) == before and not list((tmp_path / "cal").iterdir())
    assert main(["cost", "--config", str(QUICK), "--calibration", str(tmp_path / "no" / "cal.json")]) == 2
    assert "does not exist" in capsys.readouterr().err


# --- D10: an --out that cannot hold the job: exit 2, one line, before any work --------------------------


def _train(out: Path) -> list[str]:
    return ["train", "--config", str(QUICK), "--experiment", "losses", "--dataset", "mnist", "--setting", "g10",
            "--loss", "ce", "--seed", "0", "--out", str(out)]


@pytest.mark.parametrize("case", ["below_a_file", "lock_is_a_folder", "not_writable"])
def test_unusable_out_is_one_line_before_any_work(tmp_path: Path, capsys, monkeypatch, case: str) -> None:
    import fedbalance.jobs.run
    from fedbalance.cli import main

    def no_training(*args, **kwargs):
        raise AssertionError("training started")

    monkeypatch.setattr(fedbalance.jobs.run, "load_dataset", no_training)
    if case == "below_a_file":
        (tmp_path / "f").write_text("x")
        out, words = tmp_path / "f" / "job", "a part of the path is a file"
    elif case == "lock_is_a_folder":
        out = tmp_path / "job"
        (out / ".lock").mkdir(parents=True)
        words = ".lock is a folder"
    else:
        out, words = tmp_path / "job", "no permission to write there"

        def denied(self, *a, **k):
            raise PermissionError(errno.EACCES, "Permission denied", str(self))

        monkeypatch.setattr(Path, "mkdir", denied)
    assert main(_train(out)) == 2
    err = capsys.readouterr().err
    assert err.startswith("fedbalance train: error: cannot use") and words in err and err.count("\n") == 1, err


# --- a full disk: one line naming the file and the space, nothing half-written ----------------------------


@pytest.mark.parametrize("exc", [RuntimeError("[enforce fail at inline_container.cc:603] . unexpected pos 64 vs 0"),
                                 OSError(errno.ENOSPC, "No space left on device")])
def test_full_disk_is_named(tmp_path: Path, exc: Exception) -> None:
    from fedbalance.atomic import atomic_write

    def write(fh):
        fh.write("partial")
        raise exc

    with pytest.raises(OSError) as err:
        atomic_write(tmp_path / "checkpoint.pt", write)
    assert err.value.errno == errno.ENOSPC
    assert f"no space left on the device while writing {tmp_path / 'checkpoint.pt'}" in str(err.value)
    assert "MiB free" in str(err.value) and list(tmp_path.iterdir()) == []


def test_full_disk_in_the_cli_is_one_line(tmp_path: Path, capsys, monkeypatch) -> None:
    import fedbalance.jobs.run
    from fedbalance.cli import main

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "no space left on the device while writing x (0.0 MiB free there)")

    monkeypatch.setattr(fedbalance.jobs.run, "load_dataset", full)
    assert main(_train(tmp_path / "job")) == 1
    assert capsys.readouterr().err == "fedbalance train: error: no space left on the device while writing x (0.0 MiB free there)\n"


def test_other_errors_are_not_called_a_full_disk(tmp_path: Path) -> None:
    from fedbalance.atomic import atomic_write

    def write(fh):
        raise RuntimeError("something else")

    with pytest.raises(RuntimeError, match="something else"):
        atomic_write(tmp_path / "x", write)


# --- snakemake: names, results_dir and --report on a partial results folder --------------------------------


def _snakemake(tmp: Path, cfg: dict, *args: str) -> subprocess.CompletedProcess:
    (tmp / "c.yaml").write_text(yaml.safe_dump(cfg))
    return subprocess.run(["snakemake", "-s", str(SNAKEFILE), "--directory", str(tmp), "--configfile",
                           str(tmp / "c.yaml"), *args], capture_output=True, text=True, timeout=600)


@pytest.mark.skipif(shutil.which("snakemake") is None, reason="snakemake is not installed")
def test_snakemake_refuses_root_results_and_slashed_names(tmp_path: Path, quick: dict) -> None:
    r = _snakemake(tmp_path, {**quick, "results_dir": "/"}, "-n")
    assert r.returncode != 0 and "invalid configuration: results_dir: '/' is the filesystem root" in r.stdout + r.stderr
    bad = copy.deepcopy(quick)
    bad["experiments"]["a/b"] = bad["experiments"].pop("losses")
    r = _snakemake(tmp_path, bad, "-n")
    assert r.returncode != 0 and "invalid configuration: experiments: name 'a/b' is not allowed" in r.stdout + r.stderr


@pytest.mark.skipif(shutil.which("snakemake") is None, reason="snakemake is not installed")
def test_report_on_a_partial_results_folder_says_what_is_missing(tmp_path: Path, quick: dict) -> None:
    r = _snakemake(tmp_path, quick, "--report", str(tmp_path / "report.html"))
    out = r.stdout + r.stderr
    assert r.returncode != 0 and "--report needs the finished run" in out and "snakemake --cores all" in out
    assert not (tmp_path / "report.html").exists()


@pytest.mark.skipif(shutil.which("snakemake") is None, reason="snakemake is not installed")
def test_report_of_targets_needs_only_the_targets(tmp_path: Path, quick: dict) -> None:
    """`--report R -- TARGETS`: only the named targets must exist, not every table and figure of the study."""
    target = "results/claims.md"
    missing = _snakemake(tmp_path, quick, "--report", str(tmp_path / "r.html"), "--", target)
    assert "--report needs the finished run: 1 of 1 " in missing.stdout + missing.stderr
    (tmp_path / target).parent.mkdir(parents=True)
    (tmp_path / target).write_text("# claims\n")
    r = _snakemake(tmp_path, quick, "--report", str(tmp_path / "r.html"), "--", target)
    assert "--report needs the finished run" not in r.stdout + r.stderr
