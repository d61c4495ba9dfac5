"""The model repository extension: index, load (with Triton's file overrides) and unload.

`load` with `"file:<version>/<filename>"` parameters (base64 content, as tritonclient's
load_model(name, files=...) sends them) is an upload, decoded into staging as it arrives
(load_body.py): the dataplane runs the same ingest as POST /models, with the same limits, rules
and refusals, and the model becomes exactly the versions uploaded (replacing a model of that
name). The `config` parameter is a JSON string of the model configuration. Without files, `load`
serves a stored model again.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.requests import ClientDisconnect

from service import rules
from service.errors import Aborted, clip, invalid, too_large
from service.front.protocols.bodies import read_body
from service.front.protocols.v2_rest.errors import V2Route
from service.front.protocols.v2_rest.load_body import LoadBody
from service.front.protocols.v2_rest.schema import LOAD_ANSWERS, REPOSITORY_ANSWERS, UNLOAD_ANSWERS
from service.ingest.receive import receive_and_deploy
from service.ingest.staging import StagedUpload

router = APIRouter(
    prefix="/v2/repository", route_class=V2Route, tags=["v2 (Open Inference Protocol)"]
)


def _parameters(body: bytes) -> dict:
    """The request's `parameters` object; an empty body means none."""
    if not body.strip():
        return {}
    try:
        request = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise invalid(rules.REQUEST_JSON, f"the request is not valid JSON: {clip(exc)}") from None
    if not isinstance(request, dict):
        raise invalid(rules.REQUEST_INVALID, "the request must be a JSON object")
    parameters = request.get("parameters", {})
    if not isinstance(parameters, dict):
        raise invalid(rules.REQUEST_INVALID, "'parameters' must be a JSON object")
    return parameters


@router.post("/index", responses=REPOSITORY_ANSWERS)
async def index(request: Request) -> list[dict]:
    """Every stored model with its state; `{"ready": true}` lists only the ready ones."""
    body = await read_body(request.scope, request.receive, 64 * 1024, "a repository index request")
    ready_only = False
    if body.strip():
        try:
            ready_only = json.loads(body).get("ready") is True
        except (ValueError, RecursionError, AttributeError):
            raise invalid(rules.REQUEST_JSON, "the index request must be a JSON object") from None
    entries = await request.app.state.service.repository_index()
    return [e for e in entries if e["state"] == "READY"] if ready_only else entries


async def _chunks(request: Request, limit: int) -> AsyncIterator[bytes]:
    """The body as it arrives, refused once it (declared or streamed) passes `limit`."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise too_large("a repository load request", limit)
    received = 0
    async for chunk in request.stream():
        received += len(chunk)
        if received > limit:
            raise too_large("a repository load request", limit)
        yield chunk


@router.post("/models/{model}/load", responses=LOAD_ANSWERS)
async def load(request: Request, model: str) -> Response:
    """Files are decoded into the dataplane's staging as the body arrives (load_body.py), under
    the limits of POST /models; the staging begins, inside deploy(), at the first file."""
    service = request.app.state.service
    body = LoadBody(service.settings.max_json_bytes)
    chunks = _chunks(request, service.settings.max_upload_bytes)
    async for chunk in chunks:
        await asyncio.to_thread(body.feed, chunk)
        if body.needs_staging:
            break
    else:
        body.end()
        await service.load_model(model, None, body.config)
        return Response(status_code=200)

    async def receive() -> StagedUpload:
        body.staging, body.needs_staging = service.begin_staging(), False
        try:
            await asyncio.to_thread(body.feed, b"")
            async for chunk in chunks:
                await asyncio.to_thread(body.feed, chunk)
            body.end()
            return body.upload(model)
        except ClientDisconnect:
            body.staging.abort()
            raise Aborted("the client disconnected before the load request was complete") from None
        except BaseException:
            body.staging.abort()
            raise

    await receive_and_deploy(service, receive)
    return Response(status_code=200)


@router.post("/models/{model}/unload", responses=UNLOAD_ANSWERS)
async def unload(request: Request, model: str) -> Response:
    service = request.app.state.service
    body = await read_body(request.scope, request.receive, 64 * 1024, "a repository unload request")
    _parameters(body)
    await service.unload_model(model)
    return Response(status_code=200)
