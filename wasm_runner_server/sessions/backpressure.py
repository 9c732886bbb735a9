"""Admission control for executions: a bounded number run, a bounded number wait, the rest get 429.

`ExecutionGate.slot()` is the only way an execution starts. Waiters queue by their share (the
caller's workspace, as the access policy's `share_of` names it) and within it by caller (a session;
one-shot runs and batches of a workspace queue as one caller), and are served fairly (`fair_queue`):
a freed slot goes to the share served least recently, so a call of a workspace that has not run lately
waits only for the first slot to free, never behind another workspace's backlog. A workspace may keep
`share_queue_size` calls waiting, and all together `queue_size`; past either bound, or past
`queue_timeout_s` of waiting, the call is answered 429 with Retry-After. A full queue never turns away a
workspace's first waiting call: a flood of one workspace cannot lock the others out.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from wasm_runner_protocol.errors import ErrorCode
from wasm_runner_server.errors import ApiError, overloaded
from wasm_runner_server.sessions.fair_queue import FairQueue

RETRY_HINT = ("retry after the number of seconds in Retry-After; to be answered sooner, send fewer calls at once "
              "(calls of one workspace wait their turn with the other workspaces')")


class ExecutionGate:
    def __init__(self, limit: int, queue_size: int, queue_timeout_s: float,
                 share_of: Callable[[], str] = lambda: "", share_queue_size: int | None = None) -> None:
        self.limit = limit
        self.share_of = share_of
        """Whose turn the calling task queues in (read as the call arrives)."""
        self.queue_size = queue_size
        self.share_queue_size = queue_size if share_queue_size is None else share_queue_size
        self.queue_timeout_s = queue_timeout_s
        self.active = 0
        self._queue: FairQueue[asyncio.Future[None]] = FairQueue()
        self._mean_s = 0.05
        """Moving average of execution time, for Retry-After."""
        self.closed = False

    @property
    def queued(self) -> int:
        return len(self._queue)

    def queued_in(self, share: str) -> int:
        """Calls of `share` waiting for a slot."""
        return self._queue.count(share)

    def retry_after(self, backlog: int | None = None) -> int:
        """Seconds until about `backlog` waiting calls (default: all of them, and this one) have had a slot."""
        ahead = self.queued + 1 if backlog is None else backlog
        return max(1, min(60, math.ceil(ahead / max(self.limit, 1) * self._mean_s)))

    @asynccontextmanager
    async def slot(self, caller: str = "") -> AsyncIterator[float | None]:
        """Hold an execution slot for `caller` (a session id; "" for one-shot runs) of the current share;
        yields the seconds spent queued for it (None: one was free)."""
        started = time.monotonic()
        queued = await self._acquire(caller)
        waited = time.monotonic() - started if queued else None
        began = time.monotonic()
        try:
            yield waited
        finally:
            elapsed = time.monotonic() - began
            self._mean_s = 0.9 * self._mean_s + 0.1 * elapsed
            self._release()

    async def _acquire(self, caller: str) -> bool:
        """Take a slot; True if the call had to queue for it."""
        if self.closed:
            raise ApiError(503, ErrorCode.SHUTTING_DOWN, "the server is shutting down", "retry on another instance")
        share = self.share_of()
        if self.active < self.limit and not self._queue:
            self.active += 1
            self._queue.served(share, caller)
            return False
        self._admit(share)
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.push(share, caller, waiter)
        try:
            await asyncio.wait_for(asyncio.shield(waiter), self.queue_timeout_s)
        except (TimeoutError, asyncio.CancelledError) as exc:
            if waiter.done() and not waiter.cancelled():
                self._release()  # the slot arrived as we gave up: pass it on
            else:
                waiter.cancel()
                self._queue.remove(share, caller, waiter)
            if isinstance(exc, asyncio.TimeoutError):
                raise overloaded(self.retry_after(),
                                 f"no execution slot became free within {self.queue_timeout_s:g} s",
                                 ErrorCode.OVERLOADED, RETRY_HINT) from None
            raise
        return True

    def _admit(self, share: str) -> None:
        """Refuse (429) a call of `share` that may not queue: its workspace's bound, or the whole queue's
        (except for a workspace with nothing waiting)."""
        mine = self._queue.count(share)
        if mine >= self.share_queue_size:
            backlog = min(self.queued, (mine + 1) * max(self._queue.shares(), 1)) + 1
            raise overloaded(self.retry_after(backlog),
                             f"all {self.limit} execution slots are busy and {mine} executions of this workspace "
                             f"are already waiting (at most {self.share_queue_size} may)", ErrorCode.OVERLOADED, RETRY_HINT)
        if self.queued >= self.queue_size and (mine > 0 or self.queue_size == 0):
            raise overloaded(self.retry_after(),
                             f"all {self.limit} execution slots are busy and {self.queued} executions are waiting",
                             ErrorCode.OVERLOADED, RETRY_HINT)

    def close(self) -> None:
        """Refuse new executions and turn away the waiting ones (shutdown)."""
        self.closed = True
        while (next_up := self._queue.pop()) is not None:
            waiter = next_up[2]
            if not waiter.done():
                waiter.set_exception(ApiError(503, ErrorCode.SHUTTING_DOWN, "the server is shutting down",
                                              "retry on another instance"))

    def _release(self) -> None:
        while (next_up := self._queue.pop()) is not None:
            waiter = next_up[2]
            if not waiter.done():
                waiter.set_result(None)  # the slot moves to the waiter; `active` is unchanged
                return
        self.active -= 1
