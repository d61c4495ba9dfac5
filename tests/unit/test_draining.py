"""service/front/draining.py: what a front's server does on its ticks besides draining."""

import asyncio

import uvicorn

from service.front import draining
from service.front.draining import DrainingServer
from service.front.protocols.drain import Drain
from service.shared.heap_tuning import TRIM_PERIOD_S


def test_the_ticks_hand_freed_heap_memory_back_once_a_period(monkeypatch):
    trims, now = [], [100.0]

    async def trim():
        trims.append(now[0])

    monkeypatch.setattr(draining, "release_freed_memory", trim)
    server = DrainingServer(uvicorn.Config(app=None), Drain(1.0), client=None)
    server._clock = lambda: now[0]

    async def ticks():
        for step in range(31):  # uvicorn ticks every 0.1 s
            now[0] = 100.0 + step * TRIM_PERIOD_S / 10
            assert await server.on_tick(step + 1) is False

    asyncio.run(ticks())
    assert trims == [100.0 + k * TRIM_PERIOD_S for k in range(4)]
