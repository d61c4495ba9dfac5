"""What an execute's failure says to a client: whether the request caused it, and why, without
the server's file paths.

ExecuTorch reports a kernel's refusal of a value (an embedding index past the table, a negative
index) as InvalidArgument, after the host has checked count, dtype and shape: the request's
fault, answered 4xx. The error's message carries the runtime's source paths; its `context`
carries the kernel's own reason, which is what a client can act on.
"""

from __future__ import annotations

import re

from service.errors import clip

_INPUT_FAULTS = frozenset({"InvalidArgument"})
# The runtime logs the failing call's argument type ids after the kernel's reason: noise to a
# client.
_ARGUMENT_NOISE = re.compile(r"^arg \d+ with type id \d+$")


def is_input_fault(exc: BaseException) -> bool:
    return isinstance(exc, RuntimeError) and getattr(exc, "error_name", None) in _INPUT_FAULTS


def kernel_reason(exc: BaseException) -> str:
    """ExecuTorch's own reason for an ExecuTorchError; any other error's message."""
    if getattr(exc, "error_name", None) is None:
        return clip(exc, 1000)
    context = getattr(exc, "context", "") or ""
    reason = "; ".join(part for part in context.split("; ") if not _ARGUMENT_NOISE.match(part))
    return clip(reason or f"{exc.error_name} ({exc.code:#04x})", 1000)
