"""Native Python kernels: one long-lived interpreter per session, inside the session's sandbox.

A kernel is a bubblewrap sandbox made as a native run is (same namespaces, environment
allowlist, seccomp filter, workspace and /tmp binds), whose program is the kernel driver
(`_runtimes/native/kernel_driver.py`): it keeps one namespace across calls, reads a call per
line on a request pipe and answers on a reply pipe, while the program's output flows through
its standard streams. Its cgroup (or rlimits) holds for the kernel's whole life, so memory is
bounded across calls, not per call.

The host decides everything on what it sees itself: the deadline (SIGINT to the driver, then
the whole sandbox killed if no answer comes within the grace), the output cap and the disk
quota (the sandbox killed), an answer too large or not JSON (killed), the driver gone (killed,
reported as a crash or an out-of-memory kill from the cgroup's own counters). A killed kernel
is rebuilt on the next call, which says `kernel_restarted`.

Processes are spawned by one long-lived thread: bubblewrap's --die-with-parent is bound to
the thread that forked it, and a kernel outlives the worker thread of the call that made it.
"""

from __future__ import annotations

import json
import os
import queue
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, ClassVar

import msgspec

from wasm_runner.capture import Capture
from wasm_runner.errors import WasmRunnerError
from wasm_runner.providers.native.egress import RunEgress
from wasm_runner.providers.native.limits import RunCgroup
from wasm_runner.providers.native.pidfd import open_pidfd
from wasm_runner.providers.native.posix import first_child, read_some, signal_pid, write_all
from wasm_runner_protocol.execution import GuestError, LimitName, RichOutput

KernelKey = tuple[int, int, tuple[Any, ...], bool]
"""What a kernel holds for its whole life: memory bytes, disk bytes, mounts, network (`kernel_call.kernel_key`)."""

DRIVER_NAME = "kernel_driver.py"
PRELOAD = ("numpy", "pandas", "matplotlib")
"""Modules a kernel imports before its first call (those the environment has)."""
READY_TIMEOUT_S = 60.0
"""How long a new kernel may take to import its preloaded modules and say it is ready."""
REPLY_CAP = 16 << 20
"""Largest answer read from a driver (rich outputs included); a larger one kills the kernel."""


class KernelError(WasmRunnerError):
    """The kernel could not be started or died while starting."""


@dataclass
class Reply:
    """What one call came to, as the host saw it."""

    exit_code: int = 0
    value: str | None = None
    error: GuestError | None = None
    outputs: list[RichOutput] = field(default_factory=list)
    limit: LimitName | None = None
    died: bool = False
    """The kernel is gone (killed by the host or dead by itself): the next call rebuilds it."""
    crash: str | None = None
    """Why the kernel died when no limit explains it."""


class _ReplyShape(msgspec.Struct):
    exit_code: int = 0
    value: str | None = None
    error: GuestError | None = None
    outputs: list[RichOutput] = []


class _Spawner:
    """One daemon thread that starts every kernel process (see the module's docstring)."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[[], subprocess.Popen[bytes]], Future[subprocess.Popen[bytes]]]] = (
            queue.SimpleQueue())
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def spawn(self, start: Callable[[], subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="wasm-runner-kernel-spawner", daemon=True)
                self._thread.start()
        done: Future[subprocess.Popen[bytes]] = Future()
        self._jobs.put((start, done))
        return done.result()

    def _loop(self) -> None:
        # A blocked signal stays blocked across exec: whichever thread made this one (some
        # libraries' threads block INT and TERM), the processes it starts block none.
        signal.pthread_sigmask(signal.SIG_SETMASK, ())
        while True:
            start, done = self._jobs.get()
            try:
                done.set_result(start())
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                done.set_exception(exc)


spawner = _Spawner()


class NativeKernel:
    """One live kernel process: its pipes, its cgroup, its calls."""

    def __init__(self, proc: subprocess.Popen[bytes], request_w: int, reply_r: int, status_r: int,
                 cgroup: RunCgroup | None, key: KernelKey, kill_grace_s: float) -> None:
        self.proc = proc
        self.key = key
        """The limits it was made for: a call under other limits gets a new kernel."""
        self.cgroup = cgroup
        self.kill_grace_s = kill_grace_s
        self._request_w = request_w
        self._reply_r = reply_r
        self._status_r = status_r
        self._reply = b""
        self._status = b""
        self.init_pid: int | None = None
        self.driver_pid: int | None = None
        self.preloaded: list[str] = []
        self.closed = False
        self.on_close: Callable[[], None] | None = None
        """What else goes with the kernel (a slot it was made on)."""
        self.egress: RunEgress | None = None
        """Its socket on the host's egress proxy, renewed for each call (a kernel whose calls may reach
        the network; under `deny` it has none)."""
        self._lock = threading.Lock()
        for fd in (reply_r, status_r):
            os.set_blocking(fd, False)
        assert proc.stdout is not None and proc.stderr is not None
        self._out_fds = (proc.stdout.fileno(), proc.stderr.fileno())
        for fd in self._out_fds:
            os.set_blocking(fd, False)

    # -- start -------------------------------------------------------------------------------

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Wait for the driver's first line (its preloads imported); KernelError if it never comes."""
        deadline = time.monotonic() + timeout_s
        stderr = bytearray()
        with selectors.DefaultSelector() as selector:
            selector.register(self._reply_r, selectors.EVENT_READ, "reply")
            selector.register(self._status_r, selectors.EVENT_READ, "status")
            for fd in self._out_fds:
                selector.register(fd, selectors.EVENT_READ, "out")
            while True:
                line = self._line()
                if line is not None:
                    try:
                        self.preloaded = [str(n) for n in json.loads(line).get("ready", [])]
                    except (ValueError, AttributeError) as exc:
                        self.close()
                        raise KernelError("the kernel answered its start with something else than ready") from exc
                    break
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    self.close()
                    detail = stderr.decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
                    raise KernelError(f"the kernel did not start: {detail[0]}")
                for key, _ in selector.select(min(left, 0.5)):
                    if key.data == "reply":
                        self._fill(key.fd)
                    elif key.data == "status":
                        self._read_status()
                    else:
                        chunk = read_some(key.fd)
                        if chunk:
                            stderr += chunk[-4000:]
                        elif chunk == b"":
                            selector.unregister(key.fd)
        self._read_status()
        if self.init_pid is not None:
            self.driver_pid = first_child(self.init_pid)

    def _read_status(self) -> None:
        """bubblewrap's status lines (written in pieces): the host pid of the sandbox's init."""
        chunk = read_some(self._status_r)
        while chunk:
            self._status += chunk
            chunk = read_some(self._status_r)
        while b"\n" in self._status:
            line, self._status = self._status.split(b"\n", 1)
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if isinstance(message, dict) and "child-pid" in message:
                self.init_pid = int(message["child-pid"])

    # -- one call ----------------------------------------------------------------------------

    def call(self, request: dict[str, Any], timeout_s: float, stdout: Capture, stderr: Capture,
             wake_r: int, stop_reason: Callable[[], LimitName | None], on_start: Callable[[], None]) -> Reply:
        """Send one call and pump its output until the answer, a limit or the kernel's death.

        `stop_reason` says whether the host stopped the call meanwhile (output cap, disk quota,
        a cancel), signalled through `wake_r`."""
        with self._lock:
            return self._call(request, timeout_s, stdout, stderr, wake_r, stop_reason, on_start)

    def _call(self, request: dict[str, Any], timeout_s: float, stdout: Capture, stderr: Capture,
              wake_r: int, stop_reason: Callable[[], LimitName | None], on_start: Callable[[], None]) -> Reply:
        captures = {self._out_fds[0]: stdout, self._out_fds[1]: stderr}
        try:
            write_all(self._request_w, (json.dumps(request) + "\n").encode())
        except OSError:
            self.close()
            return Reply(exit_code=1, died=True, crash="the kernel had exited before the call")
        on_start()
        deadline = time.monotonic() + timeout_s
        interrupted_at: float | None = None
        limit: LimitName | None = None
        pidfd = open_pidfd(self.proc.pid)
        with selectors.DefaultSelector() as selector:
            selector.register(self._reply_r, selectors.EVENT_READ, "reply")
            selector.register(wake_r, selectors.EVENT_READ, "wake")
            if pidfd is not None:
                selector.register(pidfd, selectors.EVENT_READ, "exit")
            for fd in captures:
                selector.register(fd, selectors.EVENT_READ, "out")
            try:
                while True:
                    line = self._line()
                    if line is not None:
                        self._drain(captures)
                        return self._answer(line, limit)
                    if len(self._reply) > REPLY_CAP:
                        self.close()
                        return Reply(exit_code=1, died=True, limit="output")
                    now = time.monotonic()
                    stopped = stop_reason()
                    if stopped is not None and stopped not in ("timeout", "cancelled"):
                        self._drain(captures)
                        self.close()  # the output cap or the disk quota: the sandbox goes
                        return Reply(exit_code=137, died=True, limit=stopped)
                    if limit is None and (stopped is not None or now >= deadline):
                        limit = stopped or "timeout"
                        interrupted_at = now
                        self._interrupt()
                    if interrupted_at is not None and now >= interrupted_at + self.kill_grace_s:
                        self._drain(captures)
                        self.close()
                        return Reply(exit_code=137, died=True, limit=limit)
                    if self.proc.poll() is not None:
                        self._drain(captures)
                        oom = self.cgroup.oom_killed() if self.cgroup is not None else False
                        code = _exit_code(self.proc.returncode)
                        self.close()
                        if limit is None and oom:
                            limit = "memory"
                        return Reply(exit_code=code, died=True, limit=limit,
                                     crash=None if limit else f"the kernel exited (status {code})")
                    wait = deadline - now if interrupted_at is None else interrupted_at + self.kill_grace_s - now
                    for key, _ in selector.select(max(min(wait, 0.5 if pidfd is None else 5.0), 0)):
                        if key.data == "reply":
                            if not self._fill(key.fd):
                                selector.unregister(key.fd)
                        elif key.data == "out":
                            data = read_some(key.fd)
                            if data:
                                captures[key.fd].write(data)
                            elif data == b"":
                                selector.unregister(key.fd)
                        elif key.data == "wake":
                            read_some(wake_r)
                        else:
                            selector.unregister(key.fd)
            finally:
                if pidfd is not None:
                    os.close(pidfd)

    def _answer(self, line: bytes, limit: LimitName | None) -> Reply:
        try:
            shape = msgspec.json.decode(line, type=_ReplyShape)
        except msgspec.ValidationError:
            self.close()
            return Reply(exit_code=1, died=True, crash="the kernel answered with a malformed reply")
        if limit is not None:  # stopped within the grace: the kernel and its state stay
            return Reply(exit_code=137, limit=limit, outputs=shape.outputs)
        return Reply(exit_code=shape.exit_code, value=shape.value, error=shape.error, outputs=shape.outputs)

    def _interrupt(self) -> None:
        """KeyboardInterrupt in the driver; its whole sandbox is killed if it does not answer in the grace."""
        pid = self.driver_pid
        if self.init_pid is None:
            self._read_status()
        if pid is None and self.init_pid is not None:
            pid = self.driver_pid = first_child(self.init_pid)
        if pid is not None:
            signal_pid(pid, signal.SIGINT)

    def _line(self) -> bytes | None:
        end = self._reply.find(b"\n")
        if end < 0:
            return None
        line, self._reply = self._reply[:end], self._reply[end + 1:]
        return line

    def _fill(self, fd: int) -> bool:
        data = read_some(fd)
        if data:
            self._reply += data
        return data != b""

    def _drain(self, captures: dict[int, Capture]) -> None:
        """Whatever the program printed before its answer is in the pipes now: read it all."""
        for fd, capture in captures.items():
            while True:
                data = read_some(fd)
                if not data:
                    break
                capture.write(data)

    # -- end ---------------------------------------------------------------------------------

    def memory_peak(self) -> int | None:
        return self.cgroup.memory_peak() if self.cgroup is not None else None

    def close(self) -> None:
        """Kill the whole sandbox (its PID namespace goes with its init) and release the cgroup."""
        if self.closed:
            return
        self.closed = True
        if self.init_pid is not None:
            signal_pid(self.init_pid, signal.SIGKILL)
        signal_pid(self.proc.pid, signal.SIGKILL)
        if self.cgroup is not None:
            self.cgroup.signal_all(signal.SIGKILL)
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        for fd in (self._request_w, self._reply_r, self._status_r):
            try:
                os.close(fd)
            except OSError:
                pass
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()
        if self.cgroup is not None:
            self.cgroup.release()
        if self.egress is not None:
            self.egress.close()
        if self.on_close is not None:
            self.on_close()


@dataclass
class NativeKernelSlot:
    """A session's native kernel, kept in the session's provider-owned kernels by KERNEL_KEY.

    Same attributes as the WebAssembly provider's slots (`kernel`, `lost`, `reason`, `drop`), so
    the session drops and counts it the same way. Its state is not snapshotted: a process's memory
    is not data the host tracks (see the snapshots decision record), so hibernation, restarts and
    forks start a new kernel and say why."""

    saves_state: ClassVar[bool] = False
    kernel: NativeKernel | None = None
    lost: bool = False
    reason: str | None = None
    """Why its state was dropped (the next call's `restart_reason`)."""

    def drop(self, reason: str) -> None:
        if self.kernel is not None:
            self.kernel.close()
        self.kernel, self.lost, self.reason = None, True, reason


KERNEL_KEY = "native:python"
"""The key of a session's native Python kernel among its kernels (WebAssembly ones are keyed by language)."""


def slot_of(kernels: dict[str, Any]) -> NativeKernelSlot:
    """The session's native kernel slot, made on first use (keeping a `lost` mark set by the session)."""
    slot = kernels.get(KERNEL_KEY)
    if not isinstance(slot, NativeKernelSlot):
        slot = NativeKernelSlot(lost=bool(getattr(slot, "lost", False)))
        kernels[KERNEL_KEY] = slot
    return slot


# -- helpers --------------------------------------------------------------------------------------


def _exit_code(returncode: int | None) -> int:
    if returncode is None:
        return 1
    return 128 - returncode if returncode < 0 else returncode
