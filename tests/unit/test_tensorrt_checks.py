"""The TensorRT ingest check on a host without TensorRT or a GPU (CI).

Blob reading goes through the backend's own parser (ethost_tensorrt.parse_blob), so these tests
need the built extension; deserializing real engines is covered on the H200. The check hands
deserializing to the isolated child as IsolatedWork; unit tests here call that child function
(verify_engine) themselves, and the run_ingest tests show the server process never does.
"""

import dataclasses
import hashlib
import os
import shutil
from pathlib import Path

import ethost_tensorrt
import pytest
from executorch.exir._serialize._program import deserialize_pte_binary

from service.backends.registry import ingest_backends
from service.backends.tensorrt.checks import (
    PLANNING_HINT,
    STRIPPED_HINT,
    check_tensorrt_delegate,
    placement_report,
    stripped_weights_problem,
    verify_engine,
)
from service.config import Settings
from service.ingest import pipeline
from service.ingest.delegates import IngestContext
from service.ingest.inspection import (
    DataFileInfo,
    DelegateInfo,
    MethodInfo,
    ProgramInfo,
    TensorValue,
    inspect_data_file,
    inspect_program,
)
from service.ingest.pipeline import IngestRefused, StagedFile, StagedUpload
from support import trt_blob
from support.test_engine_provider import TestEngineProvider
from support.trt_program_fixtures import add_external, mixed_16, mixed_256  # noqa: F401


@pytest.fixture(autouse=True)
def no_provider_installed():
    """As on a server whose backend setup installed the shipped provider: none but our own."""
    previous = ethost_tensorrt.engine_provider()
    ethost_tensorrt.set_engine_provider(None)
    yield
    ethost_tensorrt.set_engine_provider(previous)


@pytest.fixture(autouse=True)
def files_here(tmp_path, monkeypatch):
    """Hand-made contexts write their program and data files into the working directory."""
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def test_provider():
    """The test engine provider installed in the backend, standing in for TensorRT."""
    provider = TestEngineProvider()
    ethost_tensorrt.set_engine_provider(provider)
    return provider


# --- the stripped-weights rule on TensorRT's stat values -----------------------------------------


@pytest.mark.parametrize(
    "stripped, total",
    [
        (-1, 4096),  # not marked stripped
        (-1, 0),
        (4096, 4096),  # built with STRIP_PLAN, nothing could be stripped
        (0, 0),  # an engine without weights
    ],
)
def test_plans_with_their_weights_pass(stripped, total):
    assert stripped_weights_problem(stripped, total) is None


@pytest.mark.parametrize(
    "stripped, total",
    [
        (0, 4096),  # every weight stripped
        (1024, 4096),  # some weights stripped
        (4095, 4096),
    ],
)
def test_plans_missing_weights_are_refused(stripped, total):
    problem = stripped_weights_problem(stripped, total)
    assert problem.startswith(STRIPPED_HINT)
    assert f"holds {stripped} of its {total} weight bytes" in problem


# --- blobs in the layout Torch-TensorRT documents ------------------------------------------------


def _metadata(engine_key=None, aliased=(), inputs=("x",), outputs=("output0",)):
    return trt_blob.metadata(
        [(n, True) for n in inputs] + [(n, False) for n in outputs],
        aliased_io=aliased,
        engine_key=engine_key,
    )


def make_blob(metadata, engine=b""):
    return trt_blob.make_blob(metadata, engine)


def _method(call_args, offsets, name="forward"):
    tensors = {
        value: TensorValue(value, 6, (4, 4), None if offset is None else 1, offset, None)
        for value, offset in zip(call_args, offsets)
    }
    return MethodInfo(name, [call_args[0]], [call_args[-1]], tensors, [], [4096])


def _context(blob, call_args=(0, 1), offsets=(0, 256), data=None, allow=False):
    """The blob stands for the whole program file; data files hold their entries back to back."""
    method = _method(list(call_args), list(offsets))
    delegate = DelegateInfo("forward", 0, "TensorRTBackend", blob, 0, list(call_args))
    method.delegates.append(delegate)
    Path("model.pte").write_bytes(blob)
    files = {}
    for file_name, entries in (data or {}).items():
        joined, spans = b"", {}
        for key, value in entries.items():
            spans[key] = (len(joined), len(joined) + len(value))
            joined += value
        Path(file_name).write_bytes(joined)
        files[file_name] = (Path(file_name), DataFileInfo(list(entries), spans))
    context = IngestContext(
        Settings(allow_unverified_plans=allow),
        "model.pte",
        ProgramInfo([method]),
        Path("model.pte"),
        files,
    )
    return delegate, context


def _verified(report):
    """Does what the isolated child does with the check's work, then applies the answer."""
    report.isolated.finish(verify_engine(report.isolated.request))
    return report


def _rules(report):
    return [p.rule for p in report.problems]


def test_an_invalid_blob_is_refused_with_the_parsers_reason():
    delegate, context = _context(b"TR03" + bytes(60))
    report = check_tensorrt_delegate(delegate, context)
    assert _rules(report) == ["tensorrt.blob_invalid"]
    message = report.problems[0].message
    assert message.startswith(
        "'model.pte' method 'forward' delegate 0 (TensorRTBackend): the delegate blob is invalid: "
    )
    assert "TR03" in message or "magic" in message


def test_a_short_blob_is_refused():
    delegate, context = _context(b"TR01")
    assert _rules(check_tensorrt_delegate(delegate, context)) == ["tensorrt.blob_invalid"]


def test_a_missing_engine_key_names_the_key_and_the_delegate():
    engine = b"ftrt" + bytes(60)
    key = hashlib.sha256(engine).hexdigest() + "_trt_engine"
    delegate, context = _context(
        make_blob(_metadata(engine_key=key)), data={"other.ptd": {"some.weight": bytes(16)}}
    )
    report = check_tensorrt_delegate(delegate, context)
    assert _rules(report) == ["tensorrt.engine_key_missing"]
    message = report.problems[0].message
    assert "method 'forward' delegate 0 (TensorRTBackend)" in message
    assert repr(key) in message
    assert report.details["engine_source"] == {"data_file": None, "engine_key": key}


def test_an_engine_found_by_key_is_looked_up_in_the_ptd_and_marks_it_used():
    engine = b"ftrt" + bytes(60)
    key = hashlib.sha256(engine).hexdigest() + "_trt_engine"
    delegate, context = _context(
        make_blob(_metadata(engine_key=key)), data={"engines.ptd": {key: engine}}
    )
    report = check_tensorrt_delegate(delegate, context)
    assert report.details["engine_source"] == {"data_file": "engines.ptd", "engine_key": key}
    assert key in context.used_keys
    # On this host the engine itself cannot be checked: that, and only that, is the refusal.
    assert _rules(report) == ["tensorrt.unverifiable"]


# --- this host has no TensorRT / no CUDA device --------------------------------------------------


def test_without_tensorrt_an_upload_is_refused_naming_the_option():
    delegate, context = _context(make_blob(_metadata(), engine=b"ftrt" + bytes(60)))
    report = check_tensorrt_delegate(delegate, context)
    assert _rules(report) == ["tensorrt.unverifiable"]
    message = report.problems[0].message
    assert "this host cannot verify TensorRT plans (no TensorRT runtime module" in message
    assert "ETRT_ALLOW_UNVERIFIED_PLANS=1 (--allow-unverified-plans)" in message
    assert report.details["verified"] is False


def test_allowing_unverified_plans_stores_the_model_as_not_runnable():
    delegate, context = _context(make_blob(_metadata(), engine=b"ftrt" + bytes(60)), allow=True)
    report = check_tensorrt_delegate(delegate, context)
    assert report.problems == []
    assert report.details["verified"] is False
    assert report.details["runnable"] is False
    assert report.details["unavailable_reason"].startswith(
        "TensorRT plans cannot run on this host: no TensorRT runtime module"
    )
    assert any("stored without verification" in w for w in report.warnings)


def test_blob_and_key_problems_are_still_found_when_unverified_plans_are_allowed():
    delegate, context = _context(make_blob(_metadata(engine_key="k_trt_engine")), allow=True)
    assert _rules(check_tensorrt_delegate(delegate, context)) == ["tensorrt.engine_key_missing"]


# --- placement of planned delegate buffers --------------------------------------------------------


def _placement(call_args, offsets, metadata):
    method = _method(list(call_args), list(offsets))
    delegate = DelegateInfo("forward", 0, "TensorRTBackend", b"", 0, list(call_args))
    return placement_report(method, delegate, metadata)


def test_buffers_on_the_boundary_need_no_copies():
    report = _placement((3, 7), (0, 512), _metadata())
    assert report["expected_staging_copies_per_call"] == 0
    assert [(b["binding"], b["aligned"]) for b in report["buffers"]] == [
        ("x", True),
        ("output0", True),
    ]
    assert "hint" not in report


def test_buffers_off_the_boundary_cost_a_copy_each_and_get_the_hint():
    report = _placement((3, 7), (16, 528), _metadata())
    assert report["expected_staging_copies_per_call"] == 2
    assert PLANNING_HINT in report["hint"]
    assert "(x, output0)" in report["hint"]


def test_unplanned_tensors_are_reported_but_not_counted():
    report = _placement((3, 7), (None, 16), _metadata())
    assert [b["aligned"] for b in report["buffers"]] == [None, False]
    assert report["expected_staging_copies_per_call"] == 1


def test_an_input_updated_in_place_costs_two_copies_and_elided_outputs_are_matched():
    # Inputs x, cache; outputs output0 and new_cache (updating cache), new_cache elided.
    metadata = _metadata(
        inputs=("x", "cache"), outputs=("output0", "new_cache"), aliased=[("new_cache", "cache")]
    )
    report = _placement((1, 2, 3), (0, 272, 512), metadata)
    assert [b["binding"] for b in report["buffers"]] == ["x", "cache", "output0"]
    assert report["expected_staging_copies_per_call"] == 2


def test_an_aliased_output_that_is_passed_keeps_every_name():
    metadata = _metadata(
        inputs=("x", "cache"), outputs=("output0", "new_cache"), aliased=[("new_cache", "cache")]
    )
    report = _placement((1, 2, 3, 4), (0, 256, 512, 784), metadata)
    assert [b["binding"] for b in report["buffers"]] == ["x", "cache", "output0", "new_cache"]
    assert report["expected_staging_copies_per_call"] == 1


def test_the_placement_report_is_part_of_the_delegate_details_and_warnings():
    delegate, context = _context(
        make_blob(_metadata(), engine=b"ftrt" + bytes(60)), offsets=(16, 256), allow=True
    )
    report = check_tensorrt_delegate(delegate, context)
    assert report.details["placement"]["expected_staging_copies_per_call"] == 1
    assert any(PLANNING_HINT in w for w in report.warnings)


# --- engines verified through the installed provider (the test engine provider stands in) ------


def _plan_context(stats=None, declared=None, plan=None):
    plan_io = [trt_blob.io("x", True, [2, 4]), trt_blob.io("output0", False, [2, 4])]
    plan = (
        plan
        if plan is not None
        else trt_blob.plan_bytes("scale", plan_io, **({"stats": stats} if stats else {}))
    )
    names = declared or [("x", True), ("output0", False)]
    return _context(trt_blob.make_blob(trt_blob.metadata(names), plan))


def test_a_verified_engine_is_recorded_in_the_description(test_provider):
    delegate, context = _plan_context(
        stats={
            "stripped_weights_size": -1,
            "total_weights_size": 4096,
            "refittable": True,
            "device_memory_size": 512,
        }
    )
    report = check_tensorrt_delegate(delegate, context)
    assert test_provider.deserialized == 0  # the check only asks for it, in the child
    assert report.isolated.request["offset"] > 0 and report.isolated.request["size"] > 0
    _verified(report)
    assert report.problems == []
    assert report.details["verified"] is True
    engine = report.details["engine"]
    assert {
        k: engine[k]
        for k in (
            "weight_bytes",
            "stripped_weights_size",
            "refittable",
            "device_memory_size",
            "device",
        )
    } == {
        "weight_bytes": 4096,
        "stripped_weights_size": -1,
        "refittable": True,
        "device_memory_size": 512,
        "device": 0,
    }
    assert [(b["name"], b["is_input"], b["dtype"]) for b in engine["bindings"]] == [
        ("x", True, "float32"),
        ("output0", False, "float32"),
    ]
    assert test_provider.deserialized == 1


@pytest.mark.parametrize("stripped, refused", [(-1, False), (0, True), (1000, True), (4096, False)])
def test_the_stripped_rule_is_applied_to_the_engines_stats(test_provider, stripped, refused):
    delegate, context = _plan_context(
        stats={"stripped_weights_size": stripped, "total_weights_size": 4096}
    )
    report = _verified(check_tensorrt_delegate(delegate, context))
    assert _rules(report) == (["tensorrt.weights_stripped"] if refused else [])
    if refused:
        assert (
            f"method 'forward' delegate 0 (TensorRTBackend): the TensorRT plan was {STRIPPED_HINT}"
        ) in report.problems[0].message
    assert report.details["engine"]["stripped_weights_size"] == stripped


def test_a_plan_the_provider_cannot_deserialize_is_refused_with_its_reason(test_provider):
    delegate, context = _plan_context(plan=b"ftrt-not-a-test-plan")
    report = _verified(check_tensorrt_delegate(delegate, context))
    assert _rules(report) == ["tensorrt.plan_invalid"]
    assert "not a test plan" in report.problems[0].message


@pytest.mark.parametrize(
    "logged, rule, says",
    [
        (
            "IRuntime::deserializeCudaEngine: Error Code 6: API Usage Error (The engine plan file "
            "is not compatible with this version of TensorRT, expecting library version "
            "11.1.0.106 got 10.13.3.9, please rebuild.)",
            "tensorrt.version_mismatch",
            "this server runs (TensorRT 11.1.0.test); re-export it with the Torch-TensorRT release "
            "built on TensorRT 11.1,",
        ),
        (
            "IRuntime::deserializeCudaEngine: Error Code 6: API Usage Error (The engine plan file "
            "is generated on an incompatible device, expecting compute 9.0 got compute 8.9, please "
            "rebuild.)",
            "tensorrt.platform_mismatch",
            "with TensorRT 11.1.0.test; the blob records target_platform 'linux_x86_64', "
            "hardware_compatible False); re-export it on the target GPU and platform",
        ),
    ],
)
def test_a_plan_for_another_tensorrt_or_gpu_gets_its_own_rule(test_provider, logged, rule, says):
    plan_io = [trt_blob.io("x", True, [2, 4]), trt_blob.io("output0", False, [2, 4])]
    delegate, context = _plan_context(
        plan=trt_blob.plan_bytes("scale", plan_io, test_tensorrt_log=[logged])
    )
    report = _verified(check_tensorrt_delegate(delegate, context))
    assert _rules(report) == [rule]
    message = report.problems[0].message
    assert message.startswith(
        "method 'forward' delegate 0 (TensorRTBackend): the TensorRT plan was built "
    )
    assert says in message
    assert message.endswith(
        f"TensorRT said: TensorRT could not deserialize the plan "
        f"({report.isolated.request['size']} bytes) on CUDA device 0: "
        f"{logged}"
    )


def test_blob_bindings_that_do_not_match_the_engine_are_refused(test_provider):
    delegate, context = _plan_context(declared=[("x", True), ("y", False)])
    report = _verified(check_tensorrt_delegate(delegate, context))
    assert _rules(report) == ["tensorrt.bindings_mismatch"]
    assert "['output0', 'x']" in report.problems[0].message
    assert "binding(s) 'output0', 'y' differ" in report.problems[0].message


def test_a_binding_count_other_than_the_engines_is_refused_with_both_counts(test_provider):
    delegate, context = _plan_context(declared=[("x", True), ("output0", False), ("extra", False)])
    report = _verified(check_tensorrt_delegate(delegate, context))
    assert _rules(report) == ["tensorrt.bindings_mismatch"]
    message = report.problems[0].message
    assert message.startswith("'model.pte' method 'forward' delegate 0 (TensorRTBackend): ")
    assert "the blob names 3 bindings, the engine has 2 I/O tensors; binding(s) 'extra'" in message


def test_a_shape_tensor_input_is_refused_naming_it(test_provider):
    plan_io = [
        {**trt_blob.io("x", True, [2, 4]), "shape_tensor": True},
        trt_blob.io("output0", False, [2, 4]),
    ]
    delegate, context = _plan_context(plan=trt_blob.plan_bytes("scale", plan_io))
    report = _verified(check_tensorrt_delegate(delegate, context))
    assert _rules(report) == ["tensorrt.shape_tensor_input"]
    assert "binding 'x' is a shape-tensor input" in report.problems[0].message
    assert report.problems[0].message.startswith("'model.pte' method 'forward'")


# --- real programs delegated to TensorRTBackend (exported with the test stand-in backend) -------


def _reports(program, data_files=(), allow=False):
    info = inspect_program(program.pte)
    files = {Path(p).name: (Path(p), inspect_data_file(Path(p))) for p in data_files}
    context = IngestContext(
        Settings(allow_unverified_plans=allow), "model.pte", info, program.pte, files
    )
    return [(d, check_tensorrt_delegate(d, context)) for m in info.methods for d in m.delegates]


def _unaligned_offsets_by_executorch(pte):
    """Ground truth from ExecuTorch's own deserializer: offsets of every delegate call's args."""
    plan = deserialize_pte_binary(pte.read_bytes()).program.execution_plan[0]
    offsets = []
    for instruction in plan.chains[0].instructions:
        args = getattr(instruction.instr_args, "args", None)
        if args is None or not hasattr(instruction.instr_args, "delegate_index"):
            continue
        for value in args:
            allocation = getattr(plan.values[value].val, "allocation_info", None)
            if allocation is not None:
                offsets.append(allocation.memory_offset_low + (allocation.memory_offset_high << 32))
    return offsets


def test_256_byte_planning_puts_every_delegate_buffer_on_the_boundary(mixed_256):
    reports = _reports(mixed_256, allow=True)
    assert len(reports) == 2
    for _, report in reports:
        placement = report.details["placement"]
        assert placement["expected_staging_copies_per_call"] == 0
        assert placement["buffers"] and all(b["aligned"] for b in placement["buffers"])
        assert not any(PLANNING_HINT in w for w in report.warnings)
    assert all(o % 256 == 0 for o in _unaligned_offsets_by_executorch(mixed_256.pte))


def test_16_byte_planning_is_reported_with_copies_and_the_hint(mixed_16):
    reports = _reports(mixed_16, allow=True)
    expected = sum(o % 256 != 0 for o in _unaligned_offsets_by_executorch(mixed_16.pte))
    assert expected > 0  # otherwise this program does not show what the test is about
    copies = sum(r.details["placement"]["expected_staging_copies_per_call"] for _, r in reports)
    assert copies == expected
    assert any(PLANNING_HINT in w for _, r in reports for w in r.warnings)
    offsets = [b["offset"] for _, r in reports for b in r.details["placement"]["buffers"]]
    assert offsets == _unaligned_offsets_by_executorch(mixed_16.pte)


def test_an_engine_in_the_ptd_is_found_by_its_key(add_external):
    [(delegate, report)] = _reports(add_external, add_external.data_files, allow=True)
    assert report.problems == []
    key = report.details["engine_source"]["engine_key"]
    assert key.endswith("_trt_engine")
    assert report.details["engine_source"]["data_file"] == add_external.data_files[0].name


def test_an_engine_key_missing_from_the_upload_is_refused(add_external):
    [(_, report)] = _reports(add_external, allow=True)
    assert _rules(report) == ["tensorrt.engine_key_missing"]
    assert (
        "method 'forward' delegate 0 (TensorRTBackend) needs engine_key '"
        in report.problems[0].message
    )


def test_real_engines_are_verified_through_the_installed_provider(test_provider, mixed_256):
    reports = [(d, _verified(r)) for d, r in _reports(mixed_256)]
    assert [_rules(r) for _, r in reports] == [[], []]
    assert all(r.details["verified"] for _, r in reports)
    assert [b["name"] for b in reports[0][1].details["engine"]["bindings"]] == [
        "input0",
        "input1",
        "output0",
    ]


def _stage(program, directory):
    directory.mkdir()

    def staged(source, name):
        target = directory / f"upload-{name}"
        shutil.copyfile(source, target)
        data = target.read_bytes()
        return StagedFile(name, target, len(data), hashlib.sha256(data).hexdigest())

    return StagedUpload(
        "trt_model",
        False,
        directory,
        staged(program.pte, "model.pte"),
        [staged(p, Path(p).name) for p in program.data_files],
    )


def test_an_uploaded_tensorrt_program_is_refused_on_this_cpu_host(tmp_path, add_external):
    upload = _stage(add_external, tmp_path / "staging")
    with pytest.raises(IngestRefused) as refused:
        run_ingest(upload, Settings(artifacts=tmp_path / "artifacts"))
    [problem] = refused.value.problems
    assert problem.rule == "tensorrt.unverifiable"
    assert problem.file == "model.pte"
    assert "this host cannot verify TensorRT plans (no TensorRT runtime module" in problem.message
    assert "ETRT_ALLOW_UNVERIFIED_PLANS=1 (--allow-unverified-plans)" in problem.message
    assert (tmp_path / "staging" / "upload-model.pte").exists()  # the pipeline moved nothing


def test_placement_says_which_buffers_live_in_host_and_which_in_device_memory(
    mixed_256, programs_dir
):
    # On a discrete GPU host buffers cross to the device every call whatever their alignment;
    # buffers planned in device memory do not. The report tells the two apart.
    from support.trt_programs import export_trt_program

    device_planned = export_trt_program(programs_dir, "add", alignment=256, device_planned=True)
    for program, memory in ((mixed_256, "cpu"), (device_planned, "cuda")):
        for _, report in _reports(program, allow=True):
            placement = report.details["placement"]
            assert placement["buffers"]
            assert {b["memory"] for b in placement["buffers"]} == {memory}
            assert placement["host_memory_buffers"] == (
                len(placement["buffers"]) if memory == "cpu" else 0
            )


def test_an_engine_in_the_ptd_is_read_by_the_child_from_its_file_range(test_provider, add_external):
    [(_, report)] = _reports(add_external, add_external.data_files)
    request = report.isolated.request
    assert request["file"] == str(add_external.data_files[0])
    assert _verified(report).problems == [] and report.details["engine"]["bindings"]


# --- the server process never deserializes an uploaded plan ---------------------------------------


def run_ingest(upload, settings):
    """As the dataplane calls it, with the enabled backends' checks and setups."""
    return pipeline.run_ingest(upload, settings, ingest_backends(settings))


TEST_BACKEND = ("support.test_backend_setup:install_test_backend",)


def test_run_ingest_verifies_plans_only_in_the_isolated_child(tmp_path, test_provider, mixed_256):
    description = run_ingest(
        _stage(mixed_256, tmp_path / "staging"),
        Settings(artifacts=tmp_path / "artifacts", backend_setup=TEST_BACKEND),
    )
    engines = [d["details"]["engine"] for m in description.methods for d in m["delegates"]]
    assert len(engines) == 2 and all(e["bindings"] for e in engines)
    assert test_provider.deserialized == 0  # this process's provider: the server's
    # The backend documents every detail its check writes into descriptions.
    from service.backends.tensorrt.plugin import BACKEND

    details = {key for m in description.methods for d in m["delegates"] for key in d["details"]}
    assert details and details <= set(BACKEND.description_fields)


def test_one_child_per_upload_deserializes_each_plan_once(
    tmp_path, monkeypatch, test_provider, mixed_256
):
    from service.ingest import load_check

    log = tmp_path / "deserialized.log"
    monkeypatch.setenv("ETRT_TEST_DESERIALIZE_LOG", str(log))
    started = load_check.children_started
    description = run_ingest(
        _stage(mixed_256, tmp_path / "staging"),
        Settings(artifacts=tmp_path / "artifacts", backend_setup=TEST_BACKEND),
    )
    assert load_check.children_started - started == 1
    # Two plans, each verified by the check and then loaded by its delegate: one deserialization
    # each, in one process other than this one.
    lines = log.read_text().splitlines()
    assert len(lines) == 2 and len({line.split()[0] for line in lines}) == 1
    assert lines[0].split()[0] != str(os.getpid())
    assert description.methods and all(m["inputs"] for m in description.methods)


def test_a_plan_crashing_its_deserializer_is_refused_and_this_process_lives_on(
    tmp_path, test_provider, mixed_256
):
    # Were the plan deserialized here, os.abort() would end the test run.
    from support.trt_programs import with_plans_rewritten

    crashing = with_plans_rewritten(
        mixed_256.pte, tmp_path / "crash.pte", test_abort_on_deserialize=True
    )
    upload = _stage(dataclasses.replace(mixed_256, pte=crashing), tmp_path / "staging")
    with pytest.raises(IngestRefused) as refused:
        run_ingest(upload, Settings(artifacts=tmp_path / "artifacts", backend_setup=TEST_BACKEND))
    assert [p.rule for p in refused.value.problems] == ["delegate.check_crashed"] * 2
    assert "was killed by signal SIGABRT" in refused.value.problems[0].message
    assert (tmp_path / "staging" / "upload-model.pte").exists()  # the pipeline moved nothing
