"""Arena bytes held by request bodies still arriving, per client address, and their cap.

A body's memory grows with the bytes that came (v2_rest/transport.read_aligned_body), so an idle
connection holds little; a client that does send, slowly, over many connections could still
gather the arena. The cap is per address: past it, that client's next body is refused 503 (Busy,
retry shortly) and every other client's are still served. Bodies that stop arriving are dropped
by the transport's body timeout (http_transport.py beside this), which frees their bytes.
"""

from __future__ import annotations

from service.errors import Busy


class ArrivingBodies:
    """One per front process (one event loop: no lock)."""

    def __init__(self, per_client: int):
        self.per_client = per_client
        self._held: dict[str, int] = {}

    def hold(self, client: str, nbytes: int) -> None:
        held = self._held.get(client, 0) + nbytes
        if held > self.per_client:
            raise Busy(
                f"this client's request bodies still arriving hold {held - nbytes} bytes of "
                f"shared memory; another {nbytes} would pass the limit of {self.per_client} "
                f"per client address (--max-client-arriving-bytes); retry once they are in",
                retry_after_s=1.0,
            )
        self._held[client] = held

    def drop(self, client: str, nbytes: int) -> None:
        held = self._held.get(client, 0) - nbytes
        if held > 0:
            self._held[client] = held
        else:
            self._held.pop(client, None)

    def held(self, client: str) -> int:
        return self._held.get(client, 0)
