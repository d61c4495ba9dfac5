"""A size limit on JSON request bodies (POST /infer), enforced before they are parsed.

FastAPI reads and validates a whole JSON body before a route sees it, so an oversized one would
be held in memory several times over (bytes, then nested lists). This ASGI middleware reads at
most the limit and answers 413 past it, whether the client declared a Content-Length or streams
chunks; uploads have their own streaming limits (http_upload.py) and pass through untouched.
"""
from __future__ import annotations

import json

_LIMITED_PATHS = ("/infer",)


class JsonBodyLimit:
    def __init__(self, app, max_bytes: int):
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["path"] not in _LIMITED_PATHS:
            return await self.app(scope, receive, send)
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            return await self._too_large(send)
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away
            size += len(message.get("body", b""))
            if size > self.max_bytes:
                return await self._too_large(send)
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        replayed = False

        async def replay():
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    async def _too_large(self, send) -> None:
        message = f"request body is larger than the limit of {self.max_bytes} bytes"
        payload = json.dumps({"error": message, "problems": [
            {"file": None, "rule": "request.too_large", "message": message}]}).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(payload)).encode())]})
        await send({"type": "http.response.body", "body": payload})
