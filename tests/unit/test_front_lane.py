"""The fronts' native path (runtime_ext/front/, module etrt_front) against the Python path it
stands in for: the same numbers in JSON answers as orjson writes, the same tensors in the arena
as the Python codecs decode, the same answers as the Python encoders make, and a decline (the
Python path's turn) for everything else."""

import json
import math

import etrt_front
import numpy as np
import pytest

from service.dataplane.types import InferResponse, Tensor
from service.front.protocols import json_tensors
from service.front.protocols.native import infer_body
from service.front.protocols.v2_rest import codec
from service.shared import lane_frames
from service.shared.arena import Arena

HEADERS = b"date: Thu, 03 Dec 2026 00:00:00 GMT\r\nserver: uvicorn\r\n"
GENERATION = 7


def _python_data(array: np.ndarray, datatype: str) -> bytes:
    return json_tensors.dumps(json_tensors.encode_numpy(array, "", datatype)["data"])


FLOAT_SPECIALS = [0.0, -0.0, 1.0, -1.5, 0.1, 1e-7, 1.2345e-6, 1e-5, 123456789.0, 1e13, 1e16, 1e22]


@pytest.mark.parametrize("dtype,datatype", [(np.float32, "FP32"), (np.float64, "FP64")])
def test_floats_are_written_as_orjson_writes_them(dtype, datatype):
    rng = np.random.default_rng(0)
    exponents = rng.uniform(
        -45 if dtype is np.float32 else -300, 38 if dtype is np.float32 else 300, 20_000
    )
    values = rng.choice([-1, 1], exponents.size) * rng.random(exponents.size) * 10.0**exponents
    for array in (
        values.astype(dtype),
        np.array(FLOAT_SPECIALS, dtype),
        np.array(
            [np.finfo(dtype).max, np.finfo(dtype).tiny, np.finfo(dtype).smallest_subnormal], dtype
        ),
        (rng.integers(-(10**6), 10**6, 1000)).astype(dtype),
    ):
        assert etrt_front.json_data(datatype, array.tobytes()) == _python_data(array, datatype)


def test_a_non_finite_value_writes_every_value_as_python_floats_do():
    array = np.array([0.1, np.nan, np.inf, -np.inf, 1e-7], np.float32)
    assert etrt_front.json_data("FP32", array.tobytes()) == _python_data(array, "FP32")
    wide = np.array([0.1, np.nan], np.float64)
    assert etrt_front.json_data("FP64", wide.tobytes()) == _python_data(wide, "FP64")


def test_half_bfloat_integer_and_bool_outputs_are_written_as_the_python_path_writes_them():
    rng = np.random.default_rng(1)
    halves = rng.standard_normal(2000).astype(np.float16)
    halves[:4] = [0.0, -0.0, 65504.0, 6e-8]
    assert etrt_front.json_data("FP16", halves.tobytes()) == _python_data(halves, "FP16")
    bits = json_tensors.float32_to_bf16_bits(rng.standard_normal(2000).astype(np.float32) * 1e3)
    assert etrt_front.json_data("BF16", bits.tobytes()) == _python_data(bits, "BF16")
    for dtype, datatype in [
        (np.int8, "INT8"), (np.int16, "INT16"), (np.int32, "INT32"), (np.int64, "INT64"),
        (np.uint8, "UINT8"), (np.uint16, "UINT16"), (np.uint32, "UINT32"), (np.uint64, "UINT64"),
    ]:  # fmt: skip
        info = np.iinfo(dtype)
        array = np.array([info.min, info.max, 0, 1, info.max // 3], dtype)
        assert etrt_front.json_data(datatype, array.tobytes()) == _python_data(array, datatype)
    flags = np.array([True, False, True])
    assert etrt_front.json_data("BOOL", flags.tobytes()) == _python_data(flags, "BOOL")


# -- requests and answers over a table ---------------------------------------------------------

INPUT = ("input_0", "FP32", [2, 8], False)
OUTPUT = ("output_0", "FP32", [2, 4], False, True)


@pytest.fixture
def lane():
    arena = Arena(1 << 20)
    control = np.array([GENERATION, 1, 1], np.uint64)  # generation, ready, serving
    native = etrt_front.FrontLane(
        arena.slots, arena.region.address, control.ctypes.data, 65536, 65536, 65536, None
    )
    native.publish(GENERATION, [("tiny", "3", True, 0, [("forward", 11, [INPUT], [OUTPUT])])])
    yield native, arena, control


def _request(path: str, body: bytes, headers: dict | None = None) -> bytes:
    head = f"POST {path} HTTP/1.1\r\nhost: x\r\ncontent-length: {len(body)}\r\n"
    for name, value in (headers or {}).items():
        head += f"{name}: {value}\r\n"
    return head.encode() + b"\r\n" + body


X = np.linspace(-1, 1, 16, dtype=np.float32).reshape(2, 8)


def _native_body(data=None, **changes) -> bytes:
    item = {
        "shape": [2, 8],
        "datatype": "FP32",
        "data": X.ravel().tolist() if data is None else data,
    }
    item.update(changes)
    return json.dumps({"model": "tiny", "inputs": [item]}).encode()


def _binary_request(x=X, **header_changes) -> bytes:
    header = {
        "inputs": [
            {"name": "input_0", "datatype": "FP32", "shape": list(x.shape),
             "parameters": {"binary_data_size": x.nbytes}}
        ],
        "outputs": [{"name": "output_0", "parameters": {"binary_data": True}}],
    }  # fmt: skip
    header.update(header_changes)
    text = json.dumps(header).encode()
    return _request(
        "/v2/models/tiny/infer",
        text + x.tobytes(),
        {"inference-header-content-length": len(text)},
    )


def _taken(native, arena, raw: bytes):
    taken = native.take(raw)
    assert taken is not None, raw[:200]
    request_id, consumed, message = taken
    assert consumed == len(raw)
    route, key, generation, room, size, mask, inputs, refs = lane_frames.read_request(message)
    assert refs == []  # the native path never takes a request naming shared memory
    assert (route, key, generation, mask) == (11, request_id, GENERATION, 1)
    [(offset, shape)] = inputs
    assert offset % 256 == 0 and room % 256 == 0 and size >= 2 * 4 * 4
    return request_id, arena.region.array(offset, np.float32, tuple(shape)), room


def test_a_native_json_request_lands_in_the_arena_as_the_python_codec_decodes_it(lane):
    native, arena, _ = lane
    body = _native_body(data=[0.1, 1, -2, 3.5e-3, 16777217, 1e30, -0.0, 7] * 2)
    _, got, _ = _taken(native, arena, _request("/infer", body))
    _, _, [tensor], _ = infer_body.parse(body)
    assert got.tobytes() == tensor.array.tobytes()
    assert arena.in_use > 0


def test_a_v2_binary_request_lands_in_the_arena_byte_for_byte(lane):
    native, arena, _ = lane
    _, got, _ = _taken(native, arena, _binary_request())
    assert got.tobytes() == X.tobytes()


def _answer(request_id: int, room: int, arena, y: np.ndarray) -> bytes:
    arena.region.array(room, np.float32, y.shape)[...] = y
    payload = (
        bytes([lane_frames.DONE_TAG, 1, 0, 0, 0, 0, 0, 0])
        + request_id.to_bytes(8, "little")
        + (0).to_bytes(4, "little")
        + len(y.shape).to_bytes(4, "little")
        + room.to_bytes(8, "little")
        + b"".join(d.to_bytes(8, "little") for d in y.shape)
    )
    return payload


def _split_answer(raw: bytes) -> tuple[str, dict, bytes]:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    fields = dict(line.split(": ", 1) for line in lines[1:])
    assert int(fields["content-length"]) == len(body)
    return lines[0], fields, body


def test_answers_are_the_bytes_the_python_encoders_write(lane):
    native, arena, _ = lane
    y = np.array([[0.1, -2.0, 3e-9, 1e20], [0.0, 1.0, 2.5, -7.25]], np.float32)
    response = InferResponse("tiny", "3", "forward", None, [Tensor("output_0", "FP32", y)])
    # The native API's JSON.
    request_id, _, room = _taken(native, arena, _request("/infer", _native_body()))
    answer, keep_alive = native.answer_lane(
        request_id, _answer(request_id, room, arena, y), HEADERS
    )
    status, fields, body = _split_answer(answer)
    assert status == "HTTP/1.1 200 OK" and keep_alive
    assert fields["content-type"] == "application/json" and fields["server"] == "uvicorn"
    assert body == infer_body.dump("tiny", "forward", response.outputs)
    # v2 binary: the header as the codec writes it, then the output's bytes.
    request_id, _, room = _taken(native, arena, _binary_request())
    answer, _ = native.answer_lane(request_id, _answer(request_id, room, arena, y), HEADERS)
    _, fields, body = _split_answer(answer)
    parsed = codec.parse_header(
        json.dumps(
            {
                "inputs": [
                    {
                        "name": "input_0",
                        "datatype": "FP32",
                        "shape": [2, 8],
                        "parameters": {"binary_data_size": 64},
                    }
                ],
                "outputs": [{"name": "output_0", "parameters": {"binary_data": True}}],
            }
        ).encode()
    )  # noqa: E501
    header, as_json, parts = codec.response_header(response, parsed)
    text = codec.dump_response(header, as_json)
    assert fields["inference-header-content-length"] == str(len(text))
    assert body == text + bytes(parts[0])
    # v2 JSON, with the request's id, through another version's route name.
    raw = _request(
        "/v2/models/tiny/versions/3/infer",
        json.dumps(
            {
                "id": "r-1",
                "inputs": [
                    {
                        "name": "input_0",
                        "shape": [2, 8],
                        "datatype": "FP32",
                        "data": X.ravel().tolist(),
                    }
                ],
            }
        ).encode(),  # noqa: E501
        {"connection": "close"},
    )
    request_id, _, room = _taken(native, arena, raw)
    answer, keep_alive = native.answer_lane(
        request_id, _answer(request_id, room, arena, y), HEADERS
    )
    _, fields, body = _split_answer(answer)
    response.id = "r-1"
    header, as_json, _ = codec.response_header(
        response,
        codec.parse_header(
            b'{"id":"r-1","inputs":[{"name":"input_0","shape":[2,8],"datatype":"FP32","data":['
            + b",".join([b"0"] * 16)
            + b"]}]}"
        ),
    )  # noqa: E501
    assert body == codec.dump_response(header, [(i, t.array, t.datatype) for i, t in as_json])
    assert not keep_alive and fields["connection"] == "close"
    assert native.pending == 0 and arena.in_use == 0  # every slot freed with its answer


def test_an_error_is_left_for_the_python_path_to_write_and_frees_the_slot(lane):
    native, arena, _ = lane
    request_id, _, _ = _taken(native, arena, _binary_request())
    assert native.release(request_id) == ("v2", True)
    assert native.release(request_id) is None
    assert arena.in_use == 0


DECLINED = {
    "another route": _request("/infer2", _native_body()),
    "a query": _request("/infer?x=1", _native_body()),
    "an escape in the path": _request("/v2/models/t%69ny/infer", b"{}"),
    "GET": _request("/infer", _native_body()).replace(b"POST", b"GET", 1),
    "HTTP/1.0": _request("/infer", _native_body()).replace(b"HTTP/1.1", b"HTTP/1.0", 1),
    "chunked": _request("/infer", _native_body(), {"transfer-encoding": "chunked"}),
    "expect": _request("/infer", _native_body(), {"expect": "100-continue"}),
    "two lengths": _request("/infer", _native_body(), {"content-length": "5"}),
    "cut short": _request("/infer", _native_body())[:-3],
    "an unknown model": _request("/infer", _native_body().replace(b'"tiny"', b'"other"')),
    "another method": _request(
        "/infer",
        json.dumps(
            {
                "model": "tiny",
                "method": "m",
                "inputs": [{"shape": [2, 8], "datatype": "FP32", "data": [0] * 16}],
            }
        ).encode(),
    ),  # noqa: E501
    "a wrong shape": _request("/infer", _native_body(data=[0] * 24, shape=[3, 8])),
    "a wrong datatype": _request("/infer", _native_body(datatype="FP64")),
    "too few values": _request("/infer", _native_body(data=[0] * 15)),
    "nested data": _request("/infer", _native_body(data=X.tolist())),
    "NaN as a string": _request("/infer", _native_body(data=["NaN"] + [0] * 15)),
    "a bool for FP32": _request("/infer", _native_body(data=[True] + [0] * 15)),
    "a float beyond FP32": _request("/infer", _native_body(data=[1e39] + [0] * 15)),
    "an escape in a string": _request("/infer", _native_body().replace(b'"tiny"', b'"t\\u0069ny"')),
    "a repeated key": _request(
        "/infer", _native_body().replace(b'{"model": "tiny"', b'{"model": "tiny", "model": "tiny"')
    ),  # noqa: E501
    "not JSON": _request("/infer", b'{"model": "tiny", "inputs": [}'),
    "trailing text": _request("/infer", _native_body() + b" x"),
    "unnamed v2 input": _binary_request(
        inputs=[{"datatype": "FP32", "shape": [2, 8], "parameters": {"binary_data_size": 64}}]
    ),  # noqa: E501
    "v2 parameters": _binary_request(parameters={"priority": 1}),
    "a short binary input": _binary_request(x=X[:1]),
    "an unknown output": _binary_request(outputs=[{"name": "output_9"}]),
    "no outputs at all": _binary_request(outputs=[]),
    "shared memory": _binary_request(
        inputs=[
            {
                "name": "input_0",
                "datatype": "FP32",
                "shape": [2, 8],
                "parameters": {"shared_memory_region": "r", "shared_memory_byte_size": 64},
            }
        ]
    ),  # noqa: E501
}


@pytest.mark.parametrize("case", DECLINED)
def test_what_the_python_path_must_read_is_declined_with_nothing_held(lane, case):
    native, arena, _ = lane
    assert native.take(DECLINED[case]) is None
    assert native.pending == 0 and arena.in_use == 0


def test_a_stale_table_a_stopped_engine_or_a_missing_token_is_declined(lane):
    native, arena, control = lane
    raw = _binary_request()
    control[0] = GENERATION + 1  # the engine's table changed: this front's copy is old
    assert native.take(raw) is None
    control[0], control[2] = GENERATION, 0  # not serving
    assert native.take(raw) is None
    control[2] = 1
    guarded = etrt_front.FrontLane(
        arena.slots, arena.region.address, control.ctypes.data, 65536, 65536, 65536, "s3cret"
    )
    guarded.publish(GENERATION, [("tiny", "3", True, 0, [("forward", 11, [INPUT], [OUTPUT])])])
    assert guarded.take(raw) is None
    wrong = raw.replace(b"host: x\r\n", b"host: x\r\nauthorization: Bearer nope\r\n")
    assert guarded.take(wrong) is None
    right = raw.replace(b"host: x\r\n", b"host: x\r\nAuthorization: bearer  s3cret\r\n")
    assert guarded.take(right) is not None


def test_a_full_arena_is_declined_and_so_is_a_request_larger_than_the_lane_takes(lane):
    native, arena, _ = lane
    hog = arena.allocate(arena.size - 256)
    assert native.take(_binary_request()) is None
    hog.release()
    small = etrt_front.FrontLane(
        arena.slots, arena.region.address, lane[2].ctypes.data, 100, 100, 100, None
    )
    small.publish(GENERATION, [("tiny", "3", True, 0, [("forward", 11, [INPUT], [OUTPUT])])])
    assert small.take(_binary_request()) is None
    assert math.isclose(arena.in_use, 0)


def test_mangled_requests_never_break_it_and_leave_nothing_held(lane):
    """Every byte of a client's request is hostile: flipped, cut, repeated or dropped anywhere,
    it is declined or taken as a whole request, never a crash or a slot kept."""
    native, arena, _ = lane
    rng = np.random.default_rng(3)
    seeds = [_binary_request(), _request("/infer", _native_body())]
    taken = 0
    for _ in range(3000):
        raw = bytearray(seeds[rng.integers(len(seeds))])
        for _ in range(rng.integers(1, 4)):
            if not raw:
                break
            at = int(rng.integers(len(raw)))
            match rng.integers(4):
                case 0:
                    raw[at] = int(rng.integers(256))
                case 1:
                    del raw[at : at + int(rng.integers(1, 8))]
                case 2:
                    raw[at:at] = raw[at : at + int(rng.integers(1, 8))]
                case _:
                    raw = raw[:at]
        got = native.take(bytes(raw))
        if got is not None:
            taken += 1
            assert native.release(got[0]) is not None
    assert native.pending == 0 and arena.in_use == 0
    assert taken > 0  # some mutations leave a request it reads (a changed value, say)
