"""What can go wrong in the dataplane, as values every protocol maps to its own status codes.

The dataplane raises these and nothing else for anything a client can cause; each protocol has
one table from these classes to its codes (native HTTP, v2 REST, gRPC), so a new protocol only
adds a table. A Problem names the file or request input and a stable rule id, so a client can
act on every problem of a request at once.
"""

from __future__ import annotations

import logging
import math
import secrets
from dataclasses import dataclass

from service import rules

# Client strings (model names, tensor names, ...) are cut to this many characters wherever they
# are echoed into an error body or a log line: a 10 MB name must not become a 10 MB answer. Above
# the longest name any rule accepts (255-byte file names), so a name refused for its length is
# still shown whole.
ECHO_LIMIT = 300


def clip(text: object, limit: int = ECHO_LIMIT) -> str:
    """`repr`-free truncation for echoing client-supplied text."""
    text = str(text)
    return text if len(text) <= limit else f"{text[:limit]}...({len(text) - limit} more)"


@dataclass(frozen=True)
class Problem:
    file: str | None
    rule: str
    message: str
    input: str | None = None

    def as_dict(self) -> dict:
        """A problem about a request input names the input; any other names its file (None
        where the problem is about the request as a whole)."""
        # File and input names come from the client; messages clip what they quote themselves.
        if self.input is not None:
            return {"input": clip(self.input), "rule": self.rule, "message": self.message}
        return {
            "file": None if self.file is None else clip(self.file),
            "rule": self.rule,
            "message": self.message,
        }


class ServiceError(Exception):
    def __init__(self, message: str, problems: list[Problem] | None = None):
        super().__init__(message)
        self.message = message
        self.problems = problems or []


class NotFound(ServiceError):
    """Unknown model, version, method or tensor name."""


class Conflict(ServiceError):
    """The name exists and the request did not ask to replace it."""


class Invalid(ServiceError):
    """The request (or upload) breaks a rule; `problems` say which."""


class Aborted(Invalid):
    """The client went away before its request was complete (e.g. mid-upload).

    An Invalid, so that a protocol without a code for it still answers a 4xx; nobody reads that
    answer, but the dataplane counts and logs it apart from refusals and server faults.
    """


class TooLarge(ServiceError):
    """A size limit was crossed."""


class DeviceMemoryFull(ServiceError):
    """A model would not fit in the GPU memory free now: refused before any of it loads, its
    message naming the bytes it needs and the bytes free (never an out-of-memory mid-serving)."""


class Unavailable(ServiceError):
    """The model exists but cannot serve now (not runnable here, loading, being replaced)."""


class Busy(ServiceError):
    """The model's queue is full; retry after `retry_after_s`."""

    def __init__(self, message: str, retry_after_s: float = 1.0):
        super().__init__(message)
        self.retry_after_s = retry_after_s


class QueueFull(Busy):
    """A model method's bounded queue is full. Says which queue, `pace_s` (the seconds between
    requests leaving it, as measured) and `drain_s` (until the requests in it have left), so
    that a front can refuse the next requests for it by itself until a place has freed
    (service/dataplane/scheduling/gate.py). The retry hint is the drain time, at least 1 s."""

    def __init__(
        self, message: str, model: str, version: str, method: str, pace_s: float, drain_s: float
    ):
        super().__init__(message, max(1.0, drain_s))
        self.model, self.version, self.method = model, version, method
        self.pace_s, self.drain_s = pace_s, drain_s

    def __reduce__(self):  # it crosses from the engine to the fronts
        fields = (self.message, self.model, self.version, self.method, self.pace_s, self.drain_s)
        return type(self), fields, self.__dict__


def retry_after_seconds(exc: Busy) -> int:
    """The retry hint as every protocol sends it: whole seconds, rounded up (never an
    invitation to come back too early), at least 1."""
    return max(1, math.ceil(exc.retry_after_s))


class DeadlineExceeded(ServiceError):
    """The request's deadline passed while it waited; it was never executed."""


class Unauthorized(ServiceError):
    """No credentials, or wrong ones."""


class Forbidden(ServiceError):
    """Credentials of the wrong scope, or an operation disabled on this server."""


class ExecutionFailed(ServiceError):
    """The program failed for a reason that is not the request's fault (the server's own).
    Made by server_fault, so that its answer carries the id of the log line with its cause."""


_faults = logging.getLogger("service.errors")


def error_id() -> str:
    """A short random id that ties a 500's answer to the server's log line about its cause: a
    client reporting the 500 quotes it, an operator finds the cause by it."""
    return secrets.token_hex(6)


def server_fault(what: str, cause: str) -> ExecutionFailed:
    """An ExecutionFailed for `what` (e.g. "executing 'm' method 'forward'"), its `cause` logged
    at ERROR in the process that saw it, under the id its answer carries."""
    ident = error_id()
    _faults.error("server fault (error id %s): %s failed: %s", ident, what, cause)
    message = f"{what} failed on the server's side (error id {ident}): {cause}"
    return ExecutionFailed(message, [Problem(None, rules.SERVER_INTERNAL, message)])


SHOWN_PROBLEMS = 3  # in a refusal's error string; the problems list has every one


def refused(what: str, problems: list[Problem]) -> Invalid:
    """A refusal whose error string carries the first problems themselves (rule and message):
    clients such as tritonclient and curl show that string, not the problems list."""
    shown = "; ".join(f"{p.rule}: {p.message}" for p in problems[:SHOWN_PROBLEMS])
    more = len(problems) - SHOWN_PROBLEMS
    if more > 0:
        shown += f"; and {more} more problem(s)"
    return Invalid(f"{what}: {shown}" if shown else what, list(problems))


def input_problem(label: str | None, rule: str, message: str) -> Invalid:
    return Invalid(message, [Problem(None, rule, message, input=label)])


def too_large(what: str, limit: int) -> TooLarge:
    message = f"{what} is larger than the limit of {limit} bytes"
    return TooLarge(message, [Problem(None, rules.REQUEST_TOO_LARGE, message)])


def invalid(rule: str, message: str, file: str | None = None) -> Invalid:
    """A refusal with one problem, whose message is also the error's."""
    return Invalid(message, [Problem(file, rule, message)])
