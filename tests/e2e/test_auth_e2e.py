"""Bearer tokens on a real server: every route class against no, wrong, other-scope and right
tokens."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from support.program_fixtures import linear_relu_program  # noqa: F401
from support.server import ServerProcess, tensor, upload

ADMIN, INFER = "admin-7f3c9a1e5b", "infer-2d8e4f6a0c"

# (method, path, json body or None): each answers something other than 401/403 once authorized.
ADMIN_ROUTES = [
    ("POST", "/models", None),
    ("DELETE", "/models/nothing", None),
    ("POST", "/v2/repository/index", {}),
    ("POST", "/v2/repository/models/nothing/load", {}),
    ("POST", "/v2/repository/models/nothing/unload", {}),
]
INFER_ROUTES = [
    ("GET", "/models", None),
    ("GET", "/models/nothing", None),
    ("POST", "/infer", {"model": "nothing", "inputs": []}),
    ("GET", "/v2", None),
    ("GET", "/v2/models/nothing", None),
    ("POST", "/v2/models/nothing/infer", {"inputs": []}),
    ("GET", "/openapi.json", None),
]
OPEN_ROUTES = [("GET", "/health/live"), ("GET", "/health/ready"), ("GET", "/metrics")]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("auth")
    server = ServerProcess(
        root / "artifacts", env={"ETRT_ADMIN_TOKEN": ADMIN, "ETRT_INFER_TOKEN": INFER}
    ).start()
    yield server
    server.stop()


def _send(server, method, path, body=None, token=None, header=None):
    headers = {"Authorization": header or f"Bearer {token}"} if (token or header) else {}
    with server.client() as client:
        return client.request(method, path, json=body, headers=headers)


def _assert_denied(response, status):
    assert response.status_code == status, response.text
    assert response.json() == {"error": response.json()["error"], "problems": []}
    assert response.json()["error"]


@pytest.mark.parametrize("method,path,body", ADMIN_ROUTES + INFER_ROUTES)
def test_no_token_and_wrong_tokens_get_401_with_a_bearer_challenge(server, method, path, body):
    for kwargs in (
        {},
        {"token": "not-a-token"},
        {"header": f"Basic {ADMIN}"},
        {"header": "Bearer"},
    ):
        response = _send(server, method, path, body, **kwargs)
        _assert_denied(response, 401)
        assert response.headers["www-authenticate"].startswith("Bearer")


@pytest.mark.parametrize("method,path,body", ADMIN_ROUTES)
def test_model_management_needs_the_admin_token(server, method, path, body):
    _assert_denied(_send(server, method, path, body, token=INFER), 403)
    assert _send(server, method, path, body, token=ADMIN).status_code not in (401, 403)


@pytest.mark.parametrize("method,path,body", INFER_ROUTES)
def test_inference_and_metadata_need_the_infer_token(server, method, path, body):
    _assert_denied(_send(server, method, path, body, token=ADMIN), 403)
    assert _send(server, method, path, body, token=INFER).status_code not in (401, 403)


@pytest.mark.parametrize("method,path", OPEN_ROUTES)
def test_health_readiness_and_metrics_need_no_token(server, method, path):
    assert _send(server, method, path).status_code == 200
    # A token of either scope, or a wrong one, changes nothing there.
    assert _send(server, method, path, token="wrong").status_code == 200


def test_a_model_uploaded_with_the_admin_token_serves_the_infer_token(server, linear_relu_program):
    with server.client() as client:
        client.headers["Authorization"] = f"Bearer {ADMIN}"
        response = upload(client, "guarded", linear_relu_program.pte)
        assert response.status_code == 201, response.text
    x = torch.randn(2, 4)
    body = {"model": "guarded", "inputs": [tensor(x)]}
    _assert_denied(_send(server, "POST", "/infer", body), 401)
    response = _send(server, "POST", "/infer", body, token=INFER)
    assert response.status_code == 200, response.text
    [output] = response.json()["outputs"]
    np.testing.assert_allclose(
        np.array(output["data"]).reshape(output["shape"]),
        linear_relu_program.module(x).detach().numpy(),
        rtol=1e-5,
        atol=1e-6,
    )


def test_token_files_and_metrics_in_the_infer_scope(tmp_path):
    (tmp_path / "admin.token").write_text(ADMIN + "\n")
    (tmp_path / "infer.token").write_text(INFER + "\n")
    with ServerProcess(
        tmp_path / "artifacts",
        "--admin-token-file",
        str(tmp_path / "admin.token"),
        "--infer-token-file",
        str(tmp_path / "infer.token"),
        "--metrics-auth",
        "infer",
    ) as server:
        _assert_denied(_send(server, "GET", "/metrics"), 401)
        assert _send(server, "GET", "/metrics", token=INFER).status_code == 200
        assert _send(server, "GET", "/health/ready").status_code == 200
        _assert_denied(_send(server, "DELETE", "/models/x", token=INFER), 403)
        assert _send(server, "DELETE", "/models/x", token=ADMIN).status_code == 404


class _OnAnotherLoopbackAddress(ServerProcess):
    @property
    def url(self) -> str:
        return f"http://127.0.0.2:{self.port}"


def test_without_tokens_a_server_on_any_loopback_address_is_open(tmp_path):
    with _OnAnotherLoopbackAddress(tmp_path / "artifacts", "--host", "127.0.0.2") as server:
        with server.client() as client:
            assert client.get("/models").status_code == 200
            # Reaches the form checks: model management is not disabled on loopback.
            assert client.post("/models", data={"name": "m"}).status_code == 422
            assert client.delete("/models/nothing").status_code == 404


@pytest.mark.parametrize(
    "problem,args,env",
    [
        (
            "both ETRT_ADMIN_TOKEN and --admin-token-file",
            ["--admin-token-file", "{dir}/a"],
            {"ETRT_ADMIN_TOKEN": ADMIN},
        ),
        ("are equal", [], {"ETRT_ADMIN_TOKEN": ADMIN, "ETRT_INFER_TOKEN": ADMIN}),
        ("is empty", ["--infer-token-file", "{dir}/empty"], {}),
        ("cannot read", ["--infer-token-file", "{dir}/missing"], {}),
    ],
)
def test_unusable_token_settings_stop_the_server_at_start(tmp_path, problem, args, env):
    (tmp_path / "a").write_text(ADMIN)
    (tmp_path / "empty").write_text("\n")
    server = ServerProcess(tmp_path / "artifacts", *[a.format(dir=tmp_path) for a in args], env=env)
    with pytest.raises(RuntimeError, match="server exited with 1") as error:
        server.start(timeout=60)
    assert problem in str(error.value)


def test_grpc_reads_the_same_tokens_from_call_metadata(server, linear_relu_program):
    """Same policy over gRPC: UNAUTHENTICATED where HTTP says 401, PERMISSION_DENIED for 403."""
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    client = grpcclient.InferenceServerClient(server.grpc_url)
    assert client.is_server_live()  # liveness needs no token
    for headers, status in (
        (None, "StatusCode.UNAUTHENTICATED"),
        ({"authorization": "Bearer wrong"}, "StatusCode.UNAUTHENTICATED"),
        ({"authorization": f"Bearer {ADMIN}"}, "StatusCode.PERMISSION_DENIED"),
    ):
        with pytest.raises(InferenceServerException) as denied:
            client.get_server_metadata(headers=headers)
        assert denied.value.status() == status
    with pytest.raises(InferenceServerException) as denied:
        client.get_model_repository_index(headers={"authorization": f"Bearer {INFER}"})
    assert denied.value.status() == "StatusCode.PERMISSION_DENIED"
    metadata = client.get_server_metadata(headers={"authorization": f"Bearer {INFER}"})
    assert metadata.name
    index = client.get_model_repository_index(headers={"authorization": f"Bearer {ADMIN}"})
    assert index is not None
