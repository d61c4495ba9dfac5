import subprocess
import sys

from fastapi.testclient import TestClient

from service.config import Settings
from service.front.app import create_app


def test_the_server_never_imports_torch():
    code = (
        "import sys, service.__main__, service.front.app, service.ingest.pipeline, "
        "service.ingest.load_check, "
        "service.front.protocols.native.multipart; from service.front.app import create_app; "
        "from service.config import Settings; create_app(Settings()); "
        "assert 'torch' not in sys.modules and 'executorch.exir' not in sys.modules, "
        "sorted(m for m in sys.modules if m.startswith(('torch', 'executorch')))"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_error_bodies_share_one_shape_and_readiness_follows_startup(tmp_path):
    app = create_app(Settings(artifacts=tmp_path / "artifacts", grpc_port=0))
    with TestClient(app) as client:
        assert client.get("/health/ready").status_code == 200
        response = client.post("/infer", json={"model": 3})
        assert response.status_code == 422
        body = response.json()
        assert set(body) == {"error", "problems"}
        assert {p["rule"] for p in body["problems"]} == {"request.invalid"}
        missing = client.get("/models/nothing")
        assert missing.status_code == 404 and missing.json()["problems"] == []
    assert not app.state.service.ready
