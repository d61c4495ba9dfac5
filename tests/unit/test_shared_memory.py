"""The engine's shared memory registry and bindings on real POSIX shared memory objects: keys,
sizes and windows checked before any byte is read, regions held while a request uses them,
released on unregister and at shutdown, and the references' trip through the control
messages."""

from __future__ import annotations

import asyncio
import marshal
import os
import uuid
from dataclasses import dataclass
from multiprocessing import shared_memory

import numpy as np
import pytest

from service import cuda
from service.dataplane.types import Tensor
from service.errors import Conflict, Forbidden, Invalid, NotFound
from service.shm import refs
from service.shm.binding import RequestShm
from service.shm.regions import SharedMemory
from service.shm.system import object_path


@dataclass(frozen=True)
class Settings:
    allow_client_shm: bool = True
    shm_max_regions: int = 3


@pytest.fixture
def objects():
    made = []

    def create(size: int) -> tuple[str, shared_memory.SharedMemory]:
        name = f"etrt_unit_{uuid.uuid4().hex[:10]}"
        block = shared_memory.SharedMemory(name, create=True, size=size)
        made.append(block)
        return "/" + name, block

    yield create
    for block in made:
        block.close()
        try:
            block.unlink()
        except FileNotFoundError:
            pass


def run(coroutine):
    return asyncio.run(coroutine)


def mappings_of(key: str) -> int:
    """How many mappings of the object this process holds (the test's own is one)."""
    with open("/proc/self/maps") as maps:
        return maps.read().count(f"/dev/shm/{key.lstrip('/')}")


@pytest.mark.parametrize("key", ["/../x", "", "/a\0b", "/" + "k" * 256, "/a/b", "/", "/.."])
def test_keys_that_are_not_posix_shm_names_are_refused_naming_the_region(key):
    with pytest.raises(Invalid) as caught:
        object_path("reg", key)
    assert "'reg'" in caught.value.message


def test_a_key_is_a_file_in_dev_shm_with_or_without_its_slash():
    assert object_path("r", "/abc") == object_path("r", "abc") == "/dev/shm/abc"


def test_a_regular_file_only_and_never_through_a_link(objects, tmp_path):
    key, _ = objects(4096)
    link = f"/dev/shm/etrt_unit_link_{uuid.uuid4().hex[:8]}"
    os.symlink(f"/dev/shm/{key[1:]}", link)
    try:
        memory = SharedMemory(Settings())
        with pytest.raises(Invalid) as caught:
            run(memory.shm_register_system("linked", "/" + os.path.basename(link), 0, 64))
        assert "'linked'" in caught.value.message
    finally:
        os.unlink(link)


def test_size_offset_and_count_are_checked_against_the_object(objects):
    key, _ = objects(8192)
    memory = SharedMemory(Settings())
    with pytest.raises(Invalid, match="past the end"):
        run(memory.shm_register_system("big", key, 0, 8193))
    with pytest.raises(Invalid, match="past the end"):
        run(memory.shm_register_system("far", key, 8000, 200))
    with pytest.raises(Invalid, match="positive"):
        run(memory.shm_register_system("empty", key, 0, 0))
    with pytest.raises(NotFound, match="'gone'"):
        run(memory.shm_register_system("gone", "/etrt_unit_none_" + uuid.uuid4().hex, 0, 1))
    for name in ("a", "b", "c"):
        run(memory.shm_register_system(name, key, 4096, 4096))
    with pytest.raises(Conflict):
        run(memory.shm_register_system("a", key, 0, 64))
    with pytest.raises(Invalid, match="at most 3"):
        run(memory.shm_register_system("d", key, 0, 64))
    assert [r["name"] for r in run(memory.shm_status("system"))] == ["a", "b", "c"]
    memory.close()
    assert run(memory.shm_status("system")) == []


def test_off_unless_allowed_naming_the_flag(objects):
    key, _ = objects(4096)
    memory = SharedMemory(Settings(allow_client_shm=False))
    for register in (
        lambda: memory.shm_register_system("r", key, 0, 64),
        lambda: memory.shm_register_cuda("r", b"\0" * 64, 0, 64),
    ):
        with pytest.raises(Forbidden, match="--allow-client-shm"):
            run(register())


@pytest.mark.skipif(cuda.device_count() > 0, reason="this host has CUDA: the GPU tests cover it")
def test_cuda_registration_without_cuda_says_why():
    memory = SharedMemory(Settings())
    with pytest.raises(Invalid) as caught:
        run(memory.shm_register_cuda("gpu", b"\0" * 64, 0, 64))
    assert "'gpu'" in caught.value.message and "CUDA" in caught.value.message
    assert cuda.unavailable_reason() in caught.value.message


def _shared(inputs=(), outputs=()):
    return refs.SharedTensors(
        {n: refs.ShmRef(r, s, o) for n, r, s, o in inputs},
        {n: refs.ShmRef(r, s, o) for n, r, s, o in outputs},
    )


def test_inputs_are_views_at_their_address_and_misaligned_ones_copies(objects):
    key, block = objects(8192)
    data = np.arange(16, dtype=np.float32)
    block.buf[256 : 256 + 64] = data.tobytes()
    block.buf[16 : 16 + 64] = data.tobytes()
    memory = SharedMemory(Settings())
    run(memory.shm_register_system("r", key, 0, 8192))
    use = RequestShm(memory, _shared([("x", "r", 64, 256), ("y", "r", 64, 16)]))
    x = use.input("x", "FP32", [4, 4], ("r", 64, 256))
    region = memory.lookup("r")
    assert x.array.ctypes.data == region.address + 256  # bound where it is
    np.testing.assert_array_equal(x.array.reshape(-1), data)
    y = use.input("y", "FP32", [4, 4], ("r", 64, 16))
    assert y.array.ctypes.data % 256 == 0 and memory.copies == {("system", "misaligned"): 1}
    np.testing.assert_array_equal(y.array.reshape(-1), data)
    use.close()


def test_a_region_in_use_cannot_be_unregistered_until_the_request_is_done(objects):
    key, _ = objects(4096)
    memory = SharedMemory(Settings())
    mine = mappings_of(key)
    run(memory.shm_register_system("r", key, 0, 4096))
    assert mappings_of(key) == mine + 1
    use = RequestShm(memory, _shared([("x", "r", 64, 0)]))
    with pytest.raises(Conflict, match="in use by 1 request"):
        run(memory.shm_unregister("system", "r"))
    with pytest.raises(Conflict):
        run(memory.shm_unregister("system", None))
    use.close()
    run(memory.shm_unregister("system", "r"))
    assert mappings_of(key) == mine  # released: unmapped


def test_references_are_checked_before_any_byte_is_read(objects):
    key, _ = objects(4096)
    memory = SharedMemory(Settings())
    run(memory.shm_register_system("r", key, 1024, 2048))
    with pytest.raises(Invalid, match="'nowhere'"):
        RequestShm(memory, _shared([("x", "nowhere", 64, 0)]))
    with pytest.raises(Invalid, match="past the end of region 'r'"):
        RequestShm(memory, _shared([("x", "r", 64, 2000)]))
    with pytest.raises(Invalid, match="past the end of region 'r'"):
        RequestShm(memory, _shared([("x", "r", 64, 0)], [("y", "r", 4096, 0)]))
    assert memory.lookup("r").in_use == 0  # nothing held by refused requests
    use = RequestShm(memory, _shared([("x", "r", 60, 0)]))
    with pytest.raises(Invalid, match="does not match"):
        use.input("x", "FP32", [4, 4], ("r", 60, 0))
    use.close()


def test_an_unlinked_object_stays_readable_and_a_shrunk_one_is_refused(objects):
    key, block = objects(8192)
    block.buf[:4] = np.float32(3.5).tobytes()
    memory = SharedMemory(Settings())
    run(memory.shm_register_system("r", key, 0, 8192))
    block.unlink()
    use = RequestShm(memory, _shared([("x", "r", 4, 0)]))
    assert use.input("x", "FP32", [1], ("r", 4, 0)).array[0] == 3.5
    use.close()
    run(memory.shm_register_system("s", objects(8192)[0], 0, 8192))
    os.truncate(f"/dev/shm/{memory.lookup('s').key[1:]}", 100)
    use = RequestShm(memory, _shared([("x", "s", 4, 0)]))
    with pytest.raises(Invalid, match="shrank"):
        use.input("x", "FP32", [1], ("s", 4, 0))
    use.close()
    memory.close()


def test_outputs_are_written_into_their_region(objects):
    key, block = objects(4096)
    memory = SharedMemory(Settings())
    run(memory.shm_register_system("r", key, 0, 4096))
    use = RequestShm(memory, _shared(outputs=[("y", "r", 64, 512), ("small", "r", 8, 0)]))
    values = np.arange(16, dtype=np.float32).reshape(4, 4)
    written = use.write_outputs([Tensor("y", "FP32", values), Tensor("z", "FP32", values)])
    assert written == {"y"}
    np.testing.assert_array_equal(np.frombuffer(block.buf[512:576], np.float32), values.ravel())
    with pytest.raises(Invalid, match="needs 64 bytes"):
        use.write_outputs([Tensor("small", "FP32", values)])
    use.close()
    memory.close()


def test_references_parse_and_cross_the_control_messages():
    shared = refs.SharedTensors()
    shared.inputs["x"] = refs.parse("x", {refs.REGION: "r", refs.BYTE_SIZE: 64, refs.OFFSET: 256})
    shared.outputs["y"] = refs.parse("y", {refs.REGION: "r", refs.BYTE_SIZE: 8}, "output")
    assert refs.parse("x", {"binary_data_size": 4}) is None
    wire = refs.to_wire(shared)
    assert refs.from_wire(marshal.loads(marshal.dumps(wire))) == shared
    for bad in ({refs.REGION: ""}, {refs.REGION: "r", refs.BYTE_SIZE: -1}, {refs.BYTE_SIZE: 4}):
        with pytest.raises(Invalid):
            refs.parse("x", bad)
    placeholder = refs.placeholder("FP32", [1, 3, 224, 224])
    assert placeholder.shape == (1, 3, 224, 224) and placeholder.strides == (0, 0, 0, 0)


class DeviceRegion:
    """A CUDA region as the registry holds one, over the host-memory stand-in for the GPU
    (opening a real IPC handle needs a GPU: tests/gpu/test_cuda_shm_cuda.py does)."""

    kind = "cuda"

    def __init__(self, testing, name: str, byte_size: int):
        self.testing, self.name, self.byte_size = testing, name, byte_size
        self.address, self.device_id, self.in_use = testing.device_alloc(byte_size), 0, 0

    def check_intact(self) -> None:
        pass

    def close(self) -> None:
        self.testing.device_free(self.address)


def test_cuda_inputs_reach_the_host_as_device_addresses_bound_without_a_copy(programs_dir):
    """The engine copies nothing: the host binds the region's address for a program that
    leaves its inputs unplanned, and /metrics counts it bound, not copied."""
    import ethost

    from service.shm.device_array import DeviceArray
    from service.shm.metrics import ShmMetrics
    from support.device_planned_cases import T, load, trt
    from support.test_engine_provider import TestEngineProvider
    from support.trt_programs import export_trt_program

    T.use_host_memory(reads_pageable_host=False)
    trt.set_engine_provider(TestEngineProvider())
    program = export_trt_program(programs_dir, "add", 256, planned_inputs=False)
    memory = SharedMemory(Settings())
    region = DeviceRegion(T, "gpu", 4096)
    memory.regions["cuda"]["gpu"] = region
    x, y = program.example_inputs()
    T.device_write(region.address + 256, x.tobytes())
    T.device_write(region.address + 1024, y.tobytes())
    use = RequestShm(memory, _shared([("a", "gpu", 60, 256), ("b", "gpu", 60, 1024)]))

    def sample(name, labels):
        [family] = [f for f in ShmMetrics(memory).families() if f.name == name]
        return family.samples.get(labels, 0)

    try:
        a = use.input("a", "FP32", [3, 5], ("gpu", 60, 256))
        b = use.input("b", "FP32", [3, 5], ("gpu", 60, 1024))
        assert isinstance(a.array, DeviceArray) and a.array.address == region.address + 256
        assert a.array.shape == (3, 5) and a.array.dtype == np.float32
        bound = sample("etrt_shm_bound_total", ("cuda",))
        to_host = sample("etrt_shm_copies_total", ("cuda", "to_host"))
        [out] = load(program).execute([a.array, b.array])
        np.testing.assert_allclose(out, x + y, rtol=1e-6)
        assert sample("etrt_shm_bound_total", ("cuda",)) == bound + 2
        assert sample("etrt_shm_copies_total", ("cuda", "to_host")) == to_host
        assert memory.copies == {} and ethost.device_input_counts()["bound"] >= 2
    finally:
        use.close()
        region.close()
        trt.set_engine_provider(None)
