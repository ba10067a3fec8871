"""Branches: a job that shares its first rounds with another (``jobspec.shared_rounds``) starts from that job's kept
round state (``run_job(keep_rounds=..., branch_from=...)``) and writes what it writes when run from round 0."""

from __future__ import annotations

import csv
import json

import pytest
import torch

from fedbalance.jobs.config import configured_job, load_config
from fedbalance.jobs.jobfolder import branch_file, branch_files
from fedbalance.jobs.run import CHECKPOINT, JobError, run_job
from fedbalance.common.jobspec import shared_rounds
from fedbalance.common.records import Job

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def quick() -> dict:
    return load_config("config/quick.yaml")


def tiny(quick: dict, setting: str = "S", **over) -> dict:
    """quick.yaml's early job, cut to 5 rounds of 3 small clients; the Ratio Loss, so the monitor's weights feed
    training and a wrong round state changes the numbers."""
    spec = configured_job(quick, Job("early", "mnist", setting, "ce", 0))
    spec["partition"].update(num_clients=4, majority_samples=12)
    spec["monitor"] = {**spec.get("monitor", {}), "aux_per_class": 8}
    spec.update(loss="ratio", clients_per_round=3, rounds=5, batch_size=16, lr=0.05, selection="random")
    spec.update(over)
    return spec


def _rows(path) -> list[dict]:
    with open(path / "rounds.csv", newline="") as fh:
        return [{k: v for k, v in r.items() if k != "seconds"} for r in csv.DictReader(fh)]


def _same_run(a: dict, b: dict) -> None:
    for key in ("final", "monitor", "acknowledged_round", "partition", "rounds"):
        assert a[key] == b[key], key


def test_shared_rounds_by_hand(quick):
    s, e = tiny(quick, "S", switch_round=2), tiny(quick, "E", switch_round=4)
    assert shared_rounds(e, s) == shared_rounds(s, e) == 2  # the earlier switch
    assert shared_rounds(s, tiny(quick, "S", switch_round=2)) == 0  # the same job: a twin, not a branch
    longer = tiny(quick, "S", switch_round=2, rounds=8)
    assert shared_rounds(s, longer) == 4  # both switch at 2: all but the shorter's last (evaluated) round
    assert shared_rounds(tiny(quick, "E", switch_round=4), longer) == 2  # the earlier switch
    late = tiny(quick, "S", switch_round=4, rounds=8)
    assert shared_rounds(tiny(quick, "E", switch_round=4), late) == 4  # rounds 5 vs 8: its round 4 is evaluated
    assert shared_rounds(tiny(quick, "E", switch_round=4, rounds=6), late) == 5
    assert shared_rounds(tiny(quick, "E", switch_round=5, rounds=6), tiny(quick, "E", switch_round=5, rounds=9)) == 5
    assert shared_rounds(s, tiny(quick, "E", switch_round=4, lr=0.04)) == 0  # another training
    assert shared_rounds(s, tiny(quick, "E", switch_round=4, seed=1)) == 0
    no_switch = tiny(quick, "S", switch_round=None)
    del no_switch["switch_round"]
    assert shared_rounds(no_switch, e) == 0  # one switches partition, the other does not
    assert shared_rounds(no_switch, {**no_switch, "rounds": 3}) == 2


def test_a_branched_job_is_the_job_run_from_round_0(quick, tmp_path):
    s, e = tiny(quick, "S", switch_round=2), tiny(quick, "E", switch_round=4)
    alone = run_job(s, tmp_path / "S-alone", device="cpu", progress=False)
    source = run_job(e, tmp_path / "E", device="cpu", progress=False, keep_rounds=[2, 3])
    assert sorted(branch_files(tmp_path / "E")) == [2, 3] and "branched_from" not in source
    # round 2 differs between the two jobs (S trains on the balanced partition from it): a branch from the state kept
    # after 3 rounds would not give S's numbers
    assert _rows(tmp_path / "E")[2] != _rows(tmp_path / "S-alone")[2]
    branched = run_job(s, tmp_path / "S", device="cpu", progress=False, branch_from=tmp_path / "E")
    _same_run(alone, branched)
    assert _rows(tmp_path / "S") == _rows(tmp_path / "S-alone")
    assert branched["branched_from"] == {"folder": str(tmp_path / "E"), "round": 2}
    assert json.loads((tmp_path / "S" / "metrics.json").read_text())["branched_from"]["round"] == 2
    assert branched["wall_time_s"] > 0 and not (tmp_path / "S" / CHECKPOINT).exists()


def test_a_longer_job_branches_from_a_shorter_one_and_resumes_as_a_branch(quick, tmp_path):
    short, long = tiny(quick, "S", switch_round=3, rounds=4), tiny(quick, "S", switch_round=3, rounds=6)
    alone = run_job(long, tmp_path / "alone", device="cpu", progress=False)
    run_job(short, tmp_path / "short", device="cpu", progress=False, keep_rounds=[3])

    class Killed(Exception):
        pass

    def kill(state, row):
        if row["round"] == 4:
            raise Killed

    with pytest.raises(Killed):
        run_job(long, tmp_path / "long", device="cpu", progress=False, branch_from=tmp_path / "short", on_round=kill)
    resumed = run_job(long, tmp_path / "long", device="cpu", progress=False)  # its own checkpoint, no branch_from
    _same_run(alone, resumed)
    assert _rows(tmp_path / "long") == _rows(tmp_path / "alone")
    assert resumed["branched_from"] == {"folder": str(tmp_path / "short"), "round": 3}


def test_bad_branches_are_refused_before_training(quick, tmp_path):
    s = tiny(quick, "S", switch_round=2)
    with pytest.raises(JobError, match="keep_rounds"):
        run_job(s, tmp_path / "a", device="cpu", progress=False, keep_rounds=[5])
    with pytest.raises(JobError, match="no kept round state"):
        run_job(s, tmp_path / "b", device="cpu", progress=False, branch_from=tmp_path / "a")
    run_job(tiny(quick, "E", switch_round=4, lr=0.04), tmp_path / "other", device="cpu", progress=False, keep_rounds=[1])
    with pytest.raises(JobError, match=r"trains otherwise from round 0 \(lr 0.04 there, 0.05 here\)"):
        run_job(s, tmp_path / "c", device="cpu", progress=False, branch_from=tmp_path / "other")
    run_job(tiny(quick, "E", switch_round=4), tmp_path / "late", device="cpu", progress=False, keep_rounds=[3])
    with pytest.raises(JobError, match=r"shares its first 2 rounds .* \(kept: 3\)"):
        run_job(s, tmp_path / "d", device="cpu", progress=False, branch_from=tmp_path / "late")
    branch_file(tmp_path / "late", 1).write_bytes(b"torn")
    with pytest.raises(JobError, match="branch-r001.pt: not a kept round state"):
        run_job(s, tmp_path / "e", device="cpu", progress=False, branch_from=tmp_path / "late")
    assert not any((tmp_path / d / "metrics.json").exists() for d in "abcde")


def test_the_train_command_keeps_and_branches(quick, tmp_path, capsys):
    import yaml

    from fedbalance.cli import main

    cfg = json.loads(json.dumps(quick))
    cfg["defaults"]["partition"].update(num_clients=4, majority_samples=12)
    cfg["defaults"].update(clients_per_round=3, batch_size=16)
    cfg["defaults"]["monitor"]["aux_per_class"] = 8
    cfg["experiments"] = {"early": cfg["experiments"]["early"]}
    cfg["experiments"]["early"]["params"]["rounds"] = 4
    cfg["experiments"]["early"]["settings"] = {"S": {"switch_round": 2}, "E": {"switch_round": 3}}
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(cfg))

    def train(setting: str, out: str, *extra: str) -> int:
        return main(["train", "--config", str(path), "--experiment", "early", "--dataset", "mnist", "--setting", setting,
                     "--loss", "ce", "--seed", "0", "--device", "cpu", "--out", str(tmp_path / out), *extra])

    assert train("S", "alone") == 0
    assert train("E", "E", "--keep-rounds", "1,2") == 0
    assert sorted(branch_files(tmp_path / "E")) == [1, 2]
    assert train("S", "S", "--branch-from", str(tmp_path / "E")) == 0
    assert _rows(tmp_path / "S") == _rows(tmp_path / "alone")
    assert json.loads((tmp_path / "S" / "metrics.json").read_text())["branched_from"]["round"] == 2
    capsys.readouterr()
    for bad in ("x", "0", "2,-1"):
        with pytest.raises(SystemExit) as exc:
            train("E", "bad", "--keep-rounds", bad)
        assert exc.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert "--keep-rounds" in err[-1] and not (tmp_path / "bad").exists()
    assert train("E", "bad", "--keep-rounds", "4") == 2
    assert "keep_rounds" in capsys.readouterr().err and not (tmp_path / "bad" / "metrics.json").exists()


def test_the_cost_of_a_branched_job_is_its_rounds_after_the_branch(quick):
    from fedbalance.jobs.config import resolve_job
    from fedbalance.jobs.cost import job_work, study_work
    from fedbalance.jobs.reuse import branch_rounds, branches

    plan = branches(quick)
    s, e = Job("early", "mnist", "S", "ce", 0), Job("early", "mnist", "E", "ce", 0)
    assert plan == {s: (e, 3)} and branch_rounds(plan) == {e: [3]}
    work = {w.job: w for w in study_work(quick, ["early"])}
    spec = resolve_job(quick, s)
    whole, tail = job_work(spec), job_work(spec, start_round=3)
    head = job_work({**spec.as_dict(), "rounds": 3, "switch_round": None})  # rounds 0-2 on the main partition
    assert whole.client_steps == head.client_steps + tail.client_steps > tail.client_steps
    assert whole.monitor_steps == head.monitor_steps + tail.monitor_steps
    assert work[s].client_steps == tail.client_steps and work[e].client_steps == job_work(resolve_job(quick, e)).client_steps


def test_a_source_killed_before_keeping_its_round_keeps_it_when_resumed(quick, tmp_path):
    s, e = tiny(quick, "S", switch_round=2), tiny(quick, "E", switch_round=4)

    class Killed(Exception):
        pass

    def kill(state, row):
        if row["round"] == 1:
            raise Killed

    with pytest.raises(Killed):  # its checkpoint holds 2 rounds, no kept state (as a kill between the two writes)
        run_job(e, tmp_path / "E", device="cpu", progress=False, on_round=kill)
    assert branch_files(tmp_path / "E") == {}
    run_job(e, tmp_path / "E", device="cpu", progress=False, keep_rounds=[2])
    assert sorted(branch_files(tmp_path / "E")) == [2]
    alone = run_job(s, tmp_path / "S-alone", device="cpu", progress=False)
    branched = run_job(s, tmp_path / "S", device="cpu", progress=False, branch_from=tmp_path / "E")
    _same_run(alone, branched)
    assert _rows(tmp_path / "S") == _rows(tmp_path / "S-alone")


def test_a_source_stopped_after_its_kept_round_resumes_to_the_run_from_round_0(quick, tmp_path):
    """``until``: the workflow's rule keep trains a branch source to the round it keeps and stops, keeping the
    checkpoint; the next run resumes it (nothing retrained) and writes what one run from round 0 writes. A stop at a
    round the checkpoint holds already trains nothing."""
    s, e = tiny(quick, "S", switch_round=2), tiny(quick, "E", switch_round=4)
    alone = run_job(e, tmp_path / "alone", device="cpu", progress=False)
    trained: list[int] = []

    def count(state, row):
        trained.append(row["round"])

    assert run_job(e, tmp_path / "E", device="cpu", progress=False, keep_rounds=[2], until=2, on_round=count) is None
    assert sorted(branch_files(tmp_path / "E")) == [2] and (tmp_path / "E" / CHECKPOINT).exists()
    assert not (tmp_path / "E" / "metrics.json").exists() and len(trained) == 2
    assert run_job(e, tmp_path / "E", device="cpu", progress=False, keep_rounds=[2], until=2, on_round=count) is None
    assert len(trained) == 2  # the checkpoint holds those rounds: nothing trained
    branched = run_job(s, tmp_path / "S", device="cpu", progress=False, branch_from=tmp_path / "E")
    assert branched["branched_from"]["round"] == 2 and _rows(tmp_path / "S") == _rows_of(s, tmp_path / "S-alone")
    done = run_job(e, tmp_path / "E", device="cpu", progress=False, keep_rounds=[2], on_round=count)
    assert len(trained) == 2 + (e["rounds"] - 2)  # resumed after round 2
    _same_run(alone, done)
    assert _rows(tmp_path / "E") == _rows(tmp_path / "alone") and not (tmp_path / "E" / CHECKPOINT).exists()
    with pytest.raises(JobError, match="keep_rounds"):
        run_job(e, tmp_path / "bad", device="cpu", progress=False, until=e["rounds"])


def _rows_of(spec: dict, out) -> list[dict]:
    """The rounds of ``spec`` run from round 0 in ``out``."""
    run_job(spec, out, device="cpu", progress=False)
    return _rows(out)
