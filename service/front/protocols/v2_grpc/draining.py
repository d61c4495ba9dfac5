"""gRPC's part of a front's drain (service/front/protocols/drain.py): once it began, every call
but the health and liveness/readiness ones is answered UNAVAILABLE (HTTP answers 503), and
readiness itself reads false from the engine client. Calls already running are not touched: the
server's stop gives them what is left of the grace."""

from __future__ import annotations

import grpc

from service.front.protocols.drain import MESSAGE, Drain
from service.front.protocols.v2_grpc.auth import denied

# Still answered while draining: what probes and load balancers ask.
_ANSWERED = frozenset(
    {
        "/grpc.health.v1.Health/Check",
        "/grpc.health.v1.Health/Watch",
        "/inference.GRPCInferenceService/ServerLive",
        "/inference.GRPCInferenceService/ServerReady",
        "/inference.GRPCInferenceService/ModelReady",
    }
)


class DrainInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, drain: Drain):
        self.drain = drain

    async def intercept_service(self, continuation, details: grpc.HandlerCallDetails):
        handler = await continuation(details)
        if not self.drain.active or handler is None or details.method in _ANSWERED:
            return handler
        return denied(grpc.StatusCode.UNAVAILABLE, MESSAGE, handler)
