"""The routes that bypass FastAPI's per-request machinery, declared in one table.

FastAPI's request handling (per-request telemetry checks, middleware layers, dependency solving,
pydantic validation of every tensor value in and out, a second serialization) costs several times
the inference of a small program. So the inference routes are served by bare ASGI endpoints: the
app (service/front/app.py) looks a request up in this table first, and only a request no entry takes
goes on to FastAPI. The path is matched here, once; its parameters reach the endpoint in
`scope["path_params"]`, as Starlette gives them to routes.

OpenAPI documents these routes from the same declarations (`schema_routes`): FastAPI reads each
one's `doc` function for the body and answer models, with the declared error answers. A request
with another method on such a path is answered 405 with the methods the schema lists.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from fastapi.routing import APIRoute
from starlette.routing import compile_path


@dataclass(frozen=True)
class FastRoute:
    """`endpoint`: the ASGI app serving `method path`; `doc`: a function whose signature says,
    for OpenAPI only, what the route takes and answers (it is never called); `responses` and
    `openapi_extra` as FastAPI's route decorators take them."""

    path: str
    endpoint: Callable
    doc: Callable
    name: str
    method: str = "POST"
    responses: dict = field(default_factory=dict)
    openapi_extra: dict | None = None
    tags: tuple[str, ...] = ()


class FastRoutes:
    def __init__(self, routes: list[FastRoute], wrap: Callable[[Callable], Callable]):
        """`wrap` puts each endpoint behind what every request passes (the token check, the
        500 guard)."""
        self.routes = list(routes)
        # (method, path) -> (endpoint, route) for paths without parameters
        self._exact: dict[tuple[str, str], tuple[Callable, FastRoute]] = {}
        # (literal prefix, compiled path, method, endpoint, route) for paths with parameters
        self._templated: list[tuple[str, re.Pattern, str, Callable, FastRoute]] = []
        for route in self.routes:
            served = wrap(route.endpoint)
            if "{" not in route.path:
                self._exact[(route.method, route.path)] = (served, route)
            else:
                prefix = route.path[: route.path.index("{")]
                pattern = compile_path(route.path)[0]
                self._templated.append((prefix, pattern, route.method, served, route))

    def match(self, method: str, path: str) -> tuple[Callable, dict, FastRoute] | None:
        """(the endpoint, the path's parameters, the route), or None for a request FastAPI
        serves."""
        found = self._exact.get((method, path))
        if found is not None:
            return found[0], {}, found[1]
        for prefix, pattern, route_method, served, route in self._templated:
            if method == route_method and path.startswith(prefix):
                matched = pattern.match(path)
                if matched is not None:
                    return served, matched.groupdict(), route
        return None

    def schema_routes(self) -> list[APIRoute]:
        """The routes as OpenAPI documents them."""
        return [
            APIRoute(
                route.path,
                route.doc,
                methods=[route.method],
                name=route.name,
                responses=route.responses,
                openapi_extra=route.openapi_extra,
                tags=list(route.tags) or None,
            )
            for route in self.routes
        ]
