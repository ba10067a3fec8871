#!/usr/bin/env bash
# The reference set's missing jobs, trained by the workflow in the evidence order, SLOTS at once, no core idle.
#
#   scripts/evidence_slots.sh SLOTS RUNS [SNAKEMAKE_OPTION ...]
#
# Run it from a checkout pinned at one commit (a `git worktree`, reference/README.md). Each of SLOTS slots takes the
# first job of `fedbalance reference missing --targets RUNS` (the evidence order) not finished in RUNS nor running in
# another slot, builds its inputs (data, partition) while it holds the queue's lock, then trains it with its own
# `snakemake --cores 1 --configfile CONFIG --config results_dir=RUNS SNAKEMAKE_OPTION ... -- TARGET` and takes the next.
# SNAKEMAKE_OPTION's `--config KEY=VALUE ...` entries join that --config (Snakemake keeps only its last one); a
# --configfile or a results_dir entry is refused: CONFIG and RUNS are those.
# One Snakemake for a batch runs its jobs in an order of its own; here a job starts only when every job before it in
# the order has started, and a slot that ends takes the next job at once. The one exception: a job whose Snakemake
# would build a file another slot's Snakemake builds (its branch source's kept state, a derived job's source) waits
# until that slot's job has ended, and the next job of the order is taken meanwhile (RUNS/.slots/claims.<k>: what
# slot k's job builds, from its dry run; waits.<k>: the jobs that wait for it, not dry-run again until it ends).
# RUNS is refused before anything is written when it is empty, a file, a set or in, holding or linking into one,
# the checkout's root or a tracked folder (PYTHON, default python3, runs that guard with this checkout's library).
# REFERENCE (default reference/mnist): the set; CONFIG (default config/mnist.yaml); STOP (default RUNS/.slots/STOP):
# while that file exists no slot starts a job (running ones finish; a new run clears nothing, delete it yourself).
# A job that fails (its log: RUNS/.slots/slot<k>.log) is tried again after RETRY_S (default 60) seconds, by the
# next free slot, at most TRIES (default 2) times in a run. Given-up jobs: RUNS/.slots/failed. A slot with nothing
# left to take waits while another slot's job runs (it may fail and come back, or free a job that waits), then ends.
# JOBS (default unset: no limit): the most jobs this run starts (a try again is no new job, and is still made).
# PLAN (default unset: the evidence order of this checkout's library): the steps `missing --plan` takes instead,
# space-separated, e.g. PLAN=mismatch::0,1,2: the run ends when that step is done, where the worktree is moved to a
# commit that knows the next one (reference/README.md); a PLAN that `missing` refuses is a bad argument.
# SNAKEMAKE (default `python3 -m snakemake`) and FEDBALANCE (default `python3 -m fedbalance`) name the commands.
# The slots write RUNS/.slots/events.log: "start|end|failed|gave-up TARGET SLOT rc=RC TIME", one line each, and
# "missing-failed - SLOT" when `missing` failed (its stderr: missing.log; the slot asks again after RETRY_S, and
# ends after 10 failures in a row). `missing` failing before any slot starts is a bad argument.
# Exit status: 0 when no job is left to start, STOP exists or JOBS jobs started (the last line says which), 1 when a
# job was given up, 2 on bad arguments.
set -u
if [ $# -lt 2 ] || ! [[ $1 =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: scripts/evidence_slots.sh SLOTS RUNS [SNAKEMAKE_OPTION ...] (SLOTS: a positive integer)" >&2
  exit 2
fi
if [ -n "${JOBS:-}" ] && ! [[ $JOBS =~ ^[1-9][0-9]*$ ]]; then
  echo "FAILED: JOBS=$JOBS: a positive integer (the most jobs this run starts), or unset" >&2
  exit 2
fi
slots=$1 runs=$2
shift 2
config=${CONFIG:-config/mnist.yaml} reference=${REFERENCE:-reference/mnist}
[ -f "$config" ] || { echo "FAILED: CONFIG $config: no such file (run from a checkout)" >&2; exit 2; }
[ -d "$reference" ] || { echo "FAILED: REFERENCE $reference: no such folder" >&2; exit 2; }
# before anything is written (RUNS/.slots, the jobs): RUNS is a folder of its own, neither a set nor in, holding or
# linking into one, nor the checkout's root, its git folder or a tracked folder (fedbalance.jobs.seal.refuse_written,
# with this checkout's library; "" and a file are named too)
here=$(cd -- "$(dirname -- "$0")/.." && pwd -P)
PYTHONPATH="$here/src${PYTHONPATH:+:$PYTHONPATH}" "${PYTHON:-python3}" -m fedbalance.jobs.seal written RUNS "$runs" \
  || exit 2
read -r -a snakemake <<<"${SNAKEMAKE:-python3 -m snakemake}"
read -r -a fedbalance <<<"${FEDBALANCE:-python3 -m fedbalance}"
state="$runs/.slots"
stop=${STOP:-$state/STOP}
# Snakemake keeps only the last --config it is given: the caller's KEY=VALUE entries join the script's results_dir
sets=() opts=()
while [ $# -gt 0 ]; do
  case $1 in
    --config | -C)
      shift
      while [ $# -gt 0 ] && [[ $1 != -* ]]; do sets+=("$1"); shift; done ;;
    --config=*) sets+=("${1#*=}"); shift ;;
    --configfile | --configfiles | --configfile=* | --configfiles=*)
      echo "FAILED: $1: the config file is CONFIG=$config (\`missing\` reads it too), not a Snakemake option" >&2
      exit 2 ;;
    *) opts+=("$1"); shift ;;
  esac
done
for kv in "${sets[@]}"; do
  case $kv in
    results_dir=*) echo "FAILED: --config $kv: the jobs' results folder is RUNS ($runs)" >&2; exit 2 ;;
    *=*) ;;
    *) echo "FAILED: --config $kv: KEY=VALUE entries only" >&2; exit 2 ;;
  esac
done
# --nolock: the claims below keep the slots apart; Snakemake's lock cannot (every Snakemake that ends deletes
# .snakemake/locks whole, the other runs' locks with it, and one starting then fails writing its own)
smk=("${snakemake[@]}" --nolock --rerun-incomplete --configfile "$config" --config results_dir="$runs" "${sets[@]}"
  "${opts[@]}")
mkdir -p "$state"

event() { echo "$1 $2 $3 rc=$4 $(date -u +%FT%TZ)" >>"$state/events.log"; }

# The set's missing jobs as targets in RUNS, in the evidence order. The set is read as it is, committed or not
# (FEDBALANCE_ACCEPT_UNCOMMITTED=1, said in missing.log): a collect not yet committed (collect_render.sh's render, say)
# takes its jobs off the list at once, and no slot waits for the commit; no number of the set is read here.
read -r -a plan <<<"${PLAN:-}"
list_missing() {
  FEDBALANCE_ACCEPT_UNCOMMITTED=1 "${fedbalance[@]}" reference missing --config "$config" --reference "$reference" \
    --targets "$runs" ${plan[@]+--plan "${plan[@]}"}
}

# Under the queue's lock: the first missing job not finished in RUNS, running or given up (once JOBS jobs started, the
# first of those that failed and is to be tried again: the cap counts jobs, not tries); nothing when none is left;
# status 1 when `missing` fails (a set being collected into, say: the caller waits and asks again).
next_job() {
  local t listed capped=""
  listed=$(list_missing 2>>"$state/missing.log") || return 1
  if [ -n "${JOBS:-}" ] && [ "$(sort -u "$state/started" | wc -l)" -ge "$JOBS" ]; then capped=1; fi
  while IFS= read -r t; do
    [ -n "$t" ] || continue
    [ -e "$t" ] && continue   # finished here, not collected yet
    grep -qxF -- "$t" "$state/running" "$state/failed" && continue
    [ -n "$capped" ] && ! grep -qxF -- "$t" "$state/started" && continue
    cat "$state"/waits.* 2>/dev/null | grep -qxF -- "$t" && continue   # waits for a job still running
    planned "$t" >"$state/plan.$1"
    # a job whose plan builds a file another slot's job builds (its branch or derive source, say) waits for that job
    if [ -s "$state/plan.$1" ]; then
      for claims in "$state"/claims.*; do
        [ -e "$claims" ] && grep -qxFf "$state/plan.$1" "$claims" || continue
        echo "$t" >>"$state/waits.${claims##*.}"
        continue 2
      done
    fi
    mv "$state/plan.$1" "$state/claims.$1"
    echo "$t"
    return 0
  done <<<"$listed"
}

# The files TARGET's Snakemake would build, one a line (its dry run's `output:` entries).
planned() {
  "${smk[@]}" --cores 1 --dry-run -- "$1" 2>/dev/null | sed -n 's/^ *output: //p' | tr ',' '\n' | sed 's/^ *//; /^$/d'
}

slot() {
  local k=$1 t rc misses=0
  exec 9>"$state/queue.lock"
  while [ ! -e "$stop" ]; do
    flock 9
    if ! t=$(next_job "$k"); then
      flock -u 9
      event missing-failed - "$k" 1
      misses=$((misses + 1))
      [ "$misses" -lt 10 ] || { echo "missing failed 10 times in a row (slot $k)" >>"$state/failed"; return 1; }
      sleep "${RETRY_S:-60}"
      continue
    fi
    misses=0
    if [ -z "$t" ]; then
      # nothing to take: done, unless a job running in another slot may fail and come back
      [ -s "$state/running" ] || { flock -u 9; return 0; }
      flock -u 9
      sleep "${RETRY_S:-60}"
      continue
    fi
    echo "$t" >>"$state/running"
    echo "$t" >>"$state/started"
    "${smk[@]}" --cores 1 --omit-from train keep -- "$t" >"$state/slot$k.prepare.log" 2>&1
    flock -u 9
    event start "$t" "$k" -
    "${smk[@]}" --cores 1 -- "$t" >"$state/slot$k.log" 2>&1
    rc=$?
    flock 9
    grep -vxF -- "$t" "$state/running" >"$state/running.new"
    mv "$state/running.new" "$state/running"
    rm -f "$state/claims.$k" "$state/waits.$k"
    if [ "$rc" -eq 0 ]; then event end "$t" "$k" 0; flock -u 9; continue; fi
    echo "$t" >>"$state/tries"
    if [ "$(grep -cxF -- "$t" "$state/tries")" -ge "${TRIES:-2}" ]; then
      echo "$t" >>"$state/failed"
      event gave-up "$t" "$k" "$rc"
    else
      event failed "$t" "$k" "$rc"
    fi
    flock -u 9
    cp "$state/slot$k.log" "$state/slot$k.failed.log"
    sleep "${RETRY_S:-60}"
  done
}

if ! list_missing >/dev/null 2>"$state/missing.log"; then
  echo "FAILED: fedbalance reference missing refuses the set or the config:" >&2
  tail -n 5 "$state/missing.log" >&2
  exit 2
fi
: >"$state/running"; : >"$state/started"; : >"$state/failed"; : >"$state/tries"   # a run starts afresh
rm -f "$state"/claims.* "$state"/waits.* "$state"/plan.*
for k in $(seq 1 "$slots"); do slot "$k" & done
wait
if [ -s "$state/failed" ]; then
  echo "FAILED: given up after ${TRIES:-2} tries (logs: $state/slot<k>.failed.log):" >&2
  cat "$state/failed" >&2
  exit 1
fi
started=$(sort -u "$state/started" | wc -l)
if [ -e "$stop" ]; then why="STOP ($stop) exists"
elif [ -n "${JOBS:-}" ] && [ "$started" -ge "$JOBS" ]; then why="JOBS=$JOBS reached"
else why="no job of the order is left to start"; fi
echo "the slots ended, $started jobs started in this run: $why (events: $state/events.log)"
