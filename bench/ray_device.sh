#!/usr/bin/env bash
# bench_ray_serve.py on the 16-core GPU machine (Python 3.12, no network): Serve's proxy with 1 and
# 2 replicas on one node, tiny JSON and 1x3x224x224 images over v2 binary, against the server's own
# front, in one device call of a few minutes.
# Here, once (the carry is about 30 MiB with the working tree):
#   bash bench/ray_bundle.sh 3.12          # .ray/: slim Ray + its deps, the service wheels, wrk
#   .venv/bin/python bench/bench_ray_serve.py --export .ray/programs
#   (and .gpu/executorch-slim.tgz from ../shared/device/wheels.sh)
# Then through the device tool, carrying [".ray", ".gpu"]:
#   bash bench/ray_device.sh [bench_ray_serve.py arguments, default --replicas 1,2 --images]
# It installs the service wheels and unpacks the Ray bundle and executorch's libraries into
# $SITE (/tmp/site), builds runtime_ext/ from the tree there, as tests/gpu/device_run.sh does, and
# runs the bench on the exported programs; logs land in $OUT.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
PY="${PYTHON:-python3}"
SITE="${SITE:-/tmp/site}"
# Overridable to check the script on another Python here (its bundle, wheels, executorch's libs).
WHEELS="${WHEELS:-.ray/whl}" ET_SLIM="${ET_SLIM:-.gpu/executorch-slim.tgz}"
pyv=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
bundle="${BUNDLE:-$(ls .ray/ray-*-py"$pyv".tar.xz 2>/dev/null | head -1)}"
[ -n "$bundle" ] || { echo "no .ray/ray-*-py$pyv.tar.xz: run bench/ray_bundle.sh $pyv here"; exit 1; }
t0=$SECONDS
"$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
  "$WHEELS"/*.whl || { echo "wheel install failed"; exit 1; }
tar xJf "$bundle" -C "$SITE" && tar xzf "$ET_SLIM" -C "$SITE" \
  || { echo "unpacking failed"; exit 1; }
export PYTHONPATH="$SITE" PATH="$PWD/.ray/wrk:$SITE/bin:$PATH" LD_LIBRARY_PATH="$PWD/.ray/wrk"
echo "installed in $((SECONDS - t0)) s"
"$PY" -m pip install --no-build-isolation --no-deps --no-index --target "$SITE" --upgrade . \
  >"$OUT/build.log" 2>&1 || { tail -50 "$OUT/build.log"; echo "build failed"; exit 1; }
echo "built in $((SECONDS - t0)) s; $(nproc) cores"
"$PY" -c 'import ray, ray.serve, ethost; print("ray", ray.__version__, "from", ray.__file__)' \
  || exit 1
export PYTHONUNBUFFERED=1 RAY_USAGE_STATS_ENABLED=0
[ $# -gt 0 ] || set -- --replicas 1,2 --images --seconds 8 --connections 32 --threads 4
"$PY" bench/bench_ray_serve.py --programs .ray/programs "$@" 2>&1 | tee "$OUT/bench.log"
status=${PIPESTATUS[0]}
# Ray's own logs, for a failed start (the newest session only).
tar czhf "$OUT/ray-logs.tgz" -C /tmp/ray session_latest/logs 2>/dev/null || true
exit "$status"
