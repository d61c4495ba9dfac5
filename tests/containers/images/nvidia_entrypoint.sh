#!/bin/sh
# Stand-in for NGC's entrypoint: a banner (which NVIDIA's also prints), then the command.
echo "== TensorRT stand-in (NGC entrypoint) =="
echo "TensorRT Version ${TENSORRT_VERSION}"
exec "$@"
