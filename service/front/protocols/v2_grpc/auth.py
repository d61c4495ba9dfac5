"""Tokens for gRPC: the same policy and scopes as HTTP (service.auth), read from call metadata.

An interceptor runs before any handler, so a denied call never reaches the dataplane; it answers
UNAUTHENTICATED where HTTP answers 401 and PERMISSION_DENIED where HTTP answers 403.

grpcio's server hands the interceptor the call's metadata before it has received the request
message, and receives the message only when the handler asks for it: a unary handler asks
first thing, a request-streaming one when it iterates. So a denied call gets a request-streaming
handler that answers without iterating, and its message (a 200 MB one, say) is never assembled
in this process; the client, whatever it sent, reads the status as for a unary call.
"""

from __future__ import annotations

import grpc

from service import auth

CODES = {401: grpc.StatusCode.UNAUTHENTICATED, 403: grpc.StatusCode.PERMISSION_DENIED}


def denied(code: grpc.StatusCode, message: str, handler: grpc.RpcMethodHandler):
    """A handler answering `code` in place of `handler`, without reading the request."""

    async def deny(_unread_requests, context) -> bytes:
        context.set_code(code)
        context.set_details(message)
        return b""  # a non-OK call's response is discarded

    if handler.request_streaming or handler.response_streaming:
        raise NotImplementedError("GRPCInferenceService has only unary calls")
    return grpc.stream_unary_rpc_method_handler(deny)


class TokenInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, policy: auth.Policy):
        self.policy = policy

    async def intercept_service(self, continuation, details: grpc.HandlerCallDetails):
        metadata = {key: value for key, value in (details.invocation_metadata or ())}
        denial = self.policy.check(auth.grpc_scope(details.method), metadata.get("authorization"))
        handler = await continuation(details)
        if denial is None or handler is None:
            return handler
        return denied(CODES[denial.status], denial.message, handler)
