"""Runner: the embeddable entry point.

A Runner owns the worker threads (`execution.executor`), the providers, the scratch
workspaces of one-shot runs (`execution.scratch`), worker processes (`execution.workers`)
and a data directory; a Session (`session`) owns a directory under it and, once used,
live kernels. `await runner.run(...)` never blocks the event loop, and the sync `run_sync`
is the same path.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
import uuid
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import msgspec

from wasm_runner.capture import OutputListener
from wasm_runner.errors import InvalidRequestError, InvalidSessionIdError, NoProviderError, RunnerClosedError
from wasm_runner.execution.containment import WorkerPolicy
from wasm_runner.execution.executor import Executor
from wasm_runner.execution.results import no_worker_result
from wasm_runner.execution.scratch import READY_SCRATCH, ScratchPool, own_scratch_dir
from wasm_runner.guest import Mount
from wasm_runner.packages.settings import PackageSettings
from wasm_runner.providers.base import Job, Provider
from wasm_runner.session import Session
from wasm_runner.workspace.layout import Workspace, discard_tree
from wasm_runner.workspace.process_dirs import process_dir
from wasm_runner_protocol.execution import ExecRequest, ExecResult, Limits
from wasm_runner_protocol.guest import GUEST_WORKSPACE, SESSION_ID_RULE, is_session_id

if TYPE_CHECKING:
    from wasm_runner.egress.settings import EgressSettings
    from wasm_runner.snapshots.templates import Templates
    from wasm_runner_protocol.egress import EgressPolicy

if TYPE_CHECKING:  # imported where used: a one-shot run (the CLI's) needs neither batches nor workers
    from wasm_runner.cluster import RayCluster
    from wasm_runner.cluster.actors import NodeActors
    from wasm_runner.evaluation.cache import ResultCache
    from wasm_runner.execution.kernel_workers import KernelWorkers
    from wasm_runner.execution.lanes import Batch, Lanes
    from wasm_runner.execution.workers import OneShotWorkers, WorkerPool
    from wasm_runner.packages.installer import PackageInstaller
    from wasm_runner.profiles import McpServerConfig
    from wasm_runner.tools.calls import Approver, ToolPolicy
    from wasm_runner.tools.registry import ToolsArg

__all__ = ["Isolation", "Runner", "default_providers", "provider_name"]

Isolation = Literal["process", "in-process"]
"""Where a Runner's guests run: on worker processes it supervises, or on threads of this process."""

MAX_DEFAULT_KERNEL_WORKERS = 4
CLOSE_SAVE_S = 10.0
"""How long `close` waits for the worker processes to save their sessions' kernels."""
"""Kernel worker processes a Runner starts by default (plus a spare), at most: each is a
Python process; more spread sessions thinner (a stuck guest restarts fewer neighbours)."""


def default_providers(mounts: tuple[Mount, ...] = (), egress: EgressSettings | None = None, *,
                      native: bool = True) -> list[Provider]:
    """WebAssembly always; the native provider where its module is present (it refuses clearly
    at run time where bubblewrap is missing) unless `native` is False (a process that runs
    only WebAssembly spares its import, about 40 ms). `egress` is the operator's egress
    settings, shared by both (default: `EgressSettings()`)."""
    from wasm_runner.providers.wasm.provider import WasmProvider  # loaded when a Runner is made, not imported

    providers: list[Provider] = [WasmProvider(mounts, egress=egress)]
    if not native:
        return providers
    try:
        from wasm_runner.providers.native import NativeProvider
    except ImportError:
        return providers
    native_provider = NativeProvider(egress=egress)
    providers.append(native_provider)
    for provider in providers:
        provider.typechecker = native_provider.typecheck
    return providers


def provider_name(request: ExecRequest) -> str:
    """The provider a request runs on: the one it names, else native for commands and shell
    scripts, else WebAssembly."""
    if request.provider:
        return request.provider
    return "native" if request.command is not None or request.language in ("bash", "sh") else "wasm"


class Runner:
    """Runs executions one-shot (`run`) or in sessions (`session(...).run`)."""

    def __init__(
        self,
        data_dir: str | os.PathLike[str] | None = None,
        *,
        isolation: Isolation = "process",
        concurrency: int | None = None,
        limits: Limits = Limits(),
        mounts: tuple[Mount, ...] = (),
        providers: list[Provider] | None = None,
        one_shot_workers: int | None = None,
        ready_scratch: int = READY_SCRATCH,
        packages: PackageSettings | None = None,
        kernel_workers: int | None = None,
        worker_policy: WorkerPolicy | None = None,
        process_lanes: bool = False,
        egress: EgressSettings | None = None,
    ) -> None:
        """`isolation` says where guests run.

        - `"process"` (the default, for untrusted code): every guest runs on a worker process
          this Runner supervises: one-shot runs on `one_shot_workers` processes (default: one
          per `concurrency`), sessions' kernels (with their native runs, and one-shot runs that
          stream or run natively) on `kernel_workers` processes plus a spare (default:
          `concurrency`, at most 4), batches on lanes of their own. Workers start on first
          need (a Runner that runs nothing starts none) and end with `close()`, or with this
          process. A guest stuck in a host call, or one that crashes its process, costs its
          worker (killed, replaced), never a thread of this process: the program can always
          exit. A worker costs a start-up (about a second, on first need) and a pipe round trip
          per call (see docs/guides/embedding.md). Where no worker can start, runs get a
          `HostError` result saying so: nothing falls back to this process.
        - `"in-process"` (for trusted code only): guests run on this process's threads, except
          where `one_shot_workers`/`kernel_workers` > 0 are given (those run there once their
          workers are up, and here meanwhile). Cheaper, but a guest stuck in a host call is
          answered for and leaves its thread blocked for good, which keeps this process from
          exiting; a crash in the engine takes the process down. Providers of the caller's own
          (`providers`) cannot be rebuilt in a worker process: they need this mode.

        `ready_scratch` scratch workspaces are kept idle, with sandboxes made ahead, for the
        next one-shot runs. `packages` says where sessions' installs come from and what bounds
        them (`PackageSettings`). `worker_policy` contains and retires kernel workers
        (`execution.kernel_workers`).

        `egress` is the operator's egress settings (resolver overrides, extra CA, byte cap,
        connect timeout) for the default providers and the worker processes; providers of the
        caller's own carry their own.

        `process_lanes` runs batch lanes in worker processes even when there is one lane (by
        default an in-process Runner runs a single lane on a thread of this process)."""
        for provider in providers or ():
            if not isinstance(provider, Provider):
                raise TypeError(f"a provider subclasses wasm_runner.providers.base.Provider, not {type(provider).__name__}")
        if isolation not in ("process", "in-process"):
            raise InvalidRequestError(f"isolation is 'process' or 'in-process', not {isolation!r}")
        if isolation == "process":
            if providers is not None:
                raise InvalidRequestError("providers of your own cannot be rebuilt in a worker process, so their guests "
                                 "would run in this process: pass isolation='in-process' to accept that")
            for name, count in (("one_shot_workers", one_shot_workers), ("kernel_workers", kernel_workers)):
                if count is not None and count < 1:
                    raise ValueError(f"{name}={count}: isolation='process' runs every guest on worker processes; "
                                     "pass isolation='in-process' to run guests on this process's threads")
        self.isolation: Isolation = isolation
        """Where guests run (see the constructor); never changes."""
        self._owns_dir = data_dir is None
        # A temporary one is this process's: removed at close, or after a kill by the next process.
        self.data_dir = Path(data_dir or process_dir("data")).resolve()
        # Every tenant's files are under it: the service's alone (sandboxes reach their own
        # directories through their mounts, never by walking this tree).
        self.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.data_dir, 0o700)
        self.sessions_dir = self.data_dir / "sessions"
        self.sessions_dir.mkdir(parents=True, exist_ok=True)
        self.scratch_dir = own_scratch_dir(self.data_dir / "scratch")
        self.limits = limits
        self.concurrency = concurrency or os.cpu_count() or 2
        self.mounts = mounts
        self.egress_settings = egress
        self.package_settings = packages or PackageSettings()
        self.providers: list[Provider] = providers if providers is not None else default_providers(mounts, egress)
        for provider in self.providers:
            provider.use_packages(self.package_settings)
            provider.use_scratch(self.scratch_dir)
        self.executor = Executor(self.concurrency)
        self.scratch = ScratchPool(self.scratch_dir, self.providers, max_idle=2 * self.concurrency, ready=ready_scratch)
        self._rebuildable = providers is None
        """Providers of the caller's own cannot be rebuilt in a worker process."""
        self.process_lanes = process_lanes
        self._worker_pool: WorkerPool | None = None
        if isolation == "process":  # started on first need, not here
            one_shot_workers = one_shot_workers or self.concurrency
            kernel_workers = kernel_workers or min(self.concurrency, MAX_DEFAULT_KERNEL_WORKERS)
            self.process_lanes = True
        self.kernel_workers: KernelWorkers | None = None
        if kernel_workers and self._rebuildable:
            from wasm_runner.execution.kernel_workers import KernelWorkers

            self.kernel_workers = KernelWorkers(self.scratch_dir, self.mounts, kernel_workers,
                                                worker_policy or WorkerPolicy(), egress, self.package_settings)
        self.one_shot_workers: OneShotWorkers | None = None
        if one_shot_workers and self.worker_pool is not None:
            from wasm_runner.execution.workers import OneShotWorkers

            self.one_shot_workers = OneShotWorkers(self.worker_pool, one_shot_workers)
        self._sessions: dict[str, Session] = {}
        self._sessions_lock = threading.Lock()
        self._packages: PackageInstaller | None = None
        self._clusters: dict[tuple[str, int | None, str | None], NodeActors] = {}
        self._closed = False

    @property
    def packages(self) -> PackageInstaller:
        """The installer of this Runner's sessions (made on first use: it imports the resolver's parts)."""
        if self._packages is None:
            from wasm_runner.packages.installer import PackageInstaller
            from wasm_runner.packages.resolution import RunAs

            run_as: RunAs | None = None
            try:  # the resolver (uv) never runs as root: a root service drops it to the sandbox user
                from wasm_runner.providers.native.resolver_user import as_resolver_user

                run_as = as_resolver_user
            except ImportError:  # no native provider module here (as default_providers)
                pass
            self._packages = PackageInstaller(self.package_settings, self.data_dir, run_as=run_as)
        return self._packages

    @property
    def worker_pool(self) -> WorkerPool | None:
        """Processes for batch lanes and one-shot runs, made on first need (none where the
        providers are the caller's own)."""
        if self._worker_pool is None and self._rebuildable:
            from wasm_runner.execution.workers import WorkerPool

            containment = self.kernel_workers.containment if self.kernel_workers is not None else None
            self._worker_pool = WorkerPool(self.scratch_dir, self.mounts, containment, self.egress_settings,
                                           self.package_settings)
        return self._worker_pool

    @property
    def abandoned_workers(self) -> int:
        """Worker threads given up because their guest was stuck in a host call."""
        return self.executor.abandoned_workers

    def prepare(self) -> None:
        """Build and compile every runtime now instead of on first use."""
        for provider in self.providers:
            provider.prepare()

    def provider_for(self, request: ExecRequest) -> Provider:
        """The provider named by the request, else the one for its language (commands run natively)."""
        wanted = provider_name(request)
        for provider in self.providers:
            if provider.name == wanted and (request.command is not None or request.language in provider.languages):
                return provider
        known = ", ".join(f"{p.name}: {'/'.join(sorted(p.languages))}" for p in self.providers)
        raise NoProviderError(f"no {wanted} provider runs {request.language!r} here (available: {known})")

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

    def session(self, session_id: str | None = None, *, workspace_dir: str | os.PathLike[str] | None = None,
                mounts: tuple[Mount, ...] = (), egress: EgressPolicy | None = None, owner: str = "",
                template: str | None = None, starter: str | None = None, workdir: str = "",
                guest_root: str = GUEST_WORKSPACE) -> Session:
        """The session with this id (its files persist on disk), or a new one.

        `workspace_dir` makes an existing host directory the session's /workspace;
        `mounts` adds directories for this session only (e.g. a writable /workspace/shared);
        `egress` is where its runs may connect (see `Session.set_egress`); `owner` names the
        workspace (tenant) it belongs to, whose kernel snapshots alone it restores. A new session
        with `template` starts as a copy of that template of `templates` (files, packages, kernels);
        one with `starter` holds that web starter (e.g. "vite-react", see `web_starters`), its
        node_modules ready (run its dev server in a native process). `workdir` is the guest's working
        directory under /workspace (e.g. "analyst/s1" on a disk several sessions share), made at first use;
        `guest_root` another path the guest sees its /workspace at, which its working directory is under (a
        mount in `mounts` with `alias` shows it there).
        """
        if template is not None and starter is not None:
            raise InvalidRequestError("a session starts from a template or a starter, not both")
        session_id = session_id or uuid.uuid4().hex
        if not is_session_id(session_id):
            raise InvalidSessionIdError(f"a session id is {SESSION_ID_RULE}")
        with self._sessions_lock:
            session = self._sessions.get(session_id)
            if session is None:
                files_dir = Path(workspace_dir).resolve() if workspace_dir is not None else None
                try:
                    workspace = Workspace(self.sessions_dir / session_id, files_dir, workdir, guest_root)
                except ValueError as exc:
                    raise InvalidRequestError(str(exc)) from None
                session = Session(self, session_id, workspace, mounts, owner)
                self._sessions[session_id] = session
            if egress is not None:
                session.set_egress(egress)
        if template is not None:
            if session.workspace.root.exists():
                raise InvalidRequestError(f"session {session_id!r} exists already: only a new one starts from a template")
            self.templates.start(template, session)
        if starter is not None:
            from wasm_runner.providers.native.web_starters import copy_starter

            if session.workspace.root.exists():
                raise InvalidRequestError(f"session {session_id!r} exists already: only a new one starts from a starter")
            copy_starter(starter, session.workspace.files)
        return session

    @property
    def templates(self) -> Templates:
        """Templates published from this Runner's sessions (`templates.publish(session, name)`)."""
        from wasm_runner.snapshots.templates import Templates

        return Templates(self.data_dir / "templates")

    def forget(self, session_id: str) -> None:
        with self._sessions_lock:
            self._sessions.pop(session_id, None)

    # -- one-shot runs --------------------------------------------------------------

    async def run(self, code: str | ExecRequest, *, listener: OutputListener | None = None,
                  tools: ToolsArg | None = None, allow_tools: Iterable[str] | None = None,
                  tool_policy: ToolPolicy | None = None, on_approval: Approver | None = None,
                  **fields: Any) -> ExecResult:
        """Run once in a throwaway workspace and return the result (never raises for guest behaviour).
        `tools`, `allow_tools`, `tool_policy` and `on_approval`: as `Session.run` takes them (code mode)."""
        if tools is not None:
            session = self._throwaway_session(self.request(code, **fields))
            try:
                return await session.run(msgspec.structs.replace(self.request(code, **fields), fresh=True),
                                         listener=listener, tools=tools, allow_tools=allow_tools,
                                         tool_policy=tool_policy, on_approval=on_approval)
            finally:
                session.destroy()
        request = self.request(code, **fields)
        if self.one_shot_workers is not None and listener is None and self._runs_in("wasm", request):
            result = await self.one_shot_workers.run(request, wait=self._waits_for_one_shot_workers())
            if result is not None:
                return result
        if self.kernel_workers is not None and self.kernel_workers.available:
            return await self._run_on_kernel_worker(request, listener)
        if self.isolation == "process":
            return self._refused(request)
        job = Job(request, self._take_scratch(request), None, listener, scratch=True)
        try:
            return await self.executor.run_async(job, self.provider_for(request))
        finally:
            self._recycle(job)

    def run_sync(self, code: str | ExecRequest, *, listener: OutputListener | None = None,
                 tools: ToolsArg | None = None, allow_tools: Iterable[str] | None = None,
                 tool_policy: ToolPolicy | None = None, on_approval: Approver | None = None,
                 **fields: Any) -> ExecResult:
        """`run`, blocking this thread."""
        if tools is not None:  # one-shot workers have no way back to this process's tools: a throwaway session
            session = self._throwaway_session(self.request(code, **fields))
            try:
                return session.run_sync(msgspec.structs.replace(self.request(code, **fields), fresh=True),
                                        listener=listener, tools=tools, allow_tools=allow_tools,
                                        tool_policy=tool_policy, on_approval=on_approval)
            finally:
                session.destroy()
        request = self.request(code, **fields)
        if self.isolation == "process":  # an in-process Runner's workers serve its async calls only
            if self.one_shot_workers is not None and listener is None and self._runs_in("wasm", request):
                result = self.one_shot_workers.run_blocking(request, wait=self._waits_for_one_shot_workers())
                if result is not None:
                    return result
            if self.kernel_workers is not None and self.kernel_workers.available:
                session = self._throwaway_session(request)
                try:
                    return session.run_sync(msgspec.structs.replace(request, fresh=True), listener=listener)
                finally:
                    session.destroy()
            return self._refused(request)
        job = Job(request, self._take_scratch(request), None, listener, scratch=True)
        try:
            return self.executor.run_blocking(job, self.provider_for(request))
        finally:
            self._recycle(job)

    def _waits_for_one_shot_workers(self) -> bool:
        """Whether a one-shot run waits for a one-shot worker to start rather than run elsewhere:
        in-process, it runs here meanwhile; on workers, on a kernel worker that is up already,
        else it waits (rather than start kernel workers too)."""
        if self.isolation == "in-process":
            return False
        workers = self.kernel_workers
        return workers is None or not workers.started or not workers.available

    def _refused(self, request: ExecRequest) -> ExecResult:
        """No worker process could start, and this Runner runs no guest in its own process."""
        if self._closed:
            raise RunnerClosedError("the Runner was closed")
        self.provider_for(request)  # refused as elsewhere
        return no_worker_result(request)

    async def _run_on_kernel_worker(self, request: ExecRequest, listener: OutputListener | None) -> ExecResult:
        """A one-shot run no one-shot worker takes (it streams, runs natively, or they are not up
        yet): in a throwaway session on a kernel worker, so that no guest runs in this process."""
        session = self._throwaway_session(request)
        try:
            return await session.run(msgspec.structs.replace(request, fresh=True), listener=listener)
        finally:
            session.destroy()

    def _throwaway_session(self, request: ExecRequest) -> Session:
        self.provider_for(request)  # refused here, as in-process
        session = Session(self, f"oneshot-{uuid.uuid4().hex}", Workspace(self.scratch_dir / f"run-{uuid.uuid4().hex}"))
        session.workspace.ensure()
        return session

    def _runs_in(self, name: str, request: ExecRequest) -> bool:
        try:
            return self.provider_for(request).name == name
        except InvalidRequestError:  # reported by the in-process path
            return False

    def _take_scratch(self, request: ExecRequest) -> Workspace:
        try:
            provider: Provider | None = self.provider_for(request)
        except InvalidRequestError:  # reported when the job runs
            provider = None
        return self.scratch.take(provider, request.language)

    def _recycle(self, job: Job) -> None:
        # A native run can change what the state check cannot see through (its own ownership
        # of the directory included): its scratch workspace is never reused.
        self.scratch.recycle(job, reusable=not self._runs_in("native", job.request))

    def run_many(
        self,
        requests: Iterable[ExecRequest] | AsyncIterable[ExecRequest],
        *,
        concurrency: int | None = None,
        cache: ResultCache | None = None,
        cluster: RayCluster | None = None,
        tools: ToolsArg | None = None,
        allow_tools: Iterable[str] | None = None,
        tool_policy: ToolPolicy | None = None,
        on_approval: Approver | None = None,
        mcp_servers: Sequence[McpServerConfig] | None = None,
        approval_tools: Iterable[str] = (),
    ) -> AsyncIterator[ExecResult]:
        """Run each request one-shot in its own fresh instance; yield results as they complete.

        Requests are read lazily and at most `concurrency` run at once (no more than the
        Runner's workers), so memory stays flat however long the stream. Each result carries
        its request's `id`; an item no provider runs gets a result with error type
        InvalidRequest. Closing the iterator (or cancelling its consumer) stops the guests
        still running.

        `cache` answers items it has seen (marked `cached`) and keeps the new results.

        `cluster` runs the items on a Ray cluster's nodes instead of this Runner's lanes (with
        this Runner's mounts; `concurrency` is then the cluster's, see `RayCluster`). An item whose
        node is lost runs again on another (its result says `retried`); each item still gets
        exactly one result. The actors started on the cluster's nodes stay for this Runner's
        next batches (`RayCluster.keep_actors_s`), or until it is closed.

        `tools`, `allow_tools`, `tool_policy` and `on_approval` (code mode): as `run` takes them, for
        every item; each item's calls are decided, budgeted and recorded on their own (its result's
        `tool_calls`, and `tool_policy.audit` told of each). Such items run as one-shot runs with tools
        (a throwaway session each). Not with `cluster` (a node cannot call back into this process) nor
        with `cache` (a result that depends on the tools' answers is not the code's alone).

        `mcp_servers`: tools for every item from these MCP servers (with `allow_tools` and `tool_policy`
        as above; `approval_tools` names those of their tools that need approval). With `cluster`, each
        node starts them for its own items, their credentials from the node's environment; calls
        needing approval are refused there (no one on a node can give it), and `tool_policy.audit` is
        told of each call when its item's result is back. Without, this process starts them for the
        batch and closes them after it.
        """
        if tools is not None or mcp_servers is not None:
            if cluster is not None and tools is not None:
                raise ValueError("caller-side tools are not available on Ray batches: an item on a node cannot "
                                 "call this process's functions; run the batch without cluster=, or give the "
                                 "tools as MCP servers the nodes start (mcp_servers=)")
            if cache is not None:
                raise ValueError("a batch with tools cannot use a result cache: an item's result depends on the "
                                 "tools' answers, not on its code alone")
            if mcp_servers is not None and cluster is not None:
                return self._cluster_tool_batch(requests, cluster, mcp_servers, allow_tools, tool_policy,
                                                approval_tools)
            if mcp_servers is not None:
                return self._local_tool_batch(requests, concurrency, tools, mcp_servers, allow_tools, tool_policy,
                                              on_approval, approval_tools)
            from wasm_runner.execution.tool_batch import tool_batch_results

            limit = max(1, min(concurrency or self.concurrency, self.concurrency))
            return tool_batch_results(lambda request: self.run(
                request, tools=tools, allow_tools=allow_tools, tool_policy=tool_policy, on_approval=on_approval),
                requests, limit)

        def run(items: Iterable[ExecRequest] | AsyncIterable[ExecRequest]) -> AsyncIterator[ExecResult]:
            if cluster is not None:
                from wasm_runner.cluster.dispatch import ClusterBatch

                return ClusterBatch(self._cluster_actors(cluster), cluster).results(items)
            from wasm_runner.execution.lanes import Batch

            batch = Batch(items, concurrency or self.concurrency, self.concurrency, self._lanes_for)
            return batch.results_in_completion_order()

        if cache is None:
            return run(requests)
        from wasm_runner.evaluation.cache import run_with_cache

        return run_with_cache(requests, cache, run)

    async def _cluster_tool_batch(self, requests: Iterable[ExecRequest] | AsyncIterable[ExecRequest],
                                  cluster: RayCluster, servers: Sequence[McpServerConfig],
                                  allow_tools: Iterable[str] | None, tool_policy: ToolPolicy | None,
                                  approval_tools: Iterable[str]) -> AsyncIterator[ExecResult]:
        from wasm_runner.cluster.dispatch import ClusterBatch
        from wasm_runner.cluster.wire import NodeTools, encode_tools
        from wasm_runner.tools.calls import ToolPolicy

        policy = tool_policy or ToolPolicy()
        allowed = [set(names) for names in (allow_tools, policy.allow) if names is not None]
        spec = NodeTools(servers=tuple(s.model_dump() for s in servers),
                         allow=tuple(sorted(set.intersection(*allowed))) if allowed else None,
                         approval=tuple(sorted(set(approval_tools))),
                         call_timeout_s=policy.call_timeout_s, max_calls=policy.max_calls,
                         max_total_s=policy.max_total_s)
        results = ClusterBatch(self._cluster_actors(cluster), cluster, encode_tools(spec)).results(requests)
        async with contextlib.aclosing(results):  # type: ignore[type-var]
            async for result in results:
                if policy.audit is not None:
                    for call in result.tool_calls or ():
                        policy.audit(call)
                yield result

    async def _local_tool_batch(self, requests: Iterable[ExecRequest] | AsyncIterable[ExecRequest],
                                concurrency: int | None, tools: ToolsArg | None, servers: Sequence[McpServerConfig],
                                allow_tools: Iterable[str] | None, tool_policy: ToolPolicy | None,
                                on_approval: Approver | None, approval_tools: Iterable[str]) -> AsyncIterator[ExecResult]:
        from wasm_runner.tools.registry import as_registry, marked_for_approval

        sources = [server.source() for server in servers]
        try:
            given = list(as_registry(tools)) if tools is not None else []
            for source in sources:
                given += marked_for_approval(await asyncio.to_thread(source.start), approval_tools)
            results = self.run_many(requests, concurrency=concurrency, tools=given, allow_tools=allow_tools,
                                    tool_policy=tool_policy, on_approval=on_approval)
            async with contextlib.aclosing(results):  # type: ignore[type-var]
                async for result in results:
                    yield result
        finally:
            for source in sources:
                await asyncio.to_thread(source.close)

    def _cluster_actors(self, cluster: RayCluster) -> NodeActors:
        """This Runner's actors on that cluster, kept for its next batches (closed with it)."""
        from wasm_runner.cluster.actors import NodeActors

        with self._sessions_lock:
            actors = self._clusters.get(cluster.actors_key())
            if actors is None:
                actors = self._clusters[cluster.actors_key()] = NodeActors(cluster, self.mounts)
            return actors

    def _lanes_for(self, batch: Batch) -> Lanes:
        """Worker processes where this Runner has them, else its worker threads (in-process
        only: on workers, a batch no worker can run gets a refusal for each item)."""
        workers = self.worker_pool
        fallback = self._thread_lanes if self.isolation == "in-process" else self._refusing_lanes
        if (batch.lane_count > 1 or self.process_lanes) and workers is not None and not workers.broken:
            from wasm_runner.execution.workers import ProcessLanes

            return ProcessLanes(batch, workers, fallback=fallback)
        return fallback(batch)

    @staticmethod
    def _refusing_lanes(batch: Batch) -> Lanes:
        from wasm_runner.execution.lanes import RefusingLanes

        return RefusingLanes(batch)

    def _thread_lanes(self, batch: Batch) -> Lanes:
        from wasm_runner.execution.lanes import ThreadLanes

        return ThreadLanes(batch, self.executor, self.provider_for, self.scratch)

    # -- lifecycle ------------------------------------------------------------------

    def close(self) -> None:
        """End the worker processes (a guest running on one stops at once), hibernate the
        sessions (their files stay) and remove the data directory if this Runner made it."""
        self._closed = True
        with self._sessions_lock:
            sessions = list(self._sessions.values())
        saving = [session.hibernate() for session in sessions]
        deadline = time.monotonic() + CLOSE_SAVE_S
        for saved in saving:  # the kernels on worker processes are saved before the workers end
            if saved is not None:
                saved.wait(max(deadline - time.monotonic(), 0))
        for actors in self._clusters.values():
            actors.close()
        if self._worker_pool is not None:
            self._worker_pool.close()
        if self.kernel_workers is not None:
            self.kernel_workers.close()
        for provider in self.providers:
            provider.close()
        self.executor.close()
        self.scratch.close()
        if self._owns_dir:
            discard_tree(self.data_dir)

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Runner:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()
