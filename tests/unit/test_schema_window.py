"""Programs and data files from an ExecuTorch outside this runtime's compatibility window are
refused at ingest with both versions named, and the native host (the runtime itself) refuses the
same files: if the runtime's window moved without service/ingest/inspection.py, these fail.

A newer exporter is stood in for by ExecuTorch's own serializer stamping a higher schema version
into a real program, and by a file identifier of the same family with a higher number.
"""

from importlib import metadata
from pathlib import Path

import ethost
import pytest
from executorch.exir._serialize._program import deserialize_pte_binary, serialize_pte_binary

from service.ingest import inspection
from service.ingest.inspection import OutsideSchemaWindow, inspect_data_file, inspect_program
from support.program_fixtures import external_weights_program, linear_relu_program  # noqa: F401

RELEASE = f"ExecuTorch {metadata.version('executorch')}"


def restamped(source: Path, target: Path, version: int) -> Path:
    pte = deserialize_pte_binary(source.read_bytes())
    pte.program.version = version
    target.write_bytes(bytes(serialize_pte_binary(pte)))
    return target


def with_identifier(source: Path, target: Path, identifier: bytes) -> Path:
    data = bytearray(source.read_bytes())
    data[4:8] = identifier
    target.write_bytes(bytes(data))
    return target


def test_the_window_is_the_runtimes_highest_version(linear_relu_program, tmp_path):
    highest = restamped(
        linear_relu_program.pte, tmp_path / "v.pte", inspection.PROGRAM_SCHEMA_VERSION
    )
    assert inspect_program(highest).methods[0].name == "forward"
    assert ethost.Program(str(highest)).method_names == ["forward"]


def test_a_newer_schema_version_is_refused_naming_both(linear_relu_program, tmp_path):
    newer = restamped(
        linear_relu_program.pte, tmp_path / "v.pte", inspection.PROGRAM_SCHEMA_VERSION + 1
    )
    with pytest.raises(OutsideSchemaWindow) as refused:
        inspect_program(newer)
    message = str(refused.value)
    assert f"its schema version is {inspection.PROGRAM_SCHEMA_VERSION + 1}" in message
    assert f"({RELEASE}) reads schema versions up to {inspection.PROGRAM_SCHEMA_VERSION}" in message
    with pytest.raises(Exception, match="0x23"):  # InvalidProgram: the runtime agrees
        ethost.Program(str(newer))


@pytest.mark.parametrize("identifier, age", [(b"ET13", "a newer"), (b"ET11", "an older")])
def test_another_program_identifier_is_refused_naming_both(
    linear_relu_program, tmp_path, identifier, age
):
    other = with_identifier(linear_relu_program.pte, tmp_path / "p.pte", identifier)
    with pytest.raises(OutsideSchemaWindow) as refused:
        inspect_program(other)
    message = str(refused.value)
    assert message.startswith(f"written by {age} ExecuTorch: its schema identifier is ")
    assert (
        f"{identifier.decode()}, and this server's runtime ({RELEASE}) reads ET12 only" in message
    )
    with pytest.raises(Exception, match="0x23"):
        ethost.Program(str(other))


def test_not_a_program_at_all_is_still_invalid_not_a_schema_matter(tmp_path):
    other = tmp_path / "x.pte"
    other.write_bytes(b"\x00" * 4 + b"XY12" + b"\x00" * 56)
    with pytest.raises(inspection.InspectionError) as refused:
        inspect_program(other)
    assert not isinstance(refused.value, OutsideSchemaWindow)


def test_a_data_file_of_a_newer_identifier_is_refused_naming_both(
    external_weights_program, tmp_path
):
    [weights] = external_weights_program.ptds
    other = with_identifier(weights, tmp_path / "w.ptd", b"FT02")
    with pytest.raises(OutsideSchemaWindow, match=r"identifier is FT02, .* reads FT01 only"):
        inspect_data_file(other)
    with pytest.raises(Exception):  # noqa: B017 (the host's own error class and code)
        ethost.Program(str(external_weights_program.pte), [str(other)]).instances("forward", 1)
