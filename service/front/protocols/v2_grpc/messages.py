"""The protocol's message classes, built from descriptor.py in a pool of their own.

A private pool (not protobuf's default one) is what lets this server's `inference` package live
in a process that also imports tritonclient.grpc or kserve; see generate.py.
"""

from __future__ import annotations

from google.protobuf import descriptor_pool, message_factory

from service.front.protocols.v2_grpc.descriptor import FILE_DESCRIPTOR

PACKAGE = "inference"
SERVICE = f"{PACKAGE}.GRPCInferenceService"

_pool = descriptor_pool.DescriptorPool()
_pool.AddSerializedFile(FILE_DESCRIPTOR)
service_descriptor = _pool.FindServiceByName(SERVICE)


def message(name: str) -> type:
    """The class of message `inference.<name>` (nested ones as 'Outer.Inner')."""
    return message_factory.GetMessageClass(_pool.FindMessageTypeByName(f"{PACKAGE}.{name}"))


def field_number(message_name: str, field: str) -> int:
    return _pool.FindMessageTypeByName(f"{PACKAGE}.{message_name}").fields_by_name[field].number


ServerLiveResponse = message("ServerLiveResponse")
ServerReadyResponse = message("ServerReadyResponse")
ModelReadyResponse = message("ModelReadyResponse")
ServerMetadataResponse = message("ServerMetadataResponse")
ModelMetadataResponse = message("ModelMetadataResponse")
ModelConfigResponse = message("ModelConfigResponse")
ModelInferRequest = message("ModelInferRequest")
ModelInferResponse = message("ModelInferResponse")
InferParameter = message("InferParameter")
ModelStatisticsResponse = message("ModelStatisticsResponse")
RepositoryIndexResponse = message("RepositoryIndexResponse")
RepositoryModelLoadResponse = message("RepositoryModelLoadResponse")
RepositoryModelUnloadResponse = message("RepositoryModelUnloadResponse")
