"""Judging TensorRT delegates against a host other than this one, from what the files record.

The Torch-TensorRT blob records the platform the plan was built for (`target_platform`) and
whether it was built hardware-compatible; nothing else about the plan's target is readable
without TensorRT. The plan itself is TensorRT's own serialized format: which TensorRT release
and which GPU architecture built it are inside it, and only TensorRT reads them (NVIDIA offers no
API or documented header for it). Whether the plan was built version-compatible is in the blob's
`serialized_metadata`, a Python pickle that is never unpickled here. So against another host the
verdict is certain only for the platform, and for the GPU of a hardware-compatible plan; the rest
is reported as not knowable offline rather than guessed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from service.backends.tensorrt.mismatch import PLATFORM_MISMATCH

# Hardware-compatible plans load on Ampere (compute 8.0) and newer discrete GPUs.
HARDWARE_COMPATIBLE_MIN = (8, 0)


@dataclass(frozen=True)
class Target:
    """A host to judge against; None where the user did not say."""

    name: str | None = None
    platform: str | None = None
    compute: tuple[int, int] | None = None
    tensorrt_version: str | None = None

    def describe(self) -> dict:
        return {
            "name": self.name,
            "platform": self.platform,
            "compute_capability": None if self.compute is None else "{}.{}".format(*self.compute),
            "tensorrt_version": self.tensorrt_version,
        }


# Named targets: the platform and GPU of common TensorRT hosts (CUDA's compute capabilities;
# Jetson Thor is 11.0 from CUDA 13 on).
NAMED = {
    "h100": ("linux_x86_64", (9, 0)),
    "h200": ("linux_x86_64", (9, 0)),
    "b200": ("linux_x86_64", (10, 0)),
    "a100": ("linux_x86_64", (8, 0)),
    "l4": ("linux_x86_64", (8, 9)),
    "l40s": ("linux_x86_64", (8, 9)),
    "t4": ("linux_x86_64", (7, 5)),
    "gh200": ("linux_aarch64", (9, 0)),
    "thor": ("linux_aarch64", (11, 0)),
    "orin": ("linux_aarch64", (8, 7)),
}
_COMPUTE = re.compile(r"^(?:sm_?(\d+)(\d)|(\d+)\.(\d+))$", re.IGNORECASE)


def parse_target(gpu: str | None, platform: str | None, tensorrt_version: str | None) -> Target:
    """`gpu` is a named target (h100, thor, ...), `sm_90` or `9.0`; raises ValueError."""
    name, compute = None, None
    if gpu is not None:
        lowered = gpu.strip().lower()
        if lowered in NAMED:
            name = lowered
            named_platform, compute = NAMED[lowered]
            platform = platform or named_platform
        else:
            match = _COMPUTE.match(lowered)
            if match is None:
                raise ValueError(
                    f"--gpu {gpu!r}: give a named target ({', '.join(NAMED)}), "
                    "sm_<major><minor> (sm_90) or <major>.<minor> (9.0)"
                )
            major, minor = (match.group(1), match.group(2)) if match.group(1) else match.group(3, 4)
            compute = (int(major), int(minor))
    return Target(name, platform, compute, tensorrt_version)


@dataclass(frozen=True)
class Verdict:
    """One aspect (platform, gpu, tensorrt_version) of one delegate against the target."""

    where: str
    aspect: str
    verdict: str  # "ok", "mismatch" or "unknown"
    message: str

    def as_dict(self) -> dict:
        return {
            "delegate": self.where,
            "aspect": self.aspect,
            "verdict": self.verdict,
            "message": self.message,
        }

    @property
    def rule(self) -> str:
        return PLATFORM_MISMATCH


def judge(where: str, recorded: dict, target: Target) -> list[Verdict]:
    """The verdicts for one TensorRT delegate whose blob records `recorded`
    (target_platform, hardware_compatible)."""
    verdicts = []
    built_for = recorded.get("target_platform")
    hardware_compatible = bool(recorded.get("hardware_compatible"))
    if target.platform is not None:
        if not built_for:
            verdicts.append(
                Verdict(where, "platform", "unknown", "the blob records no target_platform")
            )
        elif built_for == target.platform:
            verdicts.append(
                Verdict(where, "platform", "ok", f"built for {built_for}, the target's platform")
            )
        else:
            verdicts.append(
                Verdict(
                    where,
                    "platform",
                    "mismatch",
                    f"the TensorRT plan was built for {built_for} (the blob's target_platform) "
                    f"and will not load on {target.platform}; re-export it on the target "
                    "platform (hardware_compatible=True does not cross OS or CPU architecture)",
                )
            )
    if target.compute is not None:
        shown = "{}.{}".format(*target.compute)
        if hardware_compatible and target.compute >= HARDWARE_COMPATIBLE_MIN:
            verdicts.append(
                Verdict(
                    where,
                    "gpu",
                    "ok",
                    f"built hardware_compatible=True, which loads on Ampere and newer (compute "
                    f"{shown} is); a GPU with fewer multiprocessors than the builder's may still "
                    "refuse it",
                )
            )
        elif hardware_compatible:
            verdicts.append(
                Verdict(
                    where,
                    "gpu",
                    "mismatch",
                    f"a hardware-compatible plan needs compute 8.0 or newer; the target has "
                    f"{shown}: re-export it on the target GPU",
                )
            )
        else:
            verdicts.append(
                Verdict(
                    where,
                    "gpu",
                    "unknown",
                    "cannot be known offline: the plan is not hardware-compatible and the GPU "
                    "architecture it was built for is recorded only inside the TensorRT plan, "
                    f"which only TensorRT reads; it loads on compute {shown} only if it was "
                    "built on that architecture",
                )
            )
    if target.tensorrt_version is not None:
        verdicts.append(
            Verdict(
                where,
                "tensorrt_version",
                "unknown",
                "cannot be known offline: the TensorRT release that built the plan is recorded "
                "only inside the TensorRT plan, and whether it was built version_compatible "
                "only in the blob's pickled serialized_metadata (never unpickled here); it "
                f"loads on TensorRT {target.tensorrt_version} if it was built by that release, "
                "or built version_compatible by an earlier one",
            )
        )
    return verdicts
