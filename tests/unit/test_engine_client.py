"""The front's engine client, on its own: what it asks the engine, and how often."""

import asyncio

from service.config import Settings
from service.dataplane.types import ModelEntry, ModelTable
from service.front.engine_client import EngineClient
from service.shared import frames, messages
from service.shared.contract import GetTable


class _Link:
    """What the client reads of its connection: the engine's table generation, and that it
    serves."""

    alive = True

    def generation(self):
        return 5, True

    def serving(self):
        return True


def test_requests_before_the_first_table_cost_the_engine_one_call(tmp_path):
    # Requests reaching a front before its first table each asked the engine model_ready;
    # under load at 8 fronts those calls took the engine's thread from its inference.
    client = EngineClient(Settings(artifacts=tmp_path / "artifacts"), "unused", "secret", 0)
    client._link = _Link()
    calls = []
    table = ModelTable(5, {"m": ModelEntry({}, 0)}, {("m", "1"): ModelEntry({}, 0)})

    async def call(record):
        calls.append(type(record).__name__)
        await asyncio.sleep(0.01)
        return table if type(record) is GetTable else False

    client._call = call

    async def main():
        ready = await asyncio.gather(*(client.model_ready("m") for _ in range(20)))
        versioned = await client.model_ready("m", "1")
        other = await client.model_ready("other")
        return ready, versioned, other

    ready, versioned, other = asyncio.run(main())
    assert ready == [True] * 20 and versioned is True
    assert other is False  # not in the table: the engine answers (and names what is wrong)
    assert calls == ["GetTable", "ModelReady"]
