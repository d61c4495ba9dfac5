"""Receives a multipart model upload straight into the dataplane's staging (service.ingest.staging).

Parts are parsed as the body arrives and file parts are handed to the staging chunk by chunk, so
memory stays bounded whatever the upload size, and a size limit is enforced the moment it is
crossed instead of after the whole body was buffered. This module only knows the form: which
parts are files of which role, and the 'name' and 'replace' fields.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.requests import ClientDisconnect, Request

from service import rules
from service.config import BOOLEAN_WORDS, FALSE_WORDS, TRUE_WORDS
from service.errors import Aborted, Problem, TooLarge, clip, refused
from service.front.protocols.native import upload_digests
from service.ingest.staging import StagedFile, StagedUpload, Staging, version_number
from service.model_config.parse import decode_config
from service.model_config.version_policy import MAX_VERSION

_FIELD_LIMIT = 4096
_CONFIG_LIMIT = 65536  # the model configuration (JSON) may be longer than a name
_UNKNOWN_FIELDS_REPORTED = 16


def _header_text(value: bytes) -> str:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return value.decode("latin-1")


class _Receiver:
    def __init__(self, staging: Staging):
        self.staging = staging
        self.max_data_files = staging.settings.max_data_files
        self.fields: dict[str, bytearray] = {}
        self.problems: list[Problem] = []
        # Per file part: its staged file, the digests computed while it arrived, and the ones
        # its part headers declared.
        self.received: list[tuple[StagedFile, dict[str, bytes], upload_digests.Declared]] = []
        self._header_field = bytearray()
        self._header_value = bytearray()
        self._headers: dict[str, bytes] = {}
        self._part = None
        self.finished = False

    def callbacks(self) -> dict:
        return {
            "on_part_begin": self._begin,
            "on_header_field": self._on_field,
            "on_header_value": self._on_value,
            "on_header_end": self._header_end,
            "on_headers_finished": self._headers_done,
            "on_part_data": self._data,
            "on_part_end": self._end,
            "on_end": self._finish,
        }

    def _finish(self) -> None:
        self.finished = True

    def _begin(self) -> None:
        self._headers = {}

    def _on_field(self, data: bytes, start: int, end: int) -> None:
        self._header_field += data[start:end]

    def _on_value(self, data: bytes, start: int, end: int) -> None:
        self._header_value += data[start:end]

    def _header_end(self) -> None:
        self._headers[bytes(self._header_field).decode("latin-1").lower()] = bytes(
            self._header_value
        )
        self._header_field.clear()
        self._header_value.clear()

    def _headers_done(self) -> None:
        _, options = parse_options_header(
            self._headers.get("content-disposition", b"").decode("latin-1")
        )
        field = _header_text(options.get(b"name", b""))
        filename = options.get(b"filename")
        if field in ("program", "data"):
            name = "" if filename is None else _header_text(filename)
            declared = self._declared_digests(name)
            self._part = ("file", self.staging.open_file(field, name), declared.hashers(), declared)
        elif field in ("name", "replace", "config", "version") or field.startswith(
            upload_digests.FIELD_PREFIX
        ):
            digest_fields = sum(f.startswith(upload_digests.FIELD_PREFIX) for f in self.fields)
            if digest_fields > self.max_data_files:
                raise TooLarge(f"more than {self.max_data_files + 1} digest fields in one upload")
            self.fields[field] = bytearray()
            self._part = ("field", field)
        else:
            # Once per name, and a bounded number of names: a body of many tiny parts must not
            # grow the answer (or memory) with it.
            reported = {p.message for p in self.problems if p.rule == rules.UPLOAD_UNKNOWN_FIELD}
            message = (
                f"unknown form field {clip(field)!r}; expected 'name', 'program', "
                "'data' and optionally 'replace', 'version', 'config' and 'sha256.<file name>'"
            )
            if message not in reported and len(reported) < _UNKNOWN_FIELDS_REPORTED:
                self.problems.append(Problem(None, rules.UPLOAD_UNKNOWN_FIELD, message))
            self._part = ("ignored",)

    def _declared_digests(self, file_name: str) -> upload_digests.Declared:
        declared = upload_digests.Declared()
        for header in upload_digests.HEADERS:
            if header in self._headers:
                try:
                    declared.digests += upload_digests.parse_header(header, self._headers[header])
                except upload_digests.DigestError as exc:
                    self.problems.append(Problem(file_name, rules.UPLOAD_DIGEST, str(exc)))
        return declared

    def _data(self, data: bytes, start: int, end: int) -> None:
        kind = self._part[0]
        if kind == "file":
            _, writer, hashers, _ = self._part
            chunk = data[start:end]
            writer.write(chunk)
            for hasher in hashers.values():
                hasher.update(chunk)
        elif kind == "field":
            value = self.fields[self._part[1]]
            value += data[start:end]
            limit = _CONFIG_LIMIT if self._part[1] == "config" else _FIELD_LIMIT
            if len(value) > limit:
                raise TooLarge(f"form field {clip(self._part[1])!r} is longer than {limit} bytes")

    def _end(self) -> None:
        if self._part and self._part[0] == "file":
            _, writer, hashers, declared = self._part
            staged = writer.finish()
            computed = {algorithm: hasher.digest() for algorithm, hasher in hashers.items()}
            computed["sha256"] = bytes.fromhex(staged.sha256)
            self.received.append((staged, computed, declared))
        self._part = None

    def _digest_problems(self) -> list[Problem]:
        """Digest form fields join what the part headers declared; every file is then checked."""
        problems = []
        by_name = {}
        for staged, computed, declared in self.received:
            by_name.setdefault(staged.name, []).append((staged, computed, declared))
        for field, value in self.fields.items():
            if not field.startswith(upload_digests.FIELD_PREFIX):
                continue
            file_name = field[len(upload_digests.FIELD_PREFIX) :]
            if file_name not in by_name:
                problems.append(
                    Problem(
                        file_name,
                        rules.UPLOAD_DIGEST,
                        (f"form field {clip(field)!r} names no uploaded file"),
                    )
                )
                continue
            try:
                declared = upload_digests.parse_field(field, _header_text(bytes(value)))
            except upload_digests.DigestError as exc:
                problems.append(Problem(file_name, rules.UPLOAD_DIGEST, str(exc)))
                continue
            for _, _, digests in by_name[file_name]:
                digests.digests.append(declared)
        for staged, computed, declared in self.received:
            problems += upload_digests.mismatches(staged.name, staged.size, computed, declared)
        return problems

    def upload(self, replace_query: bool) -> StagedUpload:
        if not self.finished:
            raise MultipartParseError("the body ended before the closing boundary")
        problems = list(self.problems) + self._digest_problems()
        name = _header_text(bytes(self.fields.get("name", b"")))
        if "name" not in self.fields:
            problems.append(
                Problem(
                    None,
                    rules.UPLOAD_NAME_MISSING,
                    "the upload has no 'name' field (the model name)",
                )
            )
        replace_text = _header_text(bytes(self.fields.get("replace", b""))).strip().lower()
        if replace_text not in TRUE_WORDS | FALSE_WORDS:
            problems.append(
                Problem(
                    None,
                    rules.UPLOAD_REPLACE,
                    f"'replace' must be true or false ({BOOLEAN_WORDS}), "
                    f"not {clip(replace_text)!r}",
                )
            )
        config = None
        if "config" in self.fields:
            config, config_problems = decode_config(bytes(self.fields["config"]))
            problems += config_problems
        version = None
        if "version" in self.fields:
            text = _header_text(bytes(self.fields["version"])).strip()
            version = version_number(text)
            if version is None:
                problems.append(
                    Problem(
                        None,
                        rules.UPLOAD_VERSION,
                        f"'version' must be a number from 1 to {MAX_VERSION}, not {clip(text)!r}",
                    )
                )
        return self.staging.commit(
            name, replace_query or replace_text in TRUE_WORDS, config, problems, version
        )


async def receive_upload(
    request: Request, begin: Callable[[], Staging], max_upload_bytes: int, replace: bool
) -> StagedUpload:
    """`begin` starts the dataplane's staging once the body looks like an upload at all."""
    content_type, options = parse_options_header(request.headers.get("content-type", ""))
    if content_type != b"multipart/form-data" or not options.get(b"boundary"):
        raise refused(
            "upload refused",
            [Problem(None, rules.UPLOAD_CONTENT_TYPE, "send the upload as multipart/form-data")],
        )
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > max_upload_bytes:
        raise TooLarge(f"the upload is {declared} bytes; the limit is {max_upload_bytes}")
    staging = begin()
    receiver = _Receiver(staging)
    try:
        parser = MultipartParser(options[b"boundary"], receiver.callbacks())
        received = 0
        async for chunk in request.stream():
            received += len(chunk)
            if received > max_upload_bytes:
                raise TooLarge(f"the upload exceeds the limit of {max_upload_bytes} bytes")
            await asyncio.to_thread(parser.write, chunk)
        parser.finalize()
        return receiver.upload(replace)
    except MultipartParseError as exc:
        staging.abort()
        raise refused(
            "upload refused",
            [Problem(None, rules.UPLOAD_MALFORMED, f"the multipart body is malformed: {exc}")],
        ) from None
    except ClientDisconnect:
        staging.abort()
        raise Aborted("the client disconnected before the upload was complete") from None
    except BaseException:
        staging.abort()
        raise
