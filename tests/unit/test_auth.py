import pytest
from fastapi.testclient import TestClient

from service import auth
from service.config import Settings, parse_settings
from service.front.app import create_app


@pytest.mark.parametrize(
    "method,path,scope",
    [
        ("GET", "/health/live", auth.OPEN),
        ("GET", "/v2/health/ready", auth.OPEN),
        ("GET", "/metrics", auth.OPEN),
        ("POST", "/models", auth.ADMIN),
        ("POST", "/models/", auth.ADMIN),
        ("DELETE", "/models/m", auth.ADMIN),
        ("PUT", "//models//m", auth.ADMIN),
        ("POST", "/v2/repository/index", auth.ADMIN),
        ("GET", "/v2/repository", auth.ADMIN),
        ("POST", "/v2/repository/models/m/load", auth.ADMIN),
        ("GET", "/models", auth.INFER),
        ("GET", "/models/m", auth.INFER),
        ("POST", "/infer", auth.INFER),
        ("GET", "/v2", auth.INFER),
        ("POST", "/v2/models/m/infer", auth.INFER),
        ("GET", "/v2/models/m/ready", auth.INFER),
        ("GET", "/docs", auth.INFER),
        ("GET", "/no/such/route", auth.INFER),
        ("POST", "/v2/repositoryx", auth.INFER),
    ],
)
def test_routes_fall_in_one_scope(method, path, scope):
    assert auth.http_scope(method, path) == scope


def test_metrics_can_join_the_infer_scope():
    assert auth.http_scope("GET", "/metrics", metrics_auth="infer") == auth.INFER


@pytest.mark.parametrize(
    "method,scope",
    [
        ("/inference.GRPCInferenceService/ServerLive", auth.OPEN),
        ("/inference.GRPCInferenceService/ServerReady", auth.OPEN),
        ("/inference.GRPCInferenceService/ModelInfer", auth.INFER),
        ("/inference.GRPCInferenceService/ModelMetadata", auth.INFER),
        ("/inference.GRPCInferenceService/RepositoryModelLoad", auth.ADMIN),
        ("/inference.GRPCInferenceService/RepositoryIndex", auth.ADMIN),
    ],
)
def test_grpc_methods_fall_in_the_same_scopes(method, scope):
    assert auth.grpc_scope(method) == scope


def test_policy_answers_401_403_or_nothing():
    policy = auth.Policy(admin_token="a" * 20, infer_token="i" * 20)
    assert policy.check(auth.ADMIN, "Bearer " + "a" * 20) is None
    assert policy.check(auth.INFER, "bearer  " + "i" * 20) is None
    assert policy.check(auth.OPEN, None) is None
    for header in (None, "", "Bearer", "Basic " + "a" * 20, "Bearer " + "a" * 19):
        denial = policy.check(auth.ADMIN, header)
        assert denial.status == 401 and denial.challenge.startswith("Bearer")
    assert policy.check(auth.ADMIN, "Bearer " + "i" * 20).status == 403
    assert policy.check(auth.INFER, "Bearer " + "a" * 20).status == 403


def test_a_scope_without_a_token_is_open_unless_admin_beyond_loopback():
    assert auth.Policy(None, None).check(auth.ADMIN, None) is None
    disabled = auth.policy_for(Settings(host="0.0.0.0"), environ={})
    denial = disabled.check(auth.ADMIN, None)
    assert denial.status == 403 and "ETRT_ADMIN_TOKEN" in denial.message
    assert disabled.check(auth.INFER, None) is None


@pytest.mark.parametrize(
    "host,loopback",
    [
        ("127.0.0.1", True),
        ("127.0.0.2", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("192.0.2.1", False),
        ("my-host", False),
        ("", False),
    ],
)
def test_loopback_addresses(host, loopback):
    assert auth.is_loopback(host) is loopback


def test_beyond_loopback_without_admin_token_model_management_answers_403(tmp_path, monkeypatch):
    monkeypatch.delenv("ETRT_ADMIN_TOKEN", raising=False)
    monkeypatch.delenv("ETRT_INFER_TOKEN", raising=False)
    app = create_app(Settings(host="0.0.0.0", artifacts=tmp_path / "artifacts", grpc_port=0))
    with TestClient(app) as client:
        for method, path in (
            ("POST", "/models"),
            ("DELETE", "/models/m"),
            ("POST", "/v2/repository/index"),
        ):
            response = client.request(method, path)
            assert response.status_code == 403
            body = response.json()
            assert body["problems"] == [] and "ETRT_ADMIN_TOKEN" in body["error"]
            assert "0.0.0.0" in body["error"]
        assert client.get("/models").status_code == 200
        assert client.get("/health/ready").status_code == 200


def test_beyond_loopback_an_admin_token_enables_model_management(tmp_path, monkeypatch):
    monkeypatch.setenv("ETRT_ADMIN_TOKEN", "admin-token-1234")
    monkeypatch.delenv("ETRT_INFER_TOKEN", raising=False)
    app = create_app(Settings(host="0.0.0.0", artifacts=tmp_path / "artifacts", grpc_port=0))
    with TestClient(app) as client:
        assert client.delete("/models/m").status_code == 401
        headers = {"Authorization": "Bearer admin-token-1234"}
        assert client.delete("/models/m", headers=headers).status_code == 404


def test_token_flags_and_metrics_auth_parse():
    settings = parse_settings(
        ["--admin-token-file", "/run/secrets/a", "--metrics-auth", "infer"],
        environ={"ETRT_INFER_TOKEN_FILE": "/run/secrets/i"},
    )
    assert str(settings.admin_token_file) == "/run/secrets/a"
    assert str(settings.infer_token_file) == "/run/secrets/i"
    assert settings.metrics_auth == "infer"
    with pytest.raises(SystemExit):
        parse_settings(["--metrics-auth", "admin"], environ={})


def test_tokens_never_appear_in_settings_or_their_repr(tmp_path):
    token_file = tmp_path / "t"
    token_file.write_text("secret-token-value\n")
    settings = Settings(admin_token_file=token_file)
    assert "secret-token-value" not in repr(settings)
    assert auth.policy_for(settings, environ={}).admin_token == "secret-token-value"


def test_a_token_with_spaces_is_refused():
    with pytest.raises(auth.AuthConfigError, match="spaces"):
        auth.policy_for(Settings(), environ={"ETRT_INFER_TOKEN": "two words"})
