"""The engine's room for a request's outputs in a front's arena (service/engine/outputs.py):
windows the native host writes into, and what is left for the outputs it returned as arrays."""

import math
import os

import ethost
import numpy as np
import pytest

from service.engine.outputs import OutputRoom, place
from service.shared.arena import Region
from support.programs import export_image


@pytest.fixture
def region():
    fd = os.memfd_create("outputs-test")
    os.ftruncate(fd, 1 << 22)
    region = Region(fd, 1 << 22)
    yield region
    os.close(fd)


def test_windows_are_aligned_in_order_and_only_for_outputs_asked_for_that_fit(region):
    room = OutputRoom(region, 1000, 2000)
    found = room.destinations(["a", None, "b", "c", "d"], [100, 64, 10, math.inf, 5000])
    assert found[1] is None and found[3] is None and found[4] is None  # skipped, unknown, big
    assert room.offsets == {"a": 1024, "b": 1280}
    assert [w.ctypes.data - region.address for w in found[::2][:2]] == [1024, 1280]
    assert [w.nbytes for w in found[::2][:2]] == [100, 10]
    assert room.at == 1290
    # Asked again (a request sent on after the inline path declined it), it starts over.
    again = room.destinations(["a", None, None, None, None], [100, 64, 10, math.inf, 5000])
    assert room.offsets == {"a": 1024} and room.at == 1124 and again[0].nbytes == 100


def test_no_window_at_all_is_none(region):
    room = OutputRoom(region, 0, 100)
    assert room.destinations(["a", "b"], [200, 0]) is None
    assert room.offsets == {} and room.at == 0


def test_place_keeps_written_outputs_where_they_are_and_copies_the_rest_after(region):
    room = OutputRoom(region, 256, 1024)
    [window, _] = room.destinations(["y", None], [16, math.inf])
    window.view(np.float32)[:] = [1, 2, 3, 4]
    copied = np.arange(8, dtype=np.int32)
    too_big = np.zeros(2048, np.uint8)
    written = _Written((2, 2))
    placed = place(
        room,
        [("y", "FP32", written), ("z", "INT32", copied), ("w", "UINT8", too_big)],
    )
    assert placed[0] == ("y", "FP32", [2, 2], 256, None)
    assert placed[1] == ("z", "INT32", [8], 512, None)
    np.testing.assert_array_equal(region.array(512, np.int32, (8,)), copied)
    name, _, shape, _, inline = placed[2]
    assert name == "w" and shape == [2048] and inline == too_big.tobytes()
    np.testing.assert_array_equal(region.array(256, np.float32, (4,)), [1, 2, 3, 4])


def test_outputs_in_client_shared_memory_travel_without_bytes(region):
    room = OutputRoom(region, 0, 1024)
    placed = place(room, [("y", "FP32", np.ones(3, np.float32))], written={"y"})
    assert placed == [("y", "FP32", [3], -1, None)] and room.at == 0


@pytest.mark.slow
def test_the_native_host_writes_an_image_into_the_room(region, programs_dir):
    """The path of an image-sized request: one execute, its output already where the front
    answers from."""
    exported = export_image(programs_dir)
    method = ethost.Program(str(exported.pte), []).load_method("forward")
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224), dtype=np.float32)
    room = OutputRoom(region, 4096, x.nbytes + 256)
    most = [spec["nbytes"] for spec in method.meta["outputs"]]
    [written] = method.execute([x], room.destinations(["y"], most))
    [placed] = place(room, [("y", "FP32", written)])
    assert placed == ("y", "FP32", [1, 3, 224, 224], 4096, None)
    np.testing.assert_allclose(region.array(4096, np.float32, x.shape), x * 2 + 1, rtol=1e-6)


class _Written:
    """Stands for ethost.WrittenOutput: a shape and no bytes."""

    def __init__(self, shape):
        self.shape = shape
