import pytest
from executorch.exir._serialize._program import deserialize_pte_binary

from service.ingest.inspection import (
    InspectionError,
    inspect_data_file,
    inspect_program,
    method_meta,
)
from support.foreign_delegate import export_xnnpack_linear
from support.program_fixtures import (
    dynamic_batch_program,
    external_weights_program,  # noqa: F401
    linear_relu_program,
    mix_of_ops_program,
    split_weights_program,
    two_methods_program,
)

# slow (left out of the quick lane, docs/development.md): exports programs (fixtures picked by name
# in parametrized tests)
pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def xnnpack_program(programs_dir):
    return export_xnnpack_linear(programs_dir)


def reference(path):
    return deserialize_pte_binary(path.read_bytes()).program


def test_methods_inputs_outputs_and_planning_match_executorch(linear_relu_program):
    info = inspect_program(linear_relu_program.pte)
    plan = reference(linear_relu_program.pte).execution_plan[0]
    [method] = info.methods
    assert method.name == plan.name == "forward"
    assert method.inputs == list(plan.inputs) and method.outputs == list(plan.outputs)
    assert method.planned_buffer_sizes == list(plan.non_const_buffer_sizes)
    assert method.delegates == [] and method.external_keys == []
    for index, value in enumerate(plan.values):
        tensor = getattr(value.val, "sizes", None) is not None and value.val
        if tensor:
            got = method.tensors[index]
            assert list(got.sizes) == list(tensor.sizes)
            if tensor.allocation_info is not None:
                assert got.memory_id == tensor.allocation_info.memory_id
                assert got.memory_offset == tensor.allocation_info.memory_offset_low


def test_external_weights_keys_are_the_data_files_keys(external_weights_program):
    [method] = inspect_program(external_weights_program.pte).methods
    [ptd] = external_weights_program.ptds
    data = inspect_data_file(ptd)
    assert method.external_keys == sorted(data.keys)
    assert set(data.keys) == {"first.weight", "first.bias", "second.weight", "second.bias"}
    weight = external_weights_program.module.first.weight.detach().numpy()
    start, end = data.span("first.weight")
    assert ptd.read_bytes()[start:end] == weight.tobytes()
    assert data.span("missing") is None


def test_split_weights_spread_over_two_files(split_weights_program):
    [method] = inspect_program(split_weights_program.pte).methods
    keys = [set(inspect_data_file(p).keys) for p in split_weights_program.ptds]
    assert len(keys) == 2 and not keys[0] & keys[1]
    assert set(method.external_keys) == keys[0] | keys[1]


def test_two_methods(two_methods_program):
    assert [m.name for m in inspect_program(two_methods_program.pte).methods] == [
        "forward",
        "triple",
    ]


def test_delegate_id_blob_and_call_args_match_executorch(xnnpack_program):
    [method] = inspect_program(xnnpack_program).methods
    program = reference(xnnpack_program)
    plan = program.execution_plan[0]
    assert [d.backend_id for d in method.delegates] == [d.id for d in plan.delegates]
    assert method.delegates[0].backend_id == "XnnpackBackend"
    delegate = method.delegates[0]
    assert delegate.method == "forward" and delegate.index == 0
    assert len(delegate.blob) > 0
    data = xnnpack_program.read_bytes()
    assert data[delegate.blob_offset : delegate.blob_offset + len(delegate.blob)] == delegate.blob
    call = next(
        i.instr_args
        for c in plan.chains
        for i in c.instructions
        if hasattr(i.instr_args, "delegate_index")
    )
    assert delegate.call_args == list(call.args)


@pytest.mark.parametrize(
    "fixture",
    [
        "linear_relu_program",
        "dynamic_batch_program",
        "mix_of_ops_program",
        "two_methods_program",
        "external_weights_program",
    ],
)
def test_method_meta_read_from_the_file_is_the_native_hosts(request, fixture):
    import ethost

    exported = request.getfixturevalue(fixture)
    program = ethost.Program(str(exported.pte), [str(p) for p in exported.ptds])
    methods = inspect_program(exported.pte).methods
    assert [m.name for m in methods] == program.method_names
    for method in methods:
        assert method_meta(method) == program.method_meta(method.name)


def test_method_meta_of_a_delegated_method_without_loading_it(xnnpack_program):
    [method] = inspect_program(xnnpack_program).methods
    meta = method_meta(method)
    assert meta["delegates"] == ["XnnpackBackend"]
    [x] = meta["inputs"]
    assert (x["tag"], x["dtype"], x["dynamic"]) == ("Tensor", "float32", False)


@pytest.mark.parametrize(
    "content,fragment",
    [
        (b"", "empty"),
        (b"\x00" * 3, "file identifier"),
        (b"garbage!" * 10, "file identifier"),
        (b"\x10\x00\x00\x00ET12" + b"\xff" * 8, "outside the file"),
    ],
)
def test_invalid_programs_raise_inspection_error(tmp_path, content, fragment):
    path = tmp_path / "bad.pte"
    path.write_bytes(content)
    with pytest.raises(InspectionError, match=fragment):
        inspect_program(path)


def test_a_data_file_is_not_a_program_and_vice_versa(external_weights_program):
    with pytest.raises(InspectionError, match="not an ExecuTorch program"):
        inspect_program(external_weights_program.ptds[0])
    with pytest.raises(InspectionError, match="not an ExecuTorch data file"):
        inspect_data_file(external_weights_program.pte)


def test_truncated_files_are_refused(tmp_path, external_weights_program, xnnpack_program):
    for source, reader in (
        (external_weights_program.ptds[0], inspect_data_file),
        (xnnpack_program, inspect_program),
    ):
        data = source.read_bytes()
        path = tmp_path / source.name
        path.write_bytes(data[: len(data) // 2])
        with pytest.raises(InspectionError):
            reader(path)
