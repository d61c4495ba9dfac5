"""Priority levels on a real server, through unmodified tritonclient.http and tritonclient.grpc:
a saturated single instance takes the higher level first, and the levels are in the model
configuration."""

import json
import threading
import time

import numpy as np
import pytest
import tritonclient.grpc as triton_grpc
import tritonclient.http as triton_http
from tritonclient.utils import InferenceServerException

from support import programs
from support.server import upload

# Roughly 3-5 s of kernel work per execute here: far longer than the requests take to queue,
# even on a loaded 2-core machine (where 1-2 s was once too short for the gRPC client).
ROUNDS, SIZE = 700, 400_000


@pytest.fixture(scope="module")
def heavy_program(programs_dir):
    return programs.export_cpu_heavy(programs_dir, rounds=ROUNDS, size=SIZE)


def test_a_saturated_instance_takes_the_higher_priority_first(start_server, heavy_program):
    server = start_server()
    config = {
        "dynamic_batching": {
            "priority_levels": 2,
            "default_priority_level": 2,
            "priority_queue_policy": {"2": {"max_queue_size": 8}},
        },
        "instance_group": [{"count": 1}],
    }
    with server.client() as client:
        created = upload(client, "heavy", heavy_program.pte, fields={"config": json.dumps(config)})
        assert created.status_code == 201, created.text
    x = np.random.rand(SIZE).astype(np.float32)
    finished, lock = [], threading.Lock()

    def over_http(tag, priority):
        with triton_http.InferenceServerClient(server.url.removeprefix("http://")) as triton:
            item = triton_http.InferInput("input_0", [SIZE], "FP32")
            item.set_data_from_numpy(x, binary_data=True)
            triton.infer("heavy", [item], priority=priority)
        with lock:
            finished.append(tag)

    def over_grpc(tag, priority):
        with triton_grpc.InferenceServerClient(server.grpc_url) as triton:
            item = triton_grpc.InferInput("input_0", [SIZE], "FP32")
            item.set_data_from_numpy(x)
            triton.infer("heavy", [item], priority=priority)
        with lock:
            finished.append(tag)

    over_http("warm", 0)  # the first execute pays one-time costs
    finished.clear()
    threads = [threading.Thread(target=over_http, args=("busy", 0))]
    threads[0].start()
    time.sleep(0.3)  # it executes on the one instance; the next ones queue
    for i in range(3):
        threads.append(threading.Thread(target=over_http, args=(f"low{i}", 2)))
        threads[-1].start()
        time.sleep(0.05)  # in this order
    time.sleep(0.3)
    for target, tag in ((over_http, "high-http"), (over_grpc, "high-grpc")):
        threads.append(threading.Thread(target=target, args=(tag, 1)))
        threads[-1].start()
    for thread in threads:
        thread.join()
    # Both level-1 requests ran before every level-2 one queued ahead of them.
    assert finished[0] == "busy", finished
    assert set(finished[1:3]) == {"high-http", "high-grpc"}, finished
    assert finished[3:] == ["low0", "low1", "low2"], finished

    with triton_http.InferenceServerClient(server.url.removeprefix("http://")) as triton:
        batching = triton.get_model_config("heavy")["dynamic_batching"]
        assert (batching["priority_levels"], batching["default_priority_level"]) == (2, 2)
        assert batching["priority_queue_policy"]["2"]["max_queue_size"] == 8
        item = triton_http.InferInput("input_0", [SIZE], "FP32")
        item.set_data_from_numpy(x, binary_data=True)
        with pytest.raises(InferenceServerException) as caught:
            triton.infer("heavy", [item], priority=3)
        assert "priority levels 1 to 2" in caught.value.message()
    with triton_grpc.InferenceServerClient(server.grpc_url) as triton:
        message = triton.get_model_config("heavy").config.dynamic_batching
        assert message.priority_levels == 2 and message.priority_queue_policy[2].max_queue_size == 8
