"""When work for a request runs on the event loop, and when it is handed off: one policy.

Handing work to a thread or a worker process costs tens of microseconds to milliseconds (and for
a process, a copy of what it is given), so small work is cheaper done inline; large work done
inline stops every other request on the loop, health probes included, for as long as it takes.
Each kind of work has its threshold here:

- JSON bodies parsed, and JSON answers written, inline up to `json_bytes` / `json_elements`;
  above, in a worker process: json and list conversions hold the GIL throughout
  (service/front/protocols/offload.py). Parsing 256 KiB of JSON takes about 4 ms, less than
  the trip.
- binary tensor data sliced inline up to `binary_bytes`; above, in a thread (checking BOOL bytes
  and copying misaligned slices is linear, and numpy releases the GIL for it).
- a method executed on the loop while its recent executes took less than `execute_us`
  (--inline-execute-us; service/dataplane/model_pool.py); otherwise on a worker thread.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class InlinePolicy:
    execute_us: float = 100.0
    json_bytes: int = 256 * 1024
    json_elements: int = 32 * 1024
    binary_bytes: int = 1024 * 1024

    @property
    def execute_below_s(self) -> float:
        return self.execute_us * 1e-6

    def parse_inline(self, nbytes: int) -> bool:
        return nbytes <= self.json_bytes

    def write_inline(self, elements: int) -> bool:
        return elements <= self.json_elements

    def slice_inline(self, nbytes: int) -> bool:
        return nbytes <= self.binary_bytes
