"""Podman as the container lane's engine: its sandbox settings, local base images, builds, runs.

No registry is reachable from CI, so the images the Dockerfile builds on are made here from
Debian packages (mmdebstrap, then `podman import`): a stand-in for `python:3.11-slim` and one for
NGC's TensorRT image (tests/containers/images/). They are kept in podman's store under
`localhost/etrt-test/...` and re-used by later runs on a machine that keeps that store.

The sandbox settings (runc, cgroupfs, ulimits within the hard limits, chroot isolation for
builds) live in a containers.conf this module writes and names through CONTAINERS_CONF; nothing
user-facing (Dockerfile, compose file) carries them.
"""

from __future__ import annotations

import hashlib
import json
import resource
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from support.server import REPO, free_port

IMAGES = REPO / "tests" / "containers" / "images"
DEBIAN_IMAGE = "localhost/etrt-test/debian:bookworm"
PYTHON_IMAGE = "localhost/etrt-test/python:3.11-slim"
# The machine's own architecture, in Debian's and podman's spelling.
NATIVE_ARCH = "amd64"
# The certificates the host trusts beyond Debian's: a TLS-intercepting proxy's CA lives here, and
# pip inside a build needs it.
HOST_CA_CERTIFICATES = Path("/usr/local/share/ca-certificates")
INSTALL_HINT = "bash .ci/install --test --containers (as root, with apt-get) installs them"
# A container's server listens beyond loopback, so model management needs a token.
ADMIN_TOKEN = "container-lane-admin-token"


@dataclass
class Engine:
    """Podman with this sandbox's settings: every call gets `env`."""

    env: dict
    workdir: Path
    started: list[str] = field(default_factory=list)

    def podman(
        self, *args: str, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess:
        done = subprocess.run(
            ["podman", *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and done.returncode != 0:
            raise AssertionError(
                f"podman {' '.join(args)} exited {done.returncode}:\n{done.stderr[-6000:]}"
            )
        return done

    def image_exists(self, image: str) -> bool:
        return self.podman("image", "exists", image, check=False).returncode == 0

    def image_size(self, image: str) -> int:
        return int(self.podman("image", "inspect", "--format", "{{.Size}}", image).stdout)

    def build(
        self,
        tag: str,
        containerfile: Path,
        context: Path,
        timeout: float = 1800,
        platform: str | None = None,
        **build_args,
    ) -> subprocess.CompletedProcess:
        """`podman build` as a user would run it, plus the sandbox's `--isolation chroot`.

        Docker format, because the OCI image format has no HEALTHCHECK and podman drops it.
        A `platform` (linux/arm64) other than the machine's builds under qemu-user-static.
        Returns the finished process (not checked: refusals are tested too).
        """
        args = ["build", "--format", "docker", "--isolation", "chroot", "-f", str(containerfile)]
        if platform:
            args += ["--platform", platform]
        for name, value in build_args.items():
            args += ["--build-arg", f"{name}={value}"]
        before = self._image_id(tag)
        done = self.podman(*args, "-t", tag, str(context), check=False, timeout=timeout)
        if before and done.returncode == 0 and self._image_id(tag) != before:
            # The image this tag named before, once no tag names it, so that runs on a kept store
            # do not pile them up.
            tags = self.podman("image", "inspect", "--format", "{{.RepoTags}}", before, check=False)
            if tags.returncode == 0 and tags.stdout.strip() == "[]":
                self.podman("rmi", before, check=False)
        return done

    def _image_id(self, image: str) -> str | None:
        done = self.podman("image", "inspect", "--format", "{{.Id}}", image, check=False)
        return done.stdout.strip() if done.returncode == 0 else None

    def run_server(
        self, image: str, volume: str, *server_args: str, http_inside: int = 8000, **env: str
    ) -> Container:
        """A detached server container publishing free loopback ports for HTTP (the container's
        `http_inside`, where the server was told to listen) and gRPC."""
        container = Container(self, f"etrt-test-{free_port()}", free_port(), free_port())
        args = ["run", "-d", "--name", container.name, "-v", f"{volume}:/artifacts"]
        env = {"ETRT_ADMIN_TOKEN": ADMIN_TOKEN, **env}
        args += ["-p", f"127.0.0.1:{container.http_port}:{http_inside}"]
        args += ["-p", f"127.0.0.1:{container.grpc_port}:8001"]
        for name, value in env.items():
            args += ["-e", f"{name}={value}"]
        self.podman(*args, image, *server_args)
        self.started.append(container.name)
        return container

    def remove_started(self) -> None:
        for name in self.started:
            self.podman("rm", "-f", "-t", "5", name, check=False)
        self.started.clear()


@dataclass
class Container:
    engine: Engine
    name: str
    http_port: int
    grpc_port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def client(self, token: str | None = ADMIN_TOKEN) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, timeout=120, headers=headers)

    def logs(self) -> str:
        done = self.engine.podman("logs", self.name, check=False)
        return done.stdout + done.stderr

    def state(self) -> dict:
        return json.loads(self.engine.podman("inspect", self.name).stdout)[0]["State"]

    def wait_ready(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.state()["Running"]:
                raise AssertionError(f"container {self.name} exited:\n{self.logs()}")
            try:
                if httpx.get(f"{self.url}/health/ready", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise AssertionError(f"container {self.name} not ready in {timeout}s:\n{self.logs()}")

    def wait_exit(self, timeout: float = 60) -> int:
        done = self.engine.podman("wait", self.name, timeout=timeout)
        return int(done.stdout.strip().splitlines()[-1])


def containers_conf(path: Path) -> Path:
    """Settings this sandbox needs: runc (crun refuses hybrid cgroups), cgroupfs (no systemd),
    ulimits no higher than the hard limits (root lacks CAP_SYS_RESOURCE to raise them)."""
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    nproc = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    limits = [f"nofile={min(nofile, 65536)}:{min(nofile, 65536)}"]
    limits.append(f"nproc={min(nproc, 32768)}:{min(nproc, 32768)}")
    path.write_text(
        "[containers]\n"
        f"default_ulimits = {json.dumps(limits)}\n"
        "[engine]\n"
        'runtime = "runc"\n'
        'cgroup_manager = "cgroupfs"\n'
        'events_logger = "file"\n'
    )
    return path


def missing_tools() -> list[str]:
    return [tool for tool in ("podman", "buildah", "runc") if shutil.which(tool) is None]


def engine(workdir: Path, base_env: dict) -> Engine:
    env = dict(base_env, CONTAINERS_CONF=str(containers_conf(workdir / "containers.conf")))
    # podman build (also when podman-compose calls it) reads these when no flag says otherwise.
    env.update(BUILDAH_ISOLATION="chroot", BUILDAH_FORMAT="docker")
    return Engine(env, workdir)


def debian_base(engine: Engine, arch: str = NATIVE_ARCH) -> str:
    """Debian bookworm (minbase) from the host's apt sources, trusting the host's extra CAs.

    Another architecture (arm64) is made the same way: mmdebstrap runs its packages' scripts
    through qemu-user-static, which binfmt_misc must have registered (`emulation_missing`).
    """
    image = DEBIAN_IMAGE if arch == NATIVE_ARCH else f"{DEBIAN_IMAGE}-{arch}"
    if engine.image_exists(image):
        return image
    if shutil.which("mmdebstrap") is None:
        raise AssertionError(f"mmdebstrap is needed to make {image}: {INSTALL_HINT}")
    rootfs = engine.workdir / f"debian-rootfs-{arch}.tar"
    hooks = []
    if HOST_CA_CERTIFICATES.is_dir() and any(HOST_CA_CERTIFICATES.iterdir()):
        hooks += ["--customize-hook", f"copy-in {HOST_CA_CERTIFICATES} /usr/local/share"]
    hooks += ["--customize-hook", 'chroot "$1" update-ca-certificates']
    done = subprocess.run(
        ["mmdebstrap", "--variant=minbase", f"--architectures={arch}"]
        + ["--include=ca-certificates", *hooks]
        + ["bookworm", str(rootfs), *_host_apt_sources()],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert done.returncode == 0, f"mmdebstrap ({arch}) failed:\n{done.stderr[-4000:]}"
    engine.podman("import", "--arch", arch, str(rootfs), image, timeout=300)
    rootfs.unlink()
    return image


def _host_apt_sources() -> list[str]:
    """The host's apt source files: mmdebstrap copies each one it is given as a path."""
    files = sorted(Path("/etc/apt/sources.list.d").glob("*.sources"))
    files += sorted(Path("/etc/apt/sources.list.d").glob("*.list"))
    plain = Path("/etc/apt/sources.list")
    if plain.is_file() and plain.read_text().strip():
        files.append(plain)
    return [str(f) for f in files]


def local_image(
    engine: Engine, name: str, containerfile: str, platform: str | None = None, **build_args: str
) -> str:
    """An image from tests/containers/images/, built once and kept in podman's store.

    Its tag names a digest of the recipe (every file there, the platform and the build
    arguments), so a changed recipe is built again instead of a stale image being re-used.
    """
    pins = sorted(build_args.items()) + ([("platform", platform)] if platform else [])
    recipe = hashlib.sha256(json.dumps(pins).encode())
    for path in sorted(IMAGES.iterdir()):
        recipe.update(path.name.encode() + path.read_bytes())
    tag = f"{name}-{recipe.hexdigest()[:12]}"
    if engine.image_exists(tag):
        return tag
    done = engine.build(tag, IMAGES / containerfile, IMAGES, platform=platform, **build_args)
    assert done.returncode == 0, f"building {tag} failed:\n{done.stderr[-6000:]}"
    return tag


def python_base(engine: Engine) -> str:
    """python:3.11-slim where podman has it or can pull it, else the Debian-built stand-in."""
    real = "docker.io/library/python:3.11-slim"
    if engine.image_exists(real):
        return real
    try:
        if engine.podman("pull", "-q", real, check=False, timeout=300).returncode == 0:
            return real
    except subprocess.TimeoutExpired:
        pass
    debian = debian_base(engine)
    return local_image(engine, PYTHON_IMAGE, "python-slim.Containerfile", DEBIAN=debian)


def python_base_for(engine: Engine, arch: str) -> str:
    """The python:3.11-slim stand-in for another architecture, on a Debian base of that
    architecture (no pull: the one name would hold either architecture's image)."""
    debian = debian_base(engine, arch)
    return local_image(
        engine,
        f"{PYTHON_IMAGE}-{arch}",
        "python-slim.Containerfile",
        platform=f"linux/{arch}",
        DEBIAN=debian,
    )


def emulation_missing(arch: str) -> str | None:
    """Why binaries of `arch` cannot run here, or None: qemu-user-static registered with
    binfmt_misc (with the F flag, so it works inside containers and chroots)."""
    qemu = {"arm64": "aarch64"}[arch]
    entry = Path("/proc/sys/fs/binfmt_misc") / f"qemu-{qemu}"
    if not entry.exists():
        return f"qemu-{qemu} is not registered with binfmt_misc: {INSTALL_HINT}"
    lines = entry.read_text().splitlines()
    if "enabled" not in lines:
        return f"qemu-{qemu} is registered but disabled: update-binfmts --enable qemu-{qemu}"
    if not any(line.startswith("flags:") and "F" in line for line in lines):
        return f"qemu-{qemu} is registered without the F flag: use Debian's qemu-user-static"
    return None
