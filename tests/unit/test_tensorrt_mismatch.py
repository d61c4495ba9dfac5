"""Which TensorRT refusals are a release or platform mismatch, on TensorRT's own wordings.

The reasons below are TensorRT's: the 11.x texts as they stand in the lean runtime 11.4 library
(libnvinfer_lean.so.11: its text fragments, with example numbers filled in), the older ones as
TensorRT logged them in public reports (NVIDIA/TensorRT, pytorch/TensorRT and downstream issue
trackers), each after the prefix the shipped provider puts before what TensorRT logged.
"""

import pytest

from service.backends.tensorrt.mismatch import (
    PLAN_INVALID,
    PLATFORM_MISMATCH,
    VERSION_MISMATCH,
    classify_refusal,
    host_platform,
    refusal_message,
)

PREFIX = "TensorRT could not deserialize the plan (4096 bytes) on CUDA device 0: "
DESERIALIZE_FAILED = (
    "IRuntime::deserializeCudaEngine: Error Code 4: Internal Error (Engine deserialization failed.)"
)

# TensorRT 11
PLATFORM_TAG_11 = (
    "IRuntime::deserializeCudaEngine: Error Code 1: Serialization (Serialization "
    "assertion header.pad == expectedPlatformTag failed.Platform specific tag "
    "mismatch detected. TensorRT plan files are only supported on the target "
    "runtime platform they were created on.)"
)
HARDWARE_COMPATIBLE_11 = (
    "The current device is not compatible with this hardware-compatible "
    "engine. Expected compute capability >= 8.0 but got compute "
    "capability = 7.5. Please rebuild the engine."
)
MULTIPROCESSORS_11 = (
    "The current device only supports 78 multiprocessors but the engine file requires 132"
)
MAGIC_11_FULL = (
    "IRuntime::deserializeCudaEngine: Error Code 1: Serialization (Serialization "
    "assertion header.magicTag == kEXPECTED_MAGIC_TAG failed.). Check that the engine "
    "was not created using safety runtime, same OS was used and version "
    "compatibility parameters were set accordingly and that it is a TRT engine file."
)
HOST_CODE_11 = (
    "Cannot deserialize engine with lean runtime since "
    "IRuntime::getEngineHostCodeAllowed() is false."
)
# TensorRT 10 (IRuntime-prefixed, one line per error)
LIBRARY_VERSION_10 = (
    "IRuntime::deserializeCudaEngine: Error Code 6: API Usage Error (The engine "
    "plan file is not compatible with this version of TensorRT, expecting "
    "library version 11.1.0.106 got 10.13.3.9, please rebuild.)"
)
SERIALIZATION_VERSION_10 = (
    "IRuntime::deserializeCudaEngine: Error Code 1: Serialization "
    "(Serialization assertion stdVersionRead == kSERIALIZATION_VERSION "
    "failed.Version tag does not match. Note: Current Version: 240, "
    "Serialized Engine Version: 239)"
)
COMPUTE_10 = (
    "IRuntime::deserializeCudaEngine: Error Code 6: API Usage Error (The engine plan "
    "file is generated on an incompatible device, expecting compute 9.0 got compute "
    "8.9, please rebuild.)"
)
PLATFORM_TAG_10 = (
    "IRuntime::deserializeCudaEngine: Error Code 1: Serialization (Serialization "
    "assertion plan->header.pad == expectedPlatformTag failed.Platform specific tag "
    "mismatch detected. TensorRT plan files are only supported on the target "
    "runtime platform they were created on.)"
)
# TensorRT 8 (numbered lines, followed by the generic deserialization failure)
LIBRARY_VERSION_8 = (
    "6: The engine plan file is not compatible with this version of TensorRT, "
    "expecting library version 8.2.4 got 8.2.3, please rebuild."
)
SERIALIZATION_VERSION_8 = (
    "1: [stdArchiveReader.cpp::StdArchiveReader::40] Error Code 1: "
    "Serialization (Serialization assertion stdVersionRead == "
    "serializationVersion failed.Version tag does not match. Note: Current "
    "Version: 213, Serialized Engine Version: 232)"
)
COMPUTE_8 = (
    "6: The engine plan file is generated on an incompatible device, expecting compute "
    "8.6 got compute 7.5, please rebuild."
)
# Not a mismatch: not a plan at all, or damaged, or a library missing on this host
MAGIC_11 = (
    "IRuntime::deserializeCudaEngine: Error Code 1: Serialization (Serialization "
    "assertion header.magicTag == kEXPECTED_MAGIC_TAG failed.)"
)
MAGIC_8 = (
    "1: [stdArchiveReader.cpp::StdArchiveReader::32] Error Code 1: Serialization "
    "(Serialization assertion magicTagRead == kMAGIC_TAG failed.Magic tag does not match)"
)
NVRTC_8 = (
    "9: The engine plan file has a layer that utilizes loop API or boolean tensors, but "
    "the current platform does not support these layers due to mismatch of libnvrtc "
    "version."
)

BLOB = {"target_platform": "linux_aarch64", "hardware_compatible": False}


@pytest.mark.parametrize(
    "lines, rule",
    [
        ([LIBRARY_VERSION_10], VERSION_MISMATCH),
        ([SERIALIZATION_VERSION_10], VERSION_MISMATCH),
        ([LIBRARY_VERSION_8, DESERIALIZE_FAILED], VERSION_MISMATCH),
        ([SERIALIZATION_VERSION_8, DESERIALIZE_FAILED], VERSION_MISMATCH),
        ([COMPUTE_10], PLATFORM_MISMATCH),
        ([COMPUTE_8, DESERIALIZE_FAILED], PLATFORM_MISMATCH),
        ([PLATFORM_TAG_10], PLATFORM_MISMATCH),
        ([PLATFORM_TAG_11], PLATFORM_MISMATCH),
        ([HARDWARE_COMPATIBLE_11], PLATFORM_MISMATCH),
        ([MULTIPROCESSORS_11], PLATFORM_MISMATCH),
        ([MAGIC_11_FULL], PLAN_INVALID),
        ([HOST_CODE_11], PLAN_INVALID),
        ([MAGIC_11], PLAN_INVALID),
        ([MAGIC_8, DESERIALIZE_FAILED], PLAN_INVALID),
        ([NVRTC_8, DESERIALIZE_FAILED], PLAN_INVALID),
        ([], PLAN_INVALID),
    ],
)
def test_refusals_are_classified_by_tensorrts_wording(lines, rule):
    assert classify_refusal(PREFIX + "; ".join(lines)) == rule


def test_a_plan_from_another_release_for_another_device_is_a_version_mismatch():
    # TensorRT checks the release first; rebuilding with the right one on the target fixes both.
    assert classify_refusal(PREFIX + f"{COMPUTE_10}; {LIBRARY_VERSION_10}") == VERSION_MISMATCH


def test_a_version_mismatch_names_this_servers_tensorrt_and_what_to_export_with():
    reason = PREFIX + SERIALIZATION_VERSION_10
    rule, message = refusal_message(reason, "11.1.0.106", BLOB)
    assert rule == VERSION_MISMATCH
    assert message == (
        "the TensorRT plan was built by another TensorRT release than the one this server runs "
        "(TensorRT 11.1.0.106); re-export it with the Torch-TensorRT release built on TensorRT "
        "11.1, or run the server image whose TensorRT matches the exporter's; a plan built with "
        f"version_compatible=True also loads on later TensorRT releases. TensorRT said: {reason}"
    )


def test_a_platform_mismatch_names_the_host_the_blobs_target_and_hardware_compatibility():
    reason = PREFIX + PLATFORM_TAG_10
    rule, message = refusal_message(reason, "10.13.3.9", BLOB)
    assert rule == PLATFORM_MISMATCH
    assert message == (
        f"the TensorRT plan was built for another GPU or platform than this server's (this host "
        f"is {host_platform()} with TensorRT 10.13.3.9; the blob records target_platform "
        f"'linux_aarch64', hardware_compatible False); re-export it on the target GPU and "
        f"platform, or with hardware_compatible=True to load on any Ampere or newer discrete GPU "
        f"of the same platform. TensorRT said: {reason}"
    )


def test_a_hardware_compatible_plan_that_does_not_fit_is_only_told_to_rebuild_on_the_target():
    blob = {"target_platform": "linux_x86_64", "hardware_compatible": True}
    rule, message = refusal_message(PREFIX + HARDWARE_COMPATIBLE_11, "11.1.0.106", blob)
    assert rule == PLATFORM_MISMATCH
    assert (
        "hardware_compatible True); re-export it on the target GPU and platform. TensorRT said: "
        in message
    )
    assert "hardware_compatible=True" not in message


def test_without_a_known_version_the_message_says_so():
    rule, message = refusal_message(PREFIX + LIBRARY_VERSION_10, None, BLOB)
    assert rule == VERSION_MISMATCH
    assert "(a TensorRT whose version it cannot tell)" in message
    assert "built on the TensorRT this server runs," in message


def test_other_refusals_keep_tensorrts_reason_unchanged():
    reason = PREFIX + MAGIC_11
    assert refusal_message(reason, "11.1.0.106", BLOB) == (PLAN_INVALID, reason)


def test_a_platform_mismatch_quotes_this_hosts_gpu_when_cuda_python_sees_one(monkeypatch):
    monkeypatch.setattr(
        "service.cuda.describe", lambda index=0: "NVIDIA H200 (compute capability 9.0)"
    )
    rule, message = refusal_message(PREFIX + PLATFORM_TAG_10, "10.13.3.9", BLOB)
    assert rule == PLATFORM_MISMATCH
    assert (
        f"(this host is {host_platform()} with TensorRT 10.13.3.9 on NVIDIA H200 (compute "
        f"capability 9.0); the blob records" in message
    )
