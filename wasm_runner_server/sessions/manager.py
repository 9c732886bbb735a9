"""Session lifecycle for the service: lazy creation, queued calls, idle hibernation, TTL expiry, restore.

A session is a row in the store until it is first used; only then does the core
create its directory and, on the first execution, its kernel. The sweep drops the
kernels of sessions idle past their idle timeout (files kept; the core reports
`kernel_restarted` on the next call) and removes sessions past their TTL, files
and all. After a restart, sessions come back from the store with their files; a
language whose kernel held state before the restart reports `kernel_restarted` on
its first call, exactly as after hibernation.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

import msgspec

from wasm_runner import ExecRequest, ExecResult, Limits, Mount, OutputListener, Runner, Session, WorkerPolicy
from wasm_runner.egress.settings import EgressSettings
from wasm_runner.execution.kernel_workers import RESTART_CAUSES, KernelWorkers
from wasm_runner.packages.settings import PackageSettings
from wasm_runner.profiles import Profile
from wasm_runner.runner import Isolation
from wasm_runner.workspace.files import WorkspaceFiles
from wasm_runner.workspace.history import HISTORY_DIR, FileHistory
from wasm_runner.workspace.layout import discard_tree
from wasm_runner_protocol.egress import EgressPolicy
from wasm_runner_protocol.errors import ErrorCode
from wasm_runner_protocol.processes import ProcessInfo
from wasm_runner_protocol.wire import SESSION_ID_PATTERN, SessionCreate, SessionInfo
from wasm_runner_server.config import ServiceConfig, WorkerSettings
from wasm_runner_server.errors import ApiError, on_other_node, overloaded, session_not_found
from wasm_runner_server.metrics import Metrics
from wasm_runner_server.sessions.cursor import decode_cursor, encode_cursor
from wasm_runner_server.sessions.egress import at_start, body_policy, within_profile, within_session
from wasm_runner_server.sessions.execution import Execution
from wasm_runner_server.sessions.run_disk import RunRooms
from wasm_runner_server.sessions.session_disk import OWN_DIRECTORY, SessionDisk
from wasm_runner_server.sessions.store import SessionMetadata, SessionRow
from wasm_runner_server.sessions.tool_sets import session_tools

if TYPE_CHECKING:
    from wasm_runner.tools import Approver, Tool, ToolPolicy

log = logging.getLogger("wasm_runner.server")

ONESHOT_PREFIX = "oneshot-"
TEMPORARY_MARK = "temporary"
"""A file in a temporary session's directory, beside files/ (never mounted into the guest): the host's
note that the directory is to be erased, should a killed process have left it."""
"""Throwaway sessions of POST /v1/exec; left-overs of a crash are removed at start."""
SESSION_ID = re.compile(SESSION_ID_PATTERN)


class RunnerPool:
    """One core Runner per set of read-only mounts (a Runner's mounts are fixed), sharing the data directory."""

    def __init__(self, data_dir: Path, concurrency: int, limits: Limits, packages: PackageSettings | None = None,
                 workers: WorkerSettings = WorkerSettings(), egress: EgressSettings | None = None) -> None:
        self.data_dir = data_dir
        self.concurrency = concurrency
        self.limits = limits
        self.packages = packages
        self.workers = workers
        self.egress = egress
        """The operator's egress settings (the `[egress]` section), for every runner and its workers."""
        self._runners: dict[tuple[tuple[str, str], ...], Runner] = {}

    def get(self, profile: Profile) -> Runner:
        key = profile.mount_key
        runner = self._runners.get(key)
        if runner is None:
            # Every guest on worker processes: kernels (with their sessions' native runs and the
            # one-shot runs that stream) on the kernel workers, other one-shot runs on their own.
            workers = self.workers
            policy = WorkerPolicy(memory_bytes=workers.memory_bytes, max_runs=workers.max_runs,
                                  max_rss_bytes=workers.max_rss_bytes, threads=self.concurrency + 2)
            # `kernel_workers = 0` is the operator's explicit choice of kernels in this process.
            isolation: Isolation = "process" if workers.kernel_workers > 0 else "in-process"
            runner = Runner(self.data_dir, isolation=isolation, concurrency=self.concurrency, limits=self.limits,
                            mounts=profile.runner_mounts(), one_shot_workers=self.concurrency,
                            kernel_workers=workers.kernel_workers,
                            worker_policy=policy, packages=self.packages, egress=self.egress)
            self._runners[key] = runner
        return runner

    @property
    def runners(self) -> list[Runner]:
        return list(self._runners.values())

    def supervisors(self) -> list[KernelWorkers]:
        """The kernel workers' supervisors of the runners made so far."""
        return [r.kernel_workers for r in self._runners.values() if r.kernel_workers is not None]

    def close(self) -> None:
        for runner in self._runners.values():
            runner.close()
        self._runners.clear()


@dataclass(eq=False)
class LiveSession:
    row: SessionRow
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    """Held by the execution in progress: calls to one session run one at a time, in order."""
    waiting: int = 0
    unstored_since: float | None = None
    """time.monotonic() of its first answered change not stored yet (`checkpoint` durability)."""
    task: asyncio.Task | None = None
    """The execution running now (cancellable)."""
    core: Session | None = None
    restored_kernels: set[str] = field(default_factory=set)
    """Languages whose kernel state was lost in a server restart, reported once as restarted."""
    dirty: bool = False
    deleted: bool = False
    history: FileHistory | None = None
    """Earlier versions of the files written through the API (opened on first use)."""
    temporary: bool = False
    """Kept in memory only (no metadata row), with no file history; its files are erased when it ends."""
    hibernated: bool = False
    """Idle past its idle timeout (its kernels saved and dropped), or restored from the store after a
    restart with nothing in memory; cleared when a call or a background process starts."""
    epoch: int = 0
    """The epoch of this node's lease on it (0: no lease, the node's sessions do not move)."""
    generation: int = 0
    """Its last generation stored (or reserved) in object storage; the next is one more."""
    lease_until: float = 0.0
    """When this node's lease lapses unless renewed (monotonic clock)."""
    moved: bool = False
    """Taken over by another node: dropped here, and nothing more of it is stored from here."""
    lost_kernel_reason: str = ("the service restarted since this session's last call, and its kernel's state had "
                               "not been saved")
    """What a call says of a kernel in `restored_kernels` that did not come back."""
    ended_elsewhere: list[ProcessInfo] = field(default_factory=list)
    """The processes it had on the nodes it was on before this one (cluster.moved_processes)."""

    @property
    def busy(self) -> bool:
        return self.lock.locked() or self.waiting > 0


class SessionPlacement(Protocol):
    """What the manager tells the placement of its sessions (`cluster.placement.Placement`: leases and
    object storage), when sessions are stored beyond this node."""

    async def start(self) -> None: ...
    async def close(self) -> None: ...
    def created(self, live: LiveSession) -> None: ...
    def removed(self, session_id: str) -> None: ...
    async def persist(self, live: LiveSession, now: bool = False) -> None: ...
    async def adopt(self, session_id: str) -> None: ...
    async def release(self, live: LiveSession) -> bool: ...
    async def drain(self, within_s: float) -> None: ...
    def stored_bytes(self, session_ids: list[str]) -> dict[str, int]: ...


def _summed(parts: Iterable[Mapping[Any, int]]) -> dict[tuple[str, ...], float]:
    """One labelled series from the same series of several supervisors."""
    total: dict[tuple[str, ...], float] = {}
    for part in parts:
        for label, value in part.items():
            total[(str(label),)] = total.get((str(label),), 0) + value
    return total


def _time(value: float) -> datetime:
    return datetime.fromtimestamp(value, tz=UTC)


def temporary_refused(what: str) -> ApiError:
    """What a temporary session answers when asked for what it does not keep or give out."""
    return ApiError(409, ErrorCode.TEMPORARY_SESSION, f"a temporary session {what}",
                    "use a session created without temporary for what must outlive it")


class SessionManager:
    def __init__(self, config: ServiceConfig, store: SessionMetadata, pool: RunnerPool, execution: Execution,
                 metrics: Metrics, mounts_for: Callable[[str], tuple[Mount, ...]] = lambda session_id: (),
                 rooms: RunRooms | None = None, owner_for: Callable[[str], str] = lambda session_id: "",
                 disk_for: Callable[[str], SessionDisk] = lambda session_id: OWN_DIRECTORY) -> None:
        self.config = config
        self.policy = config.sessions
        self.store = store
        self.pool = pool
        self.execution = execution
        self.metrics = metrics
        self.sessions: dict[str, LiveSession] = {}
        self._sweeper: asyncio.Task | None = None
        self._background: set[asyncio.Future] = set()
        self.mounts_for = mounts_for
        """Extra mounts of a session by id (the access policy's: e.g. the workspace's writable shared/)."""
        self.owner_for = owner_for
        """The workspace a session belongs to, by id (its kernel snapshots and templates are that workspace's)."""
        self.disk_for = disk_for
        """Where a session's /workspace is, by id (the access policy's disk layout: e.g. a member's disk)."""
        self.removal_observers: list[Callable[[str], None]] = []
        """Told the id of each session removed (deleted or expired), once its files are gone."""
        self.rooms = rooms
        """Reserves each run's room under its workspace's disk quota (None: only the run's limits apply)."""
        self.placement: SessionPlacement | None = None
        """Leases and object storage (`cluster.placement`), when sessions are stored beyond this node."""
        metrics.gauge("wasm_runner_sessions_active", "Sessions that exist (not expired or deleted).",
                      lambda: len(self.sessions))
        metrics.gauge("wasm_runner_kernels_live", "Live kernels (interpreters holding session state).",
                      self.live_kernels)
        supervisors = pool.supervisors
        metrics.family("wasm_runner_workers", "Kernel worker processes by state (serving, spare, leaving).", "gauge",
                       ("state",), lambda: _summed(w.counts() for w in supervisors()))
        metrics.family("wasm_runner_worker_restarts_total", "Kernel workers replaced, by cause (deadline: a guest "
                       "stuck past its deadline; crash: an unexpected exit; runs, memory: retired).", "counter",
                       ("cause",), lambda: _summed({c: w.stats.restarts[c] for c in RESTART_CAUSES} for w in supervisors()))
        metrics.family("wasm_runner_worker_deadline_kills_total", "Kernel workers ended at a guest's deadline, by who "
                       "ended them (worker: its own watchdog; supervisor: SIGKILL).", "counter", ("by",),
                       lambda: _summed({b: w.stats.deadline_kills[b] for b in ("worker", "supervisor")}
                                       for w in supervisors()))
        metrics.family("wasm_runner_kernels_per_worker", "Live kernels on each serving kernel worker (by pid).", "gauge",
                       ("worker",), lambda: _summed({str(pid): n for pid, n in w.kernels_per_worker().items()}
                                                    for w in supervisors()))

    @property
    def sessions_dir(self) -> Path:
        return self.config.server.data_dir / "sessions"

    # -- start and stop --------------------------------------------------------------------

    async def start(self) -> None:
        now = time.time()
        expired: list[SessionRow] = []
        for row in self.store.all():
            if now >= row.expires_at:
                expired.append(row)
            else:
                self.sessions[row.id] = LiveSession(row, restored_kernels=set(row.kernels),
                                                    hibernated=row.executions > 0)
        for row in expired:
            await asyncio.to_thread(discard_tree, self.sessions_dir / row.id)
            disk = self.disk_for(row.id)
            if disk.files is not None and disk.owned:  # an end user's session root goes with it
                await asyncio.to_thread(discard_tree, disk.files)
            self.store.delete(row.id)
            if self.placement is not None:
                self.placement.removed(row.id)
            self.metrics.sessions_expired.inc()
        if self.sessions_dir.is_dir():
            # one-shot scratch directories, and temporary sessions' files left by a process that was killed
            leftovers = [p for p in self.sessions_dir.iterdir() if p.name.startswith(ONESHOT_PREFIX)
                         or (p.name not in self.sessions and (p / TEMPORARY_MARK).is_file())]
            for path in leftovers:
                await asyncio.to_thread(discard_tree, path)
        if self.placement is not None:
            await self.placement.start()
        log.info("sessions restored", extra={"event": "sessions_restored", "sessions": len(self.sessions),
                                             "expired": len(expired)})
        self._sweeper = asyncio.create_task(self._sweep_forever(), name="wasm-runner-sweep")

    async def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
            self._sweeper = None
        if self.placement is not None:
            await self.placement.drain(self.config.server.shutdown_timeout_s)
        if self._background:
            await asyncio.wait(self._background, timeout=10)
        self.flush()
        if self.placement is not None:
            await self.placement.close()

    def flush(self) -> None:
        with self._changed() as rows:
            self.store.save_many(rows)

    @contextlib.contextmanager
    def _changed(self) -> Iterator[list[SessionRow]]:
        """The rows of the sessions changed since the last write, marked written; marked changed
        again if the write fails (the next sweep, or shutdown, writes them)."""
        dirty = [live for live in self.sessions.values() if live.dirty]
        for live in dirty:
            live.dirty = False
        try:
            yield [live.row for live in dirty if not live.temporary]  # a temporary session has no row
        except BaseException:
            for live in dirty:
                live.dirty = True
            raise

    # -- lookup and creation ----------------------------------------------------------------

    def create(self, body: SessionCreate) -> LiveSession:
        name, profile = self.execution.profile(body.profile)
        requested = body_policy(body.egress)
        egress = None if requested is None else within_profile(requested, name, profile, self.execution.profiles)
        tools = None if body.tools is None else session_tools(body.tools, name, profile)
        idle = body.idle_timeout_s if body.idle_timeout_s is not None else self.policy.idle_timeout_s
        ttl = body.ttl_s if body.ttl_s is not None else self.policy.ttl_s
        if idle > self.policy.max_idle_timeout_s:
            raise ApiError(422, ErrorCode.LIMIT_EXCEEDS_MAXIMUM,
                           f"idle_timeout_s = {idle:g} exceeds the server maximum {self.policy.max_idle_timeout_s:g}")
        if ttl > self.policy.max_ttl_s:
            raise ApiError(422, ErrorCode.LIMIT_EXCEEDS_MAXIMUM,
                           f"ttl_s = {ttl:g} exceeds the server maximum {self.policy.max_ttl_s:g}")
        session_id = body.id or uuid.uuid4().hex
        if session_id.startswith(ONESHOT_PREFIX):
            raise ApiError(422, ErrorCode.INVALID_SESSION_ID, f"session ids may not start with {ONESHOT_PREFIX!r}")
        now = time.time()
        row = SessionRow(id=session_id, profile=name, created_at=now, last_used_at=now, idle_timeout_s=idle,
                         ttl_s=ttl, metadata=dict(body.metadata), egress=egress, tools=tools)
        temporary = body.temporary or body.ephemeral
        if session_id in self.sessions or not self._claim_id(row, temporary):
            raise ApiError(409, ErrorCode.SESSION_EXISTS, f"a session {session_id!r} already exists",
                           "use it, delete it first, or let the server choose an id")
        live = LiveSession(row, temporary=temporary)
        self.sessions[session_id] = live
        if self.placement is not None:
            self.placement.created(live)
        log.info("session created", extra={"event": "session_created", "session": session_id, "profile": name})
        return live

    def _claim_id(self, row: SessionRow, temporary: bool) -> bool:
        """Take the session's id: a row in the store, or for a temporary session (whose id is kept in
        memory only) a directory holding the host's mark, so that a killed process's is erased at the
        next start. False when the id is taken."""
        if not temporary:
            return self.store.insert(row)
        if self.store.elsewhere([row.id]):  # another node's (this node's are all in `sessions`)
            return False
        directory = self.sessions_dir / row.id
        try:
            directory.mkdir(parents=True, mode=0o700)
        except FileExistsError:
            return False
        (directory / TEMPORARY_MARK).touch(mode=0o600)
        return True

    def add_copy(self, parent: LiveSession, core: Session) -> LiveSession:
        """A session made as a copy of `parent` by the core (a fork's child): its row, with the
        parent's profile, timeouts, metadata and network policy."""
        now = time.time()
        source = parent.row
        row = SessionRow(id=core.id, profile=source.profile, created_at=now, last_used_at=now,
                         idle_timeout_s=source.idle_timeout_s, ttl_s=source.ttl_s, metadata=dict(source.metadata),
                         egress=source.egress, tools=source.tools)
        if core.id in self.sessions or not (self._mark_copy(core.id) if parent.temporary else self.store.insert(row)):
            raise ApiError(409, ErrorCode.SESSION_EXISTS, f"a session {core.id!r} already exists")
        live = LiveSession(row, core=core, temporary=parent.temporary)  # a temporary session's copies are too
        self.sessions[core.id] = live
        if self.placement is not None:
            self.placement.created(live)
        log.info("session forked", extra={"event": "session_forked", "session": core.id, "parent": source.id})
        return live

    def _mark_copy(self, session_id: str) -> bool:
        """A temporary session's copy: its directory (made by the core) gets the host's mark."""
        directory = self.sessions_dir / session_id
        if not directory.is_dir():
            directory.mkdir(parents=True, mode=0o700)
        (directory / TEMPORARY_MARK).touch(mode=0o600)
        return True

    def get(self, session_id: str) -> LiveSession:
        live = self.sessions.get(session_id) if SESSION_ID.match(session_id) else None
        if live is None and self.store.node and SESSION_ID.match(session_id):
            for row in self.store.elsewhere([session_id]):  # (a store shared by a cluster's nodes)
                raise on_other_node(session_id, row.node)
        if live is None or live.deleted:
            raise session_not_found(session_id)
        if time.time() >= live.row.expires_at:
            self._spawn(self._remove(live, expired=True))
            raise session_not_found(session_id, "it expired at the end of its TTL")
        return live

    def adopted(self, row: SessionRow, node: str) -> LiveSession:
        """A session taken over from another node, its directory restored: served here from now on (its
        kernels restore from their stored images on their next call)."""
        row.node = node
        live = LiveSession(row, restored_kernels=set(row.kernels), hibernated=True,
                           lost_kernel_reason="this session moved to this node after its node stopped answering, "
                                              "and its kernel's state had not been stored (a kernel holding a file "
                                              "open cannot be)")
        self.sessions[row.id] = live
        return live

    async def drop_moved(self, live: LiveSession) -> None:
        """Drop a session another node took over: its kernels unsaved, its directory here removed, its
        metadata (the other node's now) untouched."""
        live.moved = True
        if self.sessions.get(live.row.id) is live:
            del self.sessions[live.row.id]
        self.cancel(live)
        async with live.lock:
            core = live.core
            if core is not None:
                await asyncio.to_thread(core.destroy)
            else:
                await asyncio.to_thread(discard_tree, self.sessions_dir / live.row.id)

    def profile_of(self, live: LiveSession) -> Profile:
        profile = self.execution.profiles.get(live.row.profile)
        if profile is None:  # the profile left the configuration since the session was created
            _, profile = self.execution.profile(None)
        return profile

    def egress(self, live: LiveSession) -> EgressPolicy:
        """The session's network policy now: its own, else its profile's."""
        return live.row.egress if live.row.egress is not None else self.profile_of(live).network.policy

    def call_egress(self, live: LiveSession, requested: EgressPolicy | None) -> EgressPolicy | None:
        """The policy a call of the session asks for: its own when it names one that narrows the
        session's (422/403 otherwise), else the session's own (None: its profile's)."""
        if requested is None:
            return live.row.egress
        return within_session(requested, self.egress(live))

    def set_egress(self, live: LiveSession, policy: EgressPolicy | None) -> EgressPolicy:
        """Give the session `policy` (None: its profile's) from its next call on, and its live background
        processes from their next connection on, committed before this returns; 422/403 when it is not
        a policy within the profile's. The policy now."""
        if policy is not None:
            policy = within_profile(policy, live.row.profile, self.profile_of(live), self.execution.profiles)
        self.store.set_egress(live.row.id, policy)
        live.row.egress = policy
        session = live.core
        if session is not None and session.has_processes:  # their next connections follow it too
            session.processes.set_egress(self.egress(live))
        log.info("session network policy changed", extra={"event": "session_egress", "session": live.row.id,
                                                          "mode": self.egress(live).mode})
        return self.egress(live)

    def set_expiry(self, live: LiveSession, expires_in_s: float) -> None:
        """End the session `expires_in_s` from now, committed before this returns; 422 past the server's
        maximum TTL."""
        ttl = time.time() + expires_in_s - live.row.created_at
        if ttl > self.policy.max_ttl_s:
            raise ApiError(422, ErrorCode.LIMIT_EXCEEDS_MAXIMUM,
                           f"the session would live {ttl:g} s in all, past the server maximum TTL "
                           f"{self.policy.max_ttl_s:g} s", "ask for a shorter time")
        self.store.set_ttl(live.row.id, ttl)
        live.row.ttl_s = ttl

    def core(self, live: LiveSession, profile: Profile | None = None) -> tuple[Runner, Session]:
        """The core session, from the runner that grants the session's mounts."""
        own = self.profile_of(live)
        if profile is not None and profile.mount_key != own.mount_key:
            raise ApiError(409, ErrorCode.PROFILE_INCOMPATIBLE,
                           f"this profile mounts different directories than the session's profile {live.row.profile!r}",
                           "use a profile with the same mounts, or a new session")
        runner = self.pool.get(own)
        if live.core is None:
            disk = self.disk_for(live.row.id)
            live.core = runner.session(live.row.id, mounts=self.mounts_for(live.row.id),
                                       owner=self.owner_for(live.row.id), workspace_dir=disk.files,
                                       workdir=disk.workdir, guest_root=disk.guest_root)
        return runner, live.core

    def files(self, live: LiveSession, *, create: bool = False) -> WorkspaceFiles:
        _, session = self.core(live)
        if create:
            session.workspace.ensure()
        return WorkspaceFiles(session.workspace.files)

    def history(self, live: LiveSession) -> FileHistory:
        """The session's file history, kept beside its files (outside what the guest sees); a temporary
        session keeps none (409)."""
        if live.temporary:
            raise temporary_refused("keeps no file history")
        if live.history is None:
            _, session = self.core(live)
            bounds = self.config.history
            live.history = FileHistory(session.workspace.root / HISTORY_DIR, max_versions=bounds.max_versions,
                                       max_bytes=bounds.max_bytes, max_file_bytes=bounds.max_file_bytes)
        return live.history

    def session_limits(self, live: LiveSession) -> Limits:
        return self.execution.limits(self.profile_of(live), None)

    def touch(self, live: LiveSession) -> None:
        live.row.last_used_at = time.time()
        live.dirty = True

    def info(self, live: LiveSession) -> SessionInfo:
        row = live.row
        kernels = live.core.kernels if live.core is not None else []
        state: Literal["active", "idle", "hibernated"]
        if live.busy or (live.core is not None and live.core.live_process_count):
            state = "active"  # a call, or a background process (a dev server)
        elif live.hibernated and not kernels:
            state = "hibernated"
        else:
            state = "idle"
        return SessionInfo(id=row.id, profile=row.profile, state=state, kernels=kernels,
                           created_at=_time(row.created_at), last_used_at=_time(row.last_used_at),
                           expires_at=_time(row.expires_at), idle_timeout_s=row.idle_timeout_s, ttl_s=row.ttl_s,
                           executions=row.executions, metadata=row.metadata, egress=self.egress(live),
                           tools=row.tools, cwd=self._cwd(row.id), **self._durability(live))

    def _durability(self, live: LiveSession) -> dict[str, Any]:
        storage = self.config.storage
        if not storage.objects or live.temporary or not self.movable(live.row.id):
            return {}  # (a member's disk on the node's own disk is not stored: the node's)
        if storage.durability == "checkpoint":
            return {"durability": "checkpoint", "durability_window_s": storage.checkpoint_s}
        return {"durability": "call"}

    def movable(self, session_id: str) -> bool:
        """Whether the session can move to another node with all it sees: on a directory of its own (stored
        with it), or on a disk of a layout that every node mounts (shared-POSIX storage)."""
        return self.disk_for(session_id).files is None or self.config.storage.workspaces_shared

    def _cwd(self, session_id: str) -> str:
        disk = self.disk_for(session_id)
        return f"{disk.guest_root}/{disk.workdir}" if disk.workdir else disk.guest_root

    def page(self, cursor: str | None, limit: int) -> tuple[list[LiveSession], str | None]:
        after = decode_cursor(cursor) if cursor else None
        ids = self.store.page(after, limit + 1)
        remote = {row.id: LiveSession(row) for row in self.store.elsewhere([i for i in ids if i not in self.sessions])}
        lives = [live for i in ids if (live := self.sessions.get(i) or remote.get(i)) is not None]
        temporary = [live for live in self.sessions.values() if live.temporary
                     and (after is None or (live.row.created_at, live.row.id) > after)]
        if temporary:  # in memory only, not in the store: merged into its order
            lives = sorted(lives + temporary, key=lambda live: (live.row.created_at, live.row.id))[:limit + 1]
        more = len(lives) > limit
        page = lives[:limit]
        next_cursor = encode_cursor(page[-1].row.created_at, page[-1].row.id) if more and page else None
        return page, next_cursor

    def elsewhere(self, session_ids: list[str]) -> list[LiveSession]:
        """Those of these sessions that live on another node of the cluster, as listed there (their
        state here is their metadata's: no kernel of theirs runs on this node)."""
        return [LiveSession(row) for row in self.store.elsewhere([i for i in session_ids if i not in self.sessions])]

    def live_kernels(self) -> int:
        return sum(len(live.core.kernels) for live in self.sessions.values() if live.core is not None)

    # -- execution ------------------------------------------------------------------------

    async def run(self, live: LiveSession, runner: Runner, request: ExecRequest, *, mode: str,
                  listener: OutputListener | None = None, on_start=None, tools: list[Tool] | None = None,
                  on_approval: Approver | None = None, tool_policy: ToolPolicy | None = None) -> ExecResult:
        """Run in the session: queued behind its earlier calls, then under a gate slot."""
        if live.waiting >= self.config.server.session_queue_size:
            raise overloaded(1, f"{live.waiting} calls are already waiting for session {live.row.id!r}", ErrorCode.SESSION_BUSY)
        Execution.check_provider(runner, request)
        _, session = self.core(live)
        queued_since = time.monotonic() if live.lock.locked() else None  # behind the session's earlier calls
        live.waiting += 1
        try:
            await live.lock.acquire()
        finally:
            live.waiting -= 1
        try:
            if live.deleted:
                raise session_not_found(live.row.id, "it was deleted while this call waited")
            live.hibernated = False
            egress = at_start(request.effective_egress, live.row.egress)
            if egress is not request.egress:
                request = msgspec.structs.replace(request, egress=egress)

            def set_task(task: asyncio.Task | None) -> None:
                live.task = task

            room = await self.rooms.reserve(live.row.id, request.limits.disk_bytes) if self.rooms else None
            session.disk_room = room.room if room is not None else None  # calls of a session run one at a time
            try:
                result = await self.execution.run(session, request, mode=mode, listener=listener,
                                                  on_start=on_start, on_task=set_task, tools=tools,
                                                  on_approval=on_approval, tool_policy=tool_policy,
                                                  queued_since=queued_since)
            finally:
                session.disk_room = None
                if room is not None:
                    await asyncio.shield(room.finish())
        finally:
            live.lock.release()
        row = live.row
        row.executions += 1
        row.last_used_at = time.time()
        if request.command is None and not request.fresh:
            if request.language in live.restored_kernels:
                live.restored_kernels.discard(request.language)
                if not result.kernel_restored and not result.kernel_restarted:  # else the core said what happened
                    result.kernel_restarted = True
                    result.restart_reason = live.lost_kernel_reason
            kernels = session.kernels
            if not set(kernels) <= set(row.kernels):
                row.kernels = sorted({*row.kernels, *kernels})
                # written before the answer: after a crash this session's next turn must say its kernel restarted
                await asyncio.to_thread(self.store.save_many, [row])
        live.dirty = True
        if self.placement is not None:  # stored before it is answered (object storage)
            await self.placement.persist(live)
        return result

    def cancel(self, live: LiveSession) -> bool:
        task = live.task
        if task is None or task.done():
            return False
        task.cancel()
        return True

    async def hibernate(self, live: LiveSession, wait_s: float) -> None:
        """Hibernate the session now, as the sweep does once it idled: its kernels saved with its files
        and dropped, its background processes ended; its next call restores the kernels. Waits up to
        `wait_s` for a worker process to save them. A session running a call is refused (409)."""
        if live.busy:
            raise ApiError(409, ErrorCode.SESSION_BUSY, f"session {live.row.id!r} is running a call",
                           f"wait for it to end, or stop it with POST /v1/sessions/{live.row.id}/cancel")
        core = live.core
        if core is not None:  # (else nothing was ever loaded: nothing to save)
            async with live.lock:
                if live.deleted:  # deleted while this waited for its turn
                    raise session_not_found(live.row.id)
                await asyncio.to_thread(core.hibernate, wait_s)
            self.metrics.sessions_hibernated.inc()
        live.hibernated = True
        log.info("session hibernated on request", extra={"event": "session_hibernated", "session": live.row.id})
        if self.placement is not None:
            await self.placement.release(live)

    # -- removal ----------------------------------------------------------------------------

    async def delete(self, live: LiveSession) -> None:
        await self._remove(live, expired=False)

    async def _remove(self, live: LiveSession, *, expired: bool) -> None:
        if live.deleted:
            return
        live.deleted = True
        self.sessions.pop(live.row.id, None)
        if not live.temporary:
            self.store.delete(live.row.id)
        if self.placement is not None:
            self.placement.removed(live.row.id)
        self.cancel(live)
        async with live.lock:  # the cancelled execution has let go
            runner, session = self.core(live)
            await asyncio.to_thread(session.destroy)
            workspace = session.workspace
            if workspace.files_dir is not None:  # on a disk of a layout: the rest of its directory too
                await asyncio.to_thread(discard_tree, workspace.root)
                if self.disk_for(live.row.id).owned:  # an end user's session root (a member's disk stays)
                    await asyncio.to_thread(discard_tree, workspace.files_dir)
            if live.temporary:  # whatever the core left (its mark, a folder it never used)
                await asyncio.to_thread(discard_tree, self.sessions_dir / live.row.id)
        for observer in self.removal_observers:
            try:
                observer(live.row.id)
            except Exception:
                log.exception("session removal observer failed", extra={"event": "cleanup_failed"})
        if expired:
            self.metrics.sessions_expired.inc()
        log.info("session removed", extra={"event": "session_expired" if expired else "session_deleted",
                                           "session": live.row.id})

    def spawn(self, coro) -> None:
        """Run a coroutine in the background (close() waits for it)."""
        self._spawn(coro)

    def _spawn(self, coro) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def spawn_blocking(self, func, *args) -> None:
        """Run cleanup work on a thread without making the client wait for it (close() waits for it)."""

        def work() -> None:
            try:
                func(*args)
            except Exception:
                log.exception("background cleanup failed", extra={"event": "cleanup_failed"})

        future = asyncio.ensure_future(asyncio.to_thread(work))
        self._background.add(future)
        future.add_done_callback(self._background.discard)

    # -- the sweep -----------------------------------------------------------------------

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(self.policy.sweep_interval_s)
            try:
                await self.sweep()
            except Exception:
                log.exception("session sweep failed", extra={"event": "sweep_failed"})

    async def expire(self, live: LiveSession) -> None:
        """Remove a session at the end of its TTL (one that no node held, found by the placement's sweep)."""
        await self._remove(live, expired=True)

    async def sweep(self) -> None:
        """Hibernate idle kernels, remove expired sessions, write pending metadata; with object storage,
        let the sessions hibernated go (stored, their lease ended: any node wakes them)."""
        now = time.time()
        hibernated: list[LiveSession] = []
        for live in list(self.sessions.values()):
            if live.deleted:
                continue
            if now >= live.row.expires_at:
                await self._remove(live, expired=True)
                continue
            core = live.core
            if live.busy or live.hibernated:
                continue
            if core is not None and core.live_process_count:
                self.touch(live)  # a running background process (a dev server, a terminal) is use
                continue
            if now - live.row.last_used_at >= live.row.idle_timeout_s:
                if core is not None and core.kernels:
                    async with live.lock:
                        if core.live_process_count:  # one started meanwhile: the session is in use again
                            continue
                        await asyncio.to_thread(core.hibernate)
                    self.metrics.sessions_hibernated.inc()
                    log.info("session hibernated", extra={"event": "session_hibernated", "session": live.row.id})
                live.hibernated = True
                hibernated.append(live)
        await self._write_changed()
        if self.placement is not None:
            for live in hibernated:
                try:
                    await self.placement.release(live)
                except ApiError as exc:  # stored later, or taken over meanwhile: kept (or dropped) as it is
                    log.warning("hibernated session not released", extra={
                        "event": "session_not_released", "session": live.row.id, "error": exc.message})

    async def _write_changed(self) -> None:
        """The sweep's batch write, on a thread: thousands of changed sessions take tens of ms,
        which on the event loop would stall every request."""
        with self._changed() as rows:
            await asyncio.to_thread(self.store.save_many, rows)

