"""The TensorRT delegate's knobs as Triton model-configuration `parameters`.

Triton's ModelConfig already has the place for backend settings: `parameters`, a map from name
to `{"string_value": "..."}`. Using it rather than a block of our own means a configuration
written for Triton carries them as it is, tritonclient's get_model_config returns them in its
own message (the gRPC ModelConfig has no room for a new block), and a model's description and
its Triton config show one spelling. Names are upstream's load options
(Torch-TensorRT's ExecuTorch delegate), and a value given here overrides what the program baked
in at export, as upstream's loader orders them:

- `weight_streaming_budget`: bytes of streamable weights kept on the device ("1073741824"), or a
  fraction of the engine's streamable weights ("0.5"); absent: the program's, else all resident.
- `use_cuda_graphs`: "true"/"false"; capture each input shape once and replay it.
- `use_shared_engines`: "true"/"false" (default true); one engine per identical plan bytes
  across models and instances.

Any other name is refused, as every unknown configuration key is: a misspelt knob silently
ignored is a setting the user believes in and does not get.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from service import rules
from service.model_config.checks import Checker, shown

WEIGHT_STREAMING_BUDGET = "weight_streaming_budget"
USE_CUDA_GRAPHS = "use_cuda_graphs"
USE_SHARED_ENGINES = "use_shared_engines"
NAMES = (WEIGHT_STREAMING_BUDGET, USE_CUDA_GRAPHS, USE_SHARED_ENGINES)

_BYTES = re.compile(r"[0-9]{1,18}")
_FRACTION = re.compile(r"(0?\.[0-9]{1,9}|1\.0{0,9}|0\.?0*)")
_BOOLS = {"true": True, "false": False}


@dataclass(frozen=True)
class TensorRTParameters:
    """What the configuration set; None: not set (the program's compile spec, else default)."""

    budget_bytes: int | None = None
    budget_fraction: float | None = None
    use_cuda_graphs: bool | None = None
    use_shared_engines: bool | None = None

    @property
    def shared_engines(self) -> bool:
        return self.use_shared_engines is not False

    def to_json(self) -> dict:
        """Triton's form: name -> {"string_value": ...}, only what was set."""
        values = {}
        if self.budget_bytes is not None:
            values[WEIGHT_STREAMING_BUDGET] = str(self.budget_bytes)
        elif self.budget_fraction is not None:
            values[WEIGHT_STREAMING_BUDGET] = repr(self.budget_fraction)
        for name, flag in (
            (USE_CUDA_GRAPHS, self.use_cuda_graphs),
            (USE_SHARED_ENGINES, self.use_shared_engines),
        ):
            if flag is not None:
                values[name] = "true" if flag else "false"
        return {name: {"string_value": value} for name, value in values.items()}

    def load_options(self) -> dict:
        """Keyword arguments of ethost_tensorrt.set_load_options."""
        return {
            "weight_streaming_budget_bytes": self.budget_bytes,
            "weight_streaming_budget_fraction": self.budget_fraction,
            "use_cuda_graphs": self.use_cuda_graphs,
            "use_shared_engines": self.use_shared_engines,
        }


def parse_parameters(check: Checker, value) -> TensorRTParameters:
    given = check.known(value, "parameters", NAMES)
    strings = {}
    for name in NAMES:
        if name not in given:
            continue
        entry = given[name]
        if (
            not isinstance(entry, dict)
            or set(entry) != {"string_value"}
            or not isinstance(entry["string_value"], str)
        ):
            check.add(
                rules.CONFIG_TYPE,
                f'parameters.{name} must be {{"string_value": "..."}} (Triton\'s '
                f"ModelParameter), not {shown(entry)}",
            )
            continue
        strings[name] = entry["string_value"].strip()
    budget_bytes = budget_fraction = None
    if WEIGHT_STREAMING_BUDGET in strings:
        text = strings[WEIGHT_STREAMING_BUDGET]
        if _BYTES.fullmatch(text):
            budget_bytes = int(text)
        elif _FRACTION.fullmatch(text):
            budget_fraction = float(text)
        else:
            check.add(
                rules.CONFIG_PARAMETER,
                f"parameters.{WEIGHT_STREAMING_BUDGET} must be a byte count (digits, e.g. "
                f'"1073741824") or a fraction of the streamable weights between 0 and 1 with '
                f'a decimal point (e.g. "0.5"), not {shown(text)}',
            )
    flags = {}
    for name in (USE_CUDA_GRAPHS, USE_SHARED_ENGINES):
        if name in strings:
            flag = _BOOLS.get(strings[name].lower())
            if flag is None:
                check.add(
                    rules.CONFIG_PARAMETER,
                    f'parameters.{name} must be "true" or "false", not {shown(strings[name])}',
                )
            flags[name] = flag
    return TensorRTParameters(
        budget_bytes, budget_fraction, flags.get(USE_CUDA_GRAPHS), flags.get(USE_SHARED_ENGINES)
    )
