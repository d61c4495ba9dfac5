#!/usr/bin/env bash
# Builds runtime_ext on the GPU machine (Python 3.12, g++ 13) and runs the given pytest targets
# there. Usage, through the device tool, carrying .whl (../shared/device/wheels.sh) and .gpu
# (programs exported on the CPU machine, whose torch can run executorch's exporter):
#   bash tests/gpu/device_run.sh tests/unit/test_ethost.py tests/gpu
# Logs land in $OUT.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || { echo "wheel install failed"; exit 1; }
# The server's fronts import grpc_health, which wheels.sh --service does not fetch: without it
# every server these runs start fails, after the build.
PYTHONPATH=/tmp/site python3 -c "import grpc_health.v1.health_pb2" 2>/dev/null || {
  echo "the carried wheels lack grpcio-health-checking:" \
    "../shared/device/wheels.sh --service 'grpcio-health-checking>=1.76,<1.81'"; exit 1; }
# executorch's libraries and headers only (the whole wheel and TensorRT's do not fit in one call).
[ -f .gpu/executorch-slim.tgz ] && tar xzf .gpu/executorch-slim.tgz -C /tmp/site
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
