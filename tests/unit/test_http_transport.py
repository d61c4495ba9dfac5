"""The fronts' HTTP transport: one write per connection per loop turn, bytes and order kept."""

import asyncio

from service.protocols.http_transport import _JOIN_BELOW, _GatheringTransport


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
