"""Every rule id a problem can carry, with what it means and how each protocol answers it.

A rule id is the stable part of a refusal: clients and dashboards (`etrt_ingest_problems_total
{rule}`) act on it, so each is declared here once and code refers to the declaration. The
docs/ingest-rules.md's rule table is generated from this catalogue and checked against it
(tests/unit/test_rules.py), and a test fails on any rule-like string literal in service/ that is
not declared, so a rule added on another branch is added here at the merge.

To add a rule: one `_rule(...)` line in its family's block, with a one-line meaning.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Answer:
    """How the protocols answer a problem of a rule: the native HTTP API's status, the Open
    Inference Protocol's (REST /v2) and gRPC's code. `error` names the service.errors class the
    dataplane raises (service/front/protocols/http_errors.py and v2_grpc/binding.py map it)."""

    error: str
    http: int
    v2: int
    grpc: str


REFUSED = Answer("Invalid", 422, 400, "INVALID_ARGUMENT")
TOO_LARGE = Answer("TooLarge", 413, 413, "RESOURCE_EXHAUSTED")
# 507 Insufficient Storage: the request is fine, the server lacks the room to carry it out now.
NO_DEVICE_MEMORY = Answer("DeviceMemoryFull", 507, 507, "RESOURCE_EXHAUSTED")
# Answers no route writes (service/front/protocols/http_errors.py); gRPC has its own for these.
NO_ROUTE = Answer("", 404, 404, "UNIMPLEMENTED")
NO_METHOD = Answer("", 405, 405, "UNIMPLEMENTED")
HTTP_OTHER = Answer("", 400, 400, "")
INTERNAL = Answer("", 500, 500, "INTERNAL")
TIMED_OUT = Answer("", 408, 408, "")


@dataclass(frozen=True)
class Rule:
    id: str
    answer: Answer
    meaning: str


CATALOGUE: dict[str, Rule] = {}


def _rule(rule_id: str, answer: Answer, meaning: str) -> str:
    """Declares a rule; returns its id, which is what problems carry."""
    if rule_id in CATALOGUE:
        raise ValueError(f"rule {rule_id!r} is declared twice")
    CATALOGUE[rule_id] = Rule(rule_id, answer, meaning)
    return rule_id


# --- requests: routes, bodies and their envelopes ------------------------------------------------
REQUEST_ROUTE = _rule("request.route", NO_ROUTE, "no route has this path")
REQUEST_METHOD = _rule(
    "request.method", NO_METHOD, "the path does not take this method (the answer's Allow does)"
)
REQUEST_HTTP = _rule("request.http", HTTP_OTHER, "any other HTTP-level refusal of the request")
REQUEST_INVALID = _rule(
    "request.invalid", REFUSED, "the request's envelope breaks the protocol (field by field)"
)
REQUEST_JSON = _rule("request.json", REFUSED, "the request body is not valid JSON")
REQUEST_UNICODE = _rule(
    "request.unicode", REFUSED, "a string of the request is not valid Unicode (a lone surrogate)"
)
REQUEST_PARAMETER = _rule(
    "request.parameter", REFUSED, "a request parameter has the wrong type or value"
)
REQUEST_PRIORITY = _rule(
    "request.priority", REFUSED, "a priority that is no integer within the model's levels"
)
REQUEST_TOO_LARGE = _rule("request.too_large", TOO_LARGE, "the body crossed its size limit")
REQUEST_TIMEOUT = _rule(
    "request.timeout", TIMED_OUT, "the request's head or body stopped arriving (read timeouts)"
)
SERVER_INTERNAL = _rule(
    "server.internal", INTERNAL, "the server's own fault (details only in the server log)"
)

# --- request inputs and outputs -----------------------------------------------------------------
INPUT_COUNT = _rule("input.count", REFUSED, "not as many inputs as the method takes")
INPUT_NAME = _rule(
    "input.name", REFUSED, "an input without a name where one is needed (native: all or none)"
)
INPUT_UNKNOWN = _rule("input.unknown", REFUSED, "an input name the method does not have")
INPUT_DUPLICATE = _rule("input.duplicate", REFUSED, "one input given twice")
INPUT_DATATYPE = _rule("input.datatype", REFUSED, "an input's datatype is not the method's")
INPUT_SHAPE = _rule("input.shape", REFUSED, "an input's shape is not one the method takes")
INPUT_DATA = _rule(
    "input.data", REFUSED, "an input's data missing, given twice, or not of its shape and datatype"
)
INPUT_CONTENTS = _rule(
    "input.contents", REFUSED, "gRPC: an input's typed contents do not match its datatype or shape"
)
INPUT_SIZE = _rule("input.size", REFUSED, "gRPC: an input's raw bytes are not its shape's size")
INPUT_UNSUPPORTED = _rule(
    "input.unsupported", REFUSED, "the method takes an input that is not a tensor"
)
INPUT_BATCH = _rule(
    "input.batch", REFUSED, "batched inputs whose dim 0 differ or pass max_batch_size"
)
INPUT_INVALID = _rule(
    "input.invalid", REFUSED, "the native host refused an input before anything ran"
)
INPUT_REJECTED = _rule(
    "input.rejected", REFUSED, "a kernel refused an input while the program ran (its reason)"
)
OUTPUT_UNKNOWN = _rule("output.unknown", REFUSED, "a requested output the method does not have")
OUTPUT_CLASSIFICATION = _rule(
    "output.classification", REFUSED, "v2: the classification extension is not supported"
)
BINARY_HEADER_LENGTH = _rule(
    "binary.header_length",
    REFUSED,
    "v2 binary: Inference-Header-Content-Length missing, malformed or past the body",
)
BINARY_SIZE = _rule(
    "binary.size", REFUSED, "v2 binary: an input's binary_data_size does not fit the body"
)
BINARY_BOOL = _rule("binary.bool", REFUSED, "v2 binary: a BOOL byte is neither 0 nor 1")

# --- uploads: the form ----------------------------------------------------------------------------
UPLOAD_PROGRAM_MISSING = _rule("upload.program_missing", REFUSED, "no 'program' file part")
UPLOAD_PROGRAM_COUNT = _rule("upload.program_count", REFUSED, "more than one 'program' file")
UPLOAD_NAME_MISSING = _rule("upload.name_missing", REFUSED, "no 'name' field")
UPLOAD_UNKNOWN_FIELD = _rule("upload.unknown_field", REFUSED, "a form field the upload has not")
UPLOAD_REPLACE = _rule("upload.replace", REFUSED, "'replace' is not a boolean")
UPLOAD_VERSION = _rule("upload.version", REFUSED, "'version' is not a model version number")
UPLOAD_CONTENT_TYPE = _rule("upload.content_type", REFUSED, "the body is not multipart/form-data")
UPLOAD_MALFORMED = _rule(
    "upload.malformed", REFUSED, "the multipart body is malformed (or a part header over 4 KiB)"
)
UPLOAD_DIGEST = _rule(
    "upload.digest",
    REFUSED,
    "a malformed or unchecked digest, or a sha256.<name> field naming no uploaded file",
)
UPLOAD_DIGEST_MISMATCH = _rule(
    "upload.digest_mismatch", REFUSED, "a file's bytes are not the digest declared for it"
)

# --- uploads: programs, data files, model names ---------------------------------------------------
PROGRAM_PTD_NAME = _rule("program.ptd_name", REFUSED, "the program's file name ends in .ptd")
PROGRAM_INVALID = _rule("program.invalid", REFUSED, "not an ExecuTorch program")
PROGRAM_SCHEMA = _rule(
    "program.schema",
    REFUSED,
    "the program's schema is outside this runtime's window (both ExecuTorch versions named)",
)
PROGRAM_LOAD_FAILED = _rule(
    "program.load_failed", REFUSED, "loading every method in the check child failed"
)
PROGRAM_LOAD_CRASHED = _rule(
    "program.load_crashed", REFUSED, "loading the program crashed the check child"
)
PROGRAM_LOAD_TIMEOUT = _rule(
    "program.load_timeout", REFUSED, "loading the program did not end within the time limit"
)


def _name_rules(family: str, what: str) -> tuple[str, str, str, str]:
    """The rules data-file stems and model names share (service/ingest/name_rules.py):
    (empty, characters, first_character, device_name)."""
    return (
        _rule(f"{family}.empty", REFUSED, f"the {what} is empty"),
        _rule(
            f"{family}.characters",
            REFUSED,
            f"the {what} has a character other than ASCII letters, digits, '.', '-', '_'",
        ),
        _rule(
            f"{family}.first_character",
            REFUSED,
            f"the {what} does not start with a letter, a digit or '_'",
        ),
        _rule(
            f"{family}.device_name",
            REFUSED,
            f"the {what} is a Windows device name (CON, PRN, AUX, NUL, COM0-9, LPT0-9)",
        ),
    )


DATA_NAME_RULES = _name_rules("data", "data file's name")
DATA_EXTENSION = _rule("data.extension", REFUSED, "a data file not named <name>.ptd")
DATA_TOO_LONG = _rule("data.too_long", REFUSED, "a data file name over 255 bytes with .ptd")
DATA_DOUBLE_SUFFIX = _rule("data.double_suffix", REFUSED, "a data file named <name>.ptd.ptd")
DATA_CASE_COLLISION = _rule(
    "data.case_collision", REFUSED, "two data file names equal ignoring case"
)
DATA_DUPLICATE = _rule("data.duplicate", REFUSED, "one data file name given twice")
DATA_INVALID = _rule("data.invalid", REFUSED, "not an ExecuTorch data file")
DATA_SCHEMA = _rule(
    "data.schema",
    REFUSED,
    "the data file's schema is outside this runtime's window (both versions named)",
)
DATA_DUPLICATE_KEY = _rule("data.duplicate_key", REFUSED, "one named-data key in two files")
EXTERNAL_MISSING_KEY = _rule(
    "external.missing_key", REFUSED, "the program needs named data no uploaded .ptd has"
)
MODEL_NAME_RULES = _name_rules("model", "model name")
MODEL_TOO_LONG = _rule("model.too_long", REFUSED, "a model name over 128 bytes")

# --- uploads: the model configuration -------------------------------------------------------------
CONFIG_JSON = _rule("config.json", REFUSED, "the configuration is not JSON")
CONFIG_INVALID = _rule(
    "config.invalid", REFUSED, "a model directory's config.json is not a JSON object"
)
CONFIG_TYPE = _rule("config.type", REFUSED, "a configuration value of the wrong type")
CONFIG_UNKNOWN_KEY = _rule("config.unknown_key", REFUSED, "a configuration key not served here")
CONFIG_RANGE = _rule("config.range", REFUSED, "a configuration value out of its range")
CONFIG_PREFERRED_BATCH_SIZE = _rule(
    "config.preferred_batch_size", REFUSED, "a preferred batch size larger than max_batch_size"
)
CONFIG_BATCHING_WITHOUT_BATCH = _rule(
    "config.batching_without_batch", REFUSED, "batching settings without max_batch_size"
)
CONFIG_NOT_BATCHABLE = _rule(
    "config.not_batchable", REFUSED, "max_batch_size on a method without a dynamic dim 0"
)
CONFIG_MAX_BATCH_SIZE = _rule(
    "config.max_batch_size", REFUSED, "max_batch_size above the program's bound on dim 0"
)
CONFIG_PRIORITY = _rule("config.priority", REFUSED, "priority settings that do not fit together")
CONFIG_VERSION_POLICY = _rule(
    "config.version_policy", REFUSED, "a version_policy without exactly one of its three kinds"
)
CONFIG_PARAMETER = _rule(
    "config.parameter", REFUSED, "a TensorRT delegate parameter with a value it cannot take"
)
CONFIG_WARMUP = _rule("config.warmup", REFUSED, "a warmup sample the model cannot run")
CONFIG_WARMUP_DATA_FILE = _rule(
    "config.warmup_data_file", REFUSED, "a warmup input_data_file (uploads carry none)"
)

# --- uploads: delegates ---------------------------------------------------------------------------
TENSORRT_BLOB_INVALID = _rule(
    "tensorrt.blob_invalid", REFUSED, "the delegate's blob breaks Torch-TensorRT's layout"
)
TENSORRT_DUPLICATE_BINDING = _rule(
    "tensorrt.duplicate_binding",
    REFUSED,
    "the blob names one binding twice (or as both an input and an output)",
)
TENSORRT_ALIAS_BINDING = _rule(
    "tensorrt.alias_binding", REFUSED, "an in-place alias names no output or no input binding"
)
TENSORRT_ALIAS_REPEATED = _rule(
    "tensorrt.alias_repeated",
    REFUSED,
    "an output aliased twice, or two aliased outputs updating one input",
)
TENSORRT_ALIAS_KIND = _rule(
    "tensorrt.alias_kind", REFUSED, "an alias kind other than kv_cache_update and user"
)
TENSORRT_ENGINE_AND_KEY = _rule(
    "tensorrt.engine_and_key", REFUSED, "the blob carries engine bytes and an engine_key both"
)
TENSORRT_SHAPE_TENSOR_INPUT = _rule(
    "tensorrt.shape_tensor_input", REFUSED, "the engine takes a shape-tensor input"
)
TENSORRT_ENGINE_KEY_MISSING = _rule(
    "tensorrt.engine_key_missing", REFUSED, "the engine's engine_key is in no uploaded .ptd"
)
TENSORRT_VERSION_MISMATCH = _rule(
    "tensorrt.version_mismatch", REFUSED, "the plan was built by another TensorRT release"
)
TENSORRT_PLATFORM_MISMATCH = _rule(
    "tensorrt.platform_mismatch", REFUSED, "the plan was built for another GPU or OS/CPU"
)
TENSORRT_PLAN_INVALID = _rule(
    "tensorrt.plan_invalid", REFUSED, "TensorRT cannot deserialize the plan (its reason)"
)
TENSORRT_WEIGHTS_STRIPPED = _rule(
    "tensorrt.weights_stripped", REFUSED, "the plan was saved without its weights"
)
TENSORRT_BINDINGS_MISMATCH = _rule(
    "tensorrt.bindings_mismatch", REFUSED, "the blob's bindings are not the engine's"
)
TENSORRT_UNVERIFIABLE = _rule(
    "tensorrt.unverifiable", REFUSED, "no TensorRT or no CUDA device here to verify the plan"
)
TENSORRT_BACKEND_MISSING = _rule(
    "tensorrt.backend_missing", REFUSED, "the TensorRT backend library is not installed"
)
DELEGATE_CHECK_FAILED = _rule("delegate.check_failed", REFUSED, "a delegate's check itself failed")
DELEGATE_CHECK_CRASHED = _rule(
    "delegate.check_crashed", REFUSED, "a delegate check's isolated call crashed the child"
)
DELEGATE_CHECK_TIMEOUT = _rule(
    "delegate.check_timeout", REFUSED, "a delegate check's isolated call hung past the limit"
)

# --- repository loads (v2 REST and gRPC) ----------------------------------------------------------
REPOSITORY_PARAMETER = _rule(
    "repository.parameter", REFUSED, "an unknown or repeated load parameter"
)
REPOSITORY_CONFIG = _rule(
    "repository.config", REFUSED, "the load's 'config' is no JSON object in a string, or too long"
)
REPOSITORY_FILE = _rule("repository.file", REFUSED, "a load file that is not valid base64")
LOAD_FILE_PATH = _rule(
    "load.file_path", REFUSED, "a load file not named <version>/<filename> of the version"
)
LOAD_FILE_KIND = _rule("load.file_kind", REFUSED, "a load file neither a .pte nor a .ptd")
LOAD_DEVICE_MEMORY = _rule(
    "load.device_memory",
    NO_DEVICE_MEMORY,
    "the model needs more GPU memory than is free (bytes needed and free named)",
)
