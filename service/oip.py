"""The Open Inference Protocol's names as this server speaks them, over REST (/v2) and gRPC alike.

One place, so that the two transports (and the Triton model configuration the dataplane writes)
cannot drift apart: what the server calls itself, the platform its models report, the extensions
it implements, the method standard clients run, and the request parameters it reads itself
(every other parameter reaches the dataplane unchanged).
"""

from __future__ import annotations

SERVER_NAME = "etrt-server"
PLATFORM = "executorch"
# The method standard clients run and model metadata describes; the `method` parameter (an
# addition to the protocol) runs another.
DEFAULT_METHOD = "forward"
# Extensions both transports implement; REST also carries tensors after a JSON header
# (BINARY_TENSOR_DATA), which gRPC does not need: its messages hold raw bytes.
EXTENSIONS = ("model_configuration", "model_repository", "statistics")
BINARY_TENSOR_DATA = "binary_tensor_data"
REST_EXTENSIONS = (BINARY_TENSOR_DATA, *EXTENSIONS)

# Request parameters this server reads itself.
METHOD_PARAMETER = "method"  # which program method to run (default DEFAULT_METHOD)
TIMEOUT_PARAMETER = "timeout"  # microseconds the request may wait, as Triton's clients send it
PRIORITY_PARAMETER = "priority"  # the queue level of a model with priority levels
# REST's binary tensor extension: the JSON header's length, and the per-tensor parameters.
BINARY_HEADER = "inference-header-content-length"
BINARY_DATA_SIZE = "binary_data_size"
BINARY_DATA = "binary_data"
BINARY_DATA_OUTPUT = "binary_data_output"
