"""The shipped Ray Serve application (service.ray_serve:app) on a real two-node Ray cluster on this
machine: replicas spread over both nodes answer tritonclient and the native route through Serve's
proxy; killing the non-head node costs only the requests it held, and Serve replaces the replica
on the node that joins; autoscaling on ongoing requests goes from 1 to 2 replicas and back.

Bounded for the 2-core CI machine: two nodes of 2 logical CPUs and an 80 MiB object store each, no
dashboard, one HTTP proxy (on the head), replicas of 1 CPU; the whole module runs in ~2-3 minutes
with at most 2.7 GiB resident over its processes, and every wait is bounded (under 6 minutes in
all if each ran out).
"""

from __future__ import annotations

import json
import shutil
import threading
import time

import httpx
import numpy as np
import pytest
import ray
import torch
import tritonclient.http as triton_http
from ray import serve
from ray.cluster_utils import Cluster

from service.ray_serve import NODE_HEADER, app
from support import programs
from support.program_fixtures import linear_relu_program
from support.server import REPO, free_port, tensor

pytestmark = pytest.mark.ray
MiB = 1024 * 1024
NODE = {"num_cpus": 2, "object_store_memory": 80 * MiB}
HEADER = NODE_HEADER.decode()


@pytest.fixture(scope="module")
def repository(tmp_path_factory, programs_dir, linear_relu_program):
    """A model repository every node reads: a tiny model and one whose execute takes ~0.2 s."""
    root = tmp_path_factory.mktemp("repository")
    (root / "linear").mkdir()
    shutil.copy(linear_relu_program.pte, root / "linear" / "model.pte")
    heavy = programs.export_cpu_heavy(programs_dir, rounds=200, size=16384)
    (root / "heavy").mkdir()
    shutil.copy(heavy.pte, root / "heavy" / "model.pte")
    (root / "heavy" / "config.json").write_text(json.dumps({"instance_group": [{"count": 1}]}))
    return root


@pytest.fixture(scope="module")
def cluster():
    """A head node and one more node, each its own raylet; the driver (this test) joins it, and
    Serve's one proxy listens on a free port. The proxy would send every request to the replica
    on its own node while that one has room: told not to, both replicas take requests."""
    patch = pytest.MonkeyPatch()
    patch.setenv("RAY_SERVE_PROXY_PREFER_LOCAL_NODE_ROUTING", "0")
    nodes = Cluster(
        initialize_head=True,
        head_node_args={
            **NODE,
            "gcs_server_port": free_port(),
            "include_dashboard": False,
            "dashboard_agent_listen_port": free_port(),
        },
    )
    worker = nodes.add_node(**NODE)
    # Replicas import this checkout's `service`, not an installed copy.
    ray.init(
        address=nodes.address,
        runtime_env={"env_vars": {"PYTHONPATH": str(REPO)}},
        log_to_driver=False,  # the replicas' and the proxy's logs stay in the session folder
    )
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port}, proxy_location="HeadOnly")
    state = {"cluster": nodes, "worker": worker, "url": f"http://127.0.0.1:{port}"}
    yield state
    serve.shutdown()
    ray.shutdown()
    nodes.shutdown()
    patch.undo()


def running(name: str = "etrt") -> int:
    status = serve.status().applications.get(name)
    if status is None or "etrt" not in status.deployments:
        return 0
    return status.deployments["etrt"].replica_states.get("RUNNING", 0)


def wait_for(condition, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def infer_linear(client: httpx.Client, x: np.ndarray) -> httpx.Response:
    return client.post("/infer", json={"model": "linear", "inputs": [tensor(x)]})


@pytest.fixture(scope="module")
def two_replicas(cluster, repository):
    args = {
        "model_repository": str(repository),
        "num_replicas": "2",
        "max_replicas_per_node": "1",
        "instances_per_model": "1",
    }
    serve.run(app(args), name="etrt", route_prefix="/")
    wait_for(lambda: running() == 2, 90, "2 running replicas")
    return cluster


def test_both_replicas_answer_tritonclient_and_the_native_route_through_the_proxy(
    two_replicas, linear_relu_program
):
    url = two_replicas["url"]
    x = np.random.default_rng(5).standard_normal((2, 4)).astype(np.float32)
    with torch.no_grad():
        want = linear_relu_program.module(torch.from_numpy(x)).numpy()
    with triton_http.InferenceServerClient(url.removeprefix("http://")) as triton:
        assert triton.is_server_live() and triton.is_server_ready()
        assert triton.is_model_ready("linear")
        metadata = triton.get_model_metadata("linear")
        assert metadata["inputs"][0]["name"] == "input_0"
        for binary in (True, False):
            item = triton_http.InferInput("input_0", [2, 4], "FP32")
            item.set_data_from_numpy(x, binary_data=binary)
            result = triton.infer("linear", [item])
            np.testing.assert_allclose(result.as_numpy("output_0"), want, rtol=1e-5, atol=1e-6)
    nodes = set()
    with httpx.Client(base_url=url, timeout=30) as client:
        for _ in range(40):
            response = infer_linear(client, x)
            assert response.status_code == 200, response.text
            np.testing.assert_allclose(
                np.array(response.json()["outputs"][0]["data"]).reshape(want.shape),
                want,
                rtol=1e-5,
                atol=1e-6,
            )
            nodes.add(response.headers[HEADER])
        # The same error bodies as the server's: a native 404 and a v2 one.
        missing = client.post("/infer", json={"model": "nope", "inputs": [tensor(x)]})
        assert missing.status_code == 404 and "nope" in missing.json()["error"]
        v2 = client.post("/v2/models/nope/infer", json={"inputs": []})
        assert v2.status_code == 404 and "nope" in v2.json()["error"]
        assert client.get("/v2/health/ready").status_code == 200
    alive = {node["NodeID"] for node in ray.nodes() if node["Alive"]}
    assert len(alive) == 2 and nodes == alive, (nodes, alive)


def test_killing_the_other_node_costs_only_the_gap_and_the_replica_is_replaced(
    two_replicas, request
):
    cluster, url = two_replicas["cluster"], two_replicas["url"]
    head_id = cluster.head_node.node_id
    x = np.ones((2, 4), np.float32)
    counts = {"ok": 0, "failed": 0}
    stop = threading.Event()

    def load():
        with httpx.Client(base_url=url, timeout=10) as client:
            while not stop.is_set():
                try:
                    ok = infer_linear(client, x).status_code == 200
                except httpx.HTTPError:
                    ok = False
                counts["ok" if ok else "failed"] += 1

    thread = threading.Thread(target=load)
    thread.start()
    time.sleep(1)
    began = time.monotonic()
    cluster.remove_node(two_replicas["worker"], allow_graceful=False)
    # The node comes back (a restarted machine): Serve places the lost replica there.
    fresh = cluster.add_node(**NODE)
    two_replicas["worker"] = fresh

    def replaced() -> bool:
        with httpx.Client(base_url=url, timeout=10) as client:
            seen = {infer_linear(client, x).headers.get(HEADER) for _ in range(10)}
        return running() == 2 and fresh.node_id in seen

    wait_for(replaced, 90, "the replica replaced on the new node")
    gap_s = time.monotonic() - began
    stop.set()
    thread.join()
    request.node.user_properties.append(("node_kill", {**counts, "gap_s": round(gap_s, 1)}))
    print(f"\nnode kill: {counts['failed']} failed, {counts['ok']} ok, replaced in {gap_s:.1f} s")
    assert counts["ok"] > 0
    # Only requests in flight on the killed replica can fail; the head's replica kept serving.
    assert counts["failed"] <= 10, counts
    with httpx.Client(base_url=url, timeout=10) as client:
        nodes = {infer_linear(client, x).headers[HEADER] for _ in range(30)}
    assert nodes == {head_id, fresh.node_id}


def test_autoscaling_on_ongoing_requests_goes_to_two_replicas_and_back(two_replicas, repository):
    url = two_replicas["url"]
    serve.delete("etrt")
    args = {
        "model_repository": str(repository),
        "min_replicas": "1",
        "max_replicas": "2",
        "target_ongoing_requests": "1",
        "upscale_delay_s": "1",
        "downscale_delay_s": "3",
        "metrics_interval_s": "0.5",
        "look_back_period_s": "2",
        "max_replicas_per_node": "1",
        "instances_per_model": "1",
    }
    serve.run(app(args), name="etrt", route_prefix="/")
    wait_for(lambda: running() == 1, 60, "1 running replica")
    x = np.random.default_rng(6).standard_normal(16384).astype(np.float32)
    body = {"model": "heavy", "inputs": [tensor(x)]}
    stop = threading.Event()
    failures = []

    def load():
        with httpx.Client(base_url=url, timeout=60) as client:
            while not stop.is_set():
                response = client.post("/infer", json=body)
                if response.status_code != 200:
                    failures.append(response.status_code)

    threads = [threading.Thread(target=load) for _ in range(6)]
    for thread in threads:
        thread.start()
    try:
        wait_for(lambda: running() == 2, 60, "the upscale to 2 replicas")
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert failures == []
    wait_for(lambda: running() == 1, 60, "the downscale to 1 replica")
