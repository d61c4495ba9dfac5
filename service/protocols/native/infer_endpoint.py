"""POST /infer as a bare ASGI endpoint, the server's hot path.

FastAPI's request handling (per-request telemetry checks, middleware layers, dependency solving,
pydantic validation of every tensor value in and out, a second serialization) cost several times
the inference of a small program. So this endpoint reads the body under its limit, parses it with
orjson (infer_body.py keeps the 422s pydantic gave) and writes the answer with orjson, and the app
(service/app.py) calls it directly, behind only the token check and the 500 guard. ServiceErrors
are answered by http_errors.service_error_response like every other route's, so no error body
differs. Large bodies are parsed and large answers written in worker processes
(protocols/offload.py says why), so probes keep answering meanwhile.
"""

from __future__ import annotations

from service.dataplane.service import ModelService
from service.dataplane.types import InferRequest
from service.errors import ServiceError, too_large
from service.protocols.disconnect import ClientDisconnected, unless_disconnected
from service.protocols.http_errors import service_error_response
from service.protocols.native import infer_body
from service.protocols.offload import INLINE_JSON_BYTES, INLINE_JSON_ELEMENTS, Offload

_HEADERS = [(b"content-type", b"application/json")]


async def read_body(scope, receive, limit: int) -> bytes:
    """The whole body, refused as soon as it (declared or streamed) passes `limit`."""
    for key, value in scope["headers"]:
        if key == b"content-length":
            if value.isdigit() and int(value) > limit:
                raise too_large("request body", limit)
            break
    message = await receive()
    if message["type"] != "http.request":
        raise ClientDisconnected()
    body = message.get("body", b"")
    if not message.get("more_body", False):
        if len(body) > limit:
            raise too_large("request body", limit)
        return body
    chunks, size = [body], len(body)
    while message.get("more_body", False):
        message = await receive()
        if message["type"] != "http.request":
            raise ClientDisconnected()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise too_large("request body", limit)
        chunks.append(chunk)
    return b"".join(chunks)


class InferEndpoint:
    def __init__(self, service: ModelService, offload: Offload):
        self.service = service
        self.offload = offload

    async def __call__(self, scope, receive, send) -> None:
        try:
            await self._infer(scope, receive, send)
        except ServiceError as exc:
            await service_error_response(exc)(scope, receive, send)
        except ClientDisconnected:
            pass  # nobody reads an answer

    async def _infer(self, scope, receive, send) -> None:
        settings = self.service.settings
        body = await read_body(
            scope, receive, min(settings.max_json_bytes, settings.max_infer_bytes)
        )
        if len(body) <= INLINE_JSON_BYTES:
            model, method, tensors = infer_body.parse(body)
        else:
            model, method, tensors = await self.offload.call(infer_body.parse, body)
        del body
        response = await unless_disconnected(
            receive, self.service.infer(InferRequest(model=model, method=method, inputs=tensors))
        )
        try:
            if sum(t.array.size for t in response.outputs) <= INLINE_JSON_ELEMENTS:
                text = infer_body.dump(response.model, response.method, response.outputs)
            else:
                text = await self.offload.call(
                    infer_body.dump, response.model, response.method, response.outputs
                )
        finally:
            response.release()
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [*_HEADERS, (b"content-length", str(len(text)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": text})
