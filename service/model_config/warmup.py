"""`model_warmup` as Triton's model configuration defines it, checked at ingest.

A warmup is a request the server sends itself before the model is READY, so that the first
client does not pay for first-execute allocations: `name`, `batch_size`, `count` (extra
executions; 0 runs it once) and `inputs`, each with `data_type`, `dims` and its data:
`zero_data` or `random_data`. Triton's third source, `input_data_file`, reads a file from the
model directory's warmup folder; uploads here carry only a program and its data files, so it is
refused by name rather than ignored.

Warmups run the "forward" method and must fit it the way a request must (names, datatypes,
shapes): one that does not is refused here, naming the warmup and the input, instead of leaving
the model unavailable after it was stored.
"""

from __future__ import annotations

import math

from service.dtypes import DATATYPES, datatype_of, datatype_of_triton, triton_type
from service.errors import Problem, clip
from service.model_config.checks import Checker, problem
from service.model_config.records import ModelConfig, Warmup, WarmupInput
from service.tensor_names import tensor_names

WARMUP_METHOD = "forward"
MAX_WARMUPS = 16
MAX_COUNT = 1000
MAX_NAME = 128
# Per warmup input: the server builds these arrays itself, so a typo in dims must not become a
# multi-gigabyte allocation at start.
MAX_ELEMENTS = 1 << 24
_WARMUP = ("name", "batch_size", "inputs", "count")
_INPUT = ("data_type", "dims", "zero_data", "random_data", "input_data_file")
_SOURCES = ("zero_data", "random_data")
RULE = "config.warmup"


def _name(check: Checker, value, where: str, taken: set[str]) -> str | None:
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_NAME:
        check.add("config.type", f"{where}.name must be a non-empty string of at most {MAX_NAME}")
        return None
    if value in taken:
        check.add(RULE, f"two warmups are named {clip(value)!r}; each needs a name of its own")
        return None
    taken.add(value)
    return value


def _input(check: Checker, value, where: str, rows: int) -> WarmupInput | None:
    given = check.known(value, where, _INPUT)
    if not given:
        return None
    data_type = given.get("data_type")
    datatype = datatype_of_triton(data_type) if isinstance(data_type, str) else None
    if datatype is None:
        check.add(
            "config.type",
            f"{where}.data_type must be one of {', '.join(triton_type(d) for d in DATATYPES)}, "
            f"not {clip(data_type)!r}",
        )
    dims = given.get("dims", [])
    if not isinstance(dims, list):
        check.add("config.type", f"{where}.dims must be a list of integers")
        dims = []
    dims = [check.integer(d, f"{where}.dims[]", 1) for d in dims]
    if "input_data_file" in given:
        check.add(
            "config.warmup_data_file",
            f"{where}: input_data_file is not served here (uploads carry no warmup files); "
            "use zero_data or random_data",
        )
        return None
    sources = [key for key in _SOURCES if key in given]
    if len(sources) != 1:
        check.add(RULE, f"{where} needs exactly one of zero_data or random_data, set to true")
        return None
    if given[sources[0]] is not True:
        check.add("config.type", f"{where}.{sources[0]} must be true")
        return None
    if datatype is None or None in dims:
        return None
    if math.prod(dims) * rows > MAX_ELEMENTS:
        check.add(RULE, f"{where} has more than {MAX_ELEMENTS} elements")
        return None
    return WarmupInput(data_type, tuple(dims), sources[0] == "random_data")


def parse_warmups(check: Checker, value, max_batch: int) -> tuple[Warmup, ...]:
    """The warmups; problems go to `check`."""
    if not isinstance(value, list):
        check.add(
            "config.type",
            'model_warmup must be a list of objects like {"name": "w", "batch_size": 1, '
            '"inputs": {"input_0": {"data_type": "TYPE_FP32", "dims": [4], "zero_data": true}}}',
        )
        return ()
    if len(value) > MAX_WARMUPS:
        check.add("config.range", f"model_warmup has {len(value)} warmups; at most {MAX_WARMUPS}")
        return ()
    warmups, taken = [], set()
    for index, sample in enumerate(value):
        where = f"model_warmup[{index}]"
        sample = check.known(sample, where, _WARMUP)
        name = _name(check, sample.get("name"), where, taken)
        if name is not None:
            where = f"warmup {clip(name)!r}"
        # A batching model's warmup has 1 to max_batch_size rows; another one's is one request.
        batch = check.integer(
            sample.get("batch_size", 1),
            f"{where}.batch_size",
            1 if max_batch else 0,
            max_batch or 1,
        )
        count = check.integer(sample.get("count", 0), f"{where}.count", 0, MAX_COUNT)
        inputs = sample.get("inputs")
        if not isinstance(inputs, dict) or not inputs:
            check.add("config.type", f"{where}.inputs must be an object of input name -> data")
            inputs = {}
        parsed = {
            key: _input(check, spec, f"{where} input {clip(key)!r}", max(batch or 1, 1))
            for key, spec in inputs.items()
        }
        if name is None or batch is None or count is None or None in parsed.values():
            continue
        warmups.append(Warmup(name, batch, parsed, count))
    return tuple(warmups)


def check_warmups(config: ModelConfig, methods_meta: list[dict]) -> list[Problem]:
    """Warmups that would not fit the program's forward method as a request."""
    warmups = config.warmups
    if not warmups:
        return []
    forward = next((m for m in methods_meta if m["name"] == WARMUP_METHOD), None)
    if forward is None:
        return [
            problem(RULE, f"warmup {w.name!r}: the program has no method {WARMUP_METHOD!r}")
            for w in warmups
        ]
    specs = forward.get("inputs", [])
    names = tensor_names(specs, "input")
    batched = config.max_batch > 0
    problems = []
    for warmup in warmups:
        where = f"warmup {warmup.name!r}"
        takes = f"method {WARMUP_METHOD!r} takes {', '.join(names) or 'no inputs'}"
        for key in warmup.inputs:
            if key not in names:
                problems.append(problem(RULE, f"{where} input {clip(key)!r} is unknown; {takes}"))
        for name, spec in zip(names, specs):
            given = warmup.inputs.get(name)
            if given is None:
                problems.append(problem(RULE, f"{where} gives no input {name!r}; {takes}"))
                continue
            problems += _fit(f"{where} input {name!r}", given, spec, warmup, batched)
    return problems


def _fit(
    where: str, given: WarmupInput, spec: dict, warmup: Warmup, batched: bool
) -> list[Problem]:
    if spec.get("tag", "Tensor") != "Tensor":
        return [problem(RULE, f"{where} is a {spec.get('tag')} input; only tensors are warmed")]
    expected = triton_type(datatype_of(spec.get("dtype", "")))
    if given.data_type != expected:
        return [problem(RULE, f"{where} is {given.data_type}; the method takes {expected}")]
    shape = ([warmup.batch_size] if batched else []) + list(given.dims)
    bound = list(spec.get("shape", []))
    dynamic = bool(spec.get("dynamic"))
    fits = len(shape) == len(bound) and (
        all(d <= b for d, b in zip(shape, bound)) if dynamic else shape == bound
    )
    if fits:
        return []
    rows = "batch_size then dims" if batched else "dims"
    takes = f"at most {bound}" if dynamic else f"exactly {bound}"
    return [problem(RULE, f"{where} has the shape {shape} ({rows}); the method takes {takes}")]
