"""RFC 9530 digest fields and the sha256.<file> form field, parsed and checked."""

import base64
import hashlib

import pytest

from service.front.protocols.native import upload_digests as digests

CONTENT = b"program bytes"


def b64(algorithm: str, content: bytes = CONTENT) -> str:
    return base64.b64encode(hashlib.new(algorithm, content).digest()).decode()


def test_sha256_and_sha512_members_are_read_and_others_ignored():
    value = f"md5=:AAAAAAAAAAAAAAAAAAAAAA==:, sha-256=:{b64('sha256')}:,sha-512=:{b64('sha512')}:"
    found = digests.parse_header("content-digest", value.encode())
    assert [(algorithm, expected) for algorithm, expected, _ in found] == [
        ("sha256", hashlib.sha256(CONTENT).digest()),
        ("sha512", hashlib.sha512(CONTENT).digest()),
    ]
    assert "Content-Digest" in found[0][2]


@pytest.mark.parametrize(
    "value, reason",
    [
        ("sha-256=abc", "is not '<algorithm>=:<base64>:'"),
        ("sha-256=:!!!!:", "is not '<algorithm>=:<base64>:'"),
        ("sha-256=:Q:", "not base64"),
        ("sha-256=:QUJD:", "has 3 bytes, not 32"),
        ("md5=:AAAAAAAAAAAAAAAAAAAAAA==:", "no sha-256 or sha-512"),
        ("", "is not '<algorithm>=:<base64>:'"),
    ],
)
def test_malformed_digest_fields_are_refused_with_the_reason(value, reason):
    with pytest.raises(digests.DigestError, match=reason.replace("(", r"\(")):
        digests.parse_header("repr-digest", value.encode())


def test_the_form_field_takes_64_hex_digits_in_any_case():
    algorithm, expected, where = digests.parse_field(
        "sha256.m.pte", hashlib.sha256(CONTENT).hexdigest().upper()
    )
    assert (algorithm, expected) == ("sha256", hashlib.sha256(CONTENT).digest())
    assert "sha256.m.pte" in where
    for bad in ("abc", "g" * 64, hashlib.sha256(CONTENT).hexdigest() + "0"):
        with pytest.raises(digests.DigestError, match="64 hex digits"):
            digests.parse_field("sha256.m.pte", bad)


def test_each_declared_digest_the_bytes_lack_is_one_problem_naming_the_file():
    computed = {
        "sha256": hashlib.sha256(CONTENT).digest(),
        "sha512": hashlib.sha512(CONTENT).digest(),
    }
    declared = digests.Declared(
        [
            ("sha256", hashlib.sha256(b"other").digest(), "its header"),
            ("sha512", computed["sha512"], "its header"),
        ]
    )
    [problem] = digests.mismatches("m.pte", len(CONTENT), computed, declared)
    assert problem.file == "m.pte" and problem.rule == "upload.digest_mismatch"
    assert computed["sha256"].hex() in problem.message
    assert hashlib.sha256(b"other").hexdigest() in problem.message
    assert digests.mismatches("m.pte", 1, computed, digests.Declared()) == []
