"""The top process of `python -m service`: one engine process and N protocol front processes.

One Python process is one core: the protocols' parsing and encoding ran on one while the rest of
a GPU host idled. So N fronts (--workers) serve the protocols, and one engine owns the models,
the store and the GPU, so that model memory is not multiplied and dynamic batching sees every
request (service/engine/).

The fronts share the HTTP port through one listening socket bound here and inherited by each
(rather than SO_REUSEPORT): a second server on the port fails to start instead of silently
sharing it, and connections waiting in the backlog of a front that dies are taken by the others
instead of being reset. grpcio binds its own sockets, so the gRPC port is shared with
SO_REUSEPORT, after this process checked that nothing else holds it.

Faults stay small: a front or the engine that dies is started again (the engine reloads the
store; fronts answer 503 with Retry-After meanwhile). An engine whose GPU context was poisoned
exits with GPU_FAULT_EXIT and is started again at once, then with a growing backoff while such
faults follow each other; each restart is recorded, with its reason, in the run's engine events
file (service/shared/engine_events.py), which the engine counts and quarantines from and the
fronts quote when not ready. Children are killed by the kernel if this process dies
(PR_SET_PDEATHSIG). SIGTERM or SIGINT is passed to the fronts at once, so that readiness fails
within the signal's delivery (service/front/draining.py); each front drains (its requests in
flight get --shutdown-grace) and exits, the HTTP socket is closed (new connections are refused
from then on), and then the engine stops.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

from service import auth
from service.config import Settings, encode_settings
from service.front.protocols import fair_accept
from service.shared import handshake
from service.shared.engine_events import (
    EVENTS_ENV,
    GPU_FAULT_EXIT,
    EngineEvents,
    Restart,
)
from service.store.lock import acquire

log = logging.getLogger("service.supervisor")
_POLL_S = 0.1
# Seconds a front gets past --shutdown-grace to stop (its gRPC server and engine link).
_STOP_S = 5.0
# Seconds the engine gets to stop once the fronts are gone (nothing is in flight by then; closing
# the programs frees their memory, device memory included).
_ENGINE_STOP_S = 10.0
# A child that dies within this many seconds of its start counts as crashing at start.
_EARLY_S = 5.0
_MAX_BACKOFF_S = 10.0
# A child that keeps dying at start this many times in a row stops the server: restarting it
# cannot help (a port taken, a broken environment), and the operator must see it.
_MAX_EARLY_FAILURES = 5
# GPU faults this close together count as in a row: the restarts after the first back off.
_FAULT_ROW_S = 60.0


class StartError(Exception):
    pass


@dataclass
class _Child:
    role: str
    command: list[str]
    env: dict
    pass_fds: tuple[int, ...] = ()
    process: subprocess.Popen | None = None
    started: float = 0.0
    failures: int = field(default=0)

    def start(self, extra_env: dict | None = None) -> None:
        self.process = subprocess.Popen(
            self.command, env={**self.env, **(extra_env or {})}, pass_fds=self.pass_fds
        )
        self.started = time.monotonic()

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


def _listen_http(settings: Settings) -> socket.socket:
    family = socket.AF_INET6 if ":" in settings.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((settings.host, settings.port))
    except OSError as exc:
        sock.close()
        raise StartError(f"HTTP cannot listen on {settings.host}:{settings.port}: {exc}") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def _check_grpc_port(settings: Settings) -> None:
    """The fronts bind the gRPC port with SO_REUSEPORT, which would also join another server's
    group on it: make sure nobody holds it first (and fail here, not in a front that would be
    started again and again)."""
    if not settings.grpc_port:
        return
    family = socket.AF_INET6 if ":" in settings.host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((settings.host, settings.grpc_port))
        except OSError as exc:
            raise StartError(
                f"gRPC cannot listen on {settings.host}:{settings.grpc_port}: {exc}"
            ) from None


class Supervisor:
    def __init__(self, settings: Settings):
        self.settings = settings
        self.stopping = False
        self.fatal: str | None = None
        self.events = EngineEvents(None)
        self._gpu_faults: list[float] = []  # when the engine exited for a GPU fault

    def run(self) -> int:
        settings = self.settings
        try:
            auth.policy_for(settings)  # token mistakes stop the server here, not in each front
            lock = acquire(settings.artifacts)
            http = _listen_http(settings)
            _check_grpc_port(settings)
        except (auth.AuthConfigError, StartError, OSError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        except Exception as exc:  # StoreLockError and the like: the reason, no traceback
            print(f"error: {exc}", file=sys.stderr)
            return 1
        events_fd, events_path = tempfile.mkstemp(prefix="etrt-engine-events-", suffix=".jsonl")
        os.close(events_fd)
        self.events = EngineEvents(events_path)
        base_env = {
            **os.environ,
            EVENTS_ENV: events_path,
            "ETRT_SETTINGS": encode_settings(settings),
            "ETRT_ENGINE_SOCKET": handshake.new_socket_name(),
            "ETRT_ENGINE_SECRET": handshake.new_secret(),
            "ETRT_SUPERVISOR_PID": str(os.getpid()),
        }
        python = [sys.executable, "-m"]
        ready_read, ready_write = os.pipe()
        engine = _Child(
            "engine",
            [*python, "service.engine"],
            base_env,
            (lock.fileno(), ready_write),
        )
        loads = fair_accept.new_loads_fd(settings.workers)
        fronts = [
            _Child(
                f"front {i}",
                [*python, "service.front"],
                {
                    **base_env,
                    "ETRT_FRONT_ID": str(i),
                    "ETRT_HTTP_FD": str(http.fileno()),
                    fair_accept.LOADS_FD: str(loads),
                },
                (http.fileno(), loads),
            )
            for i in range(settings.workers)
        ]
        self._fronts = fronts
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._stop)
        grpc_on = [f"port {settings.grpc_port}"] if settings.grpc_port else []
        grpc_on += ["the HTTP port (h2c)"] if settings.one_port else []
        log.info(
            "serving HTTP on %s:%d and gRPC on %s with %d front process(es) and one engine",
            settings.host,
            http.getsockname()[1],
            " and ".join(grpc_on) or "no port",
            settings.workers,
        )
        # The only PIDs in the log were the fronts' (uvicorn's), and killing a front restarts it:
        # say which process is the server and how to stop it.
        log.info(
            "server pid %d: stop it with Ctrl-C or `kill %d` (SIGTERM drains, then stops)",
            os.getpid(),
            os.getpid(),
        )
        engine.start({"ETRT_ENGINE_READY_FD": str(ready_write)})
        os.close(ready_write)
        engine.pass_fds = (lock.fileno(),)
        for front in fronts:
            front.start()
        engine_ready = False
        try:
            while not self.stopping:
                if not engine_ready:
                    engine_ready = self._engine_ready(ready_read)
                for child in (engine, *fronts):
                    if child.running():
                        continue
                    if child is engine and not engine_ready:
                        self.fatal = (
                            f"the engine exited with {engine.process.returncode} before the "
                            "store was open (its log above says why)"
                        )
                        self.stopping = True
                        break
                    self._restart(child)
                time.sleep(_POLL_S)
        finally:
            self._shutdown(engine, fronts, http)
            os.close(ready_read)
            lock.release()
            os.unlink(events_path)
        if self.fatal:
            print(f"error: {self.fatal}", file=sys.stderr)
            return 1
        return 0

    def _stop(self, signum, frame) -> None:
        """Passed on now, not at the next poll: readiness must fail within the signal's time."""
        if not self.stopping:
            self.stopping = True
            self._signal(self._fronts)

    @staticmethod
    def _signal(children: list[_Child]) -> None:
        for child in children:
            if child.running():
                child.process.send_signal(signal.SIGTERM)

    @staticmethod
    def _engine_ready(ready_read: int) -> bool:
        os.set_blocking(ready_read, False)
        try:
            return os.read(ready_read, 1) == b"R"
        except BlockingIOError:
            return False

    def _restart(self, child: _Child) -> None:
        code = child.process.returncode
        if child.role == "engine" and code == GPU_FAULT_EXIT:
            return self._restart_after_gpu_fault(child)
        early = time.monotonic() - child.started < _EARLY_S
        child.failures = child.failures + 1 if early else 1
        if child.failures >= _MAX_EARLY_FAILURES:
            self.fatal = (
                f"{child.role} exited at start {child.failures} times in a row (last with "
                f"{code}); its log above says why"
            )
            self.stopping = True
            return
        backoff = min(_MAX_BACKOFF_S, 0.5 * 2 ** (child.failures - 1)) if early else 0.0
        log.error(
            "%s exited with %s; starting it again%s",
            child.role,
            code,
            f" in {backoff:.1f} s" if backoff else "",
        )
        if child.role == "engine":
            reason = "killed" if code < 0 else "crashed"
            self.events.append(Restart(time.time(), reason, f"exit status {code}", backoff))
        self._start_again(child, backoff)

    def _restart_after_gpu_fault(self, child: _Child) -> None:
        """The engine's context was poisoned (its log says by what): a clean process at once,
        then with a backoff doubling per fault in a row, so that faults cannot make a crash
        loop. Never a reason to stop the server: the quarantine takes the model out."""
        now = time.monotonic()
        self._gpu_faults = [t for t in self._gpu_faults if now - t < _FAULT_ROW_S] + [now]
        in_row = len(self._gpu_faults)
        backoff = 0.0 if in_row == 1 else min(_MAX_BACKOFF_S, 0.5 * 2 ** (in_row - 2))
        child.failures = 0
        log.error(
            "the engine exited after a GPU fault (%d in the last %.0f s); starting it again%s",
            in_row,
            _FAULT_ROW_S,
            f" in {backoff:.1f} s" if backoff else "",
        )
        detail = f"{in_row} in the last {_FAULT_ROW_S:.0f} s"
        self.events.append(Restart(time.time(), "gpu_fault", detail, backoff))
        self._start_again(child, backoff)

    def _start_again(self, child: _Child, backoff: float) -> None:
        deadline = time.monotonic() + backoff
        while time.monotonic() < deadline and not self.stopping:
            time.sleep(_POLL_S)
        if not self.stopping:
            child.start({"ETRT_ENGINE_RESTART": "1"} if child.role == "engine" else None)

    def _shutdown(self, engine: _Child, fronts: list[_Child], http: socket.socket) -> None:
        """Fronts first, then the HTTP socket, then the engine. The fronts are signalled again
        (a fatal stop, or one restarted as the signal came); a draining front ignores that."""
        self._signal(fronts)
        self._wait(fronts, self.settings.shutdown_grace_s + _STOP_S)
        http.close()
        self._signal([engine])
        self._wait([engine], _ENGINE_STOP_S)

    @staticmethod
    def _wait(group: list[_Child], within_s: float) -> None:
        deadline = time.monotonic() + within_s
        for child in group:
            if child.process is None:
                continue
            try:
                child.process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.error("%s did not stop within %.0f s; killing it", child.role, within_s)
                child.process.kill()
                child.process.wait()


def run(settings: Settings) -> int:
    logging.basicConfig(
        level=settings.log_level.upper(),
        format="%(asctime)s %(levelname)s [supervisor] %(name)s: %(message)s",
    )
    return Supervisor(settings).run()
