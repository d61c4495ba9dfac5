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

Outputs asked into device memory (execute's `outputs`) go the same ways: one the program leaves
out of planning (UNPLANNED_OUTPUTS_SET) is written there by the delegate, bound on a 256-byte
boundary and staged off it; one planned in device memory is copied device to device, one
planned in host memory from the host. ethost.device_output_counts() says which.

A test module provides the `device_input_programs` fixture: {"unplanned" | "unplanned_outputs" |
"device_planned" | "host_planned": TrtProgram, "cpu_unplanned" | "cpu_unplanned_io": Path of
a .pte, the second with its output left out of planning too}.
"""

import gc

import ethost
import numpy as np
import pytest

from service.shm.device_array import DeviceArray
from support.device_planned_cases import SelectedMemory, T, load, trt
from support.staging_cases import DeviceArena, get, put
from support.trt_host import labels, new_delegate_counters


def counts_since(before, counts=ethost.device_input_counts):
    after = counts()
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

    def test_the_planned_host_buffer_device_inputs_are_copied_into_is_locked_once(
        self, device_input_programs
    ):
        """A copy from pageable memory is staged through the CPU by the driver; the buffer is
        page-locked on the first copy (CUDA), or left pageable where nothing can lock it (the
        stand-in), and unlocked when the instance closes."""
        program = device_input_programs["host_planned"]
        before = ethost.pinned_host_buffers()
        method = load(program)
        for seed in (0, 1):
            inputs = program.example_inputs(seed)
            [output] = method.execute(self.on_device(inputs))
            np.testing.assert_allclose(output, program.reference(*inputs)[0], rtol=1e-5, atol=1e-5)
        locked = counts_since(before, ethost.pinned_host_buffers)
        if self.memory_kind == "cuda":
            assert locked["pinned"] == 1 and locked["refused"] == 0, locked
            assert locked["locked_bytes"] > 0 and locked["locked_bytes"] % 4096 == 0, locked
        else:
            assert locked == {"pinned": 0, "refused": 1, "locked_bytes": 0}
        del method
        gc.collect()
        assert ethost.pinned_host_buffers()["locked_bytes"] == before["locked_bytes"]

    def test_the_host_memory_of_tensors_left_out_of_planning_is_locked_once(
        self, device_input_programs
    ):
        """An unplanned input that CPU kernels read is copied from the device into host memory
        of the instance's own, and an unplanned output a CPU kernel writes is copied from there
        into its device destination: each buffer is page-locked on its first copy (CUDA), or left
        pageable where nothing can lock it (the stand-in), once, and unlocked when the instance
        closes."""
        program = device_input_programs["cpu_unplanned_io"]
        method = ethost.Program(str(program)).load_method("forward")
        assert [t["memory_planned"] for t in method.meta["inputs"]] == [False]
        assert [t["memory_planned"] for t in method.meta["outputs"]] == [False]
        x = np.random.default_rng(4).standard_normal((2, 4)).astype(np.float32)
        [expected] = method.execute([x])  # from and to the host: nothing to lock
        before = ethost.pinned_host_buffers()
        for _ in range(3):
            address = self.arena.buf(expected.nbytes)
            destination = DeviceArray(address, (expected.nbytes,), np.dtype(np.uint8), 0)
            [written] = method.execute(self.on_device([x]), [destination])
            assert isinstance(written, ethost.WrittenOutput)
            np.testing.assert_array_equal(get(address, expected.shape), expected)
        locked = counts_since(before, ethost.pinned_host_buffers)
        if self.memory_kind == "cuda":
            assert locked == {"pinned": 2, "refused": 0, "locked_bytes": 2 * 4096}, locked
        else:
            assert locked == {"pinned": 0, "refused": 2, "locked_bytes": 0}, locked
        del method
        gc.collect()
        assert ethost.pinned_host_buffers()["locked_bytes"] == before["locked_bytes"]

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

    # -- outputs into device memory -------------------------------------------------------------

    def run_into(self, program, misalign=0, room=0):
        """Runs once on device inputs, writing the output into device memory `misalign` bytes
        off a boundary (`room` bytes short of it); returns the delegates' output bindings and
        what the host did with the output."""
        before_labels, before = labels(trt), ethost.device_output_counts()
        method = load(program)
        inputs = program.example_inputs(5)
        expected = program.reference(*inputs)[0]
        self.out_address = self.arena.buf(expected.nbytes, misalign)
        size = expected.nbytes - room
        destination = DeviceArray(self.out_address, (size,), np.dtype(np.uint8), 0)
        [written] = method.execute(self.on_device(inputs), [destination])
        assert isinstance(written, ethost.WrittenOutput)
        assert written.shape == expected.shape and written.dtype == np.float32
        assert written.nbytes == expected.nbytes
        got = get(self.out_address, expected.shape)
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
        delegates = new_delegate_counters(trt, before_labels)
        outputs = [b for d in delegates for b in d["bindings"] if not b["is_input"]]
        return outputs, counts_since(before, ethost.device_output_counts)

    def test_an_unplanned_output_is_written_into_aligned_device_memory_by_the_delegate(
        self, device_input_programs
    ):
        program = device_input_programs["unplanned_outputs"]
        meta = ethost.Program(str(program.pte)).method_meta("forward")
        assert not any(t["memory_planned"] for t in meta["inputs"] + meta["outputs"])
        bindings, counts = self.run_into(program)
        assert [b["staging_copies"] for b in bindings] == [0]
        assert [b["direct_calls"] for b in bindings] == [1]
        assert counts == {"bound": 1, "device_to_device": 0, "from_host": 0}
        assert self.out_address in {address for _, address in self.provider.addresses}

    def test_an_unplanned_output_16_bytes_off_a_boundary_is_staged_by_the_delegate(
        self, device_input_programs
    ):
        bindings, counts = self.run_into(device_input_programs["unplanned_outputs"], misalign=16)
        assert [b["staging_copies"] for b in bindings] == [1]
        assert [b["misaligned_copies"] for b in bindings] == [1]
        assert counts == {"bound": 1, "device_to_device": 0, "from_host": 0}

    def test_an_unplanned_output_without_a_destination_comes_back_as_an_array(
        self, device_input_programs
    ):
        program = device_input_programs["unplanned_outputs"]
        self.run_into(program)  # the same instance, once written into device memory
        method = load(program)
        inputs = program.example_inputs(2)
        for given in (None, [None]):
            [output] = method.execute(inputs, given)
            assert isinstance(output, np.ndarray)
            np.testing.assert_allclose(output, program.reference(*inputs)[0], rtol=1e-5)

    def test_an_output_planned_in_host_memory_is_copied_from_the_host(self, device_input_programs):
        for flavour in ("unplanned", "host_planned"):
            _, counts = self.run_into(device_input_programs[flavour])
            assert counts == {"bound": 0, "device_to_device": 0, "from_host": 1}, flavour

    def test_an_output_planned_in_device_memory_is_copied_device_to_device(
        self, device_input_programs
    ):
        _, counts = self.run_into(device_input_programs["device_planned"])
        assert counts == {"bound": 0, "device_to_device": 1, "from_host": 0}

    @pytest.mark.parametrize("flavour", ["unplanned_outputs", "unplanned"])
    def test_a_destination_too_small_is_refused_naming_the_output(
        self, device_input_programs, flavour
    ):
        before = ethost.device_output_counts()
        with pytest.raises(ethost.ExecuTorchError, match="output 0.*destination holds 56 bytes"):
            self.run_into(device_input_programs[flavour], room=4)
        assert counts_since(before, ethost.device_output_counts) == dict.fromkeys(before, 0)

    def test_destinations_that_are_not_device_memory_or_miscounted_are_refused(
        self, device_input_programs
    ):
        program = device_input_programs["unplanned_outputs"]
        method = load(program)
        inputs = program.example_inputs()
        host = np.zeros(15, np.float32)
        claimed = DeviceArray(host.ctypes.data, (60,), np.dtype(np.uint8), 0)
        with pytest.raises(ethost.ExecuTorchError, match="is not .*device memory"):
            method.execute(inputs, [claimed])
        with pytest.raises(ethost.ExecuTorchError, match="expected 1 output destinations"):
            method.execute(inputs, [None, None])
        host.flags.writeable = False
        with pytest.raises(ethost.InputError, match="writable C-contiguous host buffer"):
            method.execute(inputs, [host])
        with pytest.raises(ethost.InputError, match="must be None, a writable"):
            method.execute(inputs, [object()])

    # -- outputs into host memory (the engine's room in a front's arena) -----------------------

    @pytest.mark.parametrize(
        "flavour", ["unplanned_outputs", "unplanned", "host_planned", "device_planned"]
    )
    def test_an_output_is_written_into_the_host_memory_given_for_it(
        self, device_input_programs, flavour
    ):
        """Wherever the program leaves the output (bound by the delegate, planned in host or in
        device memory), it lands in the destination; no device route is counted; the next
        execute without a destination writes nothing there."""
        program = device_input_programs[flavour]
        method = load(program)
        inputs = program.example_inputs(5)
        expected = program.reference(*inputs)[0]
        destination = aligned_zeros(expected.nbytes)
        before = ethost.device_output_counts()
        [written] = method.execute(inputs, [destination])
        assert isinstance(written, ethost.WrittenOutput)
        assert written.shape == expected.shape and written.nbytes == expected.nbytes
        got = destination.view(np.float32).reshape(expected.shape)
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
        assert counts_since(before, ethost.device_output_counts) == dict.fromkeys(before, 0)
        destination[...] = 0
        other = program.example_inputs(6)
        [output] = method.execute(other)
        assert isinstance(output, np.ndarray) and not destination.any()
        np.testing.assert_allclose(output, program.reference(*other)[0], rtol=1e-5, atol=1e-5)

    @pytest.mark.parametrize("flavour", ["unplanned_outputs", "host_planned"])
    def test_host_memory_too_small_is_refused_naming_the_output_and_left_alone(
        self, device_input_programs, flavour
    ):
        program = device_input_programs[flavour]
        inputs = program.example_inputs(5)
        destination = aligned_zeros(program.reference(*inputs)[0].nbytes - 4)
        with pytest.raises(ethost.ExecuTorchError, match="output 0.*destination holds 56 bytes"):
            load(program).execute(inputs, [destination])
        assert not destination.any()


def aligned_zeros(nbytes: int) -> np.ndarray:
    """`nbytes` zero bytes on a 256-byte boundary, as the arena's slots are."""
    backing = np.zeros(nbytes + 256, np.uint8)
    start = -backing.ctypes.data % 256
    return backing[start : start + nbytes]
