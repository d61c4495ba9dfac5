"""The native /infer body, parsed and checked without pydantic, with pydantic's messages."""

import json

import numpy as np
import pytest

from service.errors import Invalid
from service.front.protocols.native import infer_body


def problems(body: bytes) -> list[tuple[str, str | None, str]]:
    with pytest.raises(Invalid) as caught:
        infer_body.parse(body)
    return [(p.rule, p.input, p.message) for p in caught.value.problems]


def test_a_valid_body_becomes_named_typed_tensors():
    body = json.dumps(
        {
            "model": "m",
            "inputs": [
                {"name": "x", "shape": [2, 2], "datatype": "FP32", "data": [[1, 2], [3, 4]]},
                {"shape": [1], "datatype": "INT64", "data": [7]},
            ],
        }
    ).encode()
    model, method, tensors, undecodable = infer_body.parse(body)
    assert undecodable is None
    assert (model, method) == ("m", "forward")
    assert [t.name for t in tensors] == ["x", None]
    np.testing.assert_array_equal(tensors[0].array, np.array([[1, 2], [3, 4]], np.float32))
    assert tensors[0].array.dtype == np.float32 and tensors[1].array.dtype == np.int64


def test_every_envelope_problem_is_named_at_once():
    body = json.dumps(
        {"model": 3, "method": None, "inputs": [{"shape": ["2"], "datatype": 1, "data": 5}, "nope"]}
    ).encode()
    assert problems(body) == [
        ("request.invalid", None, "model: Input should be a valid string"),
        ("request.invalid", None, "method: Input should be a valid string"),
        ("request.invalid", "input_0", "inputs.0.shape.0: Input should be a valid integer"),
        ("request.invalid", "input_0", "inputs.0.datatype: Input should be a valid string"),
        ("request.invalid", "input_0", "inputs.0.data: Input should be a valid list"),
        (
            "request.invalid",
            "input_1",
            "inputs.1: Input should be a valid dictionary or object to extract fields from",
        ),
    ]


@pytest.mark.parametrize(
    "body,message",
    [
        (b"", "body: Field required"),
        (b'{"model": ', "body: JSON decode error"),
        (b"[1, 2]", "body: Input should be a valid dictionary"),
        (json.dumps({"inputs": []}).encode(), "model: Field required"),
    ],
)
def test_malformed_bodies_are_request_invalid(body, message):
    [(rule, _, text)] = problems(body)
    assert rule == "request.invalid" and text.startswith(message), text


def test_a_tensor_that_cannot_be_decoded_is_named_after_the_model():
    """Returned, not raised: the endpoint answers an unknown model 404 before it refuses the
    inputs (values that cross from a worker process)."""
    body = json.dumps(
        {"model": "m", "inputs": [{"name": "x", "shape": [2], "datatype": "FP32", "data": [1.0]}]}
    ).encode()
    model, _, tensors, (label, message) = infer_body.parse(body)
    assert (model, tensors, label) == ("m", [], "x") and "needs 2 values" in message


def test_nan_and_infinity_literals_are_read_as_python_json_writes_them():
    body = (
        b'{"model": "m", "inputs": [{"shape": [3], "datatype": "FP32", '
        b'"data": [NaN, Infinity, -Infinity]}]}'
    )
    [tensor] = infer_body.parse(body)[2]
    assert np.isnan(tensor.array[0]) and list(tensor.array[1:]) == [np.inf, -np.inf]


def test_outputs_are_written_with_non_finite_values_as_strings():
    from service.dataplane.types import Tensor

    text = infer_body.dump(
        "m", "forward", [Tensor("output_0", "FP32", np.array([1.5, np.nan], np.float32))]
    )
    assert json.loads(text) == {
        "model": "m",
        "method": "forward",
        "outputs": [{"name": "output_0", "shape": [2], "datatype": "FP32", "data": [1.5, "NaN"]}],
    }


def test_a_dim_written_as_an_integral_number_is_an_integer_and_a_fraction_is_not():
    """As JSON Schema (and pydantic) read them: 2.0 is the integer 2, 2.5 is no integer."""
    body = json.dumps(
        {"model": "m", "inputs": [{"shape": [2.0], "datatype": "FP32", "data": [1.0, 2.0]}]}
    ).encode()
    [tensor] = infer_body.parse(body)[2]
    assert tensor.array.shape == (2,)
    body = body.replace(b"[2.0]", b"[2.5]")
    [(rule, where, message)] = problems(body)
    assert (rule, where) == ("request.invalid", "input_0") and "valid integer" in message
