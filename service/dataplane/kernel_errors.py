"""What an execute's failure says to a client: whether the request caused it, and why, without
the server's file paths.

ExecuTorch reports a kernel's refusal of a value (an embedding index past the table, a negative
index) as InvalidArgument, after the host has checked count, dtype and shape: the request's
fault, answered 4xx. The error's message carries the runtime's source paths; its `context`
carries the kernel's own reason, which is what a client can act on.

A delegate can refuse the request's shapes too, in its own words: ExecuTorch's XNNPACK delegate
reports a shape its compiled graph cannot take (a [4,16] input where the graph needs [*,32]:
the method's upper bound [16,32] says nothing of which dimension may vary) as an Internal error
whose context says that propagating the input shapes failed. Its graph was valid when the
method loaded, and the inputs' shapes are the only thing a request changes, so that is the
request's fault as well.
"""

from __future__ import annotations

import re

from service.errors import clip

_INPUT_FAULTS = frozenset({"InvalidArgument"})
# Delegates' refusals of an input shape, by the words of their reasons.
_DELEGATE_SHAPE_REFUSALS = re.compile(r"Propagating input shapes failed")
# The runtime logs the failing call's argument type ids after the kernel's reason: noise to a
# client.
_ARGUMENT_NOISE = re.compile(r"^arg \d+ with type id \d+$")


def is_input_fault(exc: BaseException) -> bool:
    if not isinstance(exc, RuntimeError) or getattr(exc, "error_name", None) is None:
        return False
    if exc.error_name in _INPUT_FAULTS:
        return True
    return bool(_DELEGATE_SHAPE_REFUSALS.search(getattr(exc, "context", "") or ""))


def kernel_reason(exc: BaseException) -> str:
    """ExecuTorch's own reason for an ExecuTorchError; any other error's message."""
    if getattr(exc, "error_name", None) is None:
        return clip(exc, 1000)
    context = getattr(exc, "context", "") or ""
    reason = "; ".join(part for part in context.split("; ") if not _ARGUMENT_NOISE.match(part))
    return clip(reason or f"{exc.error_name} ({exc.code:#04x})", 1000)
