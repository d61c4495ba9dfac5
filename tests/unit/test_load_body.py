"""The incremental reader of repository load bodies (v2_rest/load_body.py), over a real Staging:
the same result however the body is split into chunks, base64 decoded into the staged files,
and a clear refusal for every malformed byte."""

import base64
import json
import os

import pytest

from service.config import Settings
from service.errors import Invalid, TooLarge
from service.front.protocols.v2_rest.load_body import LoadBody
from service.ingest.staging import Staging
from service.store.storage import Storage

PROGRAM = os.urandom(1000)
WEIGHTS = os.urandom(301)
BODY = json.dumps(
    {
        "parameters": {
            "config": json.dumps({"max_batch_size": 4, "note": 'a "quoted" \\ value'}),
            "file:1/model.pte": base64.b64encode(PROGRAM).decode(),
            "file:1/w.ptd": base64.b64encode(WEIGHTS).decode(),
        }
    },
    indent=1,
).encode()


def _read(body: bytes, tmp_path, chunk: int, settings: Settings | None = None):
    """(reader, staging or None) after feeding `body` in chunks of `chunk` bytes."""
    reader = LoadBody(max_config_bytes=1 << 20)
    staging = Staging(Storage(tmp_path), settings or Settings())
    for start in range(0, len(body), chunk):
        reader.feed(body[start : start + chunk])
        if reader.needs_staging:
            reader.staging, reader.needs_staging = staging, False
            reader.feed(b"")
    reader.end()
    return reader


@pytest.mark.parametrize("chunk", [1, 3, 7, 64, 1 << 20])
def test_files_and_config_are_the_same_however_the_body_is_split(tmp_path, chunk):
    reader = _read(BODY, tmp_path, chunk)
    [upload] = reader.upload("m").parts
    assert upload.version == 1 and upload.program.path.read_bytes() == PROGRAM
    assert [f.path.read_bytes() for f in upload.data] == [WEIGHTS]
    assert [f.name for f in upload.data] == ["w.ptd"]
    assert upload.config == {"max_batch_size": 4, "note": 'a "quoted" \\ value'}
    assert upload.replace is True


def test_escaped_slashes_in_base64_are_slashes(tmp_path):
    content = bytes([0xFF, 0xFF, 0xFF]) * 10  # base64 "////..."
    text = base64.b64encode(content).decode().replace("/", "\\/")
    body = b'{"parameters": {"file:1/model.pte": "' + text.encode() + b'"}}'
    for chunk in (1, 2, 1000):
        reader = _read(body, tmp_path / str(chunk), chunk)
        assert reader.upload("m").parts[0].program.path.read_bytes() == content


def test_a_body_without_files_never_stages(tmp_path):
    for body in (b"", b"  ", b"{}", b'{"parameters": {}}', b'{"parameters": {"config": "{}"}}'):
        reader = LoadBody(max_config_bytes=100)
        reader.feed(body)
        reader.end()
        assert not reader.needs_staging and reader.staging is None
    assert reader.config == {}


def test_files_with_wrong_paths_are_problems_not_writes(tmp_path):
    body = b'{"parameters": {"file:0/model.pte": "AAAA", "file:1/notes.txt": "AAAA"}}'
    reader = _read(body, tmp_path, 5)
    with pytest.raises(Invalid) as refused:
        reader.upload("m")
    assert {p.rule for p in refused.value.problems} == {"load.file_path", "load.file_kind"}


@pytest.mark.parametrize(
    "body, rule, words",
    [
        (b"[]", "request.json", "'{'"),
        (b'{"parameters": {"config": "{}"}', "request.json", "ended early"),
        (b'{"parameters": {"config": "{}"}} x', "request.json", "nothing after"),
        (b'{"parameters": {"config": "{}",}}', "request.json", "parameter name"),
        (b'{"parameters": {"config" "{}"}}', "request.json", "':'"),
        (b'{"parameters": {"config": "{}" "x": 1}}', "request.json", "','"),
        (b'{"other": 1}', "request.invalid", "unknown field 'other'"),
        (b'{"parameters": []}', "request.invalid", "'parameters' must be a JSON object"),
        (b'{"parameters": {"x": 1}}', "repository.parameter", "unknown load parameter 'x'"),
        (b'{"parameters": {"config": 1}}', "repository.config", "'config' must be a string"),
        (b'{"parameters": {"config": "[1]"}}', "repository.config", "JSON object"),
        (b'{"parameters": {"config": "{", "x": 1}}', "repository.config", "not valid JSON"),
        (b'{"parameters": {"config": "\\q"}}', "request.json", "not valid JSON"),
        (b'{"parameters": {"file:1/m.pte": 5}}', "repository.file", "must be base64 text"),
        (b'{"parameters": {"file:1/m.pte": "AA!A"}}', "repository.file", "not valid base64"),
        (b'{"parameters": {"file:1/m.pte": "AAA"}}', "repository.file", "not valid base64"),
        (b'{"parameters": {"file:1/m.pte": "AA==AAAA"}}', "repository.file", "not valid base64"),
        (b'{"parameters": {"file:1/m.pte": "AA\\nA"}}', "repository.file", "not valid base64"),
        (
            b'{"parameters": {"file:1/m.pte": "AAAA", "file:1/m.pte": "AAAA"}}',
            "repository.parameter",
            "given twice",
        ),
    ],
)
def test_malformed_bodies_are_refused_naming_what_is_wrong(tmp_path, body, rule, words):
    for chunk in (1, len(body)):
        with pytest.raises(Invalid) as refused:
            _read(body, tmp_path / str(chunk), chunk)
        assert refused.value.problems[0].rule == rule, refused.value
        assert words in refused.value.message, refused.value.message


def test_a_file_past_its_role_limit_is_refused_while_it_arrives(tmp_path):
    body = b'{"parameters": {"file:1/model.pte": "' + base64.b64encode(PROGRAM) + b'"}}'
    with pytest.raises(TooLarge, match="larger than the limit of 100 bytes"):
        _read(body, tmp_path, 64, Settings(max_program_bytes=100))


def test_a_long_config_is_refused_at_its_limit(tmp_path):
    reader = LoadBody(max_config_bytes=10)
    with pytest.raises(Invalid, match="'config' is longer than the limit of 10 bytes"):
        reader.feed(b'{"parameters": {"config": "' + b"x" * 11)
