"""POST /infer as a bare ASGI endpoint, the server's hot path.

FastAPI's request handling costs several times the inference of a small program
(service/protocols/fast_routes.py), so this endpoint reads the body under its limit, parses it
with orjson (infer_body.py keeps the 422s pydantic gave) and writes the answer with orjson, and
the app calls it directly, behind only the token check and the 500 guard. ServiceErrors
are answered by http_errors.service_error_response like every other route's, so no error body
differs. Large bodies are parsed and large answers written in worker processes
(protocols/offload.py and service/inline_policy.py say why and above what), so probes keep
answering meanwhile. A small request whose checks pass is answered by `lane` instead, from the
connection's callbacks (service/protocols/lanes.py); any other goes through `__call__`.
"""

from __future__ import annotations

from service import rules
from service.dataplane.service import ModelService
from service.dataplane.types import InferRequest
from service.errors import ServiceError, input_problem
from service.protocols.bodies import known_model, read_body, respond
from service.protocols.disconnect import ClientDisconnected, log_aborted, unless_disconnected
from service.protocols.http_errors import service_error_response
from service.protocols.lanes import Reply
from service.protocols.native import infer_body
from service.protocols.offload import Offload

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

    def lane(self, scope, body: bytes, reply: Reply):
        """What cancels the request, once sent to the engine; None to leave it to __call__."""
        if not self.offload.policy.parse_inline(len(body)):
            return None
        try:
            model, method, tensors, undecodable = infer_body.parse(body)
        except ServiceError:
            return None
        if undecodable is not None:
            return None
        request = InferRequest(model=model, method=method, inputs=tensors, protocol="native")
        return self.service.submit(request, lambda outcome: self._answer(outcome, reply))

    def _answer(self, outcome, reply: Reply) -> None:
        if isinstance(outcome, BaseException):
            reply.fail(outcome, service_error_response)
            return
        try:
            inline = self.offload.policy.write_inline(sum(t.array.size for t in outcome.outputs))
            if inline:
                text = infer_body.dump(outcome.model, outcome.method, outcome.outputs)
        except Exception as exc:
            outcome.release()
            reply.fail(exc, service_error_response)
            return
        if not inline:  # written in a worker process, as __call__'s are (which frees the outputs)
            reply.asgi(lambda scope, receive, send: self._send_answer(scope, send, outcome))
            return
        outcome.release()
        reply.ok(_JSON, [], text)
