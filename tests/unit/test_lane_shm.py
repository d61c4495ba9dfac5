"""Lane requests with tensors in a client's system shared memory region, on the real host and a
real program: the region mapped as the engine maps it (service/shm/system.py) and handed to the
lane (LaneHub.add_shm_region), the request written with the fronts' encoder (lane_frames), the
answer read as the front reads it; what the lane leaves to Python reads back as the message a
front would have sent, with its references, so Python judges and words every refusal. An output
whose window is below its upper bound (a dynamic one) is copied into it when it fits; one that
does not fit ran, and comes back failed with the values Python words its refusal from."""

import asyncio
import os
import socket
import struct
import time
import uuid
from types import SimpleNamespace

import numpy as np
import pytest

from service.engine.lane_routes import LaneRoutes
from service.errors import Conflict
from service.native_host import import_host
from service.shared import lane_frames
from service.shared.arena import Region
from service.shm.binding import window_refusal
from service.shm.refs import ShmRef
from service.shm.regions import SharedMemory
from service.shm.system import SHM_DIR, SystemRegion
from support.program_fixtures import dynamic_batch_program, linear_relu_program  # noqa: F401

_LENGTH = struct.Struct("<I")
ROUTE, GENERATION = 7, 3
NBYTES, OUT_AT = 32, 256  # the [2, 4] float input at 0 in the region, its [2, 3] output at 256


@pytest.fixture
def lane(linear_relu_program):  # noqa: F811
    yield from _lane(linear_relu_program)


@pytest.fixture
def dynamic_lane(dynamic_batch_program):  # noqa: F811
    """[batch, 4] -> [batch, 3], batch up to 16: the output's bound is 16 rows."""
    yield from _lane(dynamic_batch_program)


def _lane(exported):
    ethost = import_host()
    program = ethost.Program(str(exported.pte), [])
    instances = program.instances("forward", 2)
    gate = ethost.LaneGate(instances)
    gate.observe(1000)  # a short execute seen: the method may run at once
    hub = ethost.LaneHub(100, 2)
    hub.publish(GENERATION, 1e9, [(ROUTE, "m", "2", "forward", gate, 0, None, True)])
    fd = os.memfd_create("lane-shm-test")
    os.ftruncate(fd, 1 << 20)
    arena = Region(fd, 1 << 20)
    key = f"etrt_lane_shm_{uuid.uuid4().hex[:8]}"
    with open(os.path.join(SHM_DIR, key), "wb") as made:
        made.truncate(4096)
    client = SystemRegion("r", "/" + key, 0, 4096)
    hub.add_shm_region("r", client.address, client.byte_size, client.fd, 4096)
    front, engine = socket.socketpair()
    link = ethost.attach_front(hub, engine.detach(), 1, 4, arena.address, arena.size)
    yield hub, gate, instances, arena, client, front
    link.stop()
    front.close()
    assert hub.remove_shm_regions(["r"]) == ("", 0)
    client.close()
    os.unlink(os.path.join(SHM_DIR, key))
    os.close(fd)


def _exchange(sock, payload: bytes) -> bytes:
    sock.sendall(_LENGTH.pack(len(payload)) + payload)
    sock.settimeout(5)
    (length,) = _LENGTH.unpack(sock.recv(4, socket.MSG_WAITALL))
    return sock.recv(length, socket.MSG_WAITALL)


def _request(refs, input_offset=0):
    return lane_frames.request(ROUTE, 9, GENERATION, 4096, 4096, 1, [(input_offset, (2, 4))], refs)


def _drained(hub, count):
    items = []
    for _ in range(100):
        items += hub.drain()[0]
        if len(items) >= count:
            return items
        time.sleep(0.02)
    return items


def test_tensors_in_a_region_are_read_and_written_there_by_the_lane(lane):
    hub, gate, instances, arena, client, front = lane
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
    client.window(0, NBYTES).view(np.float32)[...] = x.reshape(-1)
    refs = [(0, False, "r", 0, NBYTES), (0, True, "r", OUT_AT, 64)]
    [(index, offset, shape)] = lane_frames.read_answer(_exchange(front, _request(refs)))
    assert (index, offset, tuple(shape)) == (0, lane_frames.IN_REGION, (2, 3))
    expected = instances[1].execute([x])[0]
    written = client.window(OUT_AT, 24).view(np.float32).reshape(2, 3)
    np.testing.assert_array_equal(written, expected)
    assert hub.shm_served == (1, 2)
    # The input in the region, the output in the front's room: the same answer.
    [(index, offset, shape)] = lane_frames.read_answer(_exchange(front, _request(refs[:1])))
    np.testing.assert_array_equal(arena.array(offset, np.float32, tuple(shape)), expected)
    assert hub.shm_served == (2, 3) and hub.shm_in_flight("r") == 0
    assert sum(group[5] for group in hub.served()) == 2  # requests, summed per route


def test_what_the_lane_leaves_to_python_reads_back_with_its_references(lane):
    hub, gate, instances, arena, client, front = lane
    routes = LaneRoutes()

    class Service:
        generation = GENERATION

        class settings:
            inline_execute_us = 100.0

        def lane_routes(self):
            from service.dataplane.signature import signature_of

            signature = signature_of(instances[0].meta)
            return [(ROUTE, "m", "2", "forward", gate, 0, signature, True)]

    routes.publish(hub, Service())
    declined = [
        _request([(0, False, "nowhere", 0, NBYTES)]),  # a region the lane does not have
        _request([(0, False, "r", 8, NBYTES)]),  # off the 256-byte boundary: Python copies it
        _request([(0, False, "r", 0, NBYTES - 4), (0, True, "r", OUT_AT, 8)]),  # input's bytes
    ]
    for payload in declined:
        front.sendall(_LENGTH.pack(len(payload)) + payload)
    items = _drained(hub, len(declined))
    assert [payload for _, payload, *_ in items] == declined
    assert hub.shm_served == (0, 0) and hub.shm_in_flight("r") == 0
    message = routes.message(declined[2])
    assert message.inputs == [("input_0", "FP32", (2, 4), ("r", NBYTES - 4, 0))]
    assert message.shared_memory == (
        (("input_0", "r", NBYTES - 4, 0),),
        ((routes._routes[ROUTE].outputs[0], "r", 8, OUT_AT),),
    )
    assert routes.message(_request([])).shared_memory is None


def test_a_region_held_by_a_waiting_lane_request_is_not_removed(lane):
    hub, gate, instances, arena, client, front = lane
    claimed = [gate.claim(), gate.claim()]  # every instance busy: the request waits for one
    assert -1 not in claimed
    hub.publish(GENERATION, 0.0, [(ROUTE, "m", "2", "forward", gate, 0, None, True)])
    refs = [(0, False, "r", 0, NBYTES), (0, True, "r", OUT_AT, 64)]
    payload = _request(refs)
    front.sendall(_LENGTH.pack(len(payload)) + payload)
    for _ in range(100):
        if gate.waiters:
            break
        time.sleep(0.01)
    assert hub.shm_in_flight("r") == 1
    assert hub.remove_shm_regions(["r"]) == ("r", 1)  # refused: Python answers 409
    gate.release(claimed[0])
    front.settimeout(5)
    (length,) = _LENGTH.unpack(front.recv(4, socket.MSG_WAITALL))
    answer = front.recv(length, socket.MSG_WAITALL)
    assert lane_frames.read_answer(answer)[0][1] == lane_frames.IN_REGION
    gate.release(claimed[1])
    assert hub.shm_in_flight("r") == 0


def test_an_output_below_its_bound_is_copied_into_its_window_or_fails_once_it_ran(dynamic_lane):
    hub, gate, instances, arena, client, front = dynamic_lane
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    client.window(0, 48).view(np.float32)[...] = x.reshape(-1)
    client.window(OUT_AT, 64)[...] = 0x11
    # Two rows: 24 bytes into a window of 24, far below the output's bound of 16 rows.
    payload = lane_frames.request(ROUTE, 9, GENERATION, 4096, 4096, 1, [(0, (2, 4))], [
        (0, False, "r", 0, NBYTES), (0, True, "r", OUT_AT, 24)])  # fmt: skip
    [(index, offset, shape)] = lane_frames.read_answer(_exchange(front, payload))
    assert (index, offset, tuple(shape)) == (0, lane_frames.IN_REGION, (2, 3))
    expected = instances[1].execute([x[:2]])[0]
    np.testing.assert_array_equal(client.window(OUT_AT, 24).view(np.float32), expected.ravel())
    assert (client.window(OUT_AT + 24, 40) == 0x11).all()  # nothing past the window
    assert hub.shm_served == (1, 1)  # the input bound, the output copied (as Python counts)
    # Three rows (36 bytes) into the same window: it ran, so it is Failed, not declined.
    first = sum(group[5] for group in hub.served())
    payload = lane_frames.request(ROUTE, 10, GENERATION, 4096, 4096, 1, [(0, (3, 4))], [
        (0, False, "r", 0, 48), (0, True, "r", OUT_AT, 24)])  # fmt: skip
    front.sendall(_LENGTH.pack(len(payload)) + payload)
    [(_, handed, failure, cancelled, _)] = _drained(hub, 1)
    assert handed == payload and not cancelled
    assert type(failure).__name__ == "OutputWindowError"
    assert (failure.index, failure.nbytes, failure.shrunk_to) == (0, 36, None)
    assert (client.window(OUT_AT + 24, 40) == 0x11).all()
    # Executed once, counted as served (Python's ledger counts an execute whose output it
    # then refuses), its input as bound, not the request.
    assert first == 1 and sum(group[5] for group in hub.served()) == 1
    assert hub.shm_served == (1, 2) and hub.shm_in_flight("r") == 0
    refusal = window_refusal(failure, "output_0", ShmRef("r", 24, OUT_AT))
    assert str(refusal) == (
        "output 'output_0' needs 36 bytes, more than its shared_memory_byte_size 24 in region 'r'"
    )


def test_tensors_in_a_cuda_region_are_served_by_the_lane(dynamic_batch_program):  # noqa: F811
    """A CUDA region (over the host-memory stand-in for device memory): the input goes to the
    host as its device address, an output whose window takes its bound is the host's to write,
    a smaller window gets the output copied in from the host by the lane (counted as Python's
    from_host copy), and one that outgrows its window fails as a system one does."""
    from support.trt_host import load_tensorrt_backend

    testing = load_tensorrt_backend().testing
    testing.use_host_memory(reads_pageable_host=False)
    ethost = import_host()
    instances = ethost.Program(str(dynamic_batch_program.pte), []).instances("forward", 2)
    gate = ethost.LaneGate(instances)
    gate.observe(1000)
    hub = ethost.LaneHub(100, 2)
    hub.publish(GENERATION, 1e9, [(ROUTE, "m", "2", "forward", gate, 0, None, True)])
    fd = os.memfd_create("lane-cuda-test")
    os.ftruncate(fd, 1 << 20)
    arena = Region(fd, 1 << 20)
    address = testing.device_alloc(4096)
    assert hub.add_shm_region("g", address, 4096, -1, 0, 0)
    front, engine = socket.socketpair()
    link = ethost.attach_front(hub, engine.detach(), 1, 4, arena.address, arena.size)
    try:
        x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
        testing.device_write(address, x.tobytes())
        expected = instances[1].execute([x[:2]])[0]

        def request(rows, window):
            refs = [(0, False, "g", 0, rows * 16), (0, True, "g", OUT_AT, window)]
            return lane_frames.request(ROUTE, 9, GENERATION, 4096, 4096, 1, [(0, (rows, 4))], refs)

        def output(nbytes):
            return np.frombuffer(testing.device_read(address + OUT_AT, nbytes), np.float32)

        inputs, outputs = ethost.device_input_counts(), ethost.device_output_counts()
        [(_, offset, shape)] = lane_frames.read_answer(_exchange(front, request(2, 256)))
        assert (offset, tuple(shape)) == (lane_frames.IN_REGION, (2, 3))
        np.testing.assert_array_equal(output(24), expected.ravel())
        after_in, after_out = ethost.device_input_counts(), ethost.device_output_counts()
        assert sum(after_in.values()) == sum(inputs.values()) + 1  # the host's, as Python's
        assert sum(after_out.values()) == sum(outputs.values()) + 1
        assert hub.shm_served == (1, 0) and hub.shm_to_device == 0
        testing.device_write(address + OUT_AT, bytes(64))
        # A window of the two rows, below the bound of 16: copied in by the lane.
        [(_, offset, shape)] = lane_frames.read_answer(_exchange(front, request(2, 24)))
        np.testing.assert_array_equal(output(24), expected.ravel())
        assert not output(64)[6:].any()  # nothing past the window
        assert hub.shm_served == (2, 0) and hub.shm_to_device == 1
        payload = request(3, 24)
        front.sendall(_LENGTH.pack(len(payload)) + payload)
        [(_, handed, failure, *_)] = _drained(hub, 1)
        assert handed == payload and type(failure).__name__ == "OutputWindowError"
        assert (failure.nbytes, failure.shrunk_to) == (36, None)
        assert hub.shm_to_device == 1 and hub.shm_in_flight("g", True) == 0
        # Unregistering it while a lane request holds it (waiting for an instance): 409.
        memory = SharedMemory(SimpleNamespace(allow_client_shm=True, shm_max_regions=4))
        memory.lane = hub
        closed = []
        memory.regions["cuda"]["g"] = SimpleNamespace(in_use=0, close=lambda: closed.append(1))
        claimed = [gate.claim(), gate.claim()]
        hub.publish(GENERATION, 0.0, [(ROUTE, "m", "2", "forward", gate, 0, None, True)])
        payload = request(2, 256)
        front.sendall(_LENGTH.pack(len(payload)) + payload)
        while not gate.waiters:
            time.sleep(0.01)
        with pytest.raises(Conflict, match="in use by 1 request"):
            asyncio.run(memory.shm_unregister("cuda", "g"))
        gate.release(claimed[0])
        front.settimeout(5)
        (length,) = _LENGTH.unpack(front.recv(4, socket.MSG_WAITALL))
        front.recv(length, socket.MSG_WAITALL)
        gate.release(claimed[1])
        asyncio.run(memory.shm_unregister("cuda", "g"))
        assert closed == [1] and hub.shm_in_flight("g", True) == 0
    finally:
        link.stop()
        front.close()
        assert hub.remove_shm_regions(["g"], True) == ("", 0)
        testing.device_free(address)
        os.close(fd)
