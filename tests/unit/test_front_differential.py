"""The fronts' native path (runtime_ext/front/, module etrt_front) held to the Python path by
generated requests (issue 36, item 4): every request the native path takes, the Python path
(tests/support/front_reference.py: httptools, the fast routes, the token policy, the codecs, the
binding) takes too, with the same tensors (bytes, dtypes, shapes), the same outputs asked for,
the same request length and keep-alive; and every answer the native path writes for an engine's
answer is the bytes the Python path writes for it, also when it writes them to the connection's
socket itself (a socket pair with a small buffer: what it took, then the rest it handed back).
What the native path declines is the Python path's by design and needs no comparison.

Seeded: the seed is printed (pytest -s, and in any failure); ETRT_DIFF_SEED=<seed> reproduces a
run and ETRT_DIFF_CASES=<n> scales it (100,000 by default: 15 s on an idle 2-core machine,
up to 90 s on a busy one)."""

from __future__ import annotations

import json
import os
import random
import re
import socket
import struct
import time
from functools import cache

import etrt_front
import numpy as np
import pytest

from service.dtypes import carrier_of
from service.front.protocols.bodies import NATIVE_BODY
from service.shared import lane_frames
from service.shared.arena import Arena, align_up
from support.front_cases import answer_array, case
from support.front_reference import (
    GENERATION,
    HEADERS,
    Limits,
    Refused,
    entries,
    python_answer,
    python_take,
)

TOKEN = "s3cret"
# A JSON limit below the binary one, so both limits and their order are crossed.
LIMITS = Limits(native_body=NATIVE_BODY // 8, v2_body=NATIVE_BODY // 4, json=NATIVE_BODY // 16)
# A v2 binary body may be longer (the native path writes it into its slot whether it arrived in
# one read or in many; the Python path's own limit is the server's max_infer_bytes).
STREAMED = NATIVE_BODY // 2
PYTHON_LIMITS = Limits(LIMITS.native_body, STREAMED, LIMITS.json)
_DONE = struct.Struct("<BBHIQ")
_OUTPUT = struct.Struct("<IIQ")


def _lanes(arena: Arena, control: np.ndarray) -> dict:
    found = {}
    for token in (None, TOKEN):
        native = etrt_front.FrontLane(
            arena.slots,
            arena.region.address,
            control.ctypes.data,
            LIMITS.native_body,
            LIMITS.v2_body,
            LIMITS.json,
            token,
            STREAMED,
        )
        native.publish(GENERATION, entries())
        found[token] = native
    return found


def _same_request(arena: Arena, message: bytes, taken) -> list[str]:
    """How the lane message differs from what the Python path would send (nothing: [])."""
    route, _, generation, _, _, mask, inputs, refs = lane_frames.read_request(message)
    found = []
    if refs != taken.refs:
        found.append(f"shared memory references {refs}, python {taken.refs}")
    in_region = {tensor for tensor, output, *_ in taken.refs if not output}
    if (route, generation) != (taken.route, GENERATION):
        found.append(f"route {route} generation {generation}, python route {taken.route}")
    if mask != sum(1 << i for i in set(taken.outputs)) or len(set(taken.outputs)) != len(
        taken.outputs
    ):
        found.append(f"outputs mask {mask:b}, python {taken.outputs}")
    if len(inputs) != len(taken.arrays):
        return [*found, f"{len(inputs)} inputs, python {len(taken.arrays)}"]
    specs = taken.entry.methods[taken.method].signature.inputs
    for i, ((offset, shape), array, spec) in enumerate(zip(inputs, taken.arrays, specs)):
        if tuple(shape) != array.shape or array.dtype != carrier_of(spec.datatype):
            found.append(f"input {i}: shape {shape}, python {array.shape} {array.dtype}")
        elif i in in_region:
            if offset != 0:
                found.append(f"input {i} in a region: offset {offset} in the arena")
        elif bytes(arena.region.view(offset, array.nbytes)) != array.tobytes():
            found.append(f"input {i}: bytes differ")
    return found


def engine_answer(arena: Arena, message: bytes, taken, rng):
    """An engine's answer to the lane request `message`, its outputs (random shapes within their
    bounds, any bit pattern) written into the request's room or, where the request named one,
    into the client's region: (the arrays, the lane's answer payload, the outputs as the
    engine's Python places them), or None when they do not fit the room (the lane declines
    such an answer). Both differential tests answer with it."""
    _, request_id, _, room, size, _, _, _ = lane_frames.read_request(message)
    base = arena.region.address
    specs = taken.entry.methods[taken.method].signature.outputs
    arrays, placed, by_python, at = [], [], [], room
    in_region = {tensor for tensor, output, *_ in taken.refs if output}
    for index in taken.outputs:
        spec = specs[index]
        shape = [rng.randint(0, min(bound, 4)) if spec.dynamic else bound for bound in spec.shape]
        array = answer_array(spec.datatype, shape, rng)
        if index in in_region:  # the engine wrote it into the client's region
            arrays.append(array)
            placed.append(_OUTPUT.pack(index, len(shape), lane_frames.IN_REGION))
            placed[-1] += struct.pack(f"<{len(shape)}q", *shape)
            by_python.append((index, shape, None))
            continue
        if at + array.nbytes > room + size:
            return None
        arena.region.view(at, array.nbytes)[:] = array.tobytes()
        arrays.append(array)
        placed.append(_OUTPUT.pack(index, len(shape), at) + struct.pack(f"<{len(shape)}q", *shape))
        by_python.append((index, shape, array.tobytes() if rng.random() < 0.5 else base + at))
        at += align_up(max(array.nbytes, 1))
    payload = _DONE.pack(lane_frames.DONE_TAG, len(placed), 0, 0, request_id) + b"".join(placed)
    return arrays, payload, by_python


def _answer(arena: Arena, native, request_id: int, message: bytes, taken, rng):
    """Writes an engine's answer into the request's room: (how the two answers differ, the
    native path's answer)."""
    answered = engine_answer(arena, message, taken, rng)
    if answered is None:
        native.release(request_id)
        return [], None  # a room the engine would not fill so (the lane declines it)
    arrays, payload, by_python = answered
    # Half of the answers go to a socket first (answer_send.h), the rest of them after.
    sock = _sockets()[0] if rng.random() < 0.5 else None
    fd = -1 if sock is None else sock.fileno()
    if rng.random() < 0.3:  # outputs the engine's Python placed (a request the lane declined)
        written, keep_alive = native.answer(request_id, taken.entry.version, by_python, HEADERS, fd)
    else:
        written, keep_alive = native.answer_lane(request_id, payload, HEADERS, fd)
    if sock is not None:
        written = _received() + written
    expected = python_answer(taken, arrays)
    if written != expected or keep_alive != taken.keep_alive:
        return [
            f"answer differs (keep-alive {keep_alive}):\n{written[:800]!r}\n{expected[:800]!r}"
        ], written
    return [], written


@cache
def _sockets() -> tuple[socket.socket, socket.socket]:
    """A connection's socket for the native path to write answers to, with a send buffer
    smaller than many answers (so that some are written in part), and its peer."""
    ours, peer = socket.socketpair()
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    ours.setblocking(False)
    peer.setblocking(False)
    return ours, peer


def _received() -> bytes:
    """Everything written to _sockets()'s socket since last read."""
    found = b""
    while True:
        try:
            chunk = _sockets()[1].recv(1 << 20)
        except BlockingIOError:
            return found
        found += chunk


def _take(native, raw: bytes, rng: random.Random):
    """(request id, bytes taken, lane message, whether its body arrived in pieces) or None: the
    request whole, or cut anywhere and the rest given in pieces of any size, as a connection
    gives them (only a v2 binary body is taken before it is whole)."""
    cut = len(raw)
    declared = re.search(rb"inference-header-content-length:[ \t]*(\d+)", raw[:4096].lower())
    if declared is not None and rng.random() < 0.5:  # mostly within its binary tensors
        payload = raw.find(b"\r\n\r\n") + 4 + int(declared.group(1))
        low = payload if payload < len(raw) - 1 and rng.random() < 0.8 else 1
        cut = rng.randint(low, max(low, len(raw) - 1))
    got = native.take(raw[:cut])
    if got is None:
        return None
    request_id, consumed, message = got
    at = consumed
    while message is None:  # its body is arriving
        if at == len(raw):  # it ended before its body did: nothing to send, slot freed
            native.release(request_id)
            return None
        piece = raw[at : at + rng.choice([1, 7, 256, 4096, len(raw)])]
        taken, message = native.fill(request_id, piece)
        assert 0 < taken <= len(piece) and (message is not None or taken == len(piece))
        at += taken
    return request_id, at, message, at > consumed


def test_what_the_native_path_takes_the_python_path_takes_and_answers_alike():
    seed = int(os.environ.get("ETRT_DIFF_SEED") or random.SystemRandom().randrange(2**32))
    cases = int(os.environ.get("ETRT_DIFF_CASES") or 100_000)
    print(f"front differential: ETRT_DIFF_SEED={seed} ETRT_DIFF_CASES={cases}")
    rng = random.Random(seed)
    arena = Arena(16 << 20)
    control = np.array([GENERATION, 1, 1], np.uint64)  # generation, ready, serving
    lanes = _lanes(arena, control)
    started, taken_count, streamed, in_regions, failures = time.monotonic(), 0, 0, 0, []
    for number in range(cases):
        token = TOKEN if rng.random() < 0.2 else None
        raw, label = case(rng, token)
        native = lanes[token]
        got = _take(native, raw, rng)
        if got is None:
            continue
        taken_count += 1
        request_id, consumed, message, in_pieces = got
        streamed += in_pieces
        try:
            taken = python_take(raw[:consumed], PYTHON_LIMITS, token)
        except Refused as exc:
            native.release(request_id)
            failures.append((number, label, f"the Python path refuses it: {exc}", raw))
            continue
        in_regions += bool(taken.refs)
        problems = _same_request(arena, message, taken)
        if problems:
            native.release(request_id)
        else:
            problems, _ = _answer(arena, native, request_id, message, taken, rng)
        if problems:
            failures.append((number, label, "; ".join(problems), raw))
    elapsed = time.monotonic() - started
    print(f"{cases} cases, {taken_count} taken natively ({streamed} as their bodies arrived, "
          f"{in_regions} with tensors in shared memory regions), {len(failures)} disagreements, "
          f"{elapsed:.1f} s")  # fmt: skip
    report = "\n".join(
        f"case {n} [{label}]: {why}\n  {raw[:600]!r}" for n, label, why, raw in failures[:8]
    )
    assert not failures, f"seed {seed}: {len(failures)} disagreements\n{report}"
    assert arena.in_use == 0 and all(lane.pending == 0 for lane in lanes.values())
    # Not a test that cannot fail: a fair share of requests must reach the comparison.
    assert taken_count >= cases // 4, (taken_count, cases)
    assert streamed >= cases // 80, (streamed, cases)
    assert in_regions >= cases // 40, (in_regions, cases)


def _one(raw: bytes) -> bytes:
    """`raw` through both paths, as the run above does; the native path's answer."""
    arena = Arena(1 << 20)
    control = np.array([GENERATION, 1, 1], np.uint64)
    native = _lanes(arena, control)[None]
    request_id, consumed, message = native.take(raw)
    taken = python_take(raw[:consumed], PYTHON_LIMITS, None)
    assert _same_request(arena, message, taken) == []
    problems, written = _answer(arena, native, request_id, message, taken, _AlwaysLane())
    assert problems == []
    return written


class _AlwaysLane(random.Random):
    """Answers through the lane's message, every time."""

    def random(self):
        return 0.9


def test_an_empty_output_asked_as_binary_data_is_a_binary_answer_on_both_paths():
    """Found by the run above: the native path wrote a JSON answer (no
    Inference-Header-Content-Length) for an empty output asked as binary data, and the Python
    path failed on it (memoryview cannot cast a shape with a 0): an empty output is binary data
    of 0 bytes."""
    header = json.dumps(
        {
            "inputs": [
                {"name": "input_0", "datatype": "INT64", "shape": [1], "data": [3]},
                {"name": "input_1", "datatype": "BOOL", "shape": [2, 3], "data": [True] * 6},
                {"name": "input_2", "datatype": "FP16", "shape": [],
                 "parameters": {"binary_data_size": 2}},
            ],
            "outputs": [{"name": "output_4", "parameters": {"binary_data": True}}],
        }
    ).encode()  # fmt: skip
    body = header + b"\x00\x3c"
    raw = (
        b"POST /v2/models/mix/infer HTTP/1.1\r\nHost: t\r\nContent-Length: "
        + str(len(body)).encode()
        + b"\r\nInference-Header-Content-Length: "
        + str(len(header)).encode()
        + b"\r\n\r\n"
        + body
    )
    answer = _one(raw)
    assert b"\r\ninference-header-content-length: " in answer
    assert b'"shape":[0,3],"parameters":{"binary_data_size":0}' in answer


def test_a_binary_byte_count_past_64_bits_is_declined_as_the_python_path_refuses_it():
    """Shape [2^30, 2^30, 4] FP32 is 2^64 bytes, 0 once wrapped in 64 bits: a binary_data_size
    of 0 must not match it (found by libFuzzer, docs/contributing-fuzzing.md; here through
    both paths)."""
    header = json.dumps(
        {"inputs": [{"name": "input_0", "datatype": "FP32", "shape": [2**30, 2**30, 4],
                     "parameters": {"binary_data_size": 0}}]}
    ).encode()  # fmt: skip
    raw = (
        b"POST /v2/models/wrap/infer HTTP/1.1\r\nHost: t\r\nContent-Length: "
        + str(len(header)).encode()
        + b"\r\nInference-Header-Content-Length: "
        + str(len(header)).encode()
        + b"\r\n\r\n"
        + header
    )
    arena = Arena(1 << 20)
    control = np.array([GENERATION, 1, 1], np.uint64)
    assert _lanes(arena, control)[None].take(raw) is None
    with pytest.raises(Refused, match="binary_data_size 0 does not match"):
        python_take(raw, LIMITS, None)
    assert arena.in_use == 0
