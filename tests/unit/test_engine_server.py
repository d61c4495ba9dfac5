"""The engine's answers (service/engine/server.py): outputs written into the room the front
reserved, small ones at once on the loop, large ones by a copier thread, answered only once
written; a copy that fails is answered as the engine's own failure."""

from __future__ import annotations

import asyncio
import pickle

import numpy as np

from service.config import Settings
from service.dataplane.service import ModelService
from service.engine import server as engine_server
from service.engine.server import _COPY_OFF_LOOP_BYTES, EngineServer, InternalError
from service.ipc import frames
from service.ipc.arena import Arena


class _Front:
    def __init__(self, arena: Arena):
        self.region = arena.region
        self.sent: list[tuple] = []
        self.protocol = self

    def send(self, message: tuple) -> None:
        self.sent.append(message)


def test_outputs_are_written_into_the_fronts_room_and_large_ones_answered_once_copied(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(engine_server, "_COPIERS", 2)  # as on a host of 8 cores or more
    server = EngineServer(ModelService(Settings(artifacts=tmp_path / "a")), "unused", "s")
    arena = Arena(8 << 20)
    front = _Front(arena)
    small = np.arange(8, dtype=np.float32)
    large = np.random.default_rng(0).standard_normal(_COPY_OFF_LOOP_BYTES // 4 + 1, np.float32)

    sent_at_once: list[int] = []

    async def main():
        server._loop = asyncio.get_running_loop()
        server._answer(front, 1, "1", [("y", "FP32", small)], 0, 4096)
        server._answer(front, 2, "1", [("y", "FP32", large)], 4096, 4 << 20)
        sent_at_once.extend(m[1] for m in front.sent)  # the small one only: the large is copying
        for _ in range(100):
            if len(front.sent) == 2:
                break
            await asyncio.sleep(0.01)
        # Room past the end of the arena: the copy fails, and the request is answered so.
        server._answer(front, 3, "1", [("y", "FP32", large)], (8 << 20) - 4096, 4 << 20)
        for _ in range(100):
            if len(front.sent) == 3:
                break
            await asyncio.sleep(0.01)

    try:
        asyncio.run(main())
    finally:
        server.close()
    assert sent_at_once == [1]
    assert [message[1] for message in front.sent] == [1, 2, 3]
    (kind, key, ok, (version, placed)) = front.sent[0]
    assert (kind, key, ok, version) == (frames.DONE, 1, True, "1")
    name, datatype, shape, offset, inline = placed[0]
    assert np.array_equal(arena.region.array(offset, np.float32, tuple(shape)), small)
    (_, _, ok, (_, placed)) = front.sent[1]
    _, _, shape, offset, inline = placed[0]
    assert ok and inline is None and offset % 256 == 0
    assert np.array_equal(arena.region.array(offset, np.float32, tuple(shape)), large)
    (_, _, ok, payload) = front.sent[2]
    assert not ok and isinstance(pickle.loads(payload), InternalError)


def test_without_cores_to_spare_every_answer_is_written_on_the_loop(tmp_path, monkeypatch):
    monkeypatch.setattr(engine_server, "_COPIERS", 0)  # as on 2 cores
    server = EngineServer(ModelService(Settings(artifacts=tmp_path / "a")), "unused", "s")
    arena = Arena(8 << 20)
    front = _Front(arena)
    large = np.ones(_COPY_OFF_LOOP_BYTES, np.float32)

    async def main():
        server._loop = asyncio.get_running_loop()
        server._answer(front, 1, "1", [("y", "FP32", large)], 0, 4 << 20)
        return [message[1] for message in front.sent]

    try:
        assert asyncio.run(main()) == [1]
    finally:
        server.close()
    (_, _, ok, (_, placed)) = front.sent[0]
    assert ok and np.array_equal(arena.region.array(placed[0][3], np.float32, large.shape), large)
