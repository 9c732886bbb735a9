"""One native run's lifecycle: spawn the sandbox, pump its output, enforce its limits and deadline,
tear it down and read the outcome. The kernel client (`kernel_call`) and the start of a
background process (`background`) build on it.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import selectors
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from wasm_runner.capture import Capture
from wasm_runner.errors import WasmRunnerError
from wasm_runner.hints import native_network_error, refusal_note
from wasm_runner.providers.base import Job
from wasm_runner.providers.native import bwrap as sandbox
from wasm_runner.providers.native.egress import RELAY_NAME, EgressUnavailable, NativeEgress, RunEgress
from wasm_runner.providers.native.guest_errors import MEMORY_HINTS, js_error, python_traceback
from wasm_runner.providers.native.identity import RelayPlan, SandboxIdentity
from wasm_runner.providers.native.js_toolchain import GUEST_JS_TOOLCHAIN, JsToolchain
from wasm_runner.providers.native.kernel_pool import MountHolder
from wasm_runner.providers.native.limits import (
    CgroupSupport,
    RunCgroup,
    RunLimits,
    default_signals,
    launcher,
    rlimit_prefix,
)
from wasm_runner.providers.native.ownership import normalize
from wasm_runner.providers.native.package_env import PackageTools
from wasm_runner.providers.native.pidfd import open_pidfd
from wasm_runner.providers.native.posix import (
    READ_CHUNK,
    children_of,
    descendants,
    host_tasks,
    read_some,
    reap,
    signal_group,
    signal_pid,
    wait_exit_code,
    write_all,
)
from wasm_runner.providers.native.toolchain import PythonData
from wasm_runner.providers.native.web_starters import GUEST_STARTERS, starters_dir
from wasm_runner.workspace.layout import Workspace, diff
from wasm_runner.workspace.quota import RunDisk, watcher
from wasm_runner_protocol.execution import LIMIT_MESSAGES, ExecRequest, ExecResult, GuestError, LimitName, Limits

log = logging.getLogger("wasm_runner.native")


PROCESS_WATCH_S = 0.005
"""How often the process count is checked where no cgroup or rlimit bounds it (uid 0, no cgroups):
the host's task count (one read of /proc/loadavg) first, the run's own tree only when that grew."""
FULL_COUNT_S = 0.05
DRAIN_AFTER_EXIT_S = 0.5
"""How long output pipes are read after the sandbox exited (anything still holding them is killed)."""


@dataclass(frozen=True)
class Program:
    """What to run inside the sandbox: an argv, and optionally a code file it reads."""

    argv: list[str]
    code: bytes | None = None
    code_name: str | None = None
    python_data: PythonData | None = None
    js_toolchain: JsToolchain | None = None
    """Mounted read-only at /opt/js-toolchain, its bin/ first on PATH."""


class Refusal(WasmRunnerError):
    def __init__(self, type_: str, message: str, exit_code: int = 126) -> None:
        super().__init__(message)
        self.type = type_
        self.message = message
        self.exit_code = exit_code


BACKGROUND_LIFETIME_S = 30 * 86400.0
"""The egress deadline of a sandbox that outlives calls (a background process, a kernel between its
calls): not a limit of its own, since closing the socket when the sandbox ends (with its session at
the latest, whose TTL is shorter) cuts every connection."""


# -- one run -----------------------------------------------------------------------------------


@dataclass
class Stop:
    reason: LimitName | None = None
    at: float | None = None


class Run:
    """Spawns one sandbox, pumps its output, enforces its deadline and tears it down."""

    def __init__(self, policy: sandbox.SandboxPolicy, request: ExecRequest, workspace: Workspace, job: Job,
                 support: CgroupSupport, program: Program, bwrap_path: str | None,
                 identity: SandboxIdentity | None = None, seccomp_program: Path | None = None,
                 egress: NativeEgress | None = None, tools: PackageTools | None = None) -> None:
        self.policy = policy
        self.request = request
        self.limits: Limits = request.limits
        self.workspace = workspace
        self.job = job
        self.support = support
        self.program = program
        self.bwrap = bwrap_path
        self.identity = identity
        self.seccomp_program = seccomp_program
        self.timeout_s = min(self.limits.timeout_s, policy.max_timeout_s)
        self.stdout = Capture("stdout", self.limits.output_bytes, lambda: self.stop("output"), job.listener)
        self.stderr = Capture("stderr", self.limits.output_bytes, lambda: self.stop("output"), job.listener)
        self._stop = Stop()
        self._stop_lock = threading.Lock()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        self.cgroup: RunCgroup | None = None
        self.enforcement = "rlimit"
        self.proc: subprocess.Popen[bytes] | None = None
        self.init_pid: int | None = None
        self.started_in_sandbox = False
        self._status_buffer = b""
        self._scratch: Path | None = None
        self.processes_exceeded = False
        self._next_full_count = 0.0
        self.holder: MountHolder | None = None
        """The mount namespace a kernel made ahead is launched in (see kernel_pool.py)."""
        # Under deny too: the proxy refuses everything, so curl, pip, npm and git meet a refusal that
        # names the policy (listed in `network`) instead of a bare resolver error, and a kernel or
        # background process follows the session when its policy is switched on.
        self.egress = egress if bwrap_path is not None else None
        self.egress_run: RunEgress | None = None
        self.tools = tools or PackageTools()
        """Where the run's pip, uv, npm and bun install to and from (package_env.py)."""
        self.disk: RunDisk | None = None
        """What the run may write, measured as it starts (see RunDisk)."""

    def _disk_over(self) -> bool:
        """Whether the run wrote past what it may (fails closed; a run never measured counts as over)."""
        return self.disk.over_or_unmeasurable() if self.disk is not None else True

    def stop(self, reason: LimitName) -> None:
        """Stop the run for `reason` (first reason wins); safe from any thread."""
        with self._stop_lock:
            if self._stop.reason is None:
                self._stop.reason = reason
                self._stop.at = time.monotonic()
            if self._wake_w < 0:
                return  # the run is over (a late cancel): its wake pipe is closed
            try:
                os.write(self._wake_w, b"x")
            except OSError:
                pass

    # -- the whole run ---------------------------------------------------------------------

    def _writable_trees(self) -> list[Path]:
        """What the sandbox can write on the host: workspace, its /tmp, writable session mounts."""
        trees = [self.workspace.files, self.workspace.tmp]
        trees += [m.host for m in (*self.job.mounts, *self.tools.binds) if m.writable]
        return trees

    def _normalize(self, before_run: bool) -> None:
        """Before a run, give the writable trees to the sandbox user (the service may have
        written there); after it, clear setuid/setgid bits and remove device nodes."""
        dropped = self.identity is not None and self.identity.dropped
        if before_run and not dropped:
            return
        owner = (self.identity.uid, self.identity.gid) if dropped and self.identity is not None else None
        for tree in self._writable_trees():
            normalize(tree, owner)

    def execute(self) -> ExecResult:
        request = self.request
        try:
            self._normalize(before_run=True)
        except OSError as exc:
            return ExecResult(exit_code=126, language=request.language, id=request.id,
                              isolation="bubblewrap" if self.bwrap else "none",
                              error=GuestError(type="SandboxError", message=(
                                  f"could not give the workspace to the sandbox user: {exc}")))
        if self.egress is not None:
            try:
                self.egress_run = self.open_egress(self.egress, time.monotonic() + self.timeout_s)
            except (EgressUnavailable, OSError) as exc:
                if request.effective_egress.mode == "deny":  # the refusals go unnamed, the run goes on
                    log.warning("no egress proxy for a run under deny: %s", exc)
                else:
                    return ExecResult(exit_code=126, language=request.language, id=request.id,
                                      isolation="bubblewrap",
                                      error=GuestError(type="NetworkUnavailable", message=str(exc)))
        before = self.workspace.snapshot_before_run()
        self.disk = RunDisk(self.workspace, self.limits, self.job.mounts, self.job.disk_room)
        quota_key = watcher.watch(self.disk, lambda: self.stop("disk"))
        self.job.on_cancel(lambda: self.stop("cancelled"))
        started = time.perf_counter()
        status = rusage = None
        error: GuestError | None = None
        try:
            run_limits = RunLimits(
                memory_bytes=self.limits.memory_bytes,
                max_processes=self.policy.max_processes,
                cpus=self.policy.cpus,
                file_bytes=self.limits.disk_bytes or None,
                cpu_seconds=math.ceil(self.timeout_s * (self.policy.cpus or 1)) + 1,
            )
            if self.support.enforcement != "rlimit":
                try:
                    self.cgroup = RunCgroup(self.support, run_limits)
                    self.enforcement = self.support.enforcement
                except OSError as exc:
                    log.warning("could not create the run's cgroup (%s); using rlimits", exc)
            self.job.started_at = time.monotonic()  # the runner's watchdog clock
            status, rusage = self._spawn_and_wait(run_limits)
        except OSError as exc:
            error = GuestError(type="SandboxError", message=f"could not start the native sandbox: {exc}")
        finally:
            network = self.egress_run.close() if self.egress_run is not None else []
            watcher.unwatch(quota_key)
            memory_peak = self._memory_peak(rusage)
            cpu_s = self.cgroup.cpu_seconds_used() if self.cgroup is not None else None
            if cpu_s is None and rusage is not None:  # what the launcher waited for (without a cgroup)
                cpu_s = rusage.ru_utime + rusage.ru_stime
            oom = self.cgroup.oom_killed() if self.cgroup is not None else False
            pids_hit = self.cgroup.pids_exhausted() if self.cgroup is not None else False
            if self.cgroup is not None:
                self.cgroup.release()
            with self._stop_lock:
                os.close(self._wake_r)
                os.close(self._wake_w)
                self._wake_r = self._wake_w = -1
            if self._scratch is not None:
                shutil.rmtree(self._scratch, ignore_errors=True)
            try:
                self._normalize(before_run=False)
            except OSError as exc:
                log.error("could not clear special permission bits after a native run: %s", exc)
                if error is None:
                    error = GuestError(type="SandboxError", message=(
                        f"the run's files could not be checked for setuid/setgid bits: {exc}"))
        duration_ms = (time.perf_counter() - started) * 1000
        exit_code = wait_exit_code(status) if status is not None else 126
        stderr_text = self.stderr.text()
        limit = self._limit(exit_code, oom, stderr_text)
        if error is None:
            error = self._error(limit, exit_code, stderr_text, pids_hit)
            if error is not None and error.type == "CommandNotFound":
                exit_code = 127
        if error is None and exit_code != 0:
            error = native_network_error(network, request.effective_egress, stderr_text)
        return ExecResult(
            stdout=self.stdout.text(),
            stderr=stderr_text + refusal_note(network, request.effective_egress.mode),
            exit_code=exit_code,
            error=error,
            limit=limit,
            truncated=[c.stream for c in (self.stdout, self.stderr) if c.truncated],
            duration_ms=round(duration_ms, 3),
            cpu_ms=round(cpu_s * 1000, 3) if cpu_s is not None else None,
            memory_peak_bytes=memory_peak,
            files=diff(before, self._snapshot_after(before)),
            language=request.language,
            isolation="bubblewrap" if self.bwrap else "none",
            enforcement=self.enforcement,
            network=network,
            id=request.id,
        )

    def open_egress(self, egress: NativeEgress, deadline: float, per_connection: bool = False) -> RunEgress:
        """The sandbox's socket on the egress proxy, connectable by its user."""
        identity = self.identity
        owner = (identity.uid, identity.gid) if identity is not None and identity.dropped else None
        return egress.open(self.request, deadline, owner, per_connection)

    # -- spawning ---------------------------------------------------------------------------

    def _command(self, run_limits: RunLimits, code_fd: int | None, status_fd: int | None,
                 fds: list[int]) -> tuple[list[str], dict[str, str], str]:
        """(argv, environment of the spawned process, its working directory); descriptors the
        process inherits are appended to `fds` (the caller passes and closes them)."""
        program = self.program
        inner = list(program.argv)
        egress = self.egress_run
        if egress is not None:
            inner = egress.wrap(inner)
        if self.cgroup is None:
            inner = rlimit_prefix(run_limits) + inner
        if self.bwrap is not None:
            tools = self.tools
            extra = {**tools.env, **(egress.env() if egress is not None else {}), **self.request.env}
            env = sandbox.sandbox_env(python_data=program.python_data is not None, extra=extra)
            binds = list(self.policy.binds)
            # The session's own mounts (e.g. a workspace's shared/ at /workspace/shared).
            binds += self.job.mounts
            binds += self.tools.binds  # the session's venv, outside /workspace
            data_files: list[tuple[int, str]] = []
            if egress is not None:
                binds += egress.binds()
            if egress is not None and egress.relay_binary is None:  # the Python relay, as code
                relay_fd = os.memfd_create("wasm-runner-egress-relay", 0)
                fds.append(relay_fd)
                write_all(relay_fd, self.egress.relay_code() if self.egress is not None else b"")
                os.lseek(relay_fd, 0, os.SEEK_SET)
                data_files.append((relay_fd, f"{sandbox.GUEST_CODE_DIR}/{RELAY_NAME}"))
            data = program.python_data
            if data is not None and not _visible(data.base_prefix, self.policy):
                binds.append(sandbox.Bind(Path(data.base_prefix), data.base_prefix))
            if program.js_toolchain is not None:
                binds.append(sandbox.Bind(program.js_toolchain.path, GUEST_JS_TOOLCHAIN))
                starters = starters_dir()
                if starters.is_dir():  # the web starters' node_modules, which a starter's workspace links to
                    binds.append(sandbox.Bind(starters, GUEST_STARTERS))
                if "PATH" not in self.request.env:
                    env["PATH"] = f"{GUEST_JS_TOOLCHAIN}/bin:{env['PATH']}"
            if tools.path and "PATH" not in self.request.env:
                env["PATH"] = ":".join((*tools.path, env["PATH"]))
            policy = self.policy if binds == list(self.policy.binds) else _with_binds(self.policy, binds)
            seccomp_fd = None
            if self.seccomp_program is not None:
                seccomp_fd = os.open(self.seccomp_program, os.O_RDONLY)
                fds.append(seccomp_fd)
            plan = RelayPlan(self.identity) if self.identity is not None and self.identity.dropped else None
            options = sandbox.options(
                policy, workspace=self.workspace.files, tmp=self.workspace.tmp, env=env,
                python_data=data.path if data is not None else None, code_fd=code_fd,
                code_name=program.code_name, status_fd=status_fd, seccomp_fd=seccomp_fd,
                relay=plan.source if plan is not None else None, data_files=data_files, symlinks=tools.links,
                cwd=self.workspace.guest_cwd)
            # The options reach bwrap through a descriptor: the sandbox's init process shows
            # `bwrap --args N -- command`, no host path.
            args_fd = os.memfd_create("wasm-runner-bwrap-args", 0)
            fds.append(args_fd)
            write_all(args_fd, b"".join(o.encode() + b"\0" for o in options))
            os.lseek(args_fd, 0, os.SEEK_SET)
            argv = [self.bwrap, "--args", str(args_fd), "--", *inner]
            prefix = launcher(self.cgroup, run_limits.file_bytes, identity=self.identity,
                              mounts=plan.mounts if plan is not None else None,
                              propagation="private" if self.holder is None else "slave")
            if self.holder is not None:
                prefix = self.holder.enter() + prefix
            # bwrap itself runs with a fixed minimal environment: the caller's variables reach
            # only the sandboxed program (through --setenv), never a host-side process.
            return default_signals() + prefix + argv, {"PATH": sandbox.BASE_PATH, "LANG": "C.UTF-8"}, "/"
        # Unsandboxed (explicit opt-in): host paths, same allowlisted environment; a root
        # service still drops to its sandbox user (the program keeps the workspace as its cwd).
        prefix = launcher(self.cgroup, run_limits.file_bytes, identity=self.identity)
        files, tmp = self.workspace.files, self.workspace.tmp
        env = sandbox.sandbox_env(python_data=program.python_data is not None, extra={})
        cwd = files / self.workspace.workdir if self.workspace.workdir else files
        env.update(HOME=str(files), PWD=str(cwd), TMPDIR=str(tmp), MPLCONFIGDIR=str(tmp / ".matplotlib"),
                   XDG_CACHE_HOME=str(tmp / ".cache"))
        if program.python_data is not None:
            env["PATH"] = f"{program.python_data.path / 'bin'}:{sandbox.BASE_PATH}"
        env.update(self.request.env)
        if program.code is not None:
            assert program.code_name is not None  # a program with code names its file
            self._scratch = Path(tempfile.mkdtemp(prefix="wasm-runner-code-"))
            code_path = self._scratch / program.code_name
            code_path.write_bytes(program.code)
            if self.identity is not None and self.identity.dropped:
                for path in (self._scratch, code_path):
                    os.chown(path, self.identity.uid, self.identity.gid)
            inner = [str(code_path) if a == f"{sandbox.GUEST_CODE_DIR}/{program.code_name}" else a for a in inner]
        return default_signals() + prefix + inner, env, str(cwd)

    def _spawn_and_wait(self, run_limits: RunLimits) -> tuple[int | None, Any]:
        code_fd = status_r = status_w = None
        pass_fds: list[int] = []
        try:
            if self.bwrap is not None:
                if self.program.code is not None:
                    code_fd = os.memfd_create("wasm-runner-code", 0)
                    write_all(code_fd, self.program.code)
                    os.lseek(code_fd, 0, os.SEEK_SET)
                    pass_fds.append(code_fd)
                status_r, status_w = os.pipe()
                pass_fds.append(status_w)
            extra_fds: list[int] = []
            try:
                argv, env, cwd = self._command(run_limits, code_fd, status_w, extra_fds)
                stdin = subprocess.PIPE if self.request.stdin else subprocess.DEVNULL
                self.proc = subprocess.Popen(
                    argv, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=cwd,
                    pass_fds=pass_fds + extra_fds, close_fds=True, start_new_session=self.bwrap is None)
            finally:
                for fd in extra_fds:
                    os.close(fd)
        finally:
            for leftover in (code_fd, status_w):
                if leftover is not None:
                    os.close(leftover)
        try:
            return self._pump(status_r)
        finally:
            if status_r is not None:
                os.close(status_r)

    # -- the event loop ---------------------------------------------------------------------

    def _pump(self, status_r: int | None) -> tuple[int | None, Any]:
        proc = self.proc
        assert proc is not None and proc.stdout is not None and proc.stderr is not None
        deadline = time.monotonic() + self.timeout_s
        selector = selectors.DefaultSelector()
        captures = {proc.stdout.fileno(): self.stdout, proc.stderr.fileno(): self.stderr}
        for fd in captures:
            os.set_blocking(fd, False)
            selector.register(fd, selectors.EVENT_READ, "out")
        if status_r is not None:
            selector.register(status_r, selectors.EVENT_READ, "status")
        selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        pidfd = open_pidfd(proc.pid)
        if pidfd is not None:
            selector.register(pidfd, selectors.EVENT_READ, "exit")
        stdin_data = memoryview(self.request.stdin.encode()) if proc.stdin is not None else None
        if proc.stdin is not None:
            os.set_blocking(proc.stdin.fileno(), False)
            selector.register(proc.stdin.fileno(), selectors.EVENT_WRITE, "stdin")
        status = rusage = None
        term_sent_at = kill_sent_at = exited_at = None
        # Without a pids cgroup, RLIMIT_NPROC bounds the run, except for uid 0 (the kernel
        # exempts root): a run as the service's root (unsandboxed) is counted and killed.
        as_root = os.geteuid() == 0 and not (self.identity is not None and self.identity.dropped)
        watch_processes = self.cgroup is None and as_root
        host_tasks_at_start = host_tasks() if watch_processes else 0
        next_watch = time.monotonic() + PROCESS_WATCH_S
        try:
            while True:
                now = time.monotonic()
                if status is None:
                    if now >= deadline and self._stop.reason is None:
                        self.stop("timeout")
                    if watch_processes and now >= next_watch and self._stop.reason is None:
                        next_watch = now + PROCESS_WATCH_S
                        if self._too_many_processes(now, host_tasks_at_start):
                            self.processes_exceeded = True
                            self.stop("timeout")
                            term_sent_at = now - self.policy.kill_grace_s  # no grace: SIGKILL at once
                    if self._stop.reason is not None:
                        if term_sent_at is None:
                            term_sent_at = now
                            self._terminate()
                        elif kill_sent_at is None and now >= term_sent_at + self.policy.kill_grace_s:
                            kill_sent_at = now
                            self._kill()
                        elif kill_sent_at is not None and now >= kill_sent_at + 2.0:
                            signal_pid(proc.pid, signal.SIGKILL)  # last resort: bwrap itself
                    status, rusage = reap(proc.pid)
                    if status is not None:
                        exited_at = now
                        proc.returncode = wait_exit_code(status)
                        self._after_exit()
                if exited_at is not None and (not captures or now >= exited_at + DRAIN_AFTER_EXIT_S):
                    break
                timeouts = [0.05 if pidfd is None else 1.0]
                if status is None:
                    if self._stop.reason is None:
                        timeouts.append(deadline - now)
                        if watch_processes:
                            timeouts.append(next_watch - now)
                    elif kill_sent_at is None:
                        timeouts.append((term_sent_at if term_sent_at is not None else now) + self.policy.kill_grace_s - now)
                    else:
                        timeouts.append(0.05)
                elif exited_at is not None:
                    timeouts.append(exited_at + DRAIN_AFTER_EXIT_S - now)
                for key, _ in selector.select(max(min(timeouts), 0)):
                    kind = key.data
                    if kind == "out":
                        data = read_some(key.fd)
                        if data:
                            captures[key.fd].write(data)
                        elif data is not None:  # end of file
                            selector.unregister(key.fd)
                            del captures[key.fd]
                    elif kind == "status":
                        if not self._read_status(key.fd):
                            selector.unregister(key.fd)
                    elif kind == "wake":
                        read_some(self._wake_r)
                    elif kind == "exit":
                        selector.unregister(key.fd)
                    elif kind == "stdin":
                        stdin_data = self._feed(proc, stdin_data, selector)
        finally:
            selector.close()
            if pidfd is not None:
                os.close(pidfd)
            for stream in (proc.stdin, proc.stdout, proc.stderr):
                if stream is not None:
                    try:
                        stream.close()
                    except OSError:
                        pass
            if status is None:  # an unexpected error: never leave the sandbox behind
                self._kill()
                signal_pid(proc.pid, signal.SIGKILL)
                status, rusage = reap(proc.pid, block=True)
                proc.returncode = wait_exit_code(status) if status is not None else -9
        return status, rusage

    def _too_many_processes(self, now: float, host_tasks_at_start: int) -> bool:
        """Has the run more processes than policy.max_processes? Cheap signs every tick (the
        host's task count grew, or the sandbox's init has adopted many orphans, as a fork bomb's
        processes are), the run's whole tree counted when one shows or every FULL_COUNT_S."""
        assert self.proc is not None
        limit = self.policy.max_processes
        reaper = self.init_pid or self.proc.pid
        due = now >= self._next_full_count
        if not due and host_tasks() - host_tasks_at_start <= limit and len(children_of(reaper)) <= limit:
            return False
        self._next_full_count = now + FULL_COUNT_S
        return len(descendants(self.proc.pid)) > limit + 1  # + bwrap's init

    def _feed(self, proc: subprocess.Popen[bytes], data: memoryview | None,
              selector: selectors.BaseSelector) -> memoryview | None:
        assert proc.stdin is not None  # fed only when it was opened with a pipe
        fd = proc.stdin.fileno()
        try:
            written = os.write(fd, data[:READ_CHUNK]) if data else 0
            data = data[written:] if data else data
        except (BrokenPipeError, OSError):
            data = None
        if not data:
            selector.unregister(fd)
            proc.stdin.close()
        return data

    def _read_status(self, fd: int) -> bool:
        chunk = read_some(fd)
        if chunk is None:
            return True
        if not chunk:
            return False
        self._status_buffer += chunk
        while b"\n" in self._status_buffer:
            line, self._status_buffer = self._status_buffer.split(b"\n", 1)
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if "child-pid" in message:
                self.init_pid = int(message["child-pid"])
                self.started_in_sandbox = True
        return True

    # -- stopping ---------------------------------------------------------------------------

    def _sandbox_pids(self) -> set[int]:
        """Every process of the run except bwrap itself and the sandbox's init."""
        assert self.proc is not None
        spare = {self.proc.pid}
        if self.init_pid is not None:
            spare.add(self.init_pid)
        if self.cgroup is not None:
            return self.cgroup.pids() - spare
        return descendants(self.proc.pid) - spare

    def _terminate(self) -> None:
        """SIGTERM to every process of the run, so programs can clean up within the grace period."""
        assert self.proc is not None
        if self.bwrap is None:
            signal_group(self.proc.pid, signal.SIGTERM)
        for pid in self._sandbox_pids():
            signal_pid(pid, signal.SIGTERM)

    def _kill(self) -> None:
        """SIGKILL the whole tree: the sandbox's init (the kernel then kills its PID namespace), then the rest."""
        assert self.proc is not None
        if self.bwrap is None:
            signal_group(self.proc.pid, signal.SIGKILL)
        if self.init_pid is not None:
            signal_pid(self.init_pid, signal.SIGKILL)  # the kernel kills every process in its namespace
        elif self.bwrap is not None:
            signal_pid(self.proc.pid, signal.SIGKILL)  # still setting up: its children die with it
        if self.cgroup is not None:
            self.cgroup.signal_all(signal.SIGKILL, spare={self.proc.pid})
        elif self.bwrap is None:
            for pid in descendants(self.proc.pid):
                signal_pid(pid, signal.SIGKILL)

    def _after_exit(self) -> None:
        """The run's main process ended: nothing of it may outlive it."""
        assert self.proc is not None
        if self.bwrap is None:
            signal_group(self.proc.pid, signal.SIGKILL)
        if self.cgroup is not None:
            self.cgroup.signal_all(signal.SIGKILL)

    # -- reading the outcome -------------------------------------------------------------------

    def _snapshot_after(self, before: dict[str, Any]) -> dict[str, Any]:
        try:
            return self.workspace.snapshot()
        except OSError:  # unmeasurable: the run is already reported over quota (limit disk)
            return before

    def _memory_peak(self, rusage: Any) -> int | None:
        if self.cgroup is not None:
            peak = self.cgroup.memory_peak()
            if peak is not None:
                return peak
        if rusage is not None and rusage.ru_maxrss:
            return int(rusage.ru_maxrss) * 1024
        return None

    def _limit(self, exit_code: int, oom: bool, stderr: str) -> LimitName | None:
        if self._stop.reason is not None:
            return self._stop.reason
        if oom:
            return "memory"
        if self._disk_over() or exit_code == 128 + signal.SIGXFSZ:
            return "disk"
        if self.cgroup is None and exit_code != 0 and any(h in stderr[-4000:] for h in MEMORY_HINTS):
            return "memory"  # rlimit mode: the allocation failed inside the program
        return None

    def _error(self, limit: LimitName | None, exit_code: int, stderr: str, pids_hit: bool) -> GuestError | None:
        if limit is not None:
            message = LIMIT_MESSAGES[limit] if limit != "disk" or self.disk is None else self.disk.message()
            if limit == "timeout":
                message += f" (natively at most {self.policy.max_timeout_s:g} s)"
            if self.processes_exceeded:
                message = (f"stopped: the run started more than {self.policy.max_processes} processes "
                           "(policy.max_processes; without cgroups this is enforced by counting)")
            elif pids_hit:
                message += f"; the run also hit its process limit ({self.policy.max_processes})"
            return GuestError(type="LimitExceeded", message=message)
        if self.bwrap is not None and not self.started_in_sandbox and exit_code != 0:
            detail = stderr.strip().splitlines()[-1] if stderr.strip() else f"exit status {exit_code}"
            return GuestError(type="SandboxError", message=f"the sandbox could not start: {detail}")
        match = re.match(r"bwrap: execvp (.+?): (.*)", stderr.strip().splitlines()[-1] if stderr.strip() else "")
        if match and exit_code == 1:
            return GuestError(type="CommandNotFound", message=f"{match.group(1)}: {match.group(2)}")
        if exit_code != 0 and self.request.command is None and self.request.language == "python":
            return python_traceback(stderr)
        if exit_code != 0 and self.request.command is None and self.request.language in ("javascript", "typescript"):
            return js_error(stderr, self.request.code)
        return None


def _visible(prefix: str, policy: sandbox.SandboxPolicy) -> bool:
    if not prefix:
        return True
    if prefix == "/usr/local" or prefix.startswith("/usr/local/"):
        return policy.show_usr_local
    return prefix == "/usr" or prefix.startswith("/usr/")


def _with_binds(policy: sandbox.SandboxPolicy, binds: list[sandbox.Bind]) -> sandbox.SandboxPolicy:
    return replace(policy, binds=tuple(binds))
