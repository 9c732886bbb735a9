"""Waiters served fairly: by share (a workspace), then by caller within the share (a session), in turn.

The next waiter served is the oldest one of the caller served least recently, within the share served
least recently; a share or caller not served lately is served first. So a share with a long backlog
delays a newcomer by the calls already running only, and gets its turn again after each other waiting
share had one. "Served" counts every start, also one that found a free slot without waiting, so a share
that keeps the slots busy is behind one that has not run lately.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict, deque
from collections.abc import Hashable, Iterable
from typing import Any, Generic, TypeVar

T = TypeVar("T")

MEMORY = 10_000
"""Shares and callers whose last start is remembered beyond their waiting; older ones count as never served."""


class _Turns:
    """When each key was last served (a counter, not a clock), the least recent forgotten first."""

    def __init__(self) -> None:
        self._last: OrderedDict[Hashable, int] = OrderedDict()

    def of(self, key: Hashable) -> int:
        return self._last.get(key, 0)

    def served(self, key: Hashable, tick: int) -> None:
        self._last[key] = tick
        self._last.move_to_end(key)
        while len(self._last) > MEMORY:
            self._last.popitem(last=False)


class FairQueue(Generic[T]):
    """Items queued under (share, caller); `pop` gives the next one fairly, `remove` takes one back."""

    def __init__(self) -> None:
        self._waiting: dict[str, dict[str, deque[tuple[int, T]]]] = {}
        """Items by share, then by caller, each with its arrival number."""
        self._counts: dict[str, int] = {}
        self._turns = _Turns()
        self._ticks = itertools.count(1)

    def __len__(self) -> int:
        return sum(self._counts.values())

    def count(self, share: str) -> int:
        """Items waiting in `share`."""
        return self._counts.get(share, 0)

    def shares(self) -> int:
        """Shares with an item waiting."""
        return len(self._waiting)

    def push(self, share: str, caller: str, item: T) -> None:
        callers = self._waiting.setdefault(share, {})
        callers.setdefault(caller, deque()).append((next(self._ticks), item))
        self._counts[share] = self._counts.get(share, 0) + 1

    def served(self, share: str, caller: str) -> None:
        """Record a start of `caller` of `share` (one that did not wait too)."""
        tick = next(self._ticks)
        self._turns.served(share, tick)
        self._turns.served((share, caller), tick)

    def pop(self) -> tuple[str, str, T] | None:
        """The next item (its share and caller recorded as served), or None if none waits."""
        if not self._waiting:
            return None
        # Least recently served first; among those never served, the one waiting longest.
        share = min(self._waiting, key=lambda s: (self._turns.of(s), _oldest(self._waiting[s].values())))
        callers = self._waiting[share]
        caller = min(callers, key=lambda c: (self._turns.of((share, c)), callers[c][0][0]))
        _, item = callers[caller].popleft()
        self._drop_empty(share, caller)
        self.served(share, caller)
        return share, caller, item

    def remove(self, share: str, caller: str, item: T) -> bool:
        """Take `item` out of the queue (a waiter that gave up); False if it was not there."""
        queue = self._waiting.get(share, {}).get(caller)
        if queue is None:
            return False
        for index, (_, queued) in enumerate(queue):
            if queued is item:
                del queue[index]
                self._drop_empty(share, caller)
                return True
        return False

    def _drop_empty(self, share: str, caller: str) -> None:
        self._counts[share] -= 1
        callers = self._waiting[share]
        if not callers[caller]:
            del callers[caller]
        if not callers:
            del self._waiting[share]
            del self._counts[share]


def _oldest(queues: Iterable[deque[tuple[int, Any]]]) -> int:
    """The arrival number of the oldest item among `queues` (each non-empty)."""
    return min(queue[0][0] for queue in queues)
