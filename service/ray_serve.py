"""The Ray Serve application: `serve run service.ray_serve:app model_repository=/shared/models`
(docs/ray-serve.md; needs the `ray` extra).

Each replica owns an embedded engine (service/embedded/) that serves the models of a repository
every node sees, read as the server reads --model-dir. The replica's HTTP side is the server's
own app (service/front/app.py) over that engine: the native `POST /infer` and `/models` routes,
the Open Inference Protocol REST routes with JSON and binary tensors, health and metadata, and
the same error bodies, so tritonclient works unchanged against Serve's proxy. What Serve adds:
replicas across the cluster, a GPU each (`num_gpus`), autoscaling on ongoing requests, and
health checks that are the engine's readiness (a replica whose engine is not ready is replaced).

Every response names the node and replica that served it (x-etrt-node-id, x-etrt-replica), so a
client can see requests spread and replicas replaced.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

import ray
from ray import serve

from service.dataplane import instances
from service.embedded import Engine
from service.front.app import create_app

NODE_HEADER = b"x-etrt-node-id"
REPLICA_HEADER = b"x-etrt-replica"


class ArgumentError(ValueError):
    """An application argument Serve passed that the application cannot use; names it."""


@dataclass(frozen=True)
class AppArgs:
    """The application's arguments (`serve run ... key=value` or a config file's `args:`).

    model_repository: model directories, comma-separated (the server's --model-dir).
    num_gpus / num_cpus: what each replica reserves (one engine per GPU: num_gpus=1).
    num_replicas: a fixed count; or min_replicas/max_replicas to autoscale on ongoing requests
    towards target_ongoing_requests per replica (Serve's autoscaling_config).
    instances_per_model: the engine's --instances; max_ongoing_requests defaults to twice it
    (each instance executing one request with one more waiting, so a replica does not hold
    requests another replica could start at once).
    backends: the engine's --backends (comma-separated)."""

    model_repository: str
    num_gpus: float = 0.0
    num_cpus: float = 1.0
    num_replicas: int | None = None
    min_replicas: int | None = None
    max_replicas: int | None = None
    target_ongoing_requests: float = 2.0
    upscale_delay_s: float = 30.0
    downscale_delay_s: float = 600.0
    metrics_interval_s: float = 10.0
    look_back_period_s: float = 30.0
    max_replicas_per_node: int | None = None
    instances_per_model: int | None = None
    max_ongoing_requests: int | None = None
    backends: str | None = None
    health_check_period_s: float = 10.0

    @classmethod
    def parse(cls, args: dict) -> AppArgs:
        """From Serve's args: strings from the command line, YAML values from a config file."""
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(args) - set(known))
        if unknown:
            raise ArgumentError(f"unknown argument(s) {unknown}; known: {sorted(known)}")
        if "model_repository" not in args:
            raise ArgumentError("model_repository is required (a directory every node sees)")
        values = {}
        for name, raw in args.items():
            kind = str(known[name].type)
            try:
                if raw is None or raw == "":
                    values[name] = None
                elif "int" in kind:
                    values[name] = int(raw)
                elif "float" in kind:
                    values[name] = float(raw)
                else:
                    values[name] = str(raw)
            except ValueError:
                raise ArgumentError(f"{name} must be a number, not {raw!r}") from None
        parsed = cls(**values)
        if parsed.num_replicas is not None and parsed.max_replicas is not None:
            raise ArgumentError("give num_replicas or min_replicas/max_replicas, not both")
        return parsed

    @property
    def repository(self) -> tuple[Path, ...]:
        return tuple(Path(p) for p in self.model_repository.split(",") if p)

    def engine_options(self) -> dict:
        """Settings fields for each replica's engine."""
        options = {"gpu_metrics": self.num_gpus > 0}
        if self.instances_per_model is not None:
            options["instances_per_model"] = self.instances_per_model
        if self.backends:
            options["backends"] = tuple(b for b in self.backends.split(",") if b)
        return options

    def deployment_options(self) -> dict:
        instance_count = self.instances_per_model or instances.BASE
        options = {
            "ray_actor_options": {"num_cpus": self.num_cpus, "num_gpus": self.num_gpus},
            "max_ongoing_requests": self.max_ongoing_requests or 2 * instance_count,
            "health_check_period_s": self.health_check_period_s,
        }
        if self.max_replicas_per_node is not None:
            options["max_replicas_per_node"] = self.max_replicas_per_node
        if self.max_replicas is not None:
            options["autoscaling_config"] = {
                "min_replicas": self.min_replicas if self.min_replicas is not None else 1,
                "max_replicas": self.max_replicas,
                "target_ongoing_requests": self.target_ongoing_requests,
                "upscale_delay_s": self.upscale_delay_s,
                "downscale_delay_s": self.downscale_delay_s,
                "metrics_interval_s": self.metrics_interval_s,
                "look_back_period_s": self.look_back_period_s,
            }
        else:
            options["num_replicas"] = self.num_replicas or 1
        return options


class _Named:
    """ASGI middleware: every response carries the node and replica that served it; and a
    client that leaves mid-body, which Serve reports by cancelling `receive` with Ray's
    TaskCancelledError, reads as the disconnect it is, as under uvicorn, not a server fault."""

    def __init__(self, app, node_id: str, replica: str):
        self.app = app
        self.headers = [(NODE_HEADER, node_id.encode()), (REPLICA_HEADER, replica.encode())]

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def named(message):
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", ()), *self.headers]}
            await send(message)

        async def received():
            try:
                return await receive()
            except ray.exceptions.TaskCancelledError:
                return {"type": "http.disconnect"}

        await self.app(scope, received, named)


@serve.deployment(name="etrt")
@serve.ingress()
class EngineReplica:
    """One replica: an embedded engine over the repository, and the server's HTTP app on it."""

    async def __init__(self, args: AppArgs):
        self.args = args
        # Ray sets CUDA_VISIBLE_DEVICES to the GPUs it assigned, so the engine's device 0 is
        # this replica's own GPU.
        self.engine = await Engine.open(repository=args.repository, **args.engine_options())

    def __serve_build_asgi_app__(self):
        app = create_app(self.engine.settings, self.engine.dataplane, owns_service=False)
        node = ray.get_runtime_context().get_node_id()
        replica = serve.get_replica_context().replica_id.unique_id
        return _Named(app, node, replica)

    def check_health(self) -> None:
        """Serve's health check: raising makes the controller replace this replica."""
        self.engine.check_health()

    async def __del__(self):
        await self.engine.close()


def app(args: dict) -> serve.Application:
    """The application builder Serve calls with the application's args."""
    parsed = AppArgs.parse(args)
    return EngineReplica.options(**parsed.deployment_options()).bind(parsed)
