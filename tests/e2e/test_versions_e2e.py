"""Model versions end to end, with the unmodified tritonclient.http and tritonclient.grpc: two
versions of one name serving different programs, the version policies, the versioned routes and
their 404s, per-version statistics, config, unload and delete, restarts, and two fronts."""

import json
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest
import torch
import tritonclient.grpc as grpc_triton
import tritonclient.http as http_triton
from tritonclient.grpc import model_config_pb2
from tritonclient.utils import InferenceServerException

from support.programs import _modules, export_module
from support.server import upload

FACTORS = {1: 2.0, 2: 3.0, 3: 5.0}  # version -> the Scale program it carries: x * f + 1
X = np.arange(8, dtype=np.float32).reshape(2, 4)


@pytest.fixture(scope="session")
def scale_programs(programs_dir):
    """version -> the .pte bytes of Scale(FACTORS[version]) over [2, 4] FP32."""
    scale = _modules()[3]
    return {
        v: export_module(
            programs_dir, f"scale_{f}", scale(f), (torch.randn(2, 4),)
        ).pte.read_bytes()
        for v, f in FACTORS.items()
    }


def expected(version: int) -> np.ndarray:
    return X * FACTORS[version] + 1.0


def http_infer(client, name, version=""):
    x = http_triton.InferInput("input_0", list(X.shape), "FP32")
    x.set_data_from_numpy(X, binary_data=True)
    return client.infer(name, [x], model_version=version)


def grpc_infer(client, name, version=""):
    x = grpc_triton.InferInput("input_0", list(X.shape), "FP32")
    x.set_data_from_numpy(X)
    return client.infer(name, [x], model_version=version)


def files(programs, *versions):
    return {f"file:{v}/model.pte": programs[v] for v in versions}


@pytest.fixture(scope="module")
def http(shared_server):
    client = http_triton.InferenceServerClient(shared_server.url.removeprefix("http://"))
    yield client
    client.close()


@pytest.fixture(scope="module")
def grpc(shared_server):
    with grpc_triton.InferenceServerClient(shared_server.grpc_url) as client:
        yield client


def test_two_versions_under_one_name_serve_their_own_programs(http, grpc, scale_programs):
    config = json.dumps({"version_policy": {"all": {}}})
    http.load_model("two", config=config, files=files(scale_programs, 1, 2))

    for version in (1, 2):
        answer = http_infer(http, "two", str(version))
        np.testing.assert_allclose(answer.as_numpy("output_0"), expected(version))
        assert answer.get_response()["model_version"] == str(version)
        answer = grpc_infer(grpc, "two", str(version))
        np.testing.assert_allclose(answer.as_numpy("output_0"), expected(version))
        assert answer.get_response().model_version == str(version)
        assert http.is_model_ready("two", str(version)) and grpc.is_model_ready("two", str(version))
    # Unversioned: the highest served version.
    np.testing.assert_allclose(http_infer(http, "two").as_numpy("output_0"), expected(2))
    assert grpc_infer(grpc, "two").get_response().model_version == "2"

    assert http.get_model_metadata("two")["versions"] == ["1", "2"]
    assert list(grpc.get_model_metadata("two").versions) == ["1", "2"]
    assert http.get_model_metadata("two", "1")["versions"] == ["1", "2"]
    index = [e for e in http.get_model_repository_index() if e["name"] == "two"]
    assert [(e["version"], e["state"]) for e in index] == [("1", "READY"), ("2", "READY")]
    grpc_index = [e for e in grpc.get_model_repository_index().models if e.name == "two"]
    assert [(e.version, e.state) for e in grpc_index] == [("1", "READY"), ("2", "READY")]

    # Statistics per version: version 1 ran twice (HTTP and gRPC), version 2 four times.
    stats = http.get_inference_statistics("two")["model_stats"]
    assert [(s["version"], s["inference_count"]) for s in stats] == [("1", 2), ("2", 4)]
    [one] = grpc.get_inference_statistics("two", "1").model_stats
    assert (one.version, one.inference_count, one.inference_stats.success.count) == ("1", 2, 2)

    # The configuration of a versioned model, also parsed with tritonclient's own messages.
    assert http.get_model_config("two", "1")["version_policy"] == {"all": {}}
    message = grpc.get_model_config("two", "2").config
    parsed = model_config_pb2.ModelConfig.FromString(message.SerializeToString())
    assert parsed.name == "two" and parsed.version_policy.HasField("all")
    assert [(t.name, list(t.dims)) for t in parsed.input] == [("input_0", [2, 4])]


@pytest.mark.parametrize(
    "policy, served",
    [
        (None, [3]),  # the default: latest 1
        ({"latest": {"num_versions": 1}}, [3]),
        ({"latest": {"num_versions": 2}}, [2, 3]),
        ({"all": {}}, [1, 2, 3]),
        ({"specific": {"versions": [1, 3]}}, [1, 3]),
    ],
)
def test_the_version_policy_decides_which_versions_serve(
    shared_server, http, grpc, scale_programs, policy, served
):
    name = f"policy-{len(served)}-{served[0]}-{'d' if policy is None else 'c'}"
    config = {} if policy is None else {"version_policy": policy}
    http.load_model(name, config=json.dumps(config), files=files(scale_programs, 1, 2, 3))

    assert http.get_model_metadata(name)["versions"] == [str(v) for v in served]
    for version in (1, 2, 3):
        if version in served:
            np.testing.assert_allclose(
                http_infer(http, name, str(version)).as_numpy("output_0"), expected(version)
            )
            assert grpc.is_model_ready(name, str(version))
            continue
        # Stored but not served: 404 / NOT_FOUND naming the model and version (not ready).
        assert not http.is_model_ready(name, str(version))
        assert not grpc.is_model_ready(name, str(version))
        with shared_server.client() as client:
            ready = client.get(f"/v2/models/{name}/versions/{version}/ready")
            config = client.get(f"/v2/models/{name}/versions/{version}/config")
        for answer in (ready, config):
            assert answer.status_code == 404
            assert f"'{name}' version {version} is not served" in answer.json()["error"]
        with pytest.raises(InferenceServerException) as refused:
            http_infer(http, name, str(version))
        assert refused.value.status() == "404"
        assert f"'{name}' version {version} is not served" in refused.value.message()
        with pytest.raises(InferenceServerException) as refused:
            grpc_infer(grpc, name, str(version))
        assert refused.value.status() == "StatusCode.NOT_FOUND"
        assert f"version {version} is not served" in refused.value.message()
    np.testing.assert_allclose(http_infer(http, name).as_numpy("output_0"), expected(served[-1]))
    states = {
        e["version"]: e["state"] for e in http.get_model_repository_index() if e["name"] == name
    }
    assert states == {str(v): "READY" if v in served else "UNAVAILABLE" for v in (1, 2, 3)}
    with shared_server.client() as client:
        described = client.get(f"/models/{name}").json()
    assert described["version"] == str(served[-1])
    assert [(v["version"], v["state"]) for v in described["versions"]] == [
        (str(v), "ready" if v in served else "unavailable") for v in (1, 2, 3)
    ]


def test_unknown_versions_are_404_and_not_found_naming_model_and_version(
    shared_server, http, grpc, scale_programs
):
    http.load_model("known", files=files(scale_programs, 1))
    with shared_server.client() as client:
        for path in (
            "/v2/models/known/versions/7",
            "/v2/models/known/versions/7/config",
            "/v2/models/known/versions/7/stats",
            "/v2/models/known/versions/7/ready",
            "/v2/models/known/versions/x/ready",
            "/models/known/versions/7",
        ):
            answer = client.get(path)
            assert answer.status_code == 404, (path, answer.text)
            assert "'known'" in answer.json()["error"] and (
                "version 7" in answer.json()["error"] or "version 'x'" in answer.json()["error"]
            ), (path, answer.text)
        answer = client.post(
            "/v2/models/known/versions/7/infer",
            json={"inputs": [{"name": "input_0", "shape": [2, 4], "datatype": "FP32",
                              "data": X.ravel().tolist()}]},
        )  # fmt: skip
        assert answer.status_code == 404 and "has no version 7" in answer.json()["error"]
        assert client.delete("/models/known/versions/7").status_code == 404
    for call in (
        lambda: grpc.get_model_metadata("known", "7"),
        lambda: grpc.get_model_config("known", "7"),
        lambda: grpc.get_inference_statistics("known", "7"),
        lambda: grpc_infer(grpc, "known", "7"),
    ):
        with pytest.raises(InferenceServerException) as refused:
            call()
        assert refused.value.status() == "StatusCode.NOT_FOUND"
        assert "'known'" in refused.value.message() and "version 7" in refused.value.message()
    assert not grpc.is_model_ready("known", "7")


def test_post_models_adds_and_replaces_versions(shared_server, scale_programs):
    everything = {"config": json.dumps({"version_policy": {"all": {}}})}

    def post(client, program, version=None, replace=None):
        fields = dict(everything, **({} if version is None else {"version": str(version)}))
        return upload(client, "posted", scale_programs[program], replace=replace, fields=fields)

    with shared_server.client() as client:
        assert post(client, 1).status_code == 201
        taken = post(client, 1)
        assert taken.status_code == 409 and "version=2" in taken.json()["error"]
        added = post(client, 2, version=2)
        assert added.status_code == 201, added.text
        assert [v["version"] for v in added.json()["versions"]] == ["1", "2"]
        assert post(client, 2, version=2).status_code == 409
        bad = post(client, 1, version="two")
        assert bad.status_code == 422 and bad.json()["problems"][0]["rule"] == "upload.version"
        # replace without a version replaces the newest one: version 2 runs version 3's program
        replaced = post(client, 3, replace=True)
        assert replaced.status_code == 201 and replaced.json()["version"] == "2"
        answer = client.post(
            "/v2/models/posted/versions/2/infer",
            json={"inputs": [{"name": "input_0", "shape": [2, 4], "datatype": "FP32",
                              "data": X.ravel().tolist()}]},
        )  # fmt: skip
        np.testing.assert_allclose(answer.json()["outputs"][0]["data"], expected(3).ravel())
        assert client.get("/models/posted/versions/1").json()["version"] == "1"


def test_deleting_one_version_leaves_the_other_serving_throughout(
    shared_server, http, scale_programs
):
    config = json.dumps({"version_policy": {"all": {}}})
    http.load_model("del", config=config, files=files(scale_programs, 1, 2))
    failures, done = [], threading.Event()

    def keep_asking():
        with http_triton.InferenceServerClient(shared_server.url.removeprefix("http://")) as c:
            while not done.is_set():
                try:
                    answer = http_infer(c, "del", "1").as_numpy("output_0")
                    if not np.allclose(answer, expected(1)):
                        failures.append(answer)
                except InferenceServerException as exc:
                    failures.append(exc)

    worker = threading.Thread(target=keep_asking)
    worker.start()
    try:
        with shared_server.client() as client:
            assert client.delete("/models/del/versions/2").status_code == 204
            described = client.get("/models/del").json()
            assert [v["version"] for v in described["versions"]] == ["1"]
            assert client.get("/v2/models/del/versions/2/ready").status_code == 404
    finally:
        done.set()
        worker.join()
    assert failures == []
    assert http.get_model_metadata("del")["versions"] == ["1"]
    assert [s["version"] for s in http.get_inference_statistics("del")["model_stats"]] == ["1"]
    # Deleting the last version deletes the model.
    with shared_server.client() as client:
        assert client.delete("/models/del/versions/1").status_code == 204
        assert client.get("/models/del").status_code == 404


def test_deleting_the_served_version_serves_the_one_the_policy_selects_next(
    shared_server, http, scale_programs
):
    http.load_model("next", files=files(scale_programs, 1, 2))  # latest 1: version 2 serves
    assert http.get_model_metadata("next")["versions"] == ["2"]
    with shared_server.client() as client:
        assert client.delete("/models/next/versions/2").status_code == 204
    assert http.get_model_metadata("next")["versions"] == ["1"]
    np.testing.assert_allclose(http_infer(http, "next").as_numpy("output_0"), expected(1))


def test_unload_and_load_cover_every_version_and_survive_a_restart(start_server, scale_programs):
    server = start_server()
    client = http_triton.InferenceServerClient(server.url.removeprefix("http://"))
    config = json.dumps({"version_policy": {"latest": {"num_versions": 2}}})
    client.load_model("kept", config=config, files=files(scale_programs, 1, 2, 3))
    client.unload_model("kept")
    assert not client.is_model_ready("kept", "2") and not client.is_model_ready("kept", "3")
    index = [e for e in client.get_model_repository_index() if e["name"] == "kept"]
    assert [(e["version"], e["reason"]) for e in index][1:] == [
        ("2", "unloaded"),
        ("3", "unloaded"),
    ]
    client.close()
    server.restart()
    client = http_triton.InferenceServerClient(server.url.removeprefix("http://"))
    assert not client.is_model_ready("kept")
    client.load_model("kept")
    assert client.get_model_metadata("kept")["versions"] == ["2", "3"]
    for version in (2, 3):
        np.testing.assert_allclose(
            http_infer(client, "kept", str(version)).as_numpy("output_0"), expected(version)
        )
    client.close()
    server.restart()
    with grpc_triton.InferenceServerClient(server.grpc_url) as grpc_client:
        assert list(grpc_client.get_model_metadata("kept").versions) == ["2", "3"]
        np.testing.assert_allclose(grpc_infer(grpc_client, "kept", "3").as_numpy("output_0"),
                                   expected(3))  # fmt: skip


def test_a_load_refused_in_one_version_names_it_and_keeps_the_model(
    shared_server, http, scale_programs
):
    http.load_model("whole", files=files(scale_programs, 1))
    broken = {**files(scale_programs, 1), "file:2/model.pte": b"not a program"}
    with pytest.raises(InferenceServerException) as refused:
        http.load_model("whole", files=broken)
    assert "version 2: 'model.pte' is not a valid ExecuTorch program" in refused.value.message()
    assert http.get_model_metadata("whole")["versions"] == ["1"]
    np.testing.assert_allclose(http_infer(http, "whole").as_numpy("output_0"), expected(1))


def test_versions_through_two_fronts(start_server, scale_programs):
    server = start_server("--workers", "2")
    config = json.dumps({"version_policy": {"all": {}}})
    with grpc_triton.InferenceServerClient(server.grpc_url) as grpc_client:
        grpc_client.load_model("fronts", config=config, files=files(scale_programs, 1, 2))
    body = {"inputs": [{"name": "input_0", "shape": [2, 4], "datatype": "FP32",
                        "data": X.ravel().tolist()}]}  # fmt: skip
    answers = {1: set(), 2: set()}

    def ask(version: int):
        with httpx.Client(base_url=server.url, timeout=60) as client:
            return version, client.post(f"/v2/models/fronts/versions/{version}/infer", json=body)

    # Fresh connections, both versions at once, so both fronts answer some (one after another,
    # the front that just answered is awake first and could take every one).
    with ThreadPoolExecutor(2) as pool:
        for _ in range(12):
            for version, answer in pool.map(ask, (1, 2)):
                assert answer.status_code == 200, answer.text
                np.testing.assert_allclose(
                    answer.json()["outputs"][0]["data"], expected(version).ravel()
                )
                answers[version].add(answer.json()["model_version"])
    assert answers == {1: {"1"}, 2: {"2"}}
    with httpx.Client(base_url=server.url, timeout=60) as client:
        fronts = [line for line in client.get("/metrics").text.splitlines()
                  if line.startswith("etrt_front_requests_total{")]  # fmt: skip
        assert len(fronts) == 2, fronts
        assert client.delete("/models/fronts/versions/2").status_code == 204
    for _ in range(6):  # no front answers from the table before the delete
        with httpx.Client(base_url=server.url, timeout=60) as client:
            gone = client.post("/v2/models/fronts/versions/2/infer", json=body)
            kept = client.post("/v2/models/fronts/infer", json=body)
        assert gone.status_code == 404, gone.text
        assert kept.status_code == 200 and kept.json()["model_version"] == "1"


def _downgrade_to_schema_2(artifacts):
    """Rewrites the registry as the release before versions wrote it: one row per model keyed
    by name, schema 2 (the files stay where they are)."""
    import sqlite3

    db = sqlite3.connect(artifacts / "registry.sqlite3", isolation_level=None)
    db.execute("BEGIN")
    db.execute(
        "CREATE TABLE old (name TEXT PRIMARY KEY, directory TEXT NOT NULL, "
        "description TEXT NOT NULL, created_at REAL NOT NULL, "
        "unloaded INTEGER NOT NULL DEFAULT 0)"
    )
    db.execute(
        "INSERT INTO old SELECT name, directory, description, created_at, unloaded FROM models"
    )
    db.execute("DROP TABLE models")
    db.execute("ALTER TABLE old RENAME TO models")
    db.execute("PRAGMA user_version = 2")
    db.execute("COMMIT")
    db.close()


def test_models_stored_by_the_release_before_versions_keep_serving(start_server, scale_programs):
    server = start_server()
    with server.client() as client:
        assert upload(client, "old", scale_programs[1]).status_code == 201
        assert upload(client, "parked", scale_programs[2]).status_code == 201
    with http_triton.InferenceServerClient(server.url.removeprefix("http://")) as client:
        client.unload_model("parked")
    server.stop()
    _downgrade_to_schema_2(server.artifacts)
    server.start()
    with http_triton.InferenceServerClient(server.url.removeprefix("http://")) as client:
        np.testing.assert_allclose(http_infer(client, "old", "1").as_numpy("output_0"), expected(1))
        assert client.get_model_metadata("old")["versions"] == ["1"]
        assert not client.is_model_ready("parked")  # unloaded before the upgrade: still so
        client.load_model("parked")
        np.testing.assert_allclose(http_infer(client, "parked").as_numpy("output_0"), expected(2))
    with server.client() as client:  # and it takes new versions
        added = upload(client, "old", scale_programs[3], fields={"version": "2"})
        assert added.status_code == 201 and added.json()["state"] == "ready", added.text
        answer = client.get("/models/old").json()
        assert [(v["version"], v["state"]) for v in answer["versions"]] == [
            ("1", "unavailable"),
            ("2", "ready"),
        ]
