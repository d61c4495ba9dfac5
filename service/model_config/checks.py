"""The checks every part of the model configuration is made of: known keys, integers in range,
one problem shape (file `config`, a config.* rule) for all of them."""

from __future__ import annotations

import json

from service.errors import Problem

CONFIG_FILE = "config"  # the `file` of config problems: the upload part / parameter / config.json
LIMIT = 2**53  # JSON integers past this are not exact in every client
TOP = "the configuration"


def problem(rule: str, message: str) -> Problem:
    return Problem(CONFIG_FILE, rule, message)


def key_path(where: str, key: str) -> str:
    return key if where == TOP else f"{where}.{key}"


def shown(value) -> str:
    return json.dumps(value)[:40]


class Checker:
    """Collects the problems of one configuration, so all of them are reported at once."""

    def __init__(self):
        self.problems: list[Problem] = []

    def add(self, rule: str, message: str) -> None:
        self.problems.append(problem(rule, message))

    def known(self, value, where: str, keys: tuple[str, ...]) -> dict:
        if not isinstance(value, dict):
            self.add("config.type", f"{where} must be a JSON object")
            return {}
        for key in value:
            if key not in keys:
                self.add(
                    "config.unknown_key",
                    f"unknown key {key_path(where, key)!r}; {where} takes {', '.join(keys)}",
                )
        return value

    def integer(self, value, where: str, low: int, high: int = LIMIT) -> int | None:
        # bool is an int in Python but `true` is no batch size in JSON.
        if not isinstance(value, int) or isinstance(value, bool):
            self.add("config.type", f"{where} must be an integer, not {shown(value)}")
            return None
        if not low <= value <= high:
            self.add("config.range", f"{where} must be between {low} and {high}, not {value}")
            return None
        return value
