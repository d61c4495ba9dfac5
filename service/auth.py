"""Bearer tokens in two scopes: `admin` (model management) and `infer` (inference and metadata).

A `.pte`/`.ptd` upload is code that runs in the server, so model management is the dangerous
half and gets its own token; clients that only infer never hold it. A scope without a configured
token is open, except model management on a server listening beyond loopback: there, without an
admin token, it answers 403 with how to enable it, so publishing a port never publishes uploads
by accident. Health and readiness are always open (probes carry no credentials); /metrics is open
or in the infer scope (--metrics-auth).

`Policy` decides from a scope and an Authorization value only, so the HTTP middleware here and a
gRPC interceptor (metadata key `authorization`, same `Bearer <token>` value) share one rule.
Tokens come from ETRT_ADMIN_TOKEN / ETRT_INFER_TOKEN or from files (--admin-token-file,
--infer-token-file; kept off the command line, where any local user can read them) and are
compared in constant time.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

OPEN, INFER, ADMIN = "open", "infer", "admin"
_HEALTH_PATHS = frozenset({"/health/live", "/health/ready", "/v2/health/live", "/v2/health/ready"})
_WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_OPEN_GRPC = frozenset({"ServerLive", "ServerReady"})
_HEALTH_GRPC = "/grpc.health.v1.Health/"
_ADMIN_GRPC = frozenset({"RepositoryIndex", "RepositoryModelLoad", "RepositoryModelUnload"})
_SOURCES = {
    ADMIN: ("ETRT_ADMIN_TOKEN", "admin_token_file", "--admin-token-file"),
    INFER: ("ETRT_INFER_TOKEN", "infer_token_file", "--infer-token-file"),
}


class AuthConfigError(Exception):
    pass


def http_scope(method: str, path: str, metrics_auth: str = "none") -> str:
    if "//" in path:
        path = re.sub("/+", "/", path)
    if path in _HEALTH_PATHS:
        return OPEN
    if path == "/metrics":
        return OPEN if metrics_auth == "none" else INFER
    if path == "/v2/repository" or path.startswith("/v2/repository/"):
        return ADMIN
    if method.upper() in _WRITE_METHODS and (path == "/models" or path.startswith("/models/")):
        return ADMIN
    return INFER


def grpc_scope(full_method: str) -> str:
    """Scope of a gRPC call, e.g. '/inference.GRPCInferenceService/ModelInfer'; health checks
    (grpc.health.v1) are open, as the HTTP health routes are: a probe presents no token."""
    if full_method.startswith(_HEALTH_GRPC):
        return OPEN
    name = full_method.rsplit("/", 1)[-1]
    return OPEN if name in _OPEN_GRPC else ADMIN if name in _ADMIN_GRPC else INFER


@dataclass(frozen=True)
class Denial:
    status: int  # 401 (no or unknown token) or 403 (valid token, other scope; or disabled)
    message: str
    challenge: str | None  # WWW-Authenticate value, for 401 and scope errors


@dataclass(frozen=True)
class Policy:
    admin_token: str | None
    infer_token: str | None
    # Model management without an admin token: allowed only on a loopback listener.
    admin_disabled_reason: str | None = None
    metrics_auth: str = "none"

    def check(self, scope: str, authorization: str | None) -> Denial | None:
        if scope == OPEN:
            return None
        required = self.admin_token if scope == ADMIN else self.infer_token
        if required is None:
            if scope == ADMIN and self.admin_disabled_reason:
                return Denial(403, self.admin_disabled_reason, None)
            return None
        presented = _bearer(authorization)
        if presented is None:
            return Denial(
                401,
                f"this request needs the {scope} token: send 'Authorization: Bearer <token>'",
                'Bearer realm="etrt-server"',
            )
        # Both comparisons always run, so timing says nothing about which token came close.
        is_required = _same(presented, required)
        other = self.infer_token if scope == ADMIN else self.admin_token
        is_other = other is not None and _same(presented, other)
        if is_required:
            return None
        if is_other:
            return Denial(
                403,
                f"this token is not valid for {scope} requests "
                f"({_describe(scope)}); use the {scope} token",
                f'Bearer realm="etrt-server", error="insufficient_scope", scope="{scope}"',
            )
        return Denial(
            401,
            "the bearer token is not valid",
            'Bearer realm="etrt-server", error="invalid_token"',
        )


def _describe(scope: str) -> str:
    return (
        "uploading, replacing, deleting models and the model repository"
        if scope == ADMIN
        else "inference and model metadata"
    )


def _same(presented: str, token: str) -> bool:
    return hmac.compare_digest(presented.encode(), token.encode())


def _bearer(authorization: str | None) -> str | None:
    if not authorization:
        return None
    kind, _, value = authorization.strip().partition(" ")
    value = value.strip()
    return value if kind.lower() == "bearer" and value else None


def is_loopback(host: str) -> bool:
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False  # a host name we do not resolve here: assume it is reachable from outside


def policy_for(settings, environ: Mapping[str, str] | None = None) -> Policy:
    """The policy for these settings; AuthConfigError when a token source is unusable."""
    environ = os.environ if environ is None else environ
    tokens = {scope: _token(scope, settings, environ) for scope in (ADMIN, INFER)}
    if tokens[ADMIN] is not None and tokens[ADMIN] == tokens[INFER]:
        raise AuthConfigError("the admin and infer tokens are equal; give each scope its own")
    disabled = None
    if tokens[ADMIN] is None and not is_loopback(settings.host):
        disabled = (
            f"model management is disabled: this server listens on {settings.host}, "
            f"beyond loopback, and has no admin token. Set ETRT_ADMIN_TOKEN (or "
            f"--admin-token-file) and send 'Authorization: Bearer <token>', or listen on "
            f"127.0.0.1"
        )
    return Policy(tokens[ADMIN], tokens[INFER], disabled, settings.metrics_auth)


def _token(scope: str, settings, environ: Mapping[str, str]) -> str | None:
    env, attr, flag = _SOURCES[scope]
    from_env = environ.get(env) or None
    path: Path | None = getattr(settings, attr)
    if path is None:
        token = from_env.strip() if from_env else None
        where = env
    elif from_env:
        raise AuthConfigError(f"both {env} and {flag} are set; use one")
    else:
        try:
            token = Path(path).read_text().strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise AuthConfigError(f"cannot read the {scope} token file {path}: {exc}") from exc
        if not token:
            raise AuthConfigError(f"the {scope} token file {path} is empty")
        where = str(path)
    if token is not None and (any(ch.isspace() for ch in token) or not token.isprintable()):
        raise AuthConfigError(
            f"the {scope} token from {where} contains spaces or control "
            f"characters; a bearer token is one printable word"
        )
    return token


class TokenAuth:
    """Pure ASGI middleware: denies before any route runs or any request body is read."""

    def __init__(self, app, policy: Policy):
        self.app = app
        self.policy = policy

    async def __call__(self, scope, receive, send):
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        method = scope.get("method", "GET")
        needed = http_scope(method, scope["path"], self.policy.metrics_auth)
        headers = dict(scope.get("headers") or [])
        authorization = headers.get(b"authorization")
        denial = self.policy.check(
            needed, authorization.decode("latin-1") if authorization is not None else None
        )
        if denial is None:
            return await self.app(scope, receive, send)
        if scope["type"] == "websocket":
            return await send({"type": "websocket.close", "code": 1008})
        payload = json.dumps({"error": denial.message, "problems": []}).encode()
        response_headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(payload)).encode()),
        ]
        if denial.challenge:
            response_headers.append((b"www-authenticate", denial.challenge.encode()))
        await send(
            {"type": "http.response.start", "status": denial.status, "headers": response_headers}
        )
        await send({"type": "http.response.body", "body": payload})
