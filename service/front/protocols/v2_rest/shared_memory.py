"""Triton's system and CUDA shared memory extensions over REST:
/v2/{systemsharedmemory,cudasharedmemory}[/region/{name}]/{status,register,unregister}.

Registrations are relayed to the engine process, which maps the regions (service/shm/); a front
holds none. Status answers a JSON list of regions, register and unregister 200 with an empty
object (tritonclient reads only the status); every refusal is the protocol's {"error": ...}
naming the region.
"""

from __future__ import annotations

import binascii

import orjson
from fastapi import APIRouter, Request

from service.errors import Unavailable, clip, invalid
from service.front.protocols.bodies import read_body
from service.front.protocols.http_errors import AUTH, responses
from service.front.protocols.v2_rest.errors import V2Route
from service.shared.contract import Capability

router = APIRouter(prefix="/v2", route_class=V2Route, tags=["v2 shared memory"])
# A registration is a few fields; nothing larger is read.
_MAX_BODY = 64 * 1024
_PATHS = {"system": "/systemsharedmemory", "cuda": "/cudasharedmemory"}
# 400 a malformed registration or region, 403 the extension off, 404 an unknown region or key,
# 409 a name taken or a region in use, 503 an app without the engine process.
ANSWERS = responses(*AUTH, 500, 400, 404, 409, 413, 503)
_COUNT = {"type": "integer", "minimum": 0}
_BODIES = {
    "system": {
        "type": "object",
        "required": ["key", "byte_size"],
        "properties": {
            # A POSIX shm name: "/" then a name without "/" (ASCII here; "." and ".." not).
            "key": {"type": "string", "pattern": "^/?[A-Za-z0-9_-][A-Za-z0-9_.-]{0,254}$"},
            "offset": _COUNT,
            "byte_size": {"type": "integer", "minimum": 1},
        },
    },
    "cuda": {
        "type": "object",
        "required": ["raw_handle", "byte_size"],
        "properties": {
            "raw_handle": {
                "type": "object",
                "required": ["b64"],
                "properties": {
                    "b64": {
                        "type": "string",
                        "description": "base64 of the 64-byte CUDA IPC handle",
                        "pattern": "^([A-Za-z0-9+/]{4})*([A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$",
                    }
                },
            },
            "device_id": _COUNT,
            "byte_size": {"type": "integer", "minimum": 1},
        },
    },
}


def _body(kind: str) -> dict:
    content = {"application/json": {"schema": _BODIES[kind]}}
    return {"requestBody": {"required": True, "content": content}}


def engine_of(service):
    """The engine client: regions live in the engine process, which an app running its own
    ModelService in-process (tests only) does not have."""
    if not service.capabilities & Capability.SHARED_MEMORY:
        raise Unavailable("shared memory regions need the engine process (python -m service)")
    return service


def engine(request: Request):
    return engine_of(request.app.state.service)


async def _fields(request: Request, name: str) -> dict:
    body = await read_body(
        request.scope, request.receive, _MAX_BODY, "a shared memory registration"
    )
    try:
        fields = orjson.loads(body) if body.strip() else {}
    except orjson.JSONDecodeError as exc:
        raise invalid(
            "request.json", f"region {clip(name)!r}: the request is not valid JSON: {clip(exc)}"
        ) from None
    if not isinstance(fields, dict):
        raise invalid("request.invalid", f"region {clip(name)!r}: the request must be an object")
    return fields


def _integer(fields: dict, key: str, name: str, default=None) -> int:
    value = fields.get(key, default)
    if isinstance(value, float) and value.is_integer():  # JSON's 306.0 is the integer 306
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise invalid(
            "shm.parameter",
            f"region {clip(name)!r}: {key!r} must be a non-negative integer, got {clip(value)!r}",
        )
    return value


def decode_handle(name: str, value) -> bytes:
    """raw_handle as tritonclient sends it: {"b64": base64 of the handle's bytes}."""
    text = value.get("b64") if isinstance(value, dict) else None
    if isinstance(text, bytes):
        text = text.decode("ascii", "replace")
    if not isinstance(text, str):
        raise invalid(
            "shm.handle", f'region {clip(name)!r}: raw_handle must be {{"b64": <base64 text>}}'
        )
    try:
        return binascii.a2b_base64(text.encode("ascii"), strict_mode=True)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        raise invalid("shm.handle", f"region {clip(name)!r}: raw_handle is not base64") from None


def _install(kind: str) -> None:
    base = _PATHS[kind]

    @router.get(base + "/status", responses=ANSWERS, name=f"{kind} shared memory status")
    @router.get(base + "/region/{name}/status", responses=ANSWERS)
    async def status(request: Request, name: str | None = None) -> list:
        return await engine(request).shm_status(kind, name)

    @router.post(base + "/region/{name}/register", responses=ANSWERS, openapi_extra=_body(kind))
    async def register(request: Request, name: str) -> dict:
        fields = await _fields(request, name)
        if kind == "system":
            await engine(request).shm_register_system(
                name,
                fields.get("key"),
                _integer(fields, "offset", name, 0),
                _integer(fields, "byte_size", name),
            )
        else:
            await engine(request).shm_register_cuda(
                name,
                decode_handle(name, fields.get("raw_handle")),
                _integer(fields, "device_id", name, 0),
                _integer(fields, "byte_size", name),
            )
        return {}

    @router.post(base + "/unregister", responses=ANSWERS)
    @router.post(base + "/region/{name}/unregister", responses=ANSWERS)
    async def unregister(request: Request, name: str | None = None) -> dict:
        await engine(request).shm_unregister(kind, name)
        return {}


for _kind in _PATHS:
    _install(_kind)
