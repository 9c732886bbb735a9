"""Admission control for executions: a bounded number run, a bounded number wait, the rest get 429.

`ExecutionGate.slot()` is the only way an execution starts. Waiters are served in
arrival order; a slot freed by a finishing execution is handed straight to the
next waiter, so a newcomer can never overtake the queue.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from wasm_runner_protocol.errors import ErrorCode
from wasm_runner_server.errors import ApiError, overloaded


class ExecutionGate:
    def __init__(self, limit: int, queue_size: int, queue_timeout_s: float) -> None:
        self.limit = limit
        self.queue_size = queue_size
        self.queue_timeout_s = queue_timeout_s
        self.active = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._mean_s = 0.05
        """Moving average of execution time, for Retry-After."""
        self.closed = False

    @property
    def queued(self) -> int:
        return len(self._waiters)

    def retry_after(self) -> int:
        backlog = (len(self._waiters) + 1) / max(self.limit, 1)
        return max(1, min(60, math.ceil(backlog * self._mean_s)))

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[float]:
        """Hold an execution slot; yields the seconds spent waiting for it."""
        started = time.monotonic()
        await self._acquire()
        waited = time.monotonic() - started
        began = time.monotonic()
        try:
            yield waited
        finally:
            elapsed = time.monotonic() - began
            self._mean_s = 0.9 * self._mean_s + 0.1 * elapsed
            self._release()

    async def _acquire(self) -> None:
        if self.closed:
            raise ApiError(503, ErrorCode.SHUTTING_DOWN, "the server is shutting down", "retry on another instance")
        if self.active < self.limit and not self._waiters:
            self.active += 1
            return
        if len(self._waiters) >= self.queue_size:
            raise overloaded(self.retry_after(),
                             f"all {self.limit} execution slots are busy and {self.queue_size} executions are waiting")
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await asyncio.wait_for(asyncio.shield(waiter), self.queue_timeout_s)
        except (TimeoutError, asyncio.CancelledError) as exc:
            if waiter.done() and not waiter.cancelled():
                self._release()  # the slot arrived as we gave up: pass it on
            else:
                waiter.cancel()
                try:
                    self._waiters.remove(waiter)
                except ValueError:
                    pass
            if isinstance(exc, asyncio.TimeoutError):
                raise overloaded(self.retry_after(),
                                 f"no execution slot became free within {self.queue_timeout_s:g} s") from None
            raise

    def close(self) -> None:
        """Refuse new executions and turn away the waiting ones (shutdown)."""
        self.closed = True
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_exception(ApiError(503, ErrorCode.SHUTTING_DOWN, "the server is shutting down",
                                              "retry on another instance"))

    def _release(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)  # the slot moves to the waiter; `active` is unchanged
                return
        self.active -= 1
