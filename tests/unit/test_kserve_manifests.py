"""docker/kserve/: the ServingRuntime and InferenceService agree with KServe's schema, with each
other and with the image."""

import re
from pathlib import Path

import yaml

from support.kserve_schema import problems

KSERVE = Path(__file__).resolve().parents[2] / "docker" / "kserve"
DOCKERFILE = KSERVE.parent / "Dockerfile"


def _load(name):
    return yaml.safe_load((KSERVE / name).read_text())


def _container():
    [container] = _load("servingruntime.yaml")["spec"]["containers"]
    return container


def _spoilt(spoil) -> dict:
    runtime = _load("servingruntime.yaml")
    spoil(runtime["spec"]["containers"][0])
    return runtime


def test_both_files_read_as_kserves_published_models_and_mistakes_do_not():
    spoilt = {
        "containers[0].readinessProbes: V1Container has no field": lambda c: c.update(
            readinessProbes={}
        ),
        "containers[0]: V1Container": lambda c: c.pop("name"),
        "ports[0].containerPort: '8080' is not int": lambda c: c["ports"][0].update(
            containerPort="8080"
        ),
    }
    found = problems(
        [
            ("V1alpha1ServingRuntime", _load("servingruntime.yaml")),
            ("V1beta1InferenceService", _load("inferenceservice.yaml")),
            *[("V1alpha1ServingRuntime", _spoilt(spoil)) for spoil in spoilt.values()],
        ]
    )
    assert found[:2] == [None, None], found
    for named, problem in zip(spoilt, found[2:]):
        assert problem is not None and named in problem, (named, problem)


def test_runtime_speaks_rest_and_grpc_on_one_port():
    """Knative routes one port: both protocols on it, its number from $PORT (Knative) or
    ETRT_PORT (a RawDeployment), the probes on it, readiness on the readiness route."""
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
        "--one-port",
        "--grpc-port=0",
    ):
        assert needed in args
    assert not [a for a in args if a.startswith("--port")], "a --port flag would override $PORT"
    assert {"name": "ETRT_PORT", "value": "8080"} in container["env"]
    assert [(p["name"], p["containerPort"]) for p in container["ports"]] == [("http1", 8080)]
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"]["port"] == 8080
    assert container["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert container["livenessProbe"]["httpGet"]["path"] == "/health/live"


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
