"""Tokens for gRPC: the same policy and scopes as HTTP (service.auth), read from call metadata.

An interceptor runs before any handler, so a denied call never reaches the dataplane; it answers
UNAUTHENTICATED where HTTP answers 401 and PERMISSION_DENIED where HTTP answers 403.
"""

from __future__ import annotations

import grpc

from service import auth

_CODES = {401: grpc.StatusCode.UNAUTHENTICATED, 403: grpc.StatusCode.PERMISSION_DENIED}


def _denied(code: grpc.StatusCode, message: str, handler: grpc.RpcMethodHandler):
    async def abort(_request, context):
        await context.abort(code, message)

    if handler.request_streaming or handler.response_streaming:
        raise NotImplementedError("GRPCInferenceService has only unary calls")
    return grpc.unary_unary_rpc_method_handler(
        abort,
        request_deserializer=handler.request_deserializer,
        response_serializer=handler.response_serializer,
    )


class TokenInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, policy: auth.Policy):
        self.policy = policy

    async def intercept_service(self, continuation, details: grpc.HandlerCallDetails):
        metadata = {key: value for key, value in (details.invocation_metadata or ())}
        denial = self.policy.check(auth.grpc_scope(details.method), metadata.get("authorization"))
        handler = await continuation(details)
        if denial is None or handler is None:
            return handler
        return _denied(_CODES[denial.status], denial.message, handler)
