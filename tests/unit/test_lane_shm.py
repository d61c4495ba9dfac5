"""Lane requests with tensors in a client's system shared memory region, on the real host and a
real program: the region mapped as the engine maps it (service/shm/system.py) and handed to the
lane (LaneHub.add_shm_region), the request written with the fronts' encoder (lane_frames), the
answer read as the front reads it; what the lane leaves to Python reads back as the message a
front would have sent, with its references, so Python judges and words every refusal. An output
whose window is below its upper bound (a dynamic one) is copied into it when it fits; one that
does not fit ran, and comes back failed with the values Python words its refusal from."""

import os
import socket
import struct
import time
import uuid

import numpy as np
import pytest

from service.engine.lane_routes import LaneRoutes
from service.native_host import import_host
from service.shared import lane_frames
from service.shared.arena import Region
from service.shm.binding import window_refusal
from service.shm.refs import ShmRef
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
    assert len(hub.served()) == 2


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
    assert [payload for _, payload, _, _ in items] == declined
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
    first = len(hub.served())
    payload = lane_frames.request(ROUTE, 10, GENERATION, 4096, 4096, 1, [(0, (3, 4))], [
        (0, False, "r", 0, 48), (0, True, "r", OUT_AT, 24)])  # fmt: skip
    front.sendall(_LENGTH.pack(len(payload)) + payload)
    [(_, handed, failure, cancelled)] = _drained(hub, 1)
    assert handed == payload and not cancelled
    assert type(failure).__name__ == "OutputWindowError"
    assert (failure.index, failure.nbytes, failure.shrunk_to) == (0, 36, None)
    assert (client.window(OUT_AT + 24, 40) == 0x11).all()
    # Executed once, counted as served (Python's ledger counts an execute whose output it
    # then refuses), its input as bound, not the request.
    assert first == 1 and len(hub.served()) == 1
    assert hub.shm_served == (1, 2) and hub.shm_in_flight("r") == 0
    refusal = window_refusal(failure, "output_0", ShmRef("r", 24, OUT_AT))
    assert str(refusal) == (
        "output 'output_0' needs 36 bytes, more than its shared_memory_byte_size 24 in region 'r'"
    )
