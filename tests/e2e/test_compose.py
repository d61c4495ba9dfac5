"""docker-compose.yml as Docker Compose itself resolves it (`config`; no Docker engine needed).

Each profile must start exactly one server with its own volume, and every published port must
bind loopback unless the operator names an address: two servers on one store, or an upload API
published on every interface, is what this file once did.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
PROFILES = ("cpu", "gpu", "jetson")


def _compose() -> tuple[list[str], int] | None:
    """The compose command and its major version: the v2 plugin, else a standalone binary."""
    candidates = []
    if shutil.which("docker"):
        candidates.append(["docker", "compose"])
    if shutil.which("docker-compose"):
        candidates.append(["docker-compose"])
    for command in candidates:
        done = subprocess.run([*command, "version", "--short"], capture_output=True, text=True)
        if done.returncode == 0 and done.stdout.strip():
            return command, int(done.stdout.strip().lstrip("v").split(".")[0])
    return None


COMPOSE = _compose()
needs_compose = pytest.mark.skipif(
    COMPOSE is None, reason="no Docker Compose here (neither `docker compose` nor `docker-compose`)"
)


def _run(*args: str, env: dict | None = None) -> str:
    # The test checks the committed defaults: nothing from the caller's shell may change them.
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("ETRT_", "COMPOSE_"))}
    clean.update(env or {})
    done = subprocess.run(
        [*COMPOSE[0], "-f", str(REPO / "docker-compose.yml"), *args],
        cwd=REPO,
        env=clean,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, f"compose {' '.join(args)} failed:\n{done.stderr}"
    return done.stdout


def _active(profile: str | None, env: dict | None = None) -> tuple[set[str], dict]:
    """The services `up` would start with this profile (None: no --profile), and the config."""
    flags = ["--profile", profile] if profile else []
    config = yaml.safe_load(_run(*flags, "config", env=env))
    if COMPOSE[1] >= 2:
        names = set(_run(*flags, "config", "--services", env=env).split())
    else:
        # Compose v1 lists every service whatever the profiles; apply the spec's rule (a service
        # is started when it has no profiles or one of them is active), with COMPOSE_PROFILES
        # from the committed .env when no --profile is given, as v1 does.
        active = {profile} if profile else set(_dotenv().get("COMPOSE_PROFILES", "").split(","))
        names = {
            name
            for name, service in config["services"].items()
            if not service.get("profiles") or active & set(service["profiles"])
        }
    return names, config


def _dotenv() -> dict:
    lines = (REPO / ".env").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line and not line.startswith("#"))


def _ports(service: dict) -> list[tuple[str, str, int]]:
    """(host address, published port, container port) for each mapping, v1 or v2 output."""
    ports = []
    for port in service.get("ports", []):
        if isinstance(port, dict):
            ports.append((port.get("host_ip", ""), str(port["published"]), int(port["target"])))
        else:
            host_ip, published, target = str(port).split("/")[0].rsplit(":", 2)
            ports.append((host_ip, published, int(target)))
    return ports


def _volumes(service: dict) -> list[tuple[str, str]]:
    """(source, target) for each mount, v1 or v2 output."""
    mounts = []
    for volume in service.get("volumes", []):
        if isinstance(volume, dict):
            mounts.append((volume["source"], volume["target"]))
        else:
            source, target = volume.split(":")[:2]
            mounts.append((source, target))
    return mounts


@needs_compose
def test_without_a_profile_only_the_cpu_server_starts():
    names, _ = _active(None)
    assert names == {"cpu"}


@needs_compose
@pytest.mark.parametrize("profile", PROFILES)
def test_each_profile_starts_one_server_with_its_own_volume_on_loopback(profile):
    names, config = _active(profile)
    assert names == {profile}, f"--profile {profile} would start {sorted(names)}"
    service = config["services"][profile]
    assert _volumes(service) == [(f"{profile}-artifacts", "/artifacts")]
    assert sorted(_ports(service)) == [("127.0.0.1", "8000", 8000), ("127.0.0.1", "8001", 8001)]
    assert service["environment"]["ETRT_ARTIFACTS"] == "/artifacts"
    # Loading a store of large engines takes minutes before readiness answers.
    assert service["healthcheck"]["start_period"] in ("10m", "10m0s")


@needs_compose
def test_no_two_profiles_share_a_volume():
    sources = [
        source
        for profile in PROFILES
        for source, _ in _volumes(_active(profile)[1]["services"][profile])
    ]
    assert len(sources) == len(set(sources)) == len(PROFILES)


@needs_compose
def test_the_operator_chooses_the_address_and_ports():
    env = {
        "ETRT_BIND_ADDRESS": "192.0.2.10",
        "ETRT_PUBLISH_HTTP_PORT": "18000",
        "ETRT_PUBLISH_GRPC_PORT": "18001",
    }
    _, config = _active("gpu", env=env)
    assert sorted(_ports(config["services"]["gpu"])) == [
        ("192.0.2.10", "18000", 8000),
        ("192.0.2.10", "18001", 8001),
    ]


@needs_compose
def test_gpu_reserves_nvidia_gpus_on_a_pinned_tensorrt_image():
    _, config = _active("gpu")
    gpu = config["services"]["gpu"]
    devices = gpu["deploy"]["resources"]["reservations"]["devices"]
    assert [(d["driver"], d["capabilities"]) for d in devices] == [("nvidia", ["gpu"])]
    assert gpu["platform"] == "linux/amd64"
    assert gpu["build"]["args"] == {
        "BASE_IMAGE": "nvcr.io/nvidia/tensorrt:26.07-py3",
        "ETRT_TENSORRT_VERSION": "11.1",
    }


@needs_compose
def test_jetson_uses_the_nvidia_runtime_on_arm64():
    _, config = _active("jetson")
    jetson = config["services"]["jetson"]
    assert jetson["runtime"] == "nvidia"
    assert jetson["platform"] == "linux/arm64"
    assert jetson["build"]["args"]["ETRT_TENSORRT_VERSION"] == "11.1"
    assert "deploy" not in jetson


def test_build_context_leaves_out_local_environments_and_stores():
    patterns = {
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    for needed in (".git", ".venv", "build", "artifacts", ".whl", "**/__pycache__", ".env"):
        assert needed in patterns, f".dockerignore does not exclude {needed}"
