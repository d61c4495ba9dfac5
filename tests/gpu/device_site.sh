# Sourced by the scripts that run on the GPU machine (tests/gpu/device_run.sh, bench/ab_workers.sh,
# bench/gpu_busy_images.sh): the carried wheels (.whl, from ../shared/device/wheels.sh) and
# executorch's libraries (.gpu/executorch-slim.tgz) into /tmp/site. The fronts import
# grpc_health, which `wheels.sh --service` does not fetch: checked here, before any build, since
# without it every server these runs start fails.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && tar xzf .gpu/executorch-slim.tgz -C /tmp/site || { echo "wheel install failed"; exit 1; }
PYTHONPATH=/tmp/site python3 -c "import grpc_health.v1.health_pb2" 2>/dev/null || {
  echo "the carried wheels lack grpcio-health-checking:" \
    "../shared/device/wheels.sh --service 'grpcio-health-checking>=1.76,<1.81'"; exit 1; }
