"""TensorRT: engines built by Torch-TensorRT, run by the native `ethost_tensorrt` delegate."""

from __future__ import annotations

# The delegate id Torch-TensorRT writes into programs and ethost_tensorrt registers; the one
# place the server spells it.
BACKEND_ID = "TensorRTBackend"
