"""The fronts' HTTP transport: one write per connection per loop turn, bytes and order kept."""

import asyncio

from service.front.protocols.http_transport import _JOIN_BELOW, _GatheringTransport


class RecordingTransport:
    def __init__(self):
        self.calls: list[tuple[str, object]] = []
        self.closing = False

    def write(self, data):
        self.calls.append(("write", bytes(data)))

    def writelines(self, items):
        self.calls.append(("writelines", [bytes(i) for i in items]))

    def close(self):
        self.calls.append(("close", None))
        self.closing = True

    def is_closing(self):
        return self.closing

    def get_write_buffer_size(self):
        return 0

    def pause_reading(self):
        self.calls.append(("pause_reading", None))

    def resume_reading(self):
        self.calls.append(("resume_reading", None))

    def get_extra_info(self, name, default=None):
        return ("127.0.0.1", 1) if name == "peername" else default


def test_writes_of_one_turn_leave_in_one_call_in_order():
    async def main():
        real = RecordingTransport()
        gathering = _GatheringTransport(real, asyncio.get_running_loop())
        gathering.write(b"HTTP/1.1 200 OK\r\n\r\n")
        gathering.write(b"")
        gathering.write(b"body-1")
        gathering.write(memoryview(b"body-2"))
        assert real.calls == []  # nothing yet: the turn is not over
        assert gathering.get_write_buffer_size() == 31
        await asyncio.sleep(0)
        first = list(real.calls)
        gathering.write(b"next")
        await asyncio.sleep(0)
        return first, real.calls[len(first) :], gathering.get_extra_info("peername")

    first, second, peer = asyncio.run(main())
    assert first == [("write", b"HTTP/1.1 200 OK\r\n\r\nbody-1body-2")]
    assert second == [("write", b"next")]
    assert peer == ("127.0.0.1", 1)  # everything else is the real transport's


def test_large_answers_are_not_joined_and_a_close_sends_what_waits_first():
    async def main():
        real = RecordingTransport()
        gathering = _GatheringTransport(real, asyncio.get_running_loop())
        big = b"x" * _JOIN_BELOW
        gathering.write(b"head")
        gathering.write(big)
        await asyncio.sleep(0)
        gathering.write(b"last words")
        gathering.close()
        gathering.write(b"after close")  # dropped, as the real transport would
        await asyncio.sleep(0)
        return real.calls, big

    calls, big = asyncio.run(main())
    assert calls == [
        ("writelines", [b"head", big]),
        ("write", b"last words"),
        ("close", None),
    ]


def test_a_complete_answer_is_written_at_once_in_one_call():
    async def main():
        real = RecordingTransport()
        gathering = _GatheringTransport(real, asyncio.get_running_loop())
        gathering.write(b"head")
        gathering.write(b"body")
        gathering.flush()  # what the protocol does on uvicorn's on_response_complete
        at_once = list(real.calls)
        await asyncio.sleep(0)
        return at_once, real.calls

    at_once, later = asyncio.run(main())
    assert at_once == [("write", b"headbody")]
    assert later == at_once  # nothing more at the end of the turn


def _protocol(app):
    """The fronts' protocol on a recording transport, as uvicorn makes one per connection."""
    from uvicorn.config import Config
    from uvicorn.server import ServerState

    from service.front.protocols.http_transport import GatheringHttpToolsProtocol

    config = Config(
        app=app,
        http=GatheringHttpToolsProtocol,
        lifespan="off",
        log_level="error",
        proxy_headers=False,  # as the fronts run it (service/front/__main__.py)
        access_log=False,  # their default (--access-log): the transport writes whole answers
    )
    protocol = GatheringHttpToolsProtocol(config, ServerState(), {}, asyncio.get_running_loop())
    protocol.connection_made(RecordingTransport())
    return protocol


def _post(body: bytes) -> bytes:
    head = f"POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: {len(body)}\r\n\r\n".encode()
    return head + body


def _receiving_app(room: int, seen: dict):
    """Reads the first message, then hands the rest of the body to a buffer of `room` bytes."""
    from service.front.protocols.bodies import BODY_INTO, chunks

    async def app(scope, receive, send):
        first = await receive()
        buffer = bytearray(room)
        start = first["body"]
        buffer[: len(start)] = start
        sink = scope["extensions"][BODY_INTO](scope, memoryview(buffer), len(start))
        seen["later"] = [chunk async for chunk in chunks(receive)]
        seen["body"] = bytes(buffer[: sink.filled])
        sink.detach()
        await send(
            {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]}
        )
        await send({"type": "http.response.body", "body": b"ok"})

    return app


def test_a_body_handed_to_its_reader_lands_in_its_memory_as_it_arrives():
    body = bytes(range(256)) * 1024  # 256 KiB, in pieces: the reader takes the first one
    seen: dict = {}

    async def main():
        protocol = _protocol(_receiving_app(len(body), seen))
        wire = _post(body)
        protocol.data_received(wire[:1000])
        await asyncio.sleep(0.01)  # the app reads the first part and hands over its buffer
        for at in range(1000, len(wire), 65536):
            protocol.data_received(wire[at : at + 65536])
        for _ in range(5):
            await asyncio.sleep(0.01)
        return protocol.transport.calls

    calls = asyncio.run(main())
    assert seen["body"] == body
    assert seen["later"] == []  # no chunk went through a message after the hand-over
    writes = [data for call, data in calls if call == "write"]
    assert writes and writes[0].startswith(b"HTTP/1.1 200 OK") and writes[0].endswith(b"ok")


def test_a_body_longer_than_its_readers_room_reaches_it_the_usual_way():
    body = b"x" * 5000
    seen: dict = {}

    async def main():
        protocol = _protocol(_receiving_app(3000, seen))
        wire = _post(body)
        protocol.data_received(wire[:-4000])
        await asyncio.sleep(0.01)
        protocol.data_received(wire[-4000:])
        for _ in range(5):
            await asyncio.sleep(0.01)

    asyncio.run(main())
    assert b"".join(seen["later"]) == b"x" * 4000  # what did not fit, for the reader to refuse
    assert len(seen["body"]) == len(body) - 4000


def test_a_detached_reader_gets_no_more_bytes_in_its_memory():
    from service.front.protocols.bodies import BODY_INTO

    buffer = bytearray(100)
    done: list = []

    async def app(scope, receive, send):
        await receive()
        sink = scope["extensions"][BODY_INTO](scope, memoryview(buffer), 0)
        sink.detach()  # as a reader that gave up (refused or cancelled) does
        done.append(True)

    async def main():
        protocol = _protocol(app)
        wire = _post(b"y" * 100)
        protocol.data_received(wire[:-100])
        await asyncio.sleep(0.01)
        protocol.data_received(wire[-100:])
        await asyncio.sleep(0.01)

    asyncio.run(main())
    assert done and buffer == bytearray(100)


def test_a_pipelined_requests_reader_is_not_handed_the_next_requests_body():
    from service.front.protocols.bodies import BODY_INTO

    answers: list = []

    async def app(scope, receive, send):
        first = await receive()
        sink = scope["extensions"][BODY_INTO](scope, memoryview(bytearray(10)), 0)
        answers.append((first["body"], sink))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async def main():
        protocol = _protocol(app)
        protocol.data_received(_post(b"first") + _post(b"second"))  # both at once
        for _ in range(5):
            await asyncio.sleep(0.01)

    asyncio.run(main())
    # The first request's body had arrived whole; the body arriving after it is the second's.
    assert answers[0] == (b"first", None)
    assert answers[1][0] == b"second"


def _responding_app(answered: list):
    """Answers each request with its own body through the transport (bodies.respond)."""
    from service.front.protocols.bodies import respond

    async def app(scope, receive, send):
        message = await receive()
        await respond(scope, send, b"text/plain", [(b"x-kind", b"echo")], message["body"])
        answered.append(message["body"])

    return app


def _answers(wire: bytes) -> list[bytes]:
    """The raw answers on the wire, split at each status line."""
    return [b"HTTP/1.1" + part for part in wire.split(b"HTTP/1.1")[1:]]


def test_a_whole_answer_is_written_by_the_transport_in_one_call_and_the_connection_kept():
    answered: list = []

    async def main():
        protocol = _protocol(_responding_app(answered))
        # What uvicorn's server keeps there each second.
        protocol.server_state.default_headers[:] = [(b"date", b"Wed, 02 Dec 2026 05:00:00 GMT")]
        protocol.data_received(_post(b"one"))
        for _ in range(3):
            await asyncio.sleep(0.01)
        return protocol.transport.calls

    calls = asyncio.run(main())
    writes = [data for call, data in calls if call == "write"]
    assert answered == [b"one"] and len(writes) == 1
    head, _, body = writes[0].partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"HTTP/1.1 200 OK" and body == b"one"
    assert {b"content-type: text/plain", b"x-kind: echo", b"content-length: 3"} <= set(lines)
    assert b"date: Wed, 02 Dec 2026 05:00:00 GMT" in lines  # uvicorn's default headers too
    assert ("close", None) not in calls and b"connection: close" not in lines


def test_pipelined_whole_answers_leave_in_order_and_a_closing_request_closes():
    answered: list = []

    async def main():
        protocol = _protocol(_responding_app(answered))
        closing = _post(b"third").replace(b"Host: t\r\n", b"Host: t\r\nConnection: close\r\n")
        protocol.data_received(_post(b"first") + _post(b"second") + closing)
        for _ in range(5):
            await asyncio.sleep(0.01)
        return protocol.transport.calls

    calls = asyncio.run(main())
    wire = b"".join(data for call, data in calls if call == "write")
    answers = _answers(wire)
    assert answered == [b"first", b"second", b"third"]
    assert [a.rpartition(b"\r\n\r\n")[2] for a in answers] == answered
    assert b"connection: close" in answers[2] and b"connection: close" not in answers[0]
    assert calls[-1] == ("close", None)


def test_a_pipelined_answer_the_transport_cannot_write_itself_has_the_same_bytes():
    """A request alone gets its answer written by the transport; pipelined ones, read by
    uvicorn's parser while the one before runs, go through uvicorn's send: the same headers in
    the same order (the native path writes them so too)."""
    answered: list = []

    async def main():
        protocol = _protocol(_responding_app(answered))
        protocol.server_state.default_headers[:] = [(b"date", b"Wed, 02 Dec 2026 05:00:00 GMT")]
        protocol.data_received(_post(b"same"))  # alone: the transport writes its answer
        for _ in range(3):
            await asyncio.sleep(0.01)
        protocol.data_received(_post(b"same") + _post(b"same"))
        for _ in range(5):
            await asyncio.sleep(0.01)
        return protocol.transport.calls

    calls = asyncio.run(main())
    answers = _answers(b"".join(data for call, data in calls if call == "write"))
    assert answered == [b"same"] * 3 and len(answers) == 3
    assert answers[1] == answers[0] and answers[2] == answers[0], answers


def test_a_head_read_alone_is_held_for_a_declared_body_that_has_not_all_come():
    from service.front.protocols.bodies import STREAMED_BODY, body_to_come

    head = b"POST /v2/models/m/infer HTTP/1.1\r\nhost: t\r\ncontent-length: 10\r\n\r\n"
    assert body_to_come(head)  # as h11's clients send it: the head, then the body
    assert body_to_come(head + b"12345")  # part of it
    assert not body_to_come(head + b"1234567890")  # all of it: offered as it is
    last = b"POST /infer HTTP/1.1\r\nhost: t\r\nContent-Length: 10\r\n\r\n"
    assert body_to_come(last)  # any case; the last header
    for odd in (
        head[:-2],  # the head not whole yet
        head.replace(b"POST", b"GET"),
        head.replace(b"content-length: 10", b"transfer-encoding: chunked"),
        head.replace(b"host: t", b"expect: 100-continue"),  # its client waits for uvicorn's 100
        head.replace(b"10", b"ten"),
        head.replace(b"10", b"-1"),
        head.replace(b"10", str(STREAMED_BODY + 1).encode()),  # the Python path's anyway
        head.replace(b"10", b"99999999999999999999"),
    ):
        assert not body_to_come(odd), odd
