"""The repository `load` body, read as it arrives: base64 file contents go straight to staging.

A load carries whole model files as base64 strings in one JSON object,
`{"parameters": {"config": "<json>", "file:<version>/<filename>": "<base64>", ...}}`. Parsing it
whole held the body, the parsed text and the decoded bytes at once (~3.7x the body; a 4 GiB
model needed ~20 GiB). This reader is fed the body chunk by chunk and keeps only what it has not
yet decided: a key, the config text, at most three base64 characters of a file. It reads exactly
that shape and no other JSON (any other key is refused, as the whole-body parser refused it),
so it stays small; every malformed byte is an Invalid naming what was expected and where.

A file key needs somewhere to write: the reader pauses at the first one (`needs_staging`) so
that the caller can begin the dataplane's staging inside its deploy() and resume with `staging`
set; a body without files never starts one.
"""

from __future__ import annotations

import binascii
import json
import re

from service import rules
from service.dataplane.repository import load_config
from service.errors import Invalid, Problem, clip, invalid
from service.ingest.staging import StagedUpload, StagedWriter, Staging, file_role

FILE_PREFIX = "file:"
CONFIG = "config"
# A key is a parameter name: short. The config is a model configuration: small, but bounded by
# its own limit rather than only by the body's.
MAX_KEY_BYTES = 4096
_WHITESPACE = b" \t\r\n"
_STRING_END = re.compile(rb'["\\]')
# Inside a file's base64 the only escape a JSON writer may use is "\/".
_BASE64_BREAK = re.compile(rb"[^A-Za-z0-9+/=]")


def _malformed(offset: int, expected: str) -> Invalid:
    return invalid(
        rules.REQUEST_JSON, f"the request is not valid JSON: expected {expected} at byte {offset}"
    )


class _Base64File:
    """One file's base64 text, decoded and written in whole quads as it comes."""

    def __init__(self, key: str, writer: StagedWriter | None):
        self.key = key
        self.writer = writer  # None: a file refused by its path, read and dropped
        self._tail = b""
        self._padded = False

    def _refuse(self) -> Invalid:
        path = self.key[len(FILE_PREFIX) :]
        return invalid(rules.REPOSITORY_FILE, f"{clip(self.key)!r} is not valid base64", clip(path))

    def write(self, text: bytes) -> None:
        if not text:
            return
        if self._padded or _BASE64_BREAK.search(text):
            raise self._refuse()
        text = self._tail + text
        whole = len(text) - len(text) % 4
        self._tail = text[whole:]
        if whole:
            quads = text[:whole]
            self._padded = b"=" in quads
            try:
                decoded = binascii.a2b_base64(quads, strict_mode=True)
            except binascii.Error:
                raise self._refuse() from None
            if self.writer is not None:
                self.writer.write(decoded)

    def finish(self) -> None:
        if self._tail:
            raise self._refuse()
        if self.writer is not None:
            self.writer.finish()


class LoadBody:
    """feed() chunks, then end(); `config`, `staging` and `problems` are the result."""

    def __init__(self, max_config_bytes: int):
        self.max_config_bytes = max_config_bytes
        self.config: dict | None = None
        self.staging: Staging | None = None
        self.problems: list[Problem] = []
        self.needs_staging = False
        self._keys: set[str] = set()
        self._buffer = b""
        self._offset = 0  # of _buffer[0] in the body
        self._state = "start"
        self._string = bytearray()  # the key or config text being read, still JSON-escaped
        self._escaped = False
        self._key = ""
        self._file: _Base64File | None = None

    def feed(self, chunk: bytes) -> None:
        """Parses what it can of the body so far; stops early (needs_staging) at the first
        file when no staging has been set."""
        self._buffer += chunk
        position = 0
        while position < len(self._buffer) and not self.needs_staging:
            moved = self._step(position)
            if moved == position:  # the rest is an incomplete token: wait for more
                break
            position = moved
        self._offset += position
        self._buffer = self._buffer[position:]

    def end(self) -> None:
        self.feed(b"")
        if self._state not in ("start", "done"):
            raise _malformed(self._offset, "more of the request (the body ended early)")

    def upload(self, model: str) -> StagedUpload:
        """The staged files, committed as a repository load commits them (replacing)."""
        return self.staging.commit(model, True, self.config, self.problems)

    # -- the state machine: each step consumes from `position` and says where it stopped --

    def _skip_space(self, position: int) -> int:
        while position < len(self._buffer) and self._buffer[position] in _WHITESPACE:
            position += 1
        return position

    def _expect(self, position: int, byte: bytes, expected: str) -> int:
        if self._buffer[position : position + 1] != byte:
            raise _malformed(self._offset + position, expected)
        return position + 1

    def _step(self, position: int) -> int:
        state = self._state
        if state in ("key", "config"):
            return self._read_string(position)
        if state == "file":
            return self._read_file(position)
        position = self._skip_space(position)
        if position == len(self._buffer):
            return position
        byte = self._buffer[position : position + 1]
        if state == "start":
            self._state = "top"
            return self._expect(position, b"{", "'{' (the request is a JSON object)")
        if state == "top":  # a key of the request object, or its end
            if byte == b"}":
                self._state = "done"
                return position + 1
            self._state = "top_key"
            return self._expect(position, b'"', "a key or '}'")
        if state == "top_key":  # the request's only key, read without escapes
            end = self._buffer.find(b'"', position)
            if end < 0:
                if len(self._buffer) - position > MAX_KEY_BYTES:
                    raise _malformed(self._offset + position, "a short key")
                return position
            key = self._buffer[position:end]
            if key != b"parameters":
                raise invalid(
                    rules.REQUEST_INVALID,
                    f"unknown field {clip(key.decode('utf-8', 'replace'))!r} in the load "
                    f"request; it has one, 'parameters'",
                )
            self._state = "top_colon"
            return end + 1
        if state == "top_colon":
            self._state = "parameters"
            return self._expect(position, b":", "':' after \"parameters\"")
        if state == "parameters":
            if byte != b"{":
                raise invalid(rules.REQUEST_INVALID, "'parameters' must be a JSON object")
            self._state = "first_key"
            return position + 1
        if state in ("first_key", "next_key") and byte == b"}":
            self._state = "top_end"
            return position + 1
        if state == "next_key":
            self._state = "key_start"
            return self._expect(position, b",", "',' or '}' after a parameter")
        if state in ("first_key", "key_start"):
            self._state = "key"
            return self._expect(position, b'"', "a parameter name")
        if state == "colon":
            position = self._expect(position, b":", "':' after a parameter name")
            self._state = "value"
            return position
        if state == "value":
            return self._start_value(position, byte)
        if state == "top_end":
            if byte == b"}":
                self._state = "done"
                return position + 1
            raise invalid(rules.REQUEST_INVALID, "the load request has one field, 'parameters'")
        raise _malformed(self._offset + position, "nothing after the request object")

    def _read_string(self, position: int) -> int:
        """Key or config text up to its closing quote, escapes kept for json.loads."""
        buffer = self._buffer
        while position < len(buffer):
            if self._escaped:
                self._string += buffer[position : position + 1]
                self._escaped = False
                position += 1
                continue
            match = _STRING_END.search(buffer, position)
            end = len(buffer) if match is None else match.start()
            self._string += buffer[position:end]
            self._check_string_size()
            if match is None:
                return end
            if buffer[end : end + 1] == b"\\":
                self._string += b"\\"
                self._escaped = True
                position = end + 1
                continue
            self._string_done()
            return end + 1
        return position

    def _check_string_size(self) -> None:
        if self._state == "key" and len(self._string) > MAX_KEY_BYTES:
            raise invalid(
                rules.REQUEST_INVALID, f"a load parameter name is longer than {MAX_KEY_BYTES} bytes"
            )
        if self._state == "config" and len(self._string) > self.max_config_bytes:
            raise invalid(
                rules.REPOSITORY_CONFIG,
                f"'config' is longer than the limit of {self.max_config_bytes} bytes",
            )

    def _string_value(self) -> str:
        try:
            return json.loads(b'"' + bytes(self._string) + b'"')
        except ValueError as exc:
            raise invalid(
                rules.REQUEST_JSON, f"the request is not valid JSON: {clip(exc)}"
            ) from None
        finally:
            self._string = bytearray()

    def _string_done(self) -> None:
        if self._state == "config":
            self.config = load_config(self._string_value())
            self._state = "next_key"
            return
        key = self._string_value()
        if key in self._keys:
            raise invalid(
                rules.REPOSITORY_PARAMETER, f"load parameter {clip(key)!r} is given twice"
            )
        self._keys.add(key)
        if key != CONFIG and not key.startswith(FILE_PREFIX):
            raise invalid(
                rules.REPOSITORY_PARAMETER,
                f"unknown load parameter {clip(key)!r}; expected 'config' or "
                f"'{FILE_PREFIX}<version>/<filename>'",
            )
        self._key = key
        self._state = "colon"
        if key.startswith(FILE_PREFIX) and self.staging is None:
            self.needs_staging = True

    def _start_value(self, position: int, byte: bytes) -> int:
        if byte != b'"':
            rule, kind = (
                (rules.REPOSITORY_CONFIG, "a string of JSON")
                if self._key == CONFIG
                else (rules.REPOSITORY_FILE, "base64 text")
            )
            raise invalid(rule, f"{clip(self._key)!r} must be {kind}")
        if self._key == CONFIG:
            self._state = "config"
            return position + 1
        self._file = _Base64File(self._key, self._open(self._key[len(FILE_PREFIX) :]))
        self._state = "file"
        return position + 1

    def _open(self, path: str) -> StagedWriter | None:
        place = file_role(path)
        if isinstance(place, Problem):
            self.problems.append(place)
            return None
        version, role, filename = place
        return self.staging.open_file(role, filename, version)

    def _read_file(self, position: int) -> int:
        buffer = self._buffer
        end = buffer.find(b'"', position)
        text = buffer[position : len(buffer) if end < 0 else end]
        if b"\\" in text:
            # "\/" is the one escape a base64 string may carry; any other is not base64. A
            # backslash that ends the chunk waits for the character it escapes.
            if text.endswith(b"\\") and not text.endswith(b"\\\\") and end < 0:
                text, end_of_text = text[:-1], position + len(text) - 1
            else:
                end_of_text = None
            text = text.replace(b"\\/", b"/")
            if b"\\" in text:
                raise self._file._refuse()
            self._file.write(text)
            if end_of_text is not None:
                return end_of_text
        else:
            self._file.write(text)
        if end < 0:
            return len(buffer)
        self._file.finish()
        self._file = None
        self._state = "next_key"
        return end + 1
