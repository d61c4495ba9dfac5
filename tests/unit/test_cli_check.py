"""`etrt check` through the installed console script: every class of ingest rule, offline.

The verdicts come from the server's own ingest run in the `etrt` process (and its load-check
child), so the rule ids are those of POST /models (tests/e2e/test_cli_e2e.py compares the
messages with a real server's); here each class of rule is met at least once, with the exit
status a CI pipeline reads and the --json shape it parses.
"""

import json
import shutil

import pytest

from service.cli import exits
from support.cli import TEST_BACKEND, etrt
from support.foreign_delegate import export_xnnpack_linear
from support.program_fixtures import (
    external_weights_program,
    linear_relu_program,
    split_weights_program,
)
from support.trt_program_fixtures import add_external, mixed_16

TOP_KEYS = {"verdict", "exit_code", "problems", "model", "not_verified", "target"}


def rules(run):
    return sorted(p["rule"] for p in run.json()["problems"])


def checked(*args, env=None, code):
    run = etrt("check", "--json", *args, env=env)
    assert run.code == code, run.out + run.err
    body = run.json()
    assert set(body) == TOP_KEYS and body["exit_code"] == code
    for problem in body["problems"]:
        assert set(problem) == {"file", "rule", "message"}
    return run


def test_an_acceptable_program_exits_0_with_the_model_description(linear_relu_program):
    body = checked(linear_relu_program.pte, code=0).json()
    assert body["verdict"] == "ok" and body["problems"] == [] and body["not_verified"] == []
    model = body["model"]
    assert model["state"] == "ready" and model["runnable"] is True
    assert [f["role"] for f in model["files"]] == ["program"]
    [method] = model["methods"]
    assert method["name"] == "forward" and method["delegates"] == []
    assert [(s["dtype"], s["shape"]) for s in method["inputs"]] == [("float32", [2, 4])]
    assert [(s["dtype"], s["shape"]) for s in method["outputs"]] == [("float32", [2, 3])]


def test_the_plain_report_names_the_verdict(linear_relu_program, external_weights_program):
    ok = etrt("check", linear_relu_program.pte)
    assert ok.code == 0 and ok.out.startswith("ok: program.pte would be accepted")
    refused = etrt("check", external_weights_program.pte)
    assert refused.code == 1 and refused.out.startswith("refused: program.pte (1 problem(s)")
    assert "external.missing_key" in refused.out


def test_name_rules(linear_relu_program, external_weights_program, tmp_path):
    misnamed = tmp_path / "model.PTD"
    shutil.copy(linear_relu_program.pte, misnamed)
    assert rules(checked(misnamed, code=1)) == ["program.ptd_name"]
    data = tmp_path / "bad name.ptd"
    shutil.copy(external_weights_program.ptds[0], data)
    run = checked(external_weights_program.pte, data, code=1)
    assert rules(run) == ["data.characters"]
    assert run.json()["problems"][0]["file"] == "bad name.ptd"
    assert rules(checked("--name", "no/slash", linear_relu_program.pte, code=1)) == [
        "model.characters"
    ]


def test_program_and_data_inspection(external_weights_program, tmp_path):
    garbage = tmp_path / "garbage.pte"
    garbage.write_bytes(b"\x00" * 64)
    assert rules(checked(garbage, code=1)) == ["program.invalid"]
    not_data = tmp_path / "other.ptd"
    not_data.write_bytes(b"not a data file")
    run = checked(external_weights_program.pte, *external_weights_program.ptds, not_data, code=1)
    assert rules(run) == ["data.invalid"]


def test_external_data_keys(split_weights_program, external_weights_program, tmp_path):
    first, _ = split_weights_program.ptds
    run = checked(split_weights_program.pte, first, code=1)
    assert rules(run) == ["external.missing_key"]
    assert "method 'forward' needs external data" in run.json()["problems"][0]["message"]
    copy = tmp_path / "copy.ptd"
    shutil.copy(external_weights_program.ptds[0], copy)
    run = checked(external_weights_program.pte, *external_weights_program.ptds, copy, code=1)
    assert set(rules(run)) == {"data.duplicate_key"}  # one problem per key


def test_model_configuration_rules(linear_relu_program, tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"dynamic_batching": {"max_queue_delay": 5}}))
    run = checked("--config", config, linear_relu_program.pte, code=1)
    assert rules(run) == ["config.unknown_key"]
    config.write_text("{not json")
    assert rules(checked("--config", config, linear_relu_program.pte, code=1)) == ["config.json"]
    config.write_text(json.dumps({"instance_group": [{"count": 3}]}))
    body = checked("--config", config, linear_relu_program.pte, code=0).json()
    assert body["model"]["config"]["instance_group"] == [{"count": 3}]


def test_the_isolated_load_step(programs_dir):
    # A delegate whose backend the checking configuration does not serve: only loading finds it.
    run = checked(export_xnnpack_linear(programs_dir), env={"ETRT_BACKENDS": "tensorrt"}, code=1)
    [problem] = run.json()["problems"]
    assert problem["rule"] == "program.load_failed" and "XnnpackBackend" in problem["message"]


def test_tensorrt_blob_layout(mixed_16, tmp_path):
    broken = tmp_path / "broken.pte"
    content = mixed_16.pte.read_bytes()
    assert content.count(b"TR01") == 1  # the two identical blobs share one segment
    broken.write_bytes(content.replace(b"TR01", b"TR09"))
    run = checked(broken, code=1)
    assert rules(run) == ["tensorrt.blob_invalid"] * 2


def test_the_newer_blob_rules_name_the_binding(mixed_16, tmp_path):
    from support.trt_programs import with_plans_rewritten

    damaged = with_plans_rewritten(
        mixed_16.pte,
        tmp_path / "damaged.pte",
        blob_fields={"aliased_io": [{"output": "output0", "input": "input0", "kind": "bogus"}]},
    )
    run = checked(damaged, code=1)
    assert rules(run) == ["tensorrt.alias_kind"] * 2
    message = run.json()["problems"][0]["message"]
    assert message.startswith("'damaged.pte' method 'forward' delegate ")
    assert "(binding 'output0')" in message and "kind must be" in message


def test_tensorrt_engine_keys(add_external):
    run = checked(add_external.pte, code=1)
    assert rules(run) == ["tensorrt.engine_key_missing"]


def test_plans_this_host_cannot_verify_exit_2_with_what_the_blob_records(mixed_16):
    body = checked(mixed_16.pte, code=2).json()
    assert body["verdict"] == "not_verifiable" and body["problems"] == []
    assert len(body["not_verified"]) == 2
    for index, entry in enumerate(body["not_verified"]):
        assert (entry["method"], entry["delegate"], entry["backend"]) == (
            "forward",
            index,
            "TensorRTBackend",
        )
        assert entry["rule"] == "tensorrt.unverifiable"
        assert "no TensorRT runtime module" in entry["reason"]
        assert entry["recorded"] == {
            "target_platform": "linux_x86_64",
            "hardware_compatible": False,
            "device_id": 0,
            "engine_source": "inline",
        }
        # The test plans are not TensorRT's: their magic says so.
        assert entry["plan"]["tensorrt_plan"] is False and entry["plan"]["plan_magic"] == "TEST"
    assert body["model"]["state"] == "unavailable" and body["model"]["runnable"] is False
    assert not any("ETRT_ALLOW_UNVERIFIED_PLANS" in w for w in body["model"]["warnings"])


def test_stripped_and_mismatched_plans_where_plans_can_be_verified(mixed_16, tmp_path):
    from support.trt_programs import with_plans_rewritten

    env = {"ETRT_BACKEND_SETUP": TEST_BACKEND}
    assert checked(mixed_16.pte, env=env, code=0).json()["model"]["state"] == "ready"
    stripped = with_plans_rewritten(
        mixed_16.pte,
        tmp_path / "stripped.pte",
        stats={"stripped_weights_size": 0, "total_weights_size": 4096},
    )
    assert rules(checked(stripped, env=env, code=1)) == ["tensorrt.weights_stripped"] * 2
    other_release = with_plans_rewritten(
        mixed_16.pte,
        tmp_path / "other_release.pte",
        test_tensorrt_log=[
            "IRuntime::deserializeCudaEngine: Error Code 6: API Usage Error (The engine plan "
            "file is not compatible with this version of TensorRT, expecting library version "
            "11.1.0.106 got 10.13.3.9, please rebuild.)"
        ],
    )
    assert rules(checked(other_release, env=env, code=1)) == ["tensorrt.version_mismatch"] * 2


def test_another_platform_is_refused_from_the_blob(mixed_16):
    run = checked("--gpu", "thor", mixed_16.pte, code=1)
    body = run.json()
    assert rules(run) == ["tensorrt.platform_mismatch"] * 2
    assert "built for linux_x86_64" in body["problems"][0]["message"]
    assert "will not load on linux_aarch64" in body["problems"][0]["message"]
    assert body["target"]["name"] == "thor" and body["target"]["platform"] == "linux_aarch64"
    assert body["target"]["compute_capability"] == "11.0"


def test_what_cannot_be_known_offline_exits_2(mixed_16):
    body = checked("--gpu", "h100", "--tensorrt-version", "11.1", mixed_16.pte, code=2).json()
    assert len(body["target"]["verdicts"]) == 6  # three aspects for each of two delegates
    by_aspect = {}
    for verdict in body["target"]["verdicts"]:
        by_aspect.setdefault(verdict["aspect"], set()).add(verdict["verdict"])
    assert by_aspect == {"platform": {"ok"}, "gpu": {"unknown"}, "tensorrt_version": {"unknown"}}
    assert any("cannot be known offline" in v["message"] for v in body["target"]["verdicts"])


def test_a_hardware_compatible_plan_is_judged_against_the_gpu(mixed_16, tmp_path):
    from support.trt_programs import with_plans_rewritten

    portable = with_plans_rewritten(
        mixed_16.pte, tmp_path / "portable.pte", blob_fields={"hardware_compatible": True}
    )
    env = {"ETRT_BACKEND_SETUP": TEST_BACKEND}
    body = checked("--gpu", "sm_89", portable, env=env, code=0).json()
    assert {v["verdict"] for v in body["target"]["verdicts"]} == {"ok"}
    run = checked("--gpu", "t4", portable, env=env, code=1)
    assert rules(run) == ["tensorrt.platform_mismatch"] * 2
    assert "needs compute 8.0 or newer" in run.json()["problems"][0]["message"]


def test_an_unknown_gpu_is_a_usage_error(mixed_16):
    run = etrt("check", "--gpu", "potato", mixed_16.pte)
    assert run.code == exits.USAGE and "named target" in run.err


def test_a_file_cut_short_is_named_by_its_own_name(tmp_path):
    """A half-copied program passes inspection up to where ExecuTorch's loader reads its size:
    the refusal quotes ExecuTorch, with the file named as the user has it, not the scratch
    folder's part-0 it was loaded from."""
    (tmp_path / "whole").mkdir()
    whole = export_xnnpack_linear(tmp_path / "whole")
    short = tmp_path / "short.pte"
    short.write_bytes(whole.read_bytes()[:-1])
    run = checked(short, code=1)
    [problem] = run.json()["problems"]
    assert problem["file"] == "short.pte", problem
    assert "'short.pte'" in problem["message"], problem
    assert "part-" not in problem["message"] and "etrt-check" not in problem["message"], problem
