"""Serving through Ray Serve's proxy (service.ray_serve:app) against the server's own front, in
one run.

    python bench/bench_ray_serve.py [--seconds 10] [--connections 8] [--replicas 1,2] [--images]
    python bench/bench_ray_serve.py --export DIR         # export the programs (torch) and stop
    python bench/bench_ray_serve.py --programs DIR ...   # run on programs exported earlier

Needs `wrk` (Debian package), the test extra (torch, to export the programs) and the ray extra;
with --programs, neither torch nor executorch's exporter: that is how it runs on the 16-core GPU
host, whose torch cannot run the exporter and whose Ray is the slim bundle of bench/ray_bundle.sh
(bench/ray_device.sh is the whole device call).
Exports a tiny program (Linear 8->4 + ReLU, [2, 8] FP32) and, with --images, a small conv on
1x3x224x224 images; starts `python -m service` with them deployed and loads it with wrk (native
JSON, and v2 binary images); then starts a one-node Ray cluster with Serve's proxy on a free port,
runs the shipped application over a repository of the same programs with each replica count of
--replicas, and loads it with the same requests. Prints req/s, p50 and p99 of each and the ratios
Serve / own front (and N replicas / 1 replica).

On the 2-core machine the figures are noisy (wrk, Ray's proxy, the replicas and the server share
the two cores): the ratios measured in the same run are what to compare. Replicas scale with cores:
compare 2 replicas with 1 on a host with cores to spare (the 16-core GPU host).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

import httpx
import numpy as np

from bench_http import FOLDERS, Load, Request, export_all, native_json, v2_binary_image, wrk

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO))

from scratch import scratch_dir  # noqa: E402
from support import programs  # noqa: E402 (torch only when it exports)
from support.server import ServerProcess, free_port, upload  # noqa: E402


def carried(folder: Path, names: list[str]) -> dict:
    """The programs `--export` wrote into `folder`, read without torch."""
    found = {name: programs.exported_files(folder / FOLDERS[name]) for name in names}
    missing = [name for name, program in found.items() if program is None]
    if missing:
        raise SystemExit(f"{folder}: no exported {missing}; run --export {folder} first")
    return found


def repository(root: Path, exported: dict, names: list[str]) -> Path:
    for name in names:
        (root / name).mkdir(parents=True)
        shutil.copy(exported[name].pte, root / name / "model.pte")
        for ptd in exported[name].ptds:
            shutil.copy(ptd, root / name / ptd.name)
    return root


def through_serve(
    models: Path, replicas: list[int], requests: dict[str, Request], args, scratch: Path
) -> dict:
    import ray
    from ray import serve

    from service.ray_serve import app

    # Every replica takes requests, though the proxy shares a node with them.
    os.environ["RAY_SERVE_PROXY_PREFER_LOCAL_NODE_ROUTING"] = "0"
    # The replicas import service/ from the tree and the rest from where this process does (on
    # the GPU host: the unpacked Ray bundle, the service wheels and the native build).
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    ray.init(
        num_cpus=max(replicas) + 1,
        include_dashboard=False,
        log_to_driver=False,
        # Serve moves little through the object store; Ray's default (30% of memory) is not needed.
        object_store_memory=256 * 1024**2,
        runtime_env={"env_vars": {"PYTHONPATH": path}},
    )
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port}, proxy_location="HeadOnly")
    url = f"http://127.0.0.1:{port}"
    loads = {}
    try:
        for count in replicas:
            settings = {"model_repository": str(models), "num_replicas": str(count)}
            if args.gpus:
                settings["num_gpus"] = str(args.gpus)
            settings.update(item.split("=", 1) for item in args.arg)
            serve.run(app(settings), name="etrt", route_prefix="/")
            for label, request in requests.items():
                warm(url, request)
                loads[(label, count)] = wrk(
                    url, request, args.connections, args.seconds, scratch, args.threads
                )
                print(f"  Serve, {count} replica(s), {label:12s} {loads[(label, count)]}")
            serve.delete("etrt")
    finally:
        serve.shutdown()
        ray.shutdown()
    return loads


def warm(url: str, request: Request) -> None:
    with httpx.Client(base_url=url, timeout=60) as client:
        for _ in range(20):
            answer = client.post(
                request.path,
                content=request.body,
                headers={"content-type": request.content_type, **request.headers},
            )
            assert answer.status_code == 200, answer.text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1, help="wrk threads")
    parser.add_argument("--replicas", default="1", help="replica counts to run, e.g. 1,2")
    parser.add_argument("--images", action="store_true", help="also v2 binary 224x224 images")
    parser.add_argument("--gpus", type=float, default=0.0, help="num_gpus per replica")
    parser.add_argument(
        "--arg", action="append", default=[], help="more application args, key=value"
    )
    parser.add_argument("--programs-dir", type=Path, default=None, help="export into/reuse DIR")
    parser.add_argument("--export", type=Path, help="export the programs into DIR and stop")
    parser.add_argument("--programs", type=Path, help="programs exported earlier (no torch)")
    args = parser.parse_args()
    if args.export:
        print({name: str(p.pte) for name, p in export_all(args.export).items()})
        return
    scratch = scratch_dir("bench-ray-")
    rng = np.random.default_rng(0)
    requests = {"tiny JSON": native_json("tiny", rng.standard_normal((2, 8)).astype(np.float32))}
    names = ["tiny"]
    if args.images:
        image = rng.standard_normal((1, 3, 224, 224)).astype(np.float32)
        requests["v2 binary"] = v2_binary_image(image)
        names.append("conv")
    if args.programs:
        exported = carried(args.programs, names)
    else:
        exported = export_all(args.programs_dir or scratch / "programs")
    own: dict[str, Load] = {}
    with ServerProcess(scratch / "artifacts", log_path=scratch / "server.log") as server:
        with server.client() as client:
            for name in names:
                program = exported[name]
                assert upload(client, name, program.pte, program.ptds).status_code == 201
        for label, request in requests.items():
            warm(server.url, request)
            own[label] = wrk(
                server.url, request, args.connections, args.seconds, scratch, args.threads
            )
            print(f"  own front,            {label:12s} {own[label]}")
    time.sleep(1)
    replicas = [int(n) for n in args.replicas.split(",")]
    models = repository(scratch / "models", exported, names)
    served = through_serve(models, replicas, requests, args, scratch)
    print(f"\nwrk -t{args.threads} -c{args.connections}, {args.seconds:.0f} s each")
    for label in requests:
        for count in replicas:
            load = served[(label, count)]
            print(
                f"{label}: Serve {count} replica(s) / own front = "
                f"{load.rps / own[label].rps:.4f}x req/s (1/{own[label].rps / load.rps:.0f}), "
                f"p50 {load.p50_ms:.2f} ms vs {own[label].p50_ms:.2f} ms"
            )
        if len(replicas) > 1:
            base = served[(label, replicas[0])].rps
            for count in replicas[1:]:
                print(
                    f"{label}: {count} replicas / {replicas[0]} = "
                    f"{served[(label, count)].rps / base:.2f}x req/s"
                )


if __name__ == "__main__":
    main()
