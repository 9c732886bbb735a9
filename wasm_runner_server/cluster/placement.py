"""Where a session is served, and what survives its node: leases, takeovers, stored calls.

With object storage (`[storage] kind = "s3"`), what a request to a session changed (its files and
its kernels' images) is stored before the request is answered (`persist`): uploaded as a new
generation, then committed in PostgreSQL under the node's lease epoch (`Leases.commit`). A request
for a session another node holds is answered 421 while that node's lease is live; once it expired,
the node the request reached claims the lease (epoch + 1), restores the last committed generation
and serves the request (`adopt`). A node that lost a session (paused past its lease, then back)
finds its commit refused: the request's changes are discarded, the session is dropped here, and the
client gets 421 naming the new node, never a success.

A taker skips one generation: the one a paused owner may still be writing when it comes back (its
manifest may land, its commit cannot), so the taker's own manifests never collide with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING

from wasm_runner.workspace.layout import discard_tree
from wasm_runner_protocol.errors import ErrorCode
from wasm_runner_server.cluster import moved_processes
from wasm_runner_server.cluster.leases import Leases
from wasm_runner_server.errors import ApiError
from wasm_runner_server.metrics import Counter, Histogram
from wasm_runner_server.sessions.manager import SESSION_ID
from wasm_runner_server.storage import GenerationTaken, SessionStorage, StorageError
from wasm_runner_server.storage.sessions import RESTORE_LEFTOVERS

if TYPE_CHECKING:
    from wasm_runner_server.sessions.manager import LiveSession, SessionManager

log = logging.getLogger("wasm_runner.server")

DRAIN_POLL_S = 0.02
"""How often a drain looks again at a session still busy (its lock is asyncio's: no wait for "unlocked")."""
COLLECT_EVERY = 16
"""Every this many generations stored, what the older ones alone needed is deleted (storage.collect)."""


def moved(session_id: str, node: str | None, what: str = "") -> ApiError:
    where = f"node {node!r}" if node else "another node"
    return ApiError(421, ErrorCode.SESSION_ON_OTHER_NODE,
                    f"session {session_id!r} moved to {where}{what}",
                    f"send its calls to {where}")


def storage_unavailable(session_id: str, exc: Exception) -> ApiError:
    return ApiError(503, ErrorCode.STORAGE_UNAVAILABLE,
                    f"the session storage failed for session {session_id!r}: {exc}; this request's changes were "
                    "not stored", "retry after the number of seconds in Retry-After", {"Retry-After": "1"})


class Placement:
    """The sessions of one node under leases, stored in object storage (see the module's docstring)."""

    def __init__(self, manager: SessionManager, storage: SessionStorage, leases: Leases | None,
                 checkpoint_s: float | None = None) -> None:
        self.manager = manager
        self.storage = storage
        self.leases = leases
        """None: a node alone (SQLite), whose sessions never move; its calls are still stored."""
        self._adopting: dict[str, asyncio.Lock] = {}
        self._renewer: asyncio.Task | None = None
        self._checkpointer: asyncio.Task | None = None
        self.checkpoint_s = checkpoint_s
        """None: every request's changes are stored before it is answered (`call`)."""
        metrics = manager.metrics
        self.takeovers = Counter("wasm_runner_session_takeovers_total",
                                 "Sessions this node took over from a node whose lease had expired.")
        self.lost = Counter("wasm_runner_session_leases_lost_total",
                            "Sessions this node found taken over by another (its writes refused).")
        self.stored = Counter("wasm_runner_session_generations_stored_total",
                              "Generations of sessions stored in object storage.")
        self.storage_errors = Counter("wasm_runner_storage_errors_total", "Failed saves or restores of sessions.")
        self.uploaded = Counter("wasm_runner_storage_uploaded_bytes_total",
                                "Bytes of sessions' chunks sent to object storage (what changed since it was stored).")
        self.released = Counter("wasm_runner_sessions_released_total",
                                "Hibernated sessions this node stored and let go (any node wakes them).")
        self.restore_seconds = Histogram("wasm_runner_session_restore_duration_seconds",
                                         "Restores of sessions taken over (files and kernel images fetched).")
        self.store_seconds = Histogram("wasm_runner_session_store_duration_seconds",
                                       "Stores of what a request changed (kernel images, chunks, manifest, commit).")
        for metric in (self.takeovers, self.lost, self.stored, self.storage_errors, self.uploaded, self.released,
                       self.restore_seconds, self.store_seconds):
            metrics.gauges.append(metric)
        metrics.gauge("wasm_runner_session_leases_held", "Sessions whose lease this node holds.",
                      lambda: sum(1 for live in manager.sessions.values() if live.epoch))

    @property
    def lease_s(self) -> float:
        return self.leases.lease_s if self.leases is not None else 0.0

    # -- start and stop -----------------------------------------------------------------------

    async def start(self) -> None:
        """Claim this node's sessions again (a restart: a new epoch; their directories restored from
        storage where this node lost them), then renew the leases every third of their length."""
        if self.checkpoint_s is not None and self.storage.durable:
            self._checkpointer = asyncio.create_task(self._checkpoint_forever(), name="wasm-runner-checkpoints")
        leases = self.leases
        if leases is None:
            return
        manager = self.manager
        for live in list(manager.sessions.values()):
            lease = await asyncio.to_thread(leases.claim, live.row.id, released=False)
            if lease is None:  # another node holds it now, or it was let go: it wakes where it is asked for
                manager.sessions.pop(live.row.id, None)
                continue
            self._hold(live, lease.epoch, lease.generation + 1, time.monotonic())
            root = manager.sessions_dir / live.row.id
            if lease.generation and not root.exists():
                await asyncio.to_thread(self.storage.restore, live.row.id, root, lease.generation)
        if self.storage.durable:
            await asyncio.to_thread(self._drop_stale_copies)
        self._renewer = asyncio.create_task(self._renew_forever(), name="wasm-runner-leases")

    def _drop_stale_copies(self) -> None:
        """Remove the directories of sessions this node no longer holds: taken over while it was away
        (their stored generations are theirs now), or a restore a crash cut short."""
        manager = self.manager
        if not manager.sessions_dir.is_dir():
            return
        for path in manager.sessions_dir.iterdir():
            stale = SESSION_ID.fullmatch(path.name) is not None and path.name not in manager.sessions
            if stale or path.name.startswith(RESTORE_LEFTOVERS):
                log.info("stale session copy removed", extra={"event": "session_copy_removed", "path": path.name})
                discard_tree(path)

    async def drain(self, within_s: float) -> None:
        """At shutdown: hibernate and let go the sessions this node holds (stored, leases ended), so that
        other nodes wake them at once rather than after their leases run out. What is not done within
        `within_s` (a call still running) keeps its lease, and is taken over once it runs out."""
        if self.leases is None or not self.storage.durable:
            return
        held = [live for live in self.manager.sessions.values()
                if live.epoch and not (live.temporary or live.moved or live.deleted)]

        async def let_go(live: LiveSession) -> None:
            while live.busy:  # the end of a call, a sweep or a checkpoint that holds it now: within the bound
                await asyncio.sleep(DRAIN_POLL_S)
            try:
                await self.manager.hibernate(live, within_s)
            except Exception as exc:  # noqa: BLE001 - one session's failure leaves it to a takeover
                log.warning("session not let go at shutdown", extra={"event": "session_not_released",
                                                                     "session": live.row.id, "error": str(exc)})

        try:
            await asyncio.wait_for(asyncio.gather(*(let_go(live) for live in held)), within_s)
        except TimeoutError:
            log.warning("drain unfinished", extra={"event": "drain_timeout", "within_s": within_s})

    async def close(self) -> None:
        for task in (self._renewer, self._checkpointer):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if self.leases is not None:
            self.leases.close()
        await asyncio.to_thread(self.storage.close)

    # -- a session's life ---------------------------------------------------------------------

    def created(self, live: LiveSession) -> None:
        """A session made on this node: its first lease (before its creation is answered). A temporary
        session has none: it lives in this node's memory only and is never stored."""
        if self.leases is not None and not live.temporary:
            lease = self.leases.create(live.row.id)
            self._hold(live, lease.epoch, lease.generation, time.monotonic())

    def removed(self, session_id: str) -> None:
        """A session deleted or expired: its lease and its stored generations go too (the latter on a thread)."""
        if self.leases is not None:
            self.leases.delete(session_id)
        if self.storage.durable:
            self.manager.spawn_blocking(self.storage.remove, session_id)

    def _hold(self, live: LiveSession, epoch: int, generation: int, since: float) -> None:
        live.epoch, live.generation, live.lease_until = epoch, generation, since + self.lease_s

    # -- serving ------------------------------------------------------------------------------

    async def adopt(self, session_id: str) -> None:
        """Before a request for `session_id` is served here: if another node's lease on it expired, take
        it over (claim, restore, serve); if this node's own lease may have lapsed, confirm it (421 if it
        was taken meanwhile). Nothing to do for a session this node holds, or one that is not there."""
        leases, manager = self.leases, self.manager
        if leases is None:
            return
        live = manager.sessions.get(session_id)
        if live is not None:
            if not live.deleted and time.monotonic() >= live.lease_until - self.lease_s / 3:
                await self._confirm(live)
            return
        lock = self._adopting.setdefault(session_id, asyncio.Lock())
        try:
            async with lock:
                if session_id not in manager.sessions:
                    await self._take_over(session_id)
        finally:
            if not lock.locked() and self._adopting.get(session_id) is lock:
                del self._adopting[session_id]

    async def _take_over(self, session_id: str) -> None:
        leases, manager = self.leases, self.manager
        assert leases is not None
        # whichever node the row names: this one too, when an earlier takeover's restore failed
        row = await asyncio.to_thread(leases.session, session_id)
        if row is None or time.time() >= row.expires_at:
            return  # not a session (or an expired one): the route answers as usual
        since = time.monotonic()
        lease = await asyncio.to_thread(leases.claim, session_id)
        if lease is None:
            return  # its node's lease is live: the route answers 421 naming it
        started = time.perf_counter()
        try:
            stats = await asyncio.to_thread(self.storage.restore, session_id, manager.sessions_dir / session_id,
                                            lease.generation)
        except (StorageError, OSError, ValueError) as exc:
            self.storage_errors.inc()
            log.exception("session restore failed", extra={"event": "session_restore_failed", "session": session_id})
            raise storage_unavailable(session_id, exc) from None
        self.restore_seconds.observe(time.perf_counter() - started)
        before = row.node
        live = manager.adopted(row, leases.node)
        live.ended_elsewhere = await asyncio.to_thread(moved_processes.ended_with, manager.sessions_dir / session_id,
                                                       before, leases.node)
        # the generation after the last committed one may still be written by the node this one replaced
        self._hold(live, lease.epoch, lease.generation + 1, since)
        self.takeovers.inc()
        log.info("session taken over", extra={
            "event": "session_taken_over", "session": session_id, "epoch": lease.epoch,
            "generation": lease.generation, "files": stats.files, "bytes": stats.bytes_uploaded,
            "ms": round((time.perf_counter() - started) * 1000, 3)})

    async def _confirm(self, live: LiveSession) -> None:
        assert self.leases is not None
        since = time.monotonic()
        held = await asyncio.to_thread(self.leases.renew, {live.row.id: live.epoch})
        if live.row.id in held:
            live.lease_until = since + self.lease_s
            return
        self._lose(live)
        raise moved(live.row.id, await self._holder(live.row.id))

    async def persist(self, live: LiveSession, now: bool = False) -> None:
        """Store what the last request changed before it is answered (the session's files and its live
        kernels' images): a new generation, committed under this node's epoch. 421 if the session was
        taken over meanwhile (the changes are discarded), 503 if the storage failed. With `checkpoint`
        durability, the session is only marked, and stored by the next checkpoint (or `now`)."""
        if not self.storage.durable or live.deleted or live.temporary:  # a temporary session leaves no trace
            return
        if self.checkpoint_s is not None and not now:
            if live.unstored_since is None:
                live.unstored_since = time.monotonic()
            return
        manager = self.manager
        async with live.lock:  # no call changes the directory while it is stored
            if live.deleted:
                return
            if live.moved:
                raise moved(live.row.id, await self._holder(live.row.id))
            session = live.core
            if session is None:
                return  # nothing was loaded, so nothing changed
            generation = live.generation + 1
            started = time.perf_counter()
            try:
                refused = await asyncio.to_thread(session.save_kernels)
                await asyncio.to_thread(moved_processes.record, session.workspace.root, live.ended_elsewhere, session)
                if refused:
                    log.info("kernel not stored", extra={"event": "kernel_not_stored", "session": live.row.id,
                                                         "why": refused})
                stats = await asyncio.to_thread(self.storage.save, live.row.id, session.workspace.root,
                                                generation=generation, epoch=live.epoch, node=manager.store.node)
            except GenerationTaken:
                committed = False
            except (StorageError, OSError) as exc:
                self.storage_errors.inc()
                log.exception("session store failed", extra={"event": "session_store_failed",
                                                             "session": live.row.id})
                raise storage_unavailable(live.row.id, exc) from None
            else:
                since = time.monotonic()
                committed = self.leases is None or await asyncio.to_thread(
                    self.leases.commit, live.row.id, live.epoch, generation, stats.stored_bytes)
            if committed:
                self.store_seconds.observe(time.perf_counter() - started)
                live.unstored_since = None
                live.generation = generation
                if generation % COLLECT_EVERY == 0:  # the older generations' manifests and chunks, on a thread
                    manager.spawn_blocking(self.storage.collect, live.row.id, generation)
                if self.leases is not None:
                    live.lease_until = since + self.lease_s
                self.stored.inc()
                self.uploaded.inc(amount=stats.bytes_uploaded)
                log.debug("session stored", extra={"event": "session_stored", "session": live.row.id,
                                                   "generation": generation, "bytes": stats.bytes_uploaded})
                return
        self._lose(live)
        raise moved(live.row.id, await self._holder(live.row.id),
                    ": this node lost its lease before the request's changes were stored, and they are discarded")

    async def release(self, live: LiveSession) -> bool:
        """Let a hibernated session go: what it holds stored, its lease ended at once and its copy here
        dropped, so that its next request wakes it on whichever node it reaches (a takeover that waits
        for no lease). Not a session on a member's disk that is this node's own (`SessionManager.movable`)."""
        leases = self.leases
        if (leases is None or not self.storage.durable or live.temporary or live.deleted or live.moved
                or live.busy or not self.manager.movable(live.row.id)):
            return False
        await self.persist(live, now=True)
        async with live.lock:
            if live.waiting or live.deleted or live.moved or not live.hibernated:
                return False  # a call came meanwhile: the session stays
            if not await asyncio.to_thread(leases.release, live.row.id, live.epoch):
                self._lose(live)
                return False
            live.moved = True  # no call runs here any more
            if self.manager.sessions.get(live.row.id) is live:
                del self.manager.sessions[live.row.id]
        self.storage.forget(live.row.id)
        self.released.inc()
        log.info("session released", extra={"event": "session_released", "session": live.row.id,
                                            "generation": live.generation})
        self.manager.spawn(self.manager.drop_moved(live))
        return True

    def stored_bytes(self, session_ids: list[str]) -> dict[str, int]:
        """The bytes of these sessions' last stored generations (a workspace's disk quota counts them for the
        sessions not on this node)."""
        return self.leases.stored_bytes(session_ids) if self.leases is not None else {}

    async def sweep_expired(self) -> None:
        """Remove the sessions past their TTL that no node holds (let go when they hibernated, or left by
        a node that died): claimed first, so that one node removes each."""
        leases = self.leases
        assert leases is not None
        for session_id in await asyncio.to_thread(leases.expired_unheld):
            row = await asyncio.to_thread(leases.session, session_id)
            if row is None or await asyncio.to_thread(leases.claim, session_id) is None:
                continue
            await self.manager.expire(self.manager.adopted(row, leases.node))

    async def _holder(self, session_id: str) -> str | None:
        if self.leases is None:
            return None
        holder = await asyncio.to_thread(self.leases.holder, session_id)
        return holder.node if holder is not None else None

    def _lose(self, live: LiveSession) -> None:
        """The session went to another node: drop it here (kernels unsaved, local files removed)."""
        if live.moved:
            return
        live.moved = True
        if self.manager.sessions.get(live.row.id) is live:  # from now on, requests learn where it went
            del self.manager.sessions[live.row.id]
        self.lost.inc()
        self.storage.forget(live.row.id)
        log.warning("session lease lost", extra={"event": "session_lease_lost", "session": live.row.id,
                                                 "epoch": live.epoch})
        self.manager.spawn(self.manager.drop_moved(live))  # once the call holding it (if any) has let go

    # -- checkpoints and renewal ---------------------------------------------------------------

    async def _checkpoint_forever(self) -> None:
        """Store the sessions whose answered changes have waited a checkpoint interval (`checkpoint`)."""
        assert self.checkpoint_s is not None
        while True:
            await asyncio.sleep(min(self.checkpoint_s / 4, 1.0))
            due = time.monotonic() - self.checkpoint_s
            for live in list(self.manager.sessions.values()):
                if live.unstored_since is not None and live.unstored_since <= due and not live.moved:
                    try:
                        await self.persist(live, now=True)
                    except ApiError as exc:  # taken over, or the storage failed: said in the log, retried
                        log.warning("checkpoint failed", extra={"event": "checkpoint_failed", "session": live.row.id,
                                                                "error": exc.message})
                    except Exception:
                        log.exception("checkpoint failed", extra={"event": "checkpoint_failed",
                                                                  "session": live.row.id})

    async def _renew_forever(self) -> None:
        swept = time.monotonic()
        while True:
            await asyncio.sleep(self.lease_s / 3)
            try:
                await self.renew()
            except Exception:
                log.exception("lease renewal failed", extra={"event": "lease_renewal_failed"})
            if time.monotonic() - swept >= self.manager.policy.sweep_interval_s:
                swept = time.monotonic()
                try:
                    await self.sweep_expired()
                except Exception:
                    log.exception("sweep of unheld sessions failed", extra={"event": "sweep_failed"})

    async def renew(self) -> None:
        assert self.leases is not None
        held = {live.row.id: live.epoch for live in self.manager.sessions.values() if live.epoch and not live.moved}
        since = time.monotonic()
        kept = await asyncio.to_thread(self.leases.renew, held)
        for session_id in held:
            live = self.manager.sessions.get(session_id)
            if live is None:
                continue
            if session_id in kept:
                live.lease_until = since + self.lease_s
            elif not live.deleted:
                self._lose(live)
