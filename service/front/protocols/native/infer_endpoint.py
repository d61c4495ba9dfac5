"""POST /infer as a bare ASGI endpoint, the server's hot path.

FastAPI's request handling costs several times the inference of a small program
(service/front/protocols/fast_routes.py), so this endpoint reads the body under its limit, parses it
with orjson (infer_body.py keeps the 422s pydantic gave) and writes the answer with orjson, and
the app calls it directly, behind only the token check and the 500 guard. ServiceErrors
are answered by http_errors.service_error_response like every other route's, so no error body
differs. Large bodies are parsed and large answers written in worker processes
(protocols/offload.py and service/inline_policy.py say why and above what), so probes keep
answering meanwhile. A small request that arrives whole is usually taken by the fronts' native
path before it gets here (service/front/protocols/front_lane.py); this is the path for every other.
"""

from __future__ import annotations

from service import rules
from service.dataplane.service import ModelService
from service.dataplane.types import InferRequest
from service.errors import ServiceError, input_problem
from service.front.protocols.bodies import known_model, read_body, respond
from service.front.protocols.disconnect import ClientDisconnected, log_aborted, unless_disconnected
from service.front.protocols.http_errors import service_error_response
from service.front.protocols.native import infer_body
from service.front.protocols.offload import Offload

_JSON = b"application/json"


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
            log_aborted(scope)  # nobody reads an answer

    async def _infer(self, scope, receive, send) -> None:
        settings = self.service.settings
        body = await read_body(
            scope, receive, min(settings.max_json_bytes, settings.max_infer_bytes), "request body"
        )
        model, method, tensors, undecodable = await self.offload.parse(infer_body.parse, body)
        del body
        if undecodable is not None:
            await known_model(self.service, model)
            label, reason = undecodable
            raise input_problem(label, rules.INPUT_DATA, reason)
        response = await unless_disconnected(
            receive,
            self.service.infer(
                InferRequest(model=model, method=method, inputs=tensors, protocol="native")
            ),
        )
        await self._send_answer(scope, send, response)

    async def _send_answer(self, scope, send, response) -> None:
        try:
            text = await self.offload.write(
                sum(t.array.size for t in response.outputs),
                infer_body.dump,
                response.model,
                response.method,
                response.outputs,
            )
        finally:
            response.release()
        await respond(scope, send, _JSON, [], text)
