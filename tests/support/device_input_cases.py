"""Inputs that live in device memory (service.shm.device_array.DeviceArray, what a CUDA shared
memory input becomes in the engine), handed to the native host; cases shared by the CPU run
(host-memory stand-in for the GPU) and the H200 run (CUDA memory).

Where the input goes depends on the program: one it leaves out of memory planning
(UNPLANNED_INPUTS_SET) reaches the TensorRT delegate as the device address itself, bound
directly on a 256-byte boundary and staged (counted) off it; one planned in device memory
(DEVICE_PLANNED_SET) is copied device to device; one planned in host memory (GPU_SET) is
copied from the device into it. ethost.device_input_counts() says which happened.

An unplanned input that CPU kernels read ("cpu_unplanned", linear + relu on the CPU) is never
handed over as device memory: it is copied into a host buffer first.

A test module provides the `device_input_programs` fixture: {"unplanned" | "device_planned" |
"host_planned": TrtProgram, "cpu_unplanned": Path of a .pte}.
"""

import ethost
import numpy as np
import pytest

from service.shm.device_array import DeviceArray
from support.device_planned_cases import SelectedMemory, T, load, trt
from support.staging_cases import DeviceArena, put
from support.trt_host import labels, new_delegate_counters


def counts_since(before):
    after = ethost.device_input_counts()
    return {key: after[key] - before[key] for key in after}


class DeviceInputCases(SelectedMemory):
    @pytest.fixture(autouse=True)
    def _arena(self, _memory):
        self.arena = DeviceArena()
        yield
        self.arena.free()

    def on_device(self, arrays, misalign=0):
        placed = []
        for array in arrays:
            address = self.arena.buf(array.nbytes, misalign)
            put(address, array)
            placed.append(DeviceArray(address, array.shape, array.dtype, 0))
        self.placed = placed
        return placed

    def run(self, program, misalign=0, seed=0):
        """Runs once on device inputs; returns the bindings of the delegates it made and what
        the host did with the inputs."""
        before_labels, before = labels(trt), ethost.device_input_counts()
        method = load(program)
        inputs = program.example_inputs(seed)
        [output] = method.execute(self.on_device(inputs, misalign))
        np.testing.assert_allclose(output, program.reference(*inputs)[0], rtol=1e-5, atol=1e-5)
        delegates = new_delegate_counters(trt, before_labels)
        return [b for d in delegates for b in d["bindings"]], counts_since(before)

    def test_unplanned_aligned_inputs_are_bound_with_no_copy(self, device_input_programs):
        program = device_input_programs["unplanned"]
        meta = ethost.Program(str(program.pte)).method_meta("forward")
        assert not any(t["memory_planned"] for t in meta["inputs"])
        assert load(program).inputs_read_in_device_memory == [True, True]
        bindings, counts = self.run(program)
        inputs = [b for b in bindings if b["is_input"]]
        assert [b["direct_calls"] for b in inputs] == [1, 1]
        assert [b["staging_copies"] for b in inputs] == [0, 0]
        assert counts == {"bound": 2, "device_to_device": 0, "to_host": 0}
        # the engine was given the caller's own device addresses, not copies of them
        bound = {address for _, address in self.provider.addresses}
        assert {x.address for x in self.placed} <= bound

    def test_unplanned_inputs_16_bytes_off_a_boundary_are_staged_and_counted(
        self, device_input_programs
    ):
        bindings, counts = self.run(device_input_programs["unplanned"], misalign=16)
        inputs = [b for b in bindings if b["is_input"]]
        assert [b["staging_copies"] for b in inputs] == [1, 1]
        assert [b["misaligned_copies"] for b in inputs] == [1, 1]
        assert [b["staged_calls"] for b in inputs] == [1, 1]
        assert counts == {"bound": 2, "device_to_device": 0, "to_host": 0}

    def test_inputs_planned_in_device_memory_are_copied_device_to_device(
        self, device_input_programs
    ):
        bindings, counts = self.run(device_input_programs["device_planned"])
        assert counts == {"bound": 0, "device_to_device": 2, "to_host": 0}
        assert bindings and all(b["staging_copies"] == 0 for b in bindings)

    def test_inputs_planned_in_host_memory_are_copied_to_the_host(self, device_input_programs):
        _, counts = self.run(device_input_programs["host_planned"])
        assert counts == {"bound": 0, "device_to_device": 0, "to_host": 2}

    def test_an_unplanned_input_cpu_kernels_read_is_copied_to_the_host_first(
        self, device_input_programs
    ):
        method = ethost.Program(str(device_input_programs["cpu_unplanned"])).load_method("forward")
        assert [t["memory_planned"] for t in method.meta["inputs"]] == [False]
        assert method.inputs_read_in_device_memory == [False]
        x = np.random.default_rng(3).standard_normal((2, 4)).astype(np.float32)
        [expected] = method.execute([x])
        before = ethost.device_input_counts()
        [got] = method.execute(self.on_device([x]))
        np.testing.assert_array_equal(got, expected)
        assert counts_since(before) == {"bound": 0, "device_to_device": 0, "to_host": 1}

    def test_a_host_address_claimed_as_device_memory_is_refused(self, device_input_programs):
        program = device_input_programs["unplanned"]
        inputs = program.example_inputs()
        claimed = [DeviceArray(x.ctypes.data, x.shape, x.dtype, 0) for x in inputs]
        with pytest.raises(ethost.ExecuTorchError, match="does not recognize"):
            load(program).execute(claimed)

    def test_a_device_input_of_the_wrong_shape_is_refused_before_running(
        self, device_input_programs
    ):
        program = device_input_programs["unplanned"]
        inputs = self.on_device(program.example_inputs())
        inputs[1] = DeviceArray(inputs[1].address, (3, 4), inputs[1].dtype, 0)
        with pytest.raises(ethost.InputError) as e:
            load(program).execute(inputs)
        assert e.value.index == 1 and "expected shape (3, 5)" in str(e.value)
