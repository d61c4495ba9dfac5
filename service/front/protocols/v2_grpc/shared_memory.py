"""Triton's system and CUDA shared memory extensions over gRPC: the six RPCs, and the
shared memory parameters of ModelInfer's inputs and outputs.

Registrations are relayed to the engine process, which maps the regions (service/shm/). An
input in a region has no raw_input_contents entry (raw contents then belong, in order, to the
other inputs, as tritonclient sends them); an output written into a region has an empty one.
"""

from __future__ import annotations

from service.dataplane.service import ModelService
from service.errors import Unavailable
from service.front.protocols.v2_grpc import codec, messages
from service.shm import refs


def _value(parameter):
    choice = parameter.WhichOneof("parameter_choice")
    return None if choice is None else getattr(parameter, choice)


def _refs(tensor, kind: str) -> refs.ShmRef | None:
    if not any(key in tensor.parameters for key in refs.KEYS):
        return None
    parameters = {
        key: _value(tensor.parameters[key]) for key in refs.KEYS if key in tensor.parameters
    }
    return refs.parse(tensor.name, parameters, kind)


def split_inputs(request) -> tuple[refs.SharedTensors, list, list]:
    """(the request's tensors in shared memory, the inputs whose data is in the request,
    (name, datatype, placeholder) of the inputs in shared memory)."""
    shared, plain, placed = refs.SharedTensors(), [], []
    for tensor in request.inputs:
        ref = _refs(tensor, "input")
        if ref is None:
            plain.append(tensor)
            continue
        codec.check_datatype(tensor.name, tensor.datatype)
        dims, _ = codec.check_shape(tensor.name, tensor.shape)
        shared.inputs[tensor.name] = ref
        placed.append((tensor.name, tensor.datatype, refs.placeholder(tensor.datatype, dims)))
    for output in request.outputs:
        ref = _refs(output, "output")
        if ref is not None:
            shared.outputs[output.name] = ref
    return shared, plain, placed


def engine_of(service):
    if isinstance(service, ModelService):
        raise Unavailable("shared memory regions need the engine process (python -m service)")
    return service


def set_output_parameters(output, ref: refs.ShmRef, tensor) -> None:
    for key, value in refs.answer_parameters(ref, tensor).items():
        if isinstance(value, str):
            output.parameters[key].string_param = value
        else:
            output.parameters[key].int64_param = value


def _fill(status, region: dict) -> None:
    for key, value in region.items():
        setattr(status, key, value)


class SharedMemoryRpcs:
    """The extensions' RPCs, mixed into the InferenceServicer (which holds `service`)."""

    async def SystemSharedMemoryStatus(self, request, context):
        response = messages.message("SystemSharedMemoryStatusResponse")()
        for region in await engine_of(self.service).shm_status("system", request.name or None):
            _fill(response.regions[region["name"]], region)
        return response

    async def SystemSharedMemoryRegister(self, request, context):
        await engine_of(self.service).shm_register_system(
            request.name, request.key, request.offset, request.byte_size
        )
        return messages.message("SystemSharedMemoryRegisterResponse")()

    async def SystemSharedMemoryUnregister(self, request, context):
        await engine_of(self.service).shm_unregister("system", request.name or None)
        return messages.message("SystemSharedMemoryUnregisterResponse")()

    async def CudaSharedMemoryStatus(self, request, context):
        response = messages.message("CudaSharedMemoryStatusResponse")()
        for region in await engine_of(self.service).shm_status("cuda", request.name or None):
            _fill(response.regions[region["name"]], region)
        return response

    async def CudaSharedMemoryRegister(self, request, context):
        await engine_of(self.service).shm_register_cuda(
            request.name, request.raw_handle, request.device_id, request.byte_size
        )
        return messages.message("CudaSharedMemoryRegisterResponse")()

    async def CudaSharedMemoryUnregister(self, request, context):
        await engine_of(self.service).shm_unregister("cuda", request.name or None)
        return messages.message("CudaSharedMemoryUnregisterResponse")()
