"""`etrt` against real servers, through the installed console script in a subprocess.

Deploy (progress on a pseudo-terminal and as plain lines, digests, refusals and their exit
status, tokens), models and rm, an inference round trip over binary v2, `etrt serve`, and
`etrt check`'s problems compared with what a real server answers for the same files.
"""

import hashlib
import json
import os
import pty
import signal
import subprocess
import time

import httpx
import numpy as np
import pytest

from service.cli.upload import FilePart, UploadBody
from support.cli import ETRT, etrt, etrt_env
from support.program_fixtures import (
    external_weights_program,
    linear_relu_program,
    mix_of_ops_program,
    split_weights_program,
)
from support.server import REPO, ServerProcess, free_port, upload
from support.trt_program_fixtures import mixed_16


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    started = ServerProcess(tmp_path_factory.mktemp("cli") / "artifacts").start()
    yield started
    started.stop()


def test_deploy_streams_with_plain_progress_and_digests_then_describes(
    server, external_weights_program
):
    run = etrt(
        "deploy",
        "weights",
        external_weights_program.pte,
        *external_weights_program.ptds,
        "--url",
        server.url,
    )
    assert run.code == 0, run.out + run.err
    assert "sha-256, sent as Content-Digest" in run.out
    assert "uploading: " in run.out and "(100%)" in run.out
    assert "\x1b[" not in run.out  # no terminal codes when piped
    assert "model 'weights': ready" in run.out
    files = [external_weights_program.pte, *external_weights_program.ptds]
    for path in files:
        assert hashlib.sha256(path.read_bytes()).hexdigest() in run.out
    with server.client() as client:
        described = client.get("/models/weights").json()
    assert [f["sha256"] for f in described["files"]] == [
        hashlib.sha256(p.read_bytes()).hexdigest() for p in files
    ]


def test_the_server_checks_the_digests_the_upload_body_declares(server, linear_relu_program):
    """The body etrt streams declares each file's sha-256 in a form the server checks: a part
    declaring another digest is refused, the true one accepted."""
    honest = FilePart.of("program", linear_relu_program.pte)
    assert honest.sha256 == hashlib.sha256(linear_relu_program.pte.read_bytes()).digest()
    lying = FilePart("program", honest.path, honest.size, hashlib.sha256(b"other").digest())
    answers = {}
    for label, part in (("lying", lying), ("honest", honest)):
        body = UploadBody("digests", [part], {})
        content = b"".join(body)
        assert len(content) == body.length
        answers[label] = httpx.post(
            f"{server.url}/models",
            content=content,
            headers={"Content-Type": body.content_type},
            timeout=120,
        )
    assert answers["lying"].status_code == 422
    [problem] = answers["lying"].json()["problems"]
    assert problem["rule"] == "upload.digest_mismatch" and problem["file"] == "program.pte"
    assert answers["honest"].status_code == 201, answers["honest"].text


def test_deploy_on_a_terminal_draws_a_progress_bar(server, linear_relu_program):
    primary, secondary = pty.openpty()
    process = subprocess.Popen(
        [str(ETRT), "deploy", "tty", str(linear_relu_program.pte), "--url", server.url],
        stdin=secondary,
        stdout=secondary,
        stderr=secondary,
        env=etrt_env({"TERM": "xterm-256color", "COLUMNS": "120"}),
        cwd=REPO,
    )
    os.close(secondary)
    seen = b""
    while True:
        try:
            chunk = os.read(primary, 65536)
        except OSError:  # the terminal closed: the process is done
            break
        if not chunk:
            break
        seen += chunk
    os.close(primary)
    assert process.wait(60) == 0, seen.decode(errors="replace")
    text = seen.decode(errors="replace")
    assert "\x1b[" in text  # drawn, not printed line by line
    assert "uploading" in text and "━" in text
    assert "uploading: " not in text  # the plain lines are for pipes only
    assert "model 'tty': ready" in text


def test_a_refused_deploy_prints_each_problem_and_exits_1(server, split_weights_program):
    first, _ = split_weights_program.ptds
    run = etrt("deploy", "refused", split_weights_program.pte, first, "--url", server.url)
    assert run.code == 1
    assert "error: 422" in run.err
    assert "external.missing_key" in run.err and "method 'forward' needs external data" in run.err
    with server.client() as client:
        assert client.get("/models/refused").status_code == 404


def test_deploy_replace_and_name_conflicts(server, linear_relu_program):
    assert etrt("deploy", "twice", linear_relu_program.pte, "--url", server.url).code == 0
    again = etrt("deploy", "twice", linear_relu_program.pte, "--url", server.url)
    assert again.code == 1 and "error: 409" in again.err
    replaced = etrt("deploy", "twice", linear_relu_program.pte, "--replace", "--url", server.url)
    assert replaced.code == 0, replaced.err


def test_deploy_a_second_version_serves_it_under_the_default_policy(server, linear_relu_program):
    assert etrt("deploy", "versioned", linear_relu_program.pte, "--url", server.url).code == 0
    run = etrt(
        "deploy", "versioned", linear_relu_program.pte, "--version", "2", "--json",
        "--url", server.url,
    )  # fmt: skip
    assert run.code == 0, run.err
    described = run.json()
    assert described["version"] == "2" and described["state"] == "ready"
    assert [(v["version"], v["state"]) for v in described["versions"]] == [
        ("1", "unavailable"),  # latest 1: only the newest serves
        ("2", "ready"),
    ]


def test_deploy_with_a_configuration_file(server, linear_relu_program, tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"instance_group": [{"count": 3}]}))
    run = etrt(
        "deploy", "configured", linear_relu_program.pte, "--config", config, "--json",
        "--url", server.url,
    )  # fmt: skip
    assert run.code == 0, run.err
    described = run.json()  # stdout is only the answer; the progress went to stderr
    assert "uploading: " in run.err
    assert described["config"]["instance_group"] == [{"count": 3}]


def test_infer_round_trip_over_binary_v2(server, linear_relu_program, mix_of_ops_program, tmp_path):
    env = {"ETRT_URL": server.url}
    assert etrt("deploy", "lin", linear_relu_program.pte, env=env).code == 0
    x = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    (tmp_path / "x.json").write_text(json.dumps(x.tolist()))
    expected = linear_relu_program.module(__import__("torch").from_numpy(x)).detach().numpy()
    for source in ("x.npy", "x.json"):
        out = tmp_path / f"out-{source}"
        run = etrt("infer", "lin", "--input", tmp_path / source, "--out", out, env=env)
        assert run.code == 0, run.err
        assert "output_0 FP32 [2, 3]" in run.out
        np.testing.assert_allclose(np.load(out / "output_0.npy"), expected, rtol=1e-5, atol=1e-6)
    run = etrt("infer", "lin", "--input", f"input_0={tmp_path / 'x.npy'}", "--json", env=env)
    [answer] = run.json()["outputs"]
    np.testing.assert_allclose(np.array(answer["data"]).reshape(2, 3), expected, rtol=1e-5)
    # A refused input: the server's problem, printed, exit 1.
    assert etrt("deploy", "mix", mix_of_ops_program.pte, env=env).code == 0
    np.save(tmp_path / "a.npy", np.ones((3, 8), np.float32))
    np.save(tmp_path / "i.npy", np.array([1, 2, 50], np.int64))
    run = etrt(
        "infer", "mix", "--input", tmp_path / "a.npy", "--input", tmp_path / "i.npy", env=env
    )
    assert run.code == 1 and "input.rejected" in run.err and "indices_ptr[2] 50" in run.err


def test_models_and_rm(server, linear_relu_program):
    env = {"ETRT_URL": server.url}
    assert etrt("deploy", "listed", linear_relu_program.pte, env=env).code == 0
    listed = etrt("models", env=env)
    assert listed.code == 0 and "listed\tready\tforward" in listed.out
    assert "listed" in {m["name"] for m in json.loads(etrt("models", "--json", env=env).out)}
    removed = etrt("rm", "listed", env=env)
    assert removed.code == 0 and "deleted 'listed'" in removed.out
    assert "listed\t" not in etrt("models", env=env).out
    again = etrt("rm", "listed", env=env)
    assert again.code == 1 and "error: 404" in again.err


def test_tokens_come_from_etrt_token(start_server, linear_relu_program, tmp_path):
    token_file = tmp_path / "admin"
    token_file.write_text("admin-token-cli-1234")
    secured = start_server("--admin-token-file", str(token_file))
    without = etrt("deploy", "m", linear_relu_program.pte, "--url", secured.url)
    assert without.code == 1 and "error: 401" in without.err
    env = {"ETRT_URL": secured.url, "ETRT_TOKEN": "admin-token-cli-1234"}
    assert etrt("deploy", "m", linear_relu_program.pte, env=env).code == 0
    assert etrt("rm", "m", env=env).code == 0


def test_a_server_that_is_not_there(linear_relu_program):
    run = etrt("models", "--url", f"http://127.0.0.1:{free_port()}")
    assert run.code == 1 and "cannot reach the server" in run.err


def test_serve_runs_the_server_with_its_flags(tmp_path):
    port = free_port()
    process = subprocess.Popen(
        [
            str(ETRT), "serve", "--port", str(port), "--grpc-port", "0",
            "--artifacts", str(tmp_path / "artifacts"),
        ],
        env=etrt_env(),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health/ready").status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.2)
        assert httpx.get(f"http://127.0.0.1:{port}/v2").json()["name"] == "etrt-server"
        assert (tmp_path / "artifacts" / "registry.sqlite3").exists()
    finally:
        process.send_signal(signal.SIGINT)
        log = process.communicate(timeout=30)[0].decode()
    assert process.returncode == 0, log
    usage = subprocess.run(
        [str(ETRT), "serve", "--help"], env=etrt_env(), capture_output=True, text=True
    )
    assert "--grpc-port" in usage.stdout and "--allow-unverified-plans" in usage.stdout


@pytest.mark.parametrize(
    "case",
    ["missing_key", "ptd_name", "not_a_program", "config"],
)
def test_check_gives_the_problems_a_server_answers(
    server, split_weights_program, linear_relu_program, tmp_path, case
):
    program, data, config = linear_relu_program.pte, [], None
    if case == "missing_key":
        program, data = split_weights_program.pte, split_weights_program.ptds[:1]
    elif case == "ptd_name":
        program = tmp_path / "model.ptd"
        program.write_bytes(linear_relu_program.pte.read_bytes())
    elif case == "not_a_program":
        program = tmp_path / "model.pte"
        program.write_bytes(b"\x00" * 64)
    else:
        config = tmp_path / "config.json"
        config.write_text(json.dumps({"max_batch_size": 4, "instance_group": [{"count": 0}]}))
    args = [program, *data] + (["--config", config] if config else [])
    checked = etrt("check", "--json", *args)
    assert checked.code == 1, checked.out + checked.err
    fields = {"config": config.read_text()} if config else None
    with server.client() as client:
        response = upload(client, "m", program, data, program_name=program.name, fields=fields)
    assert response.status_code == 422, response.text
    assert checked.json()["problems"] == response.json()["problems"]


def test_a_model_stored_but_not_runnable_there_exits_2(start_server, mixed_16):
    staging = start_server("--allow-unverified-plans")
    run = etrt("deploy", "unverified", mixed_16.pte, "--url", staging.url)
    assert run.code == 2, run.out + run.err
    assert "model 'unverified': unavailable" in run.out and "not runnable here" in run.out
