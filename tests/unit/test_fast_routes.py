"""The one table of routes served past FastAPI: each path is matched there once, the endpoint it
names serves it, OpenAPI documents it from the same declaration, and no router route has it."""

from __future__ import annotations

import pytest
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient

from service.auth import TokenAuth
from service.config import Settings
from service.front.app import create_app
from service.front.protocols.http_errors import UnexpectedErrors
from service.front.protocols.native.infer_endpoint import InferEndpoint
from service.front.protocols.v2_rest import infer_endpoint as v2_infer
from service.front.protocols.v2_rest import routes as v2_routes
from service.inline_policy import InlinePolicy


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    # grpc_port=0: the lifespan of a TestClient starts the gRPC listener, on a free port.
    return create_app(
        Settings(artifacts=tmp_path_factory.mktemp("fast") / "artifacts", grpc_port=0)
    )


def _served(app, method: str, path: str):
    """(the declared endpoint, path parameters) the table matches, or None."""
    found = app.fast.match(method, path)
    if found is None:
        return None
    endpoint, params, _ = found
    while isinstance(endpoint, (UnexpectedErrors, TokenAuth)):  # what every request passes
        endpoint = endpoint.app
    return endpoint, params


def test_each_inference_path_is_matched_once_with_its_parameters(app):
    native, params = _served(app, "POST", "/infer")
    assert isinstance(native, InferEndpoint) and params == {}
    assert _served(app, "POST", "/v2/models/m/infer") == (
        v2_infer.infer_endpoint,
        {"model": "m"},
    )
    assert _served(app, "POST", "/v2/models/m/versions/3/infer") == (
        v2_infer.infer_endpoint,
        {"model": "m", "version": "3"},
    )
    for method, path in (
        ("GET", "/infer"),
        ("POST", "/infer/x"),
        ("POST", "/v2/models/a/b/infer"),
        ("POST", "/v2/models//infer"),
        ("GET", "/v2/models/m/infer"),
        ("POST", "/models"),
    ):
        assert app.fast.match(method, path) is None, (method, path)


def test_no_router_route_has_a_fast_routes_path(app):
    declared = {(route.method, route.path) for route in app.fast.routes}
    routed = {
        (method, route.path)
        for route in app.routes
        if isinstance(route, APIRoute)
        for method in route.methods
    }
    assert declared and not declared & routed


def test_openapi_documents_every_fast_route_from_its_declaration(app):
    paths = app.openapi()["paths"]
    for route in app.fast.routes:
        operation = paths[route.path][route.method.lower()]
        assert set(operation["responses"]) >= {str(code) for code in route.responses}
        assert "422" not in operation["responses"] or route.path == "/infer"
    versioned = paths["/v2/models/{model}/versions/{version}/infer"]["post"]
    assert {p["name"]: p["in"] for p in versioned["parameters"]} == {
        "model": "path",
        "version": "path",
    }
    assert [p["name"] for p in paths["/v2/models/{model}/infer"]["post"]["parameters"]] == ["model"]


def test_another_method_on_a_fast_path_is_405_with_the_schemas_methods(app):
    with TestClient(app) as client:
        for path in ("/infer", "/v2/models/m/infer", "/v2/models/m/versions/1/infer"):
            answer = client.get(path)
            assert answer.status_code == 405, (path, answer.text)
            assert answer.headers["allow"] == "POST"


def test_the_inline_policy_holds_every_threshold():
    policy = InlinePolicy(execute_us=50.0, json_bytes=10, json_elements=3, binary_bytes=100)
    assert policy.execute_below_s == pytest.approx(50e-6)
    assert policy.parse_inline(10) and not policy.parse_inline(11)
    assert policy.write_inline(3) and not policy.write_inline(4)
    assert policy.slice_inline(100) and not policy.slice_inline(101)
    assert Settings().inline_execute_us == InlinePolicy().execute_us
