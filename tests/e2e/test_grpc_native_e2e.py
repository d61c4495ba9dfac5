"""gRPC ModelInfer through the fronts' native path (service/front/native_path.py infer_grpc,
runtime_ext/front/grpc_infer.h) in real server processes: a call is taken by it, with or without
a deadline (KServe's client sends one of 60 s by default), and the same call naming the method
in a request parameter (which it leaves to the servicer) by the servicer; the two answers are
the same bytes, errors the same status, details and trailing metadata; the front's count says
the native path answered the first kind. tritonclient.grpc, unmodified, gets its outputs from
it. A deadline that passes while the call waits: tests/e2e/test_cancel_e2e.py."""

import time

import grpc
import numpy as np
import pytest
import tritonclient.grpc as triton
from tritonclient.grpc import service_pb2

from support.program_fixtures import dynamic_lookup_program, linear_relu_program  # noqa: F401
from support.prometheus import parse, series
from support.server import ServerProcess, upload

FRONTS = 2
INFER = "/inference.GRPCInferenceService/ModelInfer"


@pytest.fixture(scope="module")
def served(tmp_path_factory, linear_relu_program, dynamic_lookup_program):  # noqa: F811
    server = ServerProcess(
        tmp_path_factory.mktemp("grpc-native") / "artifacts",
        "--workers",
        str(FRONTS),
        "--allow-client-shm",
    ).start()
    with server.client() as client:
        assert upload(client, "lin", linear_relu_program.pte).status_code == 201
        assert upload(client, "lookup", dynamic_lookup_program.pte).status_code == 201
    yield server, linear_relu_program.example_inputs[0].numpy()
    server.stop()


def _native_count(server) -> float:
    with server.client() as client:
        found = series(parse(client.get("/metrics").text), "etrt_front_native_requests_total")
    return sum(found.values())


def _eventually(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "not within the time"
        time.sleep(0.1)


def _message(model: str, inputs, version: str = "", id: str = "", outputs=(), typed=False):
    request = service_pb2.ModelInferRequest(model_name=model, model_version=version, id=id)
    for name, datatype, array in inputs:
        tensor = request.inputs.add(name=name, datatype=datatype, shape=list(array.shape))
        if typed:
            tensor.contents.fp32_contents.extend(array.ravel().tolist())
        else:
            request.raw_input_contents.append(array.tobytes())
    for name in outputs:
        request.outputs.add(name=name)
    return request.SerializeToString()


# `method: forward` (the default method, so the same request): request parameters are the
# servicer's to read, so the native path leaves a message with one to it. Appended to a message
# as protobuf merges fields.
_SERVICER_PARAMETER = service_pb2.ModelInferRequest(
    parameters={"method": service_pb2.InferParameter(string_param="forward")}
).SerializeToString()


def _call(channel, message: bytes, servicer: bool = False, deadline: bool = False):
    """(response bytes, or (code, details, trailing metadata) of the error); `servicer`: sent
    so that the servicer answers it; `deadline`: with one, of 60 s (never reached)."""
    infer = channel.unary_unary(INFER)  # bytes in, bytes out
    try:
        return infer(message + _SERVICER_PARAMETER if servicer else message,
                     timeout=60 if deadline else None)  # fmt: skip
    except grpc.RpcError as error:
        return error.code(), error.details(), tuple(error.trailing_metadata() or ())


def _cases(x: np.ndarray) -> dict[str, bytes]:
    ids = np.array([[1, 2, 9]], np.int64)
    return {
        "FP32": _message("lin", [("input_0", "FP32", x)]),
        "an id, a version, the output asked": _message(
            "lin", [("input_0", "FP32", x)], version="1", id="q7", outputs=["output_0"]
        ),
        "INT64, the lookup": _message("lookup", [("input_0", "INT64", ids)]),
        # Declined by it (typed contents are the servicer's to decode), served both ways.
        "typed contents": _message("lin", [("input_0", "FP32", x)], typed=True),
    }


def _refused(x: np.ndarray) -> dict[str, bytes]:
    return {
        # Taken by the native path and sent: the engine's execute refuses it (an id past the
        # table), and the status is the servicer's.
        "an execute refusing the inputs": _message(
            "lookup", [("input_0", "INT64", np.array([[1, 99]], np.int64))]
        ),
        # Declined by it: the servicer answers both ways.
        "a wrong shape": _message("lin", [("input_0", "FP32", np.zeros(9, np.float32))]),
        "an unknown model": _message("nope", [("input_0", "FP32", x)]),
        "not a message": b"\x0a\xff\xff",  # a length past its end, whatever follows
    }


def test_answers_are_the_same_bytes_whichever_path_made_them(served):
    server, x = served
    with grpc.insecure_channel(server.grpc_url) as channel:
        for case, message in {**_cases(x), **_refused(x)}.items():
            _call(channel, message)  # the lane serves known methods
            native = _call(channel, message)
            for servicer, deadline in ((True, False), (True, True), (False, True)):
                other = _call(channel, message, servicer, deadline)
                assert native == other, (case, servicer, deadline, native, other)
        answers = {case: _call(channel, m) for case, m in _cases(x).items()}
        codes = {case: _call(channel, m)[0] for case, m in _refused(x).items()}
    assert all(isinstance(answer, bytes) for answer in answers.values()), answers
    assert codes == {
        "an execute refusing the inputs": grpc.StatusCode.INVALID_ARGUMENT,
        "a wrong shape": grpc.StatusCode.INVALID_ARGUMENT,
        "an unknown model": grpc.StatusCode.NOT_FOUND,
        "not a message": grpc.StatusCode.INVALID_ARGUMENT,
    }


def test_the_native_path_takes_calls_with_a_deadline_or_without_and_leaves_parameters(served):
    server, x = served
    message = _cases(x)["FP32"]
    with grpc.insecure_channel(server.grpc_url) as channel:
        _call(channel, message)
        time.sleep(1.5)  # fronts report their counts every half second
        before = _native_count(server)
        for _ in range(20):
            assert isinstance(_call(channel, message, servicer=True, deadline=True), bytes)
        time.sleep(1.5)
        assert _native_count(server) == before
        for deadline in (True, False):
            for _ in range(10):
                assert isinstance(_call(channel, message, deadline=deadline), bytes)
    _eventually(lambda: _native_count(server) >= before + 20)


def test_tritonclient_reads_the_native_answer(served):
    server, x = served
    with triton.InferenceServerClient(server.grpc_url) as client:
        tensor = triton.InferInput("input_0", list(x.shape), "FP32")
        tensor.set_data_from_numpy(x)
        # A front that has not seen the engine's model table since the upload leaves its first
        # call to the servicer, which brings the table (the connection may be another front's).
        client.infer("lin", [tensor])
        time.sleep(1.5)  # fronts report their counts every half second
        before = _native_count(server)
        for _ in range(5):
            result = client.infer("lin", [tensor], request_id="r1")
            response = result.get_response()
            assert (response.model_name, response.model_version, response.id) == ("lin", "1", "r1")
            with grpc.insecure_channel(server.grpc_url) as channel:
                message = _message("lin", [("input_0", "FP32", x)])
                expected = _call(channel, message, servicer=True)
            parsed = service_pb2.ModelInferResponse.FromString(expected)
            assert np.array_equal(
                result.as_numpy("output_0"),
                np.frombuffer(parsed.raw_output_contents[0], np.float32).reshape(
                    parsed.outputs[0].shape
                ),
            )
    _eventually(lambda: _native_count(server) >= before + 5)


def _arena_in_use(server) -> list[float]:
    with server.client() as client:
        samples = series(parse(client.get("/metrics").text), "etrt_arena_bytes")
    return [v for labels, v in samples.items() if dict(labels)["state"] == "in_use"]


def test_calls_cancelled_at_any_point_leave_no_arena_slot_behind(served):
    """A call cancelled before its message is taken, while the engine runs it, or after its
    answer came but before it was written: each frees its arena slot (a slot freed late is
    freed by the answer; an answer that found its caller gone frees it at once)."""
    server, x = served
    message = _cases(x)["FP32"]
    rng = np.random.default_rng(7)
    with grpc.insecure_channel(server.grpc_url) as channel:
        infer = channel.unary_unary(INFER)
        for _ in range(3):
            calls = [infer.future(message) for _ in range(200)]
            for call in calls:
                if rng.random() < 0.7:
                    time.sleep(float(rng.random()) * 1e-3)
                    call.cancel()
            for call in calls:
                try:
                    assert isinstance(call.result(timeout=30), bytes)
                except grpc.FutureCancelledError:
                    pass
        assert isinstance(_call(channel, message), bytes)
    _eventually(lambda: _arena_in_use(server) and not any(_arena_in_use(server)))


def test_tensors_in_system_shared_memory_take_the_native_path_too(served):
    """tritonclient's set_shared_memory parameters on an input and an output: the native path
    sends the references (the engine reads and writes the regions), and its answer is the
    servicer's message (an output's parameters are a map: compared as messages)."""
    import uuid

    import tritonclient.utils.shared_memory as shm

    server, x = served
    name = uuid.uuid4().hex[:8]
    regions = [shm.create_shared_memory_region(f"{side}{name}", f"/etrt_grpc_{side}{name}", 4096)
               for side in ("i", "o")]  # fmt: skip
    try:
        shm.set_shared_memory_region(regions[0], [x])
        with triton.InferenceServerClient(server.grpc_url) as client:
            for side in ("i", "o"):
                client.register_system_shared_memory(
                    f"{side}{name}", f"/etrt_grpc_{side}{name}", 4096
                )
            request = service_pb2.ModelInferRequest(model_name="lin")
            tensor = request.inputs.add(name="input_0", datatype="FP32", shape=list(x.shape))
            tensor.parameters["shared_memory_region"].string_param = f"i{name}"
            tensor.parameters["shared_memory_byte_size"].int64_param = x.nbytes
            output = request.outputs.add(name="output_0")
            output.parameters["shared_memory_region"].string_param = f"o{name}"
            output.parameters["shared_memory_byte_size"].int64_param = 1024
            output.parameters["shared_memory_offset"].int64_param = 256
            message = request.SerializeToString()
            with grpc.insecure_channel(server.grpc_url) as channel:
                _call(channel, message)  # each front learns the table
                _call(channel, message)
                time.sleep(1.5)
                before = _native_count(server)
                answers, written = {}, {}
                for servicer in (True, False):
                    shm.set_shared_memory_region(regions[1], [np.zeros(1024, np.uint8)])
                    answer = _call(channel, message, servicer)
                    assert isinstance(answer, bytes), answer
                    answers[servicer] = service_pb2.ModelInferResponse.FromString(answer)
                    words = shm.get_contents_as_numpy(regions[1], np.float32, [1024])
                    written[servicer] = words[64:]  # from the offset on
            assert answers[True] == answers[False]
            count = int(np.prod(answers[False].outputs[0].shape))
            assert np.array_equal(written[True], written[False]) and written[False][:count].any()
            assert not answers[False].raw_output_contents
            parameters = answers[False].outputs[0].parameters
            assert parameters["shared_memory_region"].string_param == f"o{name}"
            assert parameters["shared_memory_offset"].int64_param == 256
            _eventually(lambda: _native_count(server) >= before + 1)
            client.unregister_system_shared_memory()
    finally:
        for region in regions:
            shm.destroy_shared_memory_region(region)


_KSERVE_CLIENT = """
import asyncio, json, sys
import numpy as np
from kserve import InferenceGRPCClient, InferInput, InferRequest

url, calls, values, shape = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3]), sys.argv[4]
x = np.array(values, np.float32).reshape([int(d) for d in shape.split(",")])

async def infer():
    client = InferenceGRPCClient(url)  # its default deadline: 60 s
    try:
        for _ in range(calls):
            tensor = InferInput("input_0", list(x.shape), "FP32")
            tensor.set_data_from_numpy(x)
            answer = await client.infer(InferRequest("lin", [tensor]))
            print(json.dumps(answer.outputs[0].as_numpy().ravel().tolist()))
    finally:
        await client.close()

asyncio.run(infer())
"""


def _kserve_calls(server, x: np.ndarray, calls: int) -> list[list[float]]:
    """The outputs KServe's client got, one per call; in a process of its own, as a user's:
    its gRPC messages share the `inference` proto package with tritonclient's."""
    import json
    import subprocess
    import sys

    shape = ",".join(str(d) for d in x.shape)
    values = json.dumps(x.ravel().tolist())
    ran = subprocess.run(
        [sys.executable, "-c", _KSERVE_CLIENT, server.grpc_url, str(calls), values, shape],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stderr[-2000:]
    return [json.loads(line) for line in ran.stdout.splitlines()]


def test_kserves_grpc_client_and_its_default_deadline_take_the_native_path(served):
    """KServe's InferenceGRPCClient sends every call with a deadline (60 s unless told
    otherwise): the native path takes such calls, and the outputs are the servicer's."""
    server, x = served
    with grpc.insecure_channel(server.grpc_url) as channel:
        message = _message("lin", [("input_0", "FP32", x)])
        expected = service_pb2.ModelInferResponse.FromString(_call(channel, message, servicer=True))
    want = np.frombuffer(expected.raw_output_contents[0], np.float32).tolist()
    _kserve_calls(server, x, 1)  # the front its connection reached learns the model table
    time.sleep(1.5)  # fronts report their counts every half second
    before = _native_count(server)
    got = _kserve_calls(server, x, 10)
    assert len(got) == 10 and all(np.allclose(answer, want, rtol=0) for answer in got), got
    _eventually(lambda: _native_count(server) >= before + 10)
