"""Runner and Session: the embeddable entry points.

A Runner owns the worker threads, the providers and a data directory; a
Session owns a directory under it and, once used, live kernels. Guests run on
worker threads (wasmtime releases the GIL), so `await session.run(...)` never
blocks the event loop and the sync `run_sync` is the same path.
"""

from __future__ import annotations

import collections
import concurrent.futures
import logging
import os
import tempfile
import threading
import time
import uuid
from collections.abc import AsyncIterable, AsyncIterator, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wasm_runner.capture import OutputListener
from wasm_runner.providers.base import Job, Provider
from wasm_runner.providers.wasm.provider import KernelSlot, WasmProvider
from wasm_runner.providers.wasm.sandbox import Mount
from wasm_runner.workspace.layout import Workspace, discard_tree
from wasm_runner_protocol.execution import ExecRequest, ExecResult, GuestError, Limits

if TYPE_CHECKING:  # imported only where used: a one-shot run from the CLI needs neither asyncio nor batches
    import asyncio

    from wasm_runner.execution.workers import OneShotWorkers, WorkerPool

log = logging.getLogger("wasm_runner")

WATCHDOG_GRACE_S = 2.0
"""How long past its deadline a guest may take to return before its worker is abandoned."""
WATCHDOG_POLL_S = 0.25


def _overdue(job: Job) -> bool:
    return job.started_at is not None and time.monotonic() - job.started_at > job.request.limits.timeout_s + WATCHDOG_GRACE_S


def default_providers(mounts: tuple[Mount, ...] = ()) -> list[Provider]:
    """WebAssembly always; the native provider where its module is present (it refuses clearly
    at run time where bubblewrap is missing)."""
    providers: list[Provider] = [WasmProvider(mounts)]
    try:
        from wasm_runner.providers.native import NativeProvider
    except ImportError:
        return providers
    providers.append(NativeProvider())
    return providers


READY_SCRATCH = 2
"""Idle scratch workspaces kept for one-shot runs, each with sandboxes made ahead (by default)."""


class Runner:
    """Runs executions one-shot (`run`) or in sessions (`session(...).run`)."""

    def __init__(
        self,
        data_dir: str | os.PathLike | None = None,
        *,
        concurrency: int | None = None,
        limits: Limits = Limits(),
        mounts: tuple[Mount, ...] = (),
        providers: list[Provider] | None = None,
        one_shot_workers: int = 0,
        ready_scratch: int = READY_SCRATCH,
    ) -> None:
        """`one_shot_workers` > 0 runs one-shot runs (`run`, without a listener) in that many
        worker processes: a service whose event loop shares the interpreter with its guests'
        host-side work otherwise waits for them under load. `ready_scratch` is how many idle
        scratch workspaces are kept with sandboxes made ahead for the next one-shot runs; 0
        keeps none, for a Runner that runs once and closes (the CLI's), which would only
        throw them away."""
        self._owns_dir = data_dir is None
        self.data_dir = Path(data_dir or tempfile.mkdtemp(prefix="wasm-runner-")).resolve()
        # Every tenant's files are under it: the service's alone (sandboxes reach their own
        # directories through their mounts, never by walking this tree).
        self.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.data_dir, 0o700)
        self.sessions_dir = self.data_dir / "sessions"
        self.sessions_dir.mkdir(parents=True, exist_ok=True)
        self.scratch_dir = _own_scratch_dir(self.data_dir / "scratch")
        self.limits = limits
        self.concurrency = concurrency or os.cpu_count() or 2
        self.mounts = mounts
        self.providers: list[Provider] = providers if providers is not None else default_providers(mounts)
        self.ready_scratch = ready_scratch
        self._providers_rebuildable = providers is None
        """Providers of the caller's own cannot be rebuilt in a worker process."""
        self._worker_pool: WorkerPool | None = None
        """Processes for batch lanes and one-shot runs, made on first need (`_pool`)."""
        self._one_shot_workers: OneShotWorkers | None = None
        pool = self._pool() if one_shot_workers > 0 else None
        if pool is not None:
            from wasm_runner.execution.workers import OneShotWorkers

            self._one_shot_workers = OneShotWorkers(pool, one_shot_workers)
        self.abandoned_workers = 0
        self._executor = self._new_executor()
        self._executor_lock = threading.Lock()
        self._undelivered = 0
        """Jobs submitted whose results are not out yet (queued or running)."""
        self._idle_scratch: collections.deque[Workspace] = collections.deque()
        """Untouched scratch workspaces, oldest first: the oldest had the longest time to get
        its sandboxes made ahead."""
        self._scratch_made: dict[Path, ScratchState] = {}
        """What each live scratch workspace looked like when made: one is reused only as it was."""
        self._sessions: dict[str, Session] = {}
        self._sessions_lock = threading.Lock()

    # -- set-up ------------------------------------------------------------------

    def _pool(self) -> WorkerPool | None:
        """The worker processes (their module imported now), where providers can be rebuilt in one."""
        if self._worker_pool is None and self._providers_rebuildable:
            from wasm_runner.execution.workers import WorkerPool

            self._worker_pool = WorkerPool(self)
        return self._worker_pool

    def _new_executor(self) -> concurrent.futures.ThreadPoolExecutor:
        return concurrent.futures.ThreadPoolExecutor(self.concurrency, thread_name_prefix="wasm-guest")

    def prepare(self) -> None:
        """Build and compile every runtime now instead of on first use."""
        for provider in self.providers:
            provider.prepare()

    def provider_for(self, request: ExecRequest) -> Provider:
        """The provider named by the request, else the one for its language (commands run natively)."""
        native = request.command is not None or request.language in ("bash", "sh")
        wanted = request.provider or ("native" if native else "wasm")
        for provider in self.providers:
            if provider.name == wanted and (request.command is not None or request.language in provider.languages):
                return provider
        known = ", ".join(f"{p.name}: {'/'.join(sorted(p.languages))}" for p in self.providers)
        raise ValueError(f"no {wanted} provider runs {request.language!r} here (available: {known})")

    def request(self, code: str | ExecRequest, **fields: Any) -> ExecRequest:
        """Normalise `code` plus keyword fields into an ExecRequest with this runner's default limits."""
        if isinstance(code, ExecRequest):
            return code
        limits = fields.get("limits")
        if limits is None:
            fields["limits"] = self.limits
        elif isinstance(limits, dict):  # as the HTTP API takes them: checked as a Limits is
            fields["limits"] = Limits(**limits)
        elif not isinstance(limits, Limits):
            raise TypeError(f"limits must be a Limits or a dict of its fields, not {type(limits).__name__}")
        return ExecRequest(code=code, **fields)

    # -- sessions ------------------------------------------------------------------

    def session(
        self,
        session_id: str | None = None,
        *,
        workspace_dir: str | os.PathLike | None = None,
        mounts: tuple[Mount, ...] = (),
    ) -> "Session":
        """The session with this id (its files persist on disk), or a new one.

        `workspace_dir` makes an existing host directory the session's /workspace;
        `mounts` adds directories for this session only (e.g. a writable /workspace/shared).
        """
        session_id = session_id or uuid.uuid4().hex
        if not session_id.replace("-", "").replace("_", "").isalnum() or len(session_id) > 64:
            raise ValueError("a session id is 1-64 letters, digits, '-' or '_'")
        with self._sessions_lock:
            session = self._sessions.get(session_id)
            if session is None:
                files_dir = Path(workspace_dir).resolve() if workspace_dir is not None else None
                session = Session(self, session_id, Workspace(self.sessions_dir / session_id, files_dir), mounts)
                self._sessions[session_id] = session
            return session

    def forget(self, session_id: str) -> None:
        with self._sessions_lock:
            self._sessions.pop(session_id, None)

    # -- one-shot runs --------------------------------------------------------------

    async def run(self, code: str | ExecRequest, *, listener: OutputListener | None = None, **fields: Any) -> ExecResult:
        """Run once in a throwaway workspace and return the result (never raises for guest behaviour)."""
        request = self.request(code, **fields)
        if self._one_shot_workers is not None and listener is None and self._runs_in_wasm(request):
            result = await self._one_shot_workers.run(request)
            if result is not None:
                return result
        job = Job(request, self._scratch_workspace(request), None, listener, scratch=True)
        try:
            return await self._run_async(job, _State())
        finally:
            self._recycle(job)

    def _runs_in_wasm(self, request: ExecRequest) -> bool:
        try:
            return self.provider_for(request).name == "wasm"
        except ValueError:  # reported by the in-process path
            return False

    def run_sync(self, code: str | ExecRequest, *, listener: OutputListener | None = None, **fields: Any) -> ExecResult:
        request = self.request(code, **fields)
        job = Job(request, self._scratch_workspace(request), None, listener, scratch=True)
        try:
            return self._run_blocking(job, _State())
        finally:
            self._recycle(job)

    def _scratch_workspace(self, request: ExecRequest) -> Workspace:
        """An idle scratch workspace, the first whose sandbox is ready: the next in line may be
        waiting for a new instance (one retired after its runs, or one a run left unusable),
        and a run there would wait for it."""
        try:
            ready = getattr(self.provider_for(request), "ready", None)
        except ValueError:  # reported when the job runs
            ready = None
        if ready is not None:
            for workspace in list(self._idle_scratch):
                if ready(workspace, request.language):
                    try:
                        self._idle_scratch.remove(workspace)
                        return workspace
                    except ValueError:  # another run took it meanwhile
                        continue
        try:
            return self._idle_scratch.popleft()
        except IndexError:
            return self._new_scratch()

    def _new_scratch(self) -> Workspace:
        workspace = Workspace(Path(tempfile.mkdtemp(dir=self.scratch_dir))).ensure()
        # Searchable like a session's directory (the data directory above it is private): a
        # native sandbox reaches the workspace and its /tmp through one bind of it.
        workspace.root.chmod(0o755)
        self._scratch_made[workspace.root] = scratch_state(workspace)
        return workspace

    def _recycle(self, job: Job) -> None:
        """Keep an untouched scratch workspace (with sandboxes made ahead for it) for the next
        one-shot run; remove a used one, and one whose guest may still be running."""
        workspace = job.workspace
        if job.cancelled or self._ran_natively(job):
            # A native run can change what the state check cannot see through (its own
            # ownership of the directory included): its scratch workspace is never reused.
            empty = False
        elif job.left_entries is not None:  # the provider's scan after the run
            empty = job.left_entries == 0
        else:
            empty = workspace.is_empty()
        if empty:
            self._keep_scratch(workspace)
        else:
            self._discard_scratch(workspace)

    def _ran_natively(self, job: Job) -> bool:
        try:
            return self.provider_for(job.request).name == "native"
        except ValueError:
            return False

    def _keep_scratch(self, workspace: Workspace) -> None:
        """An empty scratch workspace goes back to the idle ones (event loop's thread only),
        if it is exactly as it was made (else another tenant's run would see the traces)."""
        if not self.ready_scratch:  # none kept: nothing is made ahead
            self._discard_scratch(workspace)
            return
        made = self._scratch_made.get(workspace.root)
        if made is None or scratch_state(workspace) != made:
            self._discard_scratch(workspace)
            workspace = self._new_scratch()
        if len(self._idle_scratch) < 2 * self.concurrency:
            self._prewarm(workspace, True)
            self._idle_scratch.append(workspace)
        else:
            self._discard_scratch(workspace)
        # Two idle workspaces at least (by default): the next run takes one whose sandbox is ready while
        # the other's is being made (the one just returned would still be in the making).
        while len(self._idle_scratch) < self.ready_scratch:
            spare = self._new_scratch()
            self._prewarm(spare, True)
            self._idle_scratch.append(spare)

    def _discard_scratch(self, workspace: Workspace) -> None:
        self._scratch_made.pop(workspace.root, None)
        self._prewarm(workspace, False)
        workspace.remove()

    def _prewarm(self, workspace: Workspace, keep: bool) -> None:
        for provider in self.providers:
            if hasattr(provider, "prewarm"):
                provider.prewarm(workspace) if keep else provider.discard(workspace)

    def run_many(
        self,
        requests: Iterable[ExecRequest] | AsyncIterable[ExecRequest],
        *,
        concurrency: int | None = None,
    ) -> AsyncIterator[ExecResult]:
        """Run each request one-shot in its own fresh instance; yield results as they complete.

        Requests are read lazily and at most `concurrency` run at once (no more than the
        Runner's workers), so memory stays flat however long the stream. Each result carries
        its request's `id`; an item no provider runs gets a result with error type
        InvalidRequest. Closing the iterator (or cancelling its consumer) stops the guests
        still running.
        """
        from wasm_runner.execution.lanes import Batch

        self._pool()
        return Batch(self, requests, concurrency or self.concurrency).results_in_completion_order()

    # -- the worker path ------------------------------------------------------------------

    def _submit(self, job: Job, state: "_State") -> concurrent.futures.Future:
        """Queue the job on a worker; the future is done as soon as the result is. Then, while
        other jobs are queued or running, the same worker does the provider's follow-up work
        (`job.after`: resetting the instance) itself: handing it to another thread cost 8-13 %
        of check throughput. When nothing else waits, the provider's own thread does it:
        runs 20 ms apart were 0.4 ms slower when the worker did."""
        provider = self.provider_for(job.request)
        delivered: concurrent.futures.Future[ExecResult] = concurrent.futures.Future()

        def work() -> None:
            try:
                if not delivered.set_running_or_notify_cancel():
                    return  # cancelled while queued
                try:
                    with state.lock:  # one execution at a time per session
                        if job.kernels is not None:
                            job.kernels = state.kernels
                        result = provider.execute(job)
                except BaseException as exc:  # noqa: BLE001 - delivered to the caller
                    delivered.set_exception(exc)
                    return
            finally:
                with self._executor_lock:
                    self._undelivered -= 1
                    others = self._undelivered
            delivered.set_result(result)
            if job.after is not None and others:
                try:
                    job.after()
                except Exception:  # noqa: BLE001 - the result is out; the worker must go on
                    log.exception("follow-up work of an execution failed")

        def never_ran(queued: concurrent.futures.Future) -> None:
            if queued.cancelled():  # the executor shut down first
                with self._executor_lock:
                    self._undelivered -= 1
                delivered.cancel()

        with self._executor_lock:
            queued = self._executor.submit(work)
            self._undelivered += 1
        queued.add_done_callback(never_ran)
        return delivered

    def _run_blocking(self, job: Job, state: "_State", owner: "Session | None" = None) -> ExecResult:
        future = self._submit(job, state)
        while True:
            try:
                return future.result(timeout=WATCHDOG_POLL_S)
            except concurrent.futures.TimeoutError:
                if _overdue(job):
                    return self._abandon(job, future, owner)

    async def _run_async(self, job: Job, state: "_State", owner: "Session | None" = None) -> ExecResult:
        import asyncio  # loaded already: this runs in an event loop

        future = asyncio.wrap_future(self._submit(job, state))
        try:
            while True:
                done, _ = await asyncio.wait({future}, timeout=WATCHDOG_POLL_S)
                if done:
                    return future.result()
                if _overdue(job):
                    return self._abandon(job, future, owner)
        except asyncio.CancelledError:
            job.cancel()  # the caller went away: stop its guest
            raise

    def _abandon(self, job: Job, future: "concurrent.futures.Future | asyncio.Future", owner: "Session | None") -> ExecResult:
        """A guest blocked inside a host call past its deadline: answer now, leave its thread behind.

        The guest runtimes bound their blocking calls by the deadline, so this is
        the last line of defence; the stuck worker is replaced so capacity stays.
        """
        job.cancel()
        if future.done():
            return future.result()
        result = self._abandoned(job)
        if owner is not None:
            owner._state = _State(lost=set(owner._state.kernels) | owner._state.lost)
        return result

    def _abandoned(self, job: Job) -> ExecResult:
        """Replace the worker stuck with this (cancelled) job, and answer for it."""
        with self._executor_lock:
            self.abandoned_workers += 1
            old, self._executor = self._executor, self._new_executor()
        old.shutdown(wait=False)
        log.warning("abandoned a worker blocked in a host call (total %d)", self.abandoned_workers)
        return ExecResult(
            exit_code=137, limit="timeout", language=job.request.language, id=job.request.id,
            error=GuestError(type="LimitExceeded", message="stopped at the wall-clock deadline "
                             "(the guest was blocked in a host call)"),
        )

    # -- lifecycle ------------------------------------------------------------------

    def close(self) -> None:
        with self._sessions_lock:
            sessions = list(self._sessions.values())
        for session in sessions:
            session.hibernate()
        if self._worker_pool is not None:
            self._worker_pool.close()
        for provider in self.providers:
            if hasattr(provider, "close"):
                provider.close()
        self._executor.shutdown(wait=False, cancel_futures=True)
        discard_tree(self.scratch_dir)
        if self._owns_dir:
            discard_tree(self.data_dir)

    def __enter__(self) -> "Runner":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> "Runner":
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()


ScratchState = tuple
"""Per directory of a scratch workspace: mode, owner, group, inode, times and xattr names."""


def scratch_state(workspace: Workspace) -> ScratchState:
    """Everything a run could leave on a scratch workspace's directories without adding an
    entry: mode, owner, times (the change time moves with any chmod, chown or xattr, even one
    undone) and extended attributes."""
    state = []
    for path in (workspace.root, workspace.files, workspace.tmp):
        try:
            st = os.stat(path, follow_symlinks=False)
        except OSError:
            return ("missing", str(path))
        try:
            xattrs = tuple(sorted(os.listxattr(path, follow_symlinks=False)))
        except OSError:
            xattrs = ("unreadable",)
        state.append((st.st_mode, st.st_uid, st.st_gid, st.st_ino, st.st_mtime_ns, st.st_ctime_ns, xattrs))
    return tuple(state)


def _own_scratch_dir(parent: Path) -> Path:
    """A scratch directory for this Runner alone (Runners of one process may share a data
    directory), after removing those of processes that are gone (one-shot leftovers)."""
    parent.mkdir(parents=True, exist_ok=True)
    for entry in parent.iterdir():
        pid = entry.name.split("-", 1)[0]
        if not pid.isdigit() or not _alive(int(pid)):
            discard_tree(entry)
    return Path(tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=parent))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's: alive
        return True
    return True


@dataclass
class _State:
    """What a running execution of a session holds; replaced wholesale if a worker is abandoned."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    kernels: dict[str, KernelSlot] = field(default_factory=dict)
    lost: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        for language in self.lost:
            self.kernels[language] = KernelSlot(lost=True)


class Session:
    """A directory that persists across calls, plus live kernels (one per language) when used."""

    def __init__(self, runner: Runner, session_id: str, workspace: Workspace, mounts: tuple[Mount, ...] = ()) -> None:
        self.runner = runner
        self.id = session_id
        self.workspace = workspace
        self.mounts = mounts
        self.last_used = time.monotonic()
        self._state = _State()
        self._queue: asyncio.Lock | None = None

    @property
    def path(self) -> Path:
        """The host directory the guest sees as /workspace (created on first use)."""
        return self.workspace.files

    @property
    def kernels(self) -> list[str]:
        """Languages with a live kernel."""
        return sorted(lang for lang, slot in self._state.kernels.items() if slot.kernel is not None)

    async def run(self, code: str | ExecRequest, *, listener: OutputListener | None = None, **fields: Any) -> ExecResult:
        """Run in this session's kernel (or a fresh instance with fresh=True); calls run in order."""
        import asyncio  # loaded already: this runs in an event loop

        request = self.runner.request(code, **fields)
        if self._queue is None:
            self._queue = asyncio.Lock()
        async with self._queue:
            self.last_used = time.monotonic()
            job = Job(request, self.workspace, self._state.kernels, listener, self.mounts)
            try:
                return await self.runner._run_async(job, self._state, self)
            finally:
                self.last_used = time.monotonic()

    def run_sync(self, code: str | ExecRequest, *, listener: OutputListener | None = None, **fields: Any) -> ExecResult:
        request = self.runner.request(code, **fields)
        self.last_used = time.monotonic()
        job = Job(request, self.workspace, self._state.kernels, listener, self.mounts)
        try:
            return self.runner._run_blocking(job, self._state, self)
        finally:
            self.last_used = time.monotonic()

    def hibernate(self) -> None:
        """Drop the kernels (memory released, files kept); the next call rebuilds them and says so."""
        state = self._state
        with state.lock:
            for slot in state.kernels.values():
                if slot.kernel is not None:
                    slot.kernel.close()
                    slot.kernel, slot.lost = None, True

    def destroy(self) -> None:
        """Drop the kernels and remove the session's files."""
        self.hibernate()
        self.workspace.remove()
        self.runner.forget(self.id)
