"""The native provider: runs commands, shell scripts, python-data and Node.js in bubblewrap.

Same request and result shapes as the WebAssembly provider, same session directory: the
workspace is /workspace here too, so a file written by WASI Python in one call is there for
pandoc in the next. Where bubblewrap or user namespaces are missing the provider refuses
with a clear error, unless it was built with `allow_unsandboxed=True`, and then every result
says `isolation: "none"`.

The parts: `run` (one run's lifecycle), `kernel_call` (the kernel client), `background`
(background processes), `guest_errors` (reading a guest's errors), `posix` (process helpers).
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import msgspec

from wasm_runner.egress.settings import EgressSettings
from wasm_runner.guest import Mount
from wasm_runner.packages.session_dir import SessionPackages
from wasm_runner.packages.settings import PackageSettings
from wasm_runner.providers.base import Job, Provider
from wasm_runner.providers.native import bwrap as sandbox
from wasm_runner.providers.native.background import BackgroundStart, ProcessStartError
from wasm_runner.providers.native.c_helpers import ensure_launcher, ensure_relay
from wasm_runner.providers.native.egress import EgressUnavailable, NativeEgress
from wasm_runner.providers.native.identity import SandboxIdentity, sandbox_identity
from wasm_runner.providers.native.js_toolchain import ensure_js_toolchain, find_js_toolchain
from wasm_runner.providers.native.kernel import KernelError, KernelKey, NativeKernel, slot_of
from wasm_runner.providers.native.kernel_call import KernelCall, kernel_key
from wasm_runner.providers.native.kernel_pool import KernelPool, MountHolder
from wasm_runner.providers.native.limits import CgroupMode, CgroupSupport, RunCgroup, detect, nested
from wasm_runner.providers.native.package_env import GUEST_VENV, VENV_NAME, PackageTools, package_tools
from wasm_runner.providers.native.run import Program, Refusal, Run
from wasm_runner.providers.native.sandboxed_process import SandboxProcess
from wasm_runner.providers.native.syscall_filter import FilterUnavailable, ensure_program
from wasm_runner.providers.native.toolchain import (
    MARKER,
    PythonData,
    ToolchainError,
    ensure_python_data,
    find_python_data,
    python_data_dir,
)
from wasm_runner.providers.native.web_starters import ensure_starters
from wasm_runner.workspace.layout import Workspace
from wasm_runner_protocol.execution import Diagnostic, ExecRequest, ExecResult, GuestError, Limits

log = logging.getLogger("wasm_runner.native")


RECHECK_S = 30.0
"""How often an unusable sandbox (bwrap missing, no user namespaces) is looked for again."""


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
        python_data: str | os.PathLike[str] | None = None,
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
        self._python_data_cache: tuple[tuple[str, int, int], PythonData] | None = None
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
        ensure_relay()  # the compiled egress relay and launcher, where a C compiler is
        ensure_launcher()
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
        if self.js_prepare_error is None:
            try:  # the web starters' node_modules, installed with the toolchain's npm
                ensure_starters()
            except (ToolchainError, OSError) as exc:
                log.warning("the web starters are not available: %s", exc)
        if self.prepare_error is None:
            pool = self.kernel_pool()
            if pool is not None:
                pool.fill(kernel_key(Limits(), (), network=True))

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

    def _make_ahead(self, workspace: Workspace, key: KernelKey, holder: MountHolder,
                    on_close: Callable[[], None]) -> NativeKernel:
        bwrap_path, problem, support = self.environment()
        if bwrap_path is None or problem is not None:
            raise KernelError(problem or "bubblewrap is unavailable")
        memory_bytes, disk_bytes, network = key[0], key[1], key[3]  # made ahead only without mounts (but packages)
        request = ExecRequest(language="python", provider="native",
                              limits=Limits(memory_bytes=memory_bytes, disk_bytes=disk_bytes))
        try:
            program = self._program(request, True)
        except Refusal as refusal:
            raise KernelError(refusal.message) from None
        job = Job(request, workspace, mounts=(SessionPackages(workspace.root).mount(),))
        venv = PackageTools(binds=(Mount(workspace.internal / VENV_NAME, GUEST_VENV, writable=True),))
        call = KernelCall(self.policy, request, workspace, job, support, program, bwrap_path,
                           self.identity, self.seccomp_program, self.egress if network else None, venv)
        try:  # its proxy socket refuses everything until a session's call renews it with that call's policy
            return call.start_kernel(key, holder, on_close)
        except EgressUnavailable as exc:
            raise KernelError(str(exc)) from None
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
                raise Refusal("SandboxUnavailable", f"the native provider refuses to run unsandboxed: {problem}")
            if not isolated and os.geteuid() == 0 and self.identity is None:
                raise Refusal("SandboxUnavailable", "the native provider refuses to run unsandboxed as root "
                                                     f"without its unprivileged sandbox user: {problem}")
            if request.effective_egress.mode != "deny" and not isolated:
                raise Refusal("NetworkUnavailable", "a network policy other than deny cannot be enforced without "
                                                     f"the sandbox ({problem}); use the wasm provider or install bubblewrap")
            program = self._program(request, isolated)
        except Refusal as refusal:
            return ExecResult(exit_code=refusal.exit_code, language=request.language, id=request.id,
                              isolation="bubblewrap" if isolated or not self.allow_unsandboxed else "none",
                              error=GuestError(type=refusal.type, message=refusal.message))
        tools: PackageTools | None = None
        if isolated:
            request = self._with_package_sources(request)
            tools = self._tools(request, workspace if job.kernels is not None else None, program)
            program = _in_venv(program, tools)
        if isolated and job.kernels is not None and _kernel_call(request):
            call = KernelCall(self.policy, request, workspace, job, support, program, bwrap_path,
                               self.identity, self.seccomp_program, self.egress, tools)
            return call.execute(slot_of(job.kernels), self.kernel_pool())
        run = Run(self.policy, request, workspace, job, support, program,
                   bwrap_path if isolated else None, self.identity,
                   self.seccomp_program if isolated else None, self.egress, tools)
        return run.execute()

    def _with_package_sources(self, request: ExecRequest) -> ExecRequest:
        """The request with the operator's package registries added to a policy that is not deny."""
        settings = self.package_settings
        if settings is None or request.effective_egress.mode == "deny":
            return request
        return msgspec.structs.replace(request, egress=settings.sandbox_policy(request.effective_egress))

    def _tools(self, request: ExecRequest, session: Workspace | None, program: Program) -> PackageTools:
        """The run's package tools; a session's venv is made here on its first run with python-data."""
        toolchain = program.js_toolchain.path if program.js_toolchain is not None else None
        return package_tools(self.package_settings, network=request.effective_egress.mode != "deny",
                             session=session,
                             python_data=program.python_data, js_toolchain=toolchain)

    def spawn(self, request: ExecRequest, workspace: Workspace, mounts: tuple[Any, ...] = (), *, cwd: str = "",
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
        except Refusal as refusal:
            raise ProcessStartError(refusal.message) from None
        request = self._with_package_sources(request)
        tools = self._tools(request, workspace, program)
        program = _in_venv(program, tools)
        launch = BackgroundStart(self.policy, request, workspace, Job(request, workspace, mounts=mounts, disk_room=disk_room),
                             support,
                             program, bwrap_path, self.identity, self.seccomp_program, self.egress, tools)
        return launch.start(cwd, stdin, pty)

    def typecheck(self, code: str, timeout_s: float, declarations: str = "") -> list[Diagnostic]:
        """tsc's diagnostics for a TypeScript program, checked in a sandbox of its own (with `declarations`,
        a `.d.ts` text, beside the runtimes' own)."""
        from wasm_runner.providers.native.typecheck import typecheck

        return typecheck(self.execute, code, timeout_s, declarations)

    def _program(self, request: ExecRequest, isolated: bool) -> Program:
        for key, value in request.env.items():
            if not key or "=" in key or "\0" in key or "\0" in value:
                raise Refusal("InvalidRequest", f"invalid environment variable name or value: {key!r}", 2)
        code = request.code.encode()
        code_dir = sandbox.GUEST_CODE_DIR
        if request.command is not None:
            if not request.command or any(not isinstance(a, str) or "\0" in a for a in request.command):
                raise Refusal("InvalidRequest", "command must be a non-empty list of strings without NUL bytes", 2)
            return Program(list(request.command), python_data=self._python_data(optional=True),
                            js_toolchain=find_js_toolchain())
        if request.language in ("bash", "sh"):
            name = "script.sh"
            return Program([request.language, f"{code_dir}/{name}"], code, name,
                            python_data=self._python_data(optional=True), js_toolchain=find_js_toolchain())
        if request.language == "python":
            env = self._python_data(optional=False)
            assert env is not None  # not optional: a refusal when missing
            python = f"{sandbox.GUEST_PYTHON_DATA}/bin/python" if isolated else str(env.interpreter)
            return Program([python, f"{code_dir}/main.py"], code, "main.py", python_data=env)
        if request.language in ("javascript", "typescript"):
            return self._js_program(request, code, isolated)
        raise Refusal("InvalidRequest", f"the native provider does not run {request.language!r}", 2)

    def _js_program(self, request: ExecRequest, code: bytes, isolated: bool) -> Program:
        """Node.js (type stripping for TypeScript) or bun (`WASM_RUNNER_JS_RUNTIME=bun`, the bun
        profile), from the pinned toolchain; JavaScript falls back to the machine's node."""
        code_dir = sandbox.GUEST_CODE_DIR
        engine = request.env.get(JS_RUNTIME_VARIABLE, "node")
        if engine not in ("node", "bun"):
            raise Refusal("InvalidRequest", f"{JS_RUNTIME_VARIABLE} must be node or bun (got {engine!r})", 2)
        name = "main.ts" if request.language == "typescript" else "main.js"
        toolchain = find_js_toolchain()
        if toolchain is not None:
            tool = toolchain.guest_path(engine) if isolated else str(toolchain.host_path(engine))
            if engine == "bun":
                # bun resolves its entry file's real path, which for the bound code file is a
                # deleted memfd: it runs a copy in the run's private /tmp instead.
                copy = f"/tmp/.wasm-runner/{name}"
                script = 'mkdir -p /tmp/.wasm-runner && cp "$1" "$2" && shift && exec "$0" "$@"'
                return Program(["/bin/sh", "-c", script, tool, f"{code_dir}/{name}", copy], code, name,
                                js_toolchain=toolchain)
            # Node strips types; transforming them too runs enums, namespaces and parameter properties.
            flags = list(NODE_TYPESCRIPT_FLAGS) if request.language == "typescript" else []
            return Program([tool, *flags, f"{code_dir}/{name}"], code, name, js_toolchain=toolchain)
        why = f" (last attempt: {self.js_prepare_error})" if self.js_prepare_error else ""
        if engine == "bun" or request.language == "typescript":
            raise Refusal("RuntimeUnavailable",
                           f"the JavaScript toolchain ({engine}) is not built; run `wasm-runner prepare` or "
                           f"`python -m wasm_runner.providers.native prepare` once{why}")
        if request.language == "javascript":
            node = shutil.which("node", path=sandbox.BASE_PATH if self.policy.show_usr_local or not isolated
                                else sandbox.BASE_PATH.replace("/usr/local/bin:", ""))
            if node is None:
                raise Refusal("RuntimeUnavailable", "Node.js is not installed on this machine (apt-get install nodejs); "
                                                     "the node profile is unavailable")
            return Program([node, f"{code_dir}/main.js"], code, "main.js")
        raise Refusal("InvalidRequest", f"the native provider does not run {request.language!r}", 2)

    def _python_data(self, optional: bool) -> PythonData | None:
        found = self._find_python_data()
        if found is None and not optional:
            why = f" (last attempt: {self.prepare_error})" if self.prepare_error else ""
            raise Refusal("RuntimeUnavailable",
                           "the python-data environment is not built; run `wasm-runner prepare` or "
                           f"`python -m wasm_runner.providers.native prepare` once{why}")
        return found

    def _find_python_data(self) -> PythonData | None:
        """find_python_data, cached while its marker file is unchanged (it hashes the requirements)."""
        path = self.python_data_path or python_data_dir()
        try:
            st = os.stat(path / MARKER)
            key: tuple[str, int, int] | None = (str(path), st.st_mtime_ns, st.st_size)
        except OSError:
            key = None
        cached = self._python_data_cache
        if key is not None and cached is not None and cached[0] == key:
            return cached[1]
        found = find_python_data(path)
        self._python_data_cache = (key, found) if key is not None and found is not None else None
        return found


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


# -- helpers --------------------------------------------------------------------------------------


NODE_TYPESCRIPT_FLAGS = ("--experimental-transform-types", "--disable-warning=ExperimentalWarning")
JS_RUNTIME_VARIABLE = "WASM_RUNNER_JS_RUNTIME"
"""Which engine runs native JavaScript/TypeScript: node (default) or bun (set by the bun profile)."""


def _in_venv(program: Program, tools: PackageTools) -> Program:
    """A session's Python program run by its venv's python (its installs, then python-data's packages)."""
    python = f"{sandbox.GUEST_PYTHON_DATA}/bin/python"
    if tools.venv is not None and program.argv[:1] == [python] and program.code_name == "main.py":
        return replace(program, argv=[f"{tools.venv}/bin/python", *program.argv[1:]])
    return program
