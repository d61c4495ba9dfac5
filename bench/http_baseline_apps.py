"""The two servers bench_http.py compares this one with, each serving one ExecuTorch program.

    python bench/http_baseline_apps.py starlette PROGRAM.pte PORT
    python bench/http_baseline_apps.py litserve PROGRAM.pte PORT

`starlette` is the floor for a Python server: one route on uvicorn with uvloop and httptools,
orjson, executorch.runtime called on the event loop, no validation at all. `litserve` is LitServe
with one inference worker, the request decoded and answered the same way. Both take the native
/infer JSON body (first input only) and answer {"outputs": [{"shape", "data"}]}.
"""

from __future__ import annotations

import sys

import numpy as np
import orjson


def _load(pte: str):
    from executorch.runtime import Runtime

    return Runtime.get().load_program(pte).load_method("forward")


def _tensor(body: dict):
    import torch

    item = body["inputs"][0]
    return torch.tensor(item["data"], dtype=torch.float32).reshape(item["shape"])


def _answer(output) -> dict:
    array = output.numpy()
    return {
        "outputs": [{"shape": list(array.shape), "data": np.ascontiguousarray(array).reshape(-1)}]
    }


def starlette(pte: str, port: int) -> None:
    import uvicorn
    from starlette.applications import Starlette
    from starlette.responses import Response
    from starlette.routing import Route

    method = _load(pte)

    async def infer(request):
        outputs = method.execute([_tensor(orjson.loads(await request.body()))])
        return Response(
            orjson.dumps(_answer(outputs[0]), option=orjson.OPT_SERIALIZE_NUMPY),
            media_type="application/json",
        )

    app = Starlette(routes=[Route("/infer", infer, methods=["POST"])])
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=port,
        loop="uvloop",
        http="httptools",
        access_log=False,
        log_level="warning",
    )


try:
    import litserve as ls
except ImportError:  # the Starlette baseline does without it
    ls = None

if ls is not None:

    class LitApi(ls.LitAPI):
        """At module level: LitServe's worker process (spawned) unpickles it from this file."""

        def __init__(self, program: str):
            super().__init__()
            self.program = program

        def setup(self, device):
            self.method = _load(self.program)

        def decode_request(self, request):
            return _tensor(request)

        def predict(self, x):
            return self.method.execute([x])[0]

        def encode_response(self, output):
            answer = _answer(output)
            answer["outputs"][0]["data"] = answer["outputs"][0]["data"].tolist()
            return answer


def litserve(pte: str, port: int) -> None:
    if ls is None:
        sys.exit("litserve is not installed: pip install '.[bench]'")
    server = ls.LitServer(LitApi(pte), accelerator="cpu", workers_per_device=1)
    server.run(
        host="127.0.0.1",
        port=port,
        num_api_servers=1,
        log_level="warning",
        generate_client_file=False,
    )


if __name__ == "__main__":
    kind, program, port_text = sys.argv[1:4]
    {"starlette": starlette, "litserve": litserve}[kind](program, int(port_text))
