"""Receives a multipart model upload straight into a staging directory.

Parts are parsed as the body arrives and file parts are written to disk chunk by chunk, so memory
stays bounded whatever the upload size, and a size limit is enforced the moment it is crossed
instead of after the whole body was buffered. Files get neutral names (part-N) because the
uploaded names have not passed the name rules yet.
"""
from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.requests import Request

from service.config import FALSE_WORDS, TRUE_WORDS, Settings
from service.dataplane.service import Invalid, TooLarge
from service.ingest.model_config import decode_config
from service.ingest.pipeline import StagedFile, StagedUpload
from service.errors import Problem
from service.store.storage import Storage

_FIELD_LIMIT = 4096
_CONFIG_LIMIT = 65536  # the model configuration (JSON) may be longer than a name
_UNKNOWN_FIELDS_REPORTED = 16


def _header_text(value: bytes) -> str:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return value.decode("latin-1")


class _Receiver:
    def __init__(self, directory: Path, settings: Settings):
        self.directory = directory
        self.settings = settings
        self.fields: dict[str, bytearray] = {}
        self.programs: list[StagedFile] = []
        self.data: list[StagedFile] = []
        self.problems: list[Problem] = []
        self._header_field = bytearray()
        self._header_value = bytearray()
        self._headers: dict[str, bytes] = {}
        self._part = None
        self.finished = False

    def callbacks(self) -> dict:
        return {"on_part_begin": self._begin, "on_header_field": self._on_field,
                "on_header_value": self._on_value, "on_header_end": self._header_end,
                "on_headers_finished": self._headers_done, "on_part_data": self._data,
                "on_part_end": self._end, "on_end": self._finish}

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
            self._header_value)
        self._header_field.clear()
        self._header_value.clear()

    def _headers_done(self) -> None:
        _, options = parse_options_header(self._headers.get("content-disposition", b"").decode(
            "latin-1"))
        field = _header_text(options.get(b"name", b""))
        filename = options.get(b"filename")
        if field in ("program", "data"):
            name = "" if filename is None else _header_text(filename)
            path = self.directory / f"part-{len(self.programs) + len(self.data)}"
            staged = StagedFile(name, path, 0, "")
            (self.programs if field == "program" else self.data).append(staged)
            if field == "data" and len(self.data) > self.settings.max_data_files:
                raise TooLarge(f"more than {self.settings.max_data_files} data files in one upload")
            limit = self.settings.max_program_bytes if field == "program" else \
                self.settings.max_data_bytes
            self._part = ("file", staged, open(path, "wb"), hashlib.sha256(), limit)
        elif field in ("name", "replace", "config"):
            self.fields[field] = bytearray()
            self._part = ("field", field)
        else:
            # Once per name, and a bounded number of names: a body of many tiny parts must not
            # grow the answer (or memory) with it.
            reported = {p.message for p in self.problems if p.rule == "upload.unknown_field"}
            message = (f"unknown form field {field!r}; expected 'name', 'program', 'data' and "
                       "optionally 'replace' and 'config'")
            if message not in reported and len(reported) < _UNKNOWN_FIELDS_REPORTED:
                self.problems.append(Problem(None, "upload.unknown_field", message))
            self._part = ("ignored",)

    def _data(self, data: bytes, start: int, end: int) -> None:
        kind = self._part[0]
        if kind == "file":
            _, staged, handle, digest, limit = self._part
            staged.size += end - start
            if staged.size > limit:
                raise TooLarge(f"file {staged.name!r} is larger than the limit of {limit} bytes")
            chunk = data[start:end]
            handle.write(chunk)
            digest.update(chunk)
        elif kind == "field":
            value = self.fields[self._part[1]]
            value += data[start:end]
            limit = _CONFIG_LIMIT if self._part[1] == "config" else _FIELD_LIMIT
            if len(value) > limit:
                raise TooLarge(f"form field {self._part[1]!r} is longer than {limit} bytes")

    def _end(self) -> None:
        if self._part and self._part[0] == "file":
            _, staged, handle, digest, _ = self._part
            handle.close()
            staged.sha256 = digest.hexdigest()
        self._part = None

    def close(self) -> None:
        if self._part and self._part[0] == "file":
            self._part[2].close()

    def upload(self, replace_query: bool) -> StagedUpload:
        if not self.finished:
            raise MultipartParseError("the body ended before the closing boundary")
        problems = list(self.problems)
        if len(self.programs) > 1:
            problems.append(Problem(None, "upload.program_count",
                                    f"the upload has {len(self.programs)} 'program' files; send one"))
        name = _header_text(bytes(self.fields.get("name", b"")))
        if "name" not in self.fields:
            problems.append(Problem(None, "upload.name_missing",
                                    "the upload has no 'name' field (the model name)"))
        replace_text = _header_text(bytes(self.fields.get("replace", b""))).strip().lower()
        if replace_text not in TRUE_WORDS | FALSE_WORDS:
            problems.append(Problem(None, "upload.replace",
                                    f"'replace' must be true or false, not {replace_text!r}"))
        config = None
        if "config" in self.fields:
            config, config_problems = decode_config(bytes(self.fields["config"]))
            problems += config_problems
        if problems:
            raise Invalid("upload refused", problems)
        return StagedUpload(name, replace_query or replace_text in TRUE_WORDS, self.directory,
                            self.programs[0] if self.programs else None, self.data, config)


async def receive_upload(request: Request, storage: Storage, settings: Settings,
                         replace: bool) -> StagedUpload:
    content_type, options = parse_options_header(request.headers.get("content-type", ""))
    if content_type != b"multipart/form-data" or not options.get(b"boundary"):
        raise Invalid("upload refused", [Problem(None, "upload.content_type",
                                                 "send the upload as multipart/form-data")])
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > settings.max_upload_bytes:
        raise TooLarge(f"the upload is {declared} bytes; the limit is {settings.max_upload_bytes}")
    directory = storage.new_staging_dir()
    receiver = _Receiver(directory, settings)
    try:
        parser = MultipartParser(options[b"boundary"], receiver.callbacks())
        received = 0
        async for chunk in request.stream():
            received += len(chunk)
            if received > settings.max_upload_bytes:
                raise TooLarge(f"the upload exceeds the limit of {settings.max_upload_bytes} bytes")
            await asyncio.to_thread(parser.write, chunk)
        parser.finalize()
        return receiver.upload(replace)
    except MultipartParseError as exc:
        receiver.close()
        storage.discard(directory)
        raise Invalid("upload refused", [Problem(None, "upload.malformed",
                                                 f"the multipart body is malformed: {exc}")]) from None
    except BaseException:
        receiver.close()
        storage.discard(directory)
        raise
