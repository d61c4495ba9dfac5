"""Property: no /infer request, however malformed, gets a 5xx or costs the client its connection.

Hypothesis builds requests over the envelope (model, method, inputs and their types) and over each
tensor field (datatype, shape with huge, negative or many dimensions, data nested, mismatched or
holding huge integers, strings and NaN words), half of them as mutations of a valid request so
that they reach decoding and execution instead of stopping at the first check. They all go to one
real server process over one kept-alive connection. Bounded to run in CI in well under a minute.
"""

import http.client
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support.program_fixtures import mix_of_ops_program  # noqa: F401
from support.server import tensor, upload

DATATYPES = ["BOOL", "UINT8", "INT8", "INT16", "INT32", "INT64", "FP16", "FP32", "FP64", "BF16"]
VALID = {
    "model": "mix",
    "method": "forward",
    "inputs": [
        tensor(np.linspace(-1, 1, 24, dtype=np.float32).reshape(3, 8)),
        tensor(np.array([1, 4, 9], np.int64)),
    ],
}

names = st.one_of(
    st.just("mix"), st.just("input_0"), st.just("input_1"), st.just(""), st.text(max_size=40)
)
# Built, not listed, so that failure reports show the strategy and not 400 digits.
big_ints = st.builds(
    lambda sign, bits: sign * (2**bits + bits % 2),
    st.sampled_from([1, -1]),
    st.sampled_from([31, 32, 53, 62, 63, 64, 100, 1024, 1329]),
)
numbers = st.one_of(
    st.integers(-300, 300), big_ints, st.floats(allow_nan=True, allow_infinity=True), st.booleans()
)
words = st.sampled_from(["NaN", "Infinity", "-Infinity", "nan", "inf", "1e999", "", "abc", "0x10"])
scalars = st.one_of(numbers, words, st.none())
dims = st.one_of(st.integers(-3, 10), big_ints)
shapes = st.one_of(
    st.lists(dims, max_size=6),
    st.lists(st.just(1), min_size=30, max_size=70),  # more dimensions than any runtime takes
    st.sampled_from([[2**62, 0], [0, 2**62], [-1], [3, -8], [3, 8], [3], [24]]),
    scalars,
    st.text(max_size=5),
)
flat_data = st.lists(scalars, max_size=64)
nested_data = st.recursive(
    st.lists(scalars, max_size=8), lambda inner: st.lists(inner, max_size=4), max_leaves=64
)
datas = st.one_of(
    flat_data, nested_data, scalars, st.dictionaries(st.text(max_size=5), scalars, max_size=3)
)
tensors = st.fixed_dictionaries(
    {},
    optional={
        "name": st.one_of(names, st.integers(), st.none()),
        "datatype": st.one_of(
            st.sampled_from(DATATYPES + ["BYTES", "FP8", "fp32", ""]), st.integers(), st.none()
        ),
        "shape": shapes,
        "data": datas,
        "parameters": st.dictionaries(st.text(max_size=5), scalars, max_size=2),
    },
)
random_bodies = st.fixed_dictionaries(
    {},
    optional={
        "model": st.one_of(names, st.integers(), st.none(), st.lists(st.text(), max_size=2)),
        "method": st.one_of(st.sampled_from(["forward", "backward", ""]), st.integers(), st.none()),
        "inputs": st.one_of(st.lists(tensors, max_size=3), scalars, tensors),
        "outputs": st.one_of(st.lists(names, max_size=2), scalars),
        "id": scalars,
    },
)


def _with_shape(data: list, shape: list):
    """Nests flat data row-major as `shape` says (dims past the data's size are left flat)."""
    if not isinstance(data, list):
        return data
    for size in reversed(shape[1:]):
        if size <= 0 or len(data) % size:
            return data
        data = [data[at : at + size] for at in range(0, len(data), size)]
    return data


@st.composite
def mutated_valid(draw):
    """A valid request with one or two changes to one tensor, most of them keeping the element
    count, so that decoding gets as far as converting the values."""
    body = json.loads(json.dumps(VALID))
    target = body["inputs"][draw(st.integers(0, 1))]
    count = len(target["data"])
    changes = draw(
        st.lists(
            st.sampled_from(
                ["poke", "datatype", "reshape", "nest", "shape", "data", "name", "drop"]
            ),
            min_size=1,
            max_size=2,
            unique=True,
        )
    )
    for change in changes:
        if change == "poke":
            data = target.get("data")
            if isinstance(data, list) and data:
                data[draw(st.integers(0, len(data) - 1))] = draw(scalars)
        elif change == "datatype":
            target["datatype"] = draw(st.sampled_from(DATATYPES))
        elif change == "reshape":  # same element count, other (many) dimensions
            target["shape"] = draw(
                st.sampled_from([[count], [count, 1, 1], [1, count], [count, 0]])
                | st.integers(30, 70).map(lambda ones: [1] * ones + [count])
            )
        elif change == "nest":  # nested by the wrong shape
            target["data"] = _with_shape(
                target.get("data"),
                draw(st.sampled_from([[4, 6], [2, 12], [6, 4], [3, 1], [1, 3], [2, 2, 6]])),
            )
        elif change == "shape":
            target["shape"] = draw(shapes)
        elif change == "data":
            target["data"] = draw(datas)
        elif change == "name":
            target["name"] = draw(names)
        else:
            target.pop(draw(st.sampled_from(["datatype", "shape", "data"])), None)
    return body


# Known-bad pairs of the issue: more dimensions than numpy takes, a shape whose size overflows.
edge_tensors = st.builds(
    lambda pair, datatype: {"datatype": datatype, "shape": pair[0], "data": pair[1]},
    st.sampled_from(["65 dims", "2**62 x 0", "0 x 2**62", "2**63 x 0", "-1 x 0", "3 x -8"]).map(
        lambda case: {
            "65 dims": ([1] * 65, [1]),
            "2**62 x 0": ([2**62, 0], []),
            "0 x 2**62": ([0, 2**62], []),
            "2**63 x 0": ([2**63, 0], []),
            "-1 x 0": ([-1, 0], []),
            "3 x -8": ([3, -8], []),
        }[case]
    ),
    st.sampled_from(DATATYPES),
)
edge_bodies = st.builds(lambda t: {"model": "mix", "inputs": [t, VALID["inputs"][1]]}, edge_tensors)


@pytest.fixture(scope="module")
def fuzz_server(shared_server, mix_of_ops_program):
    with shared_server.client() as client:
        answer = upload(client, "mix", mix_of_ops_program.pte)
        assert answer.status_code == 201, answer.text
    connection = http.client.HTTPConnection("127.0.0.1", shared_server.port, timeout=60)
    yield shared_server, connection
    connection.close()


def _post(connection, payload: bytes):
    connection.request("POST", "/infer", body=payload, headers={"content-type": "application/json"})
    response = connection.getresponse()
    return response, response.read()


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)
@given(body=st.one_of(random_bodies, mutated_valid(), edge_bodies))
def test_no_infer_request_gets_a_5xx_or_loses_the_connection(fuzz_server, body):
    server, connection = fuzz_server
    payload = json.dumps(body).encode()  # NaN and Infinity floats become JSON's NaN words
    response, answer = _post(connection, payload)
    before = connection.sock
    assert response.status < 500, (response.status, answer[:500], payload[:500])
    assert not response.will_close, "the server closed the connection"
    if response.status != 200:
        parsed = json.loads(answer)
        assert set(parsed) == {"error", "problems"}, parsed
        assert len(answer) < 20_000, len(answer)
    # The same connection serves the next request.
    response, answer = _post(connection, json.dumps(VALID).encode())
    assert response.status == 200, answer[:500]
    assert connection.sock is before
