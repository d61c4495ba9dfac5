"""The Ray Serve application's arguments (service/ray_serve.py) and the config file of
docs/ray-serve.md, checked against Serve's own schemas (ServeDeploySchema, AutoscalingConfig,
DeploymentSchema): the documented file is one Serve accepts, and what the builder makes of its
args are options Serve accepts. The application on a real cluster: tests/e2e/test_ray_serve_e2e.py.
"""

import re
from pathlib import Path

import pytest
import yaml
from ray.serve.config import AutoscalingConfig
from ray.serve.schema import DeploymentSchema, ServeDeploySchema

from service.ray_serve import AppArgs, ArgumentError

PAGE = Path(__file__).resolve().parents[2] / "docs" / "ray-serve.md"


def documented_config() -> dict:
    [block] = re.findall(r"```yaml\n(.*?)```", PAGE.read_text(), re.S)
    return yaml.safe_load(block)


def test_the_documented_config_file_is_one_serve_accepts():
    config = documented_config()
    schema = ServeDeploySchema.model_validate(config)
    [application] = schema.applications
    assert application.import_path == "service.ray_serve:app"
    options = AppArgs.parse(application.args).deployment_options()
    assert options["ray_actor_options"] == {"num_cpus": 1.0, "num_gpus": 1.0}
    assert options["max_ongoing_requests"] == 4  # twice the 2 instances per model
    autoscaling = AutoscalingConfig(**options["autoscaling_config"])
    assert (autoscaling.min_replicas, autoscaling.max_replicas) == (1, 4)
    assert autoscaling.target_ongoing_requests == 4
    DeploymentSchema(name="etrt", **options)  # every option is one Serve knows


def test_command_line_strings_become_typed_options():
    args = AppArgs.parse({"model_repository": "/a,/b", "num_replicas": "2", "num_gpus": "0.5"})
    assert args.repository == (Path("/a"), Path("/b"))
    options = args.deployment_options()
    assert options["num_replicas"] == 2 and "autoscaling_config" not in options
    assert options["ray_actor_options"]["num_gpus"] == 0.5
    assert options["max_ongoing_requests"] == 4  # the engine's base of 2 instances, twice
    assert args.engine_options() == {"gpu_metrics": True}
    DeploymentSchema(name="etrt", **options)
    tuned = AppArgs.parse(
        {"model_repository": "/m", "instances_per_model": 3, "backends": "xnnpack"}
    )
    assert tuned.deployment_options()["max_ongoing_requests"] == 6
    assert tuned.engine_options() == {
        "gpu_metrics": False,
        "instances_per_model": 3,
        "backends": ("xnnpack",),
    }


@pytest.mark.parametrize(
    "args, message",
    [
        ({}, "model_repository is required"),
        ({"model_repository": "/m", "colour": "1"}, r"unknown argument\(s\) \['colour'\]"),
        ({"model_repository": "/m", "num_gpus": "one"}, "num_gpus must be a number, not 'one'"),
        (
            {"model_repository": "/m", "num_replicas": "2", "max_replicas": "3"},
            "num_replicas or min_replicas/max_replicas",
        ),
    ],
)
def test_arguments_the_application_cannot_use_are_refused_by_name(args, message):
    with pytest.raises(ArgumentError, match=message):
        AppArgs.parse(args)


def test_a_client_leaving_mid_body_reads_as_a_disconnect_and_responses_are_named():
    """Serve cancels a replica's `receive` when the client goes (Ray's TaskCancelledError): the
    app must see http.disconnect, as under uvicorn, rather than an error it logs as a fault."""
    import asyncio

    from ray.exceptions import TaskCancelledError

    from service.ray_serve import NODE_HEADER, REPLICA_HEADER, _Named

    seen, sent = [], []

    async def app(scope, receive, send):
        seen.append(await receive())
        await send({"type": "http.response.start", "status": 200, "headers": []})

    async def receive():
        raise TaskCancelledError()

    async def send(message):
        sent.append(message)

    asyncio.run(_Named(app, "node-1", "replica-1")({"type": "http"}, receive, send))
    assert seen == [{"type": "http.disconnect"}]
    assert (NODE_HEADER, b"node-1") in sent[0]["headers"]
    assert (REPLICA_HEADER, b"replica-1") in sent[0]["headers"]
