"""The service's parts, created and closed with the application (see app.service_context), and the
app keys they are found under."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from aiohttp import web

from wasm_runner import ExecRequest, Mount
from wasm_runner.workspace.quota import DiskLedger
from wasm_runner_server.config import ServiceConfig
from wasm_runner_server.data_dir import private_directory
from wasm_runner_server.metrics import Metrics
from wasm_runner_server.sessions.approvals import Approvals
from wasm_runner_server.sessions.backpressure import ExecutionGate
from wasm_runner_server.sessions.caller_tools import CallerTools
from wasm_runner_server.sessions.copies import SessionCopies
from wasm_runner_server.sessions.execution import Execution, ExecutionObserver
from wasm_runner_server.sessions.manager import RunnerPool, SessionManager
from wasm_runner_server.sessions.open_store import open_nodes, open_placement, open_templates, session_store
from wasm_runner_server.sessions.processes import ProcessObserver, ServiceProcesses
from wasm_runner_server.sessions.profile_tools import ProfileTools
from wasm_runner_server.sessions.run_disk import QuotaOf, RunRooms
from wasm_runner_server.sessions.session_disk import OWN_DIRECTORY, SessionDisk
from wasm_runner_server.sessions.store import SessionMetadata

if TYPE_CHECKING:
    from wasm_runner_server.cluster.nodes import NodeDirectory

log = logging.getLogger("wasm_runner.server")


@dataclass(eq=False)
class Service:
    config: ServiceConfig
    store: SessionMetadata
    pool: RunnerPool
    gate: ExecutionGate
    metrics: Metrics
    execution: Execution
    sessions: SessionManager
    processes: ServiceProcesses
    copies: SessionCopies | None = None
    """Forks and templates (see `copies`)."""
    ready: bool = False
    closing: bool = False
    checks: dict[str, str] = field(default_factory=dict)
    disk: DiskLedger = field(default_factory=DiskLedger)
    """Bytes reserved by API writes in progress (wasm_runner.quota)."""
    caller_tools: CallerTools = field(default_factory=CallerTools)
    """Guests' calls of caller-side tools waiting for the caller's answer (code mode over HTTP)."""
    approvals: Approvals = field(default_factory=Approvals)
    """Guests' calls of tools that need approval, waiting for the session owner's decision."""
    nodes: NodeDirectory | None = None
    """The cluster's nodes (a shared PostgreSQL store): where a session another node holds is served."""
    profile_tools: ProfileTools = field(default_factory=ProfileTools)
    """The tools of the profiles' MCP servers (code mode)."""
    _warmup: asyncio.Task | None = None

    @classmethod
    async def open(cls, config: ServiceConfig, *, mounts_for: Callable[[str], tuple[Mount, ...]] = lambda session_id: (),
                   observers: Sequence[ExecutionObserver] = (),
                   process_observers: Sequence[ProcessObserver] = (), quota_of: QuotaOf | None = None,
                   disk_changed: Callable[[str], None] = lambda session_id: None,
                   share_of: Callable[[], str] = lambda: "",
                   owner_for: Callable[[str], str] = lambda session_id: "",
                   disk_for: Callable[[str], SessionDisk] = lambda session_id: OWN_DIRECTORY) -> Service:
        """Open the store, restore the sessions, start the warm-up; `mounts_for` adds mounts to a
        session by id, `observers` see every execution and `process_observers` every background
        process's start and end; `quota_of` names a session's workspace quota, which its runs
        reserve their room under, `disk_changed` is told a session's files changed, and `share_of`
        names the share a queued call waits its turn in, `owner_for` the workspace a session belongs
        to, `disk_for` where its /workspace is (all from the access policy)."""
        settings = config.server
        data_dir = settings.data_dir
        private_directory(data_dir)
        metrics = Metrics()
        gate = ExecutionGate(settings.concurrency, settings.queue_size, settings.queue_timeout_s, share_of,
                             share_queue_size=settings.workspace_queue_size)
        execution = Execution(config, gate, metrics, observers)
        store = session_store(config)
        pool = RunnerPool(data_dir, settings.concurrency, execution.base_limits, config.packages.settings(),
                          config.workers, config.egress.settings())
        ledger = DiskLedger()
        rooms = RunRooms(ledger, quota_of, disk_changed) if quota_of is not None else None
        sessions = SessionManager(config, store, pool, execution, metrics, mounts_for, rooms, owner_for, disk_for)
        sessions.placement = open_placement(config, sessions)
        metrics.gauge("wasm_runner_exec_queue_depth", "Executions waiting for a slot.", lambda: gate.queued)
        metrics.gauge("wasm_runner_exec_in_flight", "Executions holding a slot.", lambda: gate.active)
        processes = ServiceProcesses(config.processes, sessions, metrics, process_observers)
        service = cls(config, store, pool, gate, metrics, execution, sessions, processes,
                      copies=SessionCopies(sessions, config.storage.workspaces_dir(data_dir),
                                           open_templates(config, sessions.placement)), disk=ledger,
                      nodes=open_nodes(config))
        await service.start()
        return service

    async def start(self) -> None:
        """Restore the sessions, then warm the Python runtime in the background (readiness waits for it)."""
        await self.sessions.start()
        _, profile = self.execution.profile(None)
        self.pool.get(profile)  # its worker processes start now, ahead of the first call
        if self.config.server.prepare_on_start:
            self.checks["python"] = "warming"
            self._warmup = asyncio.create_task(self._warm(), name="wasm-runner-warmup")
        else:
            self.ready = True
            self.checks["python"] = "not warmed (prepare_on_start = false)"

    async def _warm(self) -> None:
        """Build/load the Python runtime now, so the first request does not pay for it."""
        _, profile = self.execution.profile(None)
        runner = self.pool.get(profile)
        try:
            result = await runner.run(ExecRequest(code="pass", language="python", limits=self.execution.base_limits))
        except Exception as exc:  # noqa: BLE001 - readiness reports it
            self.checks["python"] = f"failed: {exc}"
            log.error("python runtime failed to start", extra={"event": "warmup_failed", "error": str(exc)})
            return
        if result.error is not None:
            self.checks["python"] = f"failed: {result.error.message}"
            log.error("python runtime failed to start", extra={"event": "warmup_failed", "error": result.error.message})
            return
        self.checks["python"] = "ok"
        workers = runner.kernel_workers
        if workers is not None:
            self.checks["kernel_workers"] = "starting"
            started = await asyncio.to_thread(workers.wait_ready, 120)
            refused = "sessions' calls are refused" if runner.isolation == "process" else "kernels run in-process"
            self.checks["kernel_workers"] = "ok" if started else f"not started: {refused}"
        self.ready = True
        log.info("ready", extra={"event": "ready", "warmup_ms": result.duration_ms})

    async def shutdown(self) -> None:
        """Stop taking executions; let running ones finish within the bound, then cancel them."""
        self.closing = True
        self.ready = False
        self.gate.close()
        await self.execution.drain(self.config.server.shutdown_timeout_s)

    async def close(self) -> None:
        if self._warmup is not None and not self._warmup.done():
            self._warmup.cancel()
        await self.processes.close()
        await self.sessions.close()
        await self.profile_tools.close()
        try:
            await asyncio.wait_for(asyncio.to_thread(self.pool.close), timeout=10)
        except TimeoutError:
            log.warning("runners did not close within 10 s", extra={"event": "close_timeout"})
        self.store.close()
        if self.copies is not None:
            self.copies.close()
        if self.nodes is not None:
            self.nodes.close()
        log.info("stopped", extra={"event": "stopped"})

    async def advertise(self, url: str) -> None:
        """Tell the cluster's other nodes where this one is reached (they forward its sessions' requests)."""
        if self.nodes is not None:
            await asyncio.to_thread(self.nodes.advertise, url)
            log.info("advertised", extra={"event": "node_advertised", "node": self.nodes.node, "url": url})


SERVICE = web.AppKey("service", Service)
CONFIG = web.AppKey("config", ServiceConfig)
