"""Per-execute cost of reaching the engine provider, next to a bare Python call in the same run
(`python bench/bench_provider.py`; on the H200 it runs on CUDA memory, elsewhere on the
host-memory stand-in).

The delegate enters Python once per execute: one `execute(ctx, shapes, addresses, stream)` call
in the steady state. Rows:
  bare call            a no-op Python function with execute's arity, called from Python: the floor
  per-binding calls    the old protocol (set_input_shape and output_shape per input/output,
                       set_tensor_address per binding, enqueue), replayed from Python, no-op bodies
  shipped execute      TensorRTEngineProvider.execute over a stand-in IExecutionContext whose
                       methods return True (addresses unchanged / all moved)
  lean runtime         TensorRT's own objects where they can be made without an engine: the
                       provider's logger callback, as TensorRT calls it (needs tensorrt_lean)
  delegate, null       testing.Runner.run with a provider that does nothing: the delegate's whole
                       execute (checks, staging plan, provider entry, stream sync)
  delegate, test       the same with the test engine provider (it reads, adds and writes memory)
  stream synchronize   a Python call that only synchronizes an idle stream: the delegate's floor
GIL entries per delegate execute come from ethost_tensorrt.provider_gil_entries().
"""

import argparse
import json
import sys
from pathlib import Path

import ethost_tensorrt
from ethost_tensorrt import testing as T

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
from delegate_timing import NullEngineProvider, per_call_us  # noqa: E402
from service.backends.tensorrt import runtime as tensorrt_runtime  # noqa: E402
from support.test_engine_provider import TestEngineProvider  # noqa: E402  (test helpers)
from support.trt_blob import io, make_blob, metadata, plan_blob  # noqa: E402


class StandInContext:
    """The IExecutionContext calls the shipped provider makes, each a no-op returning True."""

    def set_input_shape(self, name, shape):
        return True

    def get_tensor_shape(self, name):
        return (4, 64)

    def set_tensor_address(self, name, address):
        return True

    def execute_async_v3(self, stream):
        return True


def io_list(n_in, n_out, rows):
    return [io(f"in{i}", True, [rows, 64]) for i in range(n_in)] + [
        io(f"out{i}", False, [rows, 64]) for i in range(n_out)
    ]


def python_rows(n_in, n_out, iters):
    n = n_in + n_out
    names = tuple(f"t{i}" for i in range(n))
    addresses = tuple(0x10000 * (i + 1) for i in range(n))
    moved = [tuple(a + 256 * (k % 2) for a in addresses) for k in range(2)]
    shapes = [[4, 64]] * n_in

    def bare(ctx, input_shapes, addrs, stream):
        pass

    # The old per-binding protocol, with no-op bodies: only the calls remain.
    def set_input_shape(ctx, name, shape):
        pass

    def output_shape(ctx, name):
        return [4, 64]

    def set_tensor_address(ctx, name, address):
        pass

    def enqueue(ctx, stream):
        pass

    def old_protocol():
        for name in names[:n_in]:
            set_input_shape(None, name, shapes[0])
        for name in names[n_in:]:
            output_shape(None, name)
        for name, address in zip(names, addresses):
            set_tensor_address(None, name, address)
        enqueue(None, 0)

    provider = tensorrt_runtime.TensorRTEngineProvider()
    ctx = tensorrt_runtime.Context(StandInContext(), None, names[:n_in], names[n_in:], names)
    provider.execute(ctx, shapes, addresses, 0)
    flip = iter(range(1 << 62))
    return {
        "bare call": per_call_us(lambda: bare(ctx, None, None, 0), iters),
        f"per-binding calls ({2 * n + 1} calls)": per_call_us(old_protocol, iters),
        "shipped execute, addresses unchanged": per_call_us(
            lambda: provider.execute(ctx, None, None, 0), iters
        ),
        f"shipped execute, {n} addresses moved": per_call_us(
            lambda: provider.execute(ctx, None, moved[next(flip) % 2], 0), iters
        ),
    }


def lean_rows(iters):
    """TensorRT objects that exist without an engine: its logger, called the way TensorRT does."""
    try:
        module = tensorrt_runtime.tensorrt_module()
    except tensorrt_runtime.TensorRTError as exc:
        return {}, str(exc)
    try:
        logger = tensorrt_runtime._logger(module)
        info = module.ILogger.Severity.INFO
        return (
            {
                f"{module.__name__} logger callback (INFO line)": per_call_us(
                    lambda: logger.log(info, "bench"), iters
                )
            },
            "",
        )
    except Exception as exc:  # a lean build lacking what this row needs: report, keep the rest
        return {}, f"{module.__name__}: {type(exc).__name__}: {exc}"


def delegate_rows(n_in, n_out, iters, memory):
    rows, gil = {}, {}
    spec = io_list(n_in, n_out, 4)
    nbytes = 4 * 64 * 4
    base = T.device_alloc(1 << 20)
    args = [(base + 1024 * k, nbytes, [4, 64], "float32") for k in range(n_in + n_out)]
    blob_null = make_blob(
        metadata([(t["name"], t["is_input"]) for t in spec]), json.dumps(spec).encode()
    )
    for label, provider, blob in (
        ("delegate execute, null provider", NullEngineProvider(), blob_null),
        (
            "delegate execute, test engine provider",
            TestEngineProvider(),
            plan_blob("add", io_list(2, 1, 4))[0] if (n_in, n_out) == (2, 1) else None,
        ),
    ):
        if blob is None:
            continue
        ethost_tensorrt.set_engine_provider(provider)
        runner = T.Runner(blob)
        runner.run(args)
        if not rows:
            # The floor under a delegate execute: a Python call into the module that only
            # synchronizes the runner's (idle) stream, as every execute ends by doing.
            rows["stream synchronize via testing (delegate floor)"] = per_call_us(
                lambda: T.stream_synchronize(runner.stream), iters
            )
        before = ethost_tensorrt.provider_gil_entries()
        rows[label] = per_call_us(lambda: runner.run(args), iters)
        gil[label] = (ethost_tensorrt.provider_gil_entries() - before) / (runner.calls - 1)
        ethost_tensorrt.set_engine_provider(None)
    T.device_free(base)
    return rows, gil


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--memory",
        choices=["cuda", "host"],
        default=None,
        help="device memory for the delegate rows (default: cuda where there is one)",
    )
    ap.add_argument("--iters", type=int, default=20000)
    args = ap.parse_args()
    memory = args.memory or ("cuda" if ethost_tensorrt.device_status() is None else "host")
    if memory == "host":
        T.use_host_memory()
    else:
        T.use_cuda_memory()
    lean, lean_missing = lean_rows(args.iters)
    print(f"delegate memory: {memory}; per-execute microseconds, median of 5 samples")
    for n_in, n_out in ((2, 1), (8, 4)):
        rows = python_rows(n_in, n_out, args.iters)
        rows.update(lean)
        delegate, gil = delegate_rows(n_in, n_out, max(200, args.iters // 10), memory)
        rows.update(delegate)
        floor = rows["bare call"]
        print(f"\n{n_in} inputs, {n_out} outputs")
        print("| row | us | / bare call | GIL entries per execute |")
        print("|---|---|---|---|")
        for label, us in rows.items():
            entries = f"{gil[label]:.2f}" if label in gil else ""
            print(f"| {label} | {us:.2f} | {us / floor:.1f} | {entries} |")
    if lean_missing:
        print(f"\nlean runtime rows skipped: {lean_missing}")


if __name__ == "__main__":
    main()
