"""The Python path of a front, as one function of a request's bytes, for the differential test
of the native path (tests/unit/test_front_differential.py).

`python_take` runs what a front's Python runs for a request that arrives whole: httptools (the
parser uvicorn uses) for the head, the fast routes' own matching, the token policy, the body
codecs (native/infer_body.py, v2_rest/binary.py and codec.py) and the binding to the method's
signature (dataplane/signature.py), over a model table that also feeds the native path
(`entries`), so the two read the same models. `python_answer` writes the bytes the Python path
writes for an engine's answer. `python_take_grpc` and `python_answer_grpc` do the same for a
gRPC ModelInfer message (v2_grpc/servicer.py). Nothing here decides anything of its own: each
step is the server's function, called as the server calls it.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass, field
from types import SimpleNamespace

import httptools
import numpy as np
from google.protobuf.message import DecodeError

from service import auth
from service.dataplane.signature import bind_inputs, select_outputs
from service.dataplane.types import (
    InferRequest,
    InferResponse,
    MethodSignature,
    Tensor,
    TensorSpec,
)
from service.errors import ServiceError
from service.front.engine_requests import _lane_plan, _lane_refs
from service.front.protocols import json_tensors
from service.front.protocols.fast_routes import FastRoute, FastRoutes
from service.front.protocols.native import infer_body
from service.front.protocols.v2_grpc import servicer as grpc_servicer
from service.front.protocols.v2_rest import binary, codec
from service.front.protocols.v2_rest import routes as v2_routes
from service.shared import lane_frames

# The date and server lines uvicorn writes (http_transport.py passes its list on).
HEADERS = b"date: Thu, 03 Dec 2026 00:00:00 GMT\r\nserver: uvicorn\r\n"
GENERATION = 7
MAX_DIM = json_tensors.MAX_DIM


@dataclass(frozen=True)
class Method:
    route: int
    signature: MethodSignature


@dataclass(frozen=True)
class Entry:
    model: str
    version: str
    default: bool
    max_batch: int
    methods: dict[str, Method]


def _specs(items) -> list[TensorSpec]:
    return [TensorSpec(name, dt, list(shape), dyn) for name, dt, shape, dyn in items]


def _method(route: int, name: str, inputs, outputs) -> Method:
    return Method(route, MethodSignature(name, _specs(inputs), _specs(outputs)))


_MIX_FORWARD = (
    [("input_0", "INT64", [4], True), ("input_1", "BOOL", [2, 3], False),
     ("input_2", "FP16", [], False)],
    [("output_0", "FP64", [3], True), ("output_1", "INT8", [2, 2], False),
     ("output_2", "BF16", [4], True), ("output_3", "BOOL", [], False),
     ("output_4", "UINT8", [0, 3], False)],
)  # fmt: skip

# Every served datatype, static and dynamic shapes, 0-dim and empty tensors, dimensions at the
# protocol's bound, two versions of one model, a method besides forward, a batched model.
TABLE = [
    Entry("tiny", "3", True, 0, {
        "forward": _method(11, "forward", [("input_0", "FP32", [2, 8], False)],
                           [("output_0", "FP32", [2, 4], False)])}),
    Entry("mix", "1", True, 0, {
        "forward": _method(12, "forward", *_MIX_FORWARD),
        "other": _method(13, "other", [("input_0", "INT32", [5], True)],
                         [("output_0", "INT16", [5], True), ("output_1", "FP32", [], False)])}),
    Entry("mix", "2", False, 0, {"forward": _method(14, "forward", *_MIX_FORWARD)}),
    Entry("wide", "1", True, 0, {
        "forward": _method(15, "forward",
                           [("input_0", "FP32", [3, 4], True), ("input_1", "FP64", [2], False),
                            ("input_2", "UINT8", [6], True), ("input_3", "INT8", [2], False),
                            ("input_4", "INT16", [3], True), ("input_5", "INT32", [2], False),
                            ("input_6", "BF16", [2], True), ("input_7", "FP16", [2], True)],
                           [("output_0", "FP32", [3, 4], True), ("output_1", "INT64", [2], False),
                            ("output_2", "FP16", [3], True), ("output_3", "UINT8", [2], False)])}),
    Entry("huge", "1", True, 0, {
        "forward": _method(16, "forward", [("input_0", "FP32", [MAX_DIM, MAX_DIM], True)],
                           [("output_0", "FP32", [MAX_DIM], True)])}),
    Entry("wrap", "1", True, 0, {  # 2^30 x 2^30 x 4 FP32: 2^64 bytes, 0 in 64 bits
        "forward": _method(19, "forward", [("input_0", "FP32", [2**30, 2**30, 4], True)],
                           [("output_0", "FP32", [4], True)])}),
    Entry("scalar", "1", True, 0, {
        "forward": _method(18, "forward", [("input_0", "FP64", [], False),
                                           ("input_1", "BOOL", [0], False)],
                           [("output_0", "INT32", [], False), ("output_1", "FP32", [0], False)])}),
    Entry("batch", "1", True, 4, {
        "forward": _method(17, "forward", [("input_0", "FP32", [4, 3], True)],
                           [("output_0", "FP32", [4, 2], True)])}),
]  # fmt: skip

DEFAULTS = {e.model: e for e in TABLE if e.default}
VERSIONS = {(e.model, e.version): e for e in TABLE}


def entries() -> list:
    """TABLE as etrt_front.FrontLane.publish takes it (service/front/native_path._entries)."""
    found = []
    for e in TABLE:
        methods = [
            (
                name,
                m.route,
                [(s.name, s.datatype, list(s.shape), s.dynamic) for s in m.signature.inputs],
                [(s.name, s.datatype, list(s.shape), s.dynamic, True) for s in m.signature.outputs],
            )
            for name, m in e.methods.items()
        ]
        found.append((e.model, e.version, e.default, e.max_batch, methods))
    return found


class Refused(Exception):
    """What the Python path answers with an error (or a route other than inference)."""


@dataclass
class Taken:
    """A request as the Python path would send it to the engine."""

    protocol: str  # "native" or "v2"
    entry: Entry
    model: str  # as the request names it
    method: str
    route: int
    arrays: list[np.ndarray]  # in the method's input order (an input in a region: no bytes)
    outputs: list[int]  # method output indices, in the order answered
    keep_alive: bool
    parsed: object = None  # v2: codec.ParsedRequest; gRPC: the ModelInferRequest
    headers: list = field(default_factory=list)
    refs: list = field(default_factory=list)  # shared memory references, as lane_frames.request
    shared: object = None  # gRPC: the request's SharedTensors (service/shm/refs.py)


class _Message:
    """httptools' callbacks, as uvicorn's protocol collects them."""

    def __init__(self):
        self.url, self.headers, self.body = b"", [], bytearray()
        self.begun, self.complete, self.keep_alive = 0, False, False
        self.parser = None

    def on_message_begin(self):
        self.begun += 1

    def on_url(self, url):
        self.url += url

    def on_header(self, name, value):
        self.headers.append((name.lower(), value.rstrip(b" \t")))  # as uvicorn keeps them

    def on_headers_complete(self):
        parser = self.parser  # uvicorn's cycle takes keep-alive here, before the body
        self.keep_alive = parser.get_http_version() != "1.0" and parser.should_keep_alive()

    def on_body(self, body):
        self.body += body

    def on_message_complete(self):
        self.complete = True


_FAST = FastRoutes(
    [FastRoute("/infer", None, None, "infer"), *v2_routes.FAST_ROUTES], lambda endpoint: endpoint
)
_V2_PATH = "/v2/models/"


@dataclass(frozen=True)
class Limits:
    native_body: int
    v2_body: int
    json: int


def _header(headers: list, name: bytes) -> str | None:
    return next((v.decode("latin-1") for k, v in headers if k == name), None)


def _entry(model: str, version: str | None) -> Entry:
    found = DEFAULTS.get(model) if version is None else VERSIONS.get((model, version))
    if found is None:
        raise Refused(f"unknown model {model!r} version {version!r}")
    return found


def _signature(entry: Entry, method: str) -> Method:
    if method not in entry.methods:
        raise Refused(f"unknown method {method!r}")
    return entry.methods[method]


def python_take(raw: bytes, limits: Limits, token: str | None) -> Taken:
    """The request at the start of `raw`, which must be exactly one whole request, as the Python
    path reads it; Refused for anything it would not run."""
    message = _Message()
    parser = message.parser = httptools.HttpRequestParser(message)
    try:
        parser.feed_data(raw)
    except httptools.HttpParserError as exc:
        raise Refused(f"httptools: {exc}") from None
    if not message.complete or message.begun != 1:
        raise Refused(f"not one whole message: {message.begun} begun, {message.complete}")
    if parser.get_method() != b"POST":
        raise Refused("not POST")
    path = httptools.parse_url(message.url).path.decode("ascii")
    if "%" in path:
        path = urllib.parse.unquote(path)
    headers = message.headers
    policy = auth.Policy(admin_token=None, infer_token=token)
    denial = policy.check(auth.http_scope("POST", path), _header(headers, b"authorization"))
    if denial is not None:
        raise Refused(f"token: {denial.status}")
    matched = _FAST.match("POST", path)
    if matched is None:
        raise Refused(f"not an inference route: {path!r}")
    _, params, _ = matched
    body = bytes(message.body)
    try:
        if not params:
            return _native(body, limits, headers, message.keep_alive)
        return _v2(body, params, limits, headers, message.keep_alive)
    except (ServiceError, json_tensors.CodecError) as exc:
        raise Refused(f"{type(exc).__name__}: {exc}") from None


def _native(body: bytes, limits: Limits, headers: list, keep_alive: bool) -> Taken:
    if len(body) > limits.native_body:
        raise Refused("too large")
    model, method, tensors, undecodable = infer_body.parse(body)
    if undecodable is not None:
        raise Refused(f"undecodable {undecodable}")
    entry = _entry(model, None)
    found = _signature(entry, method)
    arrays = bind_inputs(tensors, found.signature)
    outputs = select_outputs(found.signature, None)
    return Taken("native", entry, model, method, found.route, arrays, outputs, keep_alive)


def _v2(body: bytes, params: dict, limits: Limits, headers: list, keep_alive: bool) -> Taken:
    entry = _entry(params["model"], params.get("version"))
    header_length = _header(headers, binary.HEADER.lower().encode())
    if len(body) > (limits.json if header_length is None else limits.v2_body):
        raise Refused("too large")
    header, payload = binary.split(body, header_length)
    if header.nbytes > limits.json:
        raise Refused("JSON header too large")
    parsed = codec.parse_header(body if payload is None else bytes(header))
    request = codec.to_request(params["model"], params.get("version"), parsed, payload)
    found = _signature(entry, request.method)
    signature = found.signature
    bound = bind_inputs(request.inputs, signature)
    outputs = select_outputs(signature, request.outputs)
    shared = request.shared_memory
    arrays = [a if shared and s.name in shared.inputs else np.array(a)
              for s, a in zip(signature.inputs, bound)]  # fmt: skip
    refs = _refs(entry, request, signature, outputs, bound) if shared else []
    return Taken(
        "v2", entry, params["model"], request.method, found.route, arrays, outputs, keep_alive,
        parsed, headers, refs,
    )  # fmt: skip


def _refs(entry: Entry, request, signature, asked: list[int], bound: list) -> list:
    """The request's shared memory references as the front sends them in its lane message
    (engine_requests._dispatch); Refused when it would send them otherwise (to the engine's
    Python, which words what is wrong with them)."""
    routes = SimpleNamespace(routes={request.method: 0}, version=entry.version)
    lane = _lane_plan(routes, request, signature, asked)
    shared = request.shared_memory
    placed = []
    for spec, array in zip(signature.inputs, bound):
        ref = shared.inputs.get(spec.name)
        where = 0 if ref is None else (ref.region, ref.byte_size, ref.offset)
        placed.append((spec.name, spec.datatype, tuple(array.shape), where))
    refs = None if lane is None else _lane_refs(shared, placed, lane)
    inputs = [(0, p[2]) for p in placed]
    if refs is None or not lane_frames.fits(inputs, len(signature.outputs), refs):
        raise Refused("its shared memory references are the engine's Python's to judge")
    return refs


def python_answer(taken: Taken, outputs: list[np.ndarray]) -> bytes:
    """The HTTP answer the Python path writes for the engine's `outputs` (one per
    taken.outputs), as http_transport.GatheringHttpToolsProtocol._respond lays it out."""
    specs = taken.entry.methods[taken.method].signature.outputs
    tensors = [
        Tensor(specs[i].name, specs[i].datatype, array) for i, array in zip(taken.outputs, outputs)
    ]
    extra = b""
    if taken.protocol == "native":
        content_type, body = (
            b"application/json",
            infer_body.dump(taken.model, taken.method, tensors),
        )
    else:
        parsed = taken.parsed
        response = InferResponse(taken.model, taken.entry.version, taken.method, parsed.id, tensors)
        header, as_json, parts = codec.response_header(response, parsed)
        text = codec.dump_response(header, [(i, t.array, t.datatype) for i, t in as_json])
        content_type, body = b"application/json", text
        if parts:
            content_type = b"application/octet-stream"
            extra = b"inference-header-content-length: " + str(len(text)).encode() + b"\r\n"
            body = b"".join([text, *parts])
    head = b"HTTP/1.1 200 OK\r\n" + HEADERS + extra + b"content-type: " + content_type
    head += b"\r\ncontent-length: " + str(len(body)).encode() + b"\r\n"
    if not taken.keep_alive:
        head += b"connection: close\r\n"
    return head + b"\r\n" + body


def python_take_grpc(wire: bytes) -> Taken:
    """A ModelInfer message as the servicer reads it (parse_infer, then ModelInfer's request,
    with no deadline) and the front sends it as a lane request, its shared memory references
    included; Refused for anything it would not send so."""
    try:
        parsed = grpc_servicer.parse_infer(wire)
        request = parsed.request
        parameters = grpc_servicer._parameters(request.parameters)
        method = parameters.pop("method", "forward")
        if not isinstance(method, str):
            raise Refused("an odd method: not compared here")
        timeout_s = grpc_servicer._timeout_s(parameters, None)
        asked = grpc_servicer._requested_outputs(request.outputs)
        entry = _entry(request.model_name, request.model_version or None)
        found = _signature(entry, method)
        signature = found.signature
        bound = bind_inputs([Tensor(*item) for item in parsed.inputs], signature)
        outputs = select_outputs(signature, asked)
    except (ServiceError, DecodeError) as exc:
        raise Refused(f"{type(exc).__name__}: {exc}") from None
    shared = parsed.shared
    infer = InferRequest(
        request.model_name, [], method, parameters=parameters, timeout_s=timeout_s,
        shared_memory=shared,
    )  # fmt: skip
    routes = SimpleNamespace(routes={method: found.route}, version=entry.version)
    if _lane_plan(routes, infer, signature, outputs) is None:
        raise Refused("not a lane request: the engine's Python would run it")
    refs = _refs(entry, infer, signature, outputs, bound) if shared else []
    arrays = [a if shared and s.name in shared.inputs else np.array(a)
              for s, a in zip(signature.inputs, bound)]  # fmt: skip
    return Taken(
        "gRPC", entry, request.model_name, method, found.route, arrays, outputs, True, request,
        refs=refs, shared=shared,
    )  # fmt: skip


def python_answer_grpc(taken: Taken, outputs: list[np.ndarray]) -> bytes:
    """The ModelInferResponse message the servicer writes for the engine's `outputs`."""
    specs = taken.entry.methods[taken.method].signature.outputs
    tensors = [
        Tensor(specs[i].name, specs[i].datatype, array) for i, array in zip(taken.outputs, outputs)
    ]
    response = InferResponse(
        taken.model, taken.entry.version, taken.method, taken.parsed.id or None, tensors
    )
    return grpc_servicer._infer_response(response, taken.shared or None)
