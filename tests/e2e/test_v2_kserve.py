"""The KServe v2 REST client (kserve.InferenceRESTClient, unmodified) against a real server."""
import asyncio

import numpy as np
import pytest
from kserve import InferenceRESTClient, InferInput, InferRequest, RESTConfig
from kserve.protocol.infer_type import RequestedOutput

from support.program_fixtures import mix_of_ops_program  # noqa: F401
from support.server import upload


def run(coroutine_function):
    async def main():
        client = InferenceRESTClient(RESTConfig(protocol="v2", timeout=60))
        try:
            return await coroutine_function(client)
        finally:
            await client.close()
    return asyncio.run(main())


def test_health_and_model_readiness(shared_server, mix_of_ops_program):
    with shared_server.client() as http:
        assert upload(http, "mix", mix_of_ops_program.pte).status_code == 201

    async def probe(client):
        return (await client.is_server_live(shared_server.url),
                await client.is_server_ready(shared_server.url),
                await client.is_model_ready(shared_server.url, "mix"),
                await client.is_model_ready(shared_server.url, "absent"))

    assert run(probe) == (True, True, True, False)


@pytest.mark.parametrize("binary_data", [False, True])
def test_infer_json_and_binary(shared_server, mix_of_ops_program, binary_data):
    x, idx = mix_of_ops_program.example_inputs
    inputs = [InferInput("input_0", list(x.shape), "FP32"),
              InferInput("input_1", list(idx.shape), "INT64")]
    inputs[0].set_data_from_numpy(x.numpy(), binary_data=binary_data)
    inputs[1].set_data_from_numpy(idx.numpy(), binary_data=binary_data)
    request = InferRequest("mix", inputs, request_id="k-1",
                           request_outputs=[RequestedOutput("output_1")])

    async def infer(client):
        return await client.infer(shared_server.url, request, model_name="mix")

    response = run(infer)
    assert response.model_name == "mix" and response.id == "k-1"
    [output] = response.outputs
    assert output.name == "output_1"
    np.testing.assert_allclose(output.as_numpy(),
                               mix_of_ops_program.module(x, idx)[1].detach().numpy(), rtol=1e-5)


def test_errors_carry_our_message(shared_server):
    request = InferRequest("absent", [InferInput("input_0", [1], "FP32", data=[1.0])])

    async def infer(client):
        return await client.infer(shared_server.url, request, model_name="absent")

    with pytest.raises(Exception) as caught:
        run(infer)
    assert "model 'absent' not found" in str(caught.value) and "404" in str(caught.value)
