"""Name rules for uploads, as pure functions returning every problem found.

The rules come from what broke in practice with Torch-TensorRT's files (see the seed text of
pytorch/TensorRT PR 4915): a program saved under a `.ptd` name is overwritten by its own data file,
and data-file names that work on Linux fail on Windows or on a case-insensitive file system. Each
kind of violation has its own rule id and message so a user knows exactly what to change.
"""

from __future__ import annotations

import re

from service import rules
from service.errors import Problem, clip

DATA_SUFFIX = ".ptd"
FILE_NAME_LIMIT = 255
MODEL_NAME_LIMIT = 128
_ALLOWED = re.compile(r"[A-Za-z0-9._-]")
_FIRST = re.compile(r"[A-Za-z0-9_]")
_DEVICE_NAMES = frozenset(
    ["CON", "PRN", "AUX", "NUL"] + [f"COM{i}" for i in range(10)] + [f"LPT{i}" for i in range(10)]
)


def windows_name(name: str) -> str:
    """The name Windows actually creates: it drops trailing dots and spaces, and ignores case."""
    return name.rstrip(". ").lower()


def names_data_file(name: str) -> bool:
    return windows_name(name).endswith(DATA_SUFFIX)


def check_program_name(name: str) -> list[Problem]:
    if names_data_file(name):
        return [
            Problem(
                name,
                rules.PROGRAM_PTD_NAME,
                f"program file {clip(name)!r} has a data-file name: a name ending in "
                "'.ptd' (ignoring case and trailing dots and spaces) is where a data file "
                "is written, which overwrites the program; upload the program as '<name>.pte'",
            )
        ]
    return []


def _describe_chars(chars: list[str]) -> str:
    return ", ".join(repr(c) if c.isprintable() else f"U+{ord(c):04X}" for c in chars)


def _stem_problems(
    what: str, file: str | None, stem: str, family: tuple[str, str, str, str]
) -> list[Problem]:
    """Rules a data-file stem and a model name share (`family`, service.rules._name_rules):
    character set, first character, device names."""
    empty, characters, first_character, device_name = family
    problems = []
    if not stem:
        return [Problem(file, empty, f"{what} is empty")]
    bad = sorted({c for c in stem if not _ALLOWED.fullmatch(c)})
    if bad:
        hint = ""
        if "/" in bad or "\\" in bad:
            hint = " ('/' and '\\' make it a path: give a plain name, not a directory)"
        problems.append(
            Problem(
                file,
                characters,
                f"{what} {clip(stem)!r} contains {clip(_describe_chars(bad))}: "
                f"only ASCII letters, digits, '.', '-' and '_' are allowed{hint}",
            )
        )
    if not _FIRST.fullmatch(stem[0]):
        problems.append(
            Problem(
                file,
                first_character,
                f"{what} {clip(stem)!r} starts with {stem[0]!r}: it must start "
                "with an ASCII letter, a digit or '_'",
            )
        )
    device = stem.split(".", 1)[0].rstrip(" ").upper()
    if device in _DEVICE_NAMES:
        problems.append(
            Problem(
                file,
                device_name,
                f"{what} {clip(stem)!r} is the Windows device name {device} "
                "(with or without an extension such a name cannot be a file on "
                "Windows)",
            )
        )
    return problems


def check_data_name(name: str) -> list[Problem]:
    if not name.endswith(DATA_SUFFIX):
        return [
            Problem(
                name,
                rules.DATA_EXTENSION,
                f"data file {clip(name)!r} must be named '<name>.ptd' (lower-case "
                "'.ptd', nothing after it)",
            )
        ]
    stem = name[: -len(DATA_SUFFIX)]
    problems = _stem_problems("data file name", name, stem, rules.DATA_NAME_RULES)
    if stem and names_data_file(stem):
        problems.append(
            Problem(
                name,
                rules.DATA_DOUBLE_SUFFIX,
                f"data file {clip(name)!r}: the part before '.ptd' "
                f"({clip(stem)!r}) itself ends in '.ptd'; name it '<name>.ptd' "
                "once",
            )
        )
    size = len(name.encode("utf-8"))
    if size > FILE_NAME_LIMIT:
        problems.append(
            Problem(
                name,
                rules.DATA_TOO_LONG,
                f"data file name is {size} bytes with '.ptd'; file systems allow "
                f"at most {FILE_NAME_LIMIT}",
            )
        )
    return problems


def check_data_names_together(names: list[str]) -> list[Problem]:
    """Names that collide where letter case is ignored would share one file on such a system."""
    problems = []
    seen: dict[str, str] = {}
    for name in names:
        first = seen.get(name.lower())
        if first is None:
            seen[name.lower()] = name
            continue
        if first == name:
            problems.append(
                Problem(
                    name,
                    rules.DATA_DUPLICATE,
                    f"data file {clip(name)!r} is uploaded more than once",
                )
            )
        else:
            problems.append(
                Problem(
                    name,
                    rules.DATA_CASE_COLLISION,
                    f"data files {clip(first)!r} and {clip(name)!r} differ only "
                    "in letter case; on a case-insensitive file system they are "
                    "one file",
                )
            )
    return problems


def check_model_name(name: str) -> list[Problem]:
    problems = _stem_problems("model name", None, name, rules.MODEL_NAME_RULES)
    size = len(name.encode("utf-8"))
    if size > MODEL_NAME_LIMIT:
        problems.append(
            Problem(
                None,
                rules.MODEL_TOO_LONG,
                f"model name is {size} bytes; at most {MODEL_NAME_LIMIT} allowed",
            )
        )
    return problems
