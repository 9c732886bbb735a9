"""Disk room for writes made through the API: reserved before the bytes are written.

A write holds a reservation against its session's limit (limits.disk_bytes of the session's
profile) and one against its workspace's quota (auth.quotas.disk_bytes, sessions plus
shared/). Each measures usage first, then reserves under the ledger's lock as bytes arrive,
so concurrent writers (uploads, presigned PUTs, edits) cannot together pass a limit.
Usage that cannot be measured refuses the write.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from wasm_runner.workspace import files as wf
from wasm_runner.workspace.file_errors import NoSuchFileError, NotDirectoryError
from wasm_runner.workspace.history import HISTORY_DIR
from wasm_runner.workspace.layout import tree_usage
from wasm_runner.workspace.quota import DiskLedger, QuotaExceeded, Reservation
from wasm_runner_protocol.errors import ErrorCode
from wasm_runner_server.errors import ApiError
from wasm_runner_server.sessions.run_disk import WORKSPACE_SCOPE

SESSION_SCOPE = "session:"

WorkspaceMeasure = Callable[[], Awaitable[tuple[int, float]]]
"""(bytes used by a workspace, time.monotonic() of that measurement)."""


def unmeasurable(what: str, exc: BaseException) -> ApiError:
    return ApiError(413, ErrorCode.QUOTA_UNMEASURABLE, f"the disk usage of {what} cannot be measured ({exc}), "
                    "so nothing more is written", "delete the tree that cannot be measured (a recursive DELETE "
                    "works at any depth), then retry")


class WriteBudget:
    """The reservations of one write; `take(n)` before writing n bytes (ApiError 413 past a limit)."""

    def __init__(self, path: str, reservations: list[tuple[Reservation, str]]) -> None:
        self.path = path
        self._reservations = reservations
        self._prepaid = 0

    def room(self) -> int | None:
        """The most this write could still take; None when nothing limits it."""
        rooms = [reservation.room() for reservation, _ in self._reservations]
        return min(rooms) if rooms else None

    def take_upfront(self, n: int) -> None:
        """Reserve a size announced in advance (Content-Length); later `take`s use it first."""
        self.take(n)
        self._prepaid += n

    def take(self, n: int) -> None:
        prepaid = min(self._prepaid, n)
        self._prepaid -= prepaid
        n -= prepaid
        if n <= 0:
            return
        taken: list[Reservation] = []
        try:
            for reservation, _ in self._reservations:
                reservation.take(n)
                taken.append(reservation)
        except QuotaExceeded as exc:
            for reservation in taken:  # all or none: give back what the other limits granted
                reservation.give_back(n)
            raise self._refusal(exc) from None

    def _refusal(self, exc: QuotaExceeded) -> ApiError:
        what = next(w for r, w in self._reservations if r.scope == exc.scope)
        return ApiError(413, ErrorCode.QUOTA_EXCEEDED, f"writing {self.path!r} would pass {what} ({exc.limit} bytes; "
                        f"{exc.room} bytes left)", "delete files first, or ask for a larger quota")

    def commit(self) -> None:
        for reservation, _ in self._reservations:
            reservation.commit()

    def release(self) -> None:
        for reservation, _ in self._reservations:
            reservation.release()

    def __enter__(self) -> WriteBudget:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()  # a no-op after commit


async def reserve(ledger: DiskLedger, path: str, *, credit: int = 0,
                  session: tuple[str, int, Callable[[], int]] | None = None,
                  workspace: tuple[str, int, WorkspaceMeasure] | None = None) -> WriteBudget:
    """Reservations for writing `path`: against `session` (id, limit, blocking measure) and
    `workspace` (name, quota, async measure); `credit` is the size of the file it replaces."""
    reservations: list[tuple[Reservation, str]] = []
    try:
        if session is not None:
            session_id, limit, measure = session
            measured_at = time.monotonic()
            try:
                used = await asyncio.to_thread(measure)
            except OSError as exc:
                raise unmeasurable("the session", exc) from None
            reservations.append((ledger.reserve(SESSION_SCOPE + session_id, limit, used - credit, measured_at),
                                 "the session's disk limit"))
        if workspace is not None:
            name, quota, measure_workspace = workspace
            try:
                used, measured_at = await measure_workspace()
            except OSError as exc:
                raise unmeasurable("the workspace", exc) from None
            reservations.append((ledger.reserve(WORKSPACE_SCOPE + name, quota, used - credit, measured_at),
                                 "the workspace's disk quota"))
    except BaseException:
        for reservation, _ in reservations:
            reservation.release()
        raise
    return WriteBudget(path, reservations)


def existing_size(files: wf.WorkspaceFiles, path: str) -> int | None:
    """The size of the regular file a write would replace; None when it would create one."""
    try:
        info = files.stat(path)
    except (NoSuchFileError, NotDirectoryError):
        return None
    return info.size if info.type == "file" else 0


CACHE_S = 2.0
"""How long a measurement of a workspace's sessions stands: walking every session of a
workspace for each write would cost more than the writes; the ledger covers what it misses."""


class WorkspaceDisk:
    """A workspace's disk usage: its sessions' directories plus its own directory (shared/).

    `measure` is cached for CACHE_S; the ledger's reservations cover what a cached figure misses
    (API writes, and the room each run holds: sessions.run_disk)."""

    def __init__(self, data_dir: Path, quota: int, sessions_of: Callable[[str], list[str]],
                 ledger: DiskLedger, stored: Callable[[list[str]], dict[str, int]] | None = None,
                 templates: Callable[[str], int] | None = None, workspaces: Path | None = None) -> None:
        self.data_dir = data_dir
        self.workspaces = workspaces if workspaces is not None else data_dir / "workspaces"
        """Where each workspace's own directory is (StorageSettings.workspaces_dir)."""
        self.quota = quota
        self.sessions_of = sessions_of
        self.ledger = ledger
        self.stored = stored
        """A cluster's: the bytes stored for sessions whose directory is not on this node (held by another
        node, or let go), by their last stored generation."""
        self.templates = templates
        """A cluster's: the bytes of a workspace's templates (stored beyond the nodes, not in its directory)."""
        self._lock = threading.Lock()
        self._sessions: dict[str, tuple[float, int]] = {}
        self._sizes: dict[str, dict[str, int]] = {}
        """Each session's bytes at the last walk, by workspace and session id."""
        self._changed: dict[str, set[str]] = {}
        """Sessions whose guest ran since: measured again, alone, on the next ask."""
        self._totals: dict[str, tuple[float, int]] = {}

    def own_dir(self, workspace: str) -> Path:
        return self.workspaces / workspace

    def sessions_usage(self, workspace: str) -> tuple[int, float]:
        """(bytes of the workspace's sessions, when measured). A whole walk stands for CACHE_S;
        within it, only the sessions whose guest ran since are measured again (a guest writes
        in its own session, never in another's)."""
        now = time.monotonic()
        with self._lock:
            cached, sizes = self._sessions.get(workspace), self._sizes.get(workspace)
            changed = self._changed.pop(workspace, set())
        if cached is not None and sizes is not None and now - cached[0] < CACHE_S:
            if not changed:
                return cached[1], cached[0]
            fresh = {s: self._session_usage(s) for s in changed}
            with self._lock:
                sizes.update(fresh)
                used = sum(sizes.values())
                self._sessions[workspace] = (cached[0], used)
            return used, cached[0]
        sizes = self._usages(self.sessions_of(workspace))
        used = sum(sizes.values())
        with self._lock:
            self._sessions[workspace], self._sizes[workspace] = (now, used), sizes
        return used, now

    def _usages(self, session_ids: list[str]) -> dict[str, int]:
        """Each session's bytes: measured here for those on this node, as stored for the others."""
        here = [s for s in session_ids if self._session_dir(s).is_dir()]
        sizes = {s: self._session_usage(s) for s in here}
        away = [s for s in session_ids if s not in sizes]
        if away and self.stored is not None:
            sizes.update(self.stored(away))
        return sizes

    def _session_dir(self, session_id: str) -> Path:
        return self.data_dir / "sessions" / session_id

    def _session_usage(self, session_id: str) -> int:
        """A session's bytes but its file history, which the host keeps within its own bounds
        ([history]) and which deleting files could not free."""
        root = self._session_dir(session_id)
        return tree_usage([root])[0] - tree_usage([root / HISTORY_DIR])[0]

    def measure(self, workspace: str) -> tuple[int, float]:
        """(bytes held by the workspace, when measured); raises OSError when it cannot be measured."""
        with self._lock:
            cached = self._totals.get(workspace)
        now = time.monotonic()
        if cached is not None and now - cached[0] < CACHE_S:
            return cached[1], cached[0]
        sessions, sessions_at = self.sessions_usage(workspace)
        used = sessions + tree_usage([self.own_dir(workspace)])[0]
        if self.templates is not None:
            used += self.templates(workspace)
        measured_at = min(now, sessions_at)
        with self._lock:
            self._totals[workspace] = (measured_at, used)
        return used, measured_at

    def forget(self, workspace: str, session_id: str | None) -> None:
        """An execution just ended: shared/ (in the totals) is measured afresh next time, and the
        session it ran in, if any; the other sessions' sizes stand (a guest writes in its own
        session and shared/ only; a one-shot's scratch directory is not the workspace's)."""
        with self._lock:
            self._totals.pop(workspace, None)
            if session_id is not None:
                self._changed.setdefault(workspace, set()).add(session_id)

    async def measure_async(self, workspace: str) -> tuple[int, float]:
        return await asyncio.to_thread(self.measure, workspace)
