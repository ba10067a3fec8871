#!/usr/bin/env bash
# One GPU session in one call: the GPU suite, then reference jobs trained by the workflow on CUDA until a deadline.
#
#   scripts/gpu_session.sh OUT COMMIT WINDOW_S JOBS SUITE_S [JOB ...]
#
# OUT: a folder for what comes back (gpu_suite.json, logs, targets.txt, refruns.tgz: the results folder's job folders
# without trajectories; an unfinished job keeps checkpoint.pt, so a later run on a GPU resumes it).
# COMMIT: the commit of this checkout (a copy without git; on a git checkout it must be its HEAD), recorded in every
# job's provenance.json (FEDBALANCE_COMMIT). WINDOW_S: seconds from the start to the end of everything, the archive
# included. JOBS: training jobs at once on the GPU (Snakemake's --cores and gpu_slots). SUITE_S: the suite's budget
# (0 skips it). JOB: experiment/dataset/setting/loss/seed<k>, as `python -m fedbalance jobs` prints them; none: the
# jobs the reference set REFERENCE (default reference/mnist) lacks, in the evidence order
# (`python -m fedbalance reference missing --targets`), those of its next step prioritised (`--next-step`, first.txt).
# The jobs are the workflow's (snakemake --configfile CONFIG --config results_dir=RUNS device=DEVICE -- TARGETS), so
# twins are copied, derived jobs derived and branched ones branched as everywhere else; at the deadline Snakemake and
# its jobs are stopped (their checkpoints stay). Collect the archive's jobs with `fedbalance reference collect`.
# DEVICE (default cuda) and CONFIG (default config/mnist.yaml) override the jobs' device and config, RUNS
# (default /tmp/refruns) the folder the jobs run in; CAPTURE=1 trains the jobs with the captured step (the suite's
# round section times it beside the eager step either way).
# A machine without Snakemake: wheels in WHEELS (default .whl/, made by `python scripts/gpu_wheels.py`: the
# library's closure less the device image's packages, 17 MB for Python 3.12 with pulp cut to one solver) are
# installed into SITE (default /tmp/fedbalance-site) with `pip install --no-index --no-deps --target`, and SITE goes
# first on PYTHONPATH. MNIST comes from data/MNIST/raw or, gzipped, from data/mnist-gz (a machine without network).
# A device call carries 64 MiB (the tree, ~28 MB; the wheels; MNIST gzipped, 12 MB): carry .whl and data/mnist-gz.
# OUT, RUNS and SITE are refused before anything is written when one is, holds, lies in or links into a set, the
# checkout's root or a tracked folder.
# Exit status: Snakemake's (0: every job it started finished, or the window closed on them; 1: a job failed or a
# target is no job of the config; 2: bad arguments, nothing written); the archive is written either way.
set -u
if [ $# -lt 5 ]; then
  echo "usage: scripts/gpu_session.sh OUT COMMIT WINDOW_S JOBS SUITE_S [JOB ...]" >&2
  exit 2
fi
out=$1 commit=$2 window=$3 workers=$4 suite=$5
shift 5
start=$(date +%s)
site=${SITE:-/tmp/fedbalance-site}
runs=${RUNS:-/tmp/refruns}
# before anything is written: OUT, RUNS and SITE are folders of their own, neither a set nor in, holding or linking
# into one, nor the checkout's root, its git folder or a tracked folder (fedbalance.jobs.seal.refuse_written; in a copy
# without git: outside the copy)
here=$(cd -- "$(dirname -- "$0")/.." && pwd -P)
PYTHONPATH="$here/src${PYTHONPATH:+:$PYTHONPATH}" python3 -m fedbalance.jobs.seal written OUT "$out" RUNS "$runs" \
  SITE "$site" || exit 2
export PYTHONUNBUFFERED=1 PYTHONPATH="$site:$PWD/src${PYTHONPATH:+:$PYTHONPATH}" FEDBALANCE_COMMIT="$commit"
mkdir -p "$out"
wheels=(${WHEELS:-.whl}/*.whl)
if [ -e "${wheels[0]}" ]; then
  python3 -m pip install --quiet --no-index --no-deps --target "$site" "${wheels[@]}" >"$out/wheels.log" 2>&1 \
    || { echo "FAILED: installing the wheels of ${WHEELS:-.whl} (wheels.log)" >&2; exit 2; }
  echo "installed ${#wheels[@]} wheels from ${WHEELS:-.whl} into $site"
fi
python3 -c "import snakemake" 2>/dev/null || { echo "FAILED: no snakemake here: carry its wheels in ${WHEELS:-.whl}/ (see the header)" >&2; exit 2; }
for f in data/mnist-gz/*.gz; do
  [ -e "$f" ] || continue
  mkdir -p data/MNIST/raw
  [ -e "data/MNIST/raw/$(basename "$f" .gz)" ] || gunzip -c "$f" >"data/MNIST/raw/$(basename "$f" .gz)"
done
nvidia-smi >"$out/nvidia-smi.txt" 2>&1
python3 -c "import torch, sys; print(sys.version, torch.__version__, torch.version.cuda, torch.cuda.get_device_name())" >"$out/versions.txt" 2>&1
if [ "$suite" != 0 ]; then
  timeout $((suite + 60)) python3 benchmarks/gpu_suite.py --sections memory,round,centralised --capture --budget-s "$suite" \
    --out "$out/gpu_suite.json" >"$out/gpu_suite.log" 2>&1
  echo "suite rc=$? after $(($(date +%s) - start)) s"
fi
config=${CONFIG:-config/mnist.yaml}
# a copy without git (a device machine's) cannot read its set as committed: `missing` (a list of jobs, no evidence read)
# takes it on purpose there, which missing.log says
accept=()
git rev-parse --is-inside-work-tree >/dev/null 2>&1 || accept=(env FEDBALANCE_ACCEPT_UNCOMMITTED=1)
if [ $# -eq 0 ]; then
  "${accept[@]}" python3 -m fedbalance reference missing --config "$config" --reference "${REFERENCE:-reference/mnist}" \
    --targets "$runs" >"$out/targets.txt" 2>>"$out/missing.log"
  # Snakemake orders a batch's jobs as it likes: the first step of the order that has a job to run goes first (-P)
  "${accept[@]}" python3 -m fedbalance reference missing --config "$config" --reference "${REFERENCE:-reference/mnist}" \
    --targets "$runs" --next-step >"$out/first.txt" 2>>"$out/missing.log"
  echo "no JOB: the $(wc -l <"$out/targets.txt") jobs that ${REFERENCE:-reference/mnist} lacks, in the evidence order;" \
    "the $(wc -l <"$out/first.txt") of its next step first"
else
  for job in "$@"; do echo "$runs/$job/metrics.json"; done >"$out/targets.txt"
fi
left=$((window - ($(date +%s) - start) - 30))
rc=0
if [ "$left" -gt 0 ]; then
  echo "jobs: $left s, $workers at once"
  (while sleep 20; do nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader; done) >"$out/gpu_util.txt" 2>&1 &
  watch=$!
  mapfile -t targets <"$out/targets.txt"
  first=()
  [ -s "$out/first.txt" ] && mapfile -t first <"$out/first.txt"
  timeout "$left" python3 -m snakemake --cores "$workers" --resources gpu_slots="$workers" --configfile "$config" \
    --config results_dir="$runs" device="${DEVICE:-cuda}" ${CAPTURE:+capture=True} ${first[0]:+--prioritize "${first[@]}"} \
    --rerun-incomplete --keep-going -- "${targets[@]}" >"$out/snakemake.log" 2>&1
  rc=$?
  kill $watch 2>/dev/null
  [ "$rc" -eq 124 ] && { echo "the window closed: running jobs stopped, their checkpoints kept"; rc=0; }
else
  echo "the window is spent: no job starts"   # the archive is still written
fi
if [ -d "$runs" ]; then
  tar czf "$out/refruns.tgz" -C "$runs" --exclude='*.pt.tmp' --exclude='trajectory*' --exclude='.lock' .
else
  tar czf "$out/refruns.tgz" -T /dev/null   # no job started: an empty archive
fi
[ -f "$out/snakemake.log" ] && tail -n 40 "$out/snakemake.log"
if [ "$rc" -ne 0 ]; then
  echo "FAILED: snakemake exited with status $rc after $(($(date +%s) - start)) s (snakemake.log above)" >&2
  exit "$rc"
fi
echo "done after $(($(date +%s) - start)) s"
