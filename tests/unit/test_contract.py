"""The declared front-engine contract (service/shared/contract.py, messages.py): every call has its
one handler in the engine and its method on the front's client, both dataplanes offer the same
methods to the protocols, messages are records read by name, and a front and an engine of
different contract versions refuse each other over a real handshake, saying both versions."""

import asyncio
import dataclasses
import hashlib
import inspect
import json
import os
import pickle
import socket
import threading
import typing

import etrt_front
import pytest

from service.config import Settings
from service.dataplane.service import ModelService
from service.engine import calls as engine_calls
from service.engine.metrics_refresh import MetricsRefresh
from service.errors import NotFound
from service.front import engine_client
from service.front.engine_client import EngineClient
from service.shared import contract, frames, handshake, lane_frames, messages, metrics_snapshot
from service.shared.arena import Arena

# The contract's digest at each version: a change to a call, a note, a message, the lane's layout
# or the control memfd's changes the digest, and this test fails until CONTRACT_VERSION is bumped
# and the new digest recorded here (fronts and engines of different builds then refuse each other).
DIGESTS = {
    1: "a61c1419ec1f38a2",
    2: "51858fc7b1ce6eca",
    3: "a26c51ad4be176e5",
    4: "81d42b2bc172eea5",
}


def _digest() -> str:
    parts = []
    for record in (*contract.CALLS, *contract.NOTES):
        fields = [(f.name, str(f.type)) for f in dataclasses.fields(record)]
        parts.append(f"{record.__name__}{fields}{getattr(record, 'answers', '')}")
    for record in (messages.Infer, messages.Cancel, messages.Call, messages.Note):
        parts.append(f"{record.__name__}{typing.get_type_hints(record)}")
    for record in (messages.Done, messages.LaneDone, messages.Result):
        parts.append(f"{record.__name__}{typing.get_type_hints(record)}")
    kinds = [frames.INFER, frames.CANCEL, frames.CALL, frames.NOTE, frames.DONE, frames.RESULT]
    parts.append(f"{kinds}{frames.LANE_DONE}")
    # The control memfd's layout: the control page, then the last /metrics page.
    snapshot = metrics_snapshot
    parts.append(
        f"{handshake.CONTROL.format}{snapshot.HEADER.format}{snapshot.AT}{snapshot.BODY_AT}"
    )
    for name in sorted(n for n in dir(etrt_front) if n.isupper()):
        parts.append(f"{name}={getattr(etrt_front, name)}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def test_the_version_names_one_contract():
    assert DIGESTS.get(contract.CONTRACT_VERSION) == _digest(), (
        f"the contract changed: bump CONTRACT_VERSION and record its digest {_digest()}"
    )


def test_every_call_and_note_has_exactly_one_handler():
    assert set(engine_calls.HANDLERS) == set(contract.CALLS)
    assert set(engine_calls.NOTE_HANDLERS) == set(contract.NOTES)
    declared = {
        value
        for value in vars(contract).values()
        if inspect.isclass(value) and issubclass(value, contract.EngineCall)
    }
    assert declared - {contract.EngineCall} == set(contract.CALLS)


def test_no_call_by_attribute_name():
    assert not hasattr(EngineClient, "__getattr__")
    source = inspect.getsource(engine_calls) + inspect.getsource(engine_client)
    assert "getattr(" not in source


def _parameters(function) -> list[tuple[str, bool]]:
    """(kind, has a default) of each parameter after self: what a positional caller relies on."""
    found = list(inspect.signature(function).parameters.values())[1:]
    return [(p.kind.name, p.default is not p.empty) for p in found]


def test_both_dataplanes_offer_every_method_of_the_interface():
    declared = {
        name: member
        for name, member in vars(contract.Dataplane).items()
        if callable(member) and not name.startswith("_")
    }
    assert "infer" in declared and "deploy" in declared
    for dataplane in (ModelService, EngineClient):
        for name, member in declared.items():
            implemented = getattr(dataplane, name, None)
            assert implemented is not None, f"{dataplane.__name__} lacks {name}"
            assert inspect.iscoroutinefunction(implemented) == inspect.iscoroutinefunction(
                member
            ), f"{dataplane.__name__}.{name}: async on one side only"
            assert _parameters(implemented) == _parameters(member), f"{dataplane.__name__}.{name}"
        assert isinstance(dataplane.__dict__.get("ready") or dataplane.ready, property)
    assert ModelService.capabilities == contract.Capability.NONE
    assert EngineClient.capabilities & contract.Capability.ENGINE_LINK


def test_each_client_method_sends_its_declared_record(tmp_path):
    client = EngineClient(Settings(artifacts=tmp_path / "artifacts"), "unused", "secret", 0)
    sent = []

    async def call(record):
        sent.append(record)

    client._call = call
    cases = [
        (client.signatures("m", "2"), contract.Signatures("m", "2")),
        (client.served_versions("m"), contract.ServedVersions("m")),
        (client.model_config("m"), contract.ModelConfig("m")),
        (client.model_stats(None), contract.ModelStats(None)),
        (client.list_models(), contract.ListModels()),
        (client.describe("m", "1"), contract.Describe("m", "1")),
        (client.metrics_text(), contract.MetricsText()),
        (client.repository_index(), contract.RepositoryIndex()),
        (client.unload_model("m"), contract.Unload("m")),
        (client.delete("m", "3"), contract.Delete("m", "3")),
        (client.load_model("m", None, {"a": 1}), contract.Reload("m", {"a": 1})),
        (
            client.shm_register_system("r", "/k", 0, 64),
            contract.ShmRegisterSystem("r", "/k", 0, 64),
        ),
        (client.shm_register_cuda("r", b"h", 0, 64), contract.ShmRegisterCuda("r", b"h", 0, 64)),
        (client.shm_status("system", "r"), contract.ShmStatus("system", "r")),
        (client.shm_unregister("cuda"), contract.ShmUnregister("cuda")),
    ]
    for coroutine, expected in cases:
        asyncio.run(coroutine)
        assert sent[-1] == expected


class _Service:
    """The engine's handlers reach only what each record names."""

    async def describe(self, model, version):
        if model == "missing":
            raise NotFound(f"no model {model!r}")
        return {"name": model, "version": version}

    async def metrics_text(self):
        return 42  # not the str MetricsText declares

    def record_refused(self, *args):
        self.refused = args


@dataclasses.dataclass(frozen=True)
class _NotACall:
    """What a front of another build might send: not a record of this contract."""


# No fronts' copy of the /metrics page: every page rendered when asked.
_RENDERED_WHEN_ASKED = MetricsRefresh(lambda: None, None, 0.0)


def _answer(call) -> messages.Result:
    served = engine_calls.Calls(_Service(), None, _RENDERED_WHEN_ASKED)
    message = messages.Call(frames.CALL, 5, pickle.dumps(call))
    return asyncio.run(served.answer(message))


def test_the_engine_answers_calls_as_typed_results():
    result = _answer(contract.Describe("m", "2"))
    assert (result.call_id, result.ok) == (5, True)
    assert pickle.loads(result.payload) == {"name": "m", "version": "2"}
    refused = _answer(contract.Describe("missing"))
    assert not refused.ok and isinstance(pickle.loads(refused.payload), NotFound)
    drifted = _answer(contract.MetricsText())  # an answer of another type than declared
    assert not drifted.ok and isinstance(pickle.loads(drifted.payload), contract.EngineFailed)
    unknown = _answer(_NotACall())
    error = pickle.loads(unknown.payload)
    assert not unknown.ok and isinstance(error, contract.EngineFailed)


def test_notes_are_served_by_their_handler_only():
    service = _Service()
    served = engine_calls.Calls(service, None, _RENDERED_WHEN_ASKED)
    note = contract.RequestRefused("m", "forward", "busy", 0.5, "1")
    served.note(messages.Note(frames.NOTE, pickle.dumps(note)))
    assert service.refused == ("m", "forward", "busy", 0.5, "1")
    with pytest.raises(engine_calls.ContractError):
        served.note(messages.Note(frames.NOTE, pickle.dumps(contract.ListModels())))


def test_messages_read_as_records_and_refuse_unknown_kinds():
    infer = messages.Infer(frames.INFER, 1, "m", None, "forward", [], None, 0, 0, *[None] * 5)
    assert messages.read(tuple(infer)) == infer and messages.read(tuple(infer)).model == "m"
    with pytest.raises(ValueError, match="unknown kind"):
        messages.read((99, 1))
    with pytest.raises(ValueError, match="unknown kind"):  # a cancel travels as the lane's
        messages.read((frames.CANCEL, 3))
    with pytest.raises(ValueError, match="fields"):
        messages.read((frames.NOTE, b"", "extra"))
    assert lane_frames.read_cancel(lane_frames.cancel(2**40 + 3)) == (2**40 + 3, False)
    assert lane_frames.read_cancel(lane_frames.cancel(7, deadline=True)) == (7, True)
    assert lane_frames.cancel(1)[0] == lane_frames.CANCEL_TAG


def test_an_engine_refuses_a_front_of_another_contract_version_saying_both():
    """A front of another build, as its hello reaches a real engine's accept."""
    name = handshake.new_socket_name()
    listener = handshake.listen(name)
    raised = []

    def engine():
        try:
            handshake.accept(listener, "secret")
        except handshake.HandshakeError as exc:
            raised.append(exc)

    thread = threading.Thread(target=engine)
    thread.start()
    arena = Arena(1 << 16)
    other = contract.CONTRACT_VERSION + 1
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as front:
        front.settimeout(10)
        front.connect("\0" + name)
        hello = {"secret": "secret", "front": 3, "contract": other}
        socket.send_fds(front, [json.dumps(hello).encode()], [arena.fd])
        reply, fds, _, _ = socket.recv_fds(front, 4096, 1)
    thread.join(10)
    listener.close()
    answer = json.loads(reply)
    assert fds == [] and answer["ok"] is False and answer["contract"] == contract.CONTRACT_VERSION
    assert f"version {other} and the engine {contract.CONTRACT_VERSION}" in answer["error"]
    assert len(raised) == 1 and isinstance(raised[0], handshake.ContractMismatch)


def test_a_front_refuses_an_engine_of_another_contract_version_saying_both():
    """An engine of another build, as its answer reaches a real front's connect."""
    name = handshake.new_socket_name()
    listener = handshake.listen(name)
    other = contract.CONTRACT_VERSION + 1
    hellos = []

    def engine():
        sock, _ = listener.accept()
        with sock:
            hello, fds, _, _ = socket.recv_fds(sock, 4096, 1)
            hellos.append(json.loads(hello))
            for fd in fds:
                os.close(fd)
            control = os.memfd_create("control")
            os.ftruncate(control, handshake.MAPPED_BYTES)
            reply = {"ok": True, "pinned": False, "contract": other}
            socket.send_fds(sock, [json.dumps(reply).encode()], [control])
            os.close(control)

    thread = threading.Thread(target=engine)
    thread.start()
    arena = Arena(1 << 16)
    with pytest.raises(handshake.ContractMismatch) as refused:
        handshake.connect(name, "secret", 3, arena.fd)
    thread.join(10)
    listener.close()
    assert hellos[0]["contract"] == contract.CONTRACT_VERSION
    assert f"version {contract.CONTRACT_VERSION} and the engine {other}" in str(refused.value)


def test_front_and_engine_of_one_version_join():
    name = handshake.new_socket_name()
    listener = handshake.listen(name)
    control = os.memfd_create("control")
    os.ftruncate(control, handshake.MAPPED_BYTES)
    joined = []

    def engine():
        sock, front_id, arena_fd = handshake.accept(listener, "secret")
        os.close(arena_fd)
        handshake.answer(sock, control, pinned=True)
        joined.append(front_id)
        sock.close()

    thread = threading.Thread(target=engine)
    thread.start()
    arena = Arena(1 << 16)
    sock, page, pinned = handshake.connect(name, "secret", 3, arena.fd)
    thread.join(10)
    sock.close()
    listener.close()
    os.close(control)
    assert joined == [3] and pinned is True and len(page) == handshake.MAPPED_BYTES


def test_a_front_whose_engine_speaks_another_version_fails_to_start(tmp_path):
    """The front's client gives up at once (retrying cannot help) and start() says why, so the
    front process exits and the supervisor reports it."""
    name = handshake.new_socket_name()
    listener = handshake.listen(name)
    other = contract.CONTRACT_VERSION + 1

    def engine():
        sock, _ = listener.accept()
        with sock:
            _, fds, _, _ = socket.recv_fds(sock, 4096, 1)
            for fd in fds:
                os.close(fd)
            refusal = {"ok": False, "contract": other, "error": "another build"}
            sock.sendall(json.dumps(refusal).encode())

    thread = threading.Thread(target=engine)
    thread.start()
    settings = Settings(artifacts=tmp_path / "artifacts", arena_bytes=1 << 20)
    client = EngineClient(settings, name, "secret", 0)

    async def start():
        try:
            await asyncio.wait_for(client.start(), 10)
        finally:
            await client.stop()

    with pytest.raises(handshake.ContractMismatch, match=f"the engine {other}"):
        asyncio.run(start())
    thread.join(10)
    listener.close()
