"""The suite runs beside a server on the default ports (the README's first command).

Another process holds 8000 and 8001 (where something else already holds them, that proves the
same point): a suite server still starts and serves on its own free ports, and the unit tests
that start the app in-process (with its gRPC server) still pass.
"""

import subprocess
import sys
import textwrap

from support.program_fixtures import linear_relu_program
from support.server import REPO, tensor, upload

HOLDER = textwrap.dedent(
    """
    import socket, sys
    held = []
    for port in (8000, 8001):
        sock = socket.socket()
        try:
            sock.bind(("0.0.0.0", port))
            sock.listen()
            held.append(sock)
            print("held", port, flush=True)
        except OSError:
            print("taken", port, flush=True)
    sys.stdin.read()
    """
)


def test_suite_servers_and_in_process_apps_avoid_the_held_default_ports(
    start_server, linear_relu_program
):
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        states = [holder.stdout.readline().split() for _ in range(2)]
        assert sorted(port for _, port in states) == ["8000", "8001"]
        server = start_server()
        assert {server.port, server.grpc_port}.isdisjoint({8000, 8001})
        with server.client() as client:
            assert upload(client, "m", linear_relu_program.pte).status_code == 201
            x = linear_relu_program.example_inputs[0]
            response = client.post("/infer", json={"model": "m", "inputs": [tensor(x)]})
            assert response.status_code == 200, response.text
        # The unit tests that run the whole app in-process (its lifespan starts gRPC too).
        unit = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                "tests/unit/test_auth.py",
                "tests/unit/test_app.py",
                "tests/unit/test_model_config.py",
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert unit.returncode == 0, unit.stdout[-4000:] + unit.stderr[-2000:]
        assert holder.poll() is None  # the ports stayed held throughout
    finally:
        holder.stdin.close()
        holder.wait(10)
