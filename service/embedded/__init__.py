"""The embeddable engine: `from service.embedded import Engine` (docs/embedded.md).

One process's ModelService behind a typed, documented API, the same engine the server's engine
process runs (service/engine/ opens one): engine.py holds the calls, records.py what they take
and give, tensors.py how host and device tensors become requests without copies.
"""

from service.embedded.engine import Engine, NotReady
from service.embedded.records import InferResult, ModelInfo, ModelStatistics, VersionState

__all__ = ["Engine", "InferResult", "ModelInfo", "ModelStatistics", "NotReady", "VersionState"]
