"""The engine's last /metrics page that busy fronts answer from
(service/shared/metrics_snapshot.py), its refresh in the engine (service/engine/metrics_refresh.py)
and a front's choice between it and asking the engine (EngineClient.metrics_text), over a real
shared memfd."""

import asyncio
import mmap
import os
import time

import pytest

from service.config import Settings
from service.engine import metrics_refresh
from service.engine.control import ControlPage
from service.engine.metrics_refresh import MetricsRefresh
from service.front.engine_client import EngineClient
from service.shared import contract, handshake, metrics_snapshot
from service.shared.metrics_snapshot import AT, HEADER


@pytest.fixture
def control():
    page = ControlPage()
    fronts_view = mmap.mmap(page.fd, handshake.MAPPED_BYTES, mmap.MAP_SHARED, mmap.PROT_READ)
    yield page, fronts_view
    fronts_view.close()
    os.close(page.fd)


def test_a_front_reads_the_page_the_engine_wrote_through_the_shared_memfd(control):
    page, view = control
    assert metrics_snapshot.read(view) is None  # nothing rendered yet
    page.metrics.write("etrt_a 1\n", 12.5)
    assert metrics_snapshot.read(view) == ("etrt_a 1\n", 12.5)
    page.metrics.write("etrt_a 2\n# ünïcode\n", 13.0)  # a shorter or longer page replaces it
    assert metrics_snapshot.read(view) == ("etrt_a 2\n# ünïcode\n", 13.0)
    page.write(7, True, True)  # the control page before it is untouched by the metrics page
    assert handshake.CONTROL.unpack_from(view, 0) == (7, 1, 1)
    assert metrics_snapshot.read(view).text == "etrt_a 2\n# ünïcode\n"


def test_a_page_being_written_or_torn_is_not_served(control):
    page, view = control
    page.metrics.write("etrt_a 1\n", 1.0)
    seq, length, at, crc = HEADER.unpack_from(view, AT)
    HEADER.pack_into(page._page, AT, seq + 1, length, at, crc)  # a write under way
    assert metrics_snapshot.read(view) is None
    HEADER.pack_into(page._page, AT, seq, length, at, crc)
    assert metrics_snapshot.read(view) is not None
    page._page[metrics_snapshot.BODY_AT] = ord("X")  # bytes seen out of order
    assert metrics_snapshot.read(view) is None


def test_a_page_too_large_for_the_room_leaves_nothing_to_serve(control, monkeypatch):
    page, view = control
    page.metrics.write("small\n", 1.0)
    monkeypatch.setattr(metrics_snapshot, "CAPACITY", 8)
    assert page.metrics.write("a page of more than eight bytes\n", 2.0) is False
    assert metrics_snapshot.read(view) is None


def test_the_engine_refreshes_the_page_while_scrapes_come_and_stops_after(control, monkeypatch):
    page, view = control
    monkeypatch.setattr(metrics_refresh, "KEEP_S", 0.3)
    renders = []

    async def render():
        renders.append(time.monotonic())
        return f"etrt_renders {len(renders)}\n"

    async def main():
        refresh = MetricsRefresh(render, page.metrics, max_age_s=0.1)
        assert await refresh.page() == "etrt_renders 1\n"  # a front's call: published at once
        assert metrics_snapshot.read(view).text == "etrt_renders 1\n"
        await asyncio.sleep(0.2)
        refreshed = len(renders)
        refresh.scraped()  # a front answered from the page: keep it fresh longer
        await asyncio.sleep(0.6)
        after_keep = len(renders)
        await asyncio.sleep(0.3)
        refresh.close()
        return refreshed, after_keep

    refreshed, after_keep = asyncio.run(main())
    assert refreshed >= 3  # every max_age / 2 = 50 ms
    assert len(renders) == after_keep  # nothing rendered once nobody scrapes
    assert metrics_snapshot.read(view).text == f"etrt_renders {after_keep}\n"
    assert metrics_snapshot.read(view).rendered_at == pytest.approx(renders[-1])


def test_max_age_zero_publishes_nothing(control):
    page, view = control

    async def render():
        return "etrt_a 1\n"

    async def main():
        refresh = MetricsRefresh(render, page.metrics, max_age_s=0.0)
        await refresh.page()
        refresh.scraped()
        await asyncio.sleep(0.05)

    asyncio.run(main())
    assert metrics_snapshot.read(view) is None


class _Arena:
    in_use = 0


class _Link:
    alive = True

    def __init__(self, view):
        self.control = view
        self.arena = _Arena()
        self.pending, self.relays, self.calls = {}, {}, {}


def _client(tmp_path, view, max_age_ms=250.0):
    settings = Settings(artifacts=tmp_path / "artifacts", metrics_max_age_ms=max_age_ms)
    client = EngineClient(settings, "unused", "secret", 0)
    client._link = _Link(view)
    asked, noted = [], []

    async def call(record):
        asked.append(record)
        return "live\n"

    client._call = call
    client._note = noted.append
    return client, asked, noted


def test_an_idle_front_asks_the_engine_so_a_scrape_counts_every_answer_before_it(tmp_path, control):
    page, view = control
    page.metrics.write("snapshot\n", time.monotonic())
    client, asked, noted = _client(tmp_path, view)
    assert asyncio.run(client.metrics_text()) == "live\n"
    assert asked == [contract.MetricsText()] and noted == []


@pytest.mark.parametrize("busy_with", ["arena", "pending", "relays", "calls"])
def test_a_busy_front_answers_from_a_young_page_and_tells_the_engine(tmp_path, control, busy_with):
    page, view = control
    page.metrics.write("snapshot\n", time.monotonic())
    client, asked, noted = _client(tmp_path, view)
    if busy_with == "arena":
        client._link.arena.in_use = 4096
    else:
        getattr(client._link, busy_with)[1] = object()
    assert asyncio.run(client.metrics_text()) == "snapshot\n"
    assert asyncio.run(client.metrics_text()) == "snapshot\n"
    assert asked == [] and noted == [contract.MetricsScraped()]  # noted once a second at most


def test_a_busy_front_asks_when_the_page_is_too_old_or_absent_or_the_age_is_zero(tmp_path, control):
    page, view = control
    client, asked, _ = _client(tmp_path, view)
    client._link.arena.in_use = 4096
    assert asyncio.run(client.metrics_text()) == "live\n"  # nothing published yet
    page.metrics.write("snapshot\n", time.monotonic() - 0.3)  # older than 250 ms
    assert asyncio.run(client.metrics_text()) == "live\n"
    page.metrics.write("snapshot\n", time.monotonic())
    client, asked, _ = _client(tmp_path, view, max_age_ms=0.0)
    client._link.arena.in_use = 4096
    assert asyncio.run(client.metrics_text()) == "live\n"
    assert asked == [contract.MetricsText()]
