"""Room under a workspace's disk quota, reserved for a session's run (or background process)
while it runs, the way an API write reserves its bytes.

A run may add at most the least of its `limits.disk_bytes` and the room its workspace has
left: that much is reserved in the service's `DiskLedger` when it starts (so concurrent runs,
processes and writes of one workspace cannot together pass its quota) and handed to the core
as `Session.disk_room`, whose quota watcher stops the run past it. When the run ends, the
reservation shrinks to what the workspace grew by and is committed: measurements taken before
count those bytes until a fresh one sees them on disk.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from wasm_runner.workspace.quota import DiskLedger, QuotaExceeded, Reservation

log = logging.getLogger("wasm_runner.server")

WORKSPACE_SCOPE = "workspace:"
"""The ledger's scope of a workspace's quota (the one API writes reserve against)."""

QuotaOf = Callable[[str], "tuple[str, int, Callable[[], Awaitable[tuple[int, float]]]] | None"]
"""A session's workspace quota: (workspace, quota bytes, async measure -> (bytes, when)), or None."""


class RunRoom:
    """The room one run holds; `room` is what it may add (handed to the core)."""

    def __init__(self, reservation: Reservation | None, room: int, used: int,
                 measure: Callable[[], Awaitable[tuple[int, float]]] | None,
                 changed: Callable[[], None]) -> None:
        self.reservation = reservation
        self.room = room
        self.used = used
        self._measure = measure
        self._changed = changed

    async def finish(self) -> None:
        """The run ended: keep counting what it added, give back the rest."""
        self._changed()  # its session and shared/ are measured afresh from now on
        reservation = self.reservation
        if reservation is None:
            return
        grown = self.room
        if self._measure is not None:
            try:
                after, _ = await self._measure()
                grown = min(max(after - self.used, 0), self.room)
            except OSError:  # cannot tell: the whole room keeps counting until a fresh measurement
                log.warning("could not measure a workspace after a run", exc_info=True)
        reservation.give_back(self.room - grown)
        reservation.commit()

    def finish_now(self) -> None:
        """`finish` from a thread with no event loop: the whole room is committed (counted until
        a fresh measurement sees the files)."""
        self._changed()
        if self.reservation is not None:
            self.reservation.commit()


class RunRooms:
    """Reserves each run's room against its session's workspace quota."""

    def __init__(self, ledger: DiskLedger, quota_of: QuotaOf, changed: Callable[[str], None]) -> None:
        self.ledger = ledger
        self.quota_of = quota_of
        self.changed = changed

    async def reserve(self, session_id: str, disk_bytes: int) -> RunRoom:
        """The room for one run of `session_id` under `disk_bytes`; room 0 when the workspace
        is full or cannot be measured (the run may still run, delete and rewrite, not grow)."""
        quota = self.quota_of(session_id)
        changed = lambda: self.changed(session_id)  # noqa: E731 - a one-line callback
        if quota is None:
            return RunRoom(None, disk_bytes, 0, None, changed)
        workspace, limit, measure = quota
        try:
            used, measured_at = await measure()
        except OSError:
            log.warning("could not measure workspace %s before a run; it may not grow", workspace, exc_info=True)
            return RunRoom(None, 0, 0, None, changed)
        reservation = self.ledger.reserve(WORKSPACE_SCOPE + workspace, limit, used, measured_at)
        wanted = min(disk_bytes, reservation.room())
        while wanted > 0:
            try:
                reservation.take(wanted)
                break
            except QuotaExceeded as exc:  # another reservation came first: what is left (strictly less)
                wanted = min(wanted, exc.room)
        return RunRoom(reservation, max(wanted, 0), used, measure, changed)
