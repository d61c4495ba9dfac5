"""Lanes (service/protocols/lanes.py) on the fronts' HTTP protocol: a request a lane takes is
answered from the connection's callbacks, without a task; one it leaves goes the ASGI way with
its body; answers keep their order; a client gone cancels what was taken; errors are answered
the ASGI way."""

from __future__ import annotations

import asyncio
import json

from test_http_transport import _answers, _post, _protocol

from service.auth import Policy
from service.errors import Busy, NotFound
from service.protocols.http_errors import service_error_response
from service.protocols.lanes import LANE_BODY, may_take


class LaneApp:
    """An ASGI app with one lane for every request: `lane(scope, body, reply)` as given."""

    def __init__(self, lane):
        self.lane = lane
        self.asgi_bodies: list[bytes] = []

    def lane_for(self, scope):
        return self.lane

    async def __call__(self, scope, receive, send):
        message = await receive()
        self.asgi_bodies.append(message["body"])
        body = b"asgi:" + message["body"]
        length = [(b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": length})
        await send({"type": "http.response.body", "body": body})


async def _turns(n: int = 5) -> None:
    for _ in range(n):
        await asyncio.sleep(0.01)


def _wire(protocol) -> bytes:
    return b"".join(data for call, data in protocol.transport.calls if call == "write")


def test_a_request_a_lane_takes_is_answered_from_its_callback_without_a_task():
    taken: list = []

    def lane(scope, body, reply):
        taken.append(body)
        asyncio.get_running_loop().call_soon(reply.ok, b"text/plain", [], b"lane:" + body)
        return lambda: None

    async def main():
        app = LaneApp(lane)
        protocol = _protocol(app)
        protocol.data_received(_post(b"one"))
        tasks_meanwhile = len(protocol.tasks)
        await _turns()
        return app, protocol, tasks_meanwhile

    app, protocol, tasks_meanwhile = asyncio.run(main())
    assert taken == [b"one"] and app.asgi_bodies == []
    assert tasks_meanwhile == 0
    (answer,) = _answers(_wire(protocol))
    assert answer.startswith(b"HTTP/1.1 200 OK") and answer.endswith(b"\r\n\r\nlane:one")


def test_a_request_the_lane_leaves_goes_the_asgi_way_with_its_whole_body():
    async def main():
        app = LaneApp(lambda scope, body, reply: None)
        protocol = _protocol(app)
        wire = _post(b"x" * 3000)
        protocol.data_received(wire[:-1000])  # the lane is asked only once the body is in
        await _turns(1)
        protocol.data_received(wire[-1000:])
        await _turns()
        return app, protocol

    app, protocol = asyncio.run(main())
    assert app.asgi_bodies == [b"x" * 3000]
    assert _wire(protocol).endswith(b"asgi:" + b"x" * 3000)


def test_pipelined_requests_are_answered_in_their_order_whichever_way_they_go():
    replies: dict = {}

    def lane(scope, body, reply):
        if body == b"asgi":
            return None
        replies[body] = reply
        return lambda: None

    async def main():
        app = LaneApp(lane)
        protocol = _protocol(app)
        protocol.data_received(_post(b"first") + _post(b"asgi") + _post(b"third"))
        await _turns()
        replies[b"first"].ok(b"text/plain", [], b"1")  # the next ones start only after it
        await _turns()
        replies[b"third"].ok(b"text/plain", [], b"3")
        await _turns()
        return protocol

    protocol = asyncio.run(main())
    bodies = [a.rpartition(b"\r\n\r\n")[2] for a in _answers(_wire(protocol))]
    assert bodies == [b"1", b"asgi:asgi", b"3"]


def test_a_client_that_goes_away_cancels_what_the_lane_took():
    cancelled: list = []
    replies: list = []

    def lane(scope, body, reply):
        replies.append(reply)
        return lambda: cancelled.append(body)

    async def main():
        protocol = _protocol(LaneApp(lane))
        protocol.data_received(_post(b"gone"))
        await _turns(1)
        protocol.connection_lost(None)
        replies[0].ok(b"text/plain", [], b"late")  # the engine's answer, after all
        await _turns()
        return protocol

    protocol = asyncio.run(main())
    assert cancelled == [b"gone"]
    assert b"late" not in _wire(protocol)


def test_errors_are_answered_the_asgi_way_with_the_protocols_body_and_faults_with_500(caplog):
    errors = [NotFound("model 'm' not found"), Busy("full", retry_after_s=3), KeyError("bug")]

    def lane(scope, body, reply):
        error = errors[int(body)]
        asyncio.get_running_loop().call_soon(reply.fail, error, service_error_response)
        return lambda: None

    async def main():
        protocol = _protocol(LaneApp(lane))
        protocol.data_received(_post(b"0") + _post(b"1") + _post(b"2"))
        await _turns(10)
        return protocol

    answers = _answers(_wire(asyncio.run(main())))
    heads = [a.partition(b"\r\n\r\n")[0].lower() for a in answers]
    bodies = [json.loads(a.partition(b"\r\n\r\n")[2]) for a in answers]
    assert heads[0].startswith(b"http/1.1 404") and bodies[0]["error"] == "model 'm' not found"
    assert heads[1].startswith(b"http/1.1 503") and b"retry-after: 3" in heads[1]
    assert heads[2].startswith(b"http/1.1 500") and bodies[2]["error"].startswith(
        "internal server error (error id "
    )
    assert "KeyError" in caplog.text  # the fault is logged, its text never answered


def test_a_lane_that_fails_itself_is_answered_500_and_the_connection_serves_on(caplog):
    def lane(scope, body, reply):
        if body == b"bad":
            raise RuntimeError("a bug in the lane")
        asyncio.get_running_loop().call_soon(reply.ok, b"text/plain", [], body)
        return lambda: None

    async def main():
        protocol = _protocol(LaneApp(lane))
        protocol.data_received(_post(b"bad"))
        await _turns()
        protocol.data_received(_post(b"good"))
        await _turns()
        return protocol

    answers = _answers(_wire(asyncio.run(main())))
    assert answers[0].startswith(b"HTTP/1.1 500") and answers[1].endswith(b"\r\n\r\ngood")
    assert "a bug in the lane" in caplog.text


def _scope(*headers: tuple[bytes, bytes]) -> dict:
    return {"headers": list(headers)}


def test_only_small_declared_bodies_may_try_a_lane_and_a_token_must_check():
    open_policy = Policy(admin_token=None, infer_token=None)
    small = (b"content-length", b"120")
    assert may_take(_scope(small), open_policy)
    assert not may_take(_scope(), open_policy)  # no length: streamed
    assert not may_take(_scope((b"content-length", str(LANE_BODY + 1).encode())), open_policy)
    assert not may_take(_scope(small, (b"transfer-encoding", b"chunked")), open_policy)
    assert not may_take(_scope((b"content-length", b"12x")), open_policy)
    tokens = Policy(admin_token="a" * 32, infer_token="i" * 32)
    assert may_take(_scope(small, (b"authorization", b"Bearer " + b"i" * 32)), tokens)
    assert not may_take(_scope(small), tokens)  # the ASGI way answers 401
    assert not may_take(_scope(small, (b"authorization", b"Bearer " + b"a" * 32)), tokens)


def test_an_answer_that_cannot_be_encoded_frees_its_outputs_and_is_answered_as_a_fault():
    from types import SimpleNamespace

    from service.dataplane.types import InferResponse, Tensor
    from service.inline_policy import InlinePolicy
    from service.protocols.native.infer_endpoint import InferEndpoint
    from service.protocols.v2_rest import codec
    from service.protocols.v2_rest import infer_endpoint as v2

    class Recording:
        def __init__(self):
            self.failed, self.answered = [], []

        def fail(self, error, render):
            self.failed.append(type(error))

        def ok(self, *answer):
            self.answered.append(answer)

    offload = SimpleNamespace(policy=InlinePolicy())
    parsed = codec.parse_header(b'{"inputs": [{"name": "x", "datatype": "FP32", "shape": [1]'
                                b', "data": [1]}]}')  # fmt: skip
    freed = []
    for answer in (
        lambda outcome, reply: v2._answer(offload, parsed, outcome, reply),
        lambda outcome, reply: InferEndpoint(None, offload)._answer(outcome, reply),
    ):
        reply = Recording()
        # An output the encoders cannot read (a fault of the server's own, never a client's).
        broken = [Tensor("y", "FP32", object())]
        outcome = InferResponse(
            "m", "1", "forward", None, broken, on_release=lambda: freed.append(1)
        )
        answer(outcome, reply)
        assert reply.failed == [AttributeError] and reply.answered == []
    assert freed == [1, 1]  # the arena slots of each were given back
