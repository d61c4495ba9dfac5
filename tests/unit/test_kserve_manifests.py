"""docker/kserve/: the ServingRuntime and InferenceService agree with each other and the image."""

import re
from pathlib import Path

import yaml

KSERVE = Path(__file__).resolve().parents[2] / "docker" / "kserve"
DOCKERFILE = KSERVE.parent / "Dockerfile"


def _load(name):
    return yaml.safe_load((KSERVE / name).read_text())


def _container():
    [container] = _load("servingruntime.yaml")["spec"]["containers"]
    return container


def test_runtime_speaks_v2_on_kserves_ports():
    runtime = _load("servingruntime.yaml")
    assert runtime["apiVersion"] == "serving.kserve.io/v1alpha1"
    assert runtime["kind"] == "ServingRuntime"
    assert set(runtime["spec"]["protocolVersions"]) == {"v2", "grpc-v2"}
    container = _container()
    assert container["name"] == "kserve-container"
    args = container["args"]
    for needed in (
        "--model-dir=/mnt/models",
        "--model-name={{.Name}}",
        "--host=0.0.0.0",
        "--port=8080",
        "--grpc-port=8081",
    ):
        assert needed in args
    assert [(p["name"], p["containerPort"]) for p in container["ports"]] == [("http1", 8080)]
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"]["port"] == 8080


def test_runtime_exposes_prometheus_metrics():
    annotations = _load("servingruntime.yaml")["spec"]["annotations"]
    assert annotations["prometheus.kserve.io/port"] == "8080"
    assert annotations["prometheus.kserve.io/path"] == "/metrics"
    assert {"name": "ETRT_METRICS_AUTH", "value": "none"} in _container()["env"]


def test_runtime_runs_as_the_images_non_root_user():
    security = _container()["securityContext"]
    uid = int(re.search(r"useradd .*--uid (\d+)", DOCKERFILE.read_text()).group(1))
    assert security["runAsNonRoot"] is True and security["runAsUser"] == uid != 0
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    # A read-only root needs writable mounts for the store and temporary files.
    assert security["readOnlyRootFilesystem"] is True
    mounts = {m["mountPath"]: m["name"] for m in _container()["volumeMounts"]}
    volumes = {v["name"]: v for v in _load("servingruntime.yaml")["spec"]["volumes"]}
    assert "--artifacts=/artifacts" in _container()["args"]
    assert {mounts["/artifacts"], mounts["/tmp"]} <= set(volumes)


def test_inference_service_uses_the_runtime_with_v2():
    runtime = _load("servingruntime.yaml")
    service = _load("inferenceservice.yaml")
    assert (service["apiVersion"], service["kind"]) == (
        "serving.kserve.io/v1beta1",
        "InferenceService",
    )
    model = service["spec"]["predictor"]["model"]
    assert model["runtime"] == runtime["metadata"]["name"]
    assert model["protocolVersion"] == "v2"
    formats = {f["name"] for f in runtime["spec"]["supportedModelFormats"]}
    assert model["modelFormat"]["name"] in formats
    assert model["storageUri"]


def test_runtime_args_reach_the_server_as_flags():
    """KServe's args (and `docker run IMAGE ARGS`) replace CMD, not ENTRYPOINT."""
    import os
    import subprocess
    import sys

    dockerfile = DOCKERFILE.read_text()
    assert "COPY --chmod=755 docker/entrypoint.sh /usr/local/bin/etrt-server" in dockerfile
    assert 'ENTRYPOINT ["etrt-server"]' in dockerfile
    repo = KSERVE.parents[1]
    env = dict(
        os.environ,
        PYTHONPATH=str(repo),
        PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]),
    )
    done = subprocess.run(
        ["sh", str(KSERVE.parent / "entrypoint.sh"), "--help"],
        env=env,
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "usage: python -m service" in done.stdout and "--admin-token-file" in done.stdout
