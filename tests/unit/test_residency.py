"""Residency measures on memory this test maps itself: anonymous pages count once written, file
pages once read, and a range is counted to the byte even where it shares its edge pages."""

import ctypes
import mmap

from service.dataplane import residency

PAGE = mmap.PAGESIZE


def _address(buffer: mmap.mmap) -> int:
    return ctypes.addressof(ctypes.c_char.from_buffer(buffer))


def test_anonymous_pages_count_once_written():
    buffer = mmap.mmap(-1, 16 * PAGE)
    base = _address(buffer)
    assert residency.range_resident_bytes(base, 16 * PAGE) == 0
    buffer[: 4 * PAGE] = b"x" * (4 * PAGE)
    assert residency.range_resident_bytes(base, 16 * PAGE) == 4 * PAGE
    # A range starting and ending inside pages counts only its own bytes of them.
    assert residency.range_resident_bytes(base + 100, 2 * PAGE) == 2 * PAGE
    assert residency.range_resident_bytes(base + 100, 8 * PAGE) == 4 * PAGE - 100
    assert residency.range_resident_bytes(base, 0) == 0


def test_mapped_file_pages_count_once_read(tmp_path):
    path = tmp_path / "weights.ptd"
    path.write_bytes(b"\0" * (64 * PAGE))
    with open(path, "rb") as file:
        mapped = mmap.mmap(file.fileno(), 0, prot=mmap.PROT_READ)
    untouched = residency.mapped_files()[str(path.resolve())]
    sum(mapped[i * PAGE] for i in range(32))  # read half of the pages
    touched = residency.mapped_files()[str(path.resolve())]
    assert touched - untouched >= 32 * PAGE and touched <= 64 * PAGE
    mapped.close()
    assert str(path.resolve()) not in residency.mapped_files()


def test_a_model_adds_its_files_and_arenas(tmp_path):
    buffer = mmap.mmap(-1, 8 * PAGE)
    buffer[:PAGE] = b"y" * PAGE
    files = {str((tmp_path / "program.pte").resolve()): 3 * PAGE, "/elsewhere.ptd": 99}
    memory = residency.measure(
        [tmp_path / "program.pte"], [(_address(buffer), 8 * PAGE), (_address(buffer), 0)], files
    )
    assert memory.files_bytes == 3 * PAGE
    assert memory.arena_bytes == 8 * PAGE and memory.arena_resident_bytes == PAGE
    assert memory.to_json()["resident_bytes"] == 4 * PAGE
    unreadable = residency.measure([tmp_path / "program.pte"], [], None)
    assert unreadable.files_bytes is None and unreadable.resident_bytes is None
