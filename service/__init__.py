"""Model service for ExecuTorch programs that carry TensorRT engines (`python -m service`)."""
