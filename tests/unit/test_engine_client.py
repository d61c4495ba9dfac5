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


def _served_client(tmp_path, arena_bytes=1 << 20):
    """A client joined to a stand-in engine: a real arena and control page, a table at the
    engine's generation serving "m" (forward: x [2, 2] FP32 -> y [2, 2] FP32), and what it
    sends recorded instead of written."""
    import mmap

    import numpy as np  # noqa: F401  (the tests' arrays)

    from service.dataplane.types import MethodSignature, TensorSpec
    from service.front.engine_link import Link
    from service.shared.arena import Arena
    from service.shared.handshake import CONTROL

    client = EngineClient(
        Settings(artifacts=tmp_path / "artifacts", arena_bytes=arena_bytes), "unused", "s", 0
    )
    control = mmap.mmap(-1, mmap.PAGESIZE)
    CONTROL.pack_into(control, 0, 7, 1, 1)  # generation 7, ready, serving
    link = Link(client, Arena(arena_bytes), control)
    sent, notes = [], []
    link.protocol.send = sent.append
    client._link = link
    spec = [TensorSpec("x", "FP32", [2, 2], False)], [TensorSpec("y", "FP32", [2, 2], False)]
    entry = ModelEntry({"forward": MethodSignature("forward", *spec)}, 0)
    client._table = ModelTable(7, {"m": entry}, {("m", "1"): entry})
    client._note = lambda *args: notes.append(args)
    return client, link, sent, notes


def _request(array, model="m", datatype="FP32"):
    from service.dataplane.types import InferRequest, Tensor

    return InferRequest(model=model, inputs=[Tensor("x", datatype, array)], protocol="native")


def test_a_lane_request_goes_at_once_and_its_answer_comes_back_through_done(tmp_path):
    import numpy as np

    async def main():
        client, link, sent, notes = _served_client(tmp_path)
        outcomes = []
        x = np.arange(4, dtype=np.float32).reshape(2, 2)
        cancel = client.submit(_request(x), outcomes.append)
        assert cancel is not None and len(sent) == 1 and link.arena.in_use > 0
        message = sent[0]
        assert type(message) is messages.Infer and message.checked_at == 7  # at this generation
        (name, datatype, shape, offset) = message.inputs[0]
        assert (name, datatype, shape) == ("x", "FP32", (2, 2))
        assert np.array_equal(link.arena.region.array(offset, np.float32, (2, 2)), x)
        out_at = message.room_offset
        link.arena.region.array(out_at, np.float32, (2, 2))[...] = x * 2
        outputs = [("y", "FP32", [2, 2], out_at, None)]
        link._received((frames.DONE, message.request_id, True, ("1", outputs)))
        await asyncio.sleep(0)
        (response,) = outcomes
        assert response.version == "1" and np.array_equal(response.outputs[0].array, x * 2)
        response.release()
        assert link.arena.in_use == 0 and notes == []

        # An error from the engine is handed to done as it is; the slots are freed.
        import pickle

        from service.errors import NotFound

        client.submit(_request(x), outcomes.append)
        error = NotFound("gone meanwhile")
        link._received((frames.DONE, sent[-1].request_id, False, pickle.dumps(error)))
        await asyncio.sleep(0)
        assert isinstance(outcomes[-1], NotFound) and link.arena.in_use == 0

        # Cancelled (the client went away): the engine is told; its late answer frees the slots.
        cancel = client.submit(_request(x), outcomes.append)
        key = sent[-1].request_id
        cancel()
        assert sent[-1] == messages.Cancel(frames.CANCEL, key) and link.arena.in_use > 0
        link._received((frames.DONE, key, True, ("1", [])))
        await asyncio.sleep(0)
        assert len(outcomes) == 2 and link.arena.in_use == 0

    asyncio.run(main())


def test_what_a_lane_cannot_finish_is_left_to_infer_with_nothing_sent_or_counted(tmp_path):
    import numpy as np

    from service.errors import QueueFull

    async def main():
        client, link, sent, notes = _served_client(tmp_path, arena_bytes=64 * 1024)
        good = np.zeros((2, 2), np.float32)
        left = [
            client.submit(_request(good, model="other"), print),  # not in the table
            client.submit(_request(np.zeros((3, 2), np.float32)), print),  # a refusal
            client.submit(_request(np.zeros((2, 2), np.int32), datatype="INT32"), print),
        ]
        client._table = ModelTable(6, client._table.models)  # older than the engine's
        left.append(client.submit(_request(good), print))
        client._table = ModelTable(7, client._table.models)
        client.gate.refused(QueueFull("full", "m", "1", "forward", pace_s=0.1, drain_s=5.0))
        left.append(client.submit(_request(good), print))  # a closed gate: admit() decides
        client.gate = type(client.gate)()
        from service.shared.arena import ArenaFull

        held = []
        try:
            while True:  # a full arena: infer() answers 503
                held.append(link.arena.allocate(4096))
        except ArenaFull:
            pass
        left.append(client.submit(_request(good), print))
        for lease in held:
            lease.release()
        from service.shared.handshake import CONTROL

        CONTROL.pack_into(link.control, 0, 7, 1, 0)  # an engine not serving yet: a 503 to say
        left.append(client.submit(_request(good), print))
        CONTROL.pack_into(link.control, 0, 7, 1, 1)
        return left, sent, notes, client.submit(_request(good), print)

    left, sent, notes, taken = asyncio.run(main())
    assert left == [None] * 7 and notes == []
    assert len(sent) == 1 and taken is not None  # only the last, once all was well
