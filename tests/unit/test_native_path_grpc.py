"""NativePath.infer_grpc's Python glue (service/front/native_path.py) over a stand-in native
reader and engine link: the answer the lane relays becomes the response message, and a call
that goes away frees its arena slot whenever it goes: while the engine runs it (a cancel is
sent, saying whether the call's deadline passed; the slot is freed when the answer comes) or
after the answer came but before the call resumed (freed at once: no answer will come again).
Real ones: tests/e2e/test_grpc_native_e2e.py.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from service.errors import Unavailable
from service.shared import lane_frames, messages
from service.shared.frames import LANE_DONE
from support.native_path_stub import LANE_MESSAGE, native_path_over

REQUEST_ID = 7


class FakeNative:
    """The native reader: takes b"ok", answers every lane answer with b"answer"."""

    def __init__(self):
        self.released: list[int] = []

    def take_grpc(self, wire: bytes):
        return (REQUEST_ID, LANE_MESSAGE) if wire == b"ok" else None

    def answer_lane_grpc(self, request_id: int, payload: bytes) -> bytes:
        self.released.append(request_id)
        return b"answer"

    def release(self, request_id: int):
        self.released.append(request_id)
        return ("gRPC", True)


def _path():
    client = SimpleNamespace(
        gate=SimpleNamespace(any_closed=False),
        native_requests=0,
        down=lambda: Unavailable("the inference engine is restarting; retry shortly"),
    )
    native = FakeNative()
    path, link, sent = native_path_over(client, native)
    return path, native, link, sent


def _done() -> object:
    return messages.lane_done((LANE_DONE, REQUEST_ID, b"payload"))


def test_the_lanes_answer_is_the_response_and_a_declined_call_is_none():
    async def run():
        path, native, link, sent = _path()
        assert await path.infer_grpc(b"other") is None
        call = asyncio.ensure_future(path.infer_grpc(b"ok"))
        await asyncio.sleep(0)
        assert sent == [LANE_MESSAGE]
        link.relays.pop(REQUEST_ID)(_done())
        assert await call == b"answer"
        assert native.released == [REQUEST_ID]

    asyncio.run(run())


def test_a_call_cancelled_while_the_engine_runs_it_frees_its_slot_when_the_answer_comes():
    async def run():
        path, native, link, sent = _path()
        call = asyncio.ensure_future(path.infer_grpc(b"ok"))
        await asyncio.sleep(0)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        assert sent == [LANE_MESSAGE, lane_frames.cancel(REQUEST_ID)]
        assert native.released == []  # the engine may still write into the slot
        link.relays.pop(REQUEST_ID)(_done())
        assert native.released == [REQUEST_ID]

    asyncio.run(run())


def test_a_call_cancelled_at_its_deadline_says_so_and_one_cancelled_before_does_not():
    """grpcio cancels a call at its deadline: the cancel tells the engine, which counts a
    request it drops then as a deadline passed (a call with time left went away)."""

    async def cancelled_after(timeout_s: float | None, wait_s: float) -> list:
        path, native, link, sent = _path()
        call = asyncio.ensure_future(path.infer_grpc(b"ok", timeout_s))
        await asyncio.sleep(wait_s)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        return sent

    async def run():
        at_deadline = await cancelled_after(0.05, 0.05)
        assert at_deadline == [LANE_MESSAGE, lane_frames.cancel(REQUEST_ID, deadline=True)]
        before_it = await cancelled_after(5.0, 0.01)
        assert before_it == [LANE_MESSAGE, lane_frames.cancel(REQUEST_ID, deadline=False)]
        no_deadline = await cancelled_after(None, 0.05)
        assert no_deadline == [LANE_MESSAGE, lane_frames.cancel(REQUEST_ID, deadline=False)]

    asyncio.run(run())


def test_a_call_cancelled_after_its_answer_came_frees_its_slot_at_once():
    async def run():
        path, native, link, sent = _path()
        call = asyncio.ensure_future(path.infer_grpc(b"ok"))
        await asyncio.sleep(0)
        link.relays.pop(REQUEST_ID)(_done())  # the answer is here; the call has not resumed
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        assert native.released == [REQUEST_ID]
        assert sent == [LANE_MESSAGE]  # nothing to cancel

    asyncio.run(run())


def test_an_engine_that_went_away_is_the_clients_unavailable():
    async def run():
        path, native, link, _ = _path()
        call = asyncio.ensure_future(path.infer_grpc(b"ok"))
        await asyncio.sleep(0)
        link.relays.pop(REQUEST_ID)(None)  # the link was lost
        with pytest.raises(Unavailable, match="restarting"):
            await call
        assert native.released == [REQUEST_ID]

    asyncio.run(run())
