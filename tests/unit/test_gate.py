"""The fronts' gate before a full queue (service/dataplane/scheduling/gate.py), on a clock the
test turns: what it refuses, what it lets through and when, whose turn a freed place is, and
when it opens again."""

import pickle

from service.dataplane.scheduling.gate import Gate, Refusal
from service.errors import Busy, QueueFull

PACE, DRAIN = 0.010, 0.080  # 8 queued, one leaving every 10 ms


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def full(pace=PACE, drain=DRAIN, method="forward") -> QueueFull:
    return QueueFull(
        "model 'm' ... queued (max_queue_size 8); retry later", "m", "1", method, pace, drain
    )


def closed_gate() -> tuple[Gate, Clock]:
    clock = Clock()
    gate = Gate(clock)
    gate.refused(full())
    return gate, clock


def test_an_open_gate_lets_every_request_through():
    gate = Gate(Clock())
    assert all(gate.admit("m", "1", "forward", "native") is None for _ in range(100))


def test_a_full_queue_is_refused_with_the_engines_message_and_hint_until_a_place_frees():
    gate, clock = closed_gate()
    refusal = gate.admit("m", "1", "forward", "native")
    assert refusal == Refusal(full().message, 1.0)
    error = refusal.error()
    assert type(error) is Busy and (error.message, error.retry_after_s) == (full().message, 1.0)
    clock.now += PACE * 0.9
    assert gate.admit("m", "1", "forward", "native") is not None
    clock.now += PACE * 0.2  # the first place has freed: one request, not two
    assert gate.admit("m", "1", "forward", "native") is None
    assert gate.admit("m", "1", "forward", "native") is not None


def test_one_request_is_let_through_per_place_freed():
    gate, clock = closed_gate()
    clock.now += 3.5 * PACE
    passed = [gate.admit("m", "1", "forward", "native") is None for _ in range(10)]
    assert passed == [True] * 3 + [False] * 7


def test_other_queues_are_not_gated():
    gate, _ = closed_gate()
    assert gate.admit("m", "1", "other", "native") is None
    assert gate.admit("m", "2", "forward", "native") is None
    assert gate.admit("n", "1", "forward", "native") is None


def test_the_gate_opens_once_the_queue_would_have_drained():
    gate, clock = closed_gate()
    clock.now += DRAIN * 1.01
    assert all(gate.admit("m", "1", "forward", "native") is None for _ in range(20))


def test_a_drained_refusal_no_longer_counts_though_nobody_asked_for_its_queue_again():
    """A long-lived server's native path stayed off for good after a flood on one model with a
    bounded queue (issue 36): the record outlived its queue's drain until that model was asked
    for again, and any_closed keeps every front's native path closed."""
    gate, clock = closed_gate()
    assert gate.any_closed
    clock.now += DRAIN * 0.9
    assert gate.any_closed
    clock.now += DRAIN * 0.2
    assert not gate.any_closed
    assert gate.admit("m", "1", "forward", "native") is None


def test_a_new_refusal_closes_it_again_with_the_new_pace():
    gate, clock = closed_gate()
    clock.now += 2.5 * PACE
    gate.refused(full(pace=0.020, drain=0.160))  # a place let through was refused: still full
    clock.now += 0.015
    assert gate.admit("m", "1", "forward", "native") is not None
    clock.now += 0.010
    assert gate.admit("m", "1", "forward", "native") is None


def test_before_anything_executed_there_is_no_pace_and_the_gate_stays_open():
    gate = Gate(Clock())
    gate.refused(full(pace=0.0))
    assert gate.admit("m", "1", "forward", "native") is None


def test_protocols_take_turns_at_the_freed_places():
    gate, clock = closed_gate()
    assert gate.admit("m", "1", "forward", "gRPC") is not None  # asked: it waits for a turn
    clock.now += 1.1 * PACE
    assert gate.admit("m", "1", "forward", "native") is None  # first place: nobody had one
    clock.now += PACE
    # The second place is gRPC's turn (never let through); native, just served, waits.
    assert gate.admit("m", "1", "forward", "native") is not None
    assert gate.admit("m", "1", "forward", "gRPC") is None
    clock.now += PACE
    assert gate.admit("m", "1", "forward", "gRPC") is not None  # native's turn now
    assert gate.admit("m", "1", "forward", "native") is None


def test_while_the_others_fill_the_queue_one_place_keeps_waiting_for_the_slow_protocol():
    gate, clock = closed_gate()
    gate.admit("m", "1", "forward", "gRPC")
    clock.now += 1.1 * PACE
    assert gate.admit("m", "1", "forward", "native") is None
    clock.now += 6 * PACE  # six more places: five for whoever asks, one kept for gRPC
    passed = [gate.admit("m", "1", "forward", "native") is None for _ in range(7)]
    assert passed == [True] * 5 + [False] * 2
    assert gate.admit("m", "1", "forward", "gRPC") is None


def test_a_protocol_that_stopped_asking_has_no_turn():
    gate, clock = closed_gate()
    gate.admit("m", "1", "forward", "gRPC")
    clock.now += 1.5  # longer than the retry hint (1 s): gRPC has gone quiet
    gate.refused(full())
    clock.now += 1.1 * PACE
    assert gate.admit("m", "1", "forward", "native") is None
    clock.now += PACE
    assert gate.admit("m", "1", "forward", "native") is None


def test_a_request_whose_method_is_not_read_yet_is_refused_only_when_every_method_is_full():
    clock = Clock()
    gate = Gate(clock)
    gate.refused(full(method="forward"))
    assert gate.refuses("m", "1", ["forward", "other"], "v2 JSON") is None  # other is open
    gate.refused(full(method="other"))
    refusal = gate.refuses("m", "1", ["forward", "other"], "v2 JSON")
    assert refusal == Refusal(full().message, 1.0)
    clock.now += 1.1 * PACE
    # A place has freed: the body is worth reading, and asking took no place.
    assert gate.refuses("m", "1", ["forward", "other"], "v2 JSON") is None
    assert gate.refuses("m", "1", ["forward", "other"], "v2 JSON") is None
    assert gate.admit("m", "1", "forward", "v2 JSON") is None


def test_a_queue_full_refusal_crosses_processes_whole():
    refusal = pickle.loads(pickle.dumps(full(pace=0.5, drain=3.2)))
    assert type(refusal) is QueueFull and isinstance(refusal, Busy)
    assert (refusal.model, refusal.version, refusal.method) == ("m", "1", "forward")
    assert (refusal.pace_s, refusal.drain_s, refusal.retry_after_s) == (0.5, 3.2, 3.2)
    assert refusal.message == full().message


def test_only_one_place_at_a_time_waits_for_a_turn():
    gate, clock = closed_gate()
    gate.admit("m", "1", "forward", "gRPC")
    clock.now += 1.1 * PACE
    assert gate.admit("m", "1", "forward", "native") is None
    clock.now += 2 * PACE  # two places free: the older waits for gRPC, the newer goes now
    assert gate.admit("m", "1", "forward", "native") is None
    assert gate.admit("m", "1", "forward", "native") is not None
    assert gate.admit("m", "1", "forward", "gRPC") is None
