"""What the delegate benchmarks (bench_provider.py, bench_staging.py) share: a per-call timer and
an engine provider that computes nothing, so only the delegate's own cost is measured."""

import json
import statistics
import time


def per_call_us(fn, iters):
    """Median over 5 samples of the mean microseconds per call, after a warm-up."""
    for _ in range(max(10, iters // 10)):
        fn()
    samples = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        samples.append((time.perf_counter() - t0) / iters * 1e6)
    return statistics.median(samples)


class NullEngineProvider:
    """Deserializes a JSON I/O list and computes nothing: only the delegate's cost remains.
    Every output takes the first input's shape."""

    def deserialize(self, plan, device_id):
        return json.loads(bytes(plan))

    def describe(self, engine):
        return {
            "io": engine,
            "stats": {
                "stripped_weights_size": -1,
                "total_weights_size": 0,
                "refittable": False,
                "device_memory_size": 0,
            },
        }

    def create_context(self, engine):
        return engine

    def infer_shapes(self, ctx, input_shapes):
        return [list(input_shapes[0]) for t in ctx if not t["is_input"]]

    def execute(self, ctx, input_shapes, addresses, stream):
        pass
