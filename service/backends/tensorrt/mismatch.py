"""Tells a plan built for another TensorRT release or GPU/platform from a broken plan.

A TensorRT plan deserializes only with the TensorRT release that built it (unless it was built
version-compatible) and only on the GPU architecture and OS/CPU platform it was built for (unless
it was built hardware-compatible). Those refusals are the common ones after an upgrade or a move
to other hardware, and their fix is not "the file is broken" but "export again with the matching
TensorRT, or on the target": so they get their own rule ids and say which TensorRT this server
runs. TensorRT reports them only as log text, so the classification reads that text. The
wordings below are TensorRT's own: those of TensorRT 11 as found in the lean runtime 11.4 library
(libnvinfer_lean.so.11), and the 8.x-10.x forms users reported, kept because the plan's builder
may be old even where the server is not.
"""

from __future__ import annotations

import platform
import re
import sys

from service import rules

PLAN_INVALID = rules.TENSORRT_PLAN_INVALID
VERSION_MISMATCH = rules.TENSORRT_VERSION_MISMATCH
PLATFORM_MISMATCH = rules.TENSORRT_PLATFORM_MISMATCH

_VERSION_SIGNS = re.compile(
    # "The engine plan file is not compatible with this version of TensorRT, expecting library
    #  version X got Y, please rebuild." (API Usage Error, code 6)
    r"not compatible with this version of TensorRT"
    # "Serialization assertion stdVersionRead == kSERIALIZATION_VERSION failed.Version tag does
    #  not match. Note: Current Version: 240, Serialized Engine Version: 239" (10.x), and the
    #  serializationVersion / safeSerializationVersion / verifyHeader forms of 7.x-8.x.
    r"|Version tag does not match"
    r"|kSERIALIZATION_VERSION",
    re.IGNORECASE,
)

_PLATFORM_SIGNS = re.compile(
    # "The engine plan file is generated on an incompatible device, expecting compute 9.0 got
    #  compute 8.9, please rebuild."
    r"generated on an incompatible device"
    # "Serialization assertion header.pad == expectedPlatformTag failed.Platform specific tag
    #  mismatch detected. TensorRT plan files are only supported on the target runtime
    #  platform they were created on."
    r"|Platform specific tag mismatch"
    r"|expectedPlatformTag"
    # "The current device is not compatible with this hardware-compatible engine. Expected compute
    #  capability >= 8.0 but got compute capability = 7.5. Please rebuild the engine."
    r"|not compatible with this hardware-compatible engine"
    # "The current device only supports 78 multiprocessors but the engine file requires 132"
    r"|multiprocessors but the engine file requires",
    re.IGNORECASE,
)


def classify_refusal(reason: str) -> str:
    """The rule id for TensorRT's reason for refusing a plan.

    A plan both from another release and for another device is reported as a version mismatch:
    TensorRT checks the release first, and rebuilding with the right release on the target
    fixes both.
    """
    if _VERSION_SIGNS.search(reason):
        return VERSION_MISMATCH
    if _PLATFORM_SIGNS.search(reason):
        return PLATFORM_MISMATCH
    return PLAN_INVALID


def host_platform() -> str:
    """This host in Torch-TensorRT's target_platform spelling (e.g. linux_x86_64)."""
    return f"{sys.platform}_{platform.machine().lower()}"


def _release(version: str) -> str:
    """major.minor: the part of a TensorRT version a plan's exporter has to match."""
    return ".".join(version.split(".")[:2])


def refusal_message(reason: str, tensorrt_version: str | None, blob: dict) -> tuple[str, str]:
    """(rule id, message) for a plan TensorRT refused with `reason`.

    `tensorrt_version` is that of the TensorRT that refused it (None if unknown); `blob` is the
    delegate's parsed metadata, whose target_platform/hardware_compatible say what the exporter
    built for. TensorRT's own reason always ends the message, so nothing it said is lost.
    """
    rule = classify_refusal(reason)
    if rule == PLAN_INVALID:
        return rule, reason
    runs = (
        f"TensorRT {tensorrt_version}"
        if tensorrt_version
        else "a TensorRT whose version it cannot tell"
    )
    if rule == VERSION_MISMATCH:
        release = (
            f"TensorRT {_release(tensorrt_version)}"
            if tensorrt_version
            else "the TensorRT this server runs"
        )
        return rule, (
            f"the TensorRT plan was built by another TensorRT release than the one this server "
            f"runs ({runs}); re-export it with the Torch-TensorRT release built on {release}, "
            f"or run the server image whose TensorRT matches the exporter's; a plan "
            f"built with version_compatible=True also loads on later TensorRT releases. "
            f"TensorRT said: {reason}"
        )
    hardware_compatible = bool(blob.get("hardware_compatible"))
    # A plan already built hardware-compatible that still does not fit this GPU (older than
    # Ampere, or fewer multiprocessors) can only be rebuilt on the target.
    alternative = (
        ""
        if hardware_compatible
        else ", or with hardware_compatible=True to load on "
        "any Ampere or newer discrete GPU of the same platform"
    )
    return rule, (
        f"the TensorRT plan was built for another GPU or platform than this server's (this host "
        f"is {host_platform()} with {runs}; the blob records target_platform "
        f"{blob.get('target_platform')!r}, hardware_compatible {hardware_compatible}); re-export "
        f"it on the target GPU and platform{alternative}. TensorRT said: {reason}"
    )
