"""Device-planned program cases shared by the CPU run (host-memory stand-in for the GPU) and
the H200 run (CUDA memory).

The programs (support.trt_models.DEVICE_PLANNED_SET) plan the method's inputs and outputs in
CUDA memory. The host allocates those buffers through the device-memory seam it shares with
the TensorRTBackend delegate, copies request inputs in and results out; the delegate then sees
device tensors and binds them directly where planning put them on a 256-byte boundary. A test
module provides the `device_programs` fixture: {(model, alignment): TrtProgram}.

In-graph-copy programs (support.trt_models.IN_GRAPH_COPIES_SET) keep the method's inputs and
outputs in host memory and move the delegate's tensors with ExecuTorch's et_copy ops, which copy
through the CUDA DeviceAllocator the host registers over the same seam. A test module provides
the `copy_programs` fixture for InGraphCopiesCases.
"""

import ethost
import numpy as np
import pytest

from support.test_engine_provider import TestEngineProvider
from support.trt_host import labels, load_tensorrt_backend, new_delegate_counters
from support.trt_models import DEVICE_PLANNED_SET, IN_GRAPH_COPIES_SET

trt = load_tensorrt_backend()
T = trt.testing


def spec_id(spec):
    return "{}-a{}".format(*spec)


def load(program):
    return ethost.Program(str(program.pte)).load_method("forward")


class SelectedMemory:
    """Selects the device memory named by `memory_kind` and a fresh test engine provider."""

    memory_kind = "host"

    @pytest.fixture(autouse=True)
    def _memory(self):
        if self.memory_kind == "host":
            T.use_host_memory(reads_pageable_host=False)
        else:
            T.use_cuda_memory()
        assert trt.memory_kind() == self.memory_kind
        self.provider = TestEngineProvider()
        trt.set_engine_provider(self.provider)
        yield
        trt.set_engine_provider(None)


class DevicePlannedCases(SelectedMemory):
    @pytest.mark.parametrize("spec", DEVICE_PLANNED_SET, ids=spec_id)
    def test_method_meta_shows_cuda_buffers(self, device_programs, spec):
        meta = ethost.Program(str(device_programs[spec].pte)).method_meta("forward")
        assert [b["device"] for b in meta["planned_buffers"]] == ["cuda"]
        assert all(t["memory_planned"] for t in meta["inputs"] + meta["outputs"])
        assert meta["delegates"] == ["TensorRTBackend"]

    @pytest.mark.parametrize("spec", DEVICE_PLANNED_SET, ids=spec_id)
    def test_runs_end_to_end_and_matches_the_reference(self, device_programs, spec):
        program = device_programs[spec]
        method = load(program)
        kept = None
        for seed in range(3):
            inputs = program.example_inputs(seed)
            outputs = method.execute(inputs)
            assert isinstance(outputs[0], np.ndarray)
            np.testing.assert_allclose(
                outputs[0], program.reference(*inputs)[0], rtol=1e-5, atol=1e-5
            )
            if kept is None:
                kept = (outputs[0], outputs[0].copy())
        # results were copied out of the device buffer, not viewed: a later call leaves them be
        np.testing.assert_array_equal(kept[0], kept[1])
        assert not self.provider.misaligned

    @pytest.mark.parametrize("spec", DEVICE_PLANNED_SET, ids=spec_id)
    def test_planned_buffers_are_aligned_device_memory(self, device_programs, spec):
        program = device_programs[spec]
        method = load(program)
        method.execute(program.example_inputs())
        addresses = method.arena_addresses()
        assert addresses and all(a % 256 == 0 for a in addresses)
        assert all(T.is_device_pointer(a) for a in addresses)
        # every address the engine saw is device memory (planned or the delegate's staging)
        assert self.provider.addresses
        assert all(T.is_device_pointer(a) and a % 256 == 0 for _, a in self.provider.addresses)

    @pytest.mark.parametrize("spec", DEVICE_PLANNED_SET, ids=spec_id)
    def test_delegate_binds_planned_device_tensors_on_a_256_byte_boundary_directly(
        self, device_programs, spec
    ):
        """Zero staging copies proves the delegate recognizes the host's buffers as its own
        device memory; at 16-byte planning only the tensors off a boundary are staged."""
        program = device_programs[spec]
        before = labels(trt)
        method = load(program)
        method.execute(program.example_inputs())
        bindings = [b for d in new_delegate_counters(trt, before) for b in d["bindings"]]
        assert bindings
        staged = [b for b in bindings if b["staging_copies"]]
        if spec[1] == 256:
            assert staged == []
        else:
            assert staged and all(T.is_device_pointer(b["stage_address"]) for b in staged)

    def test_instances_get_their_own_device_buffers(self, device_programs):
        program = device_programs[DEVICE_PLANNED_SET[0]]
        instances = ethost.Program(str(program.pte)).instances("forward", 2)
        assert instances[0].arena_addresses() != instances[1].arena_addresses()
        for seed, method in enumerate(instances):
            inputs = program.example_inputs(seed)
            np.testing.assert_allclose(
                method.execute(inputs)[0], program.reference(*inputs)[0], rtol=1e-5, atol=1e-5
            )

    def test_wrong_input_refused_before_any_copy(self, device_programs):
        program = device_programs[DEVICE_PLANNED_SET[0]]
        inputs = program.example_inputs()
        inputs[1] = inputs[1][:-1]
        with pytest.raises(ethost.InputError) as e:
            load(program).execute(inputs)
        assert e.value.index == 1


class InGraphCopiesCases(SelectedMemory):
    @pytest.mark.parametrize("spec", IN_GRAPH_COPIES_SET, ids=spec_id)
    def test_method_meta_shows_host_io_and_a_cuda_buffer(self, copy_programs, spec):
        meta = ethost.Program(str(copy_programs[spec].pte)).method_meta("forward")
        assert sorted(b["device"] for b in meta["planned_buffers"]) == ["cpu", "cuda"]
        assert all(t["memory_planned"] for t in meta["inputs"] + meta["outputs"])
        assert set(meta["delegates"]) == {"TensorRTBackend"}

    @pytest.mark.parametrize("spec", IN_GRAPH_COPIES_SET, ids=spec_id)
    def test_runs_end_to_end_and_matches_the_reference(self, copy_programs, spec):
        program = copy_programs[spec]
        method = load(program)
        for seed in range(3):
            inputs = program.example_inputs(seed)
            outputs = method.execute(inputs)
            np.testing.assert_allclose(
                outputs[0], program.reference(*inputs)[0], rtol=1e-5, atol=1e-5
            )
        assert not self.provider.misaligned
        # every address the engine saw is 256-aligned device memory: the planned CUDA buffer
        # the copy ops filled, or the delegate's own staging
        assert self.provider.addresses
        assert all(a % 256 == 0 and T.is_device_pointer(a) for _, a in self.provider.addresses)

    @pytest.mark.parametrize("spec", IN_GRAPH_COPIES_SET, ids=spec_id)
    def test_arenas_are_aligned_and_only_the_delegate_side_is_on_the_device(
        self, copy_programs, spec
    ):
        method = load(copy_programs[spec])  # kept alive: its device buffer is freed with it
        addresses = method.arena_addresses()
        assert all(a % 256 == 0 for a in addresses)
        assert sorted(T.is_device_pointer(a) for a in addresses) == [False, True]

    @pytest.mark.parametrize("spec", IN_GRAPH_COPIES_SET, ids=spec_id)
    def test_delegate_binds_copied_tensors_on_a_256_byte_boundary_directly(
        self, copy_programs, spec
    ):
        program = copy_programs[spec]
        before = labels(trt)
        method = load(program)  # kept alive: counters are listed for live delegates only
        method.execute(program.example_inputs())
        bindings = [b for d in new_delegate_counters(trt, before) for b in d["bindings"]]
        assert bindings
        staged = [b for b in bindings if b["staging_copies"]]
        if spec[1] == 256:
            assert staged == []
        else:
            assert staged and all(T.is_device_pointer(b["stage_address"]) for b in staged)

    def test_instances_copy_into_their_own_device_buffers(self, copy_programs):
        program = copy_programs[IN_GRAPH_COPIES_SET[0]]
        instances = ethost.Program(str(program.pte)).instances("forward", 2)
        assert instances[0].arena_addresses() != instances[1].arena_addresses()
        for seed, method in enumerate(instances):
            inputs = program.example_inputs(seed)
            np.testing.assert_allclose(
                method.execute(inputs)[0], program.reference(*inputs)[0], rtol=1e-5, atol=1e-5
            )
