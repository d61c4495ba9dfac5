"""service.store.digests: a stored model's files against the sha-256 recorded at ingest."""

import hashlib

import pytest

from service.store.digests import DigestMismatch, file_sha256, verify
from service.store.records import (
    DATA,
    PROGRAM,
    PROGRAM_FILE,
    ModelDescription,
    StoredFile,
    StoredModel,
)


def stored_model(folder, files: dict[str, bytes]) -> StoredModel:
    records = []
    for name, content in files.items():
        role = PROGRAM if name.endswith(".pte") else DATA
        (folder / (PROGRAM_FILE if role == PROGRAM else name)).write_bytes(content)
        records.append(StoredFile(name, role, len(content), hashlib.sha256(content).hexdigest()))
    return StoredModel("m", folder, ModelDescription("m", tuple(records), ()))


@pytest.mark.parametrize("size", [0, 1, (8 << 20) - 1, 8 << 20, (8 << 20) + 1, 3 * (8 << 20)])
def test_the_digest_is_hashlibs_across_chunk_boundaries(tmp_path, size):
    content = (bytes(range(256)) * (size // 256 + 1))[:size]
    path = tmp_path / "f"
    path.write_bytes(content)
    assert file_sha256(path) == (hashlib.sha256(content).hexdigest(), size)
    assert file_sha256(path, chunk_bytes=4096)[0] == hashlib.sha256(content).hexdigest()


def test_unchanged_files_pass_and_are_counted(tmp_path):
    model = stored_model(tmp_path, {"model.pte": b"ET12" * 100, "w.ptd": b"FT01" * 1000})
    check = verify(model)
    assert (check.files, check.bytes) == (2, 4400)
    assert check.seconds >= 0


def test_a_flipped_byte_names_the_file_and_both_digests(tmp_path):
    model = stored_model(tmp_path, {"model.pte": b"p" * 64, "w.ptd": b"w" * 64})
    recorded = model.description.files[1].sha256
    (tmp_path / "w.ptd").write_bytes(b"w" * 63 + b"x")
    with pytest.raises(DigestMismatch) as changed:
        verify(model)
    message = str(changed.value)
    assert message.startswith("stored file 'w.ptd' is not the file that was uploaded")
    assert f"ingest recorded {recorded}" in message
    assert f"now {hashlib.sha256(b'w' * 63 + b'x').hexdigest()}" in message


def test_an_unreadable_file_is_a_mismatch_too(tmp_path):
    model = stored_model(tmp_path, {"model.pte": b"p" * 64})
    (tmp_path / PROGRAM_FILE).unlink()
    with pytest.raises(DigestMismatch, match="'model.pte' cannot be read to verify it"):
        verify(model)
