"""POST /v2/models/{model}[/versions/{version}]/infer as a bare ASGI endpoint, the REST
protocol's hot path.

As the native /infer (service/front/protocols/native/infer_endpoint.py): no Starlette Request or
Response and no FastAPI, the headers read once from the scope, and the answer sent as one head
and (up to transport.JOIN_BELOW) one body message: measured on a front, the request and response
objects and the message per part cost more than the protocol's own work for a small tensor.
Errors are this protocol's codes and shape (errors.service_error_response); anything unexpected
is the app's 500 guard's. A small request that arrives whole is usually taken by the fronts'
native path before it gets here (service/front/native_path.py); this is the path for every
other.
"""

from __future__ import annotations

from service.errors import ServiceError, TooLarge
from service.front.protocols.bodies import known_model, read_body, refuse_when_full
from service.front.protocols.disconnect import ClientDisconnected, log_aborted, unless_disconnected
from service.front.protocols.v2_rest import binary, codec, shared_memory
from service.front.protocols.v2_rest.errors import service_error_response
from service.front.protocols.v2_rest.transport import read_aligned_body, send_parts

_HEADER = binary.HEADER.lower().encode()
_JSON = b"application/json"
_BINARY = b"application/octet-stream"


def _max_json(settings) -> int:
    """JSON bodies are bounded by their own limit and by the limit of every inference body."""
    return min(settings.max_json_bytes, settings.max_infer_bytes)


def _binary_header(scope: dict) -> str | None:
    for key, value in scope["headers"]:
        if key == _HEADER:
            return value.decode("latin-1")
    return None


def _header_length(text: str) -> int | None:
    """Where the binary data will start, to align it; None for a value split() will refuse."""
    text = text.strip()
    return int(text) if text.isascii() and text.isdigit() else None


async def infer_endpoint(scope, receive, send) -> None:
    """The two infer routes (FAST_ROUTES in routes.py); the app's state holds the dataplane."""
    params = scope["path_params"]
    state = scope["app"].state
    try:
        await _serve(state, scope, receive, send, params)
    except ServiceError as exc:
        await service_error_response(exc)(scope, receive, send)
    except ClientDisconnected:
        log_aborted(scope)  # nobody reads an answer; a request not run yet never runs


async def _serve(state, scope, receive, send, params) -> None:
    service, offload = state.service, state.offload
    model, version = params["model"], params.get("version")
    await known_model(service, model, version)  # an unknown one is answered before the body
    header_length = _binary_header(scope)
    refuse_when_full(service, model, version, codec.protocol(header_length))  # a full one too
    settings = service.settings
    # Without the header the body is JSON, whatever its Content-Type (tritonclient sends none).
    if header_length is None:
        body = await read_body(scope, receive, _max_json(settings), "a JSON inference request body")
        lease = None
    else:
        body, lease = await read_aligned_body(
            scope,
            receive,
            settings.max_infer_bytes,
            "a binary inference request body",
            _header_length(header_length),
            service.body_buffer,
            state.arriving,
        )
    try:
        response, parsed = await _infer(
            service, offload, model, version, body, header_length, lease, receive
        )
    finally:
        del body
        if lease is not None:
            lease.release()
    await _send_answer(scope, send, offload, response, parsed)


async def _send_answer(scope, send, offload, response, parsed) -> None:
    try:
        head, as_json, parts = codec.response_header(response, parsed)
        text = await offload.write(
            sum(tensor.array.size for _, tensor in as_json),
            codec.dump_response,
            head,
            [(i, t.array, t.datatype) for i, t in as_json],
        )
    except BaseException:
        response.release()
        raise
    if not parts:
        response.release()
        await send_parts(scope, send, _JSON, [], [text], None)
    else:
        header = [(_HEADER, str(len(text)).encode())]
        await send_parts(scope, send, _BINARY, header, [text, *parts], response.release)


async def _infer(service, offload, model, version, body, header_length, lease, receive):
    """(the dataplane's response, the parsed request): decoding and running, which may end while
    the body is still needed; the caller then frees the body and encodes the answer.
    ClientDisconnected if the client goes away meanwhile (the request is cancelled)."""
    max_json = _max_json(service.settings)
    header, payload = binary.split(body, header_length)
    if header.nbytes > max_json:
        raise TooLarge(f"the request's JSON header is larger than the limit of {max_json} bytes")
    text = body if payload is None else bytes(header)
    parsed = await offload.parse(codec.parse_header, text)
    del text, header
    dataplane_request = await offload.slice(
        0 if payload is None else payload.nbytes, codec.to_request, model, version, parsed, payload
    )
    dataplane_request.memory = lease
    if dataplane_request.shared_memory:
        service = shared_memory.engine_of(service)
    return await unless_disconnected(receive, service.infer(dataplane_request)), parsed
