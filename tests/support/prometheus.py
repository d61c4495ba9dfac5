"""Reads Prometheus text exposition (0.0.4) the way a scraper would, for tests of /metrics.

Written independently of service.dataplane.metrics so that a formatter bug cannot cancel out in a
test: label values are unescaped character by character, and every sample line must parse.
"""

import re

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_ESCAPES = {"\\": "\\", '"': '"', "n": "\n"}


def _labels(text: str, at: int) -> tuple[dict, int]:
    """Parses `{a="x",b="y"}` starting at text[at] == "{"; returns the labels and the end index."""
    labels, at = {}, at + 1
    while text[at] != "}":
        name = _NAME.match(text, at)
        assert name and text[name.end() : name.end() + 2] == '="', f"bad label at {text[at:]!r}"
        at, value = name.end() + 2, []
        while text[at] != '"':
            if text[at] == "\\":
                at += 1
                value.append(_ESCAPES[text[at]])
            else:
                value.append(text[at])
            at += 1
        labels[name.group()] = "".join(value)
        at += 1
        if text[at] == ",":
            at += 1
    return labels, at + 1


def parse(text: str) -> dict:
    """{"samples": {(name, frozenset(labels.items())): value}, "types": {name: type},
    "help": {name: text}}."""
    samples, types, helps = {}, {}, {}
    assert text.endswith("\n")
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            name, kind = line[7:].split(" ")
            types[name] = kind
            continue
        if line.startswith("# HELP "):
            name, _, help_text = line[7:].partition(" ")
            helps[name] = help_text.replace("\\n", "\n").replace("\\\\", "\\")
            continue
        name = _NAME.match(line)
        assert name, f"bad sample line {line!r}"
        labels, at = _labels(line, name.end()) if line[name.end()] == "{" else ({}, name.end())
        assert line[at] == " ", f"bad sample line {line!r}"
        key = (name.group(), frozenset(labels.items()))
        assert key not in samples, f"duplicate series {line!r}"
        samples[key] = float(line[at + 1 :])
    return {"samples": samples, "types": types, "help": helps}


def value(parsed: dict, name: str, **labels) -> float | None:
    return parsed["samples"].get((name, frozenset(labels.items())))


def series(parsed: dict, name: str) -> dict:
    """{frozenset(labels.items()): value} of every sample of `name`."""
    return {labels: v for (n, labels), v in parsed["samples"].items() if n == name}


def scraped(url: str, line: str) -> float:
    """The value of the first sample of `url`/metrics whose line starts with `line` (a name
    with its labels as the server writes them); 0 when there is none yet."""
    import httpx

    text = httpx.get(f"{url}/metrics").text
    found = [row.split()[-1] for row in text.splitlines() if row.startswith(line)]
    return float(found[0]) if found else 0.0
