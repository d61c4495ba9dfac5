"""Generated inference requests for the differential test of the fronts' two paths
(tests/unit/test_front_differential.py): mostly requests the native path should take, written
in the many ways HTTP and JSON allow (key order, whitespace, number forms, header case and
spacing), and a share of changed ones (wrong or odd values, datatypes, shapes, outputs, heads
with odd framing, bytes after the request, truncations), so that both sides see what a client
may send. `case(rng)` gives (request bytes, what was done to it, as a label)."""

from __future__ import annotations

import json
import random
import struct

import numpy as np

from service.dtypes import carrier_of
from support.front_reference import MAX_DIM, TABLE

_INT_RANGES = {
    "UINT8": (0, 255), "INT8": (-128, 127), "INT16": (-(2**15), 2**15 - 1),
    "INT32": (-(2**31), 2**31 - 1), "INT64": (-(2**63), 2**63 - 1),
}  # fmt: skip
_FLOAT_SPECIALS = [
    0.0, -0.0, 1.0, -1.5, 0.1, 1e-7, 5e-324, 1e-45, 1.4e-45, 1.17549435e-38,
    3.4028234663852886e38, 3.4028235e38, 1e38, 16777217.0, 2.0**53, 1e308,
]  # fmt: skip


class Raw(str):
    """Text written into the JSON as it is (a number in a chosen form, or not JSON at all)."""


def _space(rng: random.Random) -> str:
    r = rng.random()
    if r < 0.75:
        return ""
    return rng.choice([" ", "  ", "\n", "\t", "\r\n", " \n\t"])


def _number(value, rng: random.Random) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    r = rng.random()
    if r < 0.6:
        return repr(value)
    if r < 0.75:
        return f"{value:.17g}"
    if r < 0.85:
        return f"{value:.9e}".replace("e", rng.choice(["e", "E"]))
    if r < 0.9:
        return f"{value:.6g}"
    if r < 0.95:
        return f"{value:.30e}"  # more digits than a double holds
    return f"{value:.3E}".replace("E+", "E")


def dump(value, rng: random.Random) -> str:
    """JSON text of `value` with random whitespace and number forms (all valid JSON unless a
    Raw says otherwise)."""
    if isinstance(value, Raw):
        return str(value)
    if isinstance(value, dict):
        items = [
            f"{_space(rng)}{json.dumps(k)}{_space(rng)}:{_space(rng)}{dump(v, rng)}{_space(rng)}"
            for k, v in value.items()
        ]
        return "{" + ",".join(items) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_space(rng) + dump(v, rng) + _space(rng) for v in value) + "]"
    if value is None:
        return "null"
    if isinstance(value, str):
        return json.dumps(value)
    return _number(value, rng)


def _dims(spec, rng: random.Random) -> list[int]:
    if not spec.dynamic:
        return list(spec.shape)
    dims = []
    for bound in spec.shape:
        r = rng.random()
        if bound > 64:
            dims.append(rng.choice([0, 1, 2, bound]) if r < 0.5 else rng.randint(0, 3))
        else:
            dims.append(bound if r < 0.3 else 0 if r < 0.4 else rng.randint(0, bound))
    if spec.shape and max(spec.shape) > 64 and 0 not in dims and np.prod(dims) > 64:
        if rng.random() < 0.8:
            dims[rng.randrange(len(dims))] = 0  # a huge dimension beside an empty one
    return dims


def _value(datatype: str, rng: random.Random):
    if datatype == "BOOL":
        return rng.random() < 0.5
    if datatype in _INT_RANGES:
        low, high = _INT_RANGES[datatype]
        r = rng.random()
        return (
            low if r < 0.05 else high if r < 0.1 else rng.randint(max(low, -1000), min(high, 1000))
        )
    r = rng.random()
    if r < 0.2:
        return rng.choice(_FLOAT_SPECIALS) * rng.choice([1, -1])
    if r < 0.3:
        return rng.randint(-100000, 100000)
    return rng.uniform(-1, 1) * 10.0 ** rng.randint(-40 if datatype != "FP64" else -300, 30)


def _odd_value(datatype: str, rng: random.Random):
    """A value the protocol may or may not accept for the datatype."""
    choices = [
        "NaN", "Infinity", "-Infinity", Raw("NaN"), Raw("Infinity"), Raw("1e400"), Raw("-0"),
        Raw("1e-400"), Raw("2.0"), Raw("1E2"), Raw("01"), Raw("1."), Raw(".5"), Raw("+1"),
        Raw("-"), Raw("0x10"), 2**63, 2**64, -(2**63) - 1, 2**53 + 1, 1e39, True, None, [],
        "1", 0.5, Raw("18446744073709551615"), Raw("9223372036854775807"), Raw("1e2"),
    ]  # fmt: skip
    if datatype in _INT_RANGES:
        low, high = _INT_RANGES[datatype]
        choices += [low - 1, high + 1, float(high), float(low)]
    return rng.choice(choices)


def _binary_bytes(datatype: str, count: int, rng: random.Random) -> bytes:
    size = carrier_of(datatype).itemsize
    if datatype == "BOOL":
        return bytes(rng.choice((0, 1, 1, 0, 0, 1, 0, 1, 0, 2)) for _ in range(count))
    return rng.randbytes(count * size)


def _tensor(spec, rng: random.Random, odd: bool) -> tuple[dict, bytes | None, list]:
    """(the input's JSON fields but data, its binary bytes when sent so, its JSON data)."""
    dims = _dims(spec, rng)
    count = int(np.prod(dims)) if dims else 1
    fields = {"shape": dims, "datatype": spec.datatype}
    data = [_value(spec.datatype, rng) for _ in range(min(count, 64))] if count <= 64 else []
    if odd and data:
        data[rng.randrange(len(data))] = _odd_value(spec.datatype, rng)
    return fields, _binary_bytes(spec.datatype, count, rng) if count <= 4096 else b"", data


_REGIONS = ["r0", "images-in", "a/b.c", "x" * 40, "with space", "\u00e9", 'q"', "\\"]
_REGION_KEYS = ("shared_memory_region", "shared_memory_byte_size", "shared_memory_offset")


def region(nbytes: int, rng: random.Random, odd: bool) -> tuple[dict, str]:
    """(parameters naming a shared memory region for a tensor of `nbytes` bytes, label):
    tritonclient's set_shared_memory, written in several ways; `odd`: sometimes changed so that
    the Python path refuses it, or sends it to the engine's Python to refuse."""
    parameters = {"shared_memory_region": rng.choice(_REGIONS[:5]) if rng.random() < 0.9 else
                  rng.choice(_REGIONS), "shared_memory_byte_size": nbytes}  # fmt: skip
    if rng.random() < 0.4:
        parameters["shared_memory_offset"] = rng.choice([0, 16, 256, 4096, 2**40])
    keys = list(parameters)
    rng.shuffle(keys)
    parameters = {k: parameters[k] for k in keys}
    if not odd:
        return parameters, ""
    key = rng.choice(_REGION_KEYS)
    match rng.randrange(9):
        case 0:
            parameters["shared_memory_byte_size"] = nbytes + rng.choice([-1, 1, 2, 8, -(2**62)])
        case 1:
            parameters.pop(key, None)
        case 2:
            parameters[key] = rng.choice(["", None, 3, -1, 1.0, Raw("1e2"), "r0", [], True,
                                          Raw("-0"), 2**64, Raw("16.0")])  # fmt: skip
        case 3:
            parameters[rng.choice(["binary_data", "x", "classification", "shared_memory"])] = 1
        case 4:
            parameters["binary_data_size"] = nbytes
        case 5:
            parameters = {k: parameters[k] for k in parameters if k == key}
        case 6:
            parameters["binary_data"] = rng.random() < 0.5
        case 7:
            parameters["shared_memory_region"] = "r" * rng.choice([255, 4096])
        case _:
            parameters = {**parameters, key: parameters.get(key, 0)}
            return parameters, "region parameters repeated"
    return parameters, "region parameters changed"


def _mutate_input(item: dict, rng: random.Random) -> str:
    match rng.randrange(12):
        case 0:
            item["datatype"] = rng.choice(["FP32", "INT64", "BYTES", "fp32", "UINT64", "UINT16"])
        case 1:
            item["shape"] = item["shape"] + [1]
        case 2:
            item["shape"] = [float(d) for d in item["shape"]]
        case 3:
            item["shape"] = [-1] + item["shape"][1:] if item["shape"] else [-1]
        case 4:
            item["shape"] = [MAX_DIM + 1] + item["shape"][1:] if item["shape"] else [2**63]
        case 5:
            if "data" in item:
                item["data"] = item["data"] + [item["data"][0] if item["data"] else 1]
        case 6:
            if "data" in item:
                item["data"] = [item["data"]]
        case 7:
            item["parameters"] = rng.choice([{}, None, {"binary_data_size": -1}, {"x": 1}, []])
        case 8:
            item["extra"] = rng.choice([{"a": [1, {"b": None}]}, "x", 1.5])
        case 9:
            item.pop(rng.choice(["shape", "datatype", "data", "name"]), None)
        case 10:
            item["name"] = rng.choice(["", "input_9", None, 3, "input_0"])
        case _:
            item["data"] = rng.choice([None, "x", {}, [[1, 2], [3]]])
    return "input changed"


def _inputs(specs, rng: random.Random, protocol: str, odd: bool):
    """(input objects, binary payload, label)."""
    label, payload = "", b""
    named = protocol != "native" or rng.random() < 0.5
    items = []
    for spec in specs:
        fields, raw, data = _tensor(spec, rng, odd and rng.random() < 0.5)
        item = {}
        if named:
            item["name"] = spec.name
        elif rng.random() < 0.1:
            item["name"] = None
        item.update(fields)
        if protocol != "native" and rng.random() < 0.2:  # in a shared memory region
            nbytes = int(np.prod(fields["shape"])) * carrier_of(spec.datatype).itemsize
            item["parameters"], changed = region(nbytes, rng, odd and rng.random() < 0.3)
            label = label or changed
            if odd and rng.random() < 0.05:
                item["data"] = data  # and data too
                label = label or "region and data"
        elif protocol == "binary" and rng.random() < 0.9:
            size = len(raw)
            if odd and rng.random() < 0.3:
                size += rng.choice([-1, 1, 4, -(2**62)])
                label = "binary size changed"
            item["parameters"] = {"binary_data_size": size}
            payload += raw
        else:
            item["data"] = data
        keys = list(item)
        rng.shuffle(keys)
        items.append({k: item[k] for k in keys})
    if named and rng.random() < 0.3:
        rng.shuffle(items)
    if odd and items and rng.random() < 0.3:
        label = _mutate_input(rng.choice(items), rng)
    if odd and rng.random() < 0.05:
        items = items[:-1] if rng.random() < 0.5 else items + items[:1]
        label = "input count changed"
    return items, payload, label


def _outputs(specs, rng: random.Random, odd: bool) -> list | None:
    r = rng.random()
    if r < 0.4:
        return None if rng.random() < 0.8 else Raw("null")
    names = sorted(rng.sample(range(len(specs)), rng.randint(1, len(specs))))
    found = []
    for index in names:
        item = {"name": specs[index].name}
        flag = rng.random()
        if flag < 0.4:
            item["parameters"] = {"binary_data": flag < 0.25}
        elif flag < 0.5:
            item["parameters"] = None if flag < 0.45 else {}
        if rng.random() < 0.2:  # into a shared memory region (its byte size is the engine's)
            parameters, _ = region(rng.choice([0, 4, 64, 1 << 20]), rng, odd and rng.random() < 0.5)
            item["parameters"] = {**(item.get("parameters") or {}), **parameters}
        found.append(item)
    if odd:
        match rng.randrange(5):
            case 0:
                found.reverse()
            case 1:
                found.append(dict(found[0]))
            case 2:
                found.append({"name": "output_99"})
            case 3:
                found[0]["parameters"] = {"binary_data": 1}
            case _:
                found = []
    return found


def _body(rng: random.Random, odd: bool):
    """(path, body, Inference-Header-Content-Length or None, label)."""
    entry = rng.choice(TABLE)
    protocol = rng.choice(["native", "v2", "binary"])
    method = "forward"
    if protocol == "native" and len(entry.methods) > 1 and rng.random() < 0.5:
        method = "other"
    signature = entry.methods[method].signature
    items, payload, label = _inputs(signature.inputs, rng, protocol, odd)
    if protocol == "native":
        document = {"model": entry.model, "inputs": items}
        if method != "forward" or rng.random() < 0.2:
            document["method"] = method
        if rng.random() < 0.1:
            document["extra"] = {"ignored": [1, 2]}
        path = "/infer"
        if not entry.default:
            document["model"] = "nope"  # the native API has no versions: an unknown model
    else:
        document = {"inputs": items}
        outputs = _outputs(signature.outputs, rng, odd and rng.random() < 0.3)
        if outputs is not None:
            document["outputs"] = outputs
        if rng.random() < 0.4:
            document["id"] = rng.choice(["r-1", "", "a b/c", "x" * 40, "é", 7, 'q"', "\\", None])
        if rng.random() < 0.1:
            document["parameters"] = rng.choice([{}, None, {"binary_data_output": True}])
        path = f"/v2/models/{entry.model}/infer"
        if not entry.default or rng.random() < 0.3:
            path = f"/v2/models/{entry.model}/versions/{entry.version}/infer"
    keys = list(document)
    rng.shuffle(keys)
    text = dump({k: document[k] for k in keys}, rng).encode()
    if odd and rng.random() < 0.15:
        text = _mutate_text(text, rng)
        label = label or "JSON text changed"
    header = None
    if protocol == "binary":
        header = str(len(text))
        if odd and rng.random() < 0.2:
            header = rng.choice(
                [f" {header} ", f"0{header}", f"+{header}", str(len(text) + 1), "x", "",
                 str(len(text) - 1), str(2**64 + len(text))]
            )  # fmt: skip
            label = label or "binary header changed"
        elif rng.random() < 0.3:
            header = f"{rng.choice(['', ' ', '  '])}{header}{rng.choice(['', ' ', chr(9)])}"
    elif odd and rng.random() < 0.05:
        header = str(len(text))  # a JSON body that says it is all header
    return path, text + payload, header, label or ("" if not odd else "valid values changed")


def _mutate_text(text: bytes, rng: random.Random) -> bytes:
    choices = [
        lambda t: t + b" ", lambda t: t + b"x", lambda t: t + b"\x00",
        lambda t: b"\xef\xbb\xbf" + t,
        lambda t: t.replace(b'"', b"'", 1), lambda t: t[:-1], lambda t: t.replace(b":", b" :", 1),
        lambda t: t.replace(b"{", b'{"model":"tiny",', 1), lambda t: t.replace(b"[", b"[\f", 1),
        lambda t: t.replace(b"true", b"True", 1), lambda t: t.replace(b"\"", b"\"\\u0020", 1),
        lambda t: t.replace(b",", b",,", 1), lambda t: t.replace(b"]", b",]", 1),
        lambda t: t.replace(b'"inputs"', b'"inputs\x01"', 1), lambda t: t + b"\n\r\t",
    ]  # fmt: skip
    return rng.choice(choices)(text)


_HEAD_CHANGES = [
    "duplicate length", "conflicting length", "chunked", "no length", "space before colon",
    "folded header", "LF lines", "HTTP/1.0", "lower-case method", "absolute URI", "a query",
    "an escape", "non-ASCII value", "expect", "upgrade", "length +", "length too long",
    "GET", "double slash", "trailing slash", "two tokens", "two binary headers",
    "a tab in the request line", "no host", "bare CR in a value", "identity encoding",
]  # fmt: skip


def _head(path: str, body: bytes, header: str | None, rng: random.Random, token, odd: bool):
    """(head bytes, label)."""
    length = str(len(body))
    fields = [("Host", "t")]
    if rng.random() < 0.3:
        fields.append(("User-Agent", "fuzz/1.0"))
    if rng.random() < 0.3:
        fields.append(("Content-Type", rng.choice(["application/json", "application/x"])))
    length_value = length if rng.random() < 0.9 else f"{rng.choice(['', ' ', chr(9)])}0{length} "
    fields.append(
        (rng.choice(["Content-Length", "content-length", "CONTENT-LENGTH"]), length_value)
    )
    if header is not None:
        name = rng.choice(["Inference-Header-Content-Length", "inference-header-content-length"])
        fields.append((name, header))
    if rng.random() < 0.2:
        fields.append(("Connection", rng.choice(["keep-alive", "close", "Keep-Alive, close", "x"])))
    if token is not None and rng.random() < 0.95:
        value = rng.choice(
            [f"Bearer {token}", f"bearer  {token}", f"Bearer {token} ", "Bearer x",
             f"Bearer \t{token}", f"Bearer\t{token}", f"BEARER {token}\t", f"Basic {token}",
             f"Bearer {token}x", f" Bearer {token}", "Bearer"]
        )  # fmt: skip
        fields.append(("Authorization", value))
    rng.shuffle(fields)
    method, version, label = "POST", "HTTP/1.1", ""
    if odd:
        change = rng.choice(_HEAD_CHANGES)
        label = change
        match change:
            case "duplicate length":
                fields.append(("Content-Length", length))
            case "conflicting length":
                fields.append(("content-length", str(len(body) + 1)))
            case "chunked":
                fields.append(("Transfer-Encoding", "chunked"))
            case "identity encoding":
                fields.append(("Transfer-Encoding", "identity"))
            case "no length":
                fields = [f for f in fields if f[0].lower() != "content-length"]
            case "space before colon":
                fields.append(("X-A ", "1"))
            case "folded header":
                fields.append(("X-B", "1\r\n 2"))
            case "LF lines":
                pass
            case "HTTP/1.0":
                version = "HTTP/1.0"
            case "lower-case method":
                method = "post"
            case "GET":
                method = "GET"
            case "absolute URI":
                path = "http://t" + path
            case "a query":
                path += "?x=1"
            case "an escape":
                path = path.replace("i", "%69", 1)
            case "non-ASCII value":
                fields.append(("X-C", "\u00e9"))
            case "expect":
                fields.append(("Expect", "100-continue"))
            case "upgrade":
                fields += [("Connection", "Upgrade"), ("Upgrade", "h2c")]
            case "length +":
                fields = [f for f in fields if f[0].lower() != "content-length"]
                fields.append(("Content-Length", "+" + length))
            case "length too long":
                fields = [f for f in fields if f[0].lower() != "content-length"]
                fields.append(("Content-Length", "0" * 20 + length))
            case "double slash":
                path = path.replace("/", "//", 2)
            case "trailing slash":
                path += "/"
            case "two tokens":
                fields += [("Authorization", f"Bearer {token}")] * 2
            case "two binary headers":
                fields.append(("Inference-Header-Content-Length", header or "0"))
            case "a tab in the request line":
                path = path + "\t"
            case "no host":
                fields = [f for f in fields if f[0] != "Host"]
            case "bare CR in a value":
                fields.append(("X-D", "a\rb"))
    lines = [f"{method} {path} {version}"] + [
        f"{n}:{rng.choice(['', ' ', '  '])}{v}" for n, v in fields
    ]
    newline = "\n" if label == "LF lines" else "\r\n"
    return (newline.join(lines) + newline + newline).encode("utf-8"), label


_TAILS = ["pipelined", "garbage", "truncated", "partial next", "one byte more", "CRLF"]


def case(rng: random.Random, token: str | None) -> tuple[bytes, str]:
    """(request bytes, what was changed: '' for a plain request)."""
    odd_body = rng.random() < 0.3
    path, body, header, label = _body(rng, odd_body)
    head, head_label = _head(path, body, header, rng, token, rng.random() < 0.12)
    raw = head + body
    label = ", ".join(x for x in (label, head_label) if x)
    if rng.random() < 0.2:
        tail = rng.choice(_TAILS)
        label = ", ".join(x for x in (label, tail) if x)
        match tail:
            case "pipelined":
                raw += raw
            case "garbage":
                raw += rng.choice([b"x", b"GARBAGE\r\n\r\n", b"\x00\xff", b"\r\n\r\n"])
            case "truncated":
                raw = raw[: rng.randrange(len(raw))]
            case "partial next":
                raw += raw[: rng.randrange(1, len(raw))]
            case "one byte more":
                raw += b"}"
            case _:
                raw += b"\r\n"
    return raw, label


def answer_array(datatype: str, shape: list[int], rng: random.Random) -> np.ndarray:
    """An engine's output: every bit pattern of the datatype is possible (NaN payloads, -0,
    subnormals, infinities), sometimes only the values JSON writes as numbers."""
    carrier = carrier_of(datatype)
    count = int(np.prod(shape)) if shape else 1
    if datatype == "BOOL":
        array = np.array([rng.random() < 0.5 for _ in range(count)], np.bool_)
    elif rng.random() < 0.5 or carrier.kind != "f" and datatype != "BF16":
        array = np.frombuffer(rng.randbytes(count * carrier.itemsize), carrier).copy()
    else:
        values = [_value("FP64" if datatype == "FP64" else "FP32", rng) for _ in range(count)]
        with np.errstate(over="ignore"):
            wide = np.array(values, np.float64)
            array = (
                np.frombuffer(struct.pack(f"<{count}f", *wide.astype(np.float32)), "<u4")
                .__rshift__(16)
                .astype(np.uint16)
                if datatype == "BF16"
                else wide.astype(carrier)
            )
    return array.reshape(shape)
