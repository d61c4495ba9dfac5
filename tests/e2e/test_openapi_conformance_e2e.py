"""The OpenAPI schema says what the routes really answer: schemathesis, a real client that reads
/openapi.json, generates requests from it against a real server and runs its conformance checks
(documented status codes, response schemas and content types, Allow headers of 405s, methods
no route has, rejection of schema-invalid data, no 5xx). Bounded to a few seconds.

Every check runs on every operation. positive_data_acceptance (a request the schema allows is
not refused) holds on the inference routes because the model is judged first: an unknown model
is answered 404 (an answer that check accepts) before the body is read on /v2/.../infer and
before its tensors are on /infer. On POST /models it also takes 413 and 422 (CONFIG says why).
"""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CHECKS = [
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_headers_conformance",
    "response_schema_conformance",
    "negative_data_rejection",
    "positive_data_acceptance",
    "missing_required_header",
    "unsupported_method",
    "allow_header_conformance",
    "use_after_free",
    "ensure_resource_availability",
    "ignored_auth",
    "object_level_authorization",
]
# Every check, named (the CLI's --checks would override the per-operation setting below).
CONFIG = (
    "".join(f"checks.{name}.enabled = true\n" for name in CHECKS)
    + """
generation.max-examples = 8
request-timeout = 30.0

# What makes an upload acceptable is its files' contents (a valid program, a configuration that
# fits it) and the server's limits, which no schema can say: a schema-valid form may be refused
# 422 naming the rule, or 413 naming the limit. The check still runs, with those answers too.
[[operations]]
include-name = ["POST /models"]
checks.positive_data_acceptance.expected-statuses = [
    "2xx", "3xx", "401", "403", "404", "409", "413", "422", "429", "5xx",
]
"""
)


def _schemathesis() -> str:
    found = shutil.which("schemathesis", path=str(Path(sys.executable).parent))
    if found is None:
        pytest.fail("schemathesis is not installed (pip install -e '.[test]')")
    return found


def test_every_operation_conforms_to_the_openapi_schema(shared_server, tmp_path):
    config = tmp_path / "schemathesis.toml"
    config.write_text(CONFIG)
    result = subprocess.run(
        [
            _schemathesis(),
            "--no-color",
            "--config-file",
            str(config),
            "run",
            f"{shared_server.url}/openapi.json",
            "--seed",
            "20",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    report = result.stdout[-6000:] + result.stderr[-2000:]
    assert result.returncode == 0, report
    assert "No issues found" in result.stdout or " passed" in result.stdout, report


def test_a_405_allows_every_method_the_path_has(shared_server):
    """Starlette names only the first route of a path; GET and POST /models are two."""
    with shared_server.client() as client:
        for path, allowed in (
            ("/models", "GET, POST"),
            ("/models/x", "DELETE, GET"),
            ("/v2/models/x/infer", "POST"),
            ("/v2/repository/index", "POST"),
        ):
            answer = client.request("PUT", path)
            assert answer.status_code == 405, answer.text
            assert answer.headers["allow"] == allowed, (path, answer.headers)
            assert allowed in answer.json()["error"]
