"""The two servers bench_http.py compares this one with, each serving one ExecuTorch program.

    python bench/http_baseline_apps.py starlette PROGRAM.pte PORT
    python bench/http_baseline_apps.py litserve PROGRAM.pte PORT

`starlette` is the floor for a Python server: one route on uvicorn with uvloop and httptools,
orjson, executorch.runtime called on the event loop, no validation at all. `litserve` is LitServe
with one inference worker, the request decoded and answered the same way. Both take the native
/infer JSON body (first input only) and answer {"outputs": [{"shape", "data"}]}.
"""

from __future__ import annotations

import os
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


def floor_app():
    """The floor for a Python server, executing on this project's native host (which, unlike
    executorch.runtime, runs on the GPU machine too): one raw ASGI app, orjson, the program
    executed on the event loop, no validation. It takes the native /infer JSON body and the v2
    binary body (first input only) and answers each in kind. The program: ETRT_FLOOR_PTE."""
    import ethost

    from service.backends.xnnpack import install_backend

    install_backend()  # programs lowered to XNNPACK run here as in the server
    method = ethost.Program(os.environ["ETRT_FLOOR_PTE"]).load_method("forward")

    async def app(scope, receive, send):
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        chunks, more = [], True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        split = dict(scope["headers"]).get(b"inference-header-content-length")
        if split is None:
            item = orjson.loads(body)["inputs"][0]
            x = np.asarray(item["data"], np.float32).reshape(item["shape"])
            out = method.execute([x])[0]
            answer = orjson.dumps(
                {"outputs": [{"shape": list(out.shape), "datatype": "FP32", "data": out}]},
                option=orjson.OPT_SERIALIZE_NUMPY,
            )
            headers = [(b"content-type", b"application/json")]
        else:
            at = int(split)
            item = orjson.loads(body[:at])["inputs"][0]
            x = np.frombuffer(body, np.float32, offset=at).reshape(item["shape"])
            out = method.execute([x])[0]
            head = orjson.dumps(
                {
                    "outputs": [
                        {
                            "name": "output_0",
                            "datatype": "FP32",
                            "shape": list(out.shape),
                            "parameters": {"binary_data_size": out.nbytes},
                        }
                    ]
                }
            )
            answer = head + out.tobytes()
            headers = [
                (b"content-type", b"application/octet-stream"),
                (b"inference-header-content-length", str(len(head)).encode()),
            ]
        headers.append((b"content-length", str(len(answer)).encode()))
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": answer})

    return app


def floor(pte: str, port: int, workers: int = 1) -> None:
    """floor_app in `workers` processes (uvicorn --workers: one listening socket)."""
    import uvicorn

    os.environ["ETRT_FLOOR_PTE"] = pte
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    uvicorn.run(
        "http_baseline_apps:floor_app",
        factory=True,
        host="127.0.0.1",
        port=port,
        workers=workers,
        loop="uvloop",
        http="httptools",
        access_log=False,
        log_level="warning",
    )


if ls is not None:

    class LitHostApi(ls.LitAPI):
        """LitServe executing on this project's native host, for the GPU machine."""

        def __init__(self, program: str):
            super().__init__()
            self.program = program

        def setup(self, device):
            import ethost

            from service.backends.xnnpack import install_backend

            install_backend()
            self.method = ethost.Program(self.program).load_method("forward")

        def decode_request(self, request):
            item = request["inputs"][0]
            return np.asarray(item["data"], np.float32).reshape(item["shape"])

        def predict(self, x):
            return self.method.execute([x])[0]

        def encode_response(self, output):
            return {"outputs": [{"shape": list(output.shape), "data": output.ravel().tolist()}]}


def litserve_host(pte: str, port: int, workers: int = 1) -> None:
    """LitServe with `workers` inference workers and as many API servers."""
    if ls is None:
        sys.exit("litserve is not installed: pip install '.[bench]'")
    server = ls.LitServer(LitHostApi(pte), accelerator="cpu", workers_per_device=workers)
    server.run(
        host="127.0.0.1",
        port=port,
        num_api_servers=workers,
        log_level="warning",
        generate_client_file=False,
    )


if __name__ == "__main__":
    kind, program, port_text = sys.argv[1:4]
    workers = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    run = {
        "starlette": starlette,
        "litserve": litserve,
        "floor": floor,
        "litserve-host": litserve_host,
    }
    if kind in ("floor", "litserve-host"):
        run[kind](program, int(port_text), workers)
    else:
        run[kind](program, int(port_text))
