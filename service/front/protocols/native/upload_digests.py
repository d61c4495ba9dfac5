"""Digests a client declares for the files it uploads, checked against the bytes received.

A corrupted upload (a flipped weight byte, bytes inserted in a .ptd) can still be a valid program
that computes different numbers, so nothing else in ingest would notice it. A client that sends a
digest per file makes the server prove it stored what was sent. Two ways to declare one:

- on the file's part, RFC 9530 `Content-Digest` or `Repr-Digest` (a structured-field dictionary,
  e.g. `sha-256=:<base64>:`); sha-256 and sha-512 are checked, other algorithms are ignored as
  the RFC asks, and a header with none of the two is refused (the client asked for a check that
  would silently not happen);
- a form field `sha256.<file name>` holding the hex sha-256 of the file uploaded under that name
  (easy from a shell: `-F sha256.model.pte=$(sha256sum model.pte | cut -c1-64)`).
"""

from __future__ import annotations

import base64
import hashlib
import re
from dataclasses import dataclass, field

from service import rules
from service.errors import Problem, clip

HEADERS = ("content-digest", "repr-digest")
FIELD_PREFIX = "sha256."
_ALGORITHMS = {"sha-256": "sha256", "sha-512": "sha512"}
_MEMBER = re.compile(r"^([a-z*][a-z0-9_\-.*]*)=:([A-Za-z0-9+/=]*):((?:;.*)?)$")
_HEX = re.compile(r"^[0-9a-fA-F]{64}$")


class DigestError(ValueError):
    pass


@dataclass
class Declared:
    """What the client declared for one file: (hashlib name, expected bytes, where it said so)."""

    digests: list[tuple[str, bytes, str]] = field(default_factory=list)

    def hashers(self) -> dict:
        return {
            algorithm: hashlib.new(algorithm)
            for algorithm, _, _ in self.digests
            if algorithm != "sha256"
        }


def parse_header(header: str, value: bytes) -> list[tuple[str, bytes, str]]:
    """The sha-256/sha-512 members of an RFC 9530 digest field; raises DigestError."""
    text = value.decode("latin-1").strip()
    found = []
    for member in text.split(","):
        match = _MEMBER.match(member.strip())
        if match is None:
            raise DigestError(
                f"{header}: {clip(member.strip(), 80)!r} is not '<algorithm>=:<base64>:'"
            )
        algorithm = _ALGORITHMS.get(match.group(1))
        if algorithm is None:
            continue
        try:
            digest = base64.b64decode(match.group(2), validate=True)
        except ValueError:
            raise DigestError(f"{header}: the {match.group(1)} value is not base64") from None
        if len(digest) != hashlib.new(algorithm).digest_size:
            raise DigestError(
                f"{header}: the {match.group(1)} value has {len(digest)} bytes, "
                f"not {hashlib.new(algorithm).digest_size}"
            )
        found.append((algorithm, digest, f"its {header.title()} header"))
    if not found:
        raise DigestError(
            f"{header}: no sha-256 or sha-512 digest (the algorithms this server checks)"
        )
    return found


def parse_field(name: str, value: str) -> tuple[str, bytes, str]:
    text = value.strip()
    if not _HEX.match(text):
        raise DigestError(f"form field {clip(name)!r} must be 64 hex digits (a sha-256)")
    return "sha256", bytes.fromhex(text), f"the form field {clip(name)!r}"


def mismatches(
    file_name: str, size: int, computed: dict[str, bytes], declared: Declared
) -> list[Problem]:
    """A problem per declared digest the received bytes do not have."""
    problems = []
    for algorithm, expected, where in declared.digests:
        if computed[algorithm] != expected:
            problems.append(
                Problem(
                    file_name,
                    rules.UPLOAD_DIGEST_MISMATCH,
                    (
                        f"file {clip(file_name)!r} arrived with {size} bytes whose {algorithm} is "
                        f"{computed[algorithm].hex()}, but {where} declares {expected.hex()}: it "
                        "was changed on the way; send it again"
                    ),
                )
            )
    return problems
