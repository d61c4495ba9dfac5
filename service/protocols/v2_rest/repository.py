"""The model repository extension: index, load (with Triton's file overrides) and unload.

`load` with `"file:<version>/<filename>"` parameters (base64 content, as tritonclient's
load_model(name, files=...) sends them) is an upload: the dataplane runs the same ingest as
POST /models, with the same rules and refusals, and replaces a model of that name. The `config`
parameter is a JSON string of the model configuration. Without files, `load` serves a stored
model again.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json

from fastapi import APIRouter, Request
from fastapi.responses import Response

from service.dataplane.repository import load_config
from service.errors import clip, invalid
from service.protocols.v2_rest.errors import V2Route
from service.protocols.v2_rest.transport import read_body

FILE_PREFIX = "file:"

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
        raise invalid("request.json", f"the request is not valid JSON: {clip(exc)}") from None
    if not isinstance(request, dict):
        raise invalid("request.invalid", "the request must be a JSON object")
    parameters = request.get("parameters", {})
    if not isinstance(parameters, dict):
        raise invalid("request.invalid", "'parameters' must be a JSON object")
    return parameters


def _load_arguments(body: bytes) -> tuple[dict[str, bytes] | None, dict | None]:
    """(files by "<version>/<filename>", config) from a load request's parameters."""
    parameters = _parameters(body)
    files: dict[str, bytes] = {}
    config = None
    for key, value in parameters.items():
        if key.startswith(FILE_PREFIX):
            path = key[len(FILE_PREFIX) :]
            if not isinstance(value, str):
                raise invalid("repository.file", f"{clip(key)!r} must be base64 text", path)
            try:
                files[path] = base64.b64decode(value, validate=True)
            except (binascii.Error, ValueError):
                raise invalid(
                    "repository.file", f"{clip(key)!r} is not valid base64", clip(path)
                ) from None
        elif key == "config":
            config = load_config(value)
        else:
            raise invalid(
                "repository.parameter",
                f"unknown load parameter {clip(key)!r}; expected 'config' or "
                f"'file:<version>/<filename>'",
            )
    return files or None, config


@router.post("/index")
async def index(request: Request) -> list[dict]:
    """Every stored model with its state; `{"ready": true}` lists only the ready ones."""
    body = await read_body(request, 64 * 1024, "a repository index request")
    ready_only = False
    if body.strip():
        try:
            ready_only = json.loads(body).get("ready") is True
        except (ValueError, RecursionError, AttributeError):
            raise invalid("request.json", "the index request must be a JSON object") from None
    entries = await request.app.state.service.repository_index()
    return [e for e in entries if e["state"] == "READY"] if ready_only else entries


@router.post("/models/{model}/load")
async def load(request: Request, model: str) -> Response:
    service = request.app.state.service
    body = await read_body(request, service.settings.max_upload_bytes, "a repository load request")
    # base64 text of large programs: decoding takes a while and must not stop the event loop.
    files, config = await asyncio.to_thread(_load_arguments, body)
    del body
    await service.load_model(model, files, config)
    return Response(status_code=200)


@router.post("/models/{model}/unload")
async def unload(request: Request, model: str) -> Response:
    service = request.app.state.service
    body = await read_body(request, 64 * 1024, "a repository unload request")
    _parameters(body)
    await service.unload_model(model)
    return Response(status_code=200)
