"""The pieces of `etrt` below its commands: the streamed upload body and target parsing."""

import base64
import hashlib

import pytest
from python_multipart.multipart import MultipartParser

from service.cli.targets import Target, judge, parse_target
from service.cli.upload import FilePart, UploadBody


def _parts(body: UploadBody) -> list[dict]:
    """The body parsed by the multipart parser the server uses."""
    parts, state = [], {}

    def begin():
        state.update(headers={}, data=bytearray(), field=bytearray(), value=bytearray())

    def header_end():
        state["headers"][bytes(state["field"]).lower()] = bytes(state["value"])
        state["field"], state["value"] = bytearray(), bytearray()

    callbacks = {
        "on_part_begin": begin,
        "on_header_field": lambda d, s, e: state["field"].extend(d[s:e]),
        "on_header_value": lambda d, s, e: state["value"].extend(d[s:e]),
        "on_header_end": header_end,
        "on_part_data": lambda d, s, e: state["data"].extend(d[s:e]),
        "on_part_end": lambda: parts.append({"headers": state["headers"], "data": state["data"]}),
    }
    parser = MultipartParser(body.boundary.encode(), callbacks)
    for chunk in body:
        parser.write(chunk)
    parser.finalize()
    return parts


def test_the_body_has_its_declared_length_and_a_digest_per_file(tmp_path):
    program, data = tmp_path / "model.pte", tmp_path / "weights.ptd"
    program.write_bytes(b"p" * 3000)
    data.write_bytes(bytes(range(256)) * 9000)  # over one read chunk
    files = [FilePart.of("program", program), FilePart.of("data", data)]
    body = UploadBody("m", files, {"replace": "true"})
    assert sum(len(chunk) for chunk in body) == body.length
    assert body.progress.sent == body.length
    name, replace, *uploaded = _parts(body)
    assert bytes(name["data"]) == b"m" and bytes(replace["data"]) == b"true"
    for part, path in zip(uploaded, (program, data)):
        assert bytes(part["data"]) == path.read_bytes()
        digest = base64.b64encode(hashlib.sha256(path.read_bytes()).digest()).decode()
        assert part["headers"][b"content-digest"] == f"sha-256=:{digest}:".encode()
        assert f'filename="{path.name}"'.encode() in part["headers"][b"content-disposition"]


@pytest.mark.parametrize(
    "gpu,platform,compute",
    [("h100", "linux_x86_64", (9, 0)), ("THOR", "linux_aarch64", (11, 0)), ("sm_89", None, (8, 9))],
)
def test_targets(gpu, platform, compute):
    target = parse_target(gpu, None, None)
    assert (target.platform, target.compute) == (platform, compute)
    assert parse_target("8.6", "linux_x86_64", "11.1") == Target(
        None, "linux_x86_64", (8, 6), "11.1"
    )
    with pytest.raises(ValueError, match="named target"):
        parse_target("rtx-something", None, None)


def test_only_the_platform_and_hardware_compatible_gpus_are_certain():
    recorded = {"target_platform": "linux_x86_64", "hardware_compatible": False}
    verdicts = judge("d", recorded, parse_target("h100", None, "11.1"))
    assert [(v.aspect, v.verdict) for v in verdicts] == [
        ("platform", "ok"),
        ("gpu", "unknown"),
        ("tensorrt_version", "unknown"),
    ]
    portable = {"target_platform": "linux_x86_64", "hardware_compatible": True}
    assert [v.verdict for v in judge("d", portable, parse_target("a100", None, None))] == [
        "ok",
        "ok",
    ]
    assert [v.verdict for v in judge("d", portable, parse_target("t4", None, None))] == [
        "ok",
        "mismatch",
    ]
    assert judge("d", {}, Target(platform="linux_x86_64"))[0].verdict == "unknown"
