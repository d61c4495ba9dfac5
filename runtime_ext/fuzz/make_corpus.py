"""Writes the fuzz targets' seed corpus (corpus/<target>/) against front_fixture.h's table.

Seeds are small valid and nearly valid inputs, so that libFuzzer starts from what the readers
take; the ones named regress-* are the inputs of faults fuzzing found, kept so that every run
tries them again. The files are committed; run this again after changing it:
    python3 runtime_ext/fuzz/make_corpus.py
"""

import json
import shutil
import struct
from pathlib import Path

HERE = Path(__file__).resolve().parent
DONE_TAG = 0xF2
DTYPES = {
    "BOOL": ("?", 1),
    "UINT8": ("B", 1),
    "UINT16": ("H", 2),
    "UINT32": ("I", 4),
    "UINT64": ("Q", 8),
    "INT8": ("b", 1),
    "INT16": ("h", 2),
    "INT32": ("i", 4),
    "INT64": ("q", 8),
    "FP16": ("e", 2),
    "FP32": ("f", 4),
    "FP64": ("d", 8),
    "BF16": ("H", 2),
}


def http(path: str, body: bytes, *extra: str) -> bytes:
    head = [f"POST {path} HTTP/1.1", "host: x", *extra, f"content-length: {len(body)}", "", ""]
    return "\r\n".join(head).encode() + body


def compact(value) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def sample(dtype: str, count: int) -> list:
    if dtype == "BOOL":
        return [i % 2 == 0 for i in range(count)]
    if dtype.startswith(("FP", "BF")):
        return [i * 0.5 - 1 for i in range(count)]
    if dtype.startswith("UINT"):
        return list(range(count))
    return [i - 1 for i in range(count)]


def payload(dtype: str, values: list) -> bytes:
    code, _ = DTYPES[dtype]
    if dtype == "BF16":
        return b"".join(struct.pack("<f", v)[2:] for v in values)
    return struct.pack(f"<{len(values)}{code}", *values)


def native_body(model: str, dtype: str, shape: list, **input_extra) -> bytes:
    count = 1
    for d in shape:
        count *= d
    tensor = {"shape": shape, "datatype": dtype, "data": sample(dtype, count), **input_extra}
    return compact({"model": model, "inputs": [tensor]})


def v2_json(name: str, dtype: str, shape: list, **body_extra) -> bytes:
    count = 1
    for d in shape:
        count *= d
    tensor = {"name": name, "shape": shape, "datatype": dtype, "data": sample(dtype, count)}
    return compact({"inputs": [tensor], **body_extra})


def v2_binary(inputs: list, outputs=None) -> tuple[bytes, bytes]:
    """(header, body) for [(name, dtype, shape)] inputs sent as binary data."""
    tensors, data = [], b""
    for name, dtype, shape in inputs:
        count = 1
        for d in shape:
            count *= d
        raw = payload(dtype, sample(dtype, count))
        tensors.append(
            {
                "name": name,
                "shape": shape,
                "datatype": dtype,
                "parameters": {"binary_data_size": len(raw)},
            }
        )
        data += raw
    header = {"inputs": tensors}
    if outputs is not None:
        header["outputs"] = outputs
    text = compact(header)
    return text, text + data


# The v2 binary request whose byte count wrapped: [2^30, 2^30, 4] FP32 is 2^64 bytes, i.e. 0.
WRAPPING = compact(
    {
        "inputs": [
            {
                "name": "x",
                "shape": [1 << 30, 1 << 30, 4],
                "datatype": "FP32",
                "parameters": {"binary_data_size": 0},
            }
        ]
    }
)
# The same count with JSON data: a few values would have been written for 2^64 bytes' worth.
WRAPPING_JSON = compact(
    {"inputs": [{"name": "x", "shape": [1 << 30, 1 << 30, 4], "datatype": "FP32", "data": [1]}]}
)


def region(name: str, nbytes: int, offset: int = 0) -> dict:
    """A tensor's parameters naming a shared memory region (tritonclient's set_shared_memory)."""
    parameters = {"shared_memory_region": name, "shared_memory_byte_size": nbytes}
    if offset:
        parameters["shared_memory_offset"] = offset
    return parameters


# A v2 request whose input and one output lie in shared memory regions (tiny: [1, 8] FP32).
SHM = compact(
    {
        "inputs": [
            {"name": "input_0", "shape": [1, 8], "datatype": "FP32", "parameters": region("in", 32)}
        ],
        "outputs": [
            {"name": "output_0", "parameters": region("out", 32, 256)},
            {"name": "output_1"},
        ],
    }
)


def head_seeds() -> dict[str, bytes]:
    native = native_body("tiny", "FP32", [1, 8])
    seeds = {
        "native": http("/infer", native),
        "v2": http("/v2/models/tiny/infer", b"{}"),
        "v2-version": http("/v2/models/tiny/versions/3/infer", b"{}"),
        "binary-header": http("/v2/models/m/infer", b"x", "inference-header-content-length: 1"),
        "token": http("/infer", b"{}", "authorization: Bearer secret"),
        "close": http("/infer", b"{}", "connection: keep-alive, close"),
        "upgrade": http("/infer", b"{}", "connection: Upgrade"),
        "chunked": http("/infer", b"", "transfer-encoding: chunked"),
        "expect": http("/infer", b"", "expect: 100-continue"),
        "two-lengths": http("/infer", b"{}", "content-length: 2"),
        "odd-case": b"POST /infer HTTP/1.1\r\nCoNtEnT-LeNgTh:\t 2 \t\r\n\r\n{}",
        "get": b"GET /infer HTTP/1.1\r\ncontent-length: 0\r\n\r\n",
        "http10": b"POST /infer HTTP/1.0\r\ncontent-length: 0\r\n\r\n",
        "query": b"POST /infer?a=1 HTTP/1.1\r\ncontent-length: 0\r\n\r\n",
        "escape": b"POST /in%66er HTTP/1.1\r\ncontent-length: 0\r\n\r\n",
        "no-length": b"POST /infer HTTP/1.1\r\nhost: x\r\n\r\n",
        "long-length": b"POST /infer HTTP/1.1\r\ncontent-length: 9999999999999999999\r\n\r\n",
        "bad-name": b"POST /infer HTTP/1.1\r\nbad name: 1\r\ncontent-length: 0\r\n\r\n",
        "no-colon": b"POST /infer HTTP/1.1\r\nnocolon\r\ncontent-length: 0\r\n\r\n",
        "utf8-value": b"POST /infer HTTP/1.1\r\nx: caf\xc3\xa9\r\ncontent-length: 0\r\n\r\n",
        "partial": b"POST /infer HTTP/1.1\r\nhost: x\r\n",
        "bare-lf": b"POST /infer HTTP/1.1\ncontent-length: 0\n\n",
        "empty-line-only": b"\r\n\r\n",
        "many-fields": b"POST /infer HTTP/1.1\r\n" + b"x: 1\r\n" * 70 + b"\r\n",
        "pipelined": http("/infer", native) * 2,
    }
    return seeds


def body_seeds() -> dict[str, bytes]:
    native, v2, binary = b"\x00", b"\x01", b"\x02"
    seeds = {}
    for dtype in DTYPES:
        model = dtype.lower()
        seeds[f"native-{model}"] = native + native_body(model, dtype, [2, 3])
        seeds[f"v2-{model}"] = v2 + v2_json("x", dtype, [1, 3])
        header, body = v2_binary([("x", dtype, [2, 3])])
        seeds[f"binary-{model}"] = binary + str(len(header)).encode() + b"\n" + body
    seeds["native-float-dims"] = native + compact(
        {"model": "tiny", "inputs": [{"shape": [1.0, 8.0], "datatype": "FP32", "data": [0] * 8}]}
    )
    seeds["native-method"] = native + compact(
        {"model": "tiny", "method": "forward", "inputs": [], "extra": {"a": [1, {"b": None}]}}
    )
    seeds["native-named"] = native + native_body("tiny", "FP32", [2, 8], name="input_0")
    seeds["native-repeated-key"] = native + b'{"model":"tiny","model":"tiny","inputs":[]}'
    seeds["native-escape"] = native + b'{"model":"t\\u0069ny","inputs":[]}'
    seeds["native-big-int"] = native + compact(
        {"model": "int64", "inputs": [{"shape": [1, 1], "datatype": "INT64", "data": [1 << 70]}]}
    )
    seeds["v2-outputs"] = v2 + v2_json(
        "x", "INT32", [2, 3], id="r1", outputs=[{"name": "y", "parameters": {"binary_data": True}}]
    )
    seeds["v2-parameters"] = v2 + v2_json("x", "FP32", [1, 3], parameters={})
    seeds["v2-pair"] = v2 + compact(
        {
            "inputs": [
                {"name": "a", "shape": [4], "datatype": "INT32", "data": [1, 2, 3, 4]},
                {"name": "b", "shape": [4], "datatype": "BOOL", "data": [True] * 4},
            ]
        }
    )
    seeds["v2-nested"] = v2 + compact(
        {"inputs": [{"name": "x", "shape": [2, 3], "datatype": "FP32", "data": [[1, 2, 3]] * 2}]}
    )
    seeds["v2-exponents"] = v2 + compact(
        {
            "inputs": [
                {"name": "x", "shape": [1, 3], "datatype": "FP32", "data": [1e38, -4e-45, 3.5]}
            ]
        }
    )
    header, body = v2_binary([("a", "INT32", [4]), ("b", "BOOL", [4])])
    seeds["binary-pair"] = binary + str(len(header)).encode() + b"\n" + body
    header, body = v2_binary([("x", "FP32", [1, 3])], [{"name": "y"}])
    seeds["binary-outputs"] = binary + str(len(header)).encode() + b"\n" + body
    seeds["binary-short"] = binary + str(len(header)).encode() + b"\n" + body[:-1]
    seeds["binary-header-too-long"] = binary + str(len(body) + 1).encode() + b"\n" + body
    seeds["regress-wrapping-byte-count"] = binary + str(len(WRAPPING)).encode() + b"\n" + WRAPPING
    seeds["regress-wrapping-json-count"] = v2 + WRAPPING_JSON
    seeds["v2-shm"] = v2 + SHM
    seeds["v2-shm-wrong-size"] = v2 + SHM.replace(
        b'"in","shared_memory_byte_size":32', b'"in","shared_memory_byte_size":31'
    )
    header, body = v2_binary([("a", "INT32", [4])])
    mixed = compact(
        {"inputs": [json.loads(header)["inputs"][0],
                    {"name": "b", "shape": [4], "datatype": "BOOL", "parameters": region("b", 4)}]}
    )  # fmt: skip
    seeds["binary-shm-mixed"] = (
        binary + str(len(mixed)).encode() + b"\n" + mixed + body[len(header) :]
    )
    return seeds


def take_seeds() -> dict[str, bytes]:
    seeds = {}
    for dtype in DTYPES:
        model = dtype.lower()
        seeds[f"native-{model}"] = http("/infer", native_body(model, dtype, [2, 3]))
        header, body = v2_binary([("x", dtype, [2, 3])])
        seeds[f"binary-{model}"] = http(
            f"/v2/models/{model}/infer", body, f"inference-header-content-length: {len(header)}"
        )
    tiny = http("/infer", native_body("tiny", "FP32", [2, 8]))
    v2 = http("/v2/models/tiny/versions/3/infer", v2_json("input_0", "FP32", [1, 8], id="a"))
    seeds["v2-tiny"] = v2
    seeds["pipelined"] = tiny + v2 + tiny
    seeds["extra-bytes"] = tiny + b"GET / HTTP/1.1\r\n\r\n"
    seeds["cut-short"] = tiny[:-3]
    seeds["close"] = http("/infer", native_body("tiny", "FP32", [1, 8]), "connection: close")
    seeds["pair"] = http(
        "/v2/models/pair/infer",
        compact(
            {
                "inputs": [
                    {"name": "b", "shape": [4], "datatype": "BOOL", "data": [False] * 4},
                    {"name": "a", "shape": [4], "datatype": "INT32", "data": [1, 2, 3, 4]},
                ],
                "outputs": [{"name": "h"}, {"name": "u", "parameters": {"binary_data": True}}],
            }
        ),
    )
    seeds["token"] = http(
        "/infer", native_body("tiny", "FP32", [1, 8]), "authorization: Bearer secret"
    )
    seeds["token-odd-spacing"] = http(
        "/v2/models/tiny/infer",
        v2_json("input_0", "FP32", [1, 8]),
        "Authorization:  bEaReR   secret ",
    )
    seeds["token-wrong"] = http(
        "/infer", native_body("tiny", "FP32", [1, 8]), "authorization: Bearer secreT"
    )
    seeds["unknown-model"] = http("/v2/models/nope/infer", v2_json("x", "FP32", [1, 3]))
    seeds["regress-wrapping-byte-count"] = http(
        "/v2/models/wide/infer", WRAPPING, f"inference-header-content-length: {len(WRAPPING)}"
    )
    seeds["regress-wrapping-json-count"] = http("/v2/models/wide/infer", WRAPPING_JSON)
    seeds["v2-shm"] = http("/v2/models/tiny/infer", SHM)
    return seeds


def answer(outputs: list[tuple[int, int, list[int]]]) -> bytes:
    """The engine's answer (wire.h), without the length prefix: (index, offset, dims) each."""
    out = struct.pack("<BBHIQ", DONE_TAG, len(outputs), 0, 0, 1 << 48)
    for index, offset, dims in outputs:
        out += struct.pack("<IIQ", index, len(dims), offset)
        out += struct.pack(f"<{len(dims)}q", *dims)
    return out


def answer_seeds() -> dict[str, bytes]:
    # fuzz_lane_answer.cpp's requests: 0 tiny (native), 1 tiny (v2, with an id), 2 pair (v2),
    # 3 fp64 (v2 binary, output y as binary), 4 bool (native, with the scalar output s); its
    # arena is 64 KiB.
    room = 256  # every request's slot starts at 0; its inputs take one alignment unit here
    seeds = {
        "tiny-native": b"\x00" + answer([(0, room, [2, 8]), (1, room + 256, [2])]),
        "tiny-v2": b"\x01" + answer([(0, room, [1, 8]), (1, room + 256, [1])]),
        "tiny-one-output": b"\x01" + answer([(1, room, [1])]),
        "pair": b"\x02" + answer([(i, room + 256 * i, [4]) for i in range(4)]),
        "fp64-binary": b"\x03" + answer([(0, room, [1, 3])]),
        "bool-with-scalar": b"\x04" + answer([(0, room, [1, 3]), (1, room + 256, [])]),
        "empty": b"\x00" + answer([]),
        "wrong-tag": b"\x00\xf1" + answer([(0, room, [2, 8])])[1:],
        "cut-short": b"\x00" + answer([(0, room, [2, 8])])[:-4],
        "unknown-output": b"\x00" + answer([(7, room, [2, 8])]),
        "past-the-arena": b"\x00" + answer([(0, (1 << 16) - 16, [2, 8])]),
        "negative-dim": b"\x00" + answer([(0, room, [-1, 8])]),
        "pair-subset": b"\x02" + answer([(1, room, [4]), (3, room + 256, [4])]),
        "tiny-full-batch": b"\x00" + answer([(0, room, [4, 8]), (1, room + 512, [4])]),
        "fp64-with-scalar": b"\x03" + answer([(0, room, [1, 3]), (1, room + 256, [])]),
        "bool-three-dims": b"\x04" + answer([(0, room, [1, 1, 3])]),
        "duplicate-output": b"\x00" + answer([(0, room, [2, 8]), (0, room, [2, 8])]),
        "sixteen-dims": b"\x00" + answer([(0, room, [1] * 16)]),
        "seventeen-dims": b"\x00" + answer([(0, room, [1] * 17)]),
        "zero-elements": b"\x01" + answer([(0, room, [0, 8]), (1, room, [0])]),
        "at-the-arena-end": b"\x00" + answer([(0, 1 << 16, [0, 8])]),
        "count-over-outputs": b"\x00\xf2\x03" + answer([(0, room, [2, 8])])[2:],
        "trailing-bytes": b"\x02" + answer([(0, room, [4])]) + b"xyz",
        # An FP32 shape of 2^62 elements: its byte count, 2^64, wrapped to 0 and passed the check.
        "regress-wrapping-answer-size": b"\x00" + answer([(0, room, [1 << 62, 1])]),
        # A 0-dim output: its shape was copied with memcpy(nullptr, ..., 0).
        "regress-zero-dim-output": b"\x04" + answer([(1, room, [])]),
        # Written into a region the request did not name for it.
        "in-region-unasked": b"\x01" + answer([(0, (1 << 64) - 1, [1, 8]), (1, room, [1])]),
    }
    return seeds


def pb_varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def pb_field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field."""
    return pb_varint(number << 3 | 2) + pb_varint(len(payload)) + payload


def grpc_message(model: str, inputs: list, outputs=(), version="", request_id="") -> bytes:
    """A ModelInferRequest (grpc_service.proto): [(name, dtype, shape)] inputs, raw contents."""
    out = pb_field(1, model.encode())
    if version:
        out += pb_field(2, version.encode())
    if request_id:
        out += pb_field(3, request_id.encode())
    raws = []
    for name, dtype, shape in inputs:
        count = 1
        for d in shape:
            count *= d
        dims = b"".join(pb_varint(d) for d in shape)
        tensor = pb_field(1, name.encode()) + pb_field(2, dtype.encode())
        out += pb_field(5, tensor + (pb_field(3, dims) if shape else b""))
        raws.append(payload(dtype, sample(dtype, count)))
    for name in outputs:
        out += pb_field(6, pb_field(1, name.encode()))
    return out + b"".join(pb_field(7, raw) for raw in raws)


def grpc_seeds() -> dict[str, bytes]:
    seeds = {}
    for dtype in DTYPES:
        model = dtype.lower()
        seeds[f"grpc-{model}"] = grpc_message(model, [("x", dtype, [2, 3])], ["y"])
    pair = [("a", "INT32", [4]), ("b", "BOOL", [4])]
    seeds["pair"] = grpc_message("pair", pair, ["h", "u"], request_id="q7")
    seeds["pair-reordered"] = grpc_message("pair", pair[::-1])
    seeds["tiny-version"] = grpc_message("tiny", [("input_0", "FP32", [2, 8])], version="3")
    seeds["tiny-unpacked-shape"] = (
        pb_field(1, b"tiny")
        + pb_field(5, pb_field(1, b"input_0") + pb_field(2, b"FP32") + b"\x18\x01\x18\x08")
        + pb_field(7, bytes(32))
    )
    seeds["request-parameters"] = grpc_message("tiny", [("input_0", "FP32", [1, 8])]) + pb_field(
        4, pb_field(1, b"timeout") + pb_field(2, b"\x10\x05")
    )
    seeds["bool-past-one"] = grpc_message("bool", [("x", "BOOL", [1, 3])])[:-1] + b"\x02"
    # [2^30, 2^30, 4] FP32 is 2^64 bytes, 0 once wrapped: no raw contents must not match it.
    dims = pb_varint(1 << 30) * 2 + pb_varint(4)
    tensor = pb_field(1, b"x") + pb_field(2, b"FP32") + pb_field(3, dims)
    seeds["wrapping-byte-count"] = pb_field(1, b"wide") + pb_field(5, tensor) + pb_field(7, b"")
    seeds["long-varint"] = pb_field(1, b"tiny") + b"\x2a" + b"\xff" * 11

    def parameter(key: bytes, choice: bytes) -> bytes:  # a map<string, InferParameter> entry
        return pb_field(1, key) + pb_field(2, choice)

    region = parameter(b"shared_memory_region", pb_field(3, b"in")) + b""
    sized = parameter(b"shared_memory_byte_size", b"\x10" + pb_varint(32))
    tensor = pb_field(1, b"input_0") + pb_field(2, b"FP32") + pb_field(3, b"\x01\x08")
    tensor += pb_field(4, region) + pb_field(4, sized)
    out = pb_field(1, b"output_0") + pb_field(
        2, parameter(b"shared_memory_region", pb_field(3, b"o"))
    )
    out += pb_field(2, parameter(b"shared_memory_byte_size", b"\x10" + pb_varint(1024)))
    seeds["shm-in-and-out"] = pb_field(1, b"tiny") + pb_field(5, tensor) + pb_field(6, out)
    seeds["shm-output-only"] = grpc_message("tiny", [("input_0", "FP32", [1, 8])]) + pb_field(
        6, out
    )
    return seeds


def seeds() -> dict[str, dict[str, bytes]]:
    """Every target's seeds by file name (tests/unit/test_fuzz_targets.py compares them with
    the committed files)."""
    return {
        "fuzz_http_head": head_seeds(),
        "fuzz_request_bodies": body_seeds(),
        "fuzz_front_take": take_seeds(),
        "fuzz_lane_answer": answer_seeds(),
        "fuzz_grpc_take": grpc_seeds(),
    }


def main() -> None:
    for target, files in seeds().items():
        folder = HERE / "corpus" / target
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        for name, data in files.items():
            (folder / name).write_bytes(data)
    print(f"corpus written under {HERE / 'corpus'}")


if __name__ == "__main__":
    main()
