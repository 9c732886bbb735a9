"""A session's background processes: started natively, bounded, read by offset, ended with the session.

Each process runs in a sandbox of its own, confined exactly like a native call (see
providers/native/sandboxed_process.py); the host keeps its output in two rings (stdout,
stderr) of a stated size, so a caller that reconnects reads on from the offset it reached.
The manager holds the session's caps: how many processes may be live at once, and their total
memory (the sum of their limits, checked at start; where cgroups exist the session's cgroup
also bounds them together). `close` ends every process (hibernation, deletion, shutdown).

A process whose policy lets it out reaches the network through its own socket on the host's egress
proxy: `set_egress` changes the policy its new connections follow (a session's policy change), the
byte cap bounds each of its connections, and its decisions are taken in batches (`take_network`;
the observer is told "network" when a batch is ready, and "exit" with the rest).
"""

from __future__ import annotations

import logging
import posixpath
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from wasm_runner.capture import Stream
from wasm_runner.egress.redaction import RunRedactor
from wasm_runner.errors import WasmRunnerError
from wasm_runner.processes.ring import Chunk, OutputRing
from wasm_runner.workspace.layout import Workspace
from wasm_runner_protocol.egress import EgressPolicy, NetworkEvent
from wasm_runner_protocol.execution import ExecRequest
from wasm_runner_protocol.guest import GUEST_WORKSPACE
from wasm_runner_protocol.processes import DEFAULT_RING_BYTES, ProcessInfo, ProcessState, StreamName

if TYPE_CHECKING:  # the native tier loads with a session's first process, not with the session
    from wasm_runner.providers.native.limits import RunCgroup
    from wasm_runner.providers.native.provider import NativeProvider
    from wasm_runner.providers.native.sandboxed_process import SandboxProcess

log = logging.getLogger("wasm_runner.processes")

MiB = 1024 * 1024
ENDED_KEPT = 32
"""Ended processes still listed (and readable) per session; older ones are forgotten."""
NETWORK_BATCH = 256
"""Egress decisions of a running process handed to the observer at once (its audit row)."""
START_WAIT_S = 5.0


class ProcessError(WasmRunnerError, RuntimeError):
    """A process request refused (the message says why and what to do)."""


class ProcessLimitError(ProcessError):
    """The session's cap on live processes or their total memory refuses a start."""


class ProcessNotFound(ProcessError):
    pass


class ProcessesClosed(ProcessError):
    """The session's processes are being ended (hibernation) or ended for good (deletion, shutdown):
    a start is refused, or killed at once when it was already under way."""


@dataclass(frozen=True)
class ProcessLimits:
    """A session's caps on its background processes."""

    max_live: int = 8
    """Processes running at once; the next start is refused."""
    memory_bytes: int = 2048 * MiB
    """Their total memory (the sum of their limits; the session's cgroup where there is one)."""
    ring_bytes: int = DEFAULT_RING_BYTES
    """Default output kept per stream of each process."""


Observer = Callable[[str, "BackgroundProcess"], None]
"""Told `("start" | "network" | "exit", process)`: audit rows and metrics of the service ("network":
a batch of its egress decisions is ready for `take_network`)."""


class BackgroundProcess:
    """One background process of a session: its output rings and its live sandbox."""

    def __init__(self, process_id: str, request: ExecRequest, name: str, pty: bool, ring_bytes: int) -> None:
        self.id = process_id
        self.request = request
        self.argv = list(request.command) if request.command is not None else [request.language, "<code>"]
        self.name = name
        self.pty = pty
        self.memory_bytes = request.limits.memory_bytes
        self.started_at = time.time()
        self.started_monotonic = time.monotonic()
        self.ended_at: float | None = None
        self.stdout = OutputRing(ring_bytes)
        self.stderr = OutputRing(ring_bytes)
        self.sandbox: SandboxProcess | None = None
        self.start_error: str | None = None
        self.attached = 0
        """Terminal WebSockets attached now (a closed terminal is ended after its grace only when none is)."""
        self.watchers = 0
        """Clients following its output now (terminals and output streams): its session is in use."""
        self.kept = False
        """A terminal asked to keep running when its sockets close (reattached later), not ended after a grace."""
        self.owner: object = None
        """Who started it, for the host's own records (the service's audit row names the key)."""
        self._done = threading.Event()
        self._redactor = RunRedactor.for_request(request)
        """Masks the secrets of its brokered credentials in what it prints (egress/redaction.py)."""
        self._to_rings = self._redactor.listener(self._store) if self._redactor is not None else self._store

    # -- reading ----------------------------------------------------------------------------

    def ring(self, stream: StreamName) -> OutputRing:
        return self.stdout if stream == "stdout" else self.stderr

    def output(self, stream: StreamName = "stdout", offset: int = 0, limit: int = 1 << 20) -> Chunk:
        """Bytes of `stream` from `offset` (see OutputRing.read)."""
        return self.ring(stream).read(offset, limit)

    def text(self, stream: StreamName = "stdout") -> str:
        """What the ring still holds of `stream`, decoded."""
        return self.ring(stream).read(0, self.ring(stream).capacity).data.decode("utf-8", "replace")

    def wait_output(self, stream: StreamName, offset: int, timeout: float | None) -> bool:
        """Block until `stream` has bytes past `offset` or ended; False on timeout."""
        return self.ring(stream).wait(offset, timeout)

    # -- state ------------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self.sandbox is not None and self.sandbox.running

    @property
    def state(self) -> ProcessState:
        if self.start_error is not None:
            return "failed"
        if self.sandbox is None:
            return "starting"
        if self.sandbox.running:
            return "running" if self.sandbox.init_pid is not None else "starting"
        if self.sandbox.stop_reason is not None or (self.sandbox.signal_name == "KILL"):
            return "killed"
        return "exited"

    @property
    def exit_code(self) -> int | None:
        return self.sandbox.exit_code if self.sandbox is not None and not self.sandbox.running else None

    @property
    def duration_s(self) -> float:
        end = self.ended_at or time.time()
        return end - self.started_at

    def ports(self) -> list[int]:
        """The ports the guest's own servers listen on (never the egress relay's: reached from outside,
        it would hand the session's network policy and brokered credentials to whoever calls the port)."""
        from wasm_runner.processes.netns import listening_ports
        from wasm_runner.providers.native.egress import RELAY_PORT

        sandbox = self.sandbox
        pid = sandbox.netns_pid() if sandbox is not None else None
        if sandbox is None or pid is None:
            return []
        internal = {RELAY_PORT} if sandbox.egress is not None else set()
        return sorted(listening_ports(pid) - internal)

    def error(self) -> str | None:
        if self.start_error is not None:
            return self.start_error
        if self.sandbox is None:
            return None
        if self.sandbox.memory_exceeded:
            return "stopped: ran out of memory (memory_bytes); raise it or use less memory"
        return self.sandbox.stop_reason

    def info(self) -> ProcessInfo:
        from wasm_runner.providers.native.sandboxed_process import MAIN_NS_PID

        sandbox = self.sandbox
        running = sandbox is not None and sandbox.running
        return ProcessInfo(
            id=self.id, state=self.state, argv=self.argv, name=self.name,
            pid=MAIN_NS_PID if running and sandbox is not None and sandbox.init_pid is not None else None,
            pty=self.pty, started_at=self.started_at, ended_at=self.ended_at, exit_code=self.exit_code,
            signal=sandbox.signal_name if sandbox is not None and not running else None, error=self.error(),
            stdout_bytes=self.stdout.end, stderr_bytes=self.stderr.end, stdout_dropped=self.stdout.dropped,
            stderr_dropped=self.stderr.dropped, ports=self.ports() if running else [],
            memory_bytes=self.memory_bytes, enforcement=sandbox.enforcement if sandbox is not None else "")

    # -- followers --------------------------------------------------------------------------

    def follow(self, *, terminal: bool = False, keep: bool = False) -> None:
        """A client follows its output from now on (`unfollow` when it leaves): the session is in use.
        `terminal`: a terminal socket attached; `keep`: that terminal keeps running once its sockets
        close (once kept, a later attach without `keep` does not undo it)."""
        self.watchers += 1
        if terminal:
            self.attached += 1
            self.kept = self.kept or keep

    def unfollow(self, *, terminal: bool = False) -> None:
        self.watchers -= 1
        if terminal:
            self.attached -= 1

    # -- control ----------------------------------------------------------------------------

    def wait(self, timeout: float | None = None) -> int | None:
        """Wait for the process to end; its exit code (None on timeout)."""
        self._done.wait(timeout)
        return self.exit_code

    def signal(self, name: str = "TERM", tree: bool = False) -> bool:
        """Send a signal (TERM, INT, KILL, HUP, QUIT, USR1, USR2); False when it is not running."""
        return self.sandbox.send_signal(name, tree) if self.sandbox is not None else False

    def kill(self, grace_s: float | None = None, reason: str | None = None) -> int | None:
        """End its whole tree: TERM to every process of its sandbox, KILL after `grace_s`; its exit code."""
        if self.sandbox is not None:
            self.sandbox.terminate(grace_s, reason or "stopped by request")
        self._done.wait(10)
        return self.exit_code

    def write(self, data: bytes | str, eof: bool = False) -> int:
        """Write to its stdin (its terminal for a pty process)."""
        if self.sandbox is None:
            raise ProcessError(f"process {self.id} has not started")
        raw = data.encode() if isinstance(data, str) else data
        try:
            return self.sandbox.write_stdin(raw, eof)
        except BrokenPipeError as exc:
            raise ProcessError(f"process {self.id}: {exc}") from None

    def take_network(self) -> list[NetworkEvent]:
        """Its egress decisions made since the last take, in order (each is given once)."""
        egress = self.sandbox.egress if self.sandbox is not None else None
        return egress.take_decisions() if egress is not None else []

    def write_some(self, data: bytes) -> int:
        """Write what its stdin (or terminal) takes now, without waiting: the bytes written (0: full)."""
        if self.sandbox is None:
            raise ProcessError(f"process {self.id} has not started")
        try:
            return self.sandbox.write_some(data)
        except BrokenPipeError as exc:
            raise ProcessError(f"process {self.id}: {exc}") from None

    def resize(self, cols: int, rows: int) -> None:
        if self.sandbox is None or not self.pty:
            raise ProcessError(f"process {self.id} has no terminal")
        self.sandbox.resize(cols, rows)

    def sink(self, stream: str, data: bytes) -> None:
        self._to_rings("stdout" if stream == "stdout" else "stderr", data)

    def _store(self, stream: Stream, data: bytes) -> None:
        (self.stdout if stream == "stdout" else self.stderr).write(data)

    def mark_ended(self) -> None:
        self.ended_at = time.time()
        if self._redactor is not None:
            self._redactor.flush()
        self.stdout.close()
        self.stderr.close()
        self._done.set()


class ProcessManager:
    """The background processes of one session (see the module docstring)."""

    def __init__(self, provider: Callable[[], NativeProvider], workspace: Workspace, mounts: tuple[Any, ...] = (),
                 limits: ProcessLimits | None = None, observer: Observer | None = None) -> None:
        self._provider = provider
        self.workspace = workspace
        self.mounts = mounts
        self.limits = limits or ProcessLimits()
        self.observer = observer
        self._lock = threading.Lock()
        self._processes: dict[str, BackgroundProcess] = {}
        self._seq = 0
        self._cgroup: RunCgroup | None = None
        self._closing: list[str] = []
        """The reasons of the `close` calls running now: starts are refused meanwhile."""
        self._ended_for_good: str | None = None
        """Set by a final close (deletion, shutdown): starts are refused from then on."""

    # -- queries ----------------------------------------------------------------------------

    def all(self) -> list[BackgroundProcess]:
        with self._lock:
            return list(self._processes.values())

    def live(self) -> list[BackgroundProcess]:
        return [p for p in self.all() if p.state in ("starting", "running")]

    def get(self, process_id: str) -> BackgroundProcess:
        with self._lock:
            process = self._processes.get(process_id)
        if process is None:
            raise ProcessNotFound(f"no process {process_id!r} in this session")
        return process

    def number_after(self, last: int) -> None:
        """Number the processes started from now on after `p{last}` (ids the session used on another
        host stay its own)."""
        with self._lock:
            self._seq = max(self._seq, last)

    # -- start ------------------------------------------------------------------------------

    def observe(self, observer: Observer) -> None:
        """Tell `observer` of the processes' starts, network batches and exits from now on, unless an
        observer is told already (the first one stays: a service sets its own once)."""
        with self._lock:
            if self.observer is None:
                self.observer = observer

    def start(self, request: ExecRequest, *, cwd: str = "", name: str = "", stdin: bool = True,
              pty: tuple[int, int] | None = None, ring_bytes: int | None = None,
              owner: object = None, disk_room: int | None = None) -> BackgroundProcess:
        """Start `request` (a command, or code in a language) in the background; returns at once.
        `disk_room`: the most it may add to disk besides its limits while it runs (a shared quota's room)."""
        guest_cwd = guest_directory(cwd)
        if request.command is not None and (not request.command or not all(request.command)):
            raise ProcessError("command must be a non-empty list of non-empty strings")
        with self._lock:
            refusal = self._refusal()
            if refusal is not None:
                raise ProcessesClosed(refusal)
            live = [p for p in self._processes.values() if p.state in ("starting", "running")]
            if len(live) >= self.limits.max_live:
                raise ProcessLimitError(
                    f"this session already has {len(live)} live processes, its cap (max_live = {self.limits.max_live}): "
                    "stop one first (DELETE /v1/sessions/{id}/processes/{pid}) or wait for one to end")
            used = sum(p.memory_bytes for p in live)
            wanted = request.limits.memory_bytes
            if used + wanted > self.limits.memory_bytes:
                raise ProcessLimitError(
                    f"the session's processes may use {self.limits.memory_bytes // MiB} MiB together; "
                    f"{used // MiB} MiB are taken by live ones and this one asks for {wanted // MiB} MiB: "
                    "stop one, or ask for less (memory_bytes)")
            self._seq += 1
            process = BackgroundProcess(f"p{self._seq}", request, name, pty is not None,
                                        ring_bytes or self.limits.ring_bytes)
            process.owner = owner
            self._processes[process.id] = process
            self._forget_old()
        provider = self._provider()
        try:
            sandbox = provider.spawn(request, self.workspace, self.mounts, cwd=guest_cwd, stdin=stdin, pty=pty,
                                     cgroup_parent=self._session_cgroup(provider), disk_room=disk_room)
        except Exception as exc:
            process.start_error = str(exc)
            process.mark_ended()
            if self.observer is not None:
                self.observer("exit", process)
            raise ProcessError(str(exc)) from None
        with self._lock:
            process.sandbox = sandbox
            refusal = self._refusal()
        if sandbox.egress is not None:
            sandbox.egress.watch(lambda held: self._decided(process, held))
        sandbox.run(process.sink, lambda _: self._exited(process))
        if self.observer is not None:
            self.observer("start", process)
        if refusal is not None:  # a close began while this sandbox was set up: it waits for this end
            sandbox.terminate(0, "stopped as it started: " + refusal)
            raise ProcessesClosed(f"{refusal} (it was stopped as it started)")
        return process

    def _refusal(self) -> str | None:
        """Why no process may start now, if so (the caller holds the lock)."""
        if self._ended_for_good is not None:
            return f"the session's processes were ended for good ({self._ended_for_good})"
        if self._closing:
            return f"the session's processes are being ended ({self._closing[0]}); start it again once that is done"
        return None

    def _exited(self, process: BackgroundProcess) -> None:
        process.mark_ended()
        if self.observer is not None:
            try:
                self.observer("exit", process)
            except Exception:  # noqa: BLE001
                log.exception("process observer failed")

    def _decided(self, process: BackgroundProcess, held: int) -> None:
        if held >= NETWORK_BATCH and self.observer is not None and process.running:
            try:
                self.observer("network", process)
            except Exception:  # noqa: BLE001 - the proxy's thread must go on
                log.exception("process observer failed")

    def set_egress(self, policy: EgressPolicy) -> None:
        """Hold the live processes' new connections to `policy` (those open keep going). A process
        started without network has no way out to change: it keeps none."""
        for process in self.live():
            sandbox = process.sandbox
            if sandbox is not None and sandbox.egress is not None:
                sandbox.egress.set_policy(policy)

    def _forget_old(self) -> None:
        ended = [p for p in self._processes.values() if p.state not in ("starting", "running")]
        for process in ended[:max(len(ended) - ENDED_KEPT, 0)]:
            del self._processes[process.id]

    def _session_cgroup(self, provider: NativeProvider) -> RunCgroup | None:
        """The cgroup all this session's processes live under (memory cap together), where cgroups exist."""
        from wasm_runner.providers.native.limits import RunCgroup, RunLimits

        with self._lock:
            if self._cgroup is not None:
                return self._cgroup
            _, problem, support = provider.environment()
            if problem is not None or support.enforcement == "rlimit":
                return None
            try:
                self._cgroup = RunCgroup(support, RunLimits(
                    memory_bytes=self.limits.memory_bytes,
                    max_processes=provider.policy.max_processes * self.limits.max_live, cpus=None))
            except OSError as exc:
                log.warning("could not create the session's process cgroup (%s): each process is bounded alone", exc)
                return None
            return self._cgroup

    # -- end --------------------------------------------------------------------------------

    def close(self, reason: str = "stopped: the session ended", grace_s: float | None = None,
              final: bool = True) -> None:
        """End every live process (TERM, then KILL after the grace period), in parallel.

        Starts are refused while it runs, and for good when `final` (deletion, shutdown); a start
        already setting its sandbox up ends it at once, and this waits for that end. Afterwards
        (`final` false: hibernation) processes may start again."""
        with self._lock:
            self._closing.append(reason)
            if final and self._ended_for_good is None:
                self._ended_for_good = reason
        try:
            live = self.live()
            threads = [threading.Thread(target=p.kill, args=(grace_s, reason), daemon=True) for p in live]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(15)
            with self._lock:
                cgroup, self._cgroup = self._cgroup, None
            if cgroup is not None:
                cgroup.remove()
        finally:
            with self._lock:
                self._closing.remove(reason)


def guest_directory(cwd: str) -> str:
    """The sandbox path of a working directory given relative to /workspace (or absolute under it)."""
    if not cwd:
        return ""
    if "\0" in cwd:
        raise ProcessError("cwd must not contain NUL bytes")
    path = cwd if cwd.startswith("/") else f"{GUEST_WORKSPACE}/{cwd}"
    normal = posixpath.normpath(path)
    if ".." in path.split("/") or not (normal == GUEST_WORKSPACE or normal.startswith(GUEST_WORKSPACE + "/")):
        raise ProcessError(f"cwd must be a directory under {GUEST_WORKSPACE} (got {cwd!r})")
    return normal
