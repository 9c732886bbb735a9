"""The kernel client: a session's Python call run in its long-lived native kernel (started,
reused and replaced here), on a `Run`'s confinement.
"""

from __future__ import annotations

import logging
import os
import subprocess
import time
from collections.abc import Callable
from typing import Any

from wasm_runner.hints import native_network_error, refusal_note
from wasm_runner.providers.native import bwrap as sandbox
from wasm_runner.providers.native.egress import EgressUnavailable
from wasm_runner.providers.native.kernel import (
    DRIVER_NAME,
    PRELOAD,
    KernelError,
    KernelKey,
    NativeKernel,
    NativeKernelSlot,
    Reply,
    spawner,
)
from wasm_runner.providers.native.kernel_pool import KernelPool, MountHolder
from wasm_runner.providers.native.limits import RunCgroup, RunLimits
from wasm_runner.providers.native.package_env import GUEST_VENV
from wasm_runner.providers.native.posix import write_all
from wasm_runner.providers.native.run import BACKGROUND_LIFETIME_S, Program, Run
from wasm_runner.workspace.layout import diff
from wasm_runner.workspace.quota import RunDisk, watcher
from wasm_runner_protocol.execution import LIMIT_MESSAGES, ExecResult, GuestError, Limits
from wasm_runner_protocol.packages import PACKAGES_GUEST_PATH

log = logging.getLogger("wasm_runner.native")


def kernel_key(limits: Limits, mounts: tuple[Any, ...], network: bool = False) -> KernelKey:
    """What a kernel holds for its whole life (cgroup, rlimits, mounts, a way to the egress proxy or
    none): a call under others needs another kernel."""
    return (limits.memory_bytes, limits.disk_bytes, mounts, network)


class KernelCall(Run):
    """One call in a session's native kernel: the same confinement and accounting as a run,
    with the sandbox kept between calls (see kernel.py)."""

    def execute(self, slot: NativeKernelSlot | None = None, pool: KernelPool | None = None) -> ExecResult:
        assert slot is not None
        request = self.request
        try:
            self._normalize(before_run=True)
        except OSError as exc:
            return ExecResult(exit_code=126, language=request.language, id=request.id, isolation="bubblewrap",
                              error=GuestError(type="SandboxError", message=(
                                  f"could not give the workspace to the sandbox user: {exc}")))
        before = self.workspace.snapshot_before_run()
        self.disk = RunDisk(self.workspace, self.limits, self.job.mounts, self.job.disk_room)
        quota_key = watcher.watch(self.disk, lambda: self.stop("disk"))
        self.job.on_cancel(lambda: self.stop("cancelled"))
        started = time.perf_counter()
        reply = Reply(exit_code=126)
        error: GuestError | None = None
        restarted = False
        restart_reason: str | None = None
        kernel: NativeKernel | None = None
        try:
            key = kernel_key(self.limits, (*self.job.mounts, *self.tools.binds), network=self.egress is not None)
            if slot.kernel is not None and (slot.kernel.closed or slot.kernel.key != key):
                slot.drop("the previous call ended the kernel" if slot.kernel.closed else
                          "the call's limits, mounts or network differ from the kernel's, which keeps those it started with")
            if slot.kernel is None:
                restarted, slot.lost = slot.lost, False
                restart_reason, slot.reason = (slot.reason or "the kernel's state was dropped") if restarted else None, None
                packages = [m for m in self.job.mounts if m.guest == PACKAGES_GUEST_PATH and not m.writable]
                others = [m for m in self.job.mounts if m not in packages]
                venv = [b.host for b in self.tools.binds if b.guest == GUEST_VENV]
                if pool is not None and not others and len(venv) == len(self.tools.binds):
                    taken = pool.take(kernel_key(self.limits, (), network=self.egress is not None), self.workspace,
                                      packages[0].host if packages else None, venv[0] if venv else None)
                    if taken is not None:
                        taken.key = key  # its sandbox shows this session's mounts now
                    slot.kernel = taken
                if slot.kernel is None:
                    slot.kernel = self.start_kernel(key)
            kernel = slot.kernel
            self.enforcement = self.support.enforcement if kernel.cgroup is not None else "rlimit"
            extra = {**self.tools.env, **request.env}
            if kernel.egress is not None:
                kernel.egress.renew(request, time.monotonic() + self.timeout_s + self.policy.kill_grace_s)
                extra = {**self.tools.env, **kernel.egress.env(), **request.env}
            env = sandbox.sandbox_env(python_data=True, extra=extra)
            env["PWD"] = self.workspace.guest_cwd
            if self.tools.path and "PATH" not in request.env:
                env["PATH"] = ":".join((*self.tools.path, env["PATH"]))
            payload = {"code": request.code, "env": env, "stdin": request.stdin,
                       "outputs_budget": max(self.limits.output_bytes, 1 << 20),
                       "site_dirs": list(self.tools.site_dirs), "cwd": self.workspace.guest_cwd}

            def begin() -> None:
                self.job.started_at = time.monotonic()

            reply = kernel.call(payload, self.timeout_s, self.stdout, self.stderr, self._wake_r,
                                lambda: self._stop.reason, begin)
            if reply.died:
                slot.kernel, slot.lost = None, True
        except EgressUnavailable as exc:
            error = GuestError(type="NetworkUnavailable", message=str(exc))
        except (OSError, KernelError) as exc:
            error = GuestError(type="SandboxError", message=f"could not start the native Python kernel: {exc}")
            slot.kernel = None
        finally:
            watcher.unwatch(quota_key)
            with self._stop_lock:
                os.close(self._wake_r)
                os.close(self._wake_w)
                self._wake_r = self._wake_w = -1
            try:
                self._normalize(before_run=False)
            except OSError as exc:
                log.error("could not clear special permission bits after a native kernel call: %s", exc)
                if error is None:
                    error = GuestError(type="SandboxError", message=(
                        f"the run's files could not be checked for setuid/setgid bits: {exc}"))
        duration_ms = (time.perf_counter() - started) * 1000
        limit = reply.limit
        if limit is None and self._disk_over():
            limit = "disk"
        if (limit is None and kernel is not None and kernel.cgroup is None and reply.error is not None
                and reply.error.type == "MemoryError"):
            limit = "memory"  # rlimit mode: the allocation failed inside the program
        network = kernel.egress.decisions() if kernel is not None and kernel.egress is not None else []
        if error is None:
            if limit is not None:
                message = LIMIT_MESSAGES[limit] if limit != "disk" or self.disk is None else self.disk.message()
                if limit == "timeout":
                    message += (" (the kernel was interrupted; its state is kept)" if not reply.died else
                                " (the kernel did not stop when interrupted: it was restarted)")
                error = GuestError(type="LimitExceeded", message=message)
            elif reply.crash is not None:
                error = GuestError(type="KernelDied", message=f"{reply.crash}; the next call starts a new kernel")
            elif reply.error is not None:
                error = native_network_error(network, request.effective_egress, self.stderr.text()) or reply.error
        return ExecResult(
            stdout=self.stdout.text(),
            stderr=self.stderr.text() + refusal_note(network, request.effective_egress.mode),
            exit_code=reply.exit_code if limit is None else 137,
            value=reply.value if limit is None else None,
            outputs=reply.outputs,
            error=error,
            limit=limit,
            truncated=[c.stream for c in (self.stdout, self.stderr) if c.truncated],
            duration_ms=round(duration_ms, 3),
            memory_peak_bytes=kernel.memory_peak() if kernel is not None else None,
            files=diff(before, self._snapshot_after(before)),
            kernel_restarted=restarted,
            restart_reason=restart_reason,
            language=request.language,
            isolation="bubblewrap",
            enforcement=self.enforcement,
            network=network,
            id=request.id,
        )

    def close_wake(self) -> None:
        with self._stop_lock:
            os.close(self._wake_r)
            os.close(self._wake_w)
            self._wake_r = self._wake_w = -1

    def start_kernel(self, key: KernelKey, holder: MountHolder | None = None,
                     on_close: Callable[[], None] | None = None) -> NativeKernel:
        """A new kernel in a sandbox of this call's workspace (a slot's, in `holder`'s namespace)."""
        data = self.program.python_data
        assert data is not None
        run_limits = RunLimits(memory_bytes=self.limits.memory_bytes, max_processes=self.policy.max_processes,
                               cpus=self.policy.cpus, file_bytes=self.limits.disk_bytes or None)
        cgroup: RunCgroup | None = None
        if self.support.enforcement != "rlimit":
            try:
                cgroup = RunCgroup(self.support, run_limits)
            except OSError as exc:
                log.warning("could not create the kernel's cgroup (%s); using rlimits", exc)
        self.cgroup = cgroup
        if self.egress is not None:  # renewed for each call; the kernel closes it
            try:
                self.egress_run = self.open_egress(self.egress, time.monotonic() + BACKGROUND_LIFETIME_S)
            except BaseException:
                if cgroup is not None:
                    cgroup.release()
                raise
        request_r, request_w = os.pipe()
        reply_r, reply_w = os.pipe()
        status_r, status_w = os.pipe()
        code_fd = os.memfd_create("wasm-runner-kernel", 0)
        write_all(code_fd, driver_source())
        os.lseek(code_fd, 0, os.SEEK_SET)
        passed = [code_fd, status_w, request_r, reply_w]
        extra: list[int] = []
        try:
            self.program = Program([f"{sandbox.GUEST_PYTHON_DATA}/bin/python",
                                     f"{sandbox.GUEST_CODE_DIR}/{DRIVER_NAME}", str(request_r), str(reply_w), *PRELOAD],
                                    b"", DRIVER_NAME, python_data=data)
            self.holder = holder
            argv, env, cwd = self._command(run_limits, code_fd, status_w, extra)
            proc = spawner.spawn(lambda: subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=cwd,
                pass_fds=passed + extra, close_fds=True))
        except BaseException:
            for fd in (request_w, reply_r, status_r):
                os.close(fd)
            if cgroup is not None:
                cgroup.release()
            if self.egress_run is not None:
                self.egress_run.close()
                self.egress_run = None
            raise
        finally:
            self.cgroup = None  # the kernel owns it now: no single run releases it
            for fd in passed + extra:
                os.close(fd)
        kernel = NativeKernel(proc, request_w, reply_r, status_r, cgroup, key, self.policy.kill_grace_s)
        kernel.on_close = on_close
        kernel.egress, self.egress_run = self.egress_run, None  # the kernel's for its whole life
        kernel.wait_ready()
        return kernel


_driver_bytes: bytes | None = None


def driver_source() -> bytes:
    global _driver_bytes
    if _driver_bytes is None:
        from importlib.resources import files

        _driver_bytes = files("wasm_runner._runtimes").joinpath("native", DRIVER_NAME).read_bytes()
    return _driver_bytes
