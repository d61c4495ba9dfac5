#!/usr/bin/env bash
# Builds runtime_ext on the GPU machine (Python 3.12, g++ 13) and runs the given pytest targets
# there. Usage, through the device tool, carrying .whl (../shared/device/wheels.sh) and .gpu
# (programs exported on the CPU machine, whose torch can run executorch's exporter):
#   bash tests/gpu/device_run.sh tests/unit/test_ethost.py tests/gpu
# Logs land in $OUT.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
# The carried wheels, and executorch's libraries and headers only (its whole wheel and
# TensorRT's do not fit in one call).
source tests/gpu/device_site.sh
export PYTHONPATH=/tmp/site
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
# With the test hooks (ethost_tensorrt_testing), which the shipped build leaves out.
python3 -m pip install --no-build-isolation --no-deps --no-index --target /tmp/site --upgrade \
  -C cmake.define.ETHOST_TESTING=ON . \
  > "$OUT/build.log" 2>&1 || { tail -50 "$OUT/build.log"; echo "build failed"; exit 1; }
echo "build ok"
export ETRT_TEST_PROGRAMS_DIR="$PWD/.gpu/programs" ETHOST_TRT_PROGRAMS="$PWD/.gpu/trt_programs"
export PYTHONUNBUFFERED=1
# Import from the build in /tmp/site, not from the source tree's service/ package alone.
python3 -m pytest -q -p no:cacheprovider -W ignore::DeprecationWarning "$@" 2>&1 | tee "$OUT/pytest.log"
exit "${PIPESTATUS[0]}"
