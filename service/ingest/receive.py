"""An upload's two halves: receiving it into the staging area, where its bytes arrive (a front,
or the engine for its own reloads), then deploying the staged upload (contract.Deploy, which the
engine serves). Refusals while receiving (too large, a malformed form) are counted as the
refusals ingest makes are, through the dataplane's upload_refused.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from service.errors import ServiceError
from service.ingest.staging import StagedUpload


async def receive_and_deploy(dataplane, receive: Callable[[], Awaitable[StagedUpload]]) -> dict:
    """`dataplane`: a ModelService or a front's EngineClient (its deploy and upload_refused)."""
    begun = time.perf_counter()
    try:
        upload = await receive()
    except ServiceError as exc:
        dataplane.upload_refused(None, exc, time.perf_counter() - begun)
        raise
    return await dataplane.deploy(upload, time.perf_counter() - begun)
