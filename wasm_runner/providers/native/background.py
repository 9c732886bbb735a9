"""The start of a background process: a native run's confinement handed to a `SandboxProcess`
that outlives the call (the session's `ProcessManager` keeps it).
"""

from __future__ import annotations

import logging
import os
import subprocess
import threading
import time
from dataclasses import replace
from typing import Any

from wasm_runner.errors import WasmRunnerError
from wasm_runner.providers.native.egress import SYSTEM_PYTHON, EgressUnavailable
from wasm_runner.providers.native.kernel import spawner
from wasm_runner.providers.native.limits import RunCgroup, RunLimits
from wasm_runner.providers.native.posix import write_all
from wasm_runner.providers.native.run import BACKGROUND_LIFETIME_S, Run
from wasm_runner.providers.native.sandboxed_process import CONTROLLING_TTY, SandboxProcess, set_window
from wasm_runner.workspace.quota import RunDisk, watcher
from wasm_runner_protocol.execution import LIMIT_MESSAGES

log = logging.getLogger("wasm_runner.native")


class ProcessStartError(WasmRunnerError, RuntimeError):
    """A background process could not start (the message says why and what to do)."""


class BackgroundStart(Run):
    """The set-up of a background process: a native run's confinement, handed to a SandboxProcess."""

    def start(self, cwd: str, stdin: bool, pty: tuple[int, int] | None) -> SandboxProcess:
        try:
            self._normalize(before_run=True)
        except OSError as exc:
            raise ProcessStartError(f"could not give the workspace to the sandbox user: {exc}") from None
        inner = list(self.program.argv)
        if cwd:
            inner = ["/usr/bin/env", "-C", cwd, *inner]
        if pty is not None:
            inner = [SYSTEM_PYTHON, "-I", "-S", "-c", CONTROLLING_TTY, *inner]
        self.program = replace(self.program, argv=inner)
        if self.egress is not None:  # days long: the byte cap bounds each connection, not the process
            try:
                self.egress_run = self.open_egress(self.egress, time.monotonic() + BACKGROUND_LIFETIME_S,
                                                   per_connection=True)
            except (EgressUnavailable, OSError) as exc:
                raise ProcessStartError(str(exc)) from None
        run_limits = RunLimits(memory_bytes=self.limits.memory_bytes, max_processes=self.policy.max_processes,
                               cpus=self.policy.cpus, file_bytes=self.limits.disk_bytes or None)
        if self.support.enforcement != "rlimit":
            try:
                self.cgroup = RunCgroup(self.support, run_limits)
                self.enforcement = self.support.enforcement
            except OSError as exc:
                log.warning("could not create the process's cgroup (%s); using rlimits", exc)
        process: SandboxProcess | None = None
        self.disk = RunDisk(self.workspace, self.limits, self.job.mounts, self.job.disk_room)
        self._quota_key = watcher.watch(self.disk, self._over_quota)
        try:
            process = self._spawn(stdin, pty)
        finally:
            if process is None:
                self._undo(None)
        self._process = process
        return process

    def _over_quota(self) -> None:
        process = getattr(self, "_process", None)
        if process is not None:
            message = self.disk.message() if self.disk is not None else LIMIT_MESSAGES["disk"]
            threading.Thread(target=process.terminate, args=(0, "stopped: " + message), daemon=True).start()

    def _spawn(self, stdin: bool, pty: tuple[int, int] | None) -> SandboxProcess:
        code_fd = None
        status_r, status_w = os.pipe()
        pass_fds = [status_w]
        extra_fds: list[int] = []
        master = slave = None
        stdin_w = None
        try:
            if self.program.code is not None:
                code_fd = os.memfd_create("wasm-runner-code", 0)
                write_all(code_fd, self.program.code)
                os.lseek(code_fd, 0, os.SEEK_SET)
                pass_fds.append(code_fd)
            argv, env, cwd = self._command(RunLimits(self.limits.memory_bytes, self.policy.max_processes,
                                                     self.policy.cpus, self.limits.disk_bytes or None),
                                           code_fd, status_w, extra_fds)
            if pty is not None:
                master, slave = os.openpty()
                set_window(master, *pty)
                streams: dict[str, Any] = {"stdin": slave, "stdout": slave, "stderr": slave}
            else:
                streams = {"stdin": subprocess.PIPE if stdin else subprocess.DEVNULL,
                           "stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
            proc = spawner.spawn(lambda: subprocess.Popen(
                argv, env=env, cwd=cwd, pass_fds=pass_fds + extra_fds, close_fds=True, **streams))
        except BaseException:
            for fd in (status_r, master):
                if fd is not None:
                    os.close(fd)
            raise
        finally:
            for fd in [*extra_fds, status_w, code_fd, slave]:
                if fd is not None:
                    os.close(fd)
        if pty is not None:
            assert master is not None
            outputs = {master: "stdout"}
            os.set_blocking(master, False)
        else:
            assert proc.stdout is not None and proc.stderr is not None
            outputs = {os.dup(proc.stdout.fileno()): "stdout", os.dup(proc.stderr.fileno()): "stderr"}
            proc.stdout.close()
            proc.stderr.close()
            if proc.stdin is not None:
                stdin_w = os.dup(proc.stdin.fileno())
                os.set_blocking(stdin_w, False)
                proc.stdin.close()
        return SandboxProcess(proc, status_r=status_r, outputs=outputs, stdin_fd=stdin_w, pty_master=master,
                              cgroup=self.cgroup, enforcement=self.enforcement, cleanup=self._undo,
                              kill_grace_s=self.policy.kill_grace_s, egress=self.egress_run)

    def _undo(self, process: SandboxProcess | None) -> str | None:
        """Undo the set-up once the process ended (or failed to start); a problem to report, if any.
        Its network decisions stay with its egress socket until taken (`SandboxProcess.egress`)."""
        watcher.unwatch(self._quota_key)
        with self._stop_lock:  # the wake pipe every run makes; a background process's has no reader
            if self._wake_r >= 0:
                os.close(self._wake_r)
                os.close(self._wake_w)
                self._wake_r = self._wake_w = -1
        if self.egress_run is not None:
            self.egress_run.close()
        if self.cgroup is not None:
            self.cgroup.remove()
        try:
            self._normalize(before_run=False)
        except OSError as exc:
            log.error("could not clear special permission bits after a background process: %s", exc)
            return f"the process's files could not be checked for setuid/setgid bits: {exc}"
        return None
