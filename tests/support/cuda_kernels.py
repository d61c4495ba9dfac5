"""Real CUDA kernels the test engine provider launches on a GPU host (cupy, imported only there):
one that writes through a bad address, as a faulty TensorRT kernel does, poisoning the context;
and a trivial "add" that shows a context works. Tests only.
"""

import numpy as np

_SOURCE = r"""
extern "C" __global__ void write_through(unsigned long long address) {
  *reinterpret_cast<volatile int*>(address) = 1;
}
extern "C" __global__ void add(const float* a, const float* b, float* out, long long n) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] + b[i];
}
"""
_module = None


def _kernels():
    global _module
    if _module is None:
        import cupy

        _module = cupy.RawModule(code=_SOURCE)
    return _module


def write_through(address: int, stream: int) -> None:
    """Launches a kernel writing an int at `address` on `stream` and returns, as an enqueue does:
    the fault shows at the stream's synchronize (an invalid address: illegal address; one not on
    a 4-byte boundary: misaligned address)."""
    import cupy

    with cupy.cuda.ExternalStream(stream):
        _kernels().get_function("write_through")((1,), (1,), (np.uint64(address),))


def add(ctx, engine, stream: int) -> None:
    """out0 = in0 + in1 by a CUDA kernel on the execute's stream (float32 only)."""
    import cupy

    shape = ctx.shapes[engine.inputs[0]["name"]]
    n = int(np.prod(shape))
    a, b = (ctx.addresses[t["name"]] for t in engine.inputs)
    out = ctx.addresses[engine.outputs[0]["name"]]
    with cupy.cuda.ExternalStream(stream):
        _kernels().get_function("add")(
            ((n + 255) // 256,), (256,), (np.uint64(a), np.uint64(b), np.uint64(out), np.int64(n))
        )
