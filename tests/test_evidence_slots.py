"""scripts/evidence_slots.sh with stand-ins for Snakemake and `fedbalance reference missing` that record what they
are asked: jobs start in the evidence order, SLOTS at once, each once; finished ones are skipped, a failing one is
tried TRIES times and reported, STOP starts nothing, bad arguments are refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_readme import readme_commands

REPO = Path(__file__).resolve().parents[1]

# Snakemake's stand-in: `--omit-from` (the inputs) records "prepare"; otherwise "start", a pause of SLEEP_<name>
# seconds (and, with WAIT_<name>=<other>, until <other>'s target exists), then the target written and "end", or a
# failure for a target named in FAIL (FAIL_ONCE: the first try only). `--dry-run` records "plan" and prints the
# target as an output and, with NEEDS_<name>="<other> ...", each other's target not yet there (a branch source).
FAKE_SNAKEMAKE = r'''
import os, sys, time
from pathlib import Path
args = sys.argv[1:]
target = args[args.index("--") + 1]
name = Path(target).parent.name
log = Path(os.environ["CALLS"])
def note(word):
    with log.open("a") as f:
        f.write(f"{word} {name} {time.monotonic():.6f} {' '.join(args[:args.index('--')])}\n")
if "--dry-run" in args:
    note("plan")
    needs = [Path(target).parent.with_name(n) / "metrics.json" for n in os.environ.get("NEEDS_" + name, "").split()]
    for out in [Path(target), *(n for n in needs if not n.exists())]:
        print(f"rule train:\n    output: {out}, {out.with_name('rounds.csv')}\n    log: x.log")
    sys.exit(0)
if "--omit-from" in args:
    note("prepare")
    sys.exit(0)
note("start")
time.sleep(float(os.environ.get("SLEEP_" + name, "0.2")))
waits_for = os.environ.get("WAIT_" + name)
deadline = time.monotonic() + 60
while waits_for and not Path(target).parent.with_name(waits_for).joinpath("metrics.json").exists():
    assert time.monotonic() < deadline, f"{name} waited 60 s for {waits_for}"
    time.sleep(0.05)
once = Path(os.environ["CALLS"] + ".failed-" + name)
if name in os.environ.get("FAIL", "").split() or (name in os.environ.get("FAIL_ONCE", "").split()
                                                   and not once.exists()):
    once.touch()
    note("fail")
    sys.exit(1)
Path(target).parent.mkdir(parents=True, exist_ok=True)
Path(target).write_text("{}")
note("end")
'''

# `fedbalance reference missing --targets RUNS`'s stand-in: the targets of ORDER, one a line, whatever RUNS holds;
# its calls numbered in MISSING_FAILS fail ("all": every call).
FAKE_FEDBALANCE = r'''
import os, sys
from pathlib import Path
counter = Path(os.environ["CALLS"] + ".missing")
calls = int(counter.read_text()) + 1 if counter.exists() else 1
counter.write_text(str(calls))
if str(calls) in os.environ.get("MISSING_FAILS", "").split() or os.environ.get("MISSING_FAILS") == "all":
    sys.exit("the set is being collected into")
args = sys.argv[1:]
assert args[:2] == ["reference", "missing"] and "--targets" in args, args
with open(os.environ["CALLS"] + ".missing-args", "a") as f:
    f.write(" ".join(args[args.index("--targets") + 2:]) + "\n")
runs = args[args.index("--targets") + 1]
for name in os.environ["ORDER"].split():
    print(f"{runs}/{name}/metrics.json")
'''


def _run(tmp_path: Path, slots: str, order: list[str], *options: str, **env: str) -> subprocess.CompletedProcess:
    (tmp_path / "smk.py").write_text(FAKE_SNAKEMAKE)
    (tmp_path / "fb.py").write_text(FAKE_FEDBALANCE)
    (tmp_path / "ref").mkdir(exist_ok=True)
    full = {**os.environ, "SNAKEMAKE": f"{sys.executable} {tmp_path / 'smk.py'}",
            "FEDBALANCE": f"{sys.executable} {tmp_path / 'fb.py'}", "CALLS": str(tmp_path / "calls.log"),
            "ORDER": " ".join(order), "REFERENCE": str(tmp_path / "ref"), "CONFIG": "config/quick.yaml",
            "RETRY_S": "0", **env}
    return subprocess.run(["bash", "scripts/evidence_slots.sh", slots, str(tmp_path / "runs"), *options], cwd=REPO,
                          env=full, capture_output=True, text=True, timeout=120)


def _calls(tmp_path: Path) -> list[tuple[str, str, float, str]]:
    path = tmp_path / "calls.log"
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        word, name, at, options = line.split(" ", 3)
        rows.append((word, name, float(at), options))
    return rows


def _most_at_once(calls: list[tuple[str, str, float, str]]) -> int:
    running = most = 0
    for word, *_ in sorted(calls, key=lambda c: c[2]):
        running += {"start": 1, "end": -1, "fail": -1}.get(word, 0)
        most = max(most, running)
    return most


def test_jobs_start_in_the_evidence_order_two_at_once_each_once(tmp_path: Path) -> None:
    """Six jobs, two slots, the first job running until the last has finished: the others start in order in the
    second slot while it runs (no batch boundary), and every job is trained once with the options given, after its
    inputs were prepared."""
    order = [f"job{i}" for i in range(6)]
    proc = _run(tmp_path, "2", order, "--config", "device=cpu", WAIT_job0="job5")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    calls = _calls(tmp_path)
    starts = [name for word, name, *_ in calls if word == "start"]
    assert starts == order
    assert sorted(name for word, name, *_ in calls if word == "end") == order
    assert _most_at_once(calls) == 2
    # job0 still ran when job1..job5 had all started and ended in the other slot
    end_of = {name: at for word, name, at, _ in calls if word == "end"}
    assert all(end_of[name] < end_of["job0"] for name in order[1:])
    for word, name, at, options in calls:
        assert f"--nolock --rerun-incomplete --configfile config/quick.yaml --config results_dir={tmp_path / 'runs'} " \
               "device=cpu" in options
        assert ("--omit-from train keep" in options) == (word == "prepare")
    prepared = {name: at for word, name, at, _ in calls if word == "prepare"}
    start_of = {name: at for word, name, at, _ in calls if word == "start"}
    assert all(prepared[name] < start_of[name] for name in order)
    events = (tmp_path / "runs/.slots/events.log").read_text().splitlines()
    assert sorted(line.split()[1] for line in events if line.startswith("end ")) == [
        f"{tmp_path / 'runs'}/{name}/metrics.json" for name in order]


def test_a_job_finished_in_runs_is_not_trained_again(tmp_path: Path) -> None:
    """`missing` lists a job finished in RUNS until it is collected: the slots skip it."""
    done = tmp_path / "runs/job1/metrics.json"
    done.parent.mkdir(parents=True)
    done.write_text("{}")
    proc = _run(tmp_path, "2", ["job0", "job1", "job2"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [name for word, name, *_ in _calls(tmp_path) if word == "start"] == ["job0", "job2"]


def test_a_failing_job_is_tried_tries_times_then_reported(tmp_path: Path) -> None:
    """A job that always fails: tried twice (TRIES=2), named on stderr and in failed, exit 1; the others trained."""
    proc = _run(tmp_path, "2", ["job0", "bad", "job2", "job3"], FAIL="bad")
    assert proc.returncode == 1
    assert "given up after 2 tries" in proc.stderr and f"{tmp_path / 'runs'}/bad/metrics.json" in proc.stderr
    calls = _calls(tmp_path)
    assert [name for word, name, *_ in calls if word == "fail"] == ["bad", "bad"]
    assert sorted(name for word, name, *_ in calls if word == "end") == ["job0", "job2", "job3"]
    assert (tmp_path / "runs/.slots/failed").read_text().split() == [f"{tmp_path / 'runs'}/bad/metrics.json"]


def test_a_job_that_fails_once_is_trained_on_its_second_try(tmp_path: Path) -> None:
    """A failure that passes (another slot held Snakemake's lock): the job is taken again and finishes, exit 0, even
    when it was the last job and the other slot had nothing left to take."""
    proc = _run(tmp_path, "2", ["job0", "flaky"], FAIL_ONCE="flaky", SLEEP_job0="0.1", SLEEP_flaky="0.5")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    calls = _calls(tmp_path)
    assert [name for word, name, *_ in calls if word == "start"].count("flaky") == 2
    assert sorted(name for word, name, *_ in calls if word == "end") == ["flaky", "job0"]


def test_stop_starts_no_job(tmp_path: Path) -> None:
    stop = tmp_path / "stop"
    stop.touch()
    proc = _run(tmp_path, "2", ["job0", "job1"], STOP=str(stop))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _calls(tmp_path) == []


def test_bad_arguments_are_refused_before_any_job(tmp_path: Path) -> None:
    for slots in ("0", "two", "-1"):
        proc = _run(tmp_path, slots, ["job0"])
        assert proc.returncode == 2 and "SLOTS: a positive integer" in proc.stderr
    proc = _run(tmp_path, "1", ["job0"], CONFIG="config/no-such.yaml")
    assert proc.returncode == 2 and "CONFIG config/no-such.yaml" in proc.stderr
    proc = _run(tmp_path, "1", ["job0"], REFERENCE=str(tmp_path / "nowhere"))
    assert proc.returncode == 2 and "REFERENCE" in proc.stderr and "nowhere" in proc.stderr
    assert _calls(tmp_path) == []


# Snakemake's own command-line parser as the stand-in: it records the config and config files Snakemake would read.
PARSING_SNAKEMAKE = r'''
import json, os, sys
from pathlib import Path
from snakemake.cli import get_argument_parser, parse_config
args = get_argument_parser().parse_args(sys.argv[1:])
(target,) = args.targets
with open(os.environ["CALLS"] + ".parsed", "a") as f:
    f.write(json.dumps({"config": parse_config(args.config), "configfile": [str(c) for c in args.configfile],
                        "omit": sorted(args.omit_from or ()), "cores": args.cores, "dry": args.dryrun}) + "\n")
if not args.omit_from and not args.dryrun:
    Path(target).parent.mkdir(parents=True, exist_ok=True)
    Path(target).write_text("{}")
'''


def test_the_callers_config_entries_join_the_results_folder_in_the_config_snakemake_reads(tmp_path: Path) -> None:
    """Snakemake keeps only the last --config: `--config device=cpu lr=0.5 ... --config=eval_every=2` must reach it
    beside results_dir=RUNS, as its own parser reads the command (a second --config would drop results_dir)."""
    (tmp_path / "parse.py").write_text(PARSING_SNAKEMAKE)
    proc = _run(tmp_path, "1", ["job0"], "--config", "device=cpu", "lr=0.5", "--rerun-triggers", "mtime",
                "--config=eval_every=2", SNAKEMAKE=f"{sys.executable} {tmp_path / 'parse.py'}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    parsed = [json.loads(line) for line in (tmp_path / "calls.log.parsed").read_text().splitlines()]
    assert [(bool(p["omit"]), p["dry"]) for p in parsed] == [(False, True), (True, False), (False, False)]
    for p in parsed:
        assert p["config"] == {"results_dir": str(tmp_path / "runs"), "device": "cpu", "lr": 0.5, "eval_every": 2}
        assert p["configfile"] == ["config/quick.yaml"] and p["cores"] == 1
    assert (tmp_path / "runs/job0/metrics.json").exists()


def test_a_config_file_option_or_a_results_dir_entry_is_refused_before_any_job(tmp_path: Path) -> None:
    """CONFIG is the config file (`missing` reads it) and RUNS the results folder: options that would set them
    otherwise, or a --config entry without "=", are refused with status 2, nothing started, RUNS not made."""
    cases = {("--configfile", "config/mnist.yaml"): "--configfile: the config file is CONFIG=config/quick.yaml",
             ("--configfile=config/mnist.yaml",): "the config file is CONFIG=config/quick.yaml",
             ("--config", "results_dir=elsewhere"): "--config results_dir=elsewhere: the jobs' results folder is RUNS",
             ("--config", "device"): "--config device: KEY=VALUE entries only"}
    for options, message in cases.items():
        proc = _run(tmp_path, "2", ["job0"], *options)
        assert proc.returncode == 2 and message in proc.stderr, (options, proc.stderr)
    assert _calls(tmp_path) == [] and not (tmp_path / "runs").exists()


def test_jobs_caps_the_jobs_a_run_starts(tmp_path: Path) -> None:
    """JOBS=3 of five: the first three of the order start, the last line says the cap ended the run."""
    proc = _run(tmp_path, "2", [f"job{i}" for i in range(5)], JOBS="3")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [name for word, name, *_ in _calls(tmp_path) if word == "start"] == ["job0", "job1", "job2"]
    assert "3 jobs started in this run: JOBS=3 reached" in proc.stdout
    for bad in ("0", "many", "2.5"):
        proc = _run(tmp_path, "2", ["job0"], JOBS=bad)
        assert proc.returncode == 2 and f"JOBS={bad}" in proc.stderr


def test_plan_is_the_steps_missing_is_asked_for(tmp_path: Path) -> None:
    """PLAN='mismatch::0,1,2 readings::' reaches every `missing` call as `--plan` with those two steps; without PLAN
    no call names a plan (the evidence order); a PLAN that `missing` refuses ends the run as a bad argument."""
    proc = _run(tmp_path, "2", ["job0", "job1"], PLAN="mismatch::0,1,2 readings::")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    asked = (tmp_path / "calls.log.missing-args").read_text().splitlines()
    assert asked and set(asked) == {"--plan mismatch::0,1,2 readings::"}
    for f in tmp_path.glob("calls.log*"):
        f.unlink()
    assert _run(tmp_path, "2", ["job0"]).returncode == 0
    assert set((tmp_path / "calls.log.missing-args").read_text().splitlines()) == {""}
    for f in tmp_path.glob("calls.log*"):
        f.unlink()
    refused = _run(tmp_path, "2", ["job0"], PLAN="bogus", MISSING_FAILS="all")
    assert refused.returncode == 2 and not [c for c in _calls(tmp_path) if c[0] == "start"]
    assert (tmp_path / "calls.log.missing").read_text() == "1"  # asked once, refused, no slot started


def test_a_job_whose_run_builds_another_running_job_waits_for_it(tmp_path: Path) -> None:
    """`branched`'s Snakemake would build `src` (its branch source) while `src` trains in the other slot: it waits,
    `other` (after it in the order) is taken meanwhile, and `branched` starts only once `src` has ended."""
    proc = _run(tmp_path, "2", ["src", "branched", "other"], NEEDS_branched="src", SLEEP_src="1.5")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    calls = _calls(tmp_path)
    assert [name for word, name, *_ in calls if word == "start"] == ["src", "other", "branched"]
    at = {(word, name): when for word, name, when, _ in calls}
    assert at[("start", "branched")] > at[("end", "src")]
    assert at[("start", "other")] < at[("end", "src")]
    assert not list((tmp_path / "runs/.slots").glob("claims.*"))
    # branched is dry-run once while src runs (the slot then polls without one) and once when src has ended
    assert [word for word, name, *_ in calls if name == "branched"][:3] == ["plan", "plan", "prepare"]
    assert at[("plan", "branched")] > at[("end", "src")]


def test_a_job_that_fails_once_is_tried_again_after_jobs_is_reached(tmp_path: Path) -> None:
    """JOBS=2, the first job failing once while the second runs (a lock another slot holds, say): the cap counts jobs,
    not tries, so the first is tried again and both end; the third is never started. Given up, the run exits 1."""
    proc = _run(tmp_path, "2", ["flaky", "job1", "job2"], JOBS="2", FAIL_ONCE="flaky", SLEEP_job1="0.5")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    calls = _calls(tmp_path)
    assert [name for word, name, *_ in calls if word == "start"] == ["flaky", "job1", "flaky"]
    assert sorted(name for word, name, *_ in calls if word == "end") == ["flaky", "job1"]
    assert (tmp_path / "runs/flaky/metrics.json").exists() and not (tmp_path / "runs/job2").exists()
    assert "2 jobs started in this run: JOBS=2 reached" in proc.stdout
    again = tmp_path / "again"
    again.mkdir()
    proc = _run(again, "2", ["broken", "job1", "job2"], JOBS="2", FAIL="broken")
    assert proc.returncode == 1 and "broken" in proc.stderr
    assert [name for word, name, *_ in _calls(again) if word == "start"] == ["broken", "job1", "broken"]


def test_a_failing_missing_is_asked_again_and_a_refused_set_starts_nothing(tmp_path: Path) -> None:
    """`missing` failing mid-run (the set swapped by a collect) is no empty list: the slot asks again and every job
    runs; `missing` refusing the set before any slot starts is exit 2 with its message."""
    proc = _run(tmp_path, "2", ["job0", "job1", "job2"], MISSING_FAILS="2 3 4")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [name for word, name, *_ in _calls(tmp_path) if word == "start"] == ["job0", "job1", "job2"]
    assert "missing-failed" in (tmp_path / "runs/.slots/events.log").read_text()
    refused = tmp_path / "refused"
    refused.mkdir()
    proc = _run(refused, "2", ["job0"], MISSING_FAILS="all")
    assert proc.returncode == 2 and "the set is being collected into" in proc.stderr
    assert _calls(refused) == []


@pytest.mark.slow
def test_the_readme_command_trains_the_first_jobs_of_the_order_with_the_workflow(tmp_path: Path) -> None:
    """The README's command with the real Snakemake, on config/quick.yaml and an empty set, JOBS=2: the first job
    `reference missing` lists (early E, rule train) and the third (t_ra, rule derive) are made by the workflow
    (provenance), each by a Snakemake of its own, in that order; the second (early S, which branches from E's kept
    state, so its Snakemake would build E's branch-r003.pt beside E's own) waits while E trains, and the cap ends the
    run before it starts."""
    command = next(c for c in readme_commands() if "scripts/evidence_slots.sh" in c)
    assert command == "REFERENCE=<checkout>/reference/mnist scripts/evidence_slots.sh 2 RUNS"
    (tmp_path / "ref").mkdir()
    runs = tmp_path / "runs"
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "CONFIG": "config/quick.yaml", "JOBS": "2", "RETRY_S": "5",
           "REFERENCE": str(tmp_path / "ref"),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    listed = subprocess.run([sys.executable, "-m", "fedbalance", "reference", "missing", "--config",
                             "config/quick.yaml", "--reference", str(tmp_path / "ref"), "--targets", str(runs)],
                            cwd=REPO, env=env, capture_output=True, text=True, check=True).stdout.split()
    proc = subprocess.run(["bash", "scripts/evidence_slots.sh", "2", str(runs), "--config", "device=cpu"], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stdout + proc.stderr + _tail(runs)
    assert [str(Path(t).relative_to(runs)) for t in listed[:2]] == ["early/mnist/E/ce/seed0/metrics.json",
                                                                    "early/mnist/S/ce/seed0/metrics.json"]
    events = (runs / ".slots/events.log").read_text().splitlines()
    trained = [listed[0], listed[2]]
    rules = {listed[0]: "train", listed[2]: "derive"}   # the third, t_ra T_Ra = 2, is derived from a monitor job
    assert Path(listed[2]).relative_to(runs).parts[0] == "t_ra"
    assert [line.split()[1] for line in events if line.startswith("start ")] == trained
    for target in trained:
        record = json.loads((Path(target).parent / "provenance.json").read_text())
        assert record["runner"] == "snakemake" and record["rule"] == rules[target]
        assert "device=cpu" in record["command"]
        assert record["command"].endswith(f"--cores 1 -- {target.replace(str(runs), 'RUNS')}")
    source = json.loads((Path(listed[2]).parent / "provenance.json").read_text())["derived_from"]
    made = [*trained, str(runs / source / "metrics.json")]   # a derived job's Snakemake trains its source first
    assert [t for t in listed if Path(t).exists()] == [t for t in listed if t in made]


def _tail(runs: Path) -> str:
    return "".join(p.read_text()[-2000:] for p in sorted((runs / ".slots").glob("slot*.log")))
