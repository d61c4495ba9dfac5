"""The engine's native lane (runtime_ext/lane/) on the real host and a real program, driven as
the engine drives it: routes published from method instances, a front's link over a socketpair
and an arena in shared memory, requests written with the fronts' encoder (lane_frames)."""

import marshal
import os
import pickle
import socket
import struct
import time

import numpy as np
import pytest

from service.engine.lane_routes import LaneRoutes
from service.native_host import import_host
from service.shared import frames, lane_frames, messages
from service.shared.arena import Region
from service.shared.contract import GetTable
from support.program_fixtures import counter_program, linear_relu_program  # noqa: F401

_LENGTH = struct.Struct("<I")
ROUTE, GENERATION = 7, 3


@pytest.fixture
def lane(linear_relu_program):  # noqa: F811
    ethost = import_host()
    program = ethost.Program(str(linear_relu_program.pte), [])
    instances = program.instances("forward", 2)
    gate = ethost.LaneGate(instances)
    hub = ethost.LaneHub(100, 2)
    fd = os.memfd_create("lane-test")
    os.ftruncate(fd, 1 << 20)
    region = Region(fd, 1 << 20)
    front, engine = socket.socketpair()
    link = ethost.attach_front(hub, engine.detach(), 1, 4, region.address, region.size)
    yield ethost, hub, gate, instances, region, front, link
    link.stop()
    front.close()
    os.close(fd)


def _publish(hub, gate, generation=GENERATION, inline_ns=1e9):
    hub.publish(generation, inline_ns, [(ROUTE, "m", "2", "forward", gate, 0, None, True)])


def _send(sock, payload: bytes) -> None:
    sock.sendall(_LENGTH.pack(len(payload)) + payload)


def _receive(sock) -> bytes:
    sock.settimeout(5)
    (length,) = _LENGTH.unpack(sock.recv(4, socket.MSG_WAITALL))
    return sock.recv(length, socket.MSG_WAITALL)


def _request(region, x, generation=GENERATION, route=ROUTE, outputs=1):
    region.array(256, np.float32, x.shape)[...] = x
    return lane_frames.request(route, 9, generation, 4096, 4096, outputs, [(256, x.shape)])


def _drained(hub, count):
    items = []
    for _ in range(100):
        found, _ = hub.drain()
        items += found
        if len(items) >= count:
            return items
        time.sleep(0.02)
    return items


def test_the_lane_answers_with_what_the_method_computes_in_the_room(lane):
    ethost, hub, gate, instances, region, front, link = lane
    gate.observe(1000)  # a short execute seen: the method may run at once
    _publish(hub, gate)
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
    _send(front, _request(region, x))
    payload = _receive(front)
    assert payload[0] == lane_frames.DONE_TAG
    assert lane_frames.request_id_of_answer(payload) == 9
    [(index, offset, shape)] = lane_frames.read_answer(payload)
    assert index == 0 and offset == 4096 and offset % 256 == 0
    expected = instances[1].execute([x])[0]
    np.testing.assert_array_equal(region.array(offset, np.float32, shape), expected)
    [record] = hub.served()
    assert record[:6] == ("m", "2", "forward", 1, 4, 1)  # rows, the front, one request
    assert np.frombuffer(record[14]).size == 1 and record[15] == b""  # its total, no queue wait
    assert link.served == 1
    assert hub.served() == []  # drained


def test_a_longer_execute_runs_on_the_lanes_workers_with_the_same_answer(lane):
    ethost, hub, gate, instances, region, front, link = lane
    gate.observe(1000)
    _publish(hub, gate, inline_ns=0)  # every execute counts as long: a worker runs it
    x = np.linspace(-2, 2, 8, dtype=np.float32).reshape(2, 4)
    _send(front, _request(region, x))
    [(index, offset, shape)] = lane_frames.read_answer(_receive(front))
    expected = instances[1].execute([x])[0]
    np.testing.assert_array_equal(region.array(offset, np.float32, shape), expected)
    assert link.served == 1 and len(hub.served()) == 1


def test_what_the_lane_declines_reaches_python_unchanged(lane):
    ethost, hub, gate, instances, region, front, link = lane
    x = np.ones((2, 4), np.float32)
    _publish(hub, gate)
    slow = _request(region, x)  # nothing measured yet: not known to be short
    _send(front, slow)
    items = _drained(hub, 1)
    gate.observe(1000)
    stale = _request(region, x, generation=GENERATION - 1)
    unknown = _request(region, x, route=ROUTE + 1)
    marshalled = marshal.dumps((frames.CALL, 1, pickle.dumps(GetTable())))
    for payload in (stale, unknown, marshalled):
        _send(front, payload)
    items += _drained(hub, 3)
    assert [payload for _, payload, *_ in items] == [slow, stale, unknown, marshalled]
    assert {key for key, *_ in items} == {1}
    assert {failure for _, _, failure, *_ in items} == {None}
    assert not any(cancelled or deadline for *_, cancelled, deadline in items)
    assert link.served == 0 and hub.served() == []


def test_a_short_request_without_a_free_instance_waits_for_one_and_a_closed_method_is_pythons(lane):
    """Handed to Python, the request would queue for the same instances on the event loop, at a
    hundred times the cost, and keep the lane yielding to that queue under a burst."""
    ethost, hub, gate, instances, region, front, link = lane
    gate.observe(1000)  # short: run on the link thread when an instance is free
    _publish(hub, gate)
    x = np.ones((2, 4), np.float32)
    held = [gate.claim(), gate.claim()]  # Python runs both instances
    assert sorted(held) == [0, 1] and gate.claim() == -1
    _send(front, _request(region, x))
    for _ in range(100):
        if gate.waiters == 1:
            break
        time.sleep(0.01)
    assert gate.waiters == 1 and hub.drain()[0] == [] and link.served == 0
    for index in held:
        gate.release(index)  # the first goes to the lane's waiter
    [(index, offset, shape)] = lane_frames.read_answer(_receive(front))
    np.testing.assert_array_equal(
        region.array(offset, np.float32, shape), instances[0].execute([x])[0]
    )
    assert link.served == 1 and gate.waiters == 0
    gate.close()
    _send(front, _request(region, x))
    assert len(_drained(hub, 1)) == 1
    assert link.served == 1


def test_a_front_going_away_is_reported_once(lane):
    ethost, hub, gate, instances, region, front, link = lane
    front.close()
    assert _drained(hub, 1) == [(1, None, None, False, False)]


def test_a_declined_request_reads_back_as_the_message_it_stands_for(lane):
    ethost, hub, gate, instances, region, front, link = lane

    class Service:
        generation = GENERATION

        class settings:
            inline_execute_us = 100.0

        def __init__(self, gate):
            from service.dataplane.signature import signature_of

            self.signature = signature_of(instances[0].meta)
            self.gate = gate

        def lane_routes(self):
            return [(ROUTE, "m", "2", "forward", self.gate, 0, self.signature, True)]

    routes = LaneRoutes()
    routes.publish(hub, Service(gate))
    payload = lane_frames.request(ROUTE, 9, GENERATION, 4096, 512, 1, [(256, (2, 4))])
    message = routes.message(payload)
    assert type(message) is messages.Infer and message.kind == frames.INFER
    assert (message.request_id, message.model, message.version, message.method) == (
        9,
        "m",
        "2",
        "forward",
    )
    assert message.inputs == [("input_0", "FP32", (2, 4), 256)]
    assert message.outputs is None  # every output asked for
    assert (message.room_offset, message.room_size) == (4096, 512)
    assert message.checked_at == GENERATION
    # What reaches the engine's Python reads as the same record a front's Infer would.
    assert messages.read(marshal.loads(marshal.dumps(tuple(message)))) == message
    # A route that stops serving is still read (by name, checked again by the engine).
    Service.lane_routes = lambda self: []
    routes.publish(hub, Service(gate))
    assert routes.message(payload).model == "m"
    assert routes.message(lane_frames.request(99, 1, 1, 0, 0, 1, [])) is None
    assert routes.request_id(payload) == 9


@pytest.fixture
def counting(counter_program):  # noqa: F811
    """The lane over one instance of a program that counts its executes (programs.export_counter);
    `count()` executes it once more and answers how many executes it saw, that one included."""
    ethost = import_host()
    program = ethost.Program(str(counter_program.pte), [])
    [instance] = program.instances("forward", 1)
    gate = ethost.LaneGate([instance])
    hub = ethost.LaneHub(100, 2)
    fd = os.memfd_create("lane-test")
    os.ftruncate(fd, 1 << 20)
    region = Region(fd, 1 << 20)
    front, engine = socket.socketpair()
    link = ethost.attach_front(hub, engine.detach(), 1, 4, region.address, region.size)

    def count() -> int:
        return int(instance.execute([np.array([0], np.int64)], None, gate)[1][0])

    gate.observe(1000)
    yield hub, gate, region, front, count
    link.stop()
    front.close()
    os.close(fd)


def _ids(region, ids, room=4096):
    region.array(256, np.int64, (len(ids),))[...] = ids
    return lane_frames.request(ROUTE, 9, GENERATION, 4096, room, 3, [(256, (len(ids),))])


@pytest.mark.parametrize("inline_ns", [1e9, 0], ids=["inline", "workers"])
def test_a_request_that_ran_is_answered_from_its_execute_never_run_again(counting, inline_ns):
    hub, gate, region, front, count = counting
    _publish(hub, gate, inline_ns=inline_ns)
    before = count()
    _send(front, _ids(region, [1, 2]))
    assert lane_frames.request_id_of_answer(_receive(front)) == 9
    # An id past the table fails the execute after it counted: Python hears how it failed,
    # with the request, to answer it; the lane does not hand it over to be run again.
    failing = _ids(region, [9])
    _send(front, failing)
    [(key, payload, failure, cancelled, _)] = _drained(hub, 1)
    assert not cancelled
    assert payload == failing and type(failure).__name__ == "ExecuTorchError"
    assert failure.error_name == "InvalidArgument" and "9" in failure.context
    # A room too small for the outputs' upper bounds is declined before anything runs.
    small = _ids(region, [1], room=64)
    _send(front, small)
    assert _drained(hub, 1) == [(1, small, None, False, False)]
    assert count() - before == 2 + 1 + 1
