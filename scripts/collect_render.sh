#!/usr/bin/env bash
# RUNS' finished jobs collected into the set, the set rendered and the docs spliced from that render, in one command.
#
#   scripts/collect_render.sh RUNS
#
# Run it from the checkout where the set is committed. A set committed without its render leaves every doc that reads
# it stale (tests/test_docs.py and test_reference.py fail on that commit), and a render reads the set as committed:
# here the set must hold no uncommitted change before the collect, so that every uncommitted file after it is the
# collect's, which the render and `docs` then read on purpose (FEDBALANCE_ACCEPT_UNCOMMITTED=1, fedbalance.jobs.seal);
# `docs --check` confirms the docs, and the set and the docs go into one commit (the same files, committed, give the
# same render).
# REFERENCE (default reference/mnist): the set; CONFIG (default config/mnist.yaml); RENDER (default
# results_reference): the render's folder, emptied first (refused, before anything is written, when it is, holds, lies in
# or links into a set, RUNS, the checkout's root or a tracked folder); CORES (default all): the render's --cores.
# PYTHON (default python3) runs that guard with this checkout's library.
# SNAKEMAKE (default `python3 -m snakemake`) and FEDBALANCE (default `python3 -m fedbalance`) name the commands.
# Exit status: 0 when the docs hold the render of the set as collected; 1 when a step failed (the line says which,
# and what in the checkout it left changed); 2 on bad arguments (nothing is changed).
set -u
if [ $# -ne 1 ]; then
  echo "usage: scripts/collect_render.sh RUNS" >&2
  exit 2
fi
runs=$1
config=${CONFIG:-config/mnist.yaml} reference=${REFERENCE:-reference/mnist} render=${RENDER:-results_reference}
cores=${CORES:-all}
read -r -a snakemake <<<"${SNAKEMAKE:-python3 -m snakemake}"
read -r -a fedbalance <<<"${FEDBALANCE:-python3 -m fedbalance}"
[ -d "$runs" ] || { echo "FAILED: RUNS $runs: no such folder" >&2; exit 2; }
[ -f "$config" ] || { echo "FAILED: CONFIG $config: no such file (run from the checkout)" >&2; exit 2; }
[ -d "$reference" ] || { echo "FAILED: REFERENCE $reference: no such folder" >&2; exit 2; }
# before anything is deleted or written: RENDER (emptied) and RUNS (read) are folders of their own, neither a set nor
# in, holding or linking into one, nor the checkout's root, its git folder or a tracked folder such as docs/
# (fedbalance.jobs.seal.refuse_written; this checkout's library, whatever FEDBALANCE names)
here=$(cd -- "$(dirname -- "$0")/.." && pwd -P)
PYTHONPATH="$here/src${PYTHONPATH:+:$PYTHONPATH}" "${PYTHON:-python3}" -m fedbalance.jobs.seal written \
  RENDER "$render" RUNS "$runs" || exit 2
# and apart from RUNS and REFERENCE (a set not sealed yet too), compared as real paths: neither is nor lies in nor holds
# the other (the render folder is emptied first)
render_real=$(realpath -m -- "$render")
for other in RUNS:"$runs" REFERENCE:"$reference"; do
  other_real=$(realpath -m -- "${other#*:}")
  case $render_real/ in "${other_real%/}"/*)
    echo "FAILED: RENDER $render is or lies in ${other%%:*} ${other#*:}: a folder of its own (it is emptied first)" >&2
    exit 2 ;;
  esac
  case $other_real/ in "${render_real%/}"/*)
    echo "FAILED: RENDER $render holds ${other%%:*} ${other#*:}: a folder of its own (it is emptied first)" >&2
    exit 2 ;;
  esac
done
if git -C "$reference" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  pending=$(git -C "$reference" status --porcelain --ignored -- . | head -n 3)
  [ -z "$pending" ] || { printf 'FAILED: REFERENCE %s has uncommitted changes (commit or restore them first):\n%s\n' \
    "$reference" "$pending" >&2; exit 2; }
fi

"${fedbalance[@]}" reference collect "$runs" --into "$reference" || {
  echo "FAILED: collect into $reference (the set is as collect left it; nothing rendered)" >&2; exit 1; }
redo="commit neither; restore the set (git checkout -- $reference && git clean -fdx -- $reference), fix the cause and run this again (collect takes RUNS' jobs again)"
export FEDBALANCE_ACCEPT_UNCOMMITTED=1   # the uncommitted files are this collect's (checked above)
rm -rf -- "$render_real"   # the real path checked above: a link swapped in since, or a trailing slash, is not followed
# the documented render (reference/README.md), with --drop-metadata: Snakemake's record of each of rule from_reference's
# ~2,100 files holds the rule's every input and parameter (1.3 MB each, 2.6 GB in all, 4-5 of a render's 5.5 minutes at
# 607 jobs); this render is emptied first every time, so no later run reads them
"${snakemake[@]}" --drop-metadata --cores "$cores" --configfile "$config" \
  --config reference_dir="$reference" results_dir="$render" || {
  echo "FAILED: the render of $reference into $render; $reference is collected into and the docs are stale:" \
    "$redo" >&2; exit 1; }
"${fedbalance[@]}" reference docs --rendered "$render" --reference "$reference" || {
  echo "FAILED: docs from $render; $reference is collected into and the docs are stale: $redo" >&2; exit 1; }
"${fedbalance[@]}" reference docs --check --rendered "$render" --reference "$reference" || {
  echo "FAILED: docs --check against $render after docs wrote them" >&2; exit 1; }
echo "collected, rendered ($render) and the docs spliced: commit $reference and the docs named above together"
