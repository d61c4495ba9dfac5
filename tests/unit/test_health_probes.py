"""Health probes answered where their bytes arrive (service/front/protocols/health.py): only a
bare, whole GET of a health route is answered there, with the routes' own answers; everything
else is left to the routes."""

import json

import pytest

from service.front.protocols import health
from service.front.protocols.health import InlineProbes


class _Service:
    def __init__(self, ready: bool):
        self.ready = ready

    def not_ready_reason(self) -> str:
        return "the inference engine is restarting"


HEADERS = [(b"date", b"Thu, 03 Dec 2026 22:00:00 GMT"), (b"server", b"uvicorn")]


def _parse(raw: bytes) -> tuple[int, dict, dict]:
    head, body = raw.split(b"\r\n\r\n", 1)
    lines = head.decode().split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    assert int(headers["content-length"]) == len(body)
    return int(lines[0].split()[1]), headers, json.loads(body)


@pytest.mark.parametrize("ready", [True, False])
@pytest.mark.parametrize(
    "path", ["/v2/health/live", "/v2/health/ready", "/health/live", "/health/ready"]
)
def test_a_bare_probe_gets_the_routes_answer_with_uvicorns_headers(path, ready):
    service = _Service(ready)
    raw = InlineProbes(service).respond(
        f"GET {path} HTTP/1.1\r\nHost: x\r\nUser-Agent: kube-probe/1.30\r\n\r\n".encode(), HEADERS
    )
    status, headers, body = _parse(raw)
    assert (status, body) == health.answer(path, ready, service.not_ready_reason)
    assert ready or "ready" not in path or body["error"] == service.not_ready_reason()
    assert headers["content-type"] == "application/json" and headers["server"] == "uvicorn"
    assert raw.startswith(b"HTTP/1.1 200 OK\r\n" if status == 200 else b"HTTP/1.1 503 ")


@pytest.mark.parametrize(
    "data",
    [
        b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        b"GET /v2/health/ready HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}",
        b"GET /v2/health/ready HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\nGET /v2/health/live HTTP/1.1\r\n\r\n",
        b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n",  # not whole yet
        b"GET /v2/health/ready HTTP/1.0\r\n\r\n",
        b"HEAD /v2/health/ready HTTP/1.1\r\n\r\n",
        b"GET /v2/health/ready?x=1 HTTP/1.1\r\n\r\n",
        b"GET /v2/models/m/ready HTTP/1.1\r\n\r\n",
        b"POST /v2/health/ready HTTP/1.1\r\n\r\n",
    ],
)
def test_anything_but_one_bare_whole_probe_is_left_to_the_routes(data):
    assert InlineProbes(_Service(True)).respond(data, HEADERS) is None


SCRAPE = (
    b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\nUser-Agent: Prometheus\r\n\r\n"
)


def test_a_bare_scrape_gets_the_fronts_recent_page_with_prometheus_content_type():
    page = '# TYPE etrt_models gauge\netrt_models{state="ready"} 1\n'
    raw = InlineProbes(_Service(True), lambda: page).respond(SCRAPE, HEADERS)
    head, body = raw.split(b"\r\n\r\n", 1)
    lines = head.decode().split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    assert lines[0] == "HTTP/1.1 200 OK" and body.decode() == page
    assert headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert int(headers["content-length"]) == len(body) and headers["server"] == "uvicorn"


def test_a_scrape_goes_to_the_route_without_a_recent_page_or_when_it_needs_a_token():
    assert InlineProbes(_Service(True), lambda: None).respond(SCRAPE, HEADERS) is None
    assert InlineProbes(_Service(True)).respond(SCRAPE, HEADERS) is None  # metrics need a token
    with_body = b"GET /metrics HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}"
    assert InlineProbes(_Service(True), lambda: "x 1\n").respond(with_body, HEADERS) is None
