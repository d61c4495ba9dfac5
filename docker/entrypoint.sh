#!/bin/sh
# The image's entrypoint: every argument is a server flag (`docker run IMAGE --port 9000`,
# KServe's `args:`), since arguments replace CMD but not ENTRYPOINT. On an NGC image the server
# starts through NVIDIA's own entrypoint, which sets up CUDA forward compatibility for hosts whose
# driver is older than the image's CUDA.
if [ -x /opt/nvidia/nvidia_entrypoint.sh ]; then
  exec /opt/nvidia/nvidia_entrypoint.sh python -m service "$@"
fi
exec python -m service "$@"
