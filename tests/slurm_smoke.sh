#!/usr/bin/env bash
# SLURM smoke test: a throw-away single-node SLURM cluster on this machine, the README's two SLURM
# commands (read from the README, account/partition filled in) run through profiles/slurm, and each
# claim of the README's "What matters" list checked against what SLURM and Snakemake actually did.
#
#   sudo env PATH="$PATH" tests/slurm_smoke.sh   (root: it installs packages and starts daemons;
#                                                 env PATH keeps a venv's python, which sudo drops)
#
# 0. refuses, touching nothing (no package, daemon, file or job), when this machine has a SLURM
#    setup: /etc/slurm/slurm.conf or gres.conf exists, SLURM_CONF is set, or slurmctld, slurmd or
#    slurmdbd runs. It only ever cancels the job ids it submitted itself (its own Snakemake runs'
#    and its stand-in "foreign" job), never "every job in squeue";
# 1. installs munge, slurmctld, slurmd and the SLURM clients from the distribution's packages
#    (Debian/Ubuntu apt-get) when they are missing;
# 2. starts munged, slurmctld and slurmd on private paths under $SMOKE_DIR (default
#    /tmp/fedbalance-slurm-smoke; its own munge socket and key, SLURM_CONF pointing at its own
#    slurm.conf): one node with this machine's CPUs, $FAKE_GPUS fake GPUs in gres.conf (device
#    files made with mknod like /dev/null), no accounting database (AccountingStorageType=accounting_storage/none);
#    then submits a held job of "someone else's", which must be there, untouched, at the end;
# 3. CPU form: the README's CPU-only command on a 3-job target of a tiny config (config/quick.yaml
#    shrunk: 3 losses x 1 setting x 1 seed, 6 rounds). It checks that only profiles/slurm is
#    loaded (no profile is loaded unless named), that every submitted job asks for no GPU, for the
#    rule's memory and time (twice both on the retry) and runs with --latency-wait 60, that a
#    running job's log shows per-round progress, and, after `scancel`ling that job mid-run, that
#    Snakemake notices (squeue status command) and the retry resumes from its checkpoint and
#    finishes;
# 4. runs the same target locally (--cores 2, and --set-threads train=2: the reservation changes,
#    the torch thread count must not) and compares every job's metrics.json and rounds.csv;
# 5. GPU form: the README's GPU command; every job asks for one GPU (--gpus=1), runs with
#    --latency-wait 60, and more than one holds a GPU at the same time (this machine has no CUDA,
#    so the jobs then fail: expected);
# 6. the other form, the GPU command with `--profile profiles/slurm` in place of
#    `--workflow-profile profiles/slurm`: no workflow profile is loaded beside it (profiles/local is
#    opt-in), its jobs run with profiles/slurm's --latency-wait 60, and still more than one GPU job
#    runs at a time;
# 7. cancels the jobs it submitted and stops the daemons it started, by id (also on failure), after
#    checking that the foreign job is still there.
# Every check prints "ok:" or "FAILED:"; the script exits 1 when one failed, 2 when it refused.
#
# Environment: PYTHON (default python3; needs `pip install -e '.[slurm]'`), SMOKE_DIR, FAKE_GPUS (2).
# Takes about 5 minutes on 2 cores. Not part of .ci/run (root, daemons, minutes); see README.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
W=${SMOKE_DIR:-/tmp/fedbalance-slurm-smoke}
FAKE_GPUS=${FAKE_GPUS:-2}
PY=${PYTHON:-python3}
MARK=.fedbalance-slurm-smoke

say() { printf '[smoke %(%H:%M:%S)T] %s\n' -1 "$*"; }
fail() { say "FAIL: $*"; exit 1; }
refuse() { say "REFUSED: $*. Nothing was installed, started or cancelled."; exit 2; }

# 0. an existing SLURM setup: refuse before doing anything -------------------------------------
running() {  # is a process with this exact name running on this machine?
  local f
  for f in /proc/[0-9]*/comm; do
    [ "$(cat "$f" 2>/dev/null)" = "$1" ] && return 0
  done
  return 1
}
existing_slurm() {  # prints why this machine already has SLURM; nothing when it has none
  local f d
  for f in /etc/slurm/slurm.conf /etc/slurm/gres.conf /etc/slurm-llnl/slurm.conf; do
    if [ -e "$f" ] || [ -L "$f" ]; then echo "$f exists"; return; fi
  done
  if [ -n "${SLURM_CONF:-}" ]; then echo "SLURM_CONF is set ($SLURM_CONF)"; return; fi
  for d in slurmctld slurmd slurmdbd; do
    if running "$d"; then echo "$d is running"; return; fi
  done
}
why=$(existing_slurm)
[ -z "$why" ] || refuse "$why: this machine has a SLURM setup; run the smoke test on one without"
if [ -e "$W" ] && [ ! -e "$W/$MARK" ]; then
  refuse "$W exists and is not a folder of this test (no $MARK): set SMOKE_DIR to a new path"
fi
"$PY" -c "import snakemake_executor_plugin_slurm" 2>/dev/null \
  || fail "$PY has no snakemake-executor-plugin-slurm: pip install -e '.[slurm]'; from a venv, run" \
    "sudo env PATH=\"\$PATH\" tests/slurm_smoke.sh (sudo resets PATH) or set PYTHON=/path/to/venv/bin/python"
[ "$(id -u)" -eq 0 ] || fail "run as root (installs packages, starts munged/slurmctld/slurmd)"

# 1. packages ---------------------------------------------------------------------------------
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v munged >/dev/null \
  || ! command -v sbatch >/dev/null; then
  say "installing munge, slurmctld, slurmd, slurm-client (apt-get)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    munge slurmctld slurmd slurm-client >/dev/null
  why=$(existing_slurm)
  [ -z "$why" ] || refuse "$why after installing the packages (started by them?): stop it, then rerun"
fi
say "$(slurmctld -V), snakemake $("$PY" -m snakemake --version)," \
  "plugin $("$PY" -c 'import importlib.metadata as m; print(m.version("snakemake-executor-plugin-slurm"))')"

# What this script started or submitted, and nothing else, is stopped or cancelled at exit.
PIDS=()    # daemons
SMKS=()    # Snakemake runs
OWN=()     # job ids submitted here outside Snakemake (the foreign stand-in)
LINKS=()
ETC_MADE=""
FAILED=()
own_jobs() {  # every job id this script submitted: its own sbatch calls and its Snakemake runs'
  { printf '%s\n' "${OWN[@]}"; cat "$W"/*.log 2>/dev/null | grep -o "submitted with SLURM jobid [0-9]*" \
    | awk '{print $NF}'; } | grep -E '^[0-9]+$' | sort -un || true
}
cleanup() {
  local pid ids
  for pid in "${SMKS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${SMKS[@]}"; do wait "$pid" 2>/dev/null || true; done
  if [ ${#PIDS[@]} -gt 0 ]; then
    ids=$(own_jobs)
    if [ -n "$ids" ]; then
      # shellcheck disable=SC2086
      scancel $ids 2>/dev/null || true
      say "cancelled the jobs this script submitted (ids $(echo $ids))"
    fi
  fi
  for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do
    pid=${PIDS[i]}
    if kill -0 "$pid" 2>/dev/null; then
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
      kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null || true
    fi
  done
  [ ${#PIDS[@]} -gt 0 ] && say "stopped the daemons this script started (PIDs ${PIDS[*]})"
  for f in "${LINKS[@]}"; do [ -L "$f" ] && rm -f "$f"; done
  [ -n "$ETC_MADE" ] && rmdir /etc/slurm 2>/dev/null || true
  return 0
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ok() { say "ok: $*"; }
check() {  # check DESCRIPTION COMMAND...: records a failure and goes on
  local what=$1
  shift
  if "$@"; then ok "$what"; else say "FAILED: $what"; FAILED+=("$what"); fi
}

# 2. cluster ----------------------------------------------------------------------------------
rm -rf "$W"
mkdir -p "$W"/{state,spool,log,run,jobs}
touch "$W/$MARK"
chmod 755 "$W"
NODE=$(hostname -s)
CPUS=$(nproc)
MEM_MB=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 * 3 / 4 ))
mungekey --create --keyfile="$W/munge.key" --force
chmod 600 "$W/munge.key"
munged --force --socket="$W/munge.sock" --key-file="$W/munge.key" --pid-file="$W/munged.pid" \
  --log-file="$W/log/munged.log" --seed-file="$W/munge.seed"
for _ in $(seq 50); do [ -s "$W/munged.pid" ] && break; sleep 0.1; done
PIDS+=("$(cat "$W/munged.pid")")

cat >"$W/slurm.conf" <<EOF
ClusterName=smoke
SlurmctldHost=$NODE
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$W/munge.sock
StateSaveLocation=$W/state
SlurmdSpoolDir=$W/spool
SlurmctldPidFile=$W/run/slurmctld.pid
SlurmdPidFile=$W/run/slurmd.pid
SlurmctldLogFile=$W/log/slurmctld.log
SlurmdLogFile=$W/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
MinJobAge=300
ReturnToService=2
MpiDefault=none
MailProg=/bin/true
GresTypes=gpu
NodeName=$NODE CPUs=$CPUS RealMemory=$MEM_MB Gres=gpu:$FAKE_GPUS State=UNKNOWN
PartitionName=smoke Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
# fake GPUs: character devices like /dev/null (SLURM wants one device file per GPU)
mkdir -p "$W/fake"
for ((g = 0; g < FAKE_GPUS; g++)); do mknod "$W/fake/nvidia$g" c 1 3; done
cat >"$W/gres.conf" <<EOF
AutoDetect=off
NodeName=$NODE Name=gpu File=$W/fake/nvidia[0-$((FAKE_GPUS - 1))]
EOF
# The job steps' srun reads /etc/slurm/slurm.conf (slurmstepd does not pass SLURM_CONF on), so the
# configuration is linked there for the test's duration (step 0 made sure nothing was there).
if [ ! -d /etc/slurm ]; then mkdir /etc/slurm; ETC_MADE=1; fi
for f in slurm.conf gres.conf; do
  ln -s "$W/$f" "/etc/slurm/$f"
  LINKS+=("/etc/slurm/$f")
done
export SLURM_CONF=/etc/slurm/slurm.conf
slurmctld -D -f "$SLURM_CONF" >"$W/log/slurmctld.out" 2>&1 &
PIDS+=($!)
sleep 2
slurmd -D -f "$SLURM_CONF" >"$W/log/slurmd.out" 2>&1 &
PIDS+=($!)
for _ in $(seq 60); do
  state=$(sinfo -h -N -o %T 2>/dev/null | head -1 || true)
  [ "$state" = idle ] && break
  sleep 1
done
[ "$state" = idle ] || { tail -n 5 "$W"/log/*.log || true; fail "node not idle (state: '$state')"; }
say "cluster up: node $NODE, $CPUS CPUs, $MEM_MB MB, $FAKE_GPUS fake GPUs, partition smoke, no accounting"
sinfo -N -o "%N %c %m %G %T"

# Someone else's job, there before the test: held, so it takes no CPU from the test's jobs.
FOREIGN=$(sbatch --parsable --hold -J someone-elses-job -p smoke -t 60 --wrap "sleep 3600")
OWN+=("$FOREIGN")
say "submitted job $FOREIGN, held, as someone else's job: it must survive everything below"
foreign_alive() { [ "$(squeue -h -j "$FOREIGN" -o %T 2>/dev/null)" = PENDING ]; }

# 3. the tiny study and the README's commands ---------------------------------------------------
ROUNDS=6
"$PY" - "$REPO/config/quick.yaml" "$W/smoke.yaml" "$ROUNDS" <<'EOF'
import sys, yaml
cfg = yaml.safe_load(open(sys.argv[1]))
cfg["defaults"]["rounds"] = int(sys.argv[3])
cfg["seeds"] = [0]
cfg["experiments"] = {"smoke": {"datasets": [next(iter(cfg["datasets"]))], "losses": ["ce", "focal", "ratio"],
                                "params": {"monitor": {"record": True}},
                                "settings": {"g10": {"partition": {"gamma": 10}}}}}
yaml.safe_dump(cfg, open(sys.argv[2], "w"), sort_keys=False)
EOF
DATASET=$("$PY" -c "import yaml,sys; print(next(iter(yaml.safe_load(open(sys.argv[1]))['datasets'])))" "$W/smoke.yaml")
TARGET=results/aggregate/final.csv
for run in slurm profile local gpu; do
  mkdir -p "$W/$run"
  for f in workflow profiles src; do ln -s "$REPO/$f" "$W/$run/$f"; done
  mkdir -p "$W/$run/config" && cp "$W/smoke.yaml" "$W/$run/config/smoke.yaml"
  ln -s "$REPO/config/config.yaml" "$W/$run/config/config.yaml"
done
JOBLOG=results/logs/train/smoke/$DATASET/g10/focal/seed0.log

# The README's two commands, as written there (so a README that goes wrong fails here): this
# cluster has no accounting database, hence no account to validate, so slurm_account=ACCOUNT
# becomes --slurm-no-account (the README's form for such clusters); both partitions are "smoke".
mapfile -t FORMS < <("$PY" - "$REPO/README.md" <<'EOF'
import shlex, sys
text = open(sys.argv[1]).read()
section = text[text.index("## Running on SLURM"):]
section = section[: section.index("\n## ", 3)]
for marker in ("# CPU-only cluster", "# GPU cluster"):
    line = next(ln for ln in section[section.index(marker):].splitlines() if ln.startswith("snakemake "))
    argv = [a.replace("GPU_PARTITION", "smoke").replace("PARTITION", "smoke") for a in shlex.split(line)[1:]]
    argv = ["--slurm-no-account", *(a for a in argv if a != "slurm_account=ACCOUNT")]
    print(shlex.join(argv[:-1] if argv[-1] == "--" else argv))
EOF
)
[ ${#FORMS[@]} -eq 2 ] || fail "could not read the two SLURM commands from README.md"
eval "CPU_ARGS=(${FORMS[0]})"
eval "GPU_ARGS=(${FORMS[1]})"

record_jobs() {  # record_jobs LOG: scontrol's view and the batch script of each job LOG's run submitted
  local id
  for id in $(jobs_of "$1"); do
    [ -s "$W/jobs/$id.show" ] && continue
    scontrol show job -o "$id" >"$W/jobs/$id.show" 2>/dev/null || rm -f "$W/jobs/$id.show"
    scontrol write batch_script "$id" - >"$W/jobs/$id.script" 2>/dev/null || true
  done
}
jobs_of() { { grep -o "submitted with SLURM jobid [0-9]*" "$1" || true; } | awk '{print $NF}'; }
all_jobs() {  # all_jobs LOG PREDICATE: PREDICATE holds for every job LOG's run submitted (and there is one)
  local id n=0
  for id in $(jobs_of "$1"); do
    [ -s "$W/jobs/$id.show" ] || { say "  job $id: never seen by scontrol"; return 1; }
    "$2" "$id" || { say "  job $id: $(grep -Eo '(TRES|Tres[A-Za-z]*)=[^ ]*' "$W/jobs/$id.show" | xargs)"; return 1; }
    n=$((n + 1))
  done
  [ "$n" -gt 0 ]
}
no_gpu() { ! grep -Eq 'gres[/:]gpu' "$W/jobs/$1.show"; }
one_gpu() { grep -Eq 'gres[/:]gpu[:=]1\b' "$W/jobs/$1.show"; }
waits() { grep -Eq -- "--latency-wait $2([^0-9]|$)" "$W/jobs/$1.script"; }
waits60() { waits "$1" 60; }
only_slurm_profile() {  # the one workflow profile loaded is profiles/slurm
  [ "$(grep -c "^Using workflow specific profile" "$1")" -eq 1 ] \
    && grep -q "^Using workflow specific profile profiles/slurm for setting default command line arguments" "$1"
}
no_workflow_profile() { ! grep -q "^Using workflow specific profile" "$1"; }
job_field() { grep -o "$2=[^ ]*" "$W/jobs/$1.show" | cut -d= -f2-; }

# 3a. CPU form --------------------------------------------------------------------------------
say "CPU form: snakemake ${CPU_ARGS[*]} --configfile config/smoke.yaml -- $TARGET"
cd "$W/slurm"
t0=$SECONDS
"$PY" -m snakemake "${CPU_ARGS[@]}" --configfile config/smoke.yaml -- "$TARGET" >"$W/slurm.log" 2>&1 &
SMK=$!
SMKS+=("$SMK")
# a running job's log shows progress lines; then cancel that job once (scancel) mid-run
seen_line=""
cancelled=""
while kill -0 "$SMK" 2>/dev/null; do
  record_jobs "$W/slurm.log"
  if [ -z "$cancelled" ] && [ -f "$JOBLOG" ] && grep -q " round [1-9][0-9]*/$ROUNDS " "$JOBLOG"; then
    seen_line=$(grep " round " "$JOBLOG" | tail -1)
    for id in $(jobs_of "$W/slurm.log"); do
      if squeue -h -j "$id" -o "%T %k" 2>/dev/null | grep -q "^RUNNING .*focal"; then
        scancel "$id"
        cancelled=$id
        say "job log while running: $seen_line"
        say "scancel $cancelled (the focal job, mid-run; a job this script's Snakemake run submitted)"
        break
      fi
    done
  fi
  sleep 0.5
done
wait "$SMK" && rc=0 || rc=$?
record_jobs "$W/slurm.log"
say "CPU form finished: exit $rc in $((SECONDS - t0)) s"
[ "$rc" -eq 0 ] || { tail -40 "$W/slurm.log"; fail "SLURM run failed"; }
[ -n "$cancelled" ] || fail "never found the running focal job to cancel"
check "CPU form: only profiles/slurm is loaded (no other profile is loaded unless named)" \
  only_slurm_profile "$W/slurm.log"
check "CPU form: no submitted job asks for a GPU (device=cpu)" all_jobs "$W/slurm.log" no_gpu
check "CPU form: every job runs with --latency-wait 60 (profiles/slurm's, not Snakemake's default 5)" \
  all_jobs "$W/slurm.log" waits60
check "per-round progress line in $JOBLOG while the job ran" test -n "$seen_line"
check "Snakemake noticed the scancel of job $cancelled (squeue reports CANCELLED)" \
  grep -q "SLURM status is: 'CANCELLED'" "$W/slurm.log"
first=$(grep -m1 " round " "$W/slurm/$JOBLOG" || true)
say "retried job's log: $first"
check "the retry resumed from its checkpoint (its log does not start at round 1)" \
  test -n "$first" -a -z "$(grep -o ' round 1/' <<<"$first")"
submitted=$(jobs_of "$W/slurm.log" | wc -l)
check "4 sbatch submissions (3 training jobs + 1 retry; data, partition, aggregate ran locally): $submitted" \
  test "$submitted" -eq 4
check "partition ran as a local rule" grep -q "^localrule partition:" "$W/slurm.log"
mems=$(for id in $(jobs_of "$W/slurm.log"); do echo "$(job_field "$id" MinMemoryNode)/$(job_field "$id" TimeLimit)"; done | sort | uniq -c | xargs)
say "memory/time limits of the 4 jobs: $mems"
check "each job asks the rule's memory and time (2000M, 15 min), the retry twice both" \
  test "$mems" = "3 2000M/00:15:00 1 4000M/00:30:00"
check "SLURM's log of the cancelled job kept under .snakemake/slurm_logs/rule_train/" \
  test -n "$(grep -rl . "$W/slurm/.snakemake/slurm_logs/rule_train" 2>/dev/null | grep "/$cancelled.log$" || true)"
grep -h "torch threads" "$W"/slurm/results/logs/train/smoke/*/*/*/seed0.log | sort | uniq -c || true
check "the foreign job $FOREIGN is untouched" foreign_alive

# 4. the same target locally, with a different core reservation ------------------------------
say "local run: snakemake --cores 2 --set-threads train=2 --configfile config/smoke.yaml -- $TARGET"
cd "$W/local"
t0=$SECONDS
"$PY" -m snakemake --cores 2 --set-threads train=2 --configfile config/smoke.yaml -- "$TARGET" \
  >"$W/local.log" 2>&1 || { tail -40 "$W/local.log"; fail "local run failed"; }
say "local run finished in $((SECONDS - t0)) s"
same_numbers() {
  "$PY" - "$W/slurm/results" "$W/local/results" <<'EOF'
import csv, json, sys
from pathlib import Path
a, b = Path(sys.argv[1]), Path(sys.argv[2])
jobs = sorted(p.parent.relative_to(a) for p in a.glob("smoke/*/*/*/seed*/metrics.json"))
assert len(jobs) == 3, jobs
def rows(p):
    with open(p, newline="") as fh:
        return [{k: v for k, v in r.items() if k != "seconds"} for r in csv.DictReader(fh)]
bad = []
for j in jobs:
    ma, mb = (json.loads((r / j / "metrics.json").read_text()) for r in (a, b))
    same = all(ma[k] == mb[k] for k in ("final", "monitor", "partition", "acknowledged_round", "rounds"))
    same = same and rows(a / j / "rounds.csv") == rows(b / j / "rounds.csv")
    print(f"  {j}: acc {ma['final']['acc']:.4f} (slurm) vs {mb['final']['acc']:.4f} (local), "
          f"Ac.M {ma['final']['acc_minority']:.4f} vs {mb['final']['acc_minority']:.4f}: "
          f"{'identical' if same else 'DIFFERENT'}")
    if not same:
        bad.append(str(j))
sys.exit(1 if bad else 0)
EOF
}
check "metrics.json (final, monitor, partition) and rounds.csv identical, SLURM vs local, all 3 jobs" same_numbers

# 5. GPU form: one GPU per job, more than one job at a time -----------------------------------
gpu_run() {  # gpu_run NAME ARGS...: runs Snakemake in $W/NAME until two of its jobs hold a GPU at
  # once (or it ends, or 2 minutes pass), then stops it; MAX_GPU_JOBS: the most that did at once
  local name=$1 pid n id
  shift
  say "$name: snakemake $* --configfile config/smoke.yaml -- $TARGET"
  cd "$W/$name"
  "$PY" -m snakemake "$@" --configfile config/smoke.yaml -- "$TARGET" >"$W/$name.log" 2>&1 &
  pid=$!
  SMKS+=("$pid")
  MAX_GPU_JOBS=0
  for _ in $(seq 600); do
    kill -0 "$pid" 2>/dev/null || break
    record_jobs "$W/$name.log"
    n=0
    for id in $(squeue -h -t RUNNING -o %i 2>/dev/null | grep -Fxf <(jobs_of "$W/$name.log") || true); do
      [ -s "$W/jobs/$id.show" ] && one_gpu "$id" && n=$((n + 1))
    done
    if [ "$n" -gt "$MAX_GPU_JOBS" ]; then
      MAX_GPU_JOBS=$n
      squeue -t RUNNING -O "JobID:8,State:10,tres-per-job:14,NumCPUs:6,Comment:50" | sed 's/^/  /'
      scontrol -d show node "$NODE" | grep -o "GresUsed=[^ ]*" | sed 's/^/  node /'
    fi
    [ "$MAX_GPU_JOBS" -ge 2 ] && break
    sleep 0.2
  done
  record_jobs "$W/$name.log"
  stop_run "$pid" "$W/$name.log"
  record_jobs "$W/$name.log"
}
# Snakemake waits for its running jobs after SIGTERM (minutes here): the jobs of this run are cancelled
# by id instead, and Snakemake killed after 10 s.
stop_run() {  # stop_run PID LOG
  local ids
  kill -TERM "$1" 2>/dev/null || true
  ids=$(jobs_of "$2")
  # shellcheck disable=SC2086
  [ -z "$ids" ] || scancel $ids 2>/dev/null || true
  for _ in $(seq 50); do kill -0 "$1" 2>/dev/null || break; sleep 0.2; done
  kill -KILL "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
}

gpu_run gpu "${GPU_ARGS[@]}"
check "GPU form: only profiles/slurm is loaded" only_slurm_profile "$W/gpu.log"
check "GPU form: every submitted job asks for one GPU (--gpus=1)" all_jobs "$W/gpu.log" one_gpu
check "GPU form: every job runs with --latency-wait 60" all_jobs "$W/gpu.log" waits60
check "GPU form: $MAX_GPU_JOBS training jobs held a GPU at the same time (no cap of one)" test "$MAX_GPU_JOBS" -ge 2

# 6. the other form: --profile profiles/slurm ---------------------------------------------------
gpu_run profile "${GPU_ARGS[@]/--workflow-profile/--profile}"
check "--profile form: no workflow profile is loaded beside profiles/slurm" no_workflow_profile "$W/profile.log"
check "--profile form: its jobs run with profiles/slurm's --latency-wait 60" all_jobs "$W/profile.log" waits60
check "--profile form: still $MAX_GPU_JOBS GPU jobs at the same time" test "$MAX_GPU_JOBS" -ge 2
check "the foreign job $FOREIGN is untouched" foreign_alive

# 7. the jobs submitted here, and only those ---------------------------------------------------
ids=$(own_jobs | grep -vx "$FOREIGN" || true)
# shellcheck disable=SC2086
[ -z "$ids" ] || scancel $ids 2>/dev/null || true
for _ in $(seq 60); do
  [ -z "$(squeue -h -o %i 2>/dev/null | grep -vx "$FOREIGN" || true)" ] && break
  sleep 0.5
done
check "the foreign job $FOREIGN survived the whole test (held, never cancelled)" foreign_alive
scancel "$FOREIGN"

if [ ${#FAILED[@]} -gt 0 ]; then
  say "FAIL: ${#FAILED[@]} check(s) failed:"
  printf '  - %s\n' "${FAILED[@]}"
  exit 1
fi
say "PASS"
