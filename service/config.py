"""Server settings from command-line flags, falling back to ETRT_* environment variables.

Flags win over the environment so that a container image can carry defaults in its environment
while an operator still overrides one setting on the command line. One variable is not ours:
`PORT`, which Knative (and other serverless platforms) set to the one port they route to. It comes
between `--port` and `ETRT_PORT`: the image sets ETRT_PORT as a default, and a platform that sets
PORT sends its traffic nowhere else.
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import os
import pickle
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from service.inline_policy import InlinePolicy

MiB = 1024 * 1024
# The delegate backends `--backends` may name, as names only: service.backends.registry holds
# them (and checks it holds exactly these), so settings import nothing above them.
BACKEND_NAMES = ("tensorrt", "xnnpack")


def default_workers(cores: int | None = None) -> int:
    """One front per core up to 8 on a host of at least 4 cores; else 1 (the engine and the
    protocol front then share the few cores there are)."""
    cores = cores or os.cpu_count() or 1
    return min(cores, 8) if cores >= 4 else 1


@dataclass(frozen=True)
class Settings:
    host: str = "127.0.0.1"
    port: int = 8000
    # Protocol front processes sharing the ports, over one engine process (service/supervisor.py).
    workers: int = 1
    # Shared memory per front for the tensors of its requests in flight (service/shared/arena.py);
    # pinned for the GPU on CUDA hosts, so it is committed memory there.
    arena_bytes: int = 512 * MiB
    # Request bodies still arriving may hold this much of a front's arena per client address
    # (service/front/protocols/arriving.py); a body's share grows with the bytes that came.
    max_client_arriving_bytes: int = 256 * MiB
    # nginx's client_header_timeout and client_body_timeout
    # (service/front/protocols/read_timeouts.py).
    header_timeout_s: float = 60.0
    body_timeout_s: float = 60.0
    # Open connections per front (uvicorn's limit_concurrency: past it, 503).
    max_connections: int = 1000
    # How far below the engine's CPU priority the fronts run (nice; service/front/__main__.py
    # says why).
    front_nice: int = 5
    # Open Inference Protocol over gRPC, on the same host; 0 serves no gRPC.
    grpc_port: int = 8001
    # gRPC (h2c) on the HTTP port too: a connection opening with HTTP/2's preface is relayed to
    # the front's gRPC server (service/front/protocols/h2_relay.py). Knative routes one port.
    one_port: bool = False
    # Seconds the requests in flight get to finish after SIGTERM (service/front/draining.py);
    # Kubernetes kills the pod 30 s after SIGTERM unless terminationGracePeriodSeconds says more.
    shutdown_grace_s: float = 25.0
    artifacts: Path = Path("artifacts")
    max_program_bytes: int = 2048 * MiB
    max_data_bytes: int = 8192 * MiB
    max_upload_bytes: int = 16384 * MiB
    max_data_files: int = 16
    max_infer_bytes: int = 256 * MiB
    # JSON tensor bodies hold every number as text and then as a Python object while decoded:
    # they get a tighter limit of their own (binary tensor bodies only max_infer_bytes).
    max_json_bytes: int = 64 * MiB
    # Method instances per model unless its config says; None: automatic (dataplane/instances.py).
    instances_per_model: int | None = None
    # Methods whose recent executes took less than this run on the event loop (model_pool.py).
    inline_execute_us: float = InlinePolicy.execute_us
    infer_threads: int = 32
    # Intra-op parallelism: ExecuTorch's kernels share one process-wide thread pool that runs one
    # parallel region at a time, so with it, concurrent requests wait on each other (measured:
    # 2 threads gave 0.86x one thread's throughput, 2.19x without it; bench/bench_host.py).
    kernel_threadpool: bool = False
    load_check_timeout_s: float = 120.0
    max_concurrent_ingests: int = 2
    allow_unverified_plans: bool = False
    # TensorRT: every execution context takes its activation memory from one shared buffer per
    # device, sized to the largest, instead of holding its own (executes then take turns).
    tensorrt_shared_scratch: bool = False
    # Triton's shared memory extensions (service/shm/): clients may register regions only when
    # allowed, and at most this many at once (each holds a mapping in the engine).
    allow_client_shm: bool = False
    shm_max_regions: int = 64
    # The delegate backends served (service.backends.registry): each registers its native library
    # with the host, in the server and in every ingest check child, and brings its ingest check
    # and metrics. TensorRT needs no TensorRT or GPU to start, so a CPU host serves CPU and
    # XNNPACK programs and refuses (or stores unverified) TensorRT ones.
    backends: tuple[str, ...] = BACKEND_NAMES
    # When set, these "module:function" callables register the backends instead of the enabled
    # backends' own setups (tests install stand-ins this way); the backends' checks still apply.
    backend_setup: tuple[str, ...] | None = None
    # Read-only model directories ingested at start (service.ingest.model_dirs); with model_name,
    # the one directory is itself the model's folder (KServe's /mnt/models).
    model_dirs: tuple[Path, ...] = ()
    model_name: str | None = None
    log_level: str = "info"
    # One log line per HTTP request and per inference: off by default, since at full load on a
    # small program it costs more than the inference (issue 10's measurements).
    access_log: bool = False
    # Bearer tokens (service/auth.py): files here, or ETRT_ADMIN_TOKEN / ETRT_INFER_TOKEN.
    admin_token_file: Path | None = None
    infer_token_file: Path | None = None
    metrics_auth: str = "none"
    # How old a /metrics page a front with requests in flight may answer from the engine's last
    # render instead of asking (service/shared/metrics_snapshot.py); 0: every scrape asks.
    metrics_max_age_ms: float = 250.0
    # Triton's GPU gauges (service/gpu_gauges.py) from NVML, where NVML is present.
    gpu_metrics: bool = True
    # A model blamed for poisoning the GPU context this many times within the window is not
    # loaded again until a load or a redeploy (service/dataplane/gpu_faults.py).
    gpu_fault_quarantine_count: int = 3
    gpu_fault_quarantine_window_s: float = 600.0


# The words a boolean setting or form field may be given as (flags, env vars, 'replace'), and
# how messages list them, so that a refusal names every word that would have been taken.
TRUE_WORDS = frozenset({"1", "true", "yes", "on"})
FALSE_WORDS = frozenset({"0", "false", "no", "off", ""})
BOOLEAN_WORDS = "true/false, 1/0, yes/no, on/off"
# Levels every process's logging (and uvicorn's) knows by name.
LOG_LEVELS = ("critical", "error", "warning", "info", "debug")
# Size suffixes: powers of 1024, as the defaults are written (512M is 512 MiB).
_SIZE = re.compile(r"(\d+)\s*(?:([kmgt])(?:i?b)?|b)?", re.IGNORECASE)
_SIZE_UNITS = {None: 1, "k": 1024, "m": MiB, "g": 1024 * MiB, "t": 1024 * 1024 * MiB}


def _bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in TRUE_WORDS:
        return True
    if lowered in FALSE_WORDS:
        return False
    raise argparse.ArgumentTypeError(f"expected a boolean ({BOOLEAN_WORDS}), got {text!r}")


def _size(text: str) -> int:
    match = _SIZE.fullmatch(text.strip())
    if match is None:
        raise argparse.ArgumentTypeError(
            f"expected a size: bytes, or a number with K, M, G or T (powers of 1024: 512M, 1G), "
            f"got {text!r}"
        )
    unit = match.group(2).lower() if match.group(2) else None
    return int(match.group(1)) * _SIZE_UNITS[unit]


def show_size(value: int) -> str:
    """A byte count as the largest whole unit _size reads back (512M, 16G), for --help."""
    for suffix, unit in (("T", 1024 * 1024 * MiB), ("G", 1024 * MiB), ("M", MiB), ("K", 1024)):
        if value % unit == 0:
            return f"{value // unit}{suffix}"
    return str(value)


def _log_level(text: str) -> str:
    if text.strip().lower() not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(f"expected one of {', '.join(LOG_LEVELS)}, got {text!r}")
    return text.strip().lower()


def _metrics_auth(text: str) -> str:
    if text.strip().lower() not in ("none", "infer"):
        raise argparse.ArgumentTypeError(f"expected none or infer, got {text!r}")
    return text.strip().lower()


def _list(text: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in text.split(",") if item.strip())


def _paths(text: str) -> tuple[Path, ...]:
    return tuple(Path(item) for item in _list(text))


# (flag, env var, settings attribute, converter, help)
_OPTIONS = (
    ("--host", "ETRT_HOST", "host", str, "address to listen on"),
    (
        "--port",
        "ETRT_PORT",
        "port",
        int,
        "TCP port (PORT, which Knative sets, is read before ETRT_PORT)",
    ),
    (
        "--workers",
        "ETRT_WORKERS",
        "workers",
        int,
        "protocol front processes sharing the ports over one engine process",
    ),
    (
        "--arena-bytes",
        "ETRT_ARENA_BYTES",
        "arena_bytes",
        _size,
        "shared memory per front process for the tensors of requests in flight (pinned on CUDA "
        "hosts); a request needing more is refused with 413",
    ),
    (
        "--max-client-arriving-bytes",
        "ETRT_MAX_CLIENT_ARRIVING_BYTES",
        "max_client_arriving_bytes",
        _size,
        "arena bytes the request bodies still arriving from one client address may hold per "
        "front; past it that client's next body gets 503",
    ),
    (
        "--header-timeout",
        "ETRT_HEADER_TIMEOUT",
        "header_timeout_s",
        float,
        "seconds a request's head may take to arrive whole; then 408 and close",
    ),
    (
        "--body-timeout",
        "ETRT_BODY_TIMEOUT",
        "body_timeout_s",
        float,
        "seconds a request's body may go without progress; then 408, its memory "
        "freed and the connection closed",
    ),
    (
        "--max-connections",
        "ETRT_MAX_CONNECTIONS",
        "max_connections",
        int,
        "open HTTP connections (and requests in progress) per front process; past it, 503",
    ),
    (
        "--grpc-port",
        "ETRT_GRPC_PORT",
        "grpc_port",
        int,
        "TCP port of the gRPC inference service (0: no gRPC)",
    ),
    (
        "--one-port",
        "ETRT_ONE_PORT",
        "one_port",
        _bool,
        "serve gRPC (h2c) on the HTTP port too, told apart by HTTP/2's connection preface",
    ),
    (
        "--shutdown-grace",
        "ETRT_SHUTDOWN_GRACE",
        "shutdown_grace_s",
        float,
        "seconds requests in flight get to finish after SIGTERM (readiness is false at once and "
        "new requests get 503); then they are cancelled",
    ),
    ("--artifacts", "ETRT_ARTIFACTS", "artifacts", Path, "artifacts root (models + registry)"),
    (
        "--max-program-bytes",
        "ETRT_MAX_PROGRAM_BYTES",
        "max_program_bytes",
        _size,
        "largest accepted .pte",
    ),
    (
        "--max-data-bytes",
        "ETRT_MAX_DATA_BYTES",
        "max_data_bytes",
        _size,
        "largest accepted single .ptd",
    ),
    (
        "--max-upload-bytes",
        "ETRT_MAX_UPLOAD_BYTES",
        "max_upload_bytes",
        _size,
        "largest accepted request body",
    ),
    (
        "--max-data-files",
        "ETRT_MAX_DATA_FILES",
        "max_data_files",
        int,
        "most .ptd files in one upload",
    ),
    (
        "--max-infer-bytes",
        "ETRT_MAX_INFER_BYTES",
        "max_infer_bytes",
        _size,
        "largest accepted /infer request body",
    ),
    (
        "--max-json-bytes",
        "ETRT_MAX_JSON_BYTES",
        "max_json_bytes",
        _size,
        "largest accepted JSON inference body (native /infer, v2 JSON)",
    ),
    (
        "--front-nice",
        "ETRT_FRONT_NICE",
        "front_nice",
        int,
        "how much lower than the engine's the fronts' CPU priority is (nice increment, 0-19): "
        "under overload the engine's executes get the cores before the fronts' refusals",
    ),
    (
        "--inline-execute-us",
        "ETRT_INLINE_EXECUTE_US",
        "inline_execute_us",
        float,
        "methods whose recent executes took less than this many microseconds run on the event "
        "loop instead of a worker thread (0: always a thread)",
    ),
    (
        "--instances",
        "ETRT_INSTANCES",
        "instances_per_model",
        int,
        "method instances per model (concurrent requests per method); default automatic: one "
        "per front for a small CPU program (at most 16 MiB of files and 16 MiB planned per "
        "instance), else 2",
    ),
    (
        "--infer-threads",
        "ETRT_INFER_THREADS",
        "infer_threads",
        int,
        "worker threads running inferences (the engine's event loop's, and as many of its "
        "native lane's)",
    ),
    (
        "--kernel-threadpool",
        "ETRT_KERNEL_THREADPOOL",
        "kernel_threadpool",
        _bool,
        "let CPU kernels use ExecuTorch's shared thread pool (faster single requests on large "
        "CPU ops, but concurrent requests then serialize)",
    ),
    (
        "--max-concurrent-ingests",
        "ETRT_MAX_CONCURRENT_INGESTS",
        "max_concurrent_ingests",
        int,
        "uploads checked at once (each may run an isolated load check); more wait their turn",
    ),
    (
        "--load-check-timeout",
        "ETRT_LOAD_CHECK_TIMEOUT",
        "load_check_timeout_s",
        float,
        "seconds the isolated load check may take",
    ),
    (
        "--allow-unverified-plans",
        "ETRT_ALLOW_UNVERIFIED_PLANS",
        "allow_unverified_plans",
        _bool,
        "accept delegate plans the ingest checks cannot verify",
    ),
    (
        "--tensorrt-shared-scratch",
        "ETRT_TENSORRT_SHARED_SCRATCH",
        "tensorrt_shared_scratch",
        _bool,
        "TensorRT execution contexts share one activation buffer per GPU, sized to the largest "
        "(saves the sum of the others; their executes on a GPU then run one at a time)",
    ),
    (
        "--allow-client-shm",
        "ETRT_ALLOW_CLIENT_SHM",
        "allow_client_shm",
        _bool,
        "let clients on this host register system and CUDA shared memory regions for tensors "
        "(Triton's shared memory extensions)",
    ),
    (
        "--shm-max-regions",
        "ETRT_SHM_MAX_REGIONS",
        "shm_max_regions",
        int,
        "shared memory regions clients may hold registered at once",
    ),
    (
        "--backends",
        "ETRT_BACKENDS",
        "backends",
        _list,
        "comma-separated delegate backends to serve: tensorrt, xnnpack",
    ),
    (
        "--backend-setup",
        "ETRT_BACKEND_SETUP",
        "backend_setup",
        _list,
        "comma-separated module:function callables registering the backends instead of their own "
        "setups (an empty value registers none)",
    ),
    (
        "--model-dir",
        "ETRT_MODEL_DIRS",
        "model_dirs",
        _paths,
        "a read-only model directory ingested at start: DIR/<name>/ holds one .pte, its .ptd files "
        "and optionally config.json (repeat the flag; the variable takes a comma-separated list)",
    ),
    (
        "--model-name",
        "ETRT_MODEL_NAME",
        "model_name",
        str,
        "serve the one --model-dir itself as this model (KServe's single-model layout)",
    ),
    ("--log-level", "ETRT_LOG_LEVEL", "log_level", _log_level, f"{', '.join(LOG_LEVELS)}"),
    (
        "--access-log",
        "ETRT_ACCESS_LOG",
        "access_log",
        _bool,
        "log every HTTP request and every inference (it costs throughput)",
    ),
    (
        "--admin-token-file",
        "ETRT_ADMIN_TOKEN_FILE",
        "admin_token_file",
        Path,
        "file holding the bearer token for model management (or set ETRT_ADMIN_TOKEN)",
    ),
    (
        "--infer-token-file",
        "ETRT_INFER_TOKEN_FILE",
        "infer_token_file",
        Path,
        "file holding the bearer token for inference and metadata (or set ETRT_INFER_TOKEN)",
    ),
    (
        "--metrics-auth",
        "ETRT_METRICS_AUTH",
        "metrics_auth",
        _metrics_auth,
        "none: /metrics is open; infer: it needs the infer token",
    ),
    (
        "--metrics-max-age-ms",
        "ETRT_METRICS_MAX_AGE_MS",
        "metrics_max_age_ms",
        float,
        "a front busy with requests answers /metrics from a page the engine rendered at most this "
        "long ago instead of asking it (0: every scrape asks the engine)",
    ),
    (
        "--gpu-metrics",
        "ETRT_GPU_METRICS",
        "gpu_metrics",
        _bool,
        "report Triton's GPU gauges (nv_gpu_*) from NVML where it is present (default true)",
    ),
    (
        "--gpu-fault-quarantine-count",
        "ETRT_GPU_FAULT_QUARANTINE_COUNT",
        "gpu_fault_quarantine_count",
        int,
        "GPU faults (a poisoned CUDA context) blamed on a model after which it is not loaded at "
        "the engine's restart, until a load or a redeploy of it",
    ),
    (
        "--gpu-fault-quarantine-window",
        "ETRT_GPU_FAULT_QUARANTINE_WINDOW",
        "gpu_fault_quarantine_window_s",
        float,
        "seconds in which --gpu-fault-quarantine-count faults quarantine a model (and a fault's "
        "models stay suspects, each execute alone on the device)",
    ),
)


# Variables a platform sets, read before ours (the module's docstring says why).
_PLATFORM_ENV = {"port": "PORT"}


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad setting on one line (no usage block, no traceback): the
    operator reads it in a log or a container's status, where one line is what is shown."""

    def error(self, message: str):
        sys.stderr.write(f"error: {message} ({self.prog} --help lists every setting)\n")
        sys.exit(2)


def _default_shown(attr: str, convert) -> str:
    """The default --help prints, from Settings itself (so help and behaviour cannot differ)."""
    if attr == "workers":
        return "one per core up to 8 on a host with at least 4 cores, else 1"
    value = {f.name: f.default for f in dataclasses.fields(Settings)}[attr]
    if value is None or value == ():
        return "none"
    if convert is _size:
        return show_size(value)
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple):
        return ",".join(value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _flag(attr: str) -> str:
    return next(flag for flag, _, name, _, _ in _OPTIONS if name == attr)


def parse_settings(
    argv: list[str] | None = None, environ: dict[str, str] | None = None
) -> Settings:
    environ = os.environ if environ is None else environ
    parser = _Parser(
        prog="python -m service",
        description="ExecuTorch/TensorRT model server. Every flag has an environment variable; "
        "flags win. Sizes take K, M, G, T (powers of 1024): --arena-bytes 1G.",
    )
    for flag, env, attr, convert, help_text in _OPTIONS:
        # A boolean flag given alone means true, as its documentation writes it.
        switch = {"nargs": "?", "const": True} if convert is _bool else {}
        if convert is _paths:  # repeatable: one path per flag
            switch, convert = {"action": "append"}, Path
        parser.add_argument(
            flag,
            dest=attr,
            type=convert,
            default=None,
            help=f"{help_text} (default: {_default_shown(attr, convert)}; env {env})",
            metavar={_size: "SIZE", _bool: "BOOL"}.get(convert),
            **switch,
        )
    args = parser.parse_args(argv)
    values = {}
    for _, env, attr, convert, _ in _OPTIONS:
        value = getattr(args, attr)
        platform = _PLATFORM_ENV.get(attr)
        if value is None and platform is not None and environ.get(platform) is not None:
            env = platform  # read (and reported) below in place of ours
        if value is None and environ.get(env) is not None:
            try:
                value = convert(environ[env])
            except (ValueError, argparse.ArgumentTypeError) as exc:
                parser.error(f"{env}={environ[env]!r}: {exc}")
        if value is not None:
            values[attr] = tuple(value) if isinstance(value, list) else value
    values.setdefault("workers", default_workers())
    settings = Settings(**values)
    if settings.model_name is not None and len(settings.model_dirs) != 1:
        parser.error("--model-name serves one --model-dir as that model: give exactly one")
    if not 0 <= settings.port <= 65535:
        parser.error("--port must be a TCP port")
    if not 0 <= settings.grpc_port <= 65535:
        parser.error("--grpc-port must be a TCP port (0 disables gRPC)")
    unknown = [name for name in settings.backends if name not in BACKEND_NAMES]
    if unknown:
        parser.error(f"unknown backend(s) {', '.join(unknown)}; known: {', '.join(BACKEND_NAMES)}")
    for attr in (
        "max_program_bytes",
        "max_data_bytes",
        "max_upload_bytes",
        "max_infer_bytes",
        "max_json_bytes",
        "instances_per_model",
        "infer_threads",
        "load_check_timeout_s",
        "max_concurrent_ingests",
        "workers",
        "arena_bytes",
        "shm_max_regions",
        "max_client_arriving_bytes",
        "header_timeout_s",
        "body_timeout_s",
        "max_connections",
        "shutdown_grace_s",
        "gpu_fault_quarantine_count",
        "gpu_fault_quarantine_window_s",
    ):
        value = getattr(settings, attr)
        if value is not None and value <= 0:
            parser.error(f"{_flag(attr)} must be positive")
    if settings.inline_execute_us < 0:
        parser.error("--inline-execute-us must be 0 or more")
    if settings.metrics_max_age_ms < 0:
        parser.error("--metrics-max-age-ms must be 0 or more")
    if not 0 <= settings.front_nice <= 19:
        parser.error("--front-nice must be between 0 and 19")
    return settings


def encode_settings(settings: Settings) -> str:
    """For the supervisor's children (service/supervisor.py), which take the parsed settings
    rather than parsing flags and the environment again."""
    return base64.b64encode(pickle.dumps(settings)).decode()


def decode_settings(text: str) -> Settings:
    return pickle.loads(base64.b64decode(text))
