"""Finding model directory entries and telling whether a stored model is an entry unchanged."""

import hashlib

import pytest

from service.ingest.model_dirs import find_entries, unchanged
from service.store.records import ModelDescription, StoredFile, StoredModel


def entry(root, name, files):
    folder = root / name
    folder.mkdir(parents=True)
    for file_name, content in files.items():
        (folder / file_name).write_bytes(content)
    return folder


def test_entries_are_folders_with_a_program_and_the_first_directory_wins(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    entry(a, "m", {"model.pte": b"1"})
    entry(a, "docs", {"README": b"x"})
    entry(b, "m", {"other.pte": b"2"})
    entry(b, "n", {"n.pte": b"3", "w.ptd": b"4"})
    (a / "loose.pte").write_bytes(b"not in a folder")
    assert find_entries((a, b), None) == [("m", a / "m"), ("n", b / "n")]


def test_kserve_layout_is_the_directory_itself_and_a_missing_directory_fails(tmp_path):
    assert find_entries((tmp_path,), "served") == [("served", tmp_path)]
    with pytest.raises(RuntimeError, match="does not exist"):
        find_entries((tmp_path / "absent",), None)


def test_unchanged_compares_names_bytes_and_config(tmp_path):
    folder = entry(tmp_path, "m", {"m.pte": b"program", "w.ptd": b"weights"})
    files = tuple(
        StoredFile(name, role, len(content), hashlib.sha256(content).hexdigest())
        for name, role, content in (("m.pte", "program", b"program"), ("w.ptd", "data", b"weights"))
    )
    stored = StoredModel("m", tmp_path / "store", ModelDescription("m", files, ()))
    assert unchanged(stored, folder)
    (folder / "w.ptd").write_bytes(b"weightz")  # same size, other bytes
    assert not unchanged(stored, folder)
    (folder / "w.ptd").write_bytes(b"weights")
    (folder / "config.json").write_text('{"instance_group": [{"count": 1}]}')
    assert not unchanged(stored, folder)
