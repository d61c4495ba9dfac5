"""The Retry-After of the front's own 503s (service/engine/): a full arena names how long
requests recently held their slots, an engine that is down how long its last start took."""

import pytest

from service.config import Settings
from service.errors import Busy
from service.front import engine_link
from service.front.engine_client import EngineClient, EngineDown
from service.shared.arena import Arena


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


@pytest.fixture
def clock(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(engine_link.time, "monotonic", clock)
    return clock


def test_a_full_arena_names_how_long_requests_hold_their_slots(tmp_path, clock):
    client = EngineClient(Settings(artifacts=tmp_path), "unused", "unused", 0)
    arena = Arena(1 << 16)
    held = arena.allocate(1 << 16)
    with pytest.raises(Busy) as quick:
        client._allocate(arena, 256)
    assert quick.value.retry_after_s == 1.0  # nothing measured yet, or under a second
    client._holding_s = 2.4  # requests recently took 2.4 s from sending to their answer
    with pytest.raises(Busy) as slow:
        client._allocate(arena, 256)
    assert slow.value.retry_after_s == 2.4 and "shared memory" in slow.value.message
    held.release()


def test_an_engine_that_is_down_names_what_its_last_start_took(tmp_path, clock):
    client = EngineClient(Settings(artifacts=tmp_path), "unused", "unused", 0)
    clock.now += 6.0  # the engine took 6 s to answer the front's first connection
    client._outage.ended()
    clock.now += 300.0
    client._outage.began()  # lost
    clock.now += 2.0
    down = client.down()
    assert isinstance(down, EngineDown) and isinstance(down, Busy)
    assert down.retry_after_s == pytest.approx(4.0)  # 6 s to start, 2 s of it gone
    clock.now += 10.0
    assert client.down().retry_after_s == 1.0  # overdue: at least 1 s, never 0
