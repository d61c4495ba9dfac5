"""The fronts' gate on the native path (NativePath.take, service/front/native_path.py) over a
stand-in native reader and engine link and a real Gate: a request is sent to the engine while
no queue is full, and refused with the protocol the gate shares a full queue's places by, read
from the request's own first bytes (the Python path names it InferRequest.protocol). Real ones:
tests/e2e/test_overload_e2e.py."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from service.dataplane.scheduling.gate import Gate, Refusal
from service.errors import QueueFull
from support.native_path_stub import LANE_MESSAGE, native_path_over

HEADS = {
    "native": b"POST /infer HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}",
    "v2 JSON": b"POST /v2/models/m/infer HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}",
    "v2 binary": b"POST /v2/models/m/infer HTTP/1.1\r\nContent-Length: 2\r\n"
    b"Inference-Header-Content-Length: 2\r\n\r\n{}",
}


class FakeNative:
    """The native reader: takes every request whole."""

    def __init__(self):
        self.taken = 0

    def take(self, data: bytes):
        self.taken += 1
        return self.taken, len(data), LANE_MESSAGE


def _path():
    asked = []
    gate = Gate(lambda: 100.0)  # time stands still: a full queue stays full

    def admits(model, version, method, protocol):
        asked.append(protocol)
        return gate.admit(model, version, method, protocol)

    client = SimpleNamespace(gate=gate, admits=admits, native_requests=0)
    path, _, sent = native_path_over(client, FakeNative())
    return path, gate, sent, asked


def _take(path, head: bytes) -> list:
    answers = []

    async def main():
        assert path.take(head, answers.append) is not None
        await asyncio.sleep(0)  # a refusal is answered on the loop's next turn

    asyncio.run(main())
    return answers


def test_while_no_queue_is_full_every_request_goes_to_the_engine_without_asking_the_gate():
    path, _, sent, asked = _path()
    for head in HEADS.values():
        assert _take(path, head) == []
    assert sent == [LANE_MESSAGE] * 3 and asked == []


@pytest.mark.parametrize("protocol", HEADS)
def test_a_full_queue_refuses_with_the_protocol_the_request_began_with(protocol):
    path, gate, sent, asked = _path()
    gate.refused(QueueFull("model 'm' is full; retry later", "m", "1", "forward", 0.01, 0.08))
    (answer,) = _take(path, HEADS[protocol])
    assert isinstance(answer, Refusal) and "model 'm' is full" in answer.message
    assert asked == [protocol] and sent == []
