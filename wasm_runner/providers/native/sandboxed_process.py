"""A native sandbox that keeps running after the call that started it: a session's background
process or terminal.

The provider (provider.py, `NativeProvider.spawn`) sets it up exactly like a native run (the
same bwrap options, cgroup or rlimits, seccomp filter, egress relay, disk-quota watch, the
unprivileged sandbox user); this object then owns it: one daemon thread reads its output
(pipes, or a pseudo-terminal's master) into the caller's sinks, learns the sandbox's init
from bwrap's status descriptor, reaps it, and undoes the set-up when it ends. Nothing of the
sandbox outlives it: ending the sandbox's init ends its PID namespace, and the run's cgroup
is emptied; bwrap itself dies with the thread that started it (`--die-with-parent`, on the
kernel module's long-lived spawner thread), so a killed service leaves nothing behind either.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import selectors
import signal
import struct
import subprocess
import termios
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from wasm_runner.providers.native.limits import RunCgroup
from wasm_runner.providers.native.pidfd import open_pidfd
from wasm_runner.providers.native.posix import child_tree, children_of, read_some, reap, signal_pid

if TYPE_CHECKING:
    from wasm_runner.providers.native.egress import RunEgress

log = logging.getLogger("wasm_runner.native")

DRAIN_AFTER_EXIT_S = 0.5
"""How long output is still read after the sandbox ended (a left-over holder of the pipe is killed first)."""
SIGNALS = {"TERM": signal.SIGTERM, "INT": signal.SIGINT, "KILL": signal.SIGKILL, "HUP": signal.SIGHUP,
           "QUIT": signal.SIGQUIT, "USR1": signal.SIGUSR1, "USR2": signal.SIGUSR2}
MAIN_NS_PID = 2
"""The program's pid inside its sandbox: bwrap's init is 1 and starts the program next."""

Sink = Callable[[str, bytes], None]


class SandboxProcess:
    """The live sandbox of one background process (see the module docstring)."""

    def __init__(self, proc: subprocess.Popen[bytes], *, status_r: int, outputs: dict[int, str], stdin_fd: int | None,
                 pty_master: int | None, cgroup: RunCgroup | None, enforcement: str,
                 cleanup: Callable[[SandboxProcess], str | None], kill_grace_s: float,
                 egress: RunEgress | None = None) -> None:
        self.proc = proc
        self.egress = egress
        """Its socket on the host's egress proxy (None: no network): its decisions, its policy."""
        self._status_r = status_r
        self._outputs = dict(outputs)
        """Descriptor -> stream name (a pty's master is `stdout`)."""
        self.stdin_fd = stdin_fd
        self.pty_master = pty_master
        self.cgroup = cgroup
        self.enforcement = enforcement
        self._cleanup = cleanup
        self.kill_grace_s = kill_grace_s
        self.init_pid: int | None = None
        """The host pid of the sandbox's init (pid 1 in its namespace)."""
        self._main_pid: int | None = None
        self.exit_code: int | None = None
        self.signal_name: str | None = None
        self.stop_reason: str | None = None
        """Set by whoever ends it (session ended, disk quota, …), reported as the process's error."""
        self.memory_exceeded = False
        self._owned_fds = {fd for fd in (*outputs, status_r, stdin_fd, pty_master) if fd is not None}
        """Every descriptor this object closes once, when the sandbox ended (an output's too after its EOF)."""
        self._started = threading.Event()
        self._exited = threading.Event()
        self._stdin_lock = threading.Lock()
        """Held around each use of the input descriptor, so it is never used once closed (or reused)."""
        self._input_closed = False
        self._message_lock = threading.Lock()
        """Keeps one `write_stdin` call's bytes together against another's."""
        self._sink: Sink = lambda stream, data: None
        self._on_exit: Callable[[SandboxProcess], None] = lambda process: None
        self._thread: threading.Thread | None = None

    # -- running -------------------------------------------------------------------------

    def run(self, sink: Sink, on_exit: Callable[[SandboxProcess], None]) -> None:
        """Start the reader thread: output goes to `sink(stream, bytes)`, then `on_exit(self)` once."""
        self._sink, self._on_exit = sink, on_exit
        self._thread = threading.Thread(target=self._loop, name=f"wasm-runner-process-{self.proc.pid}", daemon=True)
        self._thread.start()

    def wait_started(self, timeout: float) -> bool:
        """True once the program runs in its sandbox (or the sandbox already ended)."""
        return self._started.wait(timeout)

    def wait(self, timeout: float | None = None) -> bool:
        return self._exited.wait(timeout)

    @property
    def running(self) -> bool:
        return not self._exited.is_set()

    def _loop(self) -> None:
        selector = selectors.DefaultSelector()
        for fd in self._outputs:
            os.set_blocking(fd, False)
            selector.register(fd, selectors.EVENT_READ, "out")
        os.set_blocking(self._status_r, False)
        selector.register(self._status_r, selectors.EVENT_READ, "status")
        pidfd = open_pidfd(self.proc.pid)
        if pidfd is not None:
            selector.register(pidfd, selectors.EVENT_READ, "exit")
        status_buffer = b""
        status: int | None = None
        exited_at = 0.0
        try:
            while True:
                if status is None:
                    status = reap(self.proc.pid)[0]
                    if status is not None:
                        exited_at = time.monotonic()
                        self._started.set()
                        self._after_exit()
                if status is not None and (not self._outputs or time.monotonic() >= exited_at + DRAIN_AFTER_EXIT_S):
                    break
                timeout = (1.0 if pidfd is not None else 0.05) if status is None else 0.05
                for key, _ in selector.select(timeout):
                    if key.data == "out":
                        data = read_some(key.fd)
                        if data:
                            self._sink(self._outputs[key.fd], data)
                        elif data is not None:
                            selector.unregister(key.fd)
                            del self._outputs[key.fd]
                    elif key.data == "status":
                        chunk = read_some(key.fd)
                        if chunk:
                            status_buffer += chunk
                            while b"\n" in status_buffer:
                                line, status_buffer = status_buffer.split(b"\n", 1)
                                self._status_line(line)
                        elif chunk is not None:
                            selector.unregister(key.fd)
                    elif key.data == "exit":
                        selector.unregister(key.fd)
        except Exception:  # noqa: BLE001 - never leave the sandbox behind
            log.exception("background process reader failed")
            self.kill()
            if status is None:
                with contextlib.suppress(ChildProcessError):
                    status = os.waitpid(self.proc.pid, 0)[1]
        finally:
            selector.close()
            if pidfd is not None:
                os.close(pidfd)
            self._finish(status)

    def _status_line(self, line: bytes) -> None:
        try:
            message = json.loads(line)
        except ValueError:
            return
        if "child-pid" in message:
            self.init_pid = int(message["child-pid"])
            self._started.set()

    def _after_exit(self) -> None:
        if self.cgroup is not None:
            self.cgroup.signal_all(signal.SIGKILL)  # whatever still holds the output pipes

    def _finish(self, status: int | None) -> None:
        if status is not None:
            if os.WIFSIGNALED(status):
                self.exit_code = 128 + os.WTERMSIG(status)
            elif os.WIFEXITED(status):
                self.exit_code = os.WEXITSTATUS(status)
                if self.exit_code > 128 and self.exit_code - 128 in signal.Signals._value2member_map_:
                    # bwrap's init passes a signal death on as 128 + N
                    self.signal_name = signal.Signals(self.exit_code - 128).name.removeprefix("SIG")
            if os.WIFSIGNALED(status):
                self.signal_name = signal.Signals(os.WTERMSIG(status)).name.removeprefix("SIG")
        self.proc.returncode = self.exit_code if self.exit_code is not None else -1
        if self.cgroup is not None and self.cgroup.oom_killed():
            self.memory_exceeded = True
        with self._stdin_lock:  # no writer holds the input descriptor now, and none will
            self._input_closed = True
            self.stdin_fd = None
            owned, self._owned_fds = self._owned_fds, set()
        for fd in owned:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._outputs.clear()
        try:
            problem = self._cleanup(self)
            if problem and self.stop_reason is None:
                self.stop_reason = problem
        except Exception:  # noqa: BLE001 - the process is over either way
            log.exception("background process clean-up failed")
        self._exited.set()
        self._started.set()
        try:
            self._on_exit(self)
        except Exception:  # noqa: BLE001
            log.exception("background process exit callback failed")

    # -- pids ------------------------------------------------------------------------------

    def main_pid(self) -> int | None:
        """The host pid of the program (pid 2 in its sandbox), once started."""
        if self._main_pid is not None:
            return self._main_pid
        init = self.init_pid
        if init is None:
            return None
        for child in children_of(init):
            if _ns_pid(child) == MAIN_NS_PID:
                self._main_pid = child
                return child
        return None

    def sandbox_pids(self) -> set[int]:
        """Every host pid inside the sandbox except its init; none while the sandbox is set up (until bwrap
        names its init, what runs is bwrap's own: its init-to-be, which ignores TERM as a namespace's init)."""
        if self.init_pid is None:
            return set()
        spare = {self.proc.pid, self.init_pid}
        if self.cgroup is not None:
            return self.cgroup.pids() - spare
        return child_tree(self.init_pid) - spare

    # -- control ---------------------------------------------------------------------------

    def send_signal(self, name: str, tree: bool = False) -> bool:
        """Send signal `name` (TERM, INT, KILL, …) to the program, or to every process of the
        sandbox; False when it has not started or already ended."""
        sig = SIGNALS[name]
        if not self.running:
            return False
        pid = self.main_pid()
        deadline = time.monotonic() + 2.0
        while pid is None and self.running and time.monotonic() < deadline:
            time.sleep(0.005)  # the sandbox is still being set up: its program comes next
            pid = self.main_pid()
        if tree:  # once the program runs (before, the tree is only the sandbox's own init)
            pids = self.sandbox_pids()
            for each in pids:
                signal_pid(each, sig)
            return bool(pids)
        if pid is None:
            return False
        signal_pid(pid, sig)
        return True

    def kill(self) -> None:
        """SIGKILL the whole sandbox at once (its init: the kernel then ends its PID namespace)."""
        if self.init_pid is not None:
            signal_pid(self.init_pid, signal.SIGKILL)
        if self.cgroup is not None:
            self.cgroup.signal_all(signal.SIGKILL, spare={self.proc.pid})
        signal_pid(self.proc.pid, signal.SIGKILL)

    def terminate(self, grace_s: float | None = None, reason: str | None = None) -> None:
        """TERM every process of the sandbox, KILL what is left after `grace_s`; returns once it ended."""
        if not self.running:
            return
        if reason is not None and self.stop_reason is None:
            self.stop_reason = reason
        grace = self.kill_grace_s if grace_s is None else grace_s
        pids = self.sandbox_pids() if grace > 0 else set()
        for pid in pids:
            signal_pid(pid, signal.SIGTERM)
        # No process yet (the sandbox is still being set up): nothing would use a grace period.
        if pids and self.wait(grace):
            return
        self.kill()
        if not self.wait(5.0):
            log.warning("a background sandbox (pid %s) did not end after SIGKILL", self.proc.pid)

    def write_some(self, data: bytes | memoryview) -> int:
        """Write what the program's stdin (or terminal) takes now, without waiting: the bytes written,
        0 when its buffer is full; raises BrokenPipeError once it is closed."""
        with self._stdin_lock:
            fd = self._input_fd()
            try:
                return os.write(fd, data)
            except BlockingIOError:
                return 0
            except OSError as exc:
                raise BrokenPipeError(f"the process's stdin is closed ({exc.strerror})") from None

    def write_stdin(self, data: bytes, eof: bool = False) -> int:
        """Write all of `data` to the program's stdin (or its terminal), waiting up to a few seconds
        for it to read; raises BrokenPipeError once it is closed or when the program does not read."""
        with self._message_lock:
            view = memoryview(data)
            written = 0
            deadline = time.monotonic() + 5.0
            while view:
                n = self.write_some(view)
                if n == 0:
                    if time.monotonic() > deadline:
                        raise BrokenPipeError("the process does not read its stdin")
                    time.sleep(0.005)
                    continue
                view = view[n:]
                written += n
            if eof:
                with self._stdin_lock:
                    fd = self._input_fd()
                    if self.pty_master is not None:
                        os.write(fd, b"\x04")
                    else:
                        self._owned_fds.discard(fd)
                        self.stdin_fd = None
                        os.close(fd)
            return written

    def _input_fd(self) -> int:
        """The descriptor input goes to (the caller holds `_stdin_lock`)."""
        fd = self.pty_master if self.pty_master is not None else self.stdin_fd
        if fd is None or self._input_closed:
            raise BrokenPipeError("the process's stdin is closed")
        return fd

    def resize(self, cols: int, rows: int) -> None:
        """Set the terminal's size (the program gets SIGWINCH); only for a terminal."""
        if self.pty_master is None:
            raise ValueError("this process has no terminal")
        with self._stdin_lock:
            if not self._input_closed:
                with contextlib.suppress(OSError):
                    fcntl.ioctl(self.pty_master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    # -- the network namespace ---------------------------------------------------------------

    def netns_pid(self) -> int | None:
        """A host pid whose /proc entry shows the sandbox's network namespace (its init)."""
        return self.init_pid if self.running else None


def set_window(fd: int, cols: int, rows: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


CONTROLLING_TTY = ("import fcntl, os, sys, termios\n"
                   "os.setsid()\n"
                   "fcntl.ioctl(0, termios.TIOCSCTTY, 0)\n"
                   "os.execvp(sys.argv[1], sys.argv[1:])\n")
"""Run inside the sandbox before a terminal's program: bwrap's `--new-session` session belongs
to the sandbox's init, so the program starts a session of its own and makes the pty its
controlling terminal: ^C and job control work (the terminal is the sandbox's, never the host's)."""


def _ns_pid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"NSpid:"):
                    return int(line.split()[-1])
    except (OSError, ValueError):
        return None
    return None


def ns_pid(pid: int | None) -> int | None:
    """`pid`'s pid inside its innermost PID namespace."""
    return _ns_pid(pid) if pid is not None else None


def describe(process: SandboxProcess) -> dict[str, Any]:
    return {"pid": process.proc.pid, "init": process.init_pid, "exit_code": process.exit_code}
