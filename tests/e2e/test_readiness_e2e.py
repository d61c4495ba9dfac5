"""Readiness tells the same truth everywhere (docs: operations, the readiness table): HTTP's
/v2/health/* and /health/*, gRPC's ServerReady/ModelReady, and grpc.health.v1.Health (Check and
Watch, service "" and per model), through a load in progress, an unload and an engine restart,
asked the way Kubernetes' probes ask (no token, plain clients)."""

import os
import queue
import signal
import threading
import time

import grpc
import httpx
import pytest
import tritonclient.grpc as triton
from grpc_health.v1 import health_pb2, health_pb2_grpc

from support.processes import role_pids
from support.program_fixtures import linear_relu_program  # noqa: F401
from support.server import ServerProcess, upload

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
SERVICE_UNKNOWN = health_pb2.HealthCheckResponse.SERVICE_UNKNOWN
INFER = "Bearer infer-secret"


@pytest.fixture(scope="module")
def server(tmp_path_factory, linear_relu_program):
    # Tokens on, so the probes' answers show that health needs none.
    env = {"ETRT_ADMIN_TOKEN": "admin-secret", "ETRT_INFER_TOKEN": "infer-secret"}
    server = ServerProcess(tmp_path_factory.mktemp("ready") / "artifacts", env=env).start()
    try:  # stopped even when the upload fails: no server outlives its tests
        admin = {"Authorization": "Bearer admin-secret"}
        with httpx.Client(base_url=server.url, timeout=120, headers=admin) as client:
            response = upload(client, "m", linear_relu_program.pte)
            assert response.status_code == 201, response.text
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def health(server):
    with grpc.insecure_channel(server.grpc_url) as channel:
        yield health_pb2_grpc.HealthStub(channel)


def http_server_ready(server, path: str | None = None) -> bool:
    """The server's readiness over HTTP: one route, or (None) both, which must agree (asked in
    a steady state: while the engine comes back, two requests in a row may see a change)."""
    if path is not None:
        return httpx.get(server.url + path, timeout=5).status_code == 200
    answers = {httpx.get(server.url + path, timeout=5).status_code for path in HEALTH_READY}
    assert len(answers) == 1, f"the ready routes disagree: {answers}"
    return answers.pop() == 200


HEALTH_READY = ("/v2/health/ready", "/health/ready")


def grpc_check(health, service: str, token: str | None = INFER):
    """grpc.health.v1 Check; the server's ("") is asked without a token, as a probe asks."""
    metadata = (("authorization", token),) if service and token else ()
    request = health_pb2.HealthCheckRequest(service=service)
    try:
        return health.Check(request, timeout=5, metadata=metadata).status
    except grpc.RpcError as error:
        return error.code()


def views(server, health, model: str = "m") -> dict:
    """Every protocol's answer on the server (no token) and on `model` (the infer token)."""
    with triton.InferenceServerClient(server.grpc_url) as client:
        grpc_server = client.is_server_ready()
        grpc_model = client.is_model_ready(model, headers={"authorization": INFER})
    model_http = httpx.get(
        f"{server.url}/v2/models/{model}/ready", headers={"authorization": INFER}, timeout=5
    ).status_code
    return {
        "http server": http_server_ready(server),
        "grpc server": grpc_server,
        "health server": grpc_check(health, "") == SERVING,
        "http model": model_http == 200,
        "grpc model": grpc_model,
        "health model": grpc_check(health, model) == SERVING,
    }


def test_ready_server_and_model_agree_everywhere(server, health):
    assert views(server, health) == dict.fromkeys(
        ("http server", "grpc server", "health server", "http model", "grpc model", "health model"),
        True,
    )
    assert grpc_check(health, "m/1") == SERVING  # a version: "name/version"
    assert httpx.get(f"{server.url}/v2/health/live").status_code == 200


def test_unknown_model_is_not_found_not_an_error(server, health):
    assert grpc_check(health, "nothing") == grpc.StatusCode.NOT_FOUND
    assert grpc_check(health, "m/7") == grpc.StatusCode.NOT_FOUND
    with triton.InferenceServerClient(server.grpc_url) as client:
        assert client.is_model_ready("nothing", headers={"authorization": INFER}) is False
    assert grpc_check(health, "") == SERVING  # the server is still ready


def test_model_health_needs_the_infer_token_server_health_does_not(server, health):
    assert grpc_check(health, "m", token=None) == grpc.StatusCode.UNAUTHENTICATED
    assert grpc_check(health, "nothing", token=None) == grpc.StatusCode.UNAUTHENTICATED
    assert grpc_check(health, "m", token="Bearer wrong") == grpc.StatusCode.UNAUTHENTICATED
    assert grpc_check(health, "", token=None) == SERVING


def test_unload_and_load_move_the_model_only(server, health):
    admin = {"Authorization": "Bearer admin-secret"}
    watched: queue.Queue = queue.Queue()
    channel = grpc.insecure_channel(server.grpc_url)
    stream = health_pb2_grpc.HealthStub(channel).Watch(
        health_pb2.HealthCheckRequest(service="m"), metadata=(("authorization", INFER),)
    )

    def watch():
        try:
            for message in stream:
                watched.put(message.status)
        except grpc.RpcError:
            pass

    reader = threading.Thread(target=watch, daemon=True)
    reader.start()
    try:
        assert watched.get(timeout=10) == SERVING
        response = httpx.post(f"{server.url}/v2/repository/models/m/unload", headers=admin)
        assert response.status_code == 200, response.text
        after_unload = views(server, health)
        # The unloaded model stops being counted: the server stays ready, the model is not.
        assert after_unload == {
            "http server": True,
            "grpc server": True,
            "health server": True,
            "http model": False,
            "grpc model": False,
            "health model": False,
        }
        assert watched.get(timeout=10) == NOT_SERVING

        # A load in progress does not make the server unready (Kubernetes would restart it).
        done = threading.Event()
        server_answers = []

        def probe():
            while not done.is_set():
                server_answers.append(http_server_ready(server, "/v2/health/ready"))
                time.sleep(0.01)

        prober = threading.Thread(target=probe, daemon=True)
        prober.start()
        try:
            response = httpx.post(
                f"{server.url}/v2/repository/models/m/load", headers=admin, timeout=120
            )
        finally:
            done.set()
            prober.join()
        assert response.status_code == 200, response.text
        assert server_answers and all(server_answers), server_answers.count(False)
        assert views(server, health)["health model"] is True
        assert watched.get(timeout=10) == SERVING
    finally:
        stream.cancel()
        channel.close()
        reader.join(timeout=5)


def test_probes_follow_an_engine_restart(server, health):
    """kill -9 of the engine, probed as a kubelet would every 50 ms: liveness stays 200 (the
    fronts are up: a liveness probe must not restart the pod), readiness goes false on every
    protocol while the engine is away and comes back by itself."""
    [engine] = role_pids(server, "engine")
    os.kill(engine, signal.SIGKILL)
    seen_down = {"http": False, "health": False}
    live_codes = set()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        live_codes.add(httpx.get(f"{server.url}/v2/health/live", timeout=5).status_code)
        http_ready = http_server_ready(server, "/v2/health/ready")
        health_ready = grpc_check(health, "") == SERVING
        seen_down["http"] |= not http_ready
        seen_down["health"] |= not health_ready
        if all(seen_down.values()) and http_ready and health_ready:
            break
        time.sleep(0.05)
    assert seen_down == {"http": True, "health": True}
    assert views(server, health) == dict.fromkeys(
        ("http server", "grpc server", "health server", "http model", "grpc model", "health model"),
        True,
    )
    assert live_codes == {200}
    assert role_pids(server, "engine") and role_pids(server, "engine") != [engine]
