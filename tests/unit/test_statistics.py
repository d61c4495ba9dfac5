"""The engine's shortest path counts in one call what the queued path counts in two."""

from service.dataplane.metrics import Metrics
from service.dataplane.statistics import Statistics


def _without_clock(stats: dict) -> dict:
    return {k: v for k, v in stats.items() if k != "last_inference"}


def test_record_served_counts_as_an_execute_plus_its_successful_request():
    apart, together = Statistics(), Statistics()
    for size, (total, input_ns, infer, output) in ((1, (900, 100, 700, 50)), (4, (80, 8, 60, 4))):
        apart.record_execution("m", "1", size, 0, infer, 0)
        apart.record_request("m", "1", True, total, 0, input_ns, infer, output)
        together.record_served("m", "1", size, total, input_ns, infer, output)
    assert _without_clock(together.model_stats("m", "1")) == _without_clock(
        apart.model_stats("m", "1")
    )
    assert together.model_stats("m", "1")["execution_count"] == 2
    assert together.model_stats("m", "1")["inference_count"] == 5


def test_metrics_record_served_renders_as_a_finished_request_and_an_execute():
    apart, together = Metrics(), Metrics()
    for metrics in (apart, together):
        metrics.request_finished(metrics.request_started("m"), "m", "forward", "ok", 0.001, 0.002)
    apart.request_finished(None, "m", "forward", "ok", 0.0, 0.0005)
    apart.batch_executed("m", "forward", 3)
    together.record_served("m", "forward", 3, 0.0005)
    assert together.render({}) == apart.render({})
    assert 'etrt_inference_requests_total{model="m",method="forward",outcome="ok"} 2' in (
        together.render({})
    )
