"""The JSON offload workers exit once idle, taking the memory of the largest request they
decoded with them, and a later call spawns new ones (real worker processes)."""

import asyncio
import os
import time

from service.front.protocols.offload import Offload


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False


def test_idle_workers_exit_and_a_later_call_spawns_new_ones():
    offload = Offload(workers=1, idle_s=0.5)

    async def main():
        first = await offload.call(os.getpid)
        assert first != os.getpid() and _alive(first)
        # Busy: calls within the idle time keep the same worker.
        await asyncio.sleep(0.2)
        assert await offload.call(os.getpid) == first
        deadline = time.monotonic() + 10
        while _alive(first) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert not _alive(first), "the idle worker should have exited"
        second = await offload.call(os.getpid)
        assert second != first and _alive(second)
        return second

    try:
        second = asyncio.run(main())
    finally:
        offload.close()
    assert not _alive(second)
