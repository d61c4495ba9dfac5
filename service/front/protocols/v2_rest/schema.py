"""The OpenAPI declarations of the /v2 routes: what each can answer, and the inference body.

The routes pass these to their decorators, so the schema says what the code answers: 400 (not
FastAPI's 422) for a malformed request, the dataplane's codes for the rest, 401/403 from the
token check on every route but health, 500 for the server's own faults. The inference body is
read by codec.py, not by FastAPI, so it is declared here as JSON Schema with the same rules.
"""

from __future__ import annotations

from service.dtypes import DATATYPES
from service.front.protocols.http_errors import AUTH, responses
from service.front.protocols.json_tensors import MAX_DIM, MAX_DIMS

ANSWERS = responses(*AUTH, 500)
MODEL_ANSWERS = responses(*AUTH, 500, 404)
READY_ANSWERS = responses(*AUTH, 500, 404, 503)
INFER_ANSWERS = responses(*AUTH, 500, 400, 404, 413, 503, 504)
REPOSITORY_ANSWERS = responses(*AUTH, 500, 400, 413, 507)
LOAD_ANSWERS = responses(*AUTH, 500, 400, 404, 409, 413, 503)
UNLOAD_ANSWERS = responses(*AUTH, 500, 400, 404, 413)
SERVER_READY_ANSWERS = {
    **responses(500),
    503: {
        "description": "The server is starting or stopping",
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "required": ["ready", "error"],
                    "properties": {"ready": {"type": "boolean"}, "error": {"type": "string"}},
                }
            }
        },
    },
}

_PARAMETERS = {"type": "object", "description": "extension parameters, passed to the model"}
_TENSOR = {
    "type": "object",
    "required": ["name", "datatype", "shape"],
    "properties": {
        "name": {"type": "string", "minLength": 1},
        "datatype": {"type": "string", "enum": list(DATATYPES)},
        "shape": {
            "type": "array",
            "maxItems": MAX_DIMS,
            "items": {"type": "integer", "minimum": 0, "maximum": MAX_DIM},
        },
        "parameters": {
            "type": "object",
            "properties": {
                "binary_data_size": {
                    "type": "integer",
                    "minimum": 0,
                    "description": "bytes of this input in the binary data after the header",
                }
            },
        },
        "data": {"type": "array", "description": "the values, flat or nested as `shape`"},
    },
}
INFER_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "required": ["inputs"],
                    "properties": {
                        "id": {"type": "string"},
                        "parameters": {
                            "type": "object",
                            "properties": {
                                "timeout": {"type": "integer", "minimum": 0},
                                "method": {"type": "string"},
                                "binary_data_output": {"type": "boolean"},
                            },
                        },
                        "inputs": {"type": "array", "minItems": 1, "items": _TENSOR},
                        "outputs": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "required": ["name"],
                                "properties": {
                                    "name": {"type": "string"},
                                    "parameters": _PARAMETERS,
                                },
                            },
                        },
                    },
                }
            }
        },
    }
}
