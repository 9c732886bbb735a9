"""The service's side of background processes: starting them under a session's profile, finding
the one behind a preview port, the HTTP clients that reach into sandboxes, and their ends.

Processes live in the service's process (their sandboxes are bwrap children of the service,
dying with it), not on kernel workers: the port proxy and the terminal WebSocket hold their
descriptors and network namespaces here, and a worker's retirement must not end a dev server.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

import aiohttp
import msgspec

from wasm_runner import Session
from wasm_runner.processes import (
    BackgroundProcess,
    ProcessError,
    ProcessesClosed,
    ProcessLimitError,
    ProcessLimits,
    ProcessNotFound,
)
from wasm_runner.processes.netns import socket_in
from wasm_runner.processes.ring import OutputRing
from wasm_runner_protocol.errors import ErrorCode
from wasm_runner_protocol.processes import ProcessInfo, ProcessStart
from wasm_runner_protocol.wire import LimitsPatch
from wasm_runner_server.cluster.moved_processes import last_number
from wasm_runner_server.config import ProcessSettings
from wasm_runner_server.errors import ApiError, session_not_found
from wasm_runner_server.metrics import Counter, Metrics
from wasm_runner_server.sessions.run_disk import RunRoom

if TYPE_CHECKING:
    from wasm_runner_server.sessions.manager import LiveSession, SessionManager

log = logging.getLogger("wasm_runner.server")

ProcessObserver = Callable[[str, str, BackgroundProcess, object], None]
"""Told `(event "start" | "network" | "exit", session id, process, who started it)`: the audit log is
one ("network": a batch of the running process's egress decisions is ready)."""
CONNECT_TIMEOUT_S = 5.0


@contextlib.contextmanager
def ring_wakeups(ring: OutputRing) -> Iterator[asyncio.Event]:
    """An event set (on the caller's loop) at each write to `ring` and at its close, while inside."""
    loop = asyncio.get_running_loop()
    event = asyncio.Event()
    unsubscribe = ring.subscribe(lambda: loop.call_soon_threadsafe(event.set))
    try:
        yield event
    finally:
        unsubscribe()


class ServiceProcesses:
    def __init__(self, settings: ProcessSettings, sessions: SessionManager, metrics: Metrics,
                 observers: Sequence[ProcessObserver] = ()) -> None:
        self.settings = settings
        self.sessions = sessions
        self.observers = list(observers)
        self._clients: dict[tuple[str, str], aiohttp.ClientSession] = {}
        self._listeners: dict[tuple[str, int], BackgroundProcess] = {}
        """The process last found listening on a session's port, kept while it runs: reading the
        kernel's socket tables under /proc costs milliseconds, too much for every proxied request."""
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._rooms: dict[int, RunRoom] = {}
        """The disk room each running process holds, by id() of its handle (sessions.run_disk)."""
        self.started = Counter("wasm_runner_processes_started_total", "Background processes and terminals started.")
        self.ended = Counter("wasm_runner_processes_ended_total", "Background processes ended, by state "
                             "(exited, killed, failed).", ("state",))
        metrics.gauges.extend([self.started, self.ended])
        metrics.gauge("wasm_runner_processes_live", "Background processes and terminals running now.", self.live_count)

    # -- the session's manager ----------------------------------------------------------------

    def core(self, live: LiveSession) -> Session:
        _, session = self.sessions.core(live)
        if not session.has_processes:  # the caps are read when the manager is made
            session.process_limits = ProcessLimits(max_live=self.settings.max_live,
                                                   memory_bytes=self.settings.memory_bytes,
                                                   ring_bytes=self.settings.ring_bytes)
        session_id = live.row.id
        session.processes.observe(lambda event, process: self._observe(event, session_id, process))
        if live.ended_elsewhere:
            session.processes.number_after(last_number(live.ended_elsewhere))
        return session

    def live_count(self) -> int:
        total = 0
        for live in list(self.sessions.sessions.values()):
            if live.core is not None:
                total += live.core.live_process_count
        return total

    def get(self, live: LiveSession, process_id: str) -> BackgroundProcess:
        try:
            return self.core(live).processes.get(process_id)
        except ProcessNotFound:
            ended = self.ended_elsewhere(live, process_id)
            raise ApiError(404, ErrorCode.PROCESS_NOT_FOUND, f"no process {process_id!r} in session {live.row.id!r}"
                           + (f" ({ended.error})" if ended is not None and ended.error else ""),
                           "list them with GET /v1/sessions/{id}/processes") from None

    def ended_elsewhere(self, live: LiveSession, process_id: str) -> ProcessInfo | None:
        """The process `process_id` had, if it ran on a node the session was on before this one."""
        return next((i for i in live.ended_elsewhere if i.id == process_id), None)

    async def start(self, live: LiveSession, body: ProcessStart, owner: object) -> BackgroundProcess:
        """Start `body` in the session under its profile's policy (limits, env, network)."""
        if self.settings.max_live == 0:
            raise ApiError(403, ErrorCode.PROCESS_LIMIT, "background processes are switched off on this server",
                           "ask the operator to set [processes] max_live")
        if body.command is None and not body.code:
            raise ApiError(422, ErrorCode.VALIDATION_ERROR, "nothing to start: give command or code",
                           'e.g. {"command": ["python3", "-m", "http.server", "8000"]}')
        if body.command is not None and body.code:
            raise ApiError(422, ErrorCode.VALIDATION_ERROR, "give either command or code, not both")
        if live.deleted:
            raise session_not_found(live.row.id, "it was deleted")
        execution = self.sessions.execution
        profile = self.sessions.profile_of(live)
        limits = LimitsPatch(memory_bytes=body.memory_bytes) if body.memory_bytes is not None else None
        request = execution.request(profile, language=body.language, code=body.code or None, command=body.command,
                                    stdin="", env=body.env, limits=limits, fresh=True, id=None,
                                    network=live.row.egress)
        request = msgspec.structs.replace(request, provider="native")
        session = self.core(live)
        self.sessions.touch(live)
        live.hibernated = False  # a running process keeps the session active (the sweep leaves it be)
        pty = (body.cols, body.rows) if body.pty else None
        self._loop = asyncio.get_running_loop()
        rooms = self.sessions.rooms
        room = await rooms.reserve(live.row.id, request.limits.disk_bytes) if rooms is not None else None
        try:
            process = await asyncio.to_thread(session.processes.start, request, cwd=body.cwd, name=body.name,
                                              stdin=body.stdin, pty=pty, ring_bytes=body.output_bytes, owner=owner,
                                              disk_room=room.room if room is not None else None)
        except ProcessLimitError as exc:
            raise ApiError(409, ErrorCode.PROCESS_LIMIT, str(exc), "stop a process of this session first") from None
        except ProcessesClosed as exc:
            if live.deleted:
                raise session_not_found(live.row.id, "it was deleted while the process started") from None
            raise ApiError(409, ErrorCode.SESSION_BUSY, f"the process could not start: {exc}",
                           "the session is hibernating or shutting down: try again in a moment") from None
        except ProcessError as exc:
            raise ApiError(422, ErrorCode.PROCESS_FAILED, f"the process could not start: {exc}",
                           "check the command, or the server's native sandbox (wasm-runner doctor)") from None
        finally:
            if room is not None and sys.exc_info()[0] is not None:
                room.finish_now()  # it did not start (or may have written as it failed): counted until measured
        if room is not None:  # held while it runs, given back but what it wrote when it ends
            self._rooms[id(process)] = room
            if process.state not in ("starting", "running"):  # it ended before its room was recorded
                self._end_room(process)
        return process

    def _end_room(self, process: BackgroundProcess) -> None:
        """The process ended: its room is given back but what it wrote (on the service's loop)."""
        room = self._rooms.pop(id(process), None)
        if room is None:
            return
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # a loop closing: committed whole below
                asyncio.run_coroutine_threadsafe(room.finish(), loop)
                return
        room.finish_now()

    def _observe(self, event: str, session_id: str, process: BackgroundProcess) -> None:
        owner = process.owner
        if event == "start":
            self.started.inc()
        elif event == "exit":
            self.ended.inc(process.state)
            self._end_room(process)
            self._drop_client(session_id, process.id)
            for key, listener in list(self._listeners.items()):
                if listener is process:
                    self._listeners.pop(key, None)
        for observer in self.observers:
            try:
                observer(event, session_id, process, owner)
            except Exception:  # noqa: BLE001 - a process's end is never held up by its record
                log.exception("process observer failed", extra={"event": "process_observer_failed"})

    # -- ports --------------------------------------------------------------------------------

    async def listener(self, live: LiveSession, port: int, *, fresh: bool = False) -> BackgroundProcess:
        """The session's live process listening on `port` inside its sandbox; 502 when none does.

        The answer is remembered while that process runs; `fresh` looks again (the remembered one
        refused a connection: it stopped listening, and another process may listen there now)."""
        key = (live.row.id, port)
        known = self._listeners.get(key)
        if known is not None and known.running and not fresh:
            return known
        self._listeners.pop(key, None)
        process = await asyncio.to_thread(self._find_listener, live, port)
        self._listeners[key] = process
        return process

    async def listens(self, live: LiveSession, port: int) -> ApiError | None:
        """None when a live process of the session listens on `port` now; else the error its preview
        would answer (its hint says what to do)."""
        try:
            await self.listener(live, port, fresh=True)
        except ApiError as error:
            return error
        return None

    def _find_listener(self, live: LiveSession, port: int) -> BackgroundProcess:
        session = live.core
        processes = session.processes.live() if session is not None and session.has_processes else []
        for process in processes:
            if port in process.ports():
                return process
        raise not_listening(live.row.id, port, bool(processes))

    def client(self, live: LiveSession, process: BackgroundProcess) -> aiohttp.ClientSession:
        """The HTTP client whose connections are made inside `process`'s network namespace (kept alive)."""
        key = (live.row.id, process.id)
        client = self._clients.get(key)
        if client is None or client.closed:
            pid = process.sandbox.netns_pid() if process.sandbox is not None else None
            if pid is None:
                raise not_listening(live.row.id, 0, False)

            def make_socket(addr_info) -> socket.socket:
                family, type_, proto, _, _ = addr_info
                sock = socket_in(pid, family, type_, proto)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                return sock

            connector = aiohttp.TCPConnector(socket_factory=make_socket, limit=64, use_dns_cache=False,
                                             keepalive_timeout=30, enable_cleanup_closed=False)
            client = aiohttp.ClientSession(connector=connector, auto_decompress=False, cookie_jar=aiohttp.DummyCookieJar(),
                                           timeout=aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_TIMEOUT_S),
                                           skip_auto_headers=("User-Agent", "Accept-Encoding", "Accept"))
            self._clients[key] = client
        return client

    def _drop_client(self, session_id: str, process_id: str) -> None:
        loop = self._loop
        client = self._clients.pop((session_id, process_id), None)
        if client is None or loop is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop is closed: the process ends with the service
            loop.call_soon_threadsafe(lambda: asyncio.ensure_future(client.close()))

    # -- the end ------------------------------------------------------------------------------

    async def close(self) -> None:
        """End every session's processes (in parallel) and close the clients: nothing outlives the service."""
        sessions = [live.core for live in self.sessions.sessions.values() if live.core is not None]
        grace = self.settings.stop_grace_s
        await asyncio.gather(*(asyncio.to_thread(s.stop_processes, "stopped: the server shut down", grace, True)
                               for s in sessions))
        for client in list(self._clients.values()):
            await client.close()
        self._clients.clear()


def not_listening(session_id: str, port: int, any_live: bool) -> ApiError:
    where = f"port {port}" if port else "that port"
    if any_live:
        hint = (f"start the server on {where} (bind 127.0.0.1 or 0.0.0.0 inside the sandbox), or wait until it "
                "listens; GET /v1/sessions/{id}/processes shows each process's ports")
    else:
        hint = ("start the server first: POST /v1/sessions/{id}/processes with e.g. "
                f'{{"command": ["python3", "-m", "http.server", "{port or 8000}"]}}')
    return ApiError(502, ErrorCode.PORT_NOT_LISTENING,
                    f"nothing listens on {where} in session {session_id!r}'s sandbox", hint)
