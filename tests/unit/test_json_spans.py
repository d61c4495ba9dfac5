"""Large JSON tensor bodies read without a Python object per number (service/front/protocols/
json_spans.py) decode exactly as the whole parse does, and whatever is not plainly numbers takes
the whole parse, with its own answer."""

import json

import numpy as np
import pytest

from service.errors import Invalid
from service.front.protocols import json_spans
from service.front.protocols.native import infer_body
from service.front.protocols.v2_rest import codec


@pytest.fixture(autouse=True)
def lift_everything(monkeypatch):
    monkeypatch.setattr(json_spans, "LIFT_ABOVE", 0)
    monkeypatch.setattr(json_spans, "_CHUNK", 7)  # pieces of a few numbers: boundaries too


def _v2(datatype: str, shape, data: str, extra: str = "") -> bytes:
    return (
        f'{{"inputs": [{{"name": "x", "datatype": "{datatype}", "shape": {shape}, '
        f'"data" : {data}}}]{extra}}}'
    ).encode()


PLAIN = [
    ("FP32", [2, 3], "[1, -2.5, 3e2, 0.125, 1E-3, 7]"),
    ("FP64", [4], "[ 0.1 ,0.2,\n0.3 , 1e300 ]"),
    ("FP16", [2], "[1, 65504]"),
    ("INT8", [3], "[-128, 0, 127]"),
    ("INT64", [2], "[9223372036854775807, -9223372036854775808]"),
    ("INT32", [0], "[]"),
    ("FP32", [], "[4]"),
]


@pytest.mark.parametrize("datatype,shape,data", PLAIN)
def test_plain_numbers_decode_as_the_whole_parse_does(datatype, shape, data):
    text = _v2(datatype, shape, data)
    lifted = json_spans.loads(text, codec._document)["inputs"][0]["data"]
    assert isinstance(lifted, np.ndarray)
    [fast] = codec.parse_header(text).inputs
    expected = np.array(json.loads(data), dtype=fast.array.dtype).reshape(shape)
    assert fast.array.dtype == expected.dtype and np.array_equal(fast.array, expected)


NOT_PLAIN = [
    ("FP32", [3], "[.5, 1, 2]"),  # not JSON
    ("FP32", [3], "[1, 2, ]"),
    ("FP32", [2, 2], "[[1, 2], [3, 4]]"),  # nested: the whole parse checks it against the shape
    ("FP32", [2], '[1, "NaN"]'),
    ("FP32", [3], "[1, true, 3]"),
    ("INT8", [3], "[1, 2, 300]"),
    ("INT32", [3], "[1, 2.0, 3]"),
    ("INT64", [1], "[99999999999999999999]"),
    ("FP16", [1], "[1e6]"),
    ("FP32", [4], "[1, 2, 3]"),  # count
    ("BOOL", [2], "[1, 0]"),
    ("BF16", [1], "[1]"),
]


@pytest.mark.parametrize("datatype,shape,data", NOT_PLAIN)
def test_what_is_not_plainly_numbers_gets_the_whole_parses_answer(
    datatype, shape, data, monkeypatch
):
    text = _v2(datatype, shape, data)

    def answer(parse):
        try:
            return ("ok", str(parse(text).inputs[0].array.tolist()))  # str: NaN == NaN
        except Invalid as exc:
            return ("refused", exc.message, [p.as_dict() for p in exc.problems])

    lifted = answer(codec.parse_header)
    monkeypatch.setattr(json_spans, "LIFT_ABOVE", 1 << 40)
    assert lifted == answer(codec.parse_header)


def test_a_data_key_outside_the_inputs_is_left_where_it_is():
    text = _v2("FP32", [2], "[1, 2]", ', "parameters": {"data": [3, 4]}')
    document = json_spans.loads(text, codec._document)
    assert document["parameters"] == {"data": [3, 4]}
    assert isinstance(document["inputs"][0]["data"], list), "the whole text was parsed"


def test_the_native_infer_body_takes_lifted_tensors_too():
    body = b'{"model": "m", "inputs": [{"shape": [3], "datatype": "FP32", "data": [1, 2, 3]}]}'
    model, method, [tensor], refused = infer_body.parse(body)
    assert (model, refused) == ("m", None)
    assert tensor.array.dtype == np.float32 and tensor.array.tolist() == [1, 2, 3]
