"""Property: no v2 REST inference header and no gRPC ModelInfer message, however malformed, gets a
5xx (gRPC: INTERNAL or UNKNOWN), and a REST client keeps its connection.

The named cases are the ones probing found (a datatype given as a list or an object, a dimension
of 2**63 or 65 dimensions with binary data, a lone surrogate in an id or an input name); each is
answered 400 naming the input or field. Hypothesis then builds headers over every field -- id,
parameters, inputs (name, datatype, shape, parameters, data), outputs -- with types, sizes,
dimensions and strings (lone surrogates included) out of range, half of them as mutations of a
valid request, sent as JSON or with binary data; and ModelInfer messages over the same fields,
as protobuf and as raw bytes. Bounded to run in CI in well under a minute.
"""

import http.client
import json

import grpc
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tritonclient.grpc import service_pb2

from support.program_fixtures import mix_of_ops_program  # noqa: F401
from support.server import upload

DATATYPES = ["BOOL", "UINT8", "INT8", "INT16", "INT32", "INT64", "FP16", "FP32", "FP64", "BF16"]
X = np.linspace(-1, 1, 24, dtype=np.float32).reshape(3, 8)
Y = np.array([1, 4, 9], np.int64)
PATH = "/v2/models/mix/infer"
LONE = "\ud800"
_FUZZ = settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)


def _valid_header(binary: bool) -> dict:
    inputs = []
    for name, array, datatype in (("input_0", X, "FP32"), ("input_1", Y, "INT64")):
        item = {"name": name, "datatype": datatype, "shape": list(array.shape)}
        if binary:
            item["parameters"] = {"binary_data_size": array.nbytes}
        else:
            item["data"] = array.reshape(-1).tolist()
        inputs.append(item)
    return {"id": "r1", "inputs": inputs}


def _body(header: dict, payload: bytes | None) -> tuple[bytes, dict]:
    # ensure_ascii writes a lone surrogate as the JSON escape "\ud800", as a client would.
    text = json.dumps(header, ensure_ascii=True).encode()
    if payload is None:
        return text, {"content-type": "application/json"}
    return text + payload, {"inference-header-content-length": str(len(text))}


@pytest.fixture(scope="module")
def server(shared_server, mix_of_ops_program):
    with shared_server.client() as client:
        answer = upload(client, "mix", mix_of_ops_program.pte)
        assert answer.status_code == 201, answer.text
    return shared_server


@pytest.fixture(scope="module")
def connection(server):
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    yield connection
    connection.close()


def _post(connection, body: bytes, headers: dict):
    connection.request("POST", PATH, body=body, headers=headers)
    response = connection.getresponse()
    return response, response.read()


def _refused(connection, header: dict, payload: bytes | None) -> dict:
    response, answer = _post(connection, *_body(header, payload))
    assert response.status == 400, (response.status, answer[:500])
    return json.loads(answer)


PAYLOAD = X.tobytes() + Y.tobytes()


@pytest.mark.parametrize(
    "case, field",
    [
        ("datatype list", "input 'input_0'"),
        ("datatype object", "input 'input_0'"),
        ("dim 2**63", "input 'input_0'"),
        ("65 dims", "input 'input_0'"),
        ("id surrogate", "'id'"),
        ("name surrogate", "inputs[0] 'name'"),
        ("output name surrogate", "outputs[0] 'name'"),
        ("parameter surrogate", "'parameters'"),
    ],
)
def test_each_malformed_header_field_is_a_400_naming_it(connection, case, field):
    header = _valid_header(binary=True)
    first = header["inputs"][0]
    if case == "datatype list":
        first["datatype"] = ["FP32"]
    elif case == "datatype object":
        first["datatype"] = {"FP32": 1}
    elif case == "dim 2**63":
        first["shape"] = [2**63, 0]
        first["parameters"]["binary_data_size"] = 0
    elif case == "65 dims":
        first["shape"] = [1] * 65
        first["parameters"]["binary_data_size"] = 4
    elif case == "id surrogate":
        header["id"] = "r" + LONE
    elif case == "name surrogate":
        first["name"] = "input" + LONE
    elif case == "output name surrogate":
        header["outputs"] = [{"name": "out" + LONE}]
    else:
        header["parameters"] = {"note" + LONE: 1}
    payload = PAYLOAD if case not in ("dim 2**63", "65 dims") else Y.tobytes()
    if case == "65 dims":
        payload = X.tobytes()[:4] + Y.tobytes()
    answer = _refused(connection, header, payload)
    assert field in answer["error"], answer
    assert set(answer) == {"error", "problems"} and answer["problems"], answer


def test_a_lone_surrogate_in_an_echoed_value_is_written_as_valid_utf8(connection):
    """An unknown datatype is echoed in the message: the error writer must still write it."""
    header = _valid_header(binary=False)
    header["inputs"][0]["datatype"] = "FP" + LONE
    response, answer = _post(connection, *_body(header, None))
    assert response.status == 400, answer[:500]
    assert "unknown datatype" in json.loads(answer.decode("utf-8"))["error"]


# -- REST fuzz ---------------------------------------------------------------------------------

surrogate_text = st.builds(lambda a, b: a + LONE + b, st.text(max_size=4), st.text(max_size=4))
strings = st.one_of(st.text(max_size=40), surrogate_text, st.just(""))
big_ints = st.sampled_from([2**31, 2**32, 2**53, 2**63 - 1, 2**63, 2**64, 2**100, -(2**63)])
scalars = st.one_of(
    st.integers(-300, 300),
    big_ints,
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    strings,
    st.none(),
)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(strings, inner, max_size=3)
    ),
    max_leaves=8,
)
dims = st.one_of(st.integers(-3, 10), big_ints)
shapes = st.one_of(
    st.lists(dims, max_size=6),
    st.lists(st.just(1), min_size=15, max_size=70),
    st.sampled_from([[2**63, 0], [0, 2**63], [2**62, 0], [3, 8], [3], [24], []]),
    json_values,
)
parameters = st.one_of(
    st.dictionaries(
        st.one_of(st.sampled_from(["binary_data_size", "binary_data", "timeout"]), strings),
        json_values,
        max_size=3,
    ),
    json_values,
)
tensors = st.fixed_dictionaries(
    {},
    optional={
        "name": st.one_of(st.sampled_from(["input_0", "input_1", ""]), strings, json_values),
        "datatype": st.one_of(st.sampled_from(DATATYPES + ["BYTES", "fp32", ""]), json_values),
        "shape": shapes,
        "data": st.one_of(st.lists(scalars, max_size=30), json_values),
        "parameters": parameters,
    },
)
outputs = st.one_of(
    st.lists(
        st.fixed_dictionaries(
            {}, optional={"name": st.one_of(strings, json_values), "parameters": parameters}
        ),
        max_size=3,
    ),
    json_values,
)
random_headers = st.fixed_dictionaries(
    {},
    optional={
        "id": st.one_of(strings, json_values),
        "parameters": st.one_of(
            st.fixed_dictionaries(
                {},
                optional={
                    "timeout": json_values,
                    "method": st.one_of(st.sampled_from(["forward", "nope"]), json_values),
                    "binary_data_output": json_values,
                },
            ),
            parameters,
        ),
        "inputs": st.one_of(st.lists(tensors, max_size=3), json_values),
        "outputs": outputs,
    },
)


@st.composite
def mutated_valid(draw):
    """A valid header (JSON or binary) with one or two fields of one input or of the request
    replaced, so that checks past the first are reached."""
    binary = draw(st.booleans())
    header = _valid_header(binary)
    target = header["inputs"][draw(st.integers(0, 1))]
    for change in draw(
        st.lists(
            st.sampled_from(
                ["name", "datatype", "shape", "size", "data", "parameters", "id", "outputs"]
            ),
            min_size=1,
            max_size=2,
            unique=True,
        )
    ):
        if change == "name":
            target["name"] = draw(strings)
        elif change == "datatype":
            target["datatype"] = draw(st.one_of(st.sampled_from(DATATYPES), json_values))
        elif change == "shape":
            target["shape"] = draw(shapes)
        elif change == "size" and binary and isinstance(target.get("parameters"), dict):
            # (parameters replaced by an earlier change may be no object any more)
            target["parameters"]["binary_data_size"] = draw(st.one_of(dims, json_values))
        elif change == "data":
            target["data"] = draw(json_values)
        elif change == "parameters":
            target["parameters"] = draw(parameters)
        elif change == "id":
            header["id"] = draw(st.one_of(strings, json_values))
        elif change == "outputs":
            header["outputs"] = draw(outputs)
    return header, (PAYLOAD if binary else None)


payloads = st.one_of(st.none(), st.just(PAYLOAD), st.binary(max_size=64))


@_FUZZ
@given(case=st.one_of(st.tuples(random_headers, payloads), mutated_valid()))
def test_no_v2_header_gets_a_5xx_or_loses_the_connection(connection, case):
    header, payload = case
    body, headers = _body(header, payload)
    response, answer = _post(connection, body, headers)
    before = connection.sock
    assert response.status < 500, (response.status, answer[:500], body[:500])
    assert not response.will_close, "the server closed the connection"
    if response.status != 200:
        parsed = json.loads(answer.decode("utf-8"))
        assert set(parsed) == {"error", "problems"}, parsed
    response, answer = _post(connection, *_body(_valid_header(binary=True), PAYLOAD))
    assert response.status == 200, answer[:500]
    assert connection.sock is before


# -- gRPC fuzz ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def model_infer(server):
    channel = grpc.insecure_channel(server.grpc_url)
    yield channel.unary_unary(
        "/inference.GRPCInferenceService/ModelInfer",
        request_serializer=None,
        response_deserializer=None,
    )
    channel.close()


def _grpc_valid() -> service_pb2.ModelInferRequest:
    request = service_pb2.ModelInferRequest(model_name="mix", id="r1")
    for name, array, datatype in (("input_0", X, "FP32"), ("input_1", Y, "INT64")):
        request.inputs.add(name=name, datatype=datatype, shape=list(array.shape))
        request.raw_input_contents.append(array.tobytes())
    return request


grpc_strings = st.one_of(st.text(max_size=20), st.sampled_from(["mix", "input_0", "FP32", ""]))
grpc_dims = st.one_of(st.integers(-3, 10), st.sampled_from([2**31, 2**62, 2**63 - 1, -(2**63)]))


@st.composite
def grpc_messages(draw) -> bytes:
    request = _grpc_valid()
    for change in draw(
        st.lists(
            st.sampled_from(
                [
                    "model",
                    "version",
                    "name",
                    "datatype",
                    "shape",
                    "raw",
                    "contents",
                    "parameter",
                    "outputs",
                    "drop_raw",
                ]
            ),
            max_size=3,
            unique=True,
        )
    ):
        target = request.inputs[draw(st.integers(0, 1))]
        if change == "model":
            request.model_name = draw(grpc_strings)
        elif change == "version":
            request.model_version = draw(grpc_strings)
        elif change == "name":
            target.name = draw(grpc_strings)
        elif change == "datatype":
            target.datatype = draw(st.one_of(st.sampled_from(DATATYPES + ["BYTES"]), grpc_strings))
        elif change == "shape":
            del target.shape[:]
            target.shape.extend(draw(st.one_of(st.lists(grpc_dims, max_size=6), st.just([1] * 65))))
        elif change == "raw":
            del request.raw_input_contents[:1]
            request.raw_input_contents.insert(0, draw(st.binary(max_size=128)))
        elif change == "contents":
            target.contents.fp32_contents.extend(draw(st.lists(st.floats(width=32), max_size=30)))
        elif change == "parameter":
            key = draw(st.sampled_from(["timeout", "method", "binary_data_size", "x"]))
            kind = draw(st.sampled_from(["int64_param", "string_param", "bool_param"]))
            value = {"int64_param": draw(grpc_dims), "string_param": draw(grpc_strings)}.get(
                kind, True
            )
            setattr(request.parameters[key], kind, value)
        elif change == "outputs":
            request.outputs.add(name=draw(grpc_strings))
        else:
            del request.raw_input_contents[:]
    wire = request.SerializeToString()
    if draw(st.booleans()):
        return wire
    # Raw bytes: the message truncated or with bytes changed.
    cut = draw(st.integers(0, len(wire)))
    noise = draw(st.binary(max_size=16))
    return wire[:cut] + noise + wire[cut + len(noise) :]


@_FUZZ
@given(message=grpc_messages())
def test_no_model_infer_message_gets_internal(model_infer, message):
    try:
        model_infer(message, timeout=30)
    except grpc.RpcError as exc:
        assert exc.code() not in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN), (
            exc.code(),
            exc.details(),
            message[:300],
        )
