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

import logging
import re

from service import rules
from service.dataplane.types import MethodSignature
from service.errors import ServiceError, clip, input_problem, server_fault

# The service's logger: operators filter its upload and access lines by this name.
log = logging.getLogger("service.dataplane.service")

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


def _input_names(signature: MethodSignature | None, count: int) -> list[str]:
    """By position where the method is no longer served (`signature` None)."""
    if signature is None:
        return [f"input {i}" for i in range(count)]
    return signature.input_names()


def inputs_sent(signature: MethodSignature | None, shapes: list) -> str:
    """The inputs' names and shapes, as a failure's message names them."""
    names = _input_names(signature, len(shapes))
    return ", ".join(f"{n} {list(shape)}" for n, shape in zip(names, shapes))


def execution_error(
    exc: Exception,
    model: str,
    method: str,
    signature: MethodSignature | None,
    shapes: list,
) -> ServiceError:
    """What an execute's failure means for the client: the host's own input validation
    (ethost.InputError, a ValueError), a kernel or delegate refusing the inputs, or a real
    failure. A refusal names the shapes sent: a delegate's reason may not (XNNPACK's does not),
    and it names the one input of a one-input method."""
    if isinstance(exc, ValueError):
        label = getattr(exc, "input_name", None) or f"input {getattr(exc, 'index', '?')}"
        return input_problem(label, rules.INPUT_INVALID, str(exc))
    if is_input_fault(exc):
        reason = kernel_reason(exc)
        # One line per refused input: the host captures ExecuTorch's own lines instead of
        # printing them, so this is the only trace of it in the log.
        log.warning("infer model=%r method=%r outcome=input_rejected: %s", model, method, reason)
        names = _input_names(signature, len(shapes))
        return input_problem(
            names[0] if len(names) == 1 else None,
            rules.INPUT_REJECTED,
            f"model {model!r} method {method!r} rejected the inputs "
            f"({inputs_sent(signature, shapes)}) while executing: {reason}",
        )
    return server_fault(f"executing {model!r} method {method!r}", kernel_reason(exc))
