"""The Prometheus formatter, and the counters the core keeps, read back as a scraper would."""

import math

import numpy as np
import pytest
from fastapi.testclient import TestClient

from service import prometheus
from service.config import Settings
from service.dataplane import metrics
from service.front.app import create_app
from support.program_fixtures import linear_relu_program  # noqa: F401
from support.prometheus import parse, series, value
from support.server import tensor, upload


def test_label_values_and_help_are_escaped():
    counter = prometheus.Counter("x_total", "help with \\ and\nnewline", ("path",))
    counter.add(('a"b\\c\nd',))
    lines = counter.render()
    assert lines == [
        "# HELP x_total help with \\\\ and\\nnewline",
        "# TYPE x_total counter",
        'x_total{path="a\\"b\\\\c\\nd"} 1',
    ]
    parsed = parse("\n".join(lines) + "\n")
    assert value(parsed, "x_total", path='a"b\\c\nd') == 1
    assert parsed["help"]["x_total"] == "help with \\ and\nnewline"


@pytest.mark.parametrize(
    "number, text",
    [
        (3.0, "3"),
        (0.25, "0.25"),
        (math.inf, "+Inf"),
        (-math.inf, "-Inf"),
        (math.nan, "NaN"),
        (1e-7, "1e-07"),
    ],
)
def test_values(number, text):
    assert prometheus.format_value(number) == text


def test_histogram_buckets_are_cumulative_with_sum_and_count():
    histogram = prometheus.Histogram("t_seconds", "t", ("model",), buckets=(0.5, 0.1, 1.0))
    for seconds in (0.1, 0.3, 0.5, 2.0):  # 0.1 and 0.5 sit on bounds: le means <=
        histogram.observe(("m",), seconds)
    histogram.observe(("other",), 0.05)
    parsed = parse("\n".join(histogram.render()) + "\n")
    assert parsed["types"] == {"t_seconds": "histogram"}
    buckets = {
        dict(labels)["le"]: v
        for labels, v in series(parsed, "t_seconds_bucket").items()
        if dict(labels)["model"] == "m"
    }
    assert buckets == {"0.1": 1, "0.5": 3, "1": 3, "+Inf": 4}
    assert value(parsed, "t_seconds_sum", model="m") == pytest.approx(2.9)
    assert value(parsed, "t_seconds_count", model="m") == 4
    assert value(parsed, "t_seconds_bucket", model="other", le="0.1") == 1
    # Buckets come in ascending order, +Inf last, as scrapers expect.
    lines = [line for line in histogram.render() if line.startswith('t_seconds_bucket{model="m"')]
    assert [line.split('le="')[1].split('"')[0] for line in lines] == ["0.1", "0.5", "1", "+Inf"]


def test_removing_a_model_drops_only_its_series():
    counter = prometheus.Counter("r_total", "r", ("model", "outcome"))
    counter.add(("a", "ok"))
    counter.add(("b", "ok"), 2)
    counter.remove("model", "a")
    assert counter.samples == {("b", "ok"): 2}


@pytest.fixture
def client(tmp_path):
    app = create_app(Settings(artifacts=tmp_path / "artifacts", grpc_port=0, max_data_bytes=64))
    with TestClient(app) as test_client:
        yield test_client


def scrape(client):
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"] == prometheus.CONTENT_TYPE
    return parse(response.text)


def test_requests_and_uploads_are_counted_through_the_core(client, linear_relu_program):
    unknown = metrics.UNKNOWN
    assert upload(client, "lin", linear_relu_program.pte).status_code == 201
    good = {"model": "lin", "inputs": [tensor(np.ones((2, 4), np.float32))]}
    for _ in range(2):
        assert client.post("/infer", json=good).status_code == 200
    bad_shape = {"model": "lin", "inputs": [tensor(np.ones((3, 4), np.float32))]}
    assert client.post("/infer", json=bad_shape).status_code == 422
    assert client.post("/infer", json={**good, "method": "nope"}).status_code == 404
    assert client.post("/infer", json={**good, "model": 'no"such'}).status_code == 404
    assert upload(client, "lin", linear_relu_program.pte).status_code == 409
    assert upload(client, "bad name!", linear_relu_program.pte).status_code == 422
    assert (
        upload(client, "big", linear_relu_program.pte, [("w.ptd", b"\0" * 65)]).status_code == 413
    )

    parsed = scrape(client)
    requests = {
        tuple(sorted(labels)): v
        for labels, v in series(parsed, "etrt_inference_requests_total").items()
    }
    assert requests == {
        (("method", "forward"), ("model", "lin"), ("outcome", "ok")): 2,
        (("method", "forward"), ("model", "lin"), ("outcome", "client_error")): 1,
        (("method", unknown), ("model", "lin"), ("outcome", "client_error")): 1,
        (("method", unknown), ("model", unknown), ("outcome", "client_error")): 1,
    }
    assert parsed["types"]["etrt_inference_requests_total"] == "counter"
    assert (
        value(parsed, "etrt_inference_duration_seconds_count", model="lin", method="forward") == 3
    )
    assert value(parsed, "etrt_inference_duration_seconds_sum", model="lin", method="forward") > 0
    # Only requests that reached an instance waited for one.
    assert value(parsed, "etrt_inference_queue_seconds_count", model="lin", method="forward") == 2
    assert value(parsed, "etrt_inflight_requests", model="lin") == 0
    assert series(parsed, "etrt_uploads_total") == {
        frozenset({("outcome", o)}): 1 for o in ("accepted", "conflict", "refused", "too_large")
    }
    assert value(parsed, "etrt_ingest_problems_total", rule="model.characters") == 1
    assert value(parsed, "etrt_models", state="ready") == 1
    assert value(parsed, "etrt_models", state="unavailable") == 0
    # The default backend setup loads the TensorRT backend; a CPU program has no delegate.
    assert parsed["types"]["etrt_tensorrt_staging_copies_total"] == "counter"
    assert series(parsed, "etrt_tensorrt_staging_copies_total") == {}

    assert client.delete("/models/lin").status_code == 204
    parsed = scrape(client)
    assert not [key for key in parsed["samples"] if ("model", "lin") in key[1]]
    assert value(parsed, "etrt_models", state="ready") == 0
    assert (
        value(
            parsed,
            "etrt_inference_requests_total",
            model=unknown,
            method=unknown,
            outcome="client_error",
        )
        == 1
    )


def test_each_request_and_upload_is_logged_with_the_access_log(
    tmp_path, linear_relu_program, caplog
):
    caplog.set_level("INFO", logger="service.dataplane.service")
    settings = Settings(artifacts=tmp_path / "artifacts", grpc_port=0, access_log=True)
    with TestClient(create_app(settings)) as client:
        assert upload(client, "lin", linear_relu_program.pte).status_code == 201
        assert client.post("/infer", json={"model": "lin", "inputs": []}).status_code == 422
    lines = [r.getMessage() for r in caplog.records if r.name == "service.dataplane.service"]
    assert [line.rsplit(" duration_s=", 1)[0] for line in lines] == [
        "upload model='lin' outcome=accepted problems=0",
        "infer model='lin' method='forward' outcome=client_error",
    ]
    assert all(float(line.rsplit("=", 1)[1]) > 0 for line in lines)


def test_inferences_are_not_logged_by_default(client, linear_relu_program, caplog):
    caplog.set_level("INFO", logger="service.dataplane.service")
    assert upload(client, "lin", linear_relu_program.pte).status_code == 201
    x = linear_relu_program.example_inputs[0]
    assert client.post("/infer", json={"model": "lin", "inputs": [tensor(x)]}).status_code == 200
    lines = [r.getMessage() for r in caplog.records if r.name == "service.dataplane.service"]
    assert [line.split(" ", 1)[0] for line in lines] == ["upload"]


def test_the_docs_table_lists_every_metric_family_the_code_names():
    """docs/observability.md's table against the family names spelled in service/, both ways
    (a family added or renamed in code shows up here until the table says what it counts)."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    named = {
        name
        for path in (root / "service").rglob("*.py")
        for name in re.findall(r'"((?:etrt|nv)_[a-z_]+)"', path.read_text())
    }
    page = (root / "docs" / "observability.md").read_text()
    rows = re.findall(r"^\| (`[a-z_]+`(?:, `[a-z_]+`)*) \|", page, re.M)
    documented = {name for row in rows for name in re.findall(r"`([a-z_]+)`", row)}
    assert documented == named
