"""gRPC ModelInfer through the fronts' native path (service/front/native_path.py infer_grpc,
runtime_ext/front/grpc_infer.h) in real server processes: a call without a deadline is taken
by it, the same call with a deadline (which it never takes: a lane request carries none) by the
servicer, and the two answers are the same bytes, errors the same status, details and trailing
metadata; the front's count says the native path answered the first kind. tritonclient.grpc,
unmodified, gets its outputs from it."""

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


def _call(channel, message: bytes, deadline: bool):
    """(response bytes, or (code, details, trailing metadata) of the error)."""
    infer = channel.unary_unary(INFER)  # bytes in, bytes out
    try:
        return infer(message, timeout=60 if deadline else None)
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
        "not a message": b"\xff\xff\xff",
    }


def test_answers_are_the_same_bytes_whichever_path_made_them(served):
    server, x = served
    with grpc.insecure_channel(server.grpc_url) as channel:
        for case, message in {**_cases(x), **_refused(x)}.items():
            _call(channel, message, deadline=False)  # the lane serves known methods
            native, servicer = (_call(channel, message, deadline) for deadline in (False, True))
            assert native == servicer, (case, native, servicer)
        answers = {case: _call(channel, m, False) for case, m in _cases(x).items()}
        codes = {case: _call(channel, m, False)[0] for case, m in _refused(x).items()}
    assert all(isinstance(answer, bytes) for answer in answers.values()), answers
    assert codes == {
        "an execute refusing the inputs": grpc.StatusCode.INVALID_ARGUMENT,
        "a wrong shape": grpc.StatusCode.INVALID_ARGUMENT,
        "an unknown model": grpc.StatusCode.NOT_FOUND,
        "not a message": grpc.StatusCode.INVALID_ARGUMENT,
    }


def test_the_native_path_takes_calls_without_a_deadline_only(served):
    server, x = served
    message = _cases(x)["FP32"]
    with grpc.insecure_channel(server.grpc_url) as channel:
        _call(channel, message, deadline=False)
        time.sleep(1.5)  # fronts report their counts every half second
        before = _native_count(server)
        for _ in range(20):
            assert isinstance(_call(channel, message, deadline=True), bytes)
        time.sleep(1.5)
        assert _native_count(server) == before
        for _ in range(20):
            assert isinstance(_call(channel, message, deadline=False), bytes)
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
                expected = _call(channel, _message("lin", [("input_0", "FP32", x)]), True)
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
        assert isinstance(_call(channel, message, deadline=False), bytes)
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
                _call(channel, message, deadline=False)  # each front learns the table
                _call(channel, message, deadline=False)
                time.sleep(1.5)
                before = _native_count(server)
                answers, written = {}, {}
                for deadline in (True, False):
                    shm.set_shared_memory_region(regions[1], [np.zeros(1024, np.uint8)])
                    answer = _call(channel, message, deadline)
                    assert isinstance(answer, bytes), answer
                    answers[deadline] = service_pb2.ModelInferResponse.FromString(answer)
                    words = shm.get_contents_as_numpy(regions[1], np.float32, [1024])
                    written[deadline] = words[64:]  # from the offset on
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
