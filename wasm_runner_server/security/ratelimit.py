"""Per-key token buckets and per-workspace counters of running executions (in this process; the buckets
of a cluster are in its database: `ratelimit_pg`)."""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from dataclasses import dataclass
from typing import Protocol


@dataclass
class _Bucket:
    tokens: float
    at: float


class Limiter(Protocol):
    def take(self, key: str) -> float:
        """0 when allowed; otherwise the seconds until a request would be."""
        ...

    def close(self) -> None: ...


class RateLimiter:
    """`rate` requests per second sustained, `burst` at once, per key."""

    def __init__(self, rate: float, burst: float, clock=time.monotonic) -> None:
        self.rate = rate
        self.burst = burst
        self.clock = clock
        self._buckets: dict[str, _Bucket] = {}

    def take(self, key: str) -> float:
        """0 when allowed; otherwise the seconds until a request would be."""
        now = self.clock()
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = _Bucket(self.burst, now)
        bucket.tokens = min(self.burst, bucket.tokens + (now - bucket.at) * self.rate)
        bucket.at = now
        if bucket.tokens >= 1:
            bucket.tokens -= 1
            return 0.0
        return (1 - bucket.tokens) / self.rate

    def close(self) -> None:
        """Nothing to let go: the buckets are this process's memory."""


def retry_after(seconds: float) -> int:
    return max(1, math.ceil(seconds))


class Counter:
    """How many of something each workspace has in flight (event loop only)."""

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}
        self._waiters: dict[str, deque[asyncio.Future[None]]] = {}

    def get(self, key: str) -> int:
        return self._counts.get(key, 0)

    def acquire(self, key: str, cap: int) -> bool:
        if self._counts.get(key, 0) >= cap:
            return False
        self._counts[key] = self._counts.get(key, 0) + 1
        return True

    async def wait_acquire(self, key: str, cap: int) -> None:
        """Acquire, waiting for a release when `key` is at `cap`."""
        while not self.acquire(key, cap):
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.setdefault(key, deque()).append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled():
                    self._wake(key)  # woken as we gave up: the next waiter tries instead
                raise
            finally:
                queue = self._waiters.get(key)
                if queue is not None and waiter in queue:
                    queue.remove(waiter)
                if queue is not None and not queue:
                    del self._waiters[key]

    def release(self, key: str) -> None:
        left = self._counts.get(key, 0) - 1
        if left > 0:
            self._counts[key] = left
        else:
            self._counts.pop(key, None)
        self._wake(key)

    def _wake(self, key: str) -> None:
        queue = self._waiters.get(key)
        while queue:
            waiter = queue.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
