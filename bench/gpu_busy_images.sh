#!/usr/bin/env bash
# Issue 31, items 4 and 5, on the GPU host in one call: builds this tree with the test hooks
# (ethost_tensorrt.testing: the spin provider runs on CUDA memory through them) and runs, with
# 8 fronts, bench_gpu_busy.py (a 200 us kernel per batch: GPU busy and rows/s against the
# kernel-bound limit) and bench_images.py (image requests/s, native path against the Python path
# in the same run, system shared memory, gRPC). Made for the device tool; prepare here:
#   ../shared/device/wheels.sh --service --wrk 'grpcio-health-checking>=1.76,<1.81'
#   (cd tests && python -m support.trt_programs ../.gpu/trt_programs)   # spin_add among them
#   python bench/bench_images.py --export .gpu/image_programs
# then run `bash bench/gpu_busy_images.sh [SECONDS] [busy,images] [BUSY_OPTIONS]` carrying .whl
# .gpu .wrk (the second argument: which of the two benchmarks, both by default; the third: more
# options of bench_gpu_busy.py, e.g. "--batching 32"). Logs land in $OUT.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
seconds=${1:-4}
sections=${2:-busy,images}
busy_options=${3:-}
source tests/gpu/device_site.sh
export PATH=$PWD/.wrk:$PATH LD_LIBRARY_PATH=$PWD/.wrk PYTHONUNBUFFERED=1
if [ ! -f /tmp/siteB/.built ]; then
  PYTHONPATH=/tmp/site python3 -m pip install --no-build-isolation --no-deps --no-index --target /tmp/siteB \
    -C cmake.define.ETHOST_TESTING=ON . > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
  touch /tmp/siteB/.built
fi
export PYTHONPATH=/tmp/siteB:/tmp/site
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
if [[ ,$sections, == *,busy,* ]]; then
  echo "=== bench_gpu_busy.py"
  # shellcheck disable=SC2086  # options, split on purpose
  python3 bench/bench_gpu_busy.py --trt-programs .gpu/trt_programs --workers 8 \
    --seconds "$seconds" $busy_options 2>&1 | tee "$OUT/gpu_busy.log" | grep -v "^\s*$"
fi
if [[ ,$sections, == *,images,* ]]; then
  echo "=== bench_images.py"
  python3 bench/bench_images.py --programs .gpu/image_programs --workers 8 --seconds "$seconds" \
    --connections 64 2>&1 | tee "$OUT/images.log" | grep -v "^\s*$"
fi
