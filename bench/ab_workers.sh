#!/usr/bin/env bash
# A/B of bench_workers.py on the GPU host in one call: this tree (B) against a baseline tree (A),
# each built from source into its own site folder, measured alternately so both see the same
# machine. Made for the device tool (see docs/benchmarks.md):
#   git archive <baseline> service runtime_ext bench tests pyproject.toml | tar -x -C .ab/base
#   ../shared/device/wheels.sh --trt --service --bench --wrk 'grpcio-health-checking>=1.76,<1.81'
#   bench/bench_workers.py --export .gpu/bench_programs     (here: torch exports the programs)
#   bash bench/ab_workers.sh SECTIONS SECONDS [extra bench_workers flags for B...]
# carrying .whl .gpu .wrk .ab. Logs land in $OUT.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
sections=${1:-abd}; seconds=${2:-3}; shift 2 || true
source tests/gpu/device_site.sh
export PATH=$PWD/.wrk:$PATH LD_LIBRARY_PATH=$PWD/.wrk PYTHONUNBUFFERED=1
build() {  # build SOURCE TARGET (once per machine)
  [ -f "$2/.built" ] && return
  (cd "$1" && PYTHONPATH=/tmp/site python3 -m pip install --no-build-isolation --no-deps --no-index \
     --target "$2" . > "$OUT/build-$(basename "$2").log" 2>&1) || { tail -30 "$OUT/build-$(basename "$2").log"; exit 1; }
  touch "$2/.built"
}
build .ab/base /tmp/siteA & build . /tmp/siteB & wait
echo "built A (baseline) and B (this tree)"
run() {  # run LABEL SITE SCRIPT ARGS...
  local label=$1 site=$2 script=$3; shift 3
  echo "=== $label"
  PYTHONPATH=$site:/tmp/site python3 "$script" --programs .gpu/bench_programs --workers 8 \
    --seconds "$seconds" "$@" 2>&1 | tee -a "$OUT/$label.log" | grep -v "^\s*$"
}
# B_ONLY=1: this tree alone (e.g. a second look with other flags after an A/B call).
[ -n "${B_ONLY:-}" ] || run A /tmp/siteA .ab/base/bench/bench_workers.py --sections "$sections"
run B /tmp/siteB bench/bench_workers.py --sections "$sections" "$@"
