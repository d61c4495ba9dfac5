"""Multipart uploads parsed as they arrive: the answer stays bounded whatever the body holds."""

from fastapi.testclient import TestClient

from service.config import Settings
from service.front.app import create_app


def test_unknown_fields_are_reported_once_each_and_boundedly(tmp_path):
    app = create_app(Settings(artifacts=tmp_path / "artifacts", grpc_port=0))
    fields = {"name": "m", "colour": ["red"] * 50, **{f"extra{i}": "x" for i in range(40)}}
    with TestClient(app) as client:
        response = client.post("/models", data=fields, files={"program": ("m.pte", b"x")})
    assert response.status_code == 422
    unknown = [
        p["message"] for p in response.json()["problems"] if p["rule"] == "upload.unknown_field"
    ]
    assert len(unknown) == 16
    assert sum("'colour'" in m for m in unknown) == 1
    assert not list((tmp_path / "artifacts" / "models").iterdir())
    assert not list((tmp_path / "artifacts" / "staging").iterdir())
