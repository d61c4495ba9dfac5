"""The outermost middleware: server faults answered 500 in the error shape, disconnects quiet."""

import asyncio
import json
import logging
import re

import pytest
from starlette.requests import ClientDisconnect

from service.front.protocols.http_errors import UnexpectedErrors

SCOPE = {"type": "http", "method": "POST", "path": "/infer/" + "x" * 10_000}


def call(app) -> list[dict]:
    sent = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    asyncio.run(UnexpectedErrors(app)(SCOPE, receive, send))
    return sent


def test_a_server_fault_is_answered_500_in_the_error_shape(caplog):
    async def broken(scope, receive, send):
        raise OverflowError("int too large to convert to float")

    with caplog.at_level(logging.ERROR, "service.front.protocols.http_errors"):
        start, body = call(broken)
    assert start["status"] == 500
    answered = json.loads(body["body"])
    ident = re.fullmatch(r"internal server error \(error id ([0-9a-f]{12})\)", answered["error"])[1]
    assert answered["problems"] == [
        {"file": None, "rule": "server.internal", "message": answered["error"]}
    ]
    [record] = caplog.records
    # The cause is logged under the id the answer carries, never answered itself.
    assert ident in record.getMessage() and "OverflowError" in record.exc_text
    assert "OverflowError" not in body["body"].decode() and len(record.getMessage()) < 400


def test_a_fault_after_the_answer_started_still_propagates():
    async def half(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        raise RuntimeError("mid-answer")

    with pytest.raises(RuntimeError, match="mid-answer"):
        call(half)


def test_a_client_that_went_away_gets_no_answer_and_an_info_line(caplog):
    async def gone(scope, receive, send):
        raise ClientDisconnect()

    with caplog.at_level(logging.INFO, "service.front.protocols.disconnect"):
        assert call(gone) == []
    [record] = caplog.records
    assert record.levelno == logging.INFO and "outcome=aborted" in record.getMessage()
