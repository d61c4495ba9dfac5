"""How a front joins the engine: one blocking exchange on a fresh Unix-socket connection.

The socket is in the abstract namespace (no file to clean up, no path length limit, works on a
read-only root file system), so any local process could connect to it: the front proves it was
started by this server's supervisor with the secret the supervisor gave both, and the engine
also checks the peer's uid. The front passes its arena's memfd with the request (SCM_RIGHTS);
the engine answers with its control page (generation and readiness, read by every front).

Both sides state the contract version they speak (service/shared/contract.py): the engine refuses
a front of another version, saying both, and the front refuses an engine of another version
(ContractMismatch), so neither misreads the other's messages.
"""

from __future__ import annotations

import json
import mmap
import os
import secrets
import socket
import struct

from service.shared import metrics_snapshot
from service.shared.contract import CONTRACT_VERSION

CONTROL_BYTES = mmap.PAGESIZE
# The control page: model-table generation, ready, serving (written by the engine, read by fronts).
CONTROL = struct.Struct("<QQQ")
# The control memfd as mapped: the control page, then the last /metrics page (metrics_snapshot).
MAPPED_BYTES = metrics_snapshot.BODY_AT + metrics_snapshot.CAPACITY
_TIMEOUT_S = 10.0
_MAX_HELLO = 4096


class HandshakeError(Exception):
    pass


class ContractMismatch(HandshakeError):
    """The other side speaks another version of the front-engine contract: retrying cannot
    help (a front and an engine from different installations)."""


def _mismatch(front: object, engine: object) -> str:
    return (
        f"the front speaks contract version {front} and the engine {engine}: both must come "
        "from one installation of the server"
    )


def new_secret() -> str:
    return secrets.token_hex(16)


def new_socket_name() -> str:
    return f"etrt-engine-{os.getpid()}-{secrets.token_hex(6)}"


def _address(name: str) -> str:
    return "\0" + name


def listen(name: str) -> socket.socket:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(_address(name))
    listener.listen(64)
    return listener


def connect(
    name: str, secret: str, front_id: int, arena_fd: int
) -> tuple[socket.socket, mmap.mmap, bool]:
    """(connected socket, the engine's control page, whether the engine pinned the arena)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(_TIMEOUT_S)
        sock.connect(_address(name))
        hello = {"secret": secret, "front": front_id, "contract": CONTRACT_VERSION}
        socket.send_fds(sock, [json.dumps(hello).encode()], [arena_fd])
        reply, fds, _, _ = socket.recv_fds(sock, _MAX_HELLO, 1)
        try:
            answer = json.loads(reply)
        except ValueError:
            answer = {}
        if not isinstance(answer, dict) or not answer.get("ok") or len(fds) != 1:
            for fd in fds:
                os.close(fd)
            if isinstance(answer, dict) and answer.get("contract") != CONTRACT_VERSION:
                raise ContractMismatch(_mismatch(CONTRACT_VERSION, answer.get("contract")))
            raise HandshakeError(f"the engine refused the front: {reply[:200]!r}")
        if answer.get("contract") != CONTRACT_VERSION:
            os.close(fds[0])
            raise ContractMismatch(_mismatch(CONTRACT_VERSION, answer.get("contract")))
        control = mmap.mmap(fds[0], MAPPED_BYTES, mmap.MAP_SHARED, mmap.PROT_READ)
        os.close(fds[0])
        sock.setblocking(False)
        return sock, control, bool(answer.get("pinned"))
    except BaseException:
        sock.close()
        raise


def accept(listener: socket.socket, secret: str) -> tuple[socket.socket, int, int]:
    """Blocks for the next front: (its socket, its id, its arena's fd). Raises HandshakeError
    for a peer that is not one (the connection is closed)."""
    sock, _ = listener.accept()
    try:
        sock.settimeout(_TIMEOUT_S)
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        _, uid, _ = struct.unpack("3i", creds)
        if uid != os.getuid():
            raise HandshakeError(f"a process of uid {uid} tried to join the engine")
        hello, fds, _, _ = socket.recv_fds(sock, _MAX_HELLO, 1)
        try:
            message = json.loads(hello)
        except ValueError:
            message = {}
        if not secrets.compare_digest(str(message.get("secret", "")), secret) or len(fds) != 1:
            for fd in fds:
                os.close(fd)
            raise HandshakeError("a peer without the supervisor's secret tried to join the engine")
        if message.get("contract") != CONTRACT_VERSION:
            os.close(fds[0])
            why = _mismatch(message.get("contract"), CONTRACT_VERSION)
            refusal = {"ok": False, "contract": CONTRACT_VERSION, "error": why}
            sock.sendall(json.dumps(refusal).encode())
            raise ContractMismatch(f"front {message.get('front')} refused: {why}")
        return sock, int(message.get("front", -1)), fds[0]
    except BaseException:
        sock.close()
        raise


def answer(sock: socket.socket, control_fd: int, pinned: bool) -> None:
    reply = {"ok": True, "pinned": pinned, "contract": CONTRACT_VERSION}
    socket.send_fds(sock, [json.dumps(reply).encode()], [control_fd])
    sock.setblocking(False)
