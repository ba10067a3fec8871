#!/usr/bin/env bash
# One GPU session in one call: the GPU suite, then reference jobs on CUDA until a deadline.
#
#   scripts/gpu_session.sh OUT COMMIT WINDOW_S WORKERS SUITE_S JOBSPEC...
#
# OUT: a folder for what comes back (gpu_suite.json, logs, refruns.tgz: every job folder without its
# trajectory; an unfinished job keeps checkpoint.pt, so a later run on a GPU resumes it).
# COMMIT: the commit of this checkout (a copy without git; on a git checkout it must be its HEAD). WINDOW_S: seconds from the start to the end
# of everything, the archive included. WORKERS: reference jobs at once. SUITE_S: the suite's budget
# (0 skips it). JOBSPEC: experiment:settings:losses:seeds, as `scripts/reference_jobs.py run --jobs`; none: the
# jobs the reference set REFERENCE (default reference/mnist) lacks, in the evidence order
# (`scripts/reference_jobs.py missing`; the runner starts them in that order until the window closes).
# DEVICE (default cuda) and CONFIG (default config/mnist.yaml) override the jobs' device and config, RUNS
# (default /tmp/refruns) the folder the jobs run in; CAPTURE=1 trains the jobs with the captured step (the
# suite's round section times it beside the eager step either way).
# MNIST comes from data/MNIST/raw or, gzipped, from data/mnist-gz (a machine without network).
# Exit status: the runner's (0: every job it started finished or stopped at the window; 1: a job failed; 2: it refused
# its arguments); the archive is written either way.
set -u
out=$1 commit=$2 window=$3 workers=$4 suite=$5
shift 5
start=$(date +%s)
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
runs=${RUNS:-/tmp/refruns}
mkdir -p "$out"
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
if [ $# -eq 0 ]; then
  mapfile -t missing < <(python3 scripts/reference_jobs.py missing --config "${CONFIG:-config/mnist.yaml}" \
    --reference "${REFERENCE:-reference/mnist}" 2>>"$out/missing.log")
  set -- "${missing[@]}"
  echo "no JOBSPEC: the ${#missing[@]} specs that ${REFERENCE:-reference/mnist} lacks, in the evidence order"
fi
specs=()
for s in "$@"; do specs+=(--jobs "$s"); done
left=$((window - ($(date +%s) - start) - 30))
[ "$left" -ge 0 ] || left=0   # a window already spent: the runner starts what it must to archive it, nothing runs on
echo "jobs: $left s, $workers at once"
(while sleep 20; do nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader; done) >"$out/gpu_util.txt" 2>&1 &
watch=$!
python3 scripts/reference_jobs.py run --checkout . --commit "$commit" --out "$runs" --device "${DEVICE:-cuda}" --config "${CONFIG:-config/mnist.yaml}" \
  --workers "$workers" --deadline-s "$left" ${CAPTURE:+--capture} "${specs[@]}" >"$out/runner.log" 2>&1
rc=$?
kill $watch 2>/dev/null
if [ -d "$runs" ]; then
  tar czf "$out/refruns.tgz" -C "$runs" --exclude='*.pt.tmp' --exclude='trajectory*' --exclude='.lock' .
else
  tar czf "$out/refruns.tgz" -T /dev/null   # no job started: an empty archive
fi
tail -n 40 "$out/runner.log"
if [ "$rc" -ne 0 ]; then
  # the runner refused its arguments (2) or a job failed (1): say so and fail, whatever the archive holds
  echo "FAILED: the runner exited with status $rc after $(($(date +%s) - start)) s (runner.log above)" >&2
  exit "$rc"
fi
echo "done after $(($(date +%s) - start)) s"
