"""Session: a directory that persists across calls, plus live kernels when used."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from wasm_runner.capture import OutputListener
from wasm_runner.errors import InvalidRequestError, RunnerClosedError
from wasm_runner.execution.executor import Executor
from wasm_runner.execution.results import no_worker_result
from wasm_runner.guest import Mount
from wasm_runner.packages.session_dir import SessionPackages
from wasm_runner.processes.manager import BackgroundProcess, ProcessLimits, ProcessManager
from wasm_runner.providers.base import Job, Provider
from wasm_runner.snapshots.image import SnapshotRefused
from wasm_runner.snapshots.store import KernelImages
from wasm_runner.workspace.layout import Workspace
from wasm_runner_protocol.execution import ExecRequest, ExecResult
from wasm_runner_protocol.packages import InstallResult, PackageLock, PackageRequest

if TYPE_CHECKING:  # a provider loads with the first run, not with the session
    from wasm_runner.packages.installer import PackageInstaller
    from wasm_runner.providers.wasm.kernel_slots import KernelSlot
    from wasm_runner.snapshots.fork import ForkResult
    from wasm_runner.tools.calls import Approver, ToolPolicy, ToolRun
    from wasm_runner.tools.registry import ToolRegistry, ToolsArg
    from wasm_runner_protocol.egress import EgressPolicy
    from wasm_runner_protocol.tools import ToolCall

if TYPE_CHECKING:
    from wasm_runner.execution.kernel_workers import KernelWorkers

__all__ = ["KernelState", "Session", "SessionHost"]

log = logging.getLogger("wasm_runner")
NATIVE_NOT_SAVED = ("a native kernel's state is a process, not data the host tracks: it is not saved, and a new "
                    "kernel starts (its files and packages are kept)")
KERNEL_DIR = "kernel"
"""Where in a session's directory its kernels' snapshots are kept (outside what the guest sees)."""


class SessionHost(Protocol):
    """What a session needs of the Runner that made it."""

    executor: Executor
    isolation: Literal["process", "in-process"]
    """"process": no guest of its runs in this process (see `Runner`)."""

    @property
    def kernel_workers(self) -> KernelWorkers | None: ...

    def request(self, code: str | ExecRequest, **fields: Any) -> ExecRequest: ...

    def provider_for(self, request: ExecRequest) -> Provider: ...

    def forget(self, session_id: str) -> None: ...

    def session(self, session_id: str | None = None, *, mounts: tuple[Mount, ...] = (),
                egress: EgressPolicy | None = None, owner: str = "") -> Session: ...

    @property
    def packages(self) -> PackageInstaller: ...


@dataclass
class KernelState:
    """What a running execution of a session holds; replaced wholesale if a worker is abandoned
    (the stuck thread keeps the old one, lock included)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    kernels: dict[str, KernelSlot] = field(default_factory=dict)
    lost: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        from wasm_runner.providers.wasm.kernel_slots import KernelSlot

        for language in self.lost:
            self.kernels[language] = KernelSlot(lost=True)


class Session:
    """A directory that persists across calls, plus live kernels (one per language) when used.

    Its kernels live on a worker process of the Runner's (by default), or in this process
    (`Runner(isolation="in-process")`): the calls are the same either way."""

    def __init__(self, runner: SessionHost, session_id: str, workspace: Workspace, mounts: tuple[Mount, ...] = (),
                 owner: str = "") -> None:
        self.runner = runner
        self.id = session_id
        self.workspace = workspace
        self.owner = owner
        """The workspace (tenant) it belongs to: its kernel snapshots restore for that owner only."""
        self.images = KernelImages(workspace.root / KERNEL_DIR, owner)
        """Its kernels' saved states (written at hibernation, restored by the next call)."""
        self.packages = SessionPackages(workspace.root)
        """The session's installed packages: the guest sees them read-only at /packages, on sys.path."""
        packages_mount = self.packages.mount()
        self.mounts = mounts if any(m.guest == packages_mount.guest for m in mounts) else mounts + (packages_mount,)
        self._packages_ready = False
        self._removed = False
        """Destroyed: its files are gone, and nothing of it is made again."""
        self.install_options: dict[str, Any] = {}
        """`install`'s keywords for the guest's own requests (`sandbox.install`); see `set_guest_installs`."""
        self.install_handler: Callable[[str], str] = self._guest_install
        """Answers the guest's `sandbox.install` (JSON in, JSON out). On a worker process each run's
        handler asks the parent, whose session's handler answers."""
        self.on_guest_install: Callable[[PackageRequest, InstallResult], None] | None = None
        """Told of each install the guest asked for and its result; see `set_guest_installs`."""
        self.last_used = time.monotonic()
        self.state = KernelState()
        self._queue: asyncio.Lock | None = None
        self._job: Job | None = None
        """The in-process execution running now."""
        self.egress: EgressPolicy | None = None
        """Where this session's runs may connect (None: as each request says); see `set_egress`."""
        self.egress_limit: EgressPolicy | None = None
        """The widest policy `set_egress` accepts (None: any); an embedder that holds sessions to a
        profile's policy sets it."""
        self.process_limits = ProcessLimits()
        """Caps on its background processes (set before the first start)."""
        self.disk_room: int | None = None
        """The most each of its next runs may add to disk besides its limits: room the host reserved
        under a quota shared beyond the session (a workspace's). None: only the run's limits."""
        self._processes: ProcessManager | None = None
        self._processes_lock = threading.Lock()
        self.tools: ToolRegistry | None = None
        """Tools bound to the session (code mode): every run may call them, with the run's own."""
        self.tool_allowlist: frozenset[str] | None = None
        """The only tool names the session's runs may be given (None: any); a run's `allow_tools`
        narrows it further. The service sets it from the profile's and the session's choice."""
        self.tool_policy: ToolPolicy | None = None
        """Budget, timeout and size caps of each run's tool calls (None: `ToolPolicy()`)."""
        self.on_tool_call: Callable[[ToolCall], None] | None = None
        """Told of each tool call a guest made, once decided (the service records its audit row)."""
        self.tool_handler: Callable[[str], str] | None = None
        """Answers the guest's tool calls of a run given none here; a worker process sets it to ask
        the parent, which holds the run's tools."""

    def set_tools(self, allowlist: frozenset[str] | None, on_call: Callable[[ToolCall], None] | None) -> None:
        """The only tool names its runs may be given (None: any) and who is told of each decided call
        (the service: its audit row), from the next run on."""
        self.tool_allowlist, self.on_tool_call = allowlist, on_call

    def set_egress(self, policy: EgressPolicy) -> None:
        """Change where the session's runs may connect, from its next call on (and the next connections
        of its live background processes that have a way out). Within `egress_limit`
        (PolicyError naming what is wider otherwise); a request then names a policy only to narrow it."""
        from wasm_runner.egress.policy import EgressRules

        if self.egress_limit is not None:
            EgressRules(self.egress_limit).narrowed(policy)
        else:
            EgressRules(policy)  # its entries parse
        self.egress = policy
        manager = self._processes
        if manager is not None:  # live background processes: their next connections
            manager.set_egress(policy)

    def _with_egress(self, request: ExecRequest) -> ExecRequest:
        """The request under the session's policy: one that names none (None) gets the session's (deny
        where the session has none); one that names a policy, deny included, keeps it if it stays
        within the session's (PolicyError naming what is wider otherwise)."""
        import msgspec

        if request.egress is None:
            return msgspec.structs.replace(request, egress=self.egress) if self.egress is not None else request
        if self.egress is None:
            return request
        from wasm_runner.egress.policy import EgressRules

        return msgspec.structs.replace(request, egress=EgressRules(self.egress).narrowed(request.egress, "the session's"))

    @property
    def path(self) -> Path:
        """The host directory the guest sees as /workspace (created on first use)."""
        return self.workspace.files

    @property
    def kernels(self) -> list[str]:
        """Languages with a live kernel."""
        here = {lang for lang, slot in self.state.kernels.items() if slot.kernel is not None}
        workers = self.runner.kernel_workers
        if workers is not None:
            here.update(workers.kernels_of(self.id))
        return sorted(here)

    async def run(self, code: str | ExecRequest, *, listener: OutputListener | None = None,
                  tools: ToolsArg | None = None, allow_tools: Iterable[str] | None = None,
                  tool_policy: ToolPolicy | None = None, on_approval: Approver | None = None,
                  **fields: Any) -> ExecResult:
        """Run in this session's kernel (or a fresh instance with fresh=True); calls run in order.

        `tools` (callables with type hints, `Tool`s, or a `ToolRegistry`) are what the guest may
        call as `sandbox.tools.<name>(...)` (Python) or `await tools.<name>({...})` (JavaScript),
        besides the session's own; `allow_tools` narrows them to these names. Every call is decided
        by the host under `tool_policy` and listed in the result's `tool_calls`. Coroutine tools
        run on this event loop. `on_approval` decides each call of a tool that needs approval
        (`tool(fn, approval=True)`): True runs it; without it such calls are refused."""
        request = self._with_egress(self.runner.request(code, **fields))
        tool_run = self._tool_run(request, tools, allow_tools, tool_policy, asyncio.get_running_loop(), on_approval)
        request = _declared(request, tool_run)
        self._ensure_packages()
        if self._queue is None:
            self._queue = asyncio.Lock()
        try:
            async with self._queue:
                self.last_used = time.monotonic()
                try:
                    workers = self.runner.kernel_workers
                    handler = tool_run.handle if tool_run is not None else None
                    if workers is not None and workers.available:
                        return _with_calls(await workers.run(self, request, listener, handler), tool_run)
                    refused = self._refused(request)
                    if refused is not None:
                        return refused
                    job = self._new_job(request, listener, handler)
                    _bound(tool_run, job)
                    result = await self.runner.executor.run_async(job, self.runner.provider_for(request),
                                                                  self.state.lock, on_abandon=self.lose_kernels)
                    return _with_calls(result, tool_run)
                finally:
                    self.last_used = time.monotonic()
        finally:
            if tool_run is not None:  # calls in flight end with the run (a caller gone away included)
                tool_run.close()

    def run_sync(self, code: str | ExecRequest, *, listener: OutputListener | None = None,
                 on_job: Callable[[Job], None] | None = None, tools: ToolsArg | None = None,
                 allow_tools: Iterable[str] | None = None, tool_policy: ToolPolicy | None = None,
                 on_approval: Approver | None = None, **fields: Any) -> ExecResult:
        """Run as `run` does, blocking this thread; `on_job` is told of the job before its guest
        starts (to cancel this very call from another thread)."""
        request = self._with_egress(self.runner.request(code, **fields))
        tool_run = self._tool_run(request, tools, allow_tools, tool_policy, None, on_approval)
        request = _declared(request, tool_run)
        handler = tool_run.handle if tool_run is not None else None
        self._ensure_packages()
        self.last_used = time.monotonic()
        try:
            workers = self.runner.kernel_workers
            if workers is not None and workers.available:
                return _with_calls(workers.run_blocking(self, request, listener, handler), tool_run)
            refused = self._refused(request)
            if refused is not None:
                return refused
            job = self._new_job(request, listener, handler)
            _bound(tool_run, job)
            if on_job is not None:
                on_job(job)
            result = self.runner.executor.run_blocking(job, self.runner.provider_for(request), self.state.lock,
                                                       on_abandon=self.lose_kernels)
            return _with_calls(result, tool_run)
        finally:
            self.last_used = time.monotonic()
            if tool_run is not None:
                tool_run.close()

    def _tool_run(self, request: ExecRequest, tools: ToolsArg | None, allow_tools: Iterable[str] | None,
                  policy: ToolPolicy | None, loop: asyncio.AbstractEventLoop | None,
                  on_approval: Approver | None = None) -> ToolRun | None:
        """The run's tools: the session's and the call's, narrowed by the session's allowlist and the
        call's (PermissionError when `allow_tools` names one the run could not have)."""
        if tools is None and self.tools is None:
            if allow_tools is not None and list(allow_tools):
                raise PermissionError("allow_tools names tools, but the run has none")
            return None
        from wasm_runner.tools.calls import ToolPolicy, ToolRun
        from wasm_runner.tools.registry import ToolRegistry, as_registry

        policy = policy or self.tool_policy or ToolPolicy()
        registry = ToolRegistry(list(self.tools or ()) + list(as_registry(tools) if tools is not None else ()))
        registry = (registry.narrowed(self.tool_allowlist).narrowed(policy.allow)
                    .narrowed(allow_tools, who="the call's allow_tools"))
        return ToolRun(registry, policy, loop=loop, on_call=policy.audit or self.on_tool_call, approver=on_approval)

    def _refused(self, request: ExecRequest) -> ExecResult | None:
        """The answer when no kernel worker can take the call and none may run in this process."""
        if self.runner.isolation == "in-process":
            return None
        workers = self.runner.kernel_workers
        if workers is not None and workers.closed:
            raise RunnerClosedError("the Runner was closed")
        self.runner.provider_for(request)  # refused as elsewhere
        return no_worker_result(request)

    def _ensure_packages(self) -> None:
        if not self._packages_ready:  # a preopen needs the directory
            self.packages.ensure()
            self._packages_ready = True

    def install(self, python: tuple[str, ...] | list[str] = (), *, npm: tuple[str, ...] | list[str] = (),
                lock: PackageLock | None = None, index: str | None = None, network: EgressPolicy | None = None,
                allow_custom_index: bool = False, workspace: str = "default",
                max_bytes: int | None = None) -> InstallResult:
        """Install packages into this session (kept across calls, hibernation and restarts).

        `python` takes requirement strings (`"requests==2.32.3"`); `lock` replays another session's
        `lock()`. Downloads follow `network` (default: the Runner's configured indexes); `workspace`
        names the download cache; `max_bytes` is the most the install may add to disk (the room a
        quota leaves; a distribution past it is refused). Blocking: from async code use
        `await asyncio.to_thread(session.install, ...)`. A failure is a result."""
        request = PackageRequest(python=tuple(python), npm=tuple(npm), lock=lock, index=index)
        self._ensure_packages()
        return self.runner.packages.install(self.packages, request, policy=network,
                                            allow_custom_index=allow_custom_index, workspace=workspace,
                                            max_bytes=max_bytes)

    def set_guest_installs(self, *, network: EgressPolicy | None = None, allow_custom_index: bool = False,
                           workspace: str = "default",
                           observer: Callable[[PackageRequest, InstallResult], None] | None = None) -> None:
        """What the guest's own `sandbox.install` follows from the next call on: `install`'s
        `network`, `allow_custom_index` and `workspace`; `observer` is told of each such install and
        its result (on the thread running the call)."""
        self.install_options = {"network": network, "allow_custom_index": allow_custom_index, "workspace": workspace}
        self.on_guest_install = observer

    def _guest_install(self, request_json: str) -> str:
        """Answer the guest's `sandbox.install(...)` (on the worker thread running its call)."""
        import msgspec

        try:
            request = msgspec.json.decode(request_json, type=PackageRequest)
        except msgspec.DecodeError as exc:  # a validation error included
            return msgspec.json.encode({"ok": False, "error": {"kind": "not_found", "message": str(exc)}}).decode()
        asked = PackageRequest(python=request.python, index=request.index)  # the guest names packages, no more
        result = self.install(asked.python, index=asked.index, **self.install_options)
        if self.on_guest_install is not None:
            self.on_guest_install(asked, result)
        return msgspec.json.encode(result).decode()

    def lock(self) -> PackageLock:
        """The session's installed packages, to replay elsewhere (`install(lock=...)`)."""
        return self.packages.lock()

    def _new_job(self, request: ExecRequest, listener: OutputListener | None,
                 tools: Callable[[str], str] | None = None) -> Job:
        job = Job(request, self.workspace, self.state.kernels, listener, self.mounts, install=self.install_handler,
                  disk_room=self.disk_room, images=self.images, tools=tools or self.tool_handler)
        self._job = job
        return job

    def cancel(self) -> None:
        """Stop the in-process execution running now, if any (its result says it was cancelled)."""
        job = self._job
        if job is not None:
            job.cancel()

    def lose_kernels(self) -> None:
        """A worker was given up with this session's kernels: the next call starts new ones and
        says the old state is gone."""
        self.state = KernelState(lost=set(self.state.kernels) | self.state.lost)
        for slot in self.state.kernels.values():
            slot.reason = "the thread running this session's previous call was given up (its guest was stuck in a host call)"

    # -- background processes --------------------------------------------------------------

    @property
    def processes(self) -> ProcessManager:
        """The session's background processes (native sandboxes that outlive a call)."""
        with self._processes_lock:
            if self._processes is None:
                self._ensure_packages()  # the sandbox mounts the packages directory
                self._processes = self._new_process_manager()
            return self._processes

    def _new_process_manager(self) -> ProcessManager:
        def native() -> Any:
            return self.runner.provider_for(ExecRequest(command=["true"], provider="native"))

        return ProcessManager(native, self.workspace, self.mounts, self.process_limits)

    def start_process(self, command: list[str] | tuple[str, ...] | None = None, *, code: str = "",
                      language: str = "bash", env: dict[str, str] | None = None, cwd: str = "",
                      limits: Any = None, stdin: bool = True, pty: tuple[int, int] | None = None,
                      name: str = "", ring_bytes: int | None = None, **fields: Any) -> BackgroundProcess:
        """Start a process that keeps running after this call (natively, confined like a native run).

        `command` is an argv, else `code` runs in `language`; `cwd` is under /workspace; `pty`
        (cols, rows) runs it on a terminal. Returns at once: the handle's `output()`, `wait()`,
        `kill()`. It ends with the session (hibernate, destroy, the runner's close) at the latest."""
        request = self._with_egress(self.runner.request(
            code, language=language, command=list(command) if command is not None else None, env=dict(env or {}),
            limits=limits, provider="native", **fields))
        if not self._removed:  # else the manager refuses it, and nothing is made again on disk
            self._ensure_packages()
        self.last_used = time.monotonic()
        return self.processes.start(request, cwd=cwd, name=name, stdin=stdin, pty=pty, ring_bytes=ring_bytes)

    @property
    def has_processes(self) -> bool:
        """Whether its process manager exists (a process was started, or the session ended)."""
        return self._processes is not None

    @property
    def live_process_count(self) -> int:
        manager = self._processes
        return len(manager.live()) if manager is not None else 0

    def stop_processes(self, reason: str = "stopped: the session ended", grace_s: float | None = None,
                       final: bool = False) -> None:
        """End every live background process of the session (TERM, then KILL after `grace_s`); starts
        are refused meanwhile, and from then on when `final` (the session is going away)."""
        with self._processes_lock:
            manager = self._processes
            if manager is None and final:  # none started yet: none may start from now on either
                manager = self._processes = self._new_process_manager()
        if manager is not None:
            manager.close(reason, grace_s, final=final)

    def hibernate(self, wait_s: float | None = None) -> threading.Event | None:
        """Save the kernels' state with the session's files (see `snapshots`), drop them and end
        the background processes; the next call restores the kernels (or, where a kernel could
        not be saved, starts a new one and says why). Kernels on a worker process are saved
        there: the event returned is set once they are (waited for up to `wait_s`)."""
        self.stop_processes("stopped: the session hibernated")
        workers = self.runner.kernel_workers
        saved = workers.hibernate(self) if workers is not None else None
        self._close_kernels(save=True)
        if saved is not None and wait_s is not None:
            saved.wait(wait_s)
        return saved

    def checkpoint_kernels(self) -> None:
        """Checkpoint the live WebAssembly kernels now, between calls, so that the next call need not
        before it runs (what a failed call is rolled back to). A worker process calls it once a
        call's answer is out."""
        state = self.state
        with state.lock:
            for slot in state.kernels.values():
                if slot.saves_state:
                    slot.ahead()

    def drop_kernels(self) -> None:
        """End the background processes and drop the kernels without saving them (the session is going)."""
        self.stop_processes("stopped: the session was deleted", final=True)
        self._close_kernels()

    def _close_kernels(self, save: bool = False) -> None:
        state = self.state
        with state.lock:
            for language, slot in state.kernels.items():
                if slot.kernel is None:
                    continue
                why: str | None
                if not slot.saves_state:
                    why = NATIVE_NOT_SAVED
                elif save:
                    why = self._save_kernel(language, slot.kernel)
                else:
                    why = "the session's kernels were dropped"
                if why is None:
                    slot.kernel.close()
                    slot.kernel, slot.checkpoint = None, None  # not lost: the next call restores it
                else:
                    slot.drop(f"the session hibernated, and its kernel could not be saved: {why}" if save else why)

    def _save_kernel(self, language: str, kernel: Any, compress: bool = True) -> str | None:
        """Save one live kernel's state; why it could not be, or None."""
        try:
            self.images.save(kernel.checkpoint(probe=True), compress)  # written at once: no copy needed
            return None
        except SnapshotRefused as exc:
            why = str(exc)
        except Exception as exc:  # noqa: BLE001 - said to the caller
            log.warning("could not save a kernel", exc_info=True)
            why = f"saving it failed: {exc}"
        self.images.discard(language)
        return why

    def save_kernels(self, timeout_s: float = 30.0, compress: bool = True) -> dict[str, str]:
        """Save the live WebAssembly kernels' state with the session's files; they keep running.
        What a fork copies, and what a restart resumes from (`compress`: smaller on disk, slower
        to write and read). Returns the languages whose kernel could not be saved, and why (e.g. a
        file held open)."""
        refused: dict[str, str] = {}
        workers = self.runner.kernel_workers
        if workers is not None:
            refused.update(workers.save(self, timeout_s, compress) or {})
        state = self.state
        with state.lock:
            for language, slot in state.kernels.items():
                if slot.kernel is None:
                    continue
                why = self._save_kernel(language, slot.kernel, compress) if slot.saves_state else NATIVE_NOT_SAVED
                if why is not None:
                    refused[language] = why
        return refused

    def fork(self, count: int = 1, *, skip: frozenset[str] = frozenset()) -> ForkResult:
        """`count` new sessions, each with a copy of this one's files, packages, egress policy and
        kernel state (see `snapshots.fork`); nothing writable is shared. Each child is made whole
        or not at all. `skip` names top-level entries of the session's directory not to copy."""
        from wasm_runner.snapshots.fork import LINKED, MAX_FORK, ForkFailure, ForkResult
        from wasm_runner.workspace.clone import clone_tree

        if not 1 <= count <= MAX_FORK:
            raise InvalidRequestError(f"a fork makes 1 to {MAX_FORK} sessions; ask for fewer, or fork a child again")
        if self.workspace.files_dir is not None:
            raise InvalidRequestError("a session whose /workspace is an existing host directory cannot be forked "
                                      "(its children would share that directory)")
        live = set(self.kernels)
        result = ForkResult(fresh_kernels=self.save_kernels(compress=False))  # read back at once: not compressed
        self.workspace.ensure()
        self._ensure_packages()
        result.kernels = self.images.languages()
        for language in live - set(result.kernels) - set(result.fresh_kernels):
            result.fresh_kernels[language] = "its state was not saved"
        own_mounts = tuple(m for m in self.mounts if m.host != self.packages.directory)
        for index in range(count):
            child = self.runner.session(uuid.uuid4().hex, mounts=own_mounts, owner=self.owner)
            root = child.workspace.root
            try:
                root.parent.mkdir(parents=True, exist_ok=True)
                stats = clone_tree(self.workspace.root, root, LINKED, skip)
            except Exception as exc:  # noqa: BLE001 - this child is not made; the others may be
                log.warning("a fork's child could not be made", exc_info=True)
                child.destroy()
                result.failed.append(ForkFailure(index, f"copying the session failed: {exc}"))
                continue
            result.bytes_copied = max(result.bytes_copied, stats.bytes)
            child.egress_limit, child.process_limits = self.egress_limit, self.process_limits
            if self.egress is not None:
                child.set_egress(self.egress)
            result.children.append(child)
        return result

    def destroy(self) -> None:
        """End the background processes, drop the kernels and remove the session's files."""
        self.stop_processes("stopped: the session was deleted", final=True)
        workers = self.runner.kernel_workers
        if workers is not None:
            workers.forget(self)
        self._close_kernels()
        self._removed = True
        self.workspace.remove()
        self.runner.forget(self.id)


def _declared(request: ExecRequest, tool_run: ToolRun | None) -> ExecRequest:
    """A TypeScript request to type-check is checked against its run's tools (the `tools` global)."""
    if tool_run is None or not request.typecheck:
        return request
    import msgspec

    return msgspec.structs.replace(request, tool_specs=tuple(tool_run.tools.specs()))


def _bound(tool_run: ToolRun | None, job: Job) -> None:
    """Calls of a run in this process wait no longer than its guest's deadline (from its start, known once
    it started). On a worker process, the worker bounds its guest's wait itself."""
    if tool_run is not None:
        timeout = job.request.limits.timeout_s
        tool_run.deadline = lambda: job.started_at + timeout if job.started_at is not None else None


def _with_calls(result: ExecResult, tool_run: ToolRun | None) -> ExecResult:
    """The result with the run's tool calls (the record is the host's, whatever the guest says)."""
    if tool_run is not None:
        result.tool_calls = tool_run.close()
    return result
