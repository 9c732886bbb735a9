"""Admission control for executions: a bounded number run, a bounded number wait, the rest get 429.

`ExecutionGate.slot()` is the only way an execution starts. Waiters queue by their share (the
caller's workspace, as the access policy's `share_of` names it) and the shares are served in turn: a slot
freed by a finishing execution goes to the head of the share served least recently, so one
workspace's flood of calls delays another's call by at most one slot, never by its whole backlog.
Within a share, calls are served in arrival order, and a newcomer never overtakes a waiter.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from wasm_runner_protocol.errors import ErrorCode
from wasm_runner_server.errors import ApiError, overloaded


class ExecutionGate:
    def __init__(self, limit: int, queue_size: int, queue_timeout_s: float,
                 share_of: Callable[[], str] = lambda: "") -> None:
        self.limit = limit
        self.share_of = share_of
        """Whose turn the calling task queues in (read when it has to queue)."""
        self.queue_size = queue_size
        self.queue_timeout_s = queue_timeout_s
        self.active = 0
        self._shares: OrderedDict[str, deque[asyncio.Future[None]]] = OrderedDict()
        """Waiters by share, the share to serve next first."""
        self._queued = 0
        self._mean_s = 0.05
        """Moving average of execution time, for Retry-After."""
        self.closed = False

    @property
    def queued(self) -> int:
        return self._queued

    def retry_after(self) -> int:
        backlog = (self._queued + 1) / max(self.limit, 1)
        return max(1, min(60, math.ceil(backlog * self._mean_s)))

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[float | None]:
        """Hold an execution slot; yields the seconds spent queued for it (None: one was free)."""
        started = time.monotonic()
        queued = await self._acquire()
        waited = time.monotonic() - started if queued else None
        began = time.monotonic()
        try:
            yield waited
        finally:
            elapsed = time.monotonic() - began
            self._mean_s = 0.9 * self._mean_s + 0.1 * elapsed
            self._release()

    async def _acquire(self) -> bool:
        """Take a slot; True if the call had to queue for it."""
        if self.closed:
            raise ApiError(503, ErrorCode.SHUTTING_DOWN, "the server is shutting down", "retry on another instance")
        if self.active < self.limit and not self._queued:
            self.active += 1
            return False
        if self._queued >= self.queue_size:
            raise overloaded(self.retry_after(),
                             f"all {self.limit} execution slots are busy and {self.queue_size} executions are waiting")
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        share = self.share_of()
        self._shares.setdefault(share, deque()).append(waiter)
        self._queued += 1
        try:
            await asyncio.wait_for(asyncio.shield(waiter), self.queue_timeout_s)
        except (TimeoutError, asyncio.CancelledError) as exc:
            if waiter.done() and not waiter.cancelled():
                self._release()  # the slot arrived as we gave up: pass it on
            else:
                waiter.cancel()
                self._forget(share, waiter)
            if isinstance(exc, asyncio.TimeoutError):
                raise overloaded(self.retry_after(),
                                 f"no execution slot became free within {self.queue_timeout_s:g} s") from None
            raise
        return True

    def _forget(self, share: str, waiter: asyncio.Future[None]) -> None:
        waiters = self._shares.get(share)
        if waiters is not None and waiter in waiters:
            waiters.remove(waiter)
            self._queued -= 1
            if not waiters:
                del self._shares[share]

    def _next_waiter(self) -> asyncio.Future[None] | None:
        """The head of the share whose turn it is; that share then goes to the back of the turn."""
        while self._shares:
            share, waiters = next(iter(self._shares.items()))
            waiter = waiters.popleft()
            self._queued -= 1
            if waiters:
                self._shares.move_to_end(share)
            else:
                del self._shares[share]
            if not waiter.done():
                return waiter
        return None

    def close(self) -> None:
        """Refuse new executions and turn away the waiting ones (shutdown)."""
        self.closed = True
        while (waiter := self._next_waiter()) is not None:
            waiter.set_exception(ApiError(503, ErrorCode.SHUTTING_DOWN, "the server is shutting down",
                                          "retry on another instance"))

    def _release(self) -> None:
        waiter = self._next_waiter()
        if waiter is not None:
            waiter.set_result(None)  # the slot moves to the waiter; `active` is unchanged
            return
        self.active -= 1
