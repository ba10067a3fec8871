#!/usr/bin/env bash
# SLURM smoke test: a throw-away single-node SLURM cluster on this machine, the README's SLURM
# commands run through profiles/slurm unmodified, and the numbers compared with a local run.
#
#   sudo tests/slurm_smoke.sh            (root: it installs packages and starts daemons)
#
# 1. installs munge, slurmctld, slurmd and the SLURM clients from the distribution's packages
#    (Debian/Ubuntu apt-get) when they are missing;
# 2. starts munged, slurmctld and slurmd on private paths under $SMOKE_DIR (default
#    /tmp/fedbalance-slurm-smoke; its own munge socket and key, SLURM_CONF pointing at its own
#    slurm.conf): one node with this machine's CPUs, $FAKE_GPUS fake GPUs in gres.conf (device
#    files made with mknod like /dev/null), no accounting database (AccountingStorageType=accounting_storage/none);
# 3. CPU form: the README's CPU-only command (account/partition filled in) on a 3-job target of a
#    tiny config (config/quick.yaml shrunk: 3 losses x 1 setting x 1 seed, 6 rounds). While it
#    runs, it checks that a training job's log shows per-round progress lines, then `scancel`s one
#    job: Snakemake must notice (squeue status command) and the retry must resume and finish;
# 4. runs the same target locally (--cores 2, and --set-threads train=2: the reservation changes,
#    the torch thread count must not) and compares every job's metrics.json and rounds.csv;
# 5. GPU form: the README's GPU command; passes when squeue shows more than one training job
#    holding a GPU at the same time (this machine has no CUDA, so the jobs then fail: expected);
# 6. stops the daemons it started, by PID (also on failure).
#
# Environment: PYTHON (default python3, needs `pip install -e '.[test]'`), SMOKE_DIR, FAKE_GPUS (2).
# Takes about 5 minutes on 2 cores. Not part of .ci/run (root, daemons, minutes); see README.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
W=${SMOKE_DIR:-/tmp/fedbalance-slurm-smoke}
FAKE_GPUS=${FAKE_GPUS:-2}
PY=${PYTHON:-python3}
PIDS=()

say() { printf '[smoke %(%H:%M:%S)T] %s\n' -1 "$*"; }
fail() { say "FAIL: $*"; exit 1; }

cancel_all() {  # this private cluster runs only this test's jobs
  local ids
  ids=$(squeue -h -o %i 2>/dev/null || true)
  [ -n "$ids" ] || return 0
  scancel $ids 2>/dev/null || true
  for _ in $(seq 60); do [ -z "$(squeue -h -o %i 2>/dev/null)" ] && break; sleep 0.5; done
}

cleanup() {
  local pid
  [ ${#PIDS[@]} -gt 0 ] && cancel_all
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
  return 0
}
LINKS=()
trap cleanup EXIT
trap 'exit 130' INT TERM

[ "$(id -u)" -eq 0 ] || fail "run as root (installs packages, starts munged/slurmctld/slurmd)"

# 1. packages ---------------------------------------------------------------------------------
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v munged >/dev/null \
  || ! command -v sbatch >/dev/null; then
  say "installing munge, slurmctld, slurmd, slurm-client (apt-get)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    munge slurmctld slurmd slurm-client >/dev/null
fi
"$PY" -c "import snakemake_executor_plugin_slurm" 2>/dev/null \
  || fail "snakemake-executor-plugin-slurm missing: pip install -e '.[test]'"
say "$(slurmctld -V), snakemake $("$PY" -m snakemake --version)," \
  "plugin $("$PY" -c 'import importlib.metadata as m; print(m.version("snakemake-executor-plugin-slurm"))')"

# 2. cluster ----------------------------------------------------------------------------------
rm -rf "$W"
mkdir -p "$W"/{state,spool,log,run}
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
# configuration is linked there for the test's duration; an existing SLURM setup is left alone.
mkdir -p /etc/slurm
for f in slurm.conf gres.conf; do
  [ -e "/etc/slurm/$f" ] && fail "/etc/slurm/$f exists: run this on a machine without a SLURM setup"
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

# 3. the tiny study ---------------------------------------------------------------------------
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
for run in slurm local gpu; do
  mkdir -p "$W/$run"
  ln -s "$REPO/Snakefile" "$W/$run/Snakefile"
  ln -s "$REPO/workflow" "$W/$run/workflow"
  ln -s "$REPO/profiles" "$W/$run/profiles"
  ln -s "$REPO/src" "$W/$run/src"
  ln -s "$REPO/envs" "$W/$run/envs"
  ln -s "$REPO/report" "$W/$run/report"
  mkdir -p "$W/$run/config" && cp "$W/smoke.yaml" "$W/$run/config/smoke.yaml"
  ln -s "$REPO/config/config.yaml" "$W/$run/config/config.yaml"
done
# the job folders and logs of the 3 training jobs
JOBLOG=results/logs/train/smoke/$DATASET/g10/focal/seed0.log

# 3a. CPU form: the README's CPU-only command; account/partition are this cluster's. This cluster
# has no accounting database, so no account can be validated: --slurm-no-account stands for it
# (the README's form for clusters without accounts).
say "CPU form: snakemake --workflow-profile profiles/slurm --slurm-no-account --default-resources slurm_partition=smoke --config device=cpu --configfile config/smoke.yaml -- $TARGET"
cd "$W/slurm"
t0=$SECONDS
"$PY" -m snakemake --workflow-profile profiles/slurm --slurm-no-account \
  --default-resources slurm_partition=smoke --config device=cpu --configfile config/smoke.yaml -- "$TARGET" \
  >"$W/slurm.log" 2>&1 &
SMK=$!
# a running job's log shows progress lines; then cancel that job once (scancel) mid-run
seen_line=""
cancelled=""
while kill -0 "$SMK" 2>/dev/null; do
  if [ -z "$cancelled" ] && [ -f "$JOBLOG" ] && grep -q " round [1-9][0-9]*/$ROUNDS " "$JOBLOG"; then
    seen_line=$(grep " round " "$JOBLOG" | tail -1)
    jid=$(squeue -h -o "%i %T %k" | awk '$2 == "RUNNING" && $3 ~ /focal/ {print $1; exit}')
    if [ -n "$jid" ]; then
      scancel "$jid"
      cancelled=$jid
      say "job log while running: $seen_line"
      say "job $jid as SLURM runs it: $(scontrol show job -o "$jid" | grep -o 'TRES=[^ ]*'), $(scontrol show job -o "$jid" | grep -o 'TresPerJob=[^ ]*' || echo 'no GPU requested')"
      say "scancel $jid (the focal job, mid-run)"
    fi
  fi
  sleep 0.5
done
wait "$SMK" && rc=0 || rc=$?
say "CPU form finished: exit $rc in $((SECONDS - t0)) s"
[ "$rc" -eq 0 ] || { tail -40 "$W/slurm.log"; fail "SLURM run failed"; }
[ -n "$seen_line" ] || fail "no progress line in $JOBLOG while the job ran"
[ -n "$cancelled" ] || fail "never found the running focal job to cancel"
grep -q "SLURM status is: 'CANCELLED'" "$W/slurm.log" \
  || fail "Snakemake did not report the cancelled job $cancelled as failed"
say "Snakemake noticed the cancel: $(grep -o "SLURM-job '$cancelled' failed[^.]*" "$W/slurm.log" | head -1)"
say "retried job's log (resumed from its checkpoint): $(grep -m1 " round " "$W/slurm/$JOBLOG")"
grep -m1 " round " "$W/slurm/$JOBLOG" | grep -q " round 1/" && fail "the retry started again from round 1"
submitted=$(grep -c "has been submitted with SLURM jobid" "$W/slurm.log" || true)
say "sbatch submissions: $submitted (3 training jobs + 1 retry of the cancelled one; partition, data, aggregate ran locally)"
[ "$submitted" -eq 4 ] || fail "expected 4 submissions (3 train + 1 retry), got $submitted"
grep -q "^localrule partition:" "$W/slurm.log" || fail "partition did not run as a local rule"
grep -h "torch threads" "$W"/slurm/results/logs/train/smoke/*/*/*/seed0.log | sort | uniq -c

# 4. the same target locally, with a different core reservation ------------------------------
say "local run: snakemake --cores 2 --set-threads train=2 --configfile config/smoke.yaml -- $TARGET"
cd "$W/local"
t0=$SECONDS
"$PY" -m snakemake --cores 2 --set-threads train=2 --configfile config/smoke.yaml -- "$TARGET" \
  >"$W/local.log" 2>&1 || { tail -40 "$W/local.log"; fail "local run failed"; }
say "local run finished in $((SECONDS - t0)) s"
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
if bad:
    sys.exit(f"metrics differ between SLURM and local: {bad}")
print("  metrics.json (final, monitor, partition) and rounds.csv identical for all 3 jobs")
EOF

# 5. GPU form: more than one GPU job at a time --------------------------------------------------
say "GPU form: snakemake --workflow-profile profiles/slurm --slurm-no-account --default-resources slurm_partition=smoke --config device=cuda --configfile config/smoke.yaml -- $TARGET"
cd "$W/gpu"
"$PY" -m snakemake --workflow-profile profiles/slurm --slurm-no-account \
  --default-resources slurm_partition=smoke --configfile config/smoke.yaml --config device=cuda -- "$TARGET" \
  >"$W/gpu.log" 2>&1 &
SMK=$!
max_gpu_jobs=0
for _ in $(seq 600); do
  kill -0 "$SMK" 2>/dev/null || break
  n=$(squeue -h -t RUNNING -O "JobID,tres-per-job" | grep -c "gpu" || true)
  if [ "$n" -gt "$max_gpu_jobs" ]; then
    max_gpu_jobs=$n
    squeue -t RUNNING -O "JobID:8,State:10,tres-per-job:14,NumCPUs:6,Comment:50" | sed 's/^/  /'
    scontrol -d show node "$NODE" | grep -o "GresUsed=[^ ]*" | sed 's/^/  node /'
  fi
  [ "$max_gpu_jobs" -ge 2 ] && break
  sleep 0.2
done
kill -TERM "$SMK" 2>/dev/null || true
for _ in $(seq 50); do kill -0 "$SMK" 2>/dev/null || break; sleep 0.2; done
kill -KILL "$SMK" 2>/dev/null || true
wait "$SMK" 2>/dev/null || true
cancel_all
say "GPU form: at most $max_gpu_jobs training jobs held a GPU at the same time"
[ "$max_gpu_jobs" -ge 2 ] || { tail -30 "$W/gpu.log"; fail "never more than one GPU job at a time"; }
say "PASS"
