"""The engine's shortest path counts in one record, in one ledger (service/dataplane/ledger.py),
what the queued path counts in two calls to each view."""

from service.dataplane import ledger as ledgers
from service.dataplane.ledger import ServedLedger
from service.dataplane.metrics import Metrics
from service.dataplane.statistics import Statistics


def _without_clock(stats: dict) -> dict:
    return {k: v for k, v in stats.items() if k != "last_inference"}


def test_record_served_counts_as_an_execute_plus_its_successful_request():
    ledger = ServedLedger()
    apart, together = Statistics(), Statistics(ledger)
    for size, (total, input_ns, infer, output) in ((1, (900, 100, 700, 50)), (4, (80, 8, 60, 4))):
        apart.record_execution("m", "1", size, 0, infer, 0)
        apart.record_request("m", "1", True, total, 0, input_ns, infer, output)
        ledger.add("m", "1", "forward", size, total, input_ns, infer, output)
    assert _without_clock(together.model_stats("m", "1")) == _without_clock(
        apart.model_stats("m", "1")
    )
    assert together.model_stats("m", "1")["execution_count"] == 2
    assert together.model_stats("m", "1")["inference_count"] == 5


def test_metrics_record_served_renders_as_a_finished_request_and_an_execute():
    ledger = ServedLedger()
    apart, together = Metrics(), Metrics(ledger=ledger)
    for metrics in (apart, together):
        metrics.request_finished(metrics.request_started("m"), "m", "forward", "ok", 0.001, 0.002)
    apart.request_finished(None, "m", "forward", "ok", 0.0, 0.0005)
    apart.batch_executed("m", "forward", 3)
    ledger.add("m", "1", "forward", 3, 500_000, 0, 0, 0)
    assert together.render({}) == apart.render({})
    assert 'etrt_inference_requests_total{model="m",method="forward",outcome="ok"} 2' in (
        together.render({})
    )


def test_served_requests_are_all_counted_at_the_next_read_before_and_past_a_fold(monkeypatch):
    import time

    from service.dataplane import statistics

    ledger = ServedLedger()
    apart, together = Statistics(), Statistics(ledger)
    sizes = [1, 1, 2, 1, 4] * (ledgers.FOLD_AT // 5 + 3)  # a fold on the way, then some left
    for size in sizes:
        apart.record_execution("m", "1", size, 0, 700, 0)
        apart.record_request("m", "1", True, 900, 0, 100, 700, 50)
        ledger.add("m", "1", "forward", size, 900, 100, 700, 50)
    ledger.add("other", "2", "forward", 1, 10, 1, 8, 1)
    assert 0 < len(ledger) < ledgers.FOLD_AT  # folded once on the way
    assert _without_clock(together.model_stats("m", "1")) == _without_clock(
        apart.model_stats("m", "1")
    )
    assert together.model_stats("m", "1")["inference_count"] == sum(sizes)
    assert together.model_stats("other", "2")["execution_count"] == 1
    # The last inference's time, not the time of the read that counted it.
    served_at = time.time()
    ledger.add("m", "1", "forward", 1, 900, 100, 700, 50)
    monkeypatch.setattr(statistics.time, "time", lambda: served_at + 60)
    assert abs(together.model_stats("m", "1")["last_inference"] - served_at * 1000) < 1000


def test_metrics_count_every_served_request_at_the_next_render():
    ledger = ServedLedger()
    apart, together = Metrics(), Metrics(ledger=ledger)
    count = ledgers.FOLD_AT + 7
    for i in range(count):
        rows, seconds = (1, 0.25) if i % 3 else (4, 0.5)  # exact in binary: sums match exactly
        apart.request_finished(None, "m", "forward", "ok", 0.0, seconds)
        apart.batch_executed("m", "forward", rows)
        ledger.add("m", "1", "forward", rows, int(seconds * 1e9), 0, 0, 0)
    assert together.render({}) == apart.render({})
    assert f'etrt_inference_requests_total{{model="m",method="forward",outcome="ok"}} {count}' in (
        together.render({})
    )
    ledger.add("m", "1", "forward", 1, 250_000_000, 0, 0, 0)
    together.forget_model("m")  # counted, then dropped with the model's series
    assert 'model="m"' not in together.render({})


def test_one_record_is_counted_once_by_both_views_whichever_reads_first():
    ledger = ServedLedger()
    statistics, metrics = Statistics(ledger), Metrics(ledger=ledger)
    ledger.add("m", "1", "forward", 2, 1000, 100, 800, 100)
    assert statistics.model_stats("m", "1")["execution_count"] == 1  # folds it, for both
    assert len(ledger) == 0
    ledger.add("m", "1", "forward", 1, 1000, 100, 800, 100)
    rendered = metrics.render({})
    assert 'etrt_inference_requests_total{model="m",method="forward",outcome="ok"} 2' in rendered
    assert statistics.model_stats("m", "1")["inference_count"] == 3
    assert metrics.render({}) == rendered  # nothing counted twice


def test_requests_handed_over_summed_count_as_each_one_handed_over_alone():
    """The engine's lane hands its requests over summed per route, front and rows
    (ledger.ServedGroup); both views count those groups as they count each request."""
    from service.dataplane.ledger import Served, grouped

    events = [
        Served("m", "1", "forward", rows, total, 10, infer, 5, 100.0 + i, front, queue, executes)
        for i, (rows, total, infer, front, queue, executes) in enumerate(
            [
                (1, 250_000_000, 700, 0, 0, 1),
                (1, 500_000_000, 900, 0, 0, 1),
                (4, 250_000_000, 600, 1, 125_000_000, 1),  # a batch of 4 rows: one execute
                (4, 500_000_000, 600, 1, 2_000_000_000, 0),
                (4, 250_000_000, 600, 2, 125_000_000, 0),
                (1, 4_000_000_000, 800, -1, 0, 1),  # counted by the engine's loop
            ]
        )
    ]
    views = []
    for groups in (grouped(events), [grouped([e])[0] for e in events]):
        ledger = ServedLedger()
        pending = [groups]  # a source returns what it holds once, then forgets it
        ledger.add_source(lambda pending=pending: pending.pop() if pending else [])
        views.append((Statistics(ledger), Metrics(ledger=ledger), groups))
    (stats_a, metrics_a, summed), (stats_b, metrics_b, alone) = views
    assert len(summed) == 4 and len(alone) == 6
    rendered = metrics_a.render({})
    assert rendered == metrics_b.render({})
    assert stats_a.model_stats("m", "1") == stats_b.model_stats("m", "1")
    assert stats_a.model_stats("m", "1")["execution_count"] == 4
    assert stats_a.model_stats("m", "1")["inference_count"] == 1 + 1 + 4 + 1  # rows executed
    assert 'etrt_inference_requests_total{model="m",method="forward",outcome="ok"} 6' in rendered
    assert 'etrt_engine_lane_requests_total{model="m",method="forward"} 5' in rendered
