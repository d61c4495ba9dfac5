"""Plans built by another TensorRT release or for another GPU/platform, through a real server.

The test engine provider stands in for TensorRT (`support.test_backend_setup`, as in
test_tensorrt_e2e) and refuses these plans with TensorRT's own log lines, as the shipped provider
passes them on; the server's ingest, its isolated check child and the HTTP answer are the real ones.
"""

import pytest

from service.backends.tensorrt.mismatch import host_platform
from support.server import ServerProcess, registry_rows, stored_files, upload
from support.test_engine_provider import TestEngineProvider
from support.trt_program_fixtures import mixed_16  # noqa: F401

TEST_BACKEND = "support.test_backend_setup:install_test_backend"
SERVER_TENSORRT = TestEngineProvider.tensorrt_version

LIBRARY_VERSION = (
    "IRuntime::deserializeCudaEngine: Error Code 6: API Usage Error (The engine "
    "plan file is not compatible with this version of TensorRT, expecting library "
    "version 11.1.0.106 got 10.13.3.9, please rebuild.)"
)
SERIALIZATION_VERSION = (
    "IRuntime::deserializeCudaEngine: Error Code 1: Serialization "
    "(Serialization assertion stdVersionRead == kSERIALIZATION_VERSION "
    "failed.Version tag does not match. Note: Current Version: 240, "
    "Serialized Engine Version: 239)"
)
COMPUTE = (
    "IRuntime::deserializeCudaEngine: Error Code 6: API Usage Error (The engine plan file "
    "is generated on an incompatible device, expecting compute 9.0 got compute 8.7, "
    "please rebuild.)"
)
PLATFORM_TAG = (
    "IRuntime::deserializeCudaEngine: Error Code 1: Serialization (Serialization "
    "assertion header.pad == expectedPlatformTag failed.Platform specific tag "
    "mismatch detected. TensorRT plan files are only supported on the target runtime "
    "platform they were created on.)"
)
MAGIC = (
    "IRuntime::deserializeCudaEngine: Error Code 1: Serialization (Serialization assertion "
    "header.magicTag == kEXPECTED_MAGIC_TAG failed.)"
)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    server = ServerProcess(
        tmp_path_factory.mktemp("mismatch") / "artifacts", "--backend-setup", TEST_BACKEND
    ).start()
    yield server
    server.stop()


def refused_with(server, source, target, logged, blob_fields=None):
    """Uploads `source` with every plan refused with `logged`; expects 422 and nothing stored."""
    from support.trt_programs import with_plans_rewritten  # needs executorch.exir

    program = with_plans_rewritten(
        source, target, blob_fields=blob_fields, test_tensorrt_log=[logged]
    )
    before = stored_files(server.artifacts), registry_rows(server.artifacts)
    with server.client() as client:
        response = upload(client, "mismatched", program)
        assert response.status_code == 422, response.text
        assert client.get("/models/mismatched").status_code == 404
    assert (stored_files(server.artifacts), registry_rows(server.artifacts)) == before
    body = response.json()
    assert body["problems"] and all(p["file"] == "model.pte" for p in body["problems"])
    return body["problems"]


@pytest.mark.parametrize("logged", [LIBRARY_VERSION, SERIALIZATION_VERSION])
def test_a_plan_from_another_tensorrt_release_says_what_to_export_with(
    server, mixed_16, tmp_path, logged
):
    problems = refused_with(server, mixed_16.pte, tmp_path / "other_release.pte", logged)
    assert [p["rule"] for p in problems] == ["tensorrt.version_mismatch"] * 2
    for index, problem in enumerate(problems):
        message = problem["message"]
        assert message.startswith(
            f"method 'forward' delegate {index} (TensorRTBackend): the TensorRT plan was built by "
            f"another TensorRT release than the one this server runs (TensorRT "
            f"{SERVER_TENSORRT}); re-export it with the Torch-TensorRT release built on TensorRT "
            f"11.1, or run the server image whose TensorRT matches the exporter's; a plan built "
            f"with version_compatible=True also loads on later TensorRT releases. TensorRT said: "
            f"TensorRT could not deserialize the plan ("
        )
        assert message.endswith(f"bytes) on CUDA device 0: {logged}")


def test_a_plan_for_another_gpu_says_to_rebuild_on_the_target(server, mixed_16, tmp_path):
    problems = refused_with(server, mixed_16.pte, tmp_path / "other_gpu.pte", COMPUTE)
    assert [p["rule"] for p in problems] == ["tensorrt.platform_mismatch"] * 2
    for problem in problems:
        assert (
            f"the TensorRT plan was built for another GPU or platform than this server's "
            f"(this host is {host_platform()} with TensorRT {SERVER_TENSORRT}; the blob records "
            f"target_platform 'linux_x86_64', hardware_compatible False); re-export it on the "
            f"target GPU and platform, or with hardware_compatible=True"
        ) in problem["message"]
        assert problem["message"].endswith(COMPUTE)


def test_a_plan_for_another_platform_names_the_platform_it_was_built_for(
    server, mixed_16, tmp_path
):
    problems = refused_with(
        server,
        mixed_16.pte,
        tmp_path / "aarch64.pte",
        PLATFORM_TAG,
        blob_fields={"target_platform": "linux_aarch64"},
    )
    assert [p["rule"] for p in problems] == ["tensorrt.platform_mismatch"] * 2
    assert all(
        "the blob records target_platform 'linux_aarch64'" in p["message"]
        and p["message"].endswith(PLATFORM_TAG)
        for p in problems
    )


def test_a_plan_that_is_not_a_plan_keeps_the_generic_rule(server, mixed_16, tmp_path):
    problems = refused_with(server, mixed_16.pte, tmp_path / "garbage.pte", MAGIC)
    assert [p["rule"] for p in problems] == ["tensorrt.plan_invalid"] * 2
    for index, problem in enumerate(problems):
        assert problem["message"].startswith(
            f"method 'forward' delegate {index} (TensorRTBackend): TensorRT could not deserialize "
            f"the plan ("
        )
        assert problem["message"].endswith(MAGIC)
        assert "re-export" not in problem["message"]
