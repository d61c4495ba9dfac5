"""`grpc.health.v1.Health` on the gRPC port: what Kubernetes' native gRPC probes and
grpc_health_probe ask, answered from the same readiness as `/v2/health/ready` and
ServerReady/ModelReady.

Service "" is the server: SERVING when it is ready (service.ready), NOT_SERVING otherwise. Any
other service name is a model ("name", or "name/version" for one version): SERVING when it can
serve now, NOT_SERVING when it exists but cannot, and NOT_FOUND (Check) or SERVICE_UNKNOWN
(Watch) when there is no such model, as the protocol asks. The server's health needs no token,
like the HTTP health routes (service/auth.py): a probe cannot present one. A model's needs the
inference token when one is set, as ModelReady and /v2/models/<m>/ready do: model names are not
disclosed to whoever asks.

Readiness changes are not pushed to this process (a front reads the engine's control page), so
Watch re-reads it every WATCH_INTERVAL_S and sends a message only when the answer changed.
"""

from __future__ import annotations

import asyncio

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from service import auth
from service.errors import NotFound, ServiceError
from service.front.protocols.v2_grpc.auth import CODES

SERVICE = "grpc.health.v1.Health"
WATCH_INTERVAL_S = 0.1
_Status = health_pb2.HealthCheckResponse.ServingStatus
SERVING, NOT_SERVING = _Status.Value("SERVING"), _Status.Value("NOT_SERVING")
SERVICE_UNKNOWN = _Status.Value("SERVICE_UNKNOWN")


class HealthServicer(health_pb2_grpc.HealthServicer):
    def __init__(self, service, policy: auth.Policy | None):
        self.service = service
        self.policy = policy

    async def _check_token(self, name: str, context) -> None:
        if not name or self.policy is None:
            return
        metadata = dict(context.invocation_metadata() or ())
        denial = self.policy.check(auth.INFER, metadata.get("authorization"))
        if denial is not None:
            await context.abort(CODES[denial.status], denial.message)

    async def _status(self, name: str) -> int | None:
        """The status of service `name`, or None when no such service exists."""
        if not name:
            return SERVING if self.service.ready else NOT_SERVING
        model, _, version = name.partition("/")
        try:
            ready = await self.service.model_ready(model, version or None)
        except NotFound:
            return None
        except ServiceError:  # unavailable, or the engine is restarting: it exists, not serving
            return NOT_SERVING
        return SERVING if ready and self.service.ready else NOT_SERVING

    async def Check(self, request, context):  # noqa: N802 (the protocol's name)
        await self._check_token(request.service, context)
        status = await self._status(request.service)
        if status is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"unknown service {request.service!r}")
        return health_pb2.HealthCheckResponse(status=status)

    async def Watch(self, request, context):  # noqa: N802
        await self._check_token(request.service, context)
        last = None
        while True:
            status = await self._status(request.service)
            status = SERVICE_UNKNOWN if status is None else status
            if status != last:
                yield health_pb2.HealthCheckResponse(status=status)
                last = status
            await asyncio.sleep(WATCH_INTERVAL_S)


def add_to(server: grpc.aio.Server, service, policy: auth.Policy | None) -> None:
    health_pb2_grpc.add_HealthServicer_to_server(HealthServicer(service, policy), server)
