"""The native provider: runs commands, shell scripts, python-data and Node.js in bubblewrap.

Same request and result shapes as the WebAssembly provider, same session directory: the
workspace is /workspace here too, so a file written by WASI Python in one call is there for
pandoc in the next. Where bubblewrap or user namespaces are missing the provider refuses
with a clear error, unless it was built with `allow_unsandboxed=True`, and then every result
says `isolation: "none"`.
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
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import msgspec

from wasm_runner.capture import Capture
from wasm_runner.egress.settings import EgressSettings
from wasm_runner.hints import native_network_error
from wasm_runner.packages.session_dir import SessionPackages
from wasm_runner.packages.settings import PackageSettings
from wasm_runner.providers.base import Job, Provider
from wasm_runner.providers.native import bwrap as sandbox
from wasm_runner.providers.native.egress import (
    RELAY_NAME,
    SYSTEM_PYTHON,
    EgressUnavailable,
    NativeEgress,
    RunEgress,
)
from wasm_runner.providers.native.identity import RelayPlan, SandboxIdentity, sandbox_identity
from wasm_runner.providers.native.js_toolchain import (
    GUEST_JS_TOOLCHAIN,
    JsToolchain,
    ensure_js_toolchain,
    find_js_toolchain,
)
from wasm_runner.providers.native.kernel import (
    DRIVER_NAME,
    PRELOAD,
    KernelError,
    NativeKernel,
    NativeKernelSlot,
    Reply,
    slot_of,
    spawner,
)
from wasm_runner.providers.native.kernel_pool import KernelPool, MountHolder
from wasm_runner.providers.native.limits import (
    CgroupMode,
    CgroupSupport,
    RunCgroup,
    RunLimits,
    default_signals,
    detect,
    launcher,
    nested,
    rlimit_prefix,
)
from wasm_runner.providers.native.ownership import normalize
from wasm_runner.providers.native.package_env import GUEST_VENV, PackageTools, package_tools
from wasm_runner.providers.native.pidfd import open_pidfd
from wasm_runner.providers.native.sandboxed_process import CONTROLLING_TTY, SandboxProcess, set_window
from wasm_runner.providers.native.syscall_filter import FilterUnavailable, ensure_program
from wasm_runner.providers.native.toolchain import (
    MARKER,
    PythonData,
    ToolchainError,
    ensure_python_data,
    find_python_data,
    python_data_dir,
)
from wasm_runner.workspace.layout import Workspace, diff
from wasm_runner.workspace.quota import RunDisk, watcher
from wasm_runner_protocol.execution import (
    LIMIT_MESSAGES,
    Diagnostic,
    ExecRequest,
    ExecResult,
    GuestError,
    LimitName,
    Limits,
)
from wasm_runner_protocol.guest import GUEST_WORKSPACE
from wasm_runner_protocol.packages import PACKAGES_GUEST_PATH

log = logging.getLogger("wasm_runner.native")

READ_CHUNK = 65536
RECHECK_S = 30.0
"""How often an unusable sandbox (bwrap missing, no user namespaces) is looked for again."""
PROCESS_WATCH_S = 0.005
"""How often the process count is checked where no cgroup or rlimit bounds it (uid 0, no cgroups):
the host's task count (one read of /proc/loadavg) first, the run's own tree only when that grew."""
FULL_COUNT_S = 0.05
DRAIN_AFTER_EXIT_S = 0.5
"""How long output pipes are read after the sandbox exited (anything still holding them is killed)."""
MEMORY_HINTS = ("MemoryError", "Cannot allocate memory", "std::bad_alloc", "out of memory",
                "JavaScript heap out of memory", "cannot allocate")


@dataclass(frozen=True)
class _Program:
    """What to run inside the sandbox: an argv, and optionally a code file it reads."""

    argv: list[str]
    code: bytes | None = None
    code_name: str | None = None
    python_data: PythonData | None = None
    js_toolchain: JsToolchain | None = None
    """Mounted read-only at /opt/js-toolchain, its bin/ first on PATH."""


class _Refusal(Exception):
    def __init__(self, type_: str, message: str, exit_code: int = 126) -> None:
        super().__init__(message)
        self.type = type_
        self.message = message
        self.exit_code = exit_code


class NativeProvider(Provider):
    """Runs `command` argvs and bash/sh, python (python-data), javascript and typescript (Node.js
    or bun) code natively.

    `policy` narrows or (explicitly) widens what the sandbox sees; `allow_unsandboxed` lets
    runs go ahead without bubblewrap where it is unusable (isolation "none": the program runs
    as the service's user on the host, limits still applied); `cgroups` picks the enforcement;
    `egress` holds the operator's egress settings (resolver, extra CA, byte cap) for runs whose
    network policy is not `deny`.
    """

    name = "native"
    languages = frozenset({"bash", "sh", "python", "javascript", "typescript"})

    def __init__(
        self,
        policy: sandbox.SandboxPolicy | None = None,
        *,
        allow_unsandboxed: bool = False,
        bwrap: str | None = None,
        python_data: str | os.PathLike | None = None,
        cgroups: CgroupMode = "auto",
        cgroup_parent: str | None = None,
        ready_kernels: int = 1,
        egress: EgressSettings | None = None,
    ) -> None:
        self.policy = policy or sandbox.SandboxPolicy()
        self.egress = NativeEgress(egress)
        """The host's egress proxy for this provider's sandboxes (started by the first run that needs it)."""
        self.allow_unsandboxed = allow_unsandboxed
        self._bwrap_explicit = bwrap
        self.python_data_path = Path(python_data) if python_data is not None else None
        """The python-data environment named at construction; None: the default place."""
        self._cgroup_mode: CgroupMode = cgroups
        self._cgroup_parent = cgroup_parent
        self._lock = threading.Lock()
        self._setup: tuple[str | None, str | None, CgroupSupport] | None = None
        self._checked_at = 0.0
        self.prepare_error: str | None = None
        self.js_prepare_error: str | None = None
        self._python_data_cache: tuple[tuple, PythonData] | None = None
        self.identity: SandboxIdentity | None = None
        """The host user sandboxes run as (None while the sandbox is unusable)."""
        self.seccomp_program: Path | None = None
        self.ready_kernels = ready_kernels
        """Python kernels kept started ahead (data stack imported) for sessions' first calls."""
        self._kernel_pool: KernelPool | None = None
        self.package_settings: PackageSettings | None = None
        """Where pip, uv, npm and bun in the sandboxes install from (the Runner's; None: their own defaults)."""

    def use_packages(self, settings: PackageSettings) -> None:
        self.package_settings = settings

    def use_scratch(self, directory: Path) -> None:
        self.egress.use_directory(directory)

    # -- set-up ------------------------------------------------------------------------------

    def environment(self) -> tuple[str | None, str | None, CgroupSupport]:
        """(bwrap path or None, why the sandbox is unusable or None, cgroup support).

        Cached; while the sandbox is unusable it is looked for again every RECHECK_S, so
        installing bubblewrap takes effect without a restart.
        """
        with self._lock:
            stale = (self._setup is not None and self._setup[1] is not None
                     and time.monotonic() - self._checked_at > RECHECK_S)
            if self._setup is None or stale:
                self._checked_at = time.monotonic()
                path = sandbox.find_bwrap(self._bwrap_explicit)
                identity = sandbox_identity()
                self.identity = identity if isinstance(identity, SandboxIdentity) else None
                problem: str | None
                if path is None:
                    problem = ("bubblewrap (bwrap) is not installed: run scripts/install-native.sh as root "
                               "(apt-get install bubblewrap)")
                elif isinstance(identity, str):
                    problem = identity
                else:
                    problem = sandbox.probe(path, (identity.uid, identity.gid) if identity.dropped else None)
                self.seccomp_program = None
                if problem is None:
                    try:
                        self.seccomp_program = ensure_program()
                    except (FilterUnavailable, OSError) as exc:
                        problem = str(exc)
                support = detect(self._cgroup_mode, self._cgroup_parent)
                if support.enforcement == "rlimit":
                    log.warning("native runs are limited by rlimits only (no usable cgroup: %s)", support.reason)
                self._setup = (path, problem, support)
            return self._setup

    def prepare(self) -> None:
        """Build the python-data environment (once; later calls return at once).

        Never raises: a failure is logged and kept in `prepare_error`; python-data runs then
        answer with that error, while commands and shell scripts are unaffected.
        """
        try:
            ensure_program()  # the seccomp filter, generated once into the cache
        except (FilterUnavailable, OSError) as exc:
            log.warning("native sandboxes are unavailable: %s", exc)
        try:
            ensure_python_data(path=self.python_data_path)
            self.prepare_error = None
        except (ToolchainError, OSError) as exc:
            self.prepare_error = str(exc)
            log.warning("python-data is not available: %s", exc)
        try:
            ensure_js_toolchain()
            self.js_prepare_error = None
        except (ToolchainError, OSError) as exc:
            self.js_prepare_error = str(exc)
            log.warning("the JavaScript toolchain (node, bun, tsc, biome, uv) is not available: %s", exc)
        if self.prepare_error is None:
            pool = self.kernel_pool()
            if pool is not None:
                pool.fill(kernel_key(Limits(), ()))

    def kernel_pool(self) -> KernelPool | None:
        """The kernels made ahead, where they can be (a root service with a usable sandbox)."""
        if self.ready_kernels <= 0:
            return None
        _, problem, _ = self.environment()
        identity = self.identity
        if problem is not None or identity is None or not identity.dropped:
            return None
        with self._lock:
            if self._kernel_pool is None:
                self._kernel_pool = KernelPool(self.ready_kernels, identity, self._make_ahead)
            return self._kernel_pool

    def _make_ahead(self, workspace: Workspace, key: tuple, holder: MountHolder,
                    on_close: Callable[[], None]) -> NativeKernel:
        bwrap_path, problem, support = self.environment()
        if bwrap_path is None or problem is not None:
            raise KernelError(problem or "bubblewrap is unavailable")
        memory_bytes, disk_bytes = key[0], key[1]  # made ahead only without mounts (but packages) or network
        request = ExecRequest(language="python", provider="native",
                              limits=Limits(memory_bytes=memory_bytes, disk_bytes=disk_bytes))
        try:
            program = self._program(request, True)
        except _Refusal as refusal:
            raise KernelError(refusal.message) from None
        job = Job(request, workspace, mounts=(SessionPackages(workspace.root).mount(),))
        call = _KernelCall(self.policy, request, workspace, job, support, program, bwrap_path,
                           self.identity, self.seccomp_program)
        try:
            return call.start_kernel(key, holder, on_close)
        finally:
            call.close_wake()

    def close(self) -> None:
        if self._kernel_pool is not None:
            self._kernel_pool.close()
        self.egress.close()

    # -- execution ---------------------------------------------------------------------------

    def execute(self, job: Job) -> ExecResult:
        request = job.request
        workspace = job.workspace.ensure()
        bwrap_path, problem, support = self.environment()
        isolated = problem is None
        try:
            if not isolated and not self.allow_unsandboxed:
                raise _Refusal("SandboxUnavailable", f"the native provider refuses to run unsandboxed: {problem}")
            if not isolated and os.geteuid() == 0 and self.identity is None:
                raise _Refusal("SandboxUnavailable", "the native provider refuses to run unsandboxed as root "
                                                     f"without its unprivileged sandbox user: {problem}")
            if request.effective_egress.mode != "deny" and not isolated:
                raise _Refusal("NetworkUnavailable", "a network policy other than deny cannot be enforced without "
                                                     f"the sandbox ({problem}); use the wasm provider or install bubblewrap")
            program = self._program(request, isolated)
        except _Refusal as refusal:
            return ExecResult(exit_code=refusal.exit_code, language=request.language, id=request.id,
                              isolation="bubblewrap" if isolated or not self.allow_unsandboxed else "none",
                              error=GuestError(type=refusal.type, message=refusal.message))
        tools: PackageTools | None = None
        if isolated:
            request = self._with_package_sources(request)
            tools = self._tools(request, workspace if job.kernels is not None else None, program)
            program = _in_venv(program, tools)
        if isolated and job.kernels is not None and _kernel_call(request):
            call = _KernelCall(self.policy, request, workspace, job, support, program, bwrap_path,
                               self.identity, self.seccomp_program, self.egress, tools)
            return call.execute(slot_of(job.kernels), self.kernel_pool())
        run = _Run(self.policy, request, workspace, job, support, program,
                   bwrap_path if isolated else None, self.identity,
                   self.seccomp_program if isolated else None, self.egress, tools)
        return run.execute()

    def _with_package_sources(self, request: ExecRequest) -> ExecRequest:
        """The request with the operator's package registries added to a policy that is not deny."""
        settings = self.package_settings
        if settings is None or request.effective_egress.mode == "deny":
            return request
        return msgspec.structs.replace(request, egress=settings.sandbox_policy(request.effective_egress))

    def _tools(self, request: ExecRequest, session: Workspace | None, program: _Program) -> PackageTools:
        """The run's package tools; a session's venv is made here on its first run with python-data."""
        toolchain = program.js_toolchain.path if program.js_toolchain is not None else None
        return package_tools(self.package_settings, network=request.effective_egress.mode != "deny",
                             session_files=session.files if session is not None else None,
                             python_data=program.python_data, js_toolchain=toolchain)

    def spawn(self, request: ExecRequest, workspace: Workspace, mounts: tuple = (), *, cwd: str = "",
              stdin: bool = True, pty: tuple[int, int] | None = None,
              cgroup_parent: RunCgroup | None = None, disk_room: int | None = None) -> SandboxProcess:
        """Start `request` as a background process in a sandbox confined like a native run.

        Returns at once with the live sandbox (its output is read once `run` is called on it);
        `cwd` is a directory under /workspace; `pty` (cols, rows) runs it on a pseudo-terminal;
        `cgroup_parent` is the session's cgroup bounding all its processes together; `disk_room` the
        most it may add to disk besides its limits while it runs (see RunDisk). Raises
        `ProcessStartError` with what to do when it cannot start."""
        workspace.ensure()
        bwrap_path, problem, support = self.environment()
        if problem is not None or bwrap_path is None:
            raise ProcessStartError(f"background processes need the native sandbox: {problem}")
        if cgroup_parent is not None:
            support = nested(support, cgroup_parent)
        try:
            program = self._program(request, True)
        except _Refusal as refusal:
            raise ProcessStartError(refusal.message) from None
        request = self._with_package_sources(request)
        tools = self._tools(request, workspace, program)
        program = _in_venv(program, tools)
        launch = _Background(self.policy, request, workspace, Job(request, workspace, mounts=mounts, disk_room=disk_room),
                             support,
                             program, bwrap_path, self.identity, self.seccomp_program, self.egress, tools)
        return launch.start(cwd, stdin, pty)

    def typecheck(self, code: str, timeout_s: float, declarations: str = "") -> list[Diagnostic]:
        """tsc's diagnostics for a TypeScript program, checked in a sandbox of its own (with `declarations`,
        a `.d.ts` text, beside the runtimes' own)."""
        from wasm_runner.providers.native.typecheck import typecheck

        return typecheck(self.execute, code, timeout_s, declarations)

    def _program(self, request: ExecRequest, isolated: bool) -> _Program:
        for key, value in request.env.items():
            if not key or "=" in key or "\0" in key or "\0" in value:
                raise _Refusal("InvalidRequest", f"invalid environment variable name or value: {key!r}", 2)
        code = request.code.encode()
        code_dir = sandbox.GUEST_CODE_DIR
        if request.command is not None:
            if not request.command or any(not isinstance(a, str) or "\0" in a for a in request.command):
                raise _Refusal("InvalidRequest", "command must be a non-empty list of strings without NUL bytes", 2)
            return _Program(list(request.command), python_data=self._python_data(optional=True),
                            js_toolchain=find_js_toolchain())
        if request.language in ("bash", "sh"):
            name = "script.sh"
            return _Program([request.language, f"{code_dir}/{name}"], code, name,
                            python_data=self._python_data(optional=True), js_toolchain=find_js_toolchain())
        if request.language == "python":
            env = self._python_data(optional=False)
            assert env is not None  # not optional: a refusal when missing
            python = f"{sandbox.GUEST_PYTHON_DATA}/bin/python" if isolated else str(env.interpreter)
            return _Program([python, f"{code_dir}/main.py"], code, "main.py", python_data=env)
        if request.language in ("javascript", "typescript"):
            return self._js_program(request, code, isolated)
        raise _Refusal("InvalidRequest", f"the native provider does not run {request.language!r}", 2)

    def _js_program(self, request: ExecRequest, code: bytes, isolated: bool) -> _Program:
        """Node.js (type stripping for TypeScript) or bun (`WASM_RUNNER_JS_RUNTIME=bun`, the bun
        profile), from the pinned toolchain; JavaScript falls back to the machine's node."""
        code_dir = sandbox.GUEST_CODE_DIR
        engine = request.env.get(JS_RUNTIME_VARIABLE, "node")
        if engine not in ("node", "bun"):
            raise _Refusal("InvalidRequest", f"{JS_RUNTIME_VARIABLE} must be node or bun (got {engine!r})", 2)
        name = "main.ts" if request.language == "typescript" else "main.js"
        toolchain = find_js_toolchain()
        if toolchain is not None:
            tool = toolchain.guest_path(engine) if isolated else str(toolchain.host_path(engine))
            if engine == "bun":
                # bun resolves its entry file's real path, which for the bound code file is a
                # deleted memfd: it runs a copy in the run's private /tmp instead.
                copy = f"/tmp/.wasm-runner/{name}"
                script = 'mkdir -p /tmp/.wasm-runner && cp "$1" "$2" && shift && exec "$0" "$@"'
                return _Program(["/bin/sh", "-c", script, tool, f"{code_dir}/{name}", copy], code, name,
                                js_toolchain=toolchain)
            # Node strips types; transforming them too runs enums, namespaces and parameter properties.
            flags = list(NODE_TYPESCRIPT_FLAGS) if request.language == "typescript" else []
            return _Program([tool, *flags, f"{code_dir}/{name}"], code, name, js_toolchain=toolchain)
        why = f" (last attempt: {self.js_prepare_error})" if self.js_prepare_error else ""
        if engine == "bun" or request.language == "typescript":
            raise _Refusal("RuntimeUnavailable",
                           f"the JavaScript toolchain ({engine}) is not built; run `wasm-runner prepare` or "
                           f"`python -m wasm_runner.providers.native prepare` once{why}")
        if request.language == "javascript":
            node = shutil.which("node", path=sandbox.BASE_PATH if self.policy.show_usr_local or not isolated
                                else sandbox.BASE_PATH.replace("/usr/local/bin:", ""))
            if node is None:
                raise _Refusal("RuntimeUnavailable", "Node.js is not installed on this machine (apt-get install nodejs); "
                                                     "the node profile is unavailable")
            return _Program([node, f"{code_dir}/main.js"], code, "main.js")
        raise _Refusal("InvalidRequest", f"the native provider does not run {request.language!r}", 2)

    def _python_data(self, optional: bool) -> PythonData | None:
        found = self._find_python_data()
        if found is None and not optional:
            why = f" (last attempt: {self.prepare_error})" if self.prepare_error else ""
            raise _Refusal("RuntimeUnavailable",
                           "the python-data environment is not built; run `wasm-runner prepare` or "
                           f"`python -m wasm_runner.providers.native prepare` once{why}")
        return found

    def _find_python_data(self) -> PythonData | None:
        """find_python_data, cached while its marker file is unchanged (it hashes the requirements)."""
        path = self.python_data_path or python_data_dir()
        try:
            st = os.stat(path / MARKER)
            key: tuple | None = (str(path), st.st_mtime_ns, st.st_size)
        except OSError:
            key = None
        cached = self._python_data_cache
        if key is not None and cached is not None and cached[0] == key:
            return cached[1]
        found = find_python_data(path)
        self._python_data_cache = (key, found) if key is not None and found is not None else None
        return found


BACKGROUND_LIFETIME_S = 30 * 86400.0
"""The egress deadline of a sandbox that outlives calls (a background process, a kernel between its
calls): not a limit of its own, since closing the socket when the sandbox ends (with its session at
the latest, whose TTL is shorter) cuts every connection."""


def kernel_key(limits: Limits, mounts: tuple, network: bool = False) -> tuple:
    """What a kernel holds for its whole life (cgroup, rlimits, mounts, a way to the egress proxy or
    none): a call under others needs another kernel."""
    return (limits.memory_bytes, limits.disk_bytes, mounts, network)


def _kernel_call(request: ExecRequest) -> bool:
    """A session's Python code runs in its kernel, unless it asks for a fresh process or a check."""
    return (request.command is None and request.language == "python" and not request.fresh
            and request.harness == "script")


def process_request(command: str, args: list[str] | tuple[str, ...] = (), **fields: Any) -> ExecRequest:
    """The request behind `process(command, args, ...)` (HTTP POST /v1/sessions/{id}/process, the CLI).

    `fields` are ExecRequest fields (stdin, env, limits, id); the run goes to the native provider.
    """
    if not isinstance(command, str) or not command:
        raise ValueError("command must be a non-empty string")
    fields.setdefault("language", "sh")
    return ExecRequest(command=[command, *args], provider="native", **fields)


# -- one run -----------------------------------------------------------------------------------


@dataclass
class _Stop:
    reason: LimitName | None = None
    at: float | None = None


class _Run:
    """Spawns one sandbox, pumps its output, enforces its deadline and tears it down."""

    def __init__(self, policy: sandbox.SandboxPolicy, request: ExecRequest, workspace: Workspace, job: Job,
                 support: CgroupSupport, program: _Program, bwrap_path: str | None,
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
        self._stop = _Stop()
        self._stop_lock = threading.Lock()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        self.cgroup: RunCgroup | None = None
        self.enforcement = "rlimit"
        self.proc: subprocess.Popen | None = None
        self.init_pid: int | None = None
        self.started_in_sandbox = False
        self._status_buffer = b""
        self._scratch: Path | None = None
        self.processes_exceeded = False
        self._next_full_count = 0.0
        self.holder: MountHolder | None = None
        """The mount namespace a kernel made ahead is launched in (see kernel_pool.py)."""
        self.egress = egress if request.effective_egress.mode != "deny" and bwrap_path is not None else None
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
        trees += [m.host for m in self.job.mounts if m.writable]
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
                return ExecResult(exit_code=126, language=request.language, id=request.id, isolation="bubblewrap",
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
        exit_code = _exit_code(status) if status is not None else 126
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
            stderr=stderr_text,
            exit_code=exit_code,
            error=error,
            limit=limit,
            truncated=[c.stream for c in (self.stdout, self.stderr) if c.truncated],
            duration_ms=round(duration_ms, 3),
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
                 fds: list[int]) -> tuple[list[str], dict, str]:
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
            data_files: list[tuple[int, str]] = []
            if egress is not None:
                binds += egress.binds()
                relay_fd = os.memfd_create("wasm-runner-egress-relay", 0)
                fds.append(relay_fd)
                _write_all(relay_fd, self.egress.relay_code() if self.egress is not None else b"")
                os.lseek(relay_fd, 0, os.SEEK_SET)
                data_files.append((relay_fd, f"{sandbox.GUEST_CODE_DIR}/{RELAY_NAME}"))
            data = program.python_data
            if data is not None and not _visible(data.base_prefix, self.policy):
                binds.append(sandbox.Bind(Path(data.base_prefix), data.base_prefix))
            if program.js_toolchain is not None:
                binds.append(sandbox.Bind(program.js_toolchain.path, GUEST_JS_TOOLCHAIN))
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
                relay=plan.source if plan is not None else None, data_files=data_files, symlinks=tools.links)
            # The options reach bwrap through a descriptor: the sandbox's init process shows
            # `bwrap --args N -- command`, no host path.
            args_fd = os.memfd_create("wasm-runner-bwrap-args", 0)
            fds.append(args_fd)
            _write_all(args_fd, b"".join(o.encode() + b"\0" for o in options))
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
        env.update(HOME=str(files), PWD=str(files), TMPDIR=str(tmp), MPLCONFIGDIR=str(tmp / ".matplotlib"),
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
        return default_signals() + prefix + inner, env, str(files)

    def _spawn_and_wait(self, run_limits: RunLimits) -> tuple[int | None, Any]:
        code_fd = status_r = status_w = None
        pass_fds: list[int] = []
        try:
            if self.bwrap is not None:
                if self.program.code is not None:
                    code_fd = os.memfd_create("wasm-runner-code", 0)
                    _write_all(code_fd, self.program.code)
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
        host_tasks_at_start = _host_tasks() if watch_processes else 0
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
                            _signal(proc.pid, signal.SIGKILL)  # last resort: bwrap itself
                    status, rusage = _reap(proc.pid)
                    if status is not None:
                        exited_at = now
                        proc.returncode = _exit_code(status)
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
                        data = _read(key.fd)
                        if data:
                            captures[key.fd].write(data)
                        elif data is not None:  # end of file
                            selector.unregister(key.fd)
                            del captures[key.fd]
                    elif kind == "status":
                        if not self._read_status(key.fd):
                            selector.unregister(key.fd)
                    elif kind == "wake":
                        _read(self._wake_r)
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
                _signal(proc.pid, signal.SIGKILL)
                status, rusage = _reap(proc.pid, block=True)
                proc.returncode = _exit_code(status) if status is not None else -9
        return status, rusage

    def _too_many_processes(self, now: float, host_tasks_at_start: int) -> bool:
        """Has the run more processes than policy.max_processes? Cheap signs every tick (the
        host's task count grew, or the sandbox's init has adopted many orphans, as a fork bomb's
        processes are), the run's whole tree counted when one shows or every FULL_COUNT_S."""
        assert self.proc is not None
        limit = self.policy.max_processes
        reaper = self.init_pid or self.proc.pid
        due = now >= self._next_full_count
        if not due and _host_tasks() - host_tasks_at_start <= limit and len(_children(reaper)) <= limit:
            return False
        self._next_full_count = now + FULL_COUNT_S
        return len(_descendants(self.proc.pid)) > limit + 1  # + bwrap's init

    def _feed(self, proc: subprocess.Popen, data: memoryview | None, selector: selectors.BaseSelector):
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
        chunk = _read(fd)
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
        return _descendants(self.proc.pid) - spare

    def _terminate(self) -> None:
        """SIGTERM to every process of the run, so programs can clean up within the grace period."""
        assert self.proc is not None
        if self.bwrap is None:
            _killpg(self.proc.pid, signal.SIGTERM)
        for pid in self._sandbox_pids():
            _signal(pid, signal.SIGTERM)

    def _kill(self) -> None:
        """SIGKILL the whole tree: the sandbox's init (the kernel then kills its PID namespace), then the rest."""
        assert self.proc is not None
        if self.bwrap is None:
            _killpg(self.proc.pid, signal.SIGKILL)
        if self.init_pid is not None:
            _signal(self.init_pid, signal.SIGKILL)  # the kernel kills every process in its namespace
        elif self.bwrap is not None:
            _signal(self.proc.pid, signal.SIGKILL)  # still setting up: its children die with it
        if self.cgroup is not None:
            self.cgroup.signal_all(signal.SIGKILL, spare={self.proc.pid})
        elif self.bwrap is None:
            for pid in _descendants(self.proc.pid):
                _signal(pid, signal.SIGKILL)

    def _after_exit(self) -> None:
        """The run's main process ended: nothing of it may outlive it."""
        assert self.proc is not None
        if self.bwrap is None:
            _killpg(self.proc.pid, signal.SIGKILL)
        if self.cgroup is not None:
            self.cgroup.signal_all(signal.SIGKILL)

    # -- reading the outcome -------------------------------------------------------------------

    def _snapshot_after(self, before: dict) -> dict:
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
            return _python_traceback(stderr)
        if exit_code != 0 and self.request.command is None and self.request.language in ("javascript", "typescript"):
            return _js_error(stderr, self.request.code)
        return None


class _KernelCall(_Run):
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
        kernel: NativeKernel | None = None
        try:
            key = kernel_key(self.limits, self.job.mounts, network=self.egress is not None)
            if slot.kernel is not None and (slot.kernel.closed or slot.kernel.key != key):
                slot.kernel.close()
                slot.kernel, slot.lost = None, True
            if slot.kernel is None:
                restarted, slot.lost = slot.lost, False
                packages = [m for m in self.job.mounts if m.guest == PACKAGES_GUEST_PATH and not m.writable]
                others = [m for m in self.job.mounts if m not in packages]
                if pool is not None and not others and self.egress is None:
                    taken = pool.take(kernel_key(self.limits, ()), self.workspace,
                                      packages[0].host if packages else None)
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
            env["PWD"] = GUEST_WORKSPACE
            if self.tools.path and "PATH" not in request.env:
                env["PATH"] = ":".join((*self.tools.path, env["PATH"]))
            payload = {"code": request.code, "env": env, "stdin": request.stdin,
                       "outputs_budget": max(self.limits.output_bytes, 1 << 20),
                       "site_dirs": list(self.tools.site_dirs)}

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
            stderr=self.stderr.text(),
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

    def start_kernel(self, key: tuple, holder: MountHolder | None = None,
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
        _write_all(code_fd, _driver_source())
        os.lseek(code_fd, 0, os.SEEK_SET)
        passed = [code_fd, status_w, request_r, reply_w]
        extra: list[int] = []
        try:
            self.program = _Program([f"{sandbox.GUEST_PYTHON_DATA}/bin/python",
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


class ProcessStartError(RuntimeError):
    """A background process could not start (the message says why and what to do)."""




class _Background(_Run):
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
                _write_all(code_fd, self.program.code)
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


_driver_bytes: bytes | None = None


def _driver_source() -> bytes:
    global _driver_bytes
    if _driver_bytes is None:
        from importlib.resources import files

        _driver_bytes = files("wasm_runner._runtimes").joinpath("native", DRIVER_NAME).read_bytes()
    return _driver_bytes


# -- helpers --------------------------------------------------------------------------------------


NODE_TYPESCRIPT_FLAGS = ("--experimental-transform-types", "--disable-warning=ExperimentalWarning")
JS_RUNTIME_VARIABLE = "WASM_RUNNER_JS_RUNTIME"
"""Which engine runs native JavaScript/TypeScript: node (default) or bun (set by the bun profile)."""


def _visible(prefix: str, policy: sandbox.SandboxPolicy) -> bool:
    if not prefix:
        return True
    if prefix == "/usr/local" or prefix.startswith("/usr/local/"):
        return policy.show_usr_local
    return prefix == "/usr" or prefix.startswith("/usr/")


def _with_binds(policy: sandbox.SandboxPolicy, binds: list[sandbox.Bind]) -> sandbox.SandboxPolicy:
    return replace(policy, binds=tuple(binds))


def _in_venv(program: _Program, tools: PackageTools) -> _Program:
    """A session's Python program run by its venv's python (its installs, then python-data's packages)."""
    python = f"{sandbox.GUEST_PYTHON_DATA}/bin/python"
    if tools.venv and program.argv[:1] == [python] and program.code_name == "main.py":
        return replace(program, argv=[f"{GUEST_VENV}/bin/python", *program.argv[1:]])
    return program


def _python_traceback(stderr: str) -> GuestError | None:
    marker = stderr.rfind("Traceback (most recent call last):")
    if marker < 0:
        return None
    tb = stderr[marker:].rstrip()
    last = tb.splitlines()[-1]
    type_, sep, message = last.partition(": ")
    if not sep and not re.fullmatch(r"[\w.]+", last):
        return None
    return GuestError(type=type_.split(".")[-1], message=message, traceback=tb[-8000:])


_JS_ERROR_LINE = re.compile(r"^(?:Uncaught )?(?P<type>[A-Z]\w*)(?: \[\w+\])?: (?P<message>.*)$|^error: (?P<bun>.*)$")
_JS_PLACE = re.compile(r"/main\.[jt]s:(\d+)")


def _js_error(stderr: str, code: str) -> GuestError | None:
    """Node's or bun's report of an uncaught error, with its line in the program, as a GuestError."""
    for line in stderr.splitlines():
        match = _JS_ERROR_LINE.match(line)
        if match:
            break
    else:
        return None
    type_, message = (match["type"], match["message"]) if match["type"] else ("Error", match["bun"])
    error = GuestError(type=type_, message=message, traceback=stderr.strip()[-8000:])
    place = _JS_PLACE.search(stderr)
    if place is not None:
        error.line = int(place.group(1))
        lines = code.splitlines()
        if 0 < error.line <= len(lines):
            error.source = lines[error.line - 1].strip()
    return error


def _exit_code(status: int) -> int:
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1


def _reap(pid: int, block: bool = False) -> tuple[int | None, Any]:
    try:
        got, status, rusage = os.wait4(pid, 0 if block else os.WNOHANG)
    except ChildProcessError:
        return 0, None
    if got == 0:
        return None, None
    return status, rusage


def _read(fd: int) -> bytes | None:
    """Up to READ_CHUNK bytes; b"" at end of file; None when nothing is ready yet."""
    try:
        return os.read(fd, READ_CHUNK)
    except BlockingIOError:
        return None
    except OSError:
        return b""


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _host_tasks() -> int:
    """Threads on the host (the 4th field of /proc/loadavg): a cheap upper bound on the run's growth."""
    try:
        with open("/proc/loadavg", "rb") as f:
            return int(f.read().split()[3].split(b"/")[1])
    except (OSError, ValueError, IndexError):
        return 1 << 30  # unknown: always count the tree


def _children(pid: int) -> list[bytes]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children", "rb") as f:
            return f.read().split()
    except OSError:
        return []


def _descendants(root: int) -> set[int]:
    """Every live descendant of `root`, from /proc (the fallback when no cgroup lists them)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split()
        children.setdefault(int(fields[1]), []).append(int(entry))
    found: set[int] = set()
    stack = [root]
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found
