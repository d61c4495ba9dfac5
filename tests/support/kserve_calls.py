"""Runs the KServe v2 REST client in a process of its own, for tests/e2e/test_v2_kserve.py.

kserve and tritonclient.grpc both register protobuf messages of package `inference` (each from
its own .proto) in protobuf's default pool, so whichever is imported second in one process fails.
The tests import tritonclient in-process; KServe's client runs here, reading a JSON call from
argv and printing a JSON answer.
"""

import asyncio
import json
import sys

import numpy as np
from kserve import InferenceRESTClient, InferInput, InferRequest, RESTConfig
from kserve.protocol.infer_type import RequestedOutput


async def probe(client, url, models):
    return {
        "live": await client.is_server_live(url),
        "ready": await client.is_server_ready(url),
        "models": [await client.is_model_ready(url, m) for m in models],
    }


async def infer(client, url, call):
    inputs = []
    for spec in call["inputs"]:
        array = np.asarray(spec["data"], dtype=spec["numpy"]).reshape(spec["shape"])
        tensor = InferInput(spec["name"], list(array.shape), spec["datatype"])
        tensor.set_data_from_numpy(array, binary_data=call["binary_data"])
        inputs.append(tensor)
    request = InferRequest(
        call["model"],
        inputs,
        request_id=call.get("id"),
        request_outputs=[RequestedOutput(n) for n in call.get("outputs", [])],
    )
    try:
        for _ in range(call.get("repeat", 1)):  # the same call again: the last one's answer
            response = await client.infer(url, request, model_name=call["model"])
    except Exception as error:  # the test checks what the client reports
        return {"error": str(error)}
    return {
        "model_name": response.model_name,
        "id": response.id,
        "outputs": [
            {
                "name": o.name,
                "shape": list(o.as_numpy().shape),
                "data": o.as_numpy().ravel().tolist(),
            }
            for o in response.outputs
        ],
    }


async def main(call):
    client = InferenceRESTClient(RESTConfig(protocol="v2", timeout=60))
    try:
        if call["kind"] == "probe":
            return await probe(client, call["url"], call["models"])
        return await infer(client, call["url"], call)
    finally:
        await client.close()


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(json.loads(sys.argv[1])))))
