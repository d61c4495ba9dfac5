"""gRPC ModelInfer on the fronts' two paths held together by generated messages (issue 36's
differential rule, for runtime_ext/front/grpc_infer.h): every message the native path takes,
the servicer (tests/support/front_reference.py python_take_grpc: parse_infer, ModelInfer's
request, the binding, the lane plan) takes too, with the same tensors, the same outputs asked
for; and every answer the native path writes for an engine's answer is the bytes the servicer
writes for it (_infer_response), whether the lane answered or the engine's Python placed the
outputs. What the native path declines is the servicer's by design and needs no comparison.

Seeded as tests/unit/test_front_differential.py is: ETRT_DIFF_SEED reproduces a run and
ETRT_DIFF_CASES scales it (20,000 by default)."""

from __future__ import annotations

import os
import random
import time

import etrt_front
import numpy as np
from test_front_differential import _same_request, engine_answer

from service.front.protocols.v2_grpc import messages
from service.shared.arena import Arena
from support.front_grpc_cases import NATIVE_DECLINES, grpc_case
from support.front_reference import (
    GENERATION,
    Refused,
    entries,
    python_answer_grpc,
    python_take_grpc,
)


def _lane(arena: Arena, control: np.ndarray):
    native = etrt_front.FrontLane(
        arena.slots, arena.region.address, control.ctypes.data, 1 << 16, 1 << 16, 1 << 16, None
    )
    native.publish(GENERATION, entries())
    return native


def _answer(arena: Arena, native, request_id: int, message: bytes, taken, rng) -> list[str]:
    """Writes an engine's answer into the request's room; how the two answers differ."""
    answered = engine_answer(arena, message, taken, rng)
    if answered is None:
        native.release(request_id)
        return []  # a room the engine would not fill so (the lane declines it)
    arrays, payload, by_python = answered
    if rng.random() < 0.3:  # outputs the engine's Python placed (a request the lane declined)
        written = native.answer_grpc(request_id, taken.entry.version, by_python)
    else:
        written = native.answer_lane_grpc(request_id, payload)
    in_region = any(output for _, output, *_ in taken.refs)
    expected = python_answer_grpc(taken, arrays)
    if written is None:
        return ["the native path wrote no answer"]
    if written != expected and not (in_region and _same_message(written, expected)):
        return [f"answer differs:\n{written[:400]!r}\n{expected[:400]!r}"]
    return []


def _same_message(written: bytes, expected: bytes) -> bool:
    """The same ModelInferResponse: an output's parameters are a map, whose entries protobuf
    may write in any order."""
    read = messages.ModelInferResponse.FromString
    return read(written) == read(expected)


def test_what_the_native_path_takes_from_grpc_the_servicer_takes_and_answers_alike():
    seed = int(os.environ.get("ETRT_DIFF_SEED") or random.SystemRandom().randrange(2**32))
    cases = int(os.environ.get("ETRT_DIFF_CASES") or 20_000)
    print(f"gRPC differential: ETRT_DIFF_SEED={seed} ETRT_DIFF_CASES={cases}")
    rng = random.Random(seed)
    arena = Arena(16 << 20)
    control = np.array([GENERATION, 1, 1], np.uint64)  # generation, ready, serving
    native = _lane(arena, control)
    started, taken_count, by_python, failures, missed = time.monotonic(), 0, 0, [], []
    in_regions = 0
    for number in range(cases):
        wire, label = grpc_case(rng)
        got = native.take_grpc(wire)
        try:
            taken = python_take_grpc(wire)
        except Refused as exc:
            if got is not None:
                native.release(got[0])
                failures.append((number, label, f"the servicer refuses it: {exc}", wire))
            continue
        by_python += 1
        if got is None:
            if not any(decline in label for decline in NATIVE_DECLINES):
                missed.append((number, label, wire))
            continue
        taken_count += 1
        request_id, message = got
        in_regions += bool(taken.refs)
        problems = _same_request(arena, message, taken)
        if problems:
            native.release(request_id)
        else:
            problems = _answer(arena, native, request_id, message, taken, rng)
        if problems:
            failures.append((number, label, "; ".join(problems), wire))
    elapsed = time.monotonic() - started
    print(f"{cases} cases, {by_python} taken by the servicer, {taken_count} natively "
          f"({in_regions} with tensors in shared memory regions), {len(failures)} disagreements, "
          f"{elapsed:.1f} s")  # fmt: skip
    report = "\n".join(
        f"case {n} [{label}]: {why}\n  {wire[:300]!r}" for n, label, why, wire in failures[:8]
    )
    assert not failures, f"seed {seed}: {len(failures)} disagreements\n{report}"
    assert arena.in_use == 0 and native.pending == 0
    # The native path takes every lane request the servicer would send but those it leaves to
    # the servicer by design; and a fair share of all reach the comparison.
    assert not missed, f"seed {seed}: declined natively: {missed[:4]}"
    assert taken_count >= cases // 3, (taken_count, cases)
    assert in_regions >= cases // 40, (in_regions, cases)
