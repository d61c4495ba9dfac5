"""A front's drain after SIGTERM: what the protocols refuse, and until when work may finish.

Kubernetes sends SIGTERM, stops routing to the pod once its readiness probe fails, and kills it
terminationGracePeriodSeconds later (30 s by default). So from the signal on, readiness is false
on every protocol (the engine client's `ready`, which /health/ready, /v2/health/ready, gRPC
ServerReady and grpc.health.v1 all read), every new request is answered 503 (gRPC UNAVAILABLE),
liveness stays true (a draining server is not dead), and the requests already in flight get
`grace_s` to finish before the front stops (service/front/draining.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

# What a draining front still answers normally: liveness, on both protocols.
LIVE_PATHS = frozenset({"/health/live", "/v2/health/live"})
MESSAGE = "the server is shutting down; send this request to another replica"


@dataclass
class Drain:
    grace_s: float
    # Read on every request: a plain attribute, not a property.
    active: bool = False
    began: float = 0.0

    def begin(self) -> None:
        if not self.active:
            self.began = time.monotonic()
            self.active = True

    def remaining_s(self) -> float:
        """Seconds of the grace left (all of it before the drain began)."""
        if not self.active:
            return self.grace_s
        return max(0.0, self.began + self.grace_s - time.monotonic())
