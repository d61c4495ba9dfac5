"""Shared memory requests over REST taken by the fronts' native path (runtime_ext/front/, without
the front's Python per request), with a real server of two fronts and tritonclient's system
shared memory utilities: the outputs in the output region are the answers to the same tensors
sent inline; every such request is counted by etrt_front_native_requests_total; the answer is
the bytes the Python path writes for the same request (one the native path declines: an input
parameter it does not read, which the Python path ignores); and a refusal (an unknown region)
is the Python path's error, word for word."""

from __future__ import annotations

import json
import socket
import time
import uuid

import numpy as np
import pytest
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm

from support.program_fixtures import linear_relu_program  # noqa: F401
from support.prometheus import parse, series
from support.server import ServerProcess, serving, upload

SHAPE, OUT_SHAPE = (2, 4), (2, 3)
NBYTES, OUT_BYTES = 2 * 4 * 4, 2 * 3 * 4
REQUESTS = 20


@pytest.fixture(scope="module")
def server(tmp_path_factory, linear_relu_program):
    artifacts = tmp_path_factory.mktemp("shm_native") / "artifacts"
    server = serving(
        artifacts, {"lin": linear_relu_program}, "--allow-client-shm", "--workers", "2"
    )
    yield server
    server.stop()


@pytest.fixture
def region(server):
    """One registered region: the input at 0, the output at 256."""
    name = f"n{uuid.uuid4().hex[:8]}"
    handle = shm.create_shared_memory_region(name, f"/etrt_native_{name}", 1024)
    client = httpclient.InferenceServerClient(server.url.removeprefix("http://"))
    client.register_system_shared_memory(name, f"/etrt_native_{name}", 1024)
    yield name, handle, client
    client.unregister_system_shared_memory(name)
    client.close()
    shm.destroy_shared_memory_region(handle)


def native_count(server, at_least: float = 0) -> float:
    """Requests the fronts' native paths took, once at least `at_least` (each front reports its
    count every half second, service/front/engine_client.py, later on a busy machine)."""
    deadline = time.monotonic() + 15
    while True:
        with server.client() as client:
            found = series(parse(client.get("/metrics").text), "etrt_front_native_requests_total")
        count = sum(found.values())
        if count >= at_least or time.monotonic() > deadline:
            return count
        time.sleep(0.1)


def names(client) -> tuple[str, str]:
    metadata = client.get_model_metadata("lin")
    return metadata["inputs"][0]["name"], metadata["outputs"][0]["name"]


def inline(client, x: np.ndarray) -> np.ndarray:
    input_name, output_name = names(client)
    tensor = httpclient.InferInput(input_name, list(SHAPE), "FP32")
    tensor.set_data_from_numpy(x, binary_data=False)
    return client.infer("lin", [tensor]).as_numpy(output_name)


def body(client, region: str, ignored: bool = False) -> bytes:
    """A v2 JSON request as tritonclient writes it for tensors in `region`; `ignored`: with an
    input parameter the Python path ignores and the native path declines."""
    input_name, output_name = names(client)
    parameters = {"shared_memory_region": region, "shared_memory_byte_size": NBYTES}
    if ignored:
        parameters["note"] = "declined"
    output = {"shared_memory_region": region, "shared_memory_byte_size": OUT_BYTES}
    output["shared_memory_offset"] = 256
    request = {
        "inputs": [
            {"name": input_name, "shape": list(SHAPE), "datatype": "FP32", "parameters": parameters}
        ],
        "outputs": [{"name": output_name, "parameters": output}],
    }
    return json.dumps(request).encode()


@pytest.fixture(scope="module")
def connection(server):
    """One connection, so one front: its first request after the upload brings the front's
    model table up to date (on the Python path), and the native path takes the next ones. Each
    request goes in one write: the native path takes only a request that arrives whole."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        inline = {"inputs": [{"name": "x", "shape": list(SHAPE), "datatype": "FP32"}]}
        inline["inputs"][0]["data"] = [0] * 8
        exchange(sock, json.dumps(inline).encode())
        yield sock


def exchange(sock: socket.socket, content: bytes) -> tuple[int, bytes]:
    """(status, the whole answer without its date line) to an infer request of `content`."""
    head = f"POST /v2/models/lin/infer HTTP/1.1\r\nHost: t\r\nContent-Length: {len(content)}"
    sock.sendall(head.encode() + b"\r\n\r\n" + content)
    answer = b""
    while b"\r\n\r\n" not in answer:
        chunk = sock.recv(65536)
        assert chunk, "the connection closed"
        answer += chunk
    head, _, rest = answer.partition(b"\r\n\r\n")
    lines = [line for line in head.split(b"\r\n") if not line.lower().startswith(b"date:")]
    length = next(int(line[15:]) for line in lines if line.lower().startswith(b"content-length:"))
    while len(rest) < length:
        rest += sock.recv(65536)
    return int(lines[0].split()[1]), b"\r\n".join(lines) + b"\r\n\r\n" + rest


def both_paths(server, connection, client, region: str) -> tuple[tuple, tuple]:
    """The answers to the request for `region` on the native path and on the Python path (the
    same request with an input parameter the native path declines)."""
    before = native_count(server)
    native = exchange(connection, body(client, region))
    assert native_count(server, before + 1) == before + 1, native
    python = exchange(connection, body(client, region, ignored=True))
    time.sleep(1.5)  # its count would be reported by now
    assert native_count(server) == before + 1
    return native, python


def test_shm_requests_take_the_native_path_with_their_outputs_in_the_region(server, region):
    name, handle, client = region
    rng = np.random.default_rng(5)
    xs = [rng.standard_normal(SHAPE, dtype=np.float32) for _ in range(REQUESTS)]
    expected = [inline(client, x) for x in xs]
    input_name, output_name = names(client)
    before = native_count(server)
    for x, y in zip(xs, expected):
        shm.set_shared_memory_region(handle, [x])
        tensor = httpclient.InferInput(input_name, list(SHAPE), "FP32")
        tensor.set_shared_memory(name, NBYTES)
        output = httpclient.InferRequestedOutput(output_name)
        output.set_shared_memory(name, OUT_BYTES, 256)
        answer = client.infer("lin", [tensor], outputs=[output])
        parameters = answer.get_output(output_name)["parameters"]
        assert parameters == {
            "shared_memory_region": name,
            "shared_memory_byte_size": OUT_BYTES,
            "shared_memory_offset": 256,
        }
        got = shm.get_contents_as_numpy(handle, np.float32, list(OUT_SHAPE), offset=256)
        np.testing.assert_array_equal(got, y)
    assert native_count(server, before + REQUESTS) == before + REQUESTS


def test_the_answer_is_the_python_paths_bytes(server, connection, region):
    name, handle, client = region
    shm.set_shared_memory_region(handle, [np.ones(SHAPE, np.float32)])
    native, python = both_paths(server, connection, client, name)
    assert native == python and native[0] == 200, native
    assert b'"data"' not in native[1] and b'"shared_memory_offset":256' in native[1]


def test_an_unknown_region_is_refused_with_the_python_paths_error(server, connection, region):
    _, _, client = region
    # Taken by the front's native path, declined by the engine's lane, refused by its Python.
    native, python = both_paths(server, connection, client, "nowhere")
    assert native == python and native[0] == 400, native
    assert b"no shared memory region is named 'nowhere'" in native[1]
